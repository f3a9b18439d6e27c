"""Traced launches inside CUDA graphs (``ktrace.graphs``), on the CPU.

What runs here: which replays a ring holds and how many were overwritten (exact counts); the
commit kernel itself, in Triton's interpreter, over a ring of random words (it is never zeroed);
the host turning replay slots into launches (numbered in device order, with their replay number)
from the commit kernel's own output over the buffers of real one-GPU captures, and the report of
those launches against the report of the originals; what a captured launch asks of the session
(refused without a warm-up, the commit launched after the kernel); the flight recorder's dump of
the replay in progress; torch.compile (a graph break only while a capture is open); the names of
Inductor's kernels. The GPU side: ``tests/gpu/test_graphs_gpu.py``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ktrace import schema
from ktrace.captures import read_capture, write_capture
from ktrace.graphs import ring as gring
from ktrace.schema import EventKind

ROOT = Path(__file__).resolve().parents[1]
SCEN = ROOT / "tests" / "fixtures" / "scenarios"


# ---------------------------------------------------------------------------------------------
# the ring, numpy only
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("done, taken, slots, first, lost", [
    (0, 0, 4, 0, 0), (3, 0, 4, 0, 0), (4, 0, 4, 0, 0), (5, 0, 4, 1, 1), (200, 0, 64, 136, 136),
    (200, 150, 64, 150, 0), (200, 100, 64, 136, 36), (7, 7, 1, 7, 0), (9, 7, 1, 8, 1),
])
def test_kept_counts_exactly_what_the_ring_overwrote(done, taken, slots, first, lost):
    assert gring.kept(done, taken, slots) == (first, lost)


def test_kept_refuses_a_count_that_went_back():
    with pytest.raises(ValueError, match="fewer than the 5 already taken"):
        gring.kept(3, 5, 4)


@pytest.mark.parametrize("slots, programs, nbytes", [(1, 1, 64), (3, 5, 40_064), (256, 7, 1000), (64, 64, 1 << 20)])
def test_ring_shape(slots, programs, nbytes):
    s = gring.RingShape(ring_slots=slots, programs=programs, nbytes=nbytes)
    assert s.keys_at == gring.stamp_words(slots) >= slots and s.keys_at % 32 == 0
    assert s.counts_at == s.keys_at + programs and s.mirror_at == s.counts_at + programs
    assert s.slots_at % 32 == 0 and s.slots_at > s.mirror_at
    assert s.slot_words % 32 == 0 and s.slot_words * 8 >= nbytes
    assert s.words == s.slots_at + slots * s.slot_words
    # the commit kernel's pointer arguments: the mirror word is 16-byte aligned, as every other
    # (Triton specialises a pointer on it: one binary for every captured launch)
    assert (s.mirror_at * 8) % 16 == 0


@pytest.mark.parametrize("kw", [dict(ring_slots=0, programs=1, nbytes=64), dict(ring_slots=1, programs=0, nbytes=64),
                                dict(ring_slots=1, programs=1, nbytes=0)])
def test_ring_shape_refuses_empty_parts(kw):
    with pytest.raises(ValueError):
        gring.RingShape(**kw)


def _model_ring(shape, key, stages, seed=0):
    """The ring after the commits of ``stages`` (what ``replay_commit`` does, written in numpy; the
    interpreter test below checks it against the kernel itself, word for word)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-(1 << 62), 1 << 62, shape.words, dtype=np.int64)
    for r, st in enumerate(stages):
        slot = r % shape.ring_slots
        body = w[shape.slots_at + slot * shape.slot_words : shape.slots_at + (slot + 1) * shape.slot_words].view(np.uint8)
        body[: shape.nbytes] = st
        w[shape.counts_at : shape.mirror_at] = r + 1
        w[shape.keys_at : shape.counts_at] = key
        w[slot] = r + 1
        w[shape.mirror_at] = r + 1
    return w


