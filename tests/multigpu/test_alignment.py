"""Multi-GPU tier: one clock for all ranks.

A token ring: rank r waits for round k from rank r-1, then notifies rank r+1, thousands of
times. Every notify -> wait pair is a causal edge across two GPUs. After the clock model is
fitted from the calibration samples the session takes, no wait may appear to end before the
notify that released it (beyond the stored bound); on raw device clocks they do.

    python -m ktrace.testing.launch -n 4 -- python -m pytest -m multigpu tests/multigpu/test_alignment.py -q -s
"""

from __future__ import annotations

import time

import pytest
import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
import ktrace.shmem.language as ks

pytestmark = pytest.mark.multigpu

ROUNDS = 2000
RING_TIMEOUT_NS = tl.constexpr(5_000_000_000)


@ktrace.trace(events_per_program=lambda meta: 4 * meta["rounds"] + 4)
@triton.jit
def ring_kernel(flags, rounds, rank, world, heap_bases, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """Round k: rank 0 notifies rank 1 then waits for rank world-1; rank r > 0 waits for rank
    r-1 then notifies rank r+1 (mod world). ``flags[0]`` holds the last round seen."""
    kt = kl.init(ktrace_buf, KTRACE)
    nxt = (rank + 1) % world
    prv = (rank + world - 1) % world
    for k in range(1, rounds + 1):
        # (two one-sided ifs: an if/else whose branches both hold a spin loop does not compile)
        if rank == 0:
            kt = ks.notify(kt, flags, k, rank, nxt, heap_bases)
        kt = ks.wait(kt, flags, k, rank, prv, heap_bases, cmp="ge", timeout_ns=RING_TIMEOUT_NS)
        if rank != 0:
            kt = ks.notify(kt, flags, k, rank, nxt, heap_bases)


def _unaligned_model(model):
    """The same ranks, each left on its raw device clock (what merging without alignment does)."""
    import dataclasses

    from ktrace.clock import RankClock

    ranks = {r: RankClock(rank=r, tick_hz=rc.tick_hz, pivot_dev_ns=0, pivot_ns=0, method="unaligned") for r, rc in model.ranks.items()}
    return dataclasses.replace(model, ranks=ranks, method="unaligned", anchor="device")


def test_alignment_makes_the_ring_causal(heap, dist_env):
    import torch

    from ktrace.clock import check_causality, clock_model_of
    from ktrace.events import aligned_events

    rank, world = dist_env
    if world < 2:
        pytest.skip("needs two ranks")
    flags = heap.zeros(1, dtype=torch.int32, name="ring.flags")
    heap.barrier()
    with ktrace.capture(heap=heap) as cap:
        ring_kernel[(1,)](flags, ROUNDS, rank, world, heap.bases, num_warps=1)
    heap.check()  # raises, naming rank/program/flag/peer, if any wait timed out
    merged = cap.gather(dst=0)
    if rank != 0:
        return
    assert sorted(merged.ranks) == list(range(world)) and not merged.partial
    model = clock_model_of(merged)
    for r, rc in sorted(model.ranks.items()):
        print(
            f"rank {r}: {rc.method} offset {rc.offset_ns} ns drift {rc.drift_ppm:.3f} ppm "
            f"rtt(kept max) {rc.rtt_ns:.0f} ns rtt(min) {rc.rtt_min_ns:.0f} ns residual {rc.residual_ns:.1f} ns "
            f"bound {rc.error_bound_ns:.0f} ns kept {rc.n_kept}/{rc.n_samples}"
        )
    assert model.aligned and all(rc.method.startswith("pingpong") for r, rc in model.ranks.items() if r != model.reference_rank)
    ev = aligned_events(merged, model)
    rep = check_causality(ev, model)
    print("aligned:", rep.summary())
    assert rep.n_pairs == ROUNDS * world
    assert rep.timeouts == 0 and rep.unmatched_waits == 0 and rep.unmatched_notifies == 0
    assert rep.n_violations == 0, rep.summary()
    # residual alignment error estimated from the calibration (RMS about the fitted line)
    worst = max(rc.residual_ns for r, rc in model.ranks.items() if r != model.reference_rank)
    assert worst <= 100.0, f"residual alignment error {worst:.1f} ns > 100 ns"

    raw = _unaligned_model(model)
    raw_rep = check_causality(aligned_events(merged, raw), None)
    print("raw device clocks:", raw_rep.summary())
    # GPU clocks of one host are tens of µs to a millisecond apart; around a ring the offsets
    # sum to zero, so some hop runs backwards on raw clocks unless every offset is below a hop.
    assert raw_rep.n_violations > 0, "raw clocks showed no violation: the GPUs' clocks agree to within one hop"


def _offset_at(fit, t_ref_ns: float) -> float:
    """peer - ref device time (ns) at reference device time ``t_ref_ns``."""
    return fit.offset_ns + fit.drift * (t_ref_ns - fit.t0_ns)


def test_offsets_agree_when_the_reference_rank_changes(heap, dist_env):
    """Calibrate against rank 0 and against rank 1, interleaved, then compare each rank's
    offset to rank 1 implied by both at one instant (interpolation for both fits)."""
    from ktrace.clock import fit_pingpong
    from ktrace.clock.calibrate import CalibrationConfig, ping_pong

    rank, world = dist_env
    if world < 2:
        pytest.skip("needs two ranks")
    c0, c1 = CalibrationConfig(ref_rank=0), CalibrationConfig(ref_rank=1)
    s0 = ping_pong(heap, "before", c0)
    s1 = ping_pong(heap, "before", c1)
    time.sleep(0.2)
    s0 += ping_pong(heap, "after", c0)
    s1 += ping_pong(heap, "after", c1)
    if rank != 0:
        return
    hz = 1_000_000_000
    A = {p: fit_pingpong([s for s in s0 if s["peer"] == p], hz, hz) for p in range(1, world)}  # p - r0
    B = {p: fit_pingpong([s for s in s1 if s["peer"] == p], hz, hz) for p in range(world) if p != 1}  # p - r1
    t = A[1].t0_ns  # an instant inside both calibration windows, on rank 0's clock
    t1 = t + _offset_at(A[1], t)  # the same instant on rank 1's clock
    worst = 0.0
    for p in range(world):
        if p == 1:
            continue
        via0 = (_offset_at(A[p], t) if p != 0 else 0.0) - _offset_at(A[1], t)  # p - r1 from ref 0
        via1 = _offset_at(B[p], t1)  # p - r1 from ref 1
        bound = (A[1].rtt_ns + B[p].rtt_ns + (A[p].rtt_ns if p != 0 else 0.0)) / 2
        print(f"rank {p} - rank 1: {via0:.0f} ns (ref 0) vs {via1:.0f} ns (ref 1): differ by {via1 - via0:.0f} ns, bound {bound:.0f} ns")
        worst = max(worst, abs(via1 - via0))
        assert abs(via1 - via0) <= bound
    print(f"worst disagreement {worst:.0f} ns")
