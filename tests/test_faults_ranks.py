"""Faults around a capture, on the CPU: the heap's error block (timed-out waits held through
ktrace's own kernels), leaving ``ktrace.capture(heap=...)`` after timeouts, a failed closing
calibration and the code's own error, ranks that die or come late (``arrive``, a partial
``gather``), and the run identity every rank shares.

The multi-rank parts run three processes over gloo with a host-backed heap; the clock
calibration (a GPU kernel) is replaced by a stand-in that uses the heap's error block as the
real one does (``ktrace.clock.calibrate.ping_pong``: hold the earlier timeouts, then take its own).
"""

from __future__ import annotations

import logging
import time
import traceback

import pytest
import torch

from ktrace.launch import free_port
from tests.gloo_ranks import finish, init, spawn

WORLD = 3


def _fake_timeout(heap, program: int, flag_offset: int, peer: int) -> None:
    """Record one timed-out wait in this rank's error block, as the device's bounded wait does."""
    import numpy as np

    from ktrace.shmem import codes

    block = heap.buffer[: codes.ERROR_BLOCK_BYTES].numpy()
    n = int(block[:4].view(np.int32)[0])
    rec = np.zeros(1, codes.ERROR_RECORD_DTYPE)
    rec[0] = (program, flag_offset, peer, 1, 0, 1, 20_000_000, 4096)  # waited for == 1, 20 ms at 1 GHz
    if n < codes.ERROR_SLOTS:
        block[8 + n * rec.itemsize : 8 + (n + 1) * rec.itemsize] = rec.view(np.uint8)
    block[:4].view(np.int32)[0] = n + 1


def _stand_in_calibration(fail_closing: dict):
    """A calibration that treats the error block as ``ping_pong`` does, then succeeds (or, for
    a closing one when asked, fails on every rank as a timed-out ping-pong would)."""
    from ktrace.shmem import WaitTimeoutError

    def calibrate(heap, phase="before", config=None):
        heap.hold_timeouts()
        heap.barrier()
        counts = heap.all_gather_object(heap.take_timeouts()[0])
        if any(counts):
            raise WaitTimeoutError(f"stand-in calibration saw its own timeouts {counts}", [], sum(counts))
        if phase == "after" and fail_closing.get("on"):
            raise WaitTimeoutError("clock calibration of peer 1 against rank 0 did not complete: stand-in", [], 1)
        return {"samples": [], "anchors": {}}

    return calibrate


def _scenario(rank: int, out: dict, q) -> None:
    import ktrace
    import ktrace.clock.calibrate as calibration
    from ktrace.captures import capture_from_bytes, capture_to_bytes
    from ktrace.captures.gather import arrive
    from ktrace.captures.identity import run_id
    from ktrace.shmem import HeapConfig, SymmetricHeap, WaitTimeoutError

    out["run_id"] = (run_id(), run_id())
    heap = SymmetricHeap(config=HeapConfig(size_bytes=1 << 20, backing="host"))
    flags = heap.zeros(4, dtype=torch.int32, name="faults.flags")
    fail = {"on": True}
    calibration.calibrate = _stand_in_calibration(fail)

    # A: a wait timed out inside the capture (rank 1), and the closing calibration fails
    with ktrace.capture(heap=heap, peer_timeout_s=30) as cap:
        if rank == 1:
            _fake_timeout(heap, program=3, flag_offset=heap.offset_of(flags) + 4, peer=0)
    rc = cap.to_capture().ranks[rank]
    out["A"] = {"notes": rc.notes, "timeouts": rc.timeouts, "run_id": cap.to_capture().run_id}
    try:
        heap.check()
        out["A"]["check"] = None
    except WaitTimeoutError as e:
        out["A"]["check"] = str(e)
    out["A"]["after_check"] = heap.timeouts()[0]

    # B: rank 2's own code raises inside the block; the others skip the closing calibration
    fail["on"] = False
    t0 = time.monotonic()
    try:
        with ktrace.capture(heap=heap, peer_timeout_s=30) as cap:
            if rank == 2:
                raise KeyError("the code's own error")
        out["B"] = {"raised": None}
    except KeyError as e:
        out["B"] = {"raised": str(e)}
    out["B"].update(seconds=time.monotonic() - t0, notes=cap.to_capture().ranks[rank].notes)

    # C: rank 1 dies; the others capture, gather to rank 0, and are not held up by it
    if rank == 1:
        finish(out, q)
    t0 = time.monotonic()
    with ktrace.capture(heap=heap, peer_timeout_s=60) as cap:
        pass
    merged = cap.gather(dst=0)
    out["C"] = {"seconds": time.monotonic() - t0, "notes": cap.to_capture().ranks[rank].notes, "merged": None}
    if merged is not None:
        back = capture_from_bytes(capture_to_bytes(merged))
        out["C"]["merged"] = {"ranks": sorted(back.ranks), "partial": back.partial, "missing": back.missing_ranks,
                              "notes": back.notes, "run_id": back.run_id}

    # D: rank 2 comes 3 s late to a meeting with a 1 s bound: both get the one verdict
    if rank == 2:
        time.sleep(3.0)
    t0 = time.monotonic()
    a = arrive("late", timeout_s=1.0)
    out["D"] = {"absent": a.absent, "dead": a.dead, "seconds": time.monotonic() - t0, "complete": a.complete}
    arrive("done", timeout_s=30.0)  # (rank 0 holds the store: it leaves last)