def test_replays_done_reads_memory_without_the_key_as_no_replay():
    shape = gring.RingShape(ring_slots=4, programs=3, nbytes=100)
    key = (1 << 62) | 99
    w = np.random.default_rng(1).integers(-(1 << 62), 1 << 62, shape.words, dtype=np.int64)
    assert gring.replays_done(w, shape, key) == (0, True)
    w[shape.keys_at : shape.counts_at] = key
    w[shape.counts_at : shape.mirror_at] = [5, 5, 4]  # program 2's commit of replay 5 not done yet
    assert gring.replays_done(w, shape, key) == (4, False)
    w[shape.keys_at + 1] = 7  # program 1 never committed (its key is not there): nothing is complete
    assert gring.replays_done(w, shape, key)[0] == 0


def test_take_gives_each_replay_its_own_slot_and_counts_the_rest():
    shape = gring.RingShape(ring_slots=4, programs=2, nbytes=72)
    key = (1 << 62) | 5
    stages = [np.full(72, r + 1, np.uint8) for r in range(10)]
    w = _model_ring(shape, key, stages)
    done, same = gring.replays_done(w, shape, key)
    assert (done, same) == (10, True)
    got = gring.take(w, shape, done, taken=3)
    assert got.replays.tolist() == [6, 7, 8, 9] and got.overwritten == 3 and got.torn == 0
    assert [int(b[0]) for b in got.buffers] == [7, 8, 9, 10] and got.buffers.shape == (4, 72)
    # a slot that holds another replay than its stamp says is not taken, and counted
    w[8 % 4] = 5
    got = gring.take(w, shape, done, taken=6)
    assert got.replays.tolist() == [6, 7, 9] and got.torn == 1 and got.lost == 1
    with pytest.raises(ValueError, match="words"):
        gring.take(w[:-1], shape, done, 0)


def _packed_to_dense(raw: np.ndarray) -> np.ndarray:
    """The dense buffer the device wrote, from a capture file's packed one (``ktrace.schema``):
    each program's kept slots at the start of its own, the rest zero as the device left them."""
    raw = np.asarray(raw, np.uint8)
    h = schema.unpack_header(raw)
    P, C = h["n_programs"], h["capacity"]
    if h["layout"] == schema.LAYOUT_DENSE:
        return raw.copy()
    kept = raw[64 : 64 + 4 * P].view("<u4").astype(np.int64)
    at = 64 + schema.packed_counts_bytes(P)
    rec = raw[at : at + int(kept.sum()) * 32].view(schema.RECORD_DTYPE)
    grid = np.zeros((P, C), schema.RECORD_DTYPE)
    grid[np.arange(C)[None, :] < kept[:, None]] = rec
    out = np.zeros(schema.buffer_bytes(P, C), np.uint8)
    out[64 : schema.dropped_offset(P, C)] = grid.reshape(-1).view(np.uint8)
    out[schema.dropped_offset(P, C):] = raw[at + int(kept.sum()) * 32 :][: 4 * P]
    return out


def _fixture_buffers(name: str) -> tuple[list[np.ndarray], object]:
    """The dense buffers of a real capture's launches, headers zeroed (the device never writes one)."""
    cap = read_capture(SCEN / f"{name}.ktrace")
    dense = [_packed_to_dense(ln.load_raw()) for ln in cap.ranks[0].launches]
    for d in dense:
        d[:64] = 0
    return dense, cap


def test_first_ticks_and_replay_order():
    dense, cap = _fixture_buffers("w1_handoff_late_tiles")
    ln = cap.ranks[0].launches[0]
    P, C = int(np.prod(ln.grid)), ln.capacity
    t = gring.first_ticks(np.stack(dense), P, C)
    ev = cap.events()
    want = [int(ev["start"][(ev["launch"] == i) & (ev["kind"] != EventKind.DETAIL)].min()) for i in range(len(dense))]
    assert t.tolist() == want
    empty = np.zeros_like(dense[0])
    assert gring.first_ticks(empty[None], P, C).tolist() == [-1]
    # ring A: 10, 30, (no event), 50; ring B: 20, 40
    which, pos = gring.replay_order([np.array([10, 30, -1, 50]), np.array([20, 40])])
    assert list(zip(which.tolist(), pos.tolist())) == [(0, 0), (1, 0), (0, 1), (0, 2), (1, 1), (0, 3)]
    assert [x.size for x in gring.replay_order([])] == [0, 0]


