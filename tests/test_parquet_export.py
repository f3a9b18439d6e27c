"""``ktrace export CAPTURE --format parquet DIR``: every column read back equals what it was made
from (the one decode, the report's tables and JSON), events written in row groups of one size, and the
folder-of-exports example (DuckDB) ranking 100 captures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ktrace
from ktrace.analysis import build_report, report_json, wait_causes
from ktrace.captures import read_capture
from ktrace.cli import main
from ktrace.events import aligned_events
from ktrace.schema import EventKind

pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(ktrace.__file__).parent / "data"
CAPTURE = DATA / "a2a_skewed_4xh200.ktrace"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("parquet") / "skewed"
    assert main(["export", str(CAPTURE), "--format", "parquet", str(out)]) == 0
    return out


def _col(tab, name):
    return tab.column(name).to_numpy(zero_copy_only=False)


def test_events_round_trip_every_column(exported):
    tab = pq.read_table(exported / "events.parquet")
    cap = read_capture(CAPTURE)
    ev = aligned_events(cap)
    assert tab.num_rows == ev.size
    for c in ev.dtype.names:  # every column of the one decode, as is
        assert np.array_equal(_col(tab, {"region": "region_id", "kind": "kind_id"}.get(c, c)), ev[c]), c
    # names resolved: kernel per launch, region and kind names, capture, duration
    kernels = {(r, ln.index): ln.kernel for r, rc in cap.ranks.items() for ln in rc.launches}
    assert _col(tab, "kernel").tolist() == [kernels[(int(r), int(l))] for r, l in zip(ev["rank"], ev["launch"])]
    assert _col(tab, "region").tolist() == [cap.region_name(int(x)) for x in ev["region"]]
    assert _col(tab, "kind").tolist() == [EventKind(int(k)).name.lower() for k in ev["kind"]]
    assert set(_col(tab, "capture").tolist()) == {CAPTURE.name}
    assert np.array_equal(_col(tab, "dur_ns"), ev["end_ns"] - ev["start_ns"])
    assert tab.schema.names == [f.name for f in pq.read_schema(exported / "events.parquet")]


def test_report_tables_round_trip_every_column(exported):
    rep = build_report(str(CAPTURE))
    wc = wait_causes(rep.trace)
    for name in ("waits", "workgroups", "causes"):
        tab = pq.read_table(exported / f"{name}.parquet")
        t = rep.tables[name]
        assert tab.num_rows == t.size, name
        for c in t.dtype.names:
            got, want = _col(tab, c), np.asarray(t[c])
            if want.dtype.kind == "O":
                want = [None if x is None else (list(map(int, x)) if isinstance(x, (list, tuple, np.ndarray)) else str(x)) for x in want]
                got = [None if x is None else (list(map(int, x)) if isinstance(x, np.ndarray) else x) for x in got]
                assert got == want, (name, c)
            else:
                assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), (name, c)
    # each wait's causes, joined by event row
    waits = pq.read_table(exported / "waits.parquet")
    pos = np.searchsorted(wc["row"], _col(waits, "row"))
    for c in ("late_not_started_ns", "late_waiting_ns", "late_in_region_ns", "late_outside_ns", "late_missing_ns", "link_ns",
              "unexplained_ns", "root"):
        want = wc[c][pos]
        got = _col(waits, c)
        assert (got.tolist() == want.tolist()) if want.dtype.kind == "O" else np.array_equal(got, want, equal_nan=True), c
    # findings: the report's JSON, in its order
    doc = report_json(rep)
    f = pq.read_table(exported / "findings.parquet").to_pylist()
    assert [x["finding"] for x in f] == list(range(1, len(doc["findings"]) + 1))
    for got, want in zip(f, doc["findings"]):
        assert (got["kind"], got["severity"], got["text"], got["ranks"], got["start_ns"], got["end_ns"]) == \
               (want["kind"], want["severity"], want["text"], want["ranks"], want["start_ns"], want["end_ns"])
        # a root cause's saving is its replay's; information (exposed communication, ...) has none
        assert got["saving_ns"] == (want["data"].get("saving_ns") if "saving_ns" in want["data"] else None)
        assert got["saving_ns"] is not None or want["severity"] == "info"
        assert json.loads(got["data_json"]) == json.loads(json.dumps(want["data"]))
    m = json.loads((exported / "manifest.json").read_text())
    assert m["rows"] == {t: pq.read_metadata(exported / f"{t}.parquet").num_rows for t in m["files"]}


def test_events_in_row_groups_of_one_size(tmp_path, monkeypatch):
    """Events are written in row groups of ``EVENT_ROW_GROUP`` rows whatever the launches' sizes and
    order (each rank's dispatch and combine launches alternate), decoded a few launches at a time
    (no table of all events is ever built); the rows are the aligned events, in their order."""
    import ktrace.events as events
    import ktrace.export.parquet as parquet

    monkeypatch.setattr(events, "BATCH_BYTES", 64 << 10)
    monkeypatch.setattr(parquet, "EVENT_ROW_GROUP", 1000)
    cap = read_capture(CAPTURE)
    assert sum(1 for _ in events.iter_chunks(cap)) > 4
    n = parquet.write_events(cap, tmp_path / "e.parquet", name="x")
    md = pq.read_metadata(tmp_path / "e.parquet")
    sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    ev = aligned_events(cap)
    assert md.num_rows == n == ev.size and len(sizes) > 4 and set(sizes[:-1]) == {1000} and 0 < sizes[-1] <= 1000
    tab = pq.read_table(tmp_path / "e.parquet")
    for col, field in (("rank", "rank"), ("launch", "launch"), ("program", "program"), ("slot", "slot"), ("kind_id", "kind"),
                       ("start_ns", "start_ns"), ("end_ns", "end_ns"), ("arg2", "arg2")):
        assert np.array_equal(tab.column(col).to_numpy(), ev[field]), col


def test_docs_queries_run_in_duckdb(exported):
    """The DuckDB queries of docs/parquet.md ("Beyond one machine") on an export: the first finding
    is the report's; the waits per rank add up to the report's waits and wait time."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    folder = exported.parent
    top = con.execute(f"""select capture, kind, saving_ns / 1e6 as saving_ms, text from read_parquet('{folder}/*/findings.parquet')
                          where finding = 1 order by saving_ns desc limit 20""").fetchall()
    rep = build_report(str(CAPTURE))
    assert [(c, k, t) for c, k, _, t in top] == [(CAPTURE.name, rep.findings[0].kind, rep.findings[0].text)]
    per_rank = con.execute(f"""select capture, rank, count(*) as waits, sum(wait_ns) / 1e6 as wait_ms,
           sum(late_not_started_ns + late_waiting_ns + late_in_region_ns + late_outside_ns) / 1e6 as producer_late_ms,
           sum(unexplained_ns) / 1e6 as unexplained_ms
           from read_parquet('{folder}/*/waits.parquet') group by capture, rank order by wait_ms desc""").fetchall()
    assert sum(r[2] for r in per_rank) == rep.summary["waits"]
    assert sum(r[3] for r in per_rank) == pytest.approx(rep.summary["wait_ns"] / 1e6)
    spans = con.execute(f"""select capture, rank, launch, program, dur_ns from read_parquet('{folder}/*/events.parquet')
                            where kind = 'span' and region = 'send' order by dur_ns desc limit 10""").fetchall()
    assert len(spans) == 10 and [r[4] for r in spans] == sorted((r[4] for r in spans), reverse=True)


def test_export_refusals(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["export", str(CAPTURE), str(f)]) == 2
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["export", str(CAPTURE), str(other)]) == 2
    bad = tmp_path / "bad.ktrace"
    bad.write_bytes(b"not a capture")
    assert main(["export", str(bad), str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(ln.startswith("ktrace export: ") for ln in lines)


def test_example_ranks_100_captures_with_duckdb(tmp_path):
    pytest.importorskip("duckdb")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "06_rank_captures_with_duckdb.py")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    # only captures whose first finding is a root cause are ranked (the bundled four); the
    # constructed ones, no fault in them, have nothing to fix and are counted apart
    # the ranking: the skipped notify's hang first, then the slow producers (200 µs before 20 µs)
    end = next(i for i, ln in enumerate(lines) if ln.endswith("captures with no root cause (their first finding is information)"))
    names = [ln.split()[2] for ln in lines[1:end]]
    assert lines[0] == f"100 captures, {len(names)} with a root cause to fix; their first findings, biggest saving first:"
    assert names[0] == "a2a_skip_4xh200.ktrace" and "a2a_skewed_4xh200.ktrace" in names
    assert names.index("a2a_delay200us_4xh200.ktrace") < names.index("a2a_delay20us_4xh200.ktrace")
    assert lines[end] == f"{100 - len(names)} captures with no root cause (their first finding is information)"
    savings = [float(ln.split()[0]) for ln in lines[1:end]]
    assert savings == sorted(savings, reverse=True)
    assert len(list((tmp_path / "ktrace-example-06" / "exports").glob("*/findings.parquet"))) == 100
