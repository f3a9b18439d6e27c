"""``ktrace.gluon`` on the CPU: probes compiled for sm_90 (present when traced, absent when not,
written by one thread per lane), lane buffers decoded, mbarrier hand-offs paired (rule 3), the
real H100 captures of the Gluon GEMM and the probe kernel (tests/fixtures/gluon, remade by
``instrumented_kernels/gluon_gemm/gpu_run.sh``) written as traces the trace processor reads
with one arrow per paired wait, and the report's lane finding checked against the raw events.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import ktrace
from ktrace import schema
from ktrace.captures import read_capture
from ktrace.decode import DecodeError, decode_buffer, decode_columns
from ktrace.events import aligned_events
from ktrace.pairing import pair, pair_table
from ktrace.schema import EventFlag, EventKind
from ktrace.testing.compile import CUDA_SM90, compile_asm
from tests import gluon_probe_kernels as gpk
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import ktrace.gluon as kg


@gluon.jit
def _bad_lane(ktrace_buf=None, KTRACE: gl.constexpr = 0, KTRACE_LANES: gl.constexpr = 1):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 2)
    kt = kg.mark(kt, "x")


@gluon.jit
def _no_lanes(ktrace_buf=None, KTRACE: gl.constexpr = 0):
    pass


@gluon.jit
def _end_args(ktrace_buf=None, KTRACE: gl.constexpr = 0, KTRACE_LANES: gl.constexpr = 1):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 0)
    s = kg.begin(kt, "x", 5, 6)
    kt = kg.end(kt, s, arg1=123456)

FIX = Path(__file__).parent / "fixtures" / "gluon"
GPU = json.loads((FIX / "gpu_results.json").read_text())
HANDOFF_SIG = {"out": "*i32", "n_iters": "i32", "ktrace_buf": "*i64"}


def _handoff_asm(ktrace_slots: int) -> str:
    return compile_asm(gpk.handoff_kernel, HANDOFF_SIG, {"KTRACE": ktrace_slots, "KTRACE_LANES": 2}, CUDA_SM90, num_warps=4)


def _gemm_asm(slots: int, stage_probes: bool = True, traced_lanes: int = 7) -> str:
    import torch
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import native_specialize_impl

    from instrumented_kernels.gluon_gemm.kernel import gluon_gemm_kernel

    a = torch.empty(256, 256, dtype=torch.float16)
    lay = gl.NVMMASharedLayout.get_default_for
    descs = [TensorDescriptor.from_tensor(a, s, lay(s, gl.float16)) for s in ([128, 64], [64, 128], [128, 128])]
    sig = {n: native_specialize_impl(CUDABackend, d, False, True, True)[0] for n, d in zip(("a_desc", "b_desc", "c_desc"), descs)}
    sig.update(M="i32", N="i32", K="i32", ktrace_buf="*i64")
    consts = {"STAGES": 4, "LOADER_DELAY_NS": 0, "STAGE_PROBES": stage_probes, "KTRACE": slots, "KTRACE_LANES": 3,
              "TRACED_LANES": traced_lanes}
    return compile_asm(gluon_gemm_kernel, sig, consts, CUDA_SM90, num_warps=4)


# ------------------------------------------------------------------------------------------
# compiled probes
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["handoff", "gemm"])
def test_probes_compile_away_when_off(which):
    off, on = (_handoff_asm(0), _handoff_asm(16)) if which == "handoff" else (_gemm_asm(0), _gemm_asm(64))
    for what in ("%globaltimer", "%smid"):
        assert what not in off and what in on
    assert "st.global.v2.b64" not in off and on.count("st.global.v2.b64") > 0
    # the untraced kernel still does its hand-offs
    assert off.count("mbarrier.try_wait") == on.count("mbarrier.try_wait") > 0


def test_gemm_tile_density_records_less_than_stage_density():
    tile, stage = _gemm_asm(64, stage_probes=False), _gemm_asm(64, stage_probes=True)
    assert 0 < tile.count("%globaltimer") < stage.count("%globaltimer")


def test_gemm_traced_lanes_split_the_probes_by_partition():
    """A launch traced in one partition only (to time each partition's probes) compiles that
    partition's probes and no other's: the three single-lane kernels' timer reads and record
    stores add up to those of the kernel traced in every lane."""
    def counts(asm):
        return asm.count("%globaltimer"), asm.count("st.global.v2.b64")

    full = counts(_gemm_asm(64, stage_probes=False))
    parts = [counts(_gemm_asm(64, stage_probes=False, traced_lanes=1 << lane)) for lane in range(3)]
    assert all(p[0] > 0 and p[1] > 0 for p in parts)
    assert tuple(map(sum, zip(*parts))) == full
    # the default density: the loader's and the epilogue's span per tile (two timer reads, one
    # 32-byte record); the MMA partition's span and its side of the tile hand-off (wait, release)
    assert parts[1] == parts[2] == (2, 2)
    assert parts[0] == (5, 2 + 4 + 4)


def test_records_are_stored_by_one_thread_of_each_lane_after_the_wait():
    asm = _handoff_asm(16)
    stores = [ln for ln in asm.splitlines() if "st.global" in ln]
    # every record store is predicated (on the lane's thread 0 and the slot being free)
    assert stores and all(re.match(r"\s*@%p\d+ st\.global", ln) for ln in stores)
    # the writing thread is picked in each partition's own numbering: thread index modulo the
    # partition's size (128 threads in the 4-warp default partition, 32 in the 1-warp worker)
    assert re.search(r"and\.b32\s+%r\d+, %r\d+, 127;", asm) and re.search(r"and\.b32\s+%r\d+, %r\d+, 31;", asm)
    # a traced wait: a timer read, the hardware wait, a timer read, then the record
    lines = asm.splitlines()
    w = next(i for i, ln in enumerate(lines) if "mbarrier.try_wait" in ln)
    before = [i for i, ln in enumerate(lines[:w]) if "%globaltimer" in ln]
    after = [i for i, ln in enumerate(lines[w:]) if "%globaltimer" in ln]
    assert before and after


def test_a_lane_number_must_be_below_the_lanes():
    import triton

    with pytest.raises(triton.CompilationError) as ei:
        compile_asm(_bad_lane, {"ktrace_buf": "*i64"}, {"KTRACE": 4, "KTRACE_LANES": 2}, CUDA_SM90, num_warps=4)
    said, e = [], ei.value
    while e is not None:
        said.append(str(e))
        e = e.__cause__
    assert any("a lane number must be a compile-time int in 0..1" in c for c in said), said


def _causes(e) -> list[str]:
    said = []
    while e is not None:
        said.append(str(e))
        e = e.__cause__
    return said


def test_the_gluon_face_is_the_core_s_probes_with_their_signatures():
    """``kg.begin`` .. ``kg.record_notify`` are ``ktrace.language``'s own functions (one place
    makes a record); ``kg.end`` takes ``arg0``/``arg1`` as ``kl.end`` does: the replaced argument
    is the record's, the one given to ``begin`` is not."""
    import triton

    import ktrace.language as kl

    assert {"begin", "end", "mark", "counter", "record_wait", "record_notify", "Tracer"} <= set(kl.SHARED)
    assert all(getattr(kg, n) is getattr(kl, n) for n in kl.SHARED)
    on = compile_asm(_end_args, {"ktrace_buf": "*i64"}, {"KTRACE": 4, "KTRACE_LANES": 1}, CUDA_SM90, num_warps=4)
    off = compile_asm(_end_args, {"ktrace_buf": "*i64"}, {"KTRACE": 0, "KTRACE_LANES": 1}, CUDA_SM90, num_warps=4)
    assert str((123456 << 32) | 5) in on and str((6 << 32) | 5) not in on  # (arg0 5 kept, arg1 replaced)
    assert "st.global.v2.b64" in on and "%globaltimer" not in off
    # ring mode (the flight recorder) keeps no lanes: refused in one line, not written out of bounds
    with pytest.raises(triton.CompilationError) as ei:
        compile_asm(_end_args, {"ktrace_buf": "*i64"}, {"KTRACE": schema.ring_gate(8), "KTRACE_LANES": 1}, CUDA_SM90, num_warps=4)
    assert any("records @triton.jit kernels only" in c for c in _causes(ei.value)), _causes(ei.value)


