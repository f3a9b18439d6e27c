"""GPU tier: traced kernels inside CUDA graphs (``ktrace.graphs``; run with ``pytest -m gpu``).

The capture that used to break (a traced copy captured with ``torch.cuda.graph`` inside
``ktrace.capture()``), on the default capture stream, on a stream of the caller's and on a stream
forked inside the capture; every replay recorded, the ring's overwritten replays counted exactly;
tracing off leaves the user's graph node for node, tracing on adds one node (the commit); a
launch that was not warmed up runs untraced without breaking the capture; torch.compile with
``mode="reduce-overhead"``; and, in processes of their own (``tests/gpu/graphs_gpu.py``), the
report's first finding on a straggler inside the replays and the flight recorder's dump of a
replay that hangs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # collected on CPU machines, skipped there
    pytest.skip("needs a GPU", allow_module_level=True)

import ktrace
from ktrace.schema import EventKind
from tests import probe_kernels as pk

pytestmark = pytest.mark.gpu
DEV = "cuda"
N, B = 1 << 16, 1024
GRID = (N // B,)
SCRIPT = Path(__file__).with_name("graphs_gpu.py")


@pytest.fixture
def xy():
    x = torch.randn(N, device=DEV)
    return x, torch.zeros_like(x)


def _warm(x, y):
    """The warm-up a graph capture needs: the traced binary launched (and loaded) eagerly."""
    with ktrace.capture():
        pk.copy_kernel[GRID](x, y, N, BLOCK=B)
    torch.cuda.synchronize()


def _replays(cap):
    """The capture's replay launches and, per launch, its first event's start (raw ticks)."""
    c = cap.to_capture()
    launches = [ln for ln in c.ranks[0].launches if "graph" in ln.meta]
    ev = c.events()
    firsts = [int(ev["start"][(ev["launch"] == ln.index) & (ev["kind"] != EventKind.DETAIL)].min()) for ln in launches]
    return launches, firsts, ev


def _check_replays(cap, n, first_replay=0):
    launches, firsts, ev = _replays(cap)
    assert [ln.meta["graph"]["replay"] for ln in launches] == list(range(first_replay, first_replay + n))
    assert all(np.diff(firsts) > 0), "replays' times must be distinct and increasing"
    for ln in launches:  # one span per program, every replay
        e = ev[ev["launch"] == ln.index]
        assert sorted(e["program"].tolist()) == list(range(GRID[0])) and (e["kind"] == EventKind.SPAN).all()
    return launches


def test_capture_on_the_default_capture_stream_records_every_replay(xy):
    """The capture of the issue (a traced copy in torch.cuda.graph under ktrace.capture) succeeds,
    and 200 replays are 200 launches with their replay numbers, distinct increasing times."""
    x, y = xy
    _warm(x, y)
    with ktrace.capture() as cap:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            pk.copy_kernel[GRID](x, y, N, BLOCK=B)
        y.zero_()
        for _ in range(200):
            g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, x)
    _check_replays(cap, 200)
    s = cap.graph_summaries()[0]
    assert (s["replays"], s["recorded"], s["overwritten"], s["torn"], s["memset"]) == (200, 200, 0, 0, False)


@pytest.mark.parametrize("how", ["stream argument", "forked inside the capture"])
def test_capture_on_a_side_stream_records_every_replay(xy, how):
    """On a stream the caller gives torch.cuda.graph, and on a stream forked from the capture
    stream and joined back (as torch.compile's graphs run work on other streams)."""
    x, y = xy
    _warm(x, y)
    side = torch.cuda.Stream()
    with ktrace.capture() as cap:
        g = torch.cuda.CUDAGraph()
        if how == "stream argument":
            with torch.cuda.graph(g, stream=side):
                pk.copy_kernel[GRID](x, y, N, BLOCK=B)
        else:
            with torch.cuda.graph(g):
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    pk.copy_kernel[GRID](x, y, N, BLOCK=B)
                torch.cuda.current_stream().wait_stream(side)
        for _ in range(50):
            g.replay()
        torch.cuda.synchronize()
    _check_replays(cap, 50)


def test_ring_overwrites_are_counted_exactly(xy):
    """A ring of 64 replays: 200 replays taken at the end keep 136-199 and count 136 overwritten;
    taken at 100 and at the end, 36-99 and 136-199 and 72; taken every 50, all 200."""
    x, y = xy
    _warm(x, y)
    for drains, kept, lost in (((), list(range(136, 200)), 136), ((100,), list(range(36, 100)) + list(range(136, 200)), 72),
                               ((50, 100, 150), list(range(200)), 0)):
        with ktrace.capture(graph_ring=64) as cap:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                pk.copy_kernel[GRID](x, y, N, BLOCK=B)
            for i in range(200):
                g.replay()
                if i + 1 in drains:
                    cap.drain_replays()
        launches, firsts, _ = _replays(cap)
        assert [ln.meta["graph"]["replay"] for ln in launches] == kept and all(np.diff(firsts) > 0)
        s = cap.graph_summaries()[0]
        assert (s["replays"], s["recorded"], s["overwritten"]) == (200, len(kept), lost)
        assert any(f"{lost} overwritten in its ring of 64" in n for n in cap.to_capture().ranks[0].notes) == (lost > 0)


def _nodes(g, tmp_path, name) -> tuple[int, str]:
    path = tmp_path / f"{name}.dot"
    g.debug_dump(str(path))
    dot = path.read_text()
    # node statements ("graph_1_node_0"[style=... at a line's start), not edges ("a" -> "b" [headlabel=0])
    return len(re.findall(r'^"graph_\d+_node_\d+"\[', dot, re.M)), dot


def _graph(fn, debug=True):
    # (debug_dump needs the cudaGraph_t, which capture_end destroys unless the graph keeps it)
    g = torch.cuda.CUDAGraph(keep_graph=True) if debug else torch.cuda.CUDAGraph()
    if debug:
        g.enable_debug_mode()
    with torch.cuda.graph(g):
        fn()
    return g


def test_tracing_off_leaves_the_graph_as_the_users_and_on_adds_the_commit(xy, tmp_path):
    x, y = xy
    _warm(x, y)
    users = pk.copy_kernel.jit_fn.ktrace_original  # the kernel as written, without @ktrace.trace
    users[GRID](x, y, N, BLOCK=B)  # (both plain binaries loaded before the captures)
    pk.copy_kernel[GRID](x, y, N, BLOCK=B)
    torch.cuda.synchronize()
    plain, _ = _nodes(_graph(lambda: users[GRID](x, y, N, BLOCK=B)), tmp_path, "plain")
    off, dot_off = _nodes(_graph(lambda: pk.copy_kernel[GRID](x, y, N, BLOCK=B)), tmp_path, "off")
    with ktrace.capture():
        on, dot_on = _nodes(_graph(lambda: pk.copy_kernel[GRID](x, y, N, BLOCK=B)), tmp_path, "on")
    assert off == plain and "replay_commit" not in dot_off
    assert on == off + 1 and "replay_commit" in dot_on and "MEMSET" not in dot_on


def test_a_launch_not_warmed_up_runs_untraced_and_the_capture_succeeds(xy, caplog):
    """A traced kernel never launched traced before: inside the capture it runs as the plain kernel
    (warned once), and the user's graph works."""
    import logging

    x, y = xy
    fresh = ktrace.trace(events_per_program=4, name="fresh_copy")(pk.copy_kernel.jit_fn.ktrace_original)
    fresh[GRID](x, y, N, BLOCK=B)  # untraced: the plain binary loaded, as the user's warm-up does
    torch.cuda.synchronize()
    y.zero_()
    with caplog.at_level(logging.WARNING, logger="ktrace"), ktrace.capture() as cap:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fresh[GRID](x, y, N, BLOCK=B)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
    torch.testing.assert_close(y, x)
    assert "fresh_copy, captured into a CUDA graph, runs untraced there" in caplog.text
    assert not cap.graph_summaries() and not cap.to_capture().ranks[0].launches


def test_a_full_stage_arena_zeroes_the_stage_in_the_graph(xy, tmp_path):
    """With no room left in the stage arena, the stage is allocated in the capture and zeroed by a
    node before the kernel (torch's ``zero_``: a fill kernel on the H200 with torch 2.11, a memset
    node elsewhere): still one launch per replay, each whole."""
    from ktrace.graphs import recorder as gr

    x, y = xy
    _warm(x, y)
    dev = torch.cuda.current_device()
    d = gr._PREPARED[dev]
    d.used = d.arenas[-1].numel()
    with ktrace.capture() as cap:
        n, dot = _nodes(_graph(lambda: pk.copy_kernel[GRID](x, y, N, BLOCK=B)), tmp_path, "memset")
        g = _graph(lambda: pk.copy_kernel[GRID](x, y, N, BLOCK=B), debug=False)
        for _ in range(20):
            g.replay()
    # three nodes, in order: the stage zeroed, the traced kernel, the commit
    assert n == 3 and "copy_kernel" in dot and "replay_commit" in dot, dot
    assert [s["memset"] for s in cap.graph_summaries()] == [True, True]
    launches, _, _ = _replays(cap)
    assert [ln.meta["graph"] for ln in launches] == [{"capture": 1, "replay": r} for r in range(20)]
    pk.copy_kernel[GRID](x, y, N, BLOCK=B)  # an eager launch outside the session...
    with ktrace.capture():
        pk.copy_kernel[GRID](x, y, N, BLOCK=B)  # ...and one inside: prepare() adds an arena
    assert gr._PREPARED[dev].used == 0 and len(gr._PREPARED[dev].arenas) >= 2


def test_torch_compile_reduce_overhead_records_every_call(xy):
    """A compiled step (mode="reduce-overhead") calling a traced kernel written with
    ktrace.language (``kl.init``: a module Inductor cannot emit into the module it compiles user
    kernels into, so the kernel as written does not compile into a graph at all): the launch is left
    out of the compiled graph, the step's output is right at every call with no capture open and
    nothing is recorded; inside a capture every call is one launch."""
    import torch._dynamo

    from ktrace.decorator import _inductor_can_emit

    x, y = xy
    assert not _inductor_can_emit(pk.copy_kernel.jit_fn.ktrace_original)
    torch._dynamo.reset()

    def step(x, y):
        pk.copy_kernel[GRID](x * 2, y, N, BLOCK=B)
        return y + 1

    f = torch.compile(step, mode="reduce-overhead")
    for _ in range(5):
        y.fill_(float("nan"))
        out = f(x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x + 1)
    with ktrace.capture() as cap:
        for _ in range(20):
            y.fill_(float("nan"))
            out = f(x, y)
        torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x + 1)
    launches = cap.to_capture().ranks[0].launches
    assert len(launches) == 20 and all(ln.kernel == "copy_kernel" for ln in launches)
    torch._dynamo.reset()