def test_dense_from_ring_layout_keeps_the_replay_and_counts_what_it_overwrote():
    from tests.test_flight import RingSim

    sim = RingSim(2, 4)
    for i in range(6):
        sim.span(0, 100 + i, 110 + i, a0=i)
    sim.span(1, 200, 210, a0=9)
    raw = gring.dense_from_ring_layout(sim.raw, sim.header(), 4)
    from ktrace.decode import decode_buffer

    d = decode_buffer(raw)
    e = d.events
    assert e["arg0"][e["program"] == 0].tolist() == [2, 3, 4, 5] and e["arg0"][e["program"] == 1].tolist() == [9]
    assert d.dropped_per_program.tolist() == [2, 0]


# ---------------------------------------------------------------------------------------------
# the commit kernel itself, in Triton's interpreter (a subprocess: the interpreter is chosen when
# Triton's decorators run)
# ---------------------------------------------------------------------------------------------


def _interpret(tmp_path, stages, ring_slots, zero_from=0, drain_after=(), seed=3) -> dict:
    src, dst = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(src, stages=np.stack(stages).astype(np.uint8), ring_slots=ring_slots, zero_from=zero_from, seed=seed,
             drain_after=np.array(drain_after, np.int64))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "tests.graphs_interp", str(src), str(dst)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(np.load(dst))


def test_commit_kernel_fills_the_ring_as_the_host_reads_it(tmp_path):
    """Seven replays of a 40 KB stage (5 commit programs) into a ring of 3 slots that starts as
    random words, copied out after replay 2 and at the end: the two reads take replays 0-1 and
    4-6, count 2 overwritten in between, each buffer byte for byte; the stage is zeroed after every
    commit; the numpy model used below writes the same ring, word for word."""
    rng = np.random.default_rng(0)
    nbytes = 64 + 5 * 8 * 1000
    stages = [rng.integers(0, 256, nbytes, dtype=np.uint8) for _ in range(7)]
    out = _interpret(tmp_path, stages, 3, drain_after=(2,))
    key = int(out["key"])
    shape = gring.RingShape(ring_slots=3, programs=int(out["programs"]), nbytes=nbytes)
    assert shape.programs == 5
    assert (out["stage_after"] == 0).all()
    assert out["mirror"].tolist() == list(range(1, 8))
    first = out["drains"][0]
    assert gring.replays_done(first, shape, key) == (2, True)
    a = gring.take(first, shape, 2, 0)
    assert a.replays.tolist() == [0, 1] and a.lost == 0
    assert all((b == stages[r]).all() for r, b in zip(a.replays, a.buffers))
    assert gring.replays_done(out["ring"], shape, key) == (7, True)
    b = gring.take(out["ring"], shape, 7, 2)
    assert b.replays.tolist() == [4, 5, 6] and b.overwritten == 2 and b.torn == 0
    assert all((buf == stages[r]).all() for r, buf in zip(b.replays, b.buffers))
    model = _model_ring(shape, key, stages, seed=3)
    assert (model[: shape.slots_at] == out["ring"][: shape.slots_at]).all()
    assert (model[shape.slots_at:] == out["ring"][shape.slots_at:]).all()


def test_commit_kernel_resets_only_the_heads_and_now_slots_of_a_ring_layout_stage(tmp_path):
    from tests.test_flight import RingSim

    sims = []
    for r in range(2):
        sim = RingSim(3, 4)
        for p in range(3):
            sim.start(p, 1000 * r + p)
            for i in range(r + p + 1):
                sim.span(p, 1000 * r + i, 1000 * r + i + 5, a0=10 * r + i)
        sims.append(sim)
    zero_from = schema.heads_offset(3, 4) // 8
    out = _interpret(tmp_path, [s.raw for s in sims], 2, zero_from=zero_from)
    after = out["stage_after"]
    assert (after[:, zero_from * 8 :] == 0).all()  # heads and NOW slots: the next replay starts from none
    assert (after[:, : zero_from * 8] == np.stack([s.raw for s in sims])[:, : zero_from * 8]).all()  # records kept
    shape = gring.RingShape(ring_slots=2, programs=int(out["programs"]), nbytes=sims[0].raw.size)
    got = gring.take(out["ring"], shape, *gring.replays_done(out["ring"], shape, int(out["key"]))[:1], 0)
    for r, buf in zip(got.replays, got.buffers):
        d = gring.dense_from_ring_layout(buf, sims[r].header(), 4)
        from ktrace.decode import decode_buffer

        e = decode_buffer(d).events
        assert sorted(e["arg0"].tolist()) == sorted(a for p in range(3) for a in
                                                    [10 * r + i for i in range(r + p + 1)][-4:])