def test_decorator_names_lanes_after_partitions_and_needs_the_lanes_parameter():
    assert gpk.traced_handoff.lanes == ("_consumer", "_producer")
    with pytest.raises(TypeError, match="KTRACE_LANES"):
        ktrace.trace(_no_lanes, lanes=("a", "b"))
    with pytest.raises(TypeError, match="lane"):
        ktrace.trace(gpk.handoff_kernel, lanes=("a", 3))


# ------------------------------------------------------------------------------------------
# lane buffers
# ------------------------------------------------------------------------------------------


def _lane_buffer(programs: int, lanes: int, cap: int, header_lanes: int | None = None) -> np.ndarray:
    """A dense buffer of ``programs`` x ``lanes`` virtual programs; virtual program v holds v+1
    marks (up to ``cap``) whose arg0 is v."""
    P = programs * lanes
    h = schema.Header(timer=schema.TimerKind.NV_GLOBALTIMER, tick_hz=10**9, capacity=cap, n_programs=P,
                      grid=schema.virtual_grid((programs, 1, 1), lanes), lanes=lanes)
    buf = np.zeros(schema.buffer_bytes(P, cap), np.uint8)
    buf[: schema.HEADER_BYTES] = np.frombuffer(h.to_bytes(), np.uint8)
    if header_lanes is not None:  # (what a buffer made before lanes holds there)
        buf[schema.HEADER_DTYPE.fields["lanes"][1] : schema.HEADER_DTYPE.fields["lanes"][1] + 2] = header_lanes
    rec = buf[schema.HEADER_BYTES : schema.dropped_offset(P, cap)].view(schema.RECORD_DTYPE).reshape(P, cap)
    for v in range(P):
        n = min(v + 1, cap)
        rec[v, :n]["t0"] = rec[v, :n]["t1"] = 100 + np.arange(n)
        rec[v, :n]["tag"] = schema.tag_of(EventKind.INSTANT, 7)
        rec[v, :n]["arg0"] = v
    return buf