def _worker(rank: int, world: int, port: int, q) -> None:
    init(rank, world, port)
    out: dict = {"rank": rank}
    try:
        _scenario(rank, out, q)
    except BaseException:  # reported to the parent, which asserts on it
        out["error"] = traceback.format_exc()
    finish(out, q)


@pytest.fixture(scope="module")
def ranks():
    return spawn(_worker, WORLD, timeout_s=180)


def test_every_rank_gets_one_run_id(ranks):
    ids = {o["run_id"] for o in ranks.values()}
    assert len(ids) == 1 and None not in next(iter(ids)), ids
    first = next(iter(ids))[0]
    assert first == next(iter(ids))[1] and all(o["A"]["run_id"] == first for o in ranks.values())
    assert ranks[0]["C"]["merged"]["run_id"] == first


def test_a_timed_out_wait_survives_the_closing_calibration(ranks):
    a = ranks[1]["A"]
    # kept in the capture ...
    assert a["timeouts"]["count"] == 1 and a["timeouts"]["waits"][0]["program"] == 3
    assert a["timeouts"]["waits"][0]["peer"] == 0 and a["timeouts"]["waits"][0]["flag"].startswith("'faults.flags'[1]")
    # ... and in heap.check(), although a calibration read the error block after it
    assert a["check"] is not None and "rank 1, program 3 waited on flag 'faults.flags'[1]" in a["check"]
    assert "from peer 0 for 20.000 ms (4096 reads; last saw 0, waited for == 1)" in a["check"]
    assert a["after_check"] == 0
    for r in (0, 2):
        assert ranks[r]["A"]["check"] is None and ranks[r]["A"]["timeouts"] == {"count": 0, "waits": []}
    # the failed closing calibration is noted, with the alignment kept, on every rank; nothing raised
    for o in ranks.values():
        assert any(n.startswith("closing clock calibration did not complete (clock calibration of peer 1") and
                   n.endswith("alignment kept: the opening calibration's (offset only, no drift)") for n in o["A"]["notes"]), o["A"]


def test_the_codes_own_error_leaves_at_once_and_alone(ranks):
    assert ranks[2]["B"]["raised"] == "\"the code's own error\""
    for r in (0, 1):
        b = ranks[r]["B"]
        assert b["raised"] is None and b["seconds"] < 15, b
        assert any("closing clock calibration not run: rank 2 left with an error" in n for n in b["notes"]), b


def test_a_dead_rank_does_not_hold_the_others_and_the_gathered_capture_says_partial(ranks):
    for r in (0, 2):
        c = ranks[r]["C"]
        assert c["seconds"] < 30, f"rank {r} waited {c['seconds']:.1f} s for a dead rank (bound 60 s)"
        assert any(n.startswith("opening clock calibration not run: rank 1 did not arrive (its process is gone)")
                   for n in c["notes"]), c["notes"]
    assert ranks[2]["C"]["merged"] is None
    m = ranks[0]["C"]["merged"]
    assert m["ranks"] == [0, 2] and m["partial"] and m["missing"] == [1], m
    assert any("rank 1 did not arrive (its process is gone)" in n for n in m["notes"]), m["notes"]


def test_a_late_rank_gets_the_verdict_that_left_it_out(ranks):
    d0, d2 = ranks[0]["D"], ranks[2]["D"]
    assert d0["absent"] == d2["absent"] == (1, 2) and d0["dead"] == (1,) and not d0["complete"]
    assert d0["seconds"] < 3.0 and d2["seconds"] < 1.0, (d0, d2)


