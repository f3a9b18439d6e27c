"""ktrace's traces read by the real consumer: Perfetto's own trace processor (its wasm build,
hosted by Node) imports every trace the test suite writes here — the bundled real captures and
CONSTRUCTED ones, both formats, written by one process and by two workers — and must show:

- no import error, no stat of severity error or data_loss;
- every event as a slice (counters as counter values), plus one slice per launch on the rank's
  ``kernels`` track and one ``acquired`` mark per arrow that ends after a wait with a duration;
- one flow per notify -> wait pair (the pairs counted by ``ktrace.pairing`` on the aligned
  events, not by the writers), none of them backwards, and every wait that blocked ends in its
  arrow;
- each workgroup a thread of its rank's process, named ``r<rank> p<program>``, the threads of a
  rank in program order by tid, and every slice carrying rank, program, launch and SM.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ktrace
from ktrace.captures import read_capture, write_capture
from ktrace.captures.synth import constructed_capture
from ktrace.cli import main
from ktrace.events import aligned_events
from ktrace.pairing import pair_table
from ktrace.schema import EventKind, is_timeout
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


def _constructed(tmp: Path) -> Path:
    cap, _ = constructed_capture(world_size=3, programs=40, iters=5, seed=4)  # spans that cross, marks, counters, pairs
    return write_capture(tmp / "constructed.ktrace", cap)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """name -> capture file: the bundled real captures and a CONSTRUCTED one."""
    d = tmp_path_factory.mktemp("perfetto_sources")
    out = {name: DATA / f"{name}.ktrace" for name in CAPTURES}
    out["constructed"] = _constructed(d)
    return out


@pytest.fixture(scope="module")
def traces(tmp_path_factory, sources):
    """(capture, suffix) -> the trace ``ktrace merge`` wrote for it."""
    d = tmp_path_factory.mktemp("perfetto_traces")
    out = {}
    for name, src in sources.items():
        for suffix in (".pftrace", ".json"):
            path = d / f"{name}{suffix}"
            assert main(["merge", str(src), "-o", str(path)]) == 0
            out[name, suffix] = path
    return out


def _expected(src: Path) -> dict:
    """What the trace must show, counted from the capture itself (not from the writers)."""
    cap = read_capture(src)
    ev = aligned_events(cap)
    n_rows, w_rows, _, _ = pair_table(ev)
    w_end, w_start, n_start = ev["end_ns"][w_rows], ev["start_ns"][w_rows], ev["start_ns"][n_rows]
    marks = int(((w_end > w_start) | (w_end < n_start)).sum())
    launches = len({(int(r), int(l)) for r, l in zip(ev["rank"], ev["launch"])})
    blocked_paired = int((w_end > w_start).sum())
    return {"slices": int((ev["kind"] != EventKind.COUNTER).sum()) + launches + marks, "counters": int((ev["kind"] == EventKind.COUNTER).sum()),
            "flows": int(n_rows.size), "marks": marks, "blocked_paired": blocked_paired, "ranks": sorted(cap.ranks),
            "timeouts": int(((ev["kind"] == EventKind.WAIT) & is_timeout(ev["flags"])).sum())}


def test_bundled_captures_exist():
    assert len(CAPTURES) >= 4  # the parametrised tests below cover every one of them


@needs_tp
@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
@pytest.mark.parametrize("capture", CAPTURES + ["constructed"])
def test_the_trace_processor_shows_every_event_and_every_arrow(host, traces, sources, capture, suffix):
    want = _expected(sources[capture])
    t = host.load(traces[capture, suffix])
    try:
        q = t.scalar
        assert t.problems() == []  # no import error, no stat of severity error or data_loss
        assert q("select count(*) from slice") == want["slices"]
        assert q("select count(*) from counter") == want["counters"]
        assert q("select count(*) from flow") == want["flows"]
        assert q("select count(*) from slice where name = 'acquired'") == want["marks"]
        assert q("select count(*) from flow f join slice a on a.id = f.slice_out join slice b on b.id = f.slice_in "
                 "where b.ts < a.ts") == 0  # never backwards
        # every wait that blocked and was released ends in its arrow: an `acquired` mark on its
        # track, at its end, with a flow into it
        assert q("""select count(*) from slice w where w.category = 'wait' and w.name glob 'waiting for rank *' and w.dur > 0
                    and exists (select 1 from slice a join flow f on f.slice_in = a.id
                                where a.track_id = w.track_id and a.name = 'acquired' and a.ts >= w.ts + w.dur
                                and a.ts - (w.ts + w.dur) = (select int_value from args where arg_set_id = a.arg_set_id
                                                             and key in ('args.shift_ns', 'debug.shift_ns')))""") == want["blocked_paired"]
        assert q("select count(*) from slice where category = 'wait,timeout'") == want["timeouts"]
        # ranks are processes; workgroups their threads, named with the rank, in program order by tid
        procs = t.query("select upid, name from process where name glob 'rank *' order by pid")
        assert [p["name"].split(" ·")[0] for p in procs] == [f"rank {r}" for r in want["ranks"]]
        for p in procs:
            r = int(p["name"].split(" ·")[0].split()[1])
            names = [x["name"] for x in t.query(f"select name from thread where upid = {p['upid']} order by tid")]
            assert names[0] == "kernels" and all(n.startswith(f"r{r} p") for n in names[1:])
            progs = [int(n.split()[1][1:]) for n in names[1:]]
            assert progs == sorted(progs)
        assert q("select count(*) from slice s left join thread_track t on s.track_id = t.id where t.id is null") == 0
        # every slice says where it ran (arguments are `args.*` from JSON, `debug.*` from protobuf)
        for key in ("rank", "launch"):
            assert q(f"select count(*) from slice s where not exists (select 1 from args a where a.arg_set_id = s.arg_set_id "
                     f"and a.key in ('args.{key}', 'debug.{key}'))") == 0
        for key in ("program", "sm"):
            assert q(f"select count(*) from slice s where s.category != 'kernel' and not exists (select 1 from args a "
                     f"where a.arg_set_id = s.arg_set_id and a.key in ('args.{key}', 'debug.{key}'))") == 0
    finally:
        t.close()


@needs_tp
def test_two_workers_write_what_one_writes(host, sources, tmp_path):
    """A trace written by two worker processes reads the same in the trace processor as one
    written by one (several sequences, tracks described by each worker that uses them)."""
    from ktrace.export import write_chrome_json, write_perfetto

    cap = read_capture(sources["a2a_skewed_4xh200"])
    for write, suffix in ((write_perfetto, ".pftrace"), (write_chrome_json, ".json")):
        got = []
        for w in (1, 2):
            t = host.load(write(cap, tmp_path / f"w{w}{suffix}", workers=w))
            assert t.problems() == []
            got.append(t.query("select s.ts, s.dur, s.name, t.name track, (select count(*) from flow where slice_in = s.id) fin "
                               "from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid) order by 1, 2, 3, 4"))
            t.close()
        assert got[0] == got[1] and len(got[0]) > 1000


@needs_tp
def test_queries_on_slices_flows_threads_tracks_args(host, traces):
    t = host.load(traces["a2a_skewed_4xh200", ".json"])
    waits = t.query("select count(*) n, sum(dur) dur from slice where category glob 'wait*'")[0]
    assert waits["n"] > 0 and waits["dur"] > 0
    assert t.scalar("select count(*) from thread where name glob 'r[0-9]* p[0-9]*'") > 100  # program tracks
    assert t.scalar("select count(*) from track") > 100
    flow = t.query("select s_out.name a, s_in.name b from flow f join slice s_out on f.slice_out = s_out.id "
                   "join slice s_in on f.slice_in = s_in.id limit 1")[0]
    assert flow["a"].startswith("releasing rank") and (flow["b"].startswith("waiting for rank") or flow["b"] == "acquired")
    keys = {r["key"] for r in t.query("select distinct key from args join slice using (arg_set_id)")}
    assert {"args.peer", "args.sm", "args.cmp", "args.rank", "args.program", "args.launch"} <= keys
    assert {r["v"] for r in t.query("select distinct string_value v from args where key = 'args.cmp'")} == {"ge"}
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
