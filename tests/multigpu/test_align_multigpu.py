"""Multi-GPU tier: ``ktrace.shmem.align_launch`` releases the ranks' launches together.

Every round, the ranks meet at a host barrier and then reach their launch at different times on
purpose: rank r's host sleeps r x 300 µs first (what host jitter does, larger). A one-program
traced kernel records its start; the ranks' first events of each launch, on the common clock of
the capture's calibration, are ``ktrace.run.start_skew``'s. Released by a host barrier alone the
ranks start hundreds of µs apart (the control: the test can fail); with the device barrier within
10 µs, with the gate opened by the ``with`` block and with the hold alone, on a ktrace heap and
on the small torch symmetric-memory buffer ktrace makes without one.

    python -m ktrace.testing.launch -n 4 -- python -m pytest -m multigpu tests/multigpu/test_align_multigpu.py -q -s
"""

from __future__ import annotations

import time

import pytest
import triton
import triton.language as tl

import ktrace
import ktrace.language as kl

pytestmark = pytest.mark.multigpu

ROUNDS = 12
#: Host delay per rank before its launch (s): rank r waits r times this.
STAGGER_S = 300e-6
#: The skew the issue asks for (ns).
WITHIN_NS = 10_000


@ktrace.trace(events_per_program=4)
@triton.jit
def started(out, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """One mark at the start of the launch; a store so that the launch does something."""
    kt = kl.init(ktrace_buf, KTRACE)
    kt = kl.mark(kt, "started", 0)
    tl.store(out, 1)


def _skews(heap, mode: str) -> tuple[list[int], object]:
    """Per round, how far apart the ranks' launches started (ns), and this rank's barrier counts."""
    import torch
    import torch.distributed as tdist

    from ktrace import run
    from ktrace.shmem import align_launch, aligner_for

    rank = heap.rank
    out = torch.zeros(1, dtype=torch.int32, device=heap.device)
    h = heap if mode != "no heap" else None
    with ktrace.capture():  # compile the traced variant and the barrier, every rank
        with align_launch(h, hold_us=5_000):
            started[(1,)](out, num_warps=1)
    heap.barrier()
    aligner = aligner_for(h) if mode != "host barrier" else None
    before = aligner.stats() if aligner else None
    with ktrace.capture(heap=heap) as cap:
        for _ in range(ROUNDS):
            heap.barrier()
            tdist.barrier()
            time.sleep(STAGGER_S * rank)
            if mode == "host barrier":
                started[(1,)](out, num_warps=1)
            elif mode == "hold":  # no gate: every rank waits the hold after its barrier started
                align_launch(h, hold_us=5_000)
                started[(1,)](out, num_warps=1)
            else:
                with align_launch(h, hold_us=5_000):
                    started[(1,)](out, num_warps=1)
        torch.cuda.synchronize()
    merged = cap.gather(dst=0)
    stats = None
    if aligner:
        after = aligner.stats()
        stats = (after.rounds - before.rounds, after.released_by_hold - before.released_by_hold, after.missed - before.missed)
    if rank != 0:
        return [], stats
    (row,) = run.start_skew(merged)
    return row["skew_ns"], stats


@pytest.mark.parametrize("mode", ["gate", "hold", "no heap", "host barrier"])
def test_launches_start_together(heap, dist_env, mode):
    from test_shmem_multigpu import _all_ok  # (this folder is on the path: pytest puts it there)

    rank, world = dist_env
    if world < 2:
        pytest.skip("needs two ranks")
    skews, stats = _skews(heap, mode)
    errs = []
    if stats is not None:
        rounds, by_hold, missed = stats
        want_hold = ROUNDS if mode == "hold" else 0  # (the gate opens right after the launch is queued)
        if (rounds, by_hold, missed) != (ROUNDS, want_hold, 0):
            errs.append(f"barrier rounds {rounds}, released by the hold {by_hold} (expected {want_hold}), missed {missed}")
    if rank == 0:
        print(f"{mode}: start skew per round (µs): {[round(s / 1e3, 1) for s in skews]}")
        if len(skews) != ROUNDS:
            errs.append(f"{len(skews)} rounds measured")
        elif mode == "host barrier":
            # the control: the hosts' stagger shows (rank W-1 queued (W-1) x 300 µs after rank 0)
            if min(skews) < 0.5 * STAGGER_S * 1e9 * (world - 1):
                errs.append(f"a host barrier left the ranks only {min(skews)} ns apart: the stagger did not show")
        elif max(skews) >= WITHIN_NS:
            errs.append(f"released by the device barrier ({mode}), the ranks started up to {max(skews)} ns apart")
    _all_ok(heap, not errs, "; ".join(errs))