# ---------------------------------------------------------------------------------------------
# the session: replays made into launches
# ---------------------------------------------------------------------------------------------


class _FakeTensor:
    """A ring the host reads (``GraphLaunch.read`` calls ``.cpu().numpy()``)."""

    def __init__(self, words):
        self.words = words

    def cpu(self):
        return self

    def numpy(self):
        return self.words


def _graph_launch(number, kernel, grid, capacity, ring_slots, programs, key, words, lanes=()):
    from ktrace.graphs.recorder import GraphLaunch

    shape = gring.RingShape(ring_slots=ring_slots, programs=programs, nbytes=schema.buffer_bytes(int(np.prod(grid)), capacity))
    return GraphLaunch(number=number, kernel=kernel, grid=grid, capacity=capacity, device=0, stream=7, lanes=lanes,
                       gate=capacity, ring_layout=False, shape=shape, stage=None, ring=_FakeTensor(words), mirror=None, key=key,
                       zero_from=0, host_ns=1)


@pytest.fixture
def cpu_session(monkeypatch):
    from ktrace import session as kcap

    monkeypatch.setattr(kcap, "device_info", lambda i: {"index": 0, "name": "sim", "vendor": "nvidia", "arch": "sm_90",
                                                        "sm_count": 132, "timer": "NV_GLOBALTIMER", "tick_hz": 1_000_000_000,
                                                        "uuid": ""})
    import torch

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    return kcap


def test_replays_of_real_buffers_become_launches_the_report_reads_as_the_originals(tmp_path, tmp_path_factory, cpu_session):
    """The three launches of a real one-GPU capture (producer and consumer programs on an H100,
    program 0 holding tiles 3-6 back) go through the commit kernel (interpreted) as three replays
    of a captured launch; the session makes them launches 0-2 with their replay numbers, and the
    report on them says what the report on the original says, word for word."""
    from ktrace.analysis import build_report

    dense, orig = _fixture_buffers("w1_handoff_late_tiles")
    out = _interpret(tmp_path_factory.mktemp("interp"), dense, 4)
    ln0 = orig.ranks[0].launches[0]
    shape_programs = int(out["programs"])
    s = cpu_session.Session(rank=0, world_size=1)
    gl = _graph_launch(0, ln0.kernel, ln0.grid, ln0.capacity, 4, shape_programs, int(out["key"]), out["ring"])
    s._graphs.append(gl)
    s.kernels = {}
    assert s._take_replays() == 3
    assert [pl.graph for pl in s.launches] == [{"capture": 0, "replay": r} for r in range(3)]
    cap = s.to_capture()  # (closes: nothing more to take)
    assert len(cap.ranks[0].launches) == 3
    cap.regions = dict(orig.regions)
    cap.meta = dict(orig.meta)
    path = write_capture(tmp_path / "replays.ktrace", cap)
    back = read_capture(path)
    got = back.ranks[0].launches
    assert [ln.meta["graph"]["replay"] for ln in got] == [0, 1, 2] and [ln.index for ln in got] == [0, 1, 2]
    a, b = back.events(), orig.events()
    for f in ("launch", "program", "slot", "kind", "flags", "region", "start", "end", "arg0", "arg1", "arg2", "arg3"):
        assert (a[f] == b[f]).all(), f
    assert "3 replay(s), 3 recorded as launches" in " ".join(back.ranks[0].notes)
    ra, rb = build_report(path), build_report(SCEN / "w1_handoff_late_tiles.ktrace")
    assert [f.text for f in ra.findings] == [f.text for f in rb.findings] and ra.findings[0].kind == "late_notifies"