def _run(role: str, out: Path, timeout: int) -> dict:
    p = subprocess.Popen([sys.executable, str(SCRIPT), "--role", role, "--out", str(out)], start_new_session=True)
    try:
        assert p.wait(timeout=timeout) == 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return json.loads((out / "summary.json").read_text())


def test_report_names_a_straggler_inside_the_replays(tmp_path):
    """examples/08 at one rank: 200 replays are 200 launches with distinct, increasing times and
    no loss; program 1, holding its notifies of tiles 2-5 back 60 µs in replays 50-59, is the
    report's first finding, in those launches."""
    from ktrace.analysis import build_report
    from ktrace.captures import read_capture

    s = _run("straggler", tmp_path, 240)
    assert s["output_ok"] and s["graphs"][0]["replays"] == 200 and s["graphs"][0]["recorded"] == 200
    assert s["graphs"][0]["overwritten"] == 0 and s["drained"] == 200
    cap = read_capture(s["capture"])
    launches = cap.ranks[0].launches
    assert [ln.meta["graph"]["replay"] for ln in launches] == list(range(200))
    ev = cap.events()
    firsts = [int(ev["start"][ev["launch"] == ln.index].min()) for ln in launches]
    assert all(np.diff(firsts) > 0)
    rep = build_report(s["capture"])
    f = rep.findings[0]
    inj = s["injected"]
    assert f.kind == "late_notifies", [x.text for x in rep.findings[:3]]
    assert f.data["rank"] == inj["rank"] and f.data["programs"] == [inj["program"]], f.text
    assert f.data["rounds"] == inj["tiles"], f.text
    named = {x for cl in f.claims for x in cl.values.get("launches", [])}
    assert named and named <= set(inj["replays"]), (named, f.text)  # (launch i is replay i: the warm-up was apart)


def test_flight_recorder_dumps_a_hang_inside_a_replayed_graph(tmp_path):
    s = _run("hang", tmp_path, 180)
    assert s["dumps"] and s["released"]["after_dump"]
    hung = [d for d in s["dump_launches"] if d["meta_graph"] is not None]
    assert hung == [{"kernel": "tile_exchange", "meta_graph": {"capture": 0, "replay": s["K"]}, "open_waits": hung[0]["open_waits"]}]
    assert hung[0]["open_waits"] >= 1
    assert s["report_first_line"].startswith("HUNG at the dump (watchdog): rank 0 program")
    assert s["replay_launches"] == list(range(s["K"] + 5)) and s["timed_out_waits"] == 0
