"""One definition, one label, one key for each count and time ktrace prints (``ktrace.text.MEASURES``).

On every bundled capture, ``info``, ``report`` (text, ``--json``, ``--html``), ``diff`` (a capture
against itself and against another), ``merge`` and the Parquet export print the launches, the
events, the kernel time, the waits and the wait time with the same value under the same label,
and the kernel time is what its definition says: each launch from its first event to its last over
every rank, summed over the launches (recomputed here from the aligned events).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pytest

import ktrace
from ktrace.analysis import prepare
from ktrace.cli import main
from ktrace.text import MEASURES, count_text, fmt_ns, kernel_time_value

DATA = Path(ktrace.__file__).parent / "data"
CAPTURES = sorted(DATA.glob("*.ktrace"))
KEYS = ("launches", "events", "kernel_time_ns", "waits", "wait_ns")


def _run(capsys, *argv) -> str:
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    return capsys.readouterr().out


def _report(capsys, cap: Path, tmp: Path):
    j, h = tmp / f"{cap.stem}.json", tmp / f"{cap.stem}.html"
    text = _run(capsys, "report", cap, "-q", "-v", "--json", j, "--html", h, "--max-findings", "0")
    return text, json.loads(j.read_text()), html.unescape(h.read_text())


def test_the_labels_are_one_per_key():
    assert set(KEYS) == set(MEASURES)
    labels = [label for label, _ in MEASURES.values()]
    assert len(set(labels)) == len(labels)
    assert count_text("launches", 1) == "1 launch" and count_text("launches", 2) == "2 launches"
    assert count_text("events", 4836) == "4,836 events" and count_text("waits", 1) == "1 wait"


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.stem for c in CAPTURES])
def test_info_report_html_merge_and_export_agree(cap, capsys, tmp_path):
    info = _run(capsys, "info", cap)
    text, doc, page = _report(capsys, cap, tmp_path)
    s = doc["summary"]
    assert "kernel_ns" not in s, "one JSON key per quantity: kernel_time_ns only"
    assert all(k in s for k in KEYS)

    # the kernel time is what its definition says, recomputed from the aligned events
    t = prepare(str(cap))
    launch, start, end = t.column("launch"), t.column("start_ns"), t.column("end_ns")
    ids = np.unique(launch)
    lo = np.array([start[launch == i].min() for i in ids])
    hi = np.array([end[launch == i].max() for i in ids])
    assert s["kernel_time_ns"] == pytest.approx(float((hi - lo).sum()))
    assert s["launches"] == ids.size and s["events"] == t.n_events

    # info: the same launches and events, under the same labels (the per-launch events add up)
    head = info.splitlines()[0]
    assert f", {count_text('launches', s['launches'])} ({MEASURES['launches'][1]})" in head
    assert head.endswith(f", {count_text('events', s['events'])}")
    per_launch = [int(m.replace(",", "")) for m in re.findall(r"^    launch \d+ .*?: ([\d,]+) events? ", info, re.M)]
    assert sum(per_launch) == s["events"]

    # report text and HTML: the same figures, the same labels
    kt = f"{MEASURES['kernel_time_ns'][0]} {kernel_time_value(s['kernel_time_ns'], s['launches'])}"
    assert f"{count_text('launches', s['launches'])} of " in text and f"{count_text('events', s['events'])}, " in text
    assert kt in text
    assert f"{count_text('waits', s['waits'])}, {MEASURES['wait_ns'][0]} {fmt_ns(s['wait_ns'])} in total" in text

    def row(label):
        m = re.search(rf"<th class='l'>{re.escape(label)}</th><td class='l'>([^<]*)</td>", page)
        assert m, f"the HTML has no row '{label}'"
        return m.group(1)

    assert row(MEASURES["launches"][0]) == f"{s['launches']:,}"
    assert row(MEASURES["events"][0]) == f"{s['events']:,}"
    assert row(MEASURES["kernel_time_ns"][0]) == kernel_time_value(s["kernel_time_ns"], s["launches"])
    assert row(MEASURES["waits"][0]) == f"{s['waits']:,}"
    assert row(MEASURES["wait_ns"][0]).startswith(fmt_ns(s["wait_ns"]) + " ")

    # merge: the same launches
    merged = _run(capsys, "merge", cap, "-o", tmp_path / "m.json")
    assert f", {count_text('launches', s['launches'])}, " in merged

    # the Parquet export: the report's figures under the report's keys
    pytest.importorskip("pyarrow")
    _run(capsys, "export", cap, "--format", "parquet", tmp_path / "tables")
    manifest = json.loads((tmp_path / "tables" / "manifest.json").read_text())
    assert manifest["summary"] == {k: s[k] for k in KEYS}
    assert manifest["rows"]["events"] == s["events"]


@pytest.mark.parametrize("b", [0, 1], ids=["itself", "another"])
def test_diff_prints_the_reports_figures(b, capsys, tmp_path):
    a_cap, b_cap = CAPTURES[0], CAPTURES[b]
    sa = _report(capsys, a_cap, tmp_path)[1]["summary"]
    sb = _report(capsys, b_cap, tmp_path)[1]["summary"]
    j, h = tmp_path / "diff.json", tmp_path / "diff.html"
    text = _run(capsys, "diff", a_cap, b_cap, "-q", "-v", "--json", j, "--html", h)
    d = json.loads(j.read_text())["summary"]
    for k in KEYS:
        assert d[k] == [sa[k], sb[k]], k
    first = text.splitlines()[2]
    label = MEASURES["kernel_time_ns"][0]
    want = (f"{label} (launch durations summed): {fmt_ns(sa['kernel_time_ns'])} over {count_text('launches', sa['launches'])} "
            f"-> {fmt_ns(sb['kernel_time_ns'])} over {count_text('launches', sb['launches'])}")
    assert first.lower().startswith(want.lower())
    assert (f"{MEASURES['wait_ns'][0]}: {fmt_ns(sa['wait_ns'])} ({count_text('waits', sa['waits'])}) -> "
            f"{fmt_ns(sb['wait_ns'])} ({count_text('waits', sb['waits'])})").lower() in first.lower()
    assert html.escape(first) in h.read_text(), "the HTML diff says what the text says"
    if b == 0:
        assert sa == sb and "(+0.0% per launch)" in first
    # the per-rank wait time adds up to the report's wait time (the same waits)
    ranks = json.loads(j.read_text())["tables"]["ranks"]["rows"]
    per = sum(r["a_ns"] for r in ranks if r["measure"] == MEASURES["wait_ns"][0])
    assert per * sa["launches"] == pytest.approx(sa["wait_ns"], rel=1e-9)