def test_two_rings_drained_twice_numbered_in_device_order_with_exact_losses(cpu_session):
    """Two captured launches (A: 3 programs, B: 2), replays interleaved on the device (A's
    replay r at 1000 r, B's at 1000 r + 500); a ring of 4. Drained after 3 replays of each, then 10
    of each: 3 + 3 launches, then 4 + 4 with 3 of each overwritten; numbered by time."""
    from ktrace.captures.synth import encode_buffer, event_table

    def buf(P, t):
        e = event_table(P)
        e["program"] = np.arange(P)
        e["kind"], e["region"] = EventKind.SPAN, schema.region_id("work")
        e["start"], e["end"] = t + np.arange(P), t + 100
        raw = encode_buffer(e, grid=(P, 1, 1), capacity=2)
        raw[:64] = 0
        return raw

    key_a, key_b = (1 << 62) | 1, (1 << 62) | 2
    sa = gring.RingShape(ring_slots=4, programs=1, nbytes=schema.buffer_bytes(3, 2))
    sb = gring.RingShape(ring_slots=4, programs=1, nbytes=schema.buffer_bytes(2, 2))
    A = [buf(3, 1000 * r + 10) for r in range(10)]
    B = [buf(2, 1000 * r + 500) for r in range(10)]
    s = cpu_session.Session(rank=0, world_size=1)
    ga = _graph_launch(0, "a", (3, 1, 1), 2, 4, 1, key_a, _model_ring(sa, key_a, A[:3]))
    gb = _graph_launch(1, "b", (2, 1, 1), 2, 4, 1, key_b, _model_ring(sb, key_b, B[:3]))
    s._graphs += [ga, gb]
    assert s._take_replays() == 6
    assert [(pl.kernel, pl.graph["replay"]) for pl in s.launches] == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    ga.ring.words, gb.ring.words = _model_ring(sa, key_a, A), _model_ring(sb, key_b, B)
    assert s._take_replays() == 8
    assert [(pl.kernel, pl.graph["replay"]) for pl in s.launches[6:]] == [(k, r) for r in range(6, 10) for k in "ab"]
    assert [pl.index for pl in s.launches] == list(range(14))
    assert [g["overwritten"] for g in s.graph_summaries()] == [3, 3]
    assert [g["replays"] for g in s.graph_summaries()] == [10, 10] and [g["recorded"] for g in s.graph_summaries()] == [7, 7]
    from ktrace.decode import decode_buffer

    firsts = [int(decode_buffer(pl.raw).events["start"].min()) for pl in s.launches]
    assert firsts == sorted(firsts) and len(set(firsts)) == 14
    s._note_graphs()
    assert any("a captured into a CUDA graph (capture 0): 10 replay(s), 7 recorded as launches, 3 overwritten in its ring "
               "of 4" in n for n in s._notes)


def test_replays_past_max_launches_are_counted_not_kept(cpu_session):
    key = (1 << 62) | 3
    shape = gring.RingShape(ring_slots=8, programs=1, nbytes=schema.buffer_bytes(1, 1))
    s = cpu_session.Session(rank=0, world_size=1, max_launches=3)
    s._graphs.append(_graph_launch(0, "k", (1, 1, 1), 1, 8, 1, key, _model_ring(shape, key, [np.zeros(shape.nbytes, np.uint8)] * 5)))
    assert s._take_replays() == 3 and len(s.launches) == 3
    assert s.graph_summaries()[0]["not_kept"] == 2 and s.graph_summaries()[0]["replays"] == 5


# ---------------------------------------------------------------------------------------------
# what a launch captured into a graph asks of the session
# ---------------------------------------------------------------------------------------------


class _Recorder:
    """The JIT function's launcher, seen from outside: what the decorator passes, in order."""

    def __init__(self, real, log):
        self.real, self.log = real, log

    def __getitem__(self, grid):
        return lambda *a, **k: self.log.append(("kernel", grid, a, k))

    def __getattr__(self, n):
        return getattr(self.real, n)