def test_lane_buffers_decode_to_program_and_lane():
    buf = _lane_buffer(programs=3, lanes=2, cap=4)
    d = decode_buffer(buf)
    ev = d.events
    v = ev["arg0"]
    assert (ev["program"] == v // 2).all() and (ev["lane"] == v % 2).all()
    assert d.header.lanes == 2 and d.header.grid == (6, 1, 1)
    _, _, cols = decode_columns([buf, buf], ("program", "lane", "slot", "arg0"))
    assert (cols["program"] == cols["arg0"] // 2).all() and (cols["lane"] == cols["arg0"] % 2).all()
    assert (cols["slot"] == np.concatenate([np.arange(min(v + 1, 4)) for v in range(6)] * 2)).all()


def test_a_header_from_before_lanes_reads_as_one_lane():
    buf = _lane_buffer(programs=6, lanes=1, cap=4, header_lanes=0)
    ev = decode_buffer(buf).events
    assert (ev["lane"] == 0).all() and (ev["program"] == ev["arg0"]).all()


def test_lanes_that_do_not_divide_the_grid_are_refused():
    buf = _lane_buffer(programs=3, lanes=2, cap=4)
    at = schema.HEADER_DTYPE.fields["lanes"][1]
    buf[at] = 4  # 6 virtual programs, 4 lanes
    with pytest.raises(DecodeError, match="lanes"):
        decode_buffer(buf)


def test_the_probe_kernel_capture_holds_every_lanes_events():
    """The real capture (H100): 3 programs x 2 lanes, 10 hand-offs each way; the counts the GPU
    run checked for small buffers too (drops exact) are in gpu_results.json."""
    cap = read_capture(FIX / "gluon_handoff.ktrace")
    ln = cap.ranks[0].launches[0]
    assert ln.meta["lanes"] == ["_consumer", "_producer"] and tuple(ln.grid) == (6, 1, 1)
    ev = cap.events()
    assert (ev["end"] >= ev["start"]).all()
    for lane, per_iter in ((0, 4), (1, 3)):  # consumer: wait, mark, counter, arrive; producer: wait, span, arrive
        for p in range(3):
            assert int(((ev["program"] == p) & (ev["lane"] == lane)).sum()) == 10 * per_iter
    assert all(r["ok"] and r["end_ge_start"] for r in GPU["probes"].values())
    assert GPU["probes"]["cap16"]["got"]["0/0"] == [11, 29]  # 16 slots: 11 events kept, 29 dropped
    assert GPU["gemm"]["drops"]["ok"]


# ------------------------------------------------------------------------------------------
# pairing: rule 3
# ------------------------------------------------------------------------------------------


def _cols(rows, names):
    return {n: np.array([r[i] for r in rows]) for i, n in enumerate(names)}


def test_local_waits_pair_within_their_program_with_the_last_release_of_the_phase():
    N = ("rank", "launch", "program", "start", "peer", "value", "flag", "local")
    W = ("rank", "launch", "program", "order", "peer", "flag", "expected", "cmp", "timed_out", "local")
    notifies = _cols([
        (0, 0, 0, 10, -1, 0, 77, True),   # 0: phase 0 of barrier 77, program 0
        (0, 0, 0, 12, -1, 0, 77, True),   # 1: a second arrive on the same phase (count 2): the later one completes it
        (0, 0, 1, 11, -1, 0, 77, True),   # 2: program 1's barrier 77
        (0, 0, 0, 20, 0, 0, 77, False),   # 3: a remote notify with the same flag and value
    ], N)
    waits = _cols([
        (0, 0, 0, 0, -1, 77, 0, 1, False, True),   # 0: released by notify 1
        (0, 0, 1, 0, -1, 77, 0, 1, False, True),   # 1: by notify 2
        (0, 0, 0, 1, -1, 77, -1, 1, False, True),  # 2: phase -1: the free pass, no release, not unmatched
        (0, 0, 0, 2, -1, 77, 5, 1, True, True),    # 3: timed out
        (0, 0, 0, 3, 0, 77, 0, 1, False, False),   # 4: remote wait: by the remote notify only
    ], W)
    p = pair(notifies, waits)
    assert dict(zip(p.wait.tolist(), p.notify.tolist())) == {0: 1, 1: 2, 4: 3}
    assert p.unmatched_waits == 0 and p.unmatched_notifies == 1  # notify 0 (superseded by 1)
    # without the local columns rule 3 is not applied: every event pairs through the flag rules,
    # where the counter rule reads flag 77 as one counter and the remote notify (the last write,
    # value 0 reaching every wait's count) releases them all
    q = pair({k: v for k, v in notifies.items() if k not in ("local", "program")}, {k: v for k, v in waits.items() if k != "local"})
    assert set(q.notify.tolist()) == {3} and 4 in q.wait.tolist()


@pytest.mark.parametrize("name", ["gluon_gemm", "gluon_gemm_slow_loader", "gluon_handoff"])
def test_every_mbarrier_wait_of_the_real_captures_pairs_inside_its_program(name):
    ev = read_capture(FIX / f"{name}.ktrace").events()
    n, w, _, unmatched = pair_table(ev)
    waits = ev["kind"] == EventKind.WAIT
    free = waits & (ev["arg4"] < 0)
    assert unmatched == 0 and n.size == int((waits & ~free).sum())
    assert (ev["flags"][w] & EventFlag.LOCAL).all() and (ev["flags"][n] & EventFlag.LOCAL).all()
    assert (ev["program"][n] == ev["program"][w]).all() and (ev["lane"][n] != ev["lane"][w]).all()
    assert (ev["arg2"][n] == ev["arg2"][w]).all() and (ev["arg1"][n] == ev["arg4"][w]).all()  # barrier, phase
    assert (ev["start"][n] <= ev["end"][w]).all()  # one GPU, one clock: a release never after the wait it ended


# ------------------------------------------------------------------------------------------
# views: Perfetto's trace processor and UI
# ------------------------------------------------------------------------------------------


def _tp_reason():
    from ktrace.testing.perfetto import unavailable_reason

    return unavailable_reason()


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_trace_processor_shows_lanes_as_threads_and_one_arrow_per_paired_wait(tmp_path, suffix):
    reason = _tp_reason()
    if reason:
        pytest.skip(f"Perfetto's trace processor cannot run here: {reason}")
    from ktrace.cli import main
    from ktrace.testing.perfetto import TraceProcessorHost

    src = FIX / "gluon_gemm_slow_loader.ktrace"
    out = tmp_path / f"g{suffix}"
    assert main(["merge", str(src), "-o", str(out)]) == 0
    ev = aligned_events(read_capture(src))
    n, w, _, _ = pair_table(ev)
    with TraceProcessorHost() as h:
        t = h.load(out)
        try:
            assert t.problems() == []
            assert t.scalar("select count(*) from flow") == n.size
            assert t.scalar("select count(*) from flow f join slice a on a.id = f.slice_out join slice b on b.id = f.slice_in "
                            "where b.ts < a.ts") == 0
            names = [r["name"] for r in t.query("select t.name from thread t join process p using (upid) "
                                                 "where p.name glob 'rank 0 *' order by tid")]
            want = [f"r0 p{p} {f}" for p in range(8) for f in ("mma_partition", "load_partition", "epilogue_partition")]
            assert names == ["kernels"] + want
            # each arrow runs from a release to the wait it ended (or its `acquired` mark), within one program
            arrows = t.query("""select a.name a, b.name b, ta.name ta, tb.name tb from flow f join slice a on a.id = f.slice_out
                                join slice b on b.id = f.slice_in join thread_track xa on a.track_id = xa.id
                                join thread ta on ta.utid = xa.utid join thread_track xb on b.track_id = xb.id
                                join thread tb on tb.utid = xb.utid""")
            assert len(arrows) == n.size
            assert all(x["a"].startswith("releasing barrier ") and x["ta"].split()[1] == x["tb"].split()[1] for x in arrows)
            ready = [x for x in arrows if x["a"] == "releasing barrier ready"]
            assert ready and all(x["ta"].endswith("load_partition") and x["tb"].endswith("mma_partition") for x in ready)
            assert t.scalar("select count(*) from slice where name = 'waiting for barrier ready'") == int(
                ((ev["kind"] == EventKind.WAIT) & (ev["lane"] == 0) & (ev["arg4"] >= 0)
                 & (ev["region"] == schema.region_id("ready"))).sum())
        finally:
            t.close()


def test_perfetto_ui_shows_partitions_and_the_arrow_of_a_release(tmp_path):
    from ktrace.testing.perfetto import ui_unavailable_reason

    reason = ui_unavailable_reason()
    if reason:
        pytest.skip(f"the Perfetto UI cannot run here: {reason}")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "images"))
    import make_images

    from ktrace.export import write_perfetto

    trace = write_perfetto(read_capture(FIX / "gluon_gemm_slow_loader.ktrace"), tmp_path / "g.pftrace")
    png = tmp_path / "gluon.png"
    said = make_images.gluon_png(trace, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert "(1 arrow)" in said


# ------------------------------------------------------------------------------------------
# analysis
# ------------------------------------------------------------------------------------------


def _launch_ns(ev) -> int:
    return int(ev["end_ns"].max() - ev["start_ns"].min())


def test_the_trace_has_the_lane_column_and_names():
    from ktrace.analysis import prepare

    t = prepare(FIX / "gluon_gemm.ktrace")
    ev = aligned_events(read_capture(FIX / "gluon_gemm.ktrace"))
    assert (t.column("lane") == ev["lane"]).all()
    assert t.lanes[(0, 0)] == ("mma_partition", "load_partition", "epilogue_partition")
    assert t.n_programs[(0, 0)] == 8  # programs, not programs x lanes


def test_slowed_loader_first_finding_names_the_loader_and_its_time():
    """The loader spun 2 µs before each stage's copies: the report's first finding names its
    partition, and the time it says a faster loader would save is within 10 % of what the delay
    cost (the slowed launch's duration minus the same launch unslowed, both recorded on an H100)."""
    from ktrace.analysis.report import build_report

    rep = build_report(FIX / "gluon_gemm_slow_loader.ktrace")
    f = rep.findings[0]
    assert f.kind == "lane_holdup" and f.data["partition"] == "load_partition" and "partition load_partition" in f.text
    cost = _launch_ns(aligned_events(read_capture(FIX / "gluon_gemm_slow_loader.ktrace"))) - _launch_ns(
        aligned_events(read_capture(FIX / "gluon_gemm.ktrace")))
    assert abs(f.cost_ns - cost) <= 0.10 * cost, (f.cost_ns, cost)


def test_the_lane_finding_s_numbers_come_from_the_raw_events():
    """Recomputed here the plain way (a loop over the worst program's waits): the time the other
    lanes waited on the loader's releases while the loader itself was not waiting."""
    from ktrace.analysis.report import build_report

    f = build_report(FIX / "gluon_gemm_slow_loader.ktrace").findings[0]
    ev = aligned_events(read_capture(FIX / "gluon_gemm_slow_loader.ktrace"))
    n, w, _, _ = pair_table(ev)
    p, lane = f.data["program"], f.data["lane"]
    own = [(int(s), int(e)) for s, e, k, pr, ln in zip(ev["start_ns"], ev["end_ns"], ev["kind"], ev["program"], ev["lane"])
           if k == EventKind.WAIT and pr == p and ln == lane]
    total = 0
    for ni, wi in zip(n.tolist(), w.tolist()):
        if ev["program"][wi] != p or ev["lane"][ni] != lane:
            continue
        s, e = int(ev["start_ns"][wi]), int(ev["end_ns"][wi])
        total += max(0, (e - s) - sum(max(0, min(e, b) - max(s, a)) for a, b in own))
    assert total == pytest.approx(f.data["worst_ns"])
    assert f"{f.data['worst_ns'] / 1000:.1f} µs" in f.text


def test_waits_on_barriers_whose_releases_the_density_leaves_out_are_not_called_missing():
    """At the GEMM's default density the MMA partition records its wait for ``c_empty`` but the
    epilogue does not record the release: those waits are counted apart, not as notifies missing."""
    from ktrace.analysis.report import build_report
    from viewers.text import render_text

    ev = aligned_events(read_capture(FIX / "gluon_gemm_tile.ktrace"))
    local = schema.is_local(ev["flags"])
    waits = (ev["kind"] == EventKind.WAIT) & local
    w_flag, n_flag = ev[schema.arg_column(EventKind.WAIT, "flag")], ev[schema.arg_column(EventKind.NOTIFY, "flag")]
    assert waits.any() and len(set(w_flag[waits].tolist())) == 1  # one barrier waited on: c_empty
    assert not ((ev["kind"] == EventKind.NOTIFY) & local & (n_flag == w_flag[waits][0])).any()  # its releases: not recorded
    rep = build_report(FIX / "gluon_gemm_tile.ktrace")
    s = rep.summary
    free = int(s["waits"]) - s["waits_release_untraced"]
    assert s["waits_unreleased"] == 0 and s["waits_release_untraced"] > 0 and s["waits"] == int(waits.sum())
    assert free == int(waits.sum()) // 2  # each program's first tile: the free pass (phase -1), one of its two tiles
    assert f"({s['waits_release_untraced']} more on mbarriers whose releases this probe density does not record)" in render_text(rep)


def test_the_healthy_gemm_says_nothing_is_wrong():
    """The same GEMM unslowed: its MMA partition sets the pace (the epilogue waits for it) and the
    MMA partition worked longer than it waited on the loader: information, no warning."""
    from ktrace.analysis.report import build_report

    rep = build_report(FIX / "gluon_gemm.ktrace")
    assert rep.summary["healthy"] and not [f for f in rep.findings if f.severity != "info"]
    held = {f.data["partition"]: f for f in rep.findings if f.kind == "lane_holdup"}
    assert set(held) == {"mma_partition", "load_partition"}
    assert held["load_partition"].data["waiter_ns"] < held["load_partition"].data["waiter_work_ns"]


def test_the_critical_path_walks_each_lane_and_names_the_slowed_loader():
    """On the slowed loader the critical path runs through the loader's lane (its partition named),
    and no run segment is longer than its lane's own life: a program's lanes run at once."""
    from ktrace.analysis import prepare
    from ktrace.analysis.report import build_report
    from ktrace.analysis.timeline import critical_path

    t = prepare(FIX / "gluon_gemm_slow_loader.ktrace")
    path = critical_path(t)
    ev = aligned_events(read_capture(FIX / "gluon_gemm_slow_loader.ktrace"))
    for x in path[path["kind"] == "run"]:
        m = (ev["program"] == x["program"]) & (ev["lane"] == x["lane"])
        assert ev["start_ns"][m].min() <= x["start_ns"] and x["end_ns"] <= ev["end_ns"][m].max()
    assert path["dur_ns"].sum() <= _launch_ns(ev)
    f = next(f for f in build_report(FIX / "gluon_gemm_slow_loader.ktrace").findings if f.kind == "critical_path")
    assert "lane 1 (load_partition)" in f.text and "crosses lanes of one program" in f.text


def test_a_program_is_busy_as_long_as_its_busiest_lane():
    """Recomputed the plain way: per program, the largest of its lanes' (life - own waits)."""
    from ktrace.analysis import load, prepare

    t = prepare(FIX / "gluon_gemm.ktrace")
    wg = load.workgroups(t)
    ev = aligned_events(read_capture(FIX / "gluon_gemm.ktrace"))
    for p, busy in zip(wg["program"].tolist(), wg["busy_ns"].tolist()):
        best = 0
        for lane in np.unique(ev["lane"][ev["program"] == p]).tolist():
            m = (ev["program"] == p) & (ev["lane"] == lane)
            w = m & (ev["kind"] == EventKind.WAIT)
            best = max(best, int(ev["end_ns"][m].max() - ev["start_ns"][m].min() - (ev["end_ns"][w] - ev["start_ns"][w]).sum()))
        assert busy == best and busy > 0


def test_the_communication_partition_s_notifies_release_the_waiting_partition():
    """The flag kernel at one rank (peer = itself, H100): per program the waiter (lane 0) waited
    for round 5 of the communication partition (lane 1) over the symmetric heap; pairing rule 1
    pairs each wait with the notify that wrote 5, across lanes, on the heap's flag offsets."""
    cap = read_capture(FIX / "gluon_flags.ktrace")
    ev = cap.events()
    n, w, _, unmatched = pair_table(ev)
    assert unmatched == 0 and n.size == 4 and GPU["flags"]["ok"]
    assert (ev["lane"][w] == 0).all() and (ev["lane"][n] == 1).all() and (ev["program"][n] == ev["program"][w]).all()
    assert not (ev["flags"][w] & EventFlag.LOCAL).any()  # a heap flag, not an mbarrier
    assert (ev["arg1"][n] == 5).all() and (ev["arg4"][w] == 5).all() and (ev["arg3"][w] == 5).all()
    assert (ev["start"][n] <= ev["end"][w]).all()
    assert cap.ranks[0].clock_samples  # the heap's calibration ran around it


def test_flag_probes_compile_away_when_off_but_the_wait_keeps_its_bound():
    sig = {"flags": "*i32", "rank": "i32", "dst": "i32", "src": "i32", "heap_bases": "*i64", "n_rounds": "i32", "ktrace_buf": "*i64"}
    off = compile_asm(gpk.flag_kernel, sig, {"KTRACE": 0, "KTRACE_LANES": 2}, CUDA_SM90, num_warps=4)
    on = compile_asm(gpk.flag_kernel, sig, {"KTRACE": 16, "KTRACE_LANES": 2}, CUDA_SM90, num_warps=4)
    assert "st.global.v2.b64" not in off and "%smid" not in off and on.count("st.global.v2.b64") > 0
    assert "ld.acquire.sys.global.b32" in off and "atom.global.sys.release.exch.b32" in off
    # untraced, the timer is read only by the wait's bound; traced, the notify reads it too
    assert 0 < off.count("%globaltimer") < on.count("%globaltimer")


def _scatter_asm(slots: int) -> str:
    import torch
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import native_specialize_impl

    from instrumented_kernels.gluon_gemm.scatter import gemm_scatter_kernel

    a = torch.empty(256, 256, dtype=torch.float16)
    lay = gl.NVMMASharedLayout.get_default_for
    descs = [TensorDescriptor.from_tensor(a, s, lay(s, gl.float16)) for s in ([128, 64], [64, 128], [128, 128])]
    sig = {n: native_specialize_impl(CUDABackend, d, False, True, True)[0] for n, d in zip(("a_desc", "b_desc", "c_desc"), descs)}
    sig.update(c_all="*fp16", flags="*i32", M="i32", N="i32", K="i32", rank="i32", world="i32", heap_bases="*i64", ktrace_buf="*i64")
    consts = {"STAGES": 4, "LOADER_DELAY_NS": 0, "STAGE_PROBES": True, "KTRACE": slots, "KTRACE_LANES": 4}
    return compile_asm(gemm_scatter_kernel, sig, consts, CUDA_SM90, num_warps=4)


def test_gemm_all_scatter_compiles_with_its_communication_partition():
    off, on = _scatter_asm(0), _scatter_asm(64)
    assert "st.global.v2.b64" not in off and "%smid" not in off and on.count("st.global.v2.b64") > off.count("st.global.v2.b64")
    for asm in (off, on):  # the signals over the heap: release exchanges, acquire reads
        assert "atom.global.sys.release.exch.b32" in asm and "ld.acquire.sys.global.b32" in asm


def test_gemm_all_scatter_capture_pairs_every_wait():
    """GEMM + all-scatter at one rank (H100; peer = the rank itself): output checked against
    torch in that run; here every wait pairs. ``c_empty`` counts two arrivals (epilogue and
    communication partition): each wait on it pairs with the later of the two."""
    res = json.loads((FIX / "gpu_results_scatter.json").read_text())["scatter"]
    assert all(v["ok"] for k, v in res.items() if k != "pairs")
    cap = read_capture(FIX / "gluon_gemm_scatter.ktrace")
    assert cap.ranks[0].launches[0].meta["lanes"] == ["mma_partition", "load_partition", "scatter_epilogue", "comm_partition"]
    ev = cap.events()
    n, w, _, unmatched = pair_table(ev)
    assert unmatched == 0 and n.size == res["pairs"]["pairs"]
    local = (ev["flags"][w] & EventFlag.LOCAL) != 0
    assert (~local).sum() == 8 and (ev["lane"][w][~local] == 3).all()  # one 'tiles in' wait per program
    ce = local & (ev["region"][w] == schema.region_id("c_empty"))
    assert ce.any()
    for ni, wi in zip(n[ce].tolist(), w[ce].tolist()):
        same = ((ev["kind"] == EventKind.NOTIFY) & (ev["program"] == ev["program"][wi]) & (ev["arg2"] == ev["arg2"][wi])
                & (ev["arg1"] == ev["arg4"][wi]))
        assert same.sum() == 2 and ev["start"][ni] == ev["start"][same].max()
