"""Multi-GPU tier: clocks across nodes, simulated on one host.

Every GPU is treated as a node of its own (``CalibrationConfig(node="sim{rank}")``): the ranks are
aligned through the host chain only (GPU <-> host through pinned memory, host <-> host over a gloo
process group), while the heap ping-pong runs beside it in the same capture as a check
(``crosscheck=True``): the ground truth. Rank 1's host timestamps carry an injected offset and
drift (``HostClockSkew``) in every host reading its calibration takes, as if its node's host
clock were off. Between a token ring launched at the start of the capture and one launched after
a pause, the test compares where the chain puts rank 1 with where the ping-pong does, against
the bound the chain states; checks the injected host offset and drift came back within the host
leg's bound; shows that ignoring host clocks (host anchors only) lands far outside that bound;
and that the ring has no causality violation on the chain's clock.

    python -m ktrace.testing.launch -n 2 -- python -m pytest -m multigpu tests/multigpu/test_clock_chain.py -q -s
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

ROUNDS = 1024  # (a multiple of 16, like both bases: one compiled variant for both launches)
RING_TIMEOUT_NS = tl.constexpr(5_000_000_000)
SKEW_OFFSET_NS = 5_000_000  # rank 1's host clock: 5 ms ahead ...
SKEW_PPM = 50.0  # ... and running 50 ppm fast
PAUSE_S = 2.0  # between the two rings: the drift shows over it


@ktrace.trace(events_per_program=lambda meta: 4 * meta["rounds"] + 4)
@triton.jit
def chain_ring(flags, base, rounds, rank, world, heap_bases, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """Rounds ``base + 1 .. base + rounds`` of a token ring (as ``test_alignment``'s): rank 0
    notifies rank 1 then waits for rank world-1; rank r > 0 waits for rank r-1, then notifies r+1."""
    kt = kl.init(ktrace_buf, KTRACE)
    nxt = (rank + 1) % world
    prv = (rank + world - 1) % world
    for k in range(base + 1, base + rounds + 1):
        # (two one-sided ifs: an if/else whose branches both hold a spin loop does not compile)
        if rank == 0:
            kt = ks.notify(kt, flags, k, rank, nxt, heap_bases)
        kt = ks.wait(kt, flags, k, rank, prv, heap_bases, cmp="ge", timeout_ns=RING_TIMEOUT_NS)
        if rank != 0:
            kt = ks.notify(kt, flags, k, rank, nxt, heap_bases)


def test_host_chain_agrees_with_the_pingpong(heap, dist_env):
    import torch

    from ktrace.clock import check_causality, clock_model_of
    from ktrace.clock.calibrate import CalibrationConfig
    from ktrace.clock.hostclock import HostClockSkew
    from ktrace.events import aligned_events
    from tests import clock_sim

    rank, world = dist_env
    if world < 2:
        pytest.skip("needs two ranks")
    origin = heap.all_gather_object(time.time_ns())[0]  # (the skew's origin, the same on every rank)
    skew = HostClockSkew(rank=1, offset_ns=SKEW_OFFSET_NS, drift_ppm=SKEW_PPM, origin_ns=origin)
    cfg = CalibrationConfig(node="sim{rank}", crosscheck=True, host_skew=skew)
    flags = heap.zeros(1, dtype=torch.int32, name="chain.flags")
    heap.barrier()
    with ktrace.capture(heap=heap, calibration=cfg) as cap:
        chain_ring[(1,)](flags, 0, ROUNDS, rank, world, heap.bases, num_warps=1)
        heap.barrier()
        time.sleep(PAUSE_S)
        chain_ring[(1,)](flags, ROUNDS, ROUNDS, rank, world, heap.bases, num_warps=1)
    heap.check()  # raises, naming rank/program/flag/peer, if any wait timed out
    mine = cap.to_capture().ranks[rank]
    cs = mine.clock_samples
    cost = {ph: {k: round(v / 1e6, 2) for k, v in c.items()} for ph, c in cs["cost_ns"].items()}
    print(f"rank {rank}: path {cs.get('path')}, node {cs.get('node')}, GPU<->host "
          f"{'pinned exchange' if cs.get('gpu_host') else 'host anchors'}; calibration cost (ms): {cost}")
    for n in cs.get("notes") or []:
        print(f"rank {rank}: calibration note: {n}")
    assert mine.notes == [], mine.notes  # both calibrations completed
    assert cs["path"] == ("reference" if rank == 0 else "host-chain") and set(cs["edges"]) == {"before", "after"}
    merged = cap.gather(dst=0)
    if rank != 0:
        return
    assert sorted(merged.ranks) == list(range(world)) and not merged.partial
    model = clock_model_of(merged)  # as stored by the gather: the chain
    print("stored clock model:", model.bounds_text())
    for n in model.notes:
        print("clock note:", n)
    assert all(rc.method == "host-chain" for r, rc in model.ranks.items() if r != model.reference_rank), model.bounds_text()
    rows = clock_sim.compare(merged, skew)
    print("\n".join(clock_sim.lines(rows)))
    bad = clock_sim.check(rows, injected=True)
    assert not bad, "\n".join(bad)
    rep = check_causality(aligned_events(merged, model), model)
    print("ring on the chain's clock:", rep.summary())
    assert rep.n_pairs == 2 * ROUNDS * world and rep.timeouts == 0 and rep.unmatched_waits == 0
    assert rep.n_violations == 0, rep.summary()