@pytest.fixture
def captured(monkeypatch):
    """A session whose device stream is 'being captured' (no GPU): the graph module's device
    calls replaced by records of them."""
    import ktrace
    from ktrace import session as kcap
    from ktrace import traced
    from ktrace.graphs import recorder as gr
    from tests import probe_kernels as pk

    log = []
    tk = ktrace.trace(events_per_program=4)(pk.copy_kernel.jit_fn)
    tk.__dict__["jit_fn"] = _Recorder(tk.jit_fn, log)
    monkeypatch.setattr(traced, "device_of", lambda a, k: 0)
    monkeypatch.setattr(gr, "capturing", lambda device: True)
    monkeypatch.setattr(gr, "_warned", set())

    class Made:
        def __init__(self, number, kernel, grid, capacity, device, lanes, ring_slots, flight=None):
            self.number, self.kernel, self.grid, self.gate, self.stage = number, kernel, grid, capacity, f"STAGE{number}"
            log.append(("create", kernel, grid, capacity, ring_slots))

        def commit(self):
            log.append(("commit", self.number))

    monkeypatch.setattr(gr.GraphLaunch, "create", classmethod(lambda cls, *a, **k: Made(*a, **k)))
    s = kcap.Session(rank=0, world_size=1, graph_ring=16)
    return tk, s, log, gr, kcap


def test_captured_launch_without_warm_up_runs_untraced_in_the_graph(captured, monkeypatch, caplog):
    tk, s, log, gr, kcap = captured
    monkeypatch.setattr(gr, "_PREPARED", {})
    monkeypatch.setattr(kcap, "active_session", lambda: s)
    with caplog.at_level(logging.WARNING, logger="ktrace"):
        tk[(3,)]("x", "y", 10, BLOCK=4)
    assert log == [("kernel", (3,), ("x", "y", 10), {"BLOCK": 4})]  # the plain launch: nothing added to the graph
    assert "runs untraced there: nothing was prepared on this device" in caplog.text
    monkeypatch.setattr(gr, "_PREPARED", {0: object()})
    log.clear()
    tk[(3,)]("x", "y", 10, BLOCK=4)
    assert log == [("kernel", (3,), ("x", "y", 10), {"BLOCK": 4})]
    assert "it was not launched traced before the graph capture" in caplog.text
    assert not s._graphs and not s.launches


def test_captured_launch_gets_a_stage_and_its_commit_right_after_it(captured, monkeypatch):
    tk, s, log, gr, kcap = captured
    monkeypatch.setattr(gr, "_PREPARED", {0: object()})
    monkeypatch.setattr(kcap, "active_session", lambda: s)
    tk.warm.add((0, 4))  # (a traced launch of this binary was made before the capture)
    tk[(3,)]("x", "y", 10, BLOCK=4)
    tk[(2,)]("x", "y", 10, BLOCK=4)
    assert log == [("create", "copy_kernel", (3, 1, 1), 4, 16),
                   ("kernel", (3,), ("x", "y", 10), {"BLOCK": 4, "ktrace_buf": "STAGE0", "KTRACE": 4}), ("commit", 0),
                   ("create", "copy_kernel", (2, 1, 1), 4, 16),
                   ("kernel", (2,), ("x", "y", 10), {"BLOCK": 4, "ktrace_buf": "STAGE1", "KTRACE": 4}), ("commit", 1)]
    assert len(s._graphs) == 2 and not s.launches and tk.warm == {(0, 4)}


def test_an_eager_traced_launch_marks_its_binary_warm(monkeypatch):
    import ktrace
    from ktrace import session as kcap
    from ktrace import traced
    from tests import probe_kernels as pk

    log = []
    tk = ktrace.trace(events_per_program=4)(pk.copy_kernel.jit_fn)
    tk.__dict__["jit_fn"] = _Recorder(tk.jit_fn, log)

    class S:
        events_per_program = None

        def new_launch(self, kernel, grid, capacity, device):
            class PL:
                buffer, index = "BUF", 0

            return PL()

    monkeypatch.setattr(kcap, "active_session", lambda: S())
    monkeypatch.setattr(traced, "device_of", lambda a, k: 1)
    tk[(3,)]("x", "y", 10, BLOCK=4)
    assert tk.warm == {(1, 4)} and log[0][3]["KTRACE"] == 4


