"""ktrace's traces imported by Perfetto's own trace processor (its wasm build, hosted by Node).

The traces are the ones ``ktrace merge`` writes for the bundled captures, in both formats. What
the trace processor must say today: no import error, no error / data-loss stat, every slice
and the expected processes / threads / tracks / arguments, arrows present. How far the arrows and
the track order are from right is printed by ``scripts/perfetto_check.py``, not asserted here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ktrace
from ktrace.cli import main
from ktrace.testing.perfetto import trace_processor as tpmod
from ktrace.testing.perfetto import TraceProcessorHost, unavailable_reason

DATA = Path(ktrace.__file__).parent / "data"
CAPTURES = sorted(p.name.removesuffix(".ktrace") for p in DATA.glob("*.ktrace"))
REASON = unavailable_reason()
needs_tp = pytest.mark.skipif(REASON is not None, reason=f"Perfetto's trace processor cannot run here: {REASON}")


@pytest.fixture(scope="module")
def host():
    with TraceProcessorHost() as h:
        yield h


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """(capture, suffix) -> a trace ``ktrace merge`` wrote for a bundled capture."""
    d = tmp_path_factory.mktemp("perfetto_traces")
    out = {}
    for name in CAPTURES:
        for suffix in (".pftrace", ".json"):
            path = d / f"{name}{suffix}"
            assert main(["merge", str(DATA / f"{name}.ktrace"), "-o", str(path)]) == 0
            out[name, suffix] = path
    return out


def test_bundled_captures_exist():
    assert len(CAPTURES) >= 4  # the parametrised tests below cover every one of them


@needs_tp
@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
@pytest.mark.parametrize("capture", CAPTURES)
def test_bundled_trace_imports_cleanly(host, traces, capture, suffix):
    t = host.load(traces[capture, suffix])
    try:
        assert t.problems() == []  # no import error, no stat of severity error or data_loss
        assert t.query("select distinct severity from stats")  # the stats table answers
        assert t.scalar("select count(*) from slice") > 1000
        assert t.scalar("select count(*) from flow") > 0
        procs = [r["name"] for r in t.query("select name from process where name is not null order by pid")]
        assert [p.split(" ·")[0] for p in procs] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    finally:
        t.close()


@needs_tp
def test_queries_on_slices_flows_threads_tracks_args(host, traces):
    t = host.load(traces["a2a_skewed_4xh200", ".json"])
    waits = t.query("select count(*) n, sum(dur) dur from slice where category glob 'wait*'")[0]
    assert waits["n"] > 0 and waits["dur"] > 0
    assert t.scalar("select count(*) from thread where name glob 'p[0-9]*'") > 100  # program tracks
    assert t.scalar("select count(*) from track") > 100
    flow = t.query("select s_out.name a, s_in.name b from flow f join slice s_out on f.slice_out = s_out.id "
                   "join slice s_in on f.slice_in = s_in.id limit 1")[0]
    assert flow["a"].startswith("notify") and flow["b"].startswith("wait")
    keys = {r["key"] for r in t.query("select distinct key from args join slice using (arg_set_id)")}
    assert {"args.peer", "args.sm"} <= keys
    t.close()


@needs_tp
def test_official_client_loads_through_the_host(host, traces):
    from perfetto.trace_processor import TraceProcessor

    with TraceProcessor(trace=str(traces["a2a_skip_4xh200", ".pftrace"]), addr=host.addr) as tp:
        n = next(iter(tp.query("select count(*) n from slice"))).n
    assert n > 1000


@needs_tp
def test_bad_traces_report_their_import_errors(host, traces, tmp_path):
    bad = host.load(b"this is not a trace")
    assert any("Unknown trace type" in e for e in bad.import_errors)
    assert bad.problems()[0].startswith("import: ")
    torn = tmp_path / "torn.json"
    torn.write_bytes(traces["a2a_skewed_4xh200", ".json"].read_bytes()[:5000])
    t = host.load(torn)
    assert any("incomplete" in e for e in t.import_errors), t.import_errors
    # the host keeps working after bad input, and a query on a replaced trace is refused
    good = host.load(traces["a2a_skewed_4xh200", ".pftrace"])
    assert good.problems() == []
    with pytest.raises(RuntimeError, match="loaded another trace"):
        t.query("select 1")


def test_missing_pieces_give_a_reason(monkeypatch, tmp_path):
    monkeypatch.setenv(tpmod.NODE_ENV, str(tmp_path / "no-node"))
    assert "no-node" in unavailable_reason()
    monkeypatch.delenv(tpmod.NODE_ENV)
    monkeypatch.setenv(tpmod.WASM_ENV, str(tmp_path / "none.wasm"))
    reason = unavailable_reason()
    if REASON is None or "Node" not in REASON:
        assert "none.wasm" in reason
    with pytest.raises(tpmod.PerfettoUnavailable):
        TraceProcessorHost()