# ---------------------------------------------------------------------------------------------
# one process: the run id's sources, the heap's error block, the session's exit path
# ---------------------------------------------------------------------------------------------


def test_run_id_sources(monkeypatch, caplog):
    import ktrace.captures.identity as identity

    monkeypatch.setenv("KTRACE_RUN_ID", "given-7")
    assert identity.run_id() == "given-7"
    monkeypatch.delenv("KTRACE_RUN_ID")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    one = identity.run_id()
    assert one and one == identity.run_id()  # one per process
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setattr(identity, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="ktrace"):
        assert identity.run_id() is None
    assert "no way to agree on a run id" in caplog.text
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc")
    assert identity.run_id() == "torchelastic-abc"


def _host_heap(monkeypatch):
    """A host-backed heap of one rank (gloo on a fresh port, torn down by the caller)."""
    import torch.distributed as dist

    from ktrace.shmem import HeapConfig, SymmetricHeap

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    return SymmetricHeap(config=HeapConfig(size_bytes=1 << 20, backing="host"))


def test_heap_holds_timeouts_through_a_take_and_check_reports_both(monkeypatch):
    import torch.distributed as dist

    from ktrace.shmem import WaitTimeoutError

    heap = _host_heap(monkeypatch)
    try:
        flags = heap.zeros(2, dtype=torch.int32, name="f")
        assert heap.timeouts() == (0, []) and heap.hold_timeouts() == 0
        _fake_timeout(heap, program=5, flag_offset=heap.offset_of(flags), peer=0)
        assert heap.hold_timeouts() == 1  # moved to the host ...
        assert heap.take_timeouts() == (0, [])  # ... so a calibration's own read sees none
        _fake_timeout(heap, program=6, flag_offset=heap.offset_of(flags) + 4, peer=0)
        count, described = heap.timeouts()
        assert count == 2 and [t.program for t in described] == [5, 6]
        assert heap.take_timeouts()[0] == 1 and heap.timeouts()[0] == 1  # (taken: not kept)
        with pytest.raises(WaitTimeoutError, match=r"1 wait\(s\) timed out on rank 0:\n  rank 0, program 5 waited on flag 'f'\[0\]"):
            heap.check()
        assert heap.timeouts() == (0, [])
        _fake_timeout(heap, program=7, flag_offset=heap.offset_of(flags), peer=0)
        heap.hold_timeouts()
        heap.clear_timeouts()
        assert heap.timeouts() == (0, [])
    finally:
        dist.destroy_process_group()


class _NoHeap(Exception):
    pass


def test_leaving_a_capture_never_raises_but_the_codes_error(monkeypatch):
    """One rank, a host heap: timeouts kept, a closing calibration that fails noted, the code's
    own error the only thing raised (a calibration that fails at opening is noted too)."""
    import torch.distributed as dist

    import ktrace
    import ktrace.clock.calibrate as calibration

    heap = _host_heap(monkeypatch)
    try:
        flags = heap.zeros(2, dtype=torch.int32, name="g")
        fail = {"on": True}
        monkeypatch.setattr(calibration, "calibrate", _stand_in_calibration(fail))
        with ktrace.capture(heap=heap) as cap:
            _fake_timeout(heap, program=2, flag_offset=heap.offset_of(flags), peer=0)
        rc = cap.to_capture().ranks[0]
        assert rc.timeouts["count"] == 1 and heap.timeouts()[0] == 1
        assert rc.notes and "closing clock calibration did not complete" in rc.notes[0]
        heap.clear_timeouts()

        def broken(heap, phase="before", config=None):
            raise RuntimeError(f"{phase}: the calibration broke")

        monkeypatch.setattr(calibration, "calibrate", broken)
        with pytest.raises(_NoHeap):
            with ktrace.capture(heap=heap) as cap:
                raise _NoHeap()
        notes = cap.to_capture().ranks[0].notes
        assert len(notes) == 1 and notes[0].startswith("opening clock calibration did not complete (before: the calibration broke)")
        with ktrace.capture(heap=heap) as cap:
            pass
        notes = cap.to_capture().ranks[0].notes
        assert notes[1] == ("closing clock calibration did not complete (after: the calibration broke); no calibration kept: "
                            "this rank stays on its own clock (not aligned)")
    finally:
        dist.destroy_process_group()