def test_capture_opened_or_left_inside_a_graph_capture_waits_for_nothing(monkeypatch):
    """Opening with a heap calibrates over it and leaving closes (both wait for the device): inside
    a graph capture neither runs, each says so in the notes, and the capture closes when saved."""
    from ktrace import session as kcap

    class Heap:
        rank, world_size, group = 0, 1, None

        def __getattr__(self, n):
            raise AssertionError(f"the heap was used inside the graph capture: {n}")

    monkeypatch.delenv("KTRACE", raising=False)
    monkeypatch.setattr(kcap, "_graph_capture_underway", lambda: True)
    s = kcap.Session(rank=0, world_size=1)
    s.heap = Heap()
    with s:
        assert kcap._TRACING
    assert not s.closed and not kcap._TRACING
    assert any("opened while a CUDA graph was being captured" in n for n in s._notes)
    assert any("left while a CUDA graph was being captured" in n for n in s._notes)
    with pytest.raises(RuntimeError, match="while a CUDA graph is being captured"):
        s.close()
    with pytest.raises(RuntimeError, match="after the CUDA graph capture has ended"):
        s.drain_replays()
    monkeypatch.setattr(kcap, "_graph_capture_underway", lambda: False)
    s.close()
    assert s.closed


def test_graph_ring_must_be_a_positive_int():
    from ktrace.session import Session

    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="graph_ring"):
            Session(rank=0, world_size=1, graph_ring=bad)


# ---------------------------------------------------------------------------------------------
# the flight recorder: a dump shows the replay in progress
# ---------------------------------------------------------------------------------------------


def test_flight_dump_shows_the_replay_in_progress_of_a_captured_launch(tmp_path):
    """A captured launch's ring buffer in the recorder's arena, replay 41 hung: lane 0 notified
    twice and ended, lanes 1-2 spin. The dump holds it as a launch with its replay number and the
    live report names the hang."""
    import torch

    from ktrace.analysis.live import live_report
    from ktrace.flight.recorder import FlightConfig, Recorder
    from tests.test_flight import RingSim, _Session

    cfg = FlightConfig(slots=8, out_dir=str(tmp_path / "dumps"), registry=str(tmp_path / "reg"))
    s = _Session()
    rec = Recorder(s, cfg)
    rec._host = np.zeros(1 << 16, np.uint8)
    rec._arena = torch.from_numpy(rec._host)
    rec._device = {"timer": "NV_GLOBALTIMER", "tick_hz": 1_000_000_000, "name": "sim"}
    rec._clock = (5_000_000_000, time.time_ns(), 100)  # the device timer read 5 s just now
    stage, mirror = rec.new_graph_buffer(0, 3)
    assert stage.dtype == torch.int64 and mirror.numel() == 1 and stage.numel() * 8 == schema.ring_buffer_bytes(3, 8)
    sim = RingSim(3, 8, raw=stage.numpy().view(np.uint8))
    mirror.numpy()[0] = 41

    class GL:
        number, kernel, grid, host_ns, stream, device = 0, "handoff", (3, 1, 1), 1, 7, 0

    s._graphs = [GL()]
    for p in range(3):
        sim.start(p, 4_000_000_000)
    sim.notify(0, 4_100_000_000, 0, 4096, 1)
    sim.notify(0, 4_200_000_000, 0, 4096, 2)
    sim.spin(1, 4_300_000_000, 0, 4096, 3, 2)
    sim.spin(2, 4_300_000_000, 0, 4096, 3, 2)
    assert rec.waiting() == 2 and rec.heads().tolist() == [4, 0, 0]
    path = rec.dump("signal")
    c = read_capture(path)
    ln = c.ranks[0].launches[0]
    assert ln.meta["graph"] == {"capture": 0, "replay": 41} and ln.kernel == "handoff"
    assert len(ln.meta["live"]["open_waits"]) == 2
    assert live_report(c).headline.startswith("HUNG at the dump (signal): rank 0 programs 1-2 wait on flag ")


# ---------------------------------------------------------------------------------------------
# torch.compile
# ---------------------------------------------------------------------------------------------


def test_torch_compile_compiles_the_plain_kernel_and_breaks_the_graph_only_while_tracing(monkeypatch):
    """With no capture open, Dynamo traces through ``@ktrace.trace`` into the plain launch (here a
    stand-in of torch ops, so that the CPU can run it): no graph break, nothing recorded. With one
    open, the launch is a graph break run at every call, traced; closing recompiles back."""
    torch = pytest.importorskip("torch")
    import torch._dynamo
    from torch._dynamo.utils import counters

    import ktrace
    from ktrace import session as kcap
    from ktrace import traced
    from tests import probe_kernels as pk

    class Plain:
        """Stands in for a JIT function (its launch: torch ops the CPU runs)."""

        def __init__(self, scale, original=None):
            self.scale = scale
            if original is not None:
                self.ktrace_original = original

        def __getitem__(self, grid):
            def run(x, y, n, BLOCK, ktrace_buf=None, KTRACE=0):
                y.add_(x * self.scale)
            return run

    tk = ktrace.trace(events_per_program=4)(pk.copy_kernel.jit_fn)
    written = Plain(1)  # the kernel as written: what torch.compile gets with tracing off
    tk.__dict__["jit_fn"] = Plain(10, original=written)  # the copy prepared for deferred records: traced launches
    asked = []

    class S:
        events_per_program = None

        def new_launch(self, kernel, grid, capacity, device):
            asked.append(grid)

            class PL:
                buffer, index = None, 0

            return PL()

    monkeypatch.setattr(traced, "device_of", lambda a, k: 0)
    monkeypatch.delenv("KTRACE", raising=False)
    kcap._count_open(0)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def step(x, y):
        tk[(1,)](x * 2, y, 4, BLOCK=4)
        return y + 1

    torch._dynamo.reset()
    counters.clear()
    f = torch.compile(step, backend=backend)
    x, y = torch.ones(4), torch.zeros(4)
    assert f(x, y).tolist() == [3.0] * 4 and len(graphs) == 1 and not counters["graph_break"] and not asked
    monkeypatch.setattr(kcap, "active_session", lambda: S())
    kcap._count_open(+1)
    try:
        for i in range(3):
            assert f(x, y).tolist() == [23.0 + 20 * i] * 4  # (y += 20: the traced launch, at every call)
        assert asked == [(1, 1, 1)] * 3 and sum(counters["graph_break"].values()) >= 1
    finally:
        kcap._count_open(-1)
    n = len(graphs)
    assert f(x, y).tolist() == [65.0] * 4 and asked == [(1, 1, 1)] * 3 and len(graphs) == n + 1
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------
# Inductor's kernels
# ---------------------------------------------------------------------------------------------


def test_inductor_kernel_names():
    """A real CachingAutotuner, as Inductor's generated module makes one (built here on the CPU):
    its Inductor name; the Triton function it wraps: its own; anything else: None."""
    torch = pytest.importorskip("torch")
    import triton
    import triton.language as tl
    from torch._inductor.runtime import triton_heuristics as th
    from torch._inductor.runtime.hints import DeviceProperties

    from ktrace.graphs.inductor import kernel_name
    from tests import probe_kernels as pk

    @triton.jit
    def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
        x0 = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
        tl.store(out_ptr0 + x0, tl.load(in_ptr0 + x0) + 1.0, mask=x0 < xnumel)

    meta = {"signature": {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32"},
            "device": DeviceProperties.create(torch.device("cpu")), "constants": {}, "configs": []}
    auto = th.pointwise(size_hints={"x": 1024}, triton_meta=meta,
                        inductor_meta={"kernel_name": "triton_poi_fused_add_renamed_0", "backend_hash": "0"},
                        filename=__file__)(triton_poi_fused_add_0)
    assert type(auto).__name__ == "CachingAutotuner"
    assert kernel_name(auto) == "triton_poi_fused_add_renamed_0"
    assert kernel_name(triton_poi_fused_add_0) == "triton_poi_fused_add_0"
    assert kernel_name(pk.copy_kernel.jit_fn) is None and kernel_name(pk.copy_kernel) is None and kernel_name(object()) is None


def test_tracing_is_on_for_torch_compile_when_ktrace_is_set(monkeypatch):
    """``KTRACE=1`` traces every launch of the process: torch.compile then leaves traced launches
    out of its graphs from the start, before the environment's capture is made."""
    from ktrace import session as kcap

    monkeypatch.setenv("KTRACE", "1")
    kcap._count_open(0)
    assert kcap._TRACING
    monkeypatch.setenv("KTRACE", "0")
    kcap._count_open(0)
    assert not kcap._TRACING
