"""The flight recorder across ranks (``-m multigpu``, any world size of 2 or more). Ranks pair up
(0 with 1, 2 with 3, ...; an odd last rank runs no kernel but takes part in the capture). In the
pair of ranks 0 and 1, rank 1's producer skips its notify of round 5, so rank 0's consumer spins
for ever on a flag only rank 1 sends; the other pairs hand off every round. Rank 0's watchdog
dumps; rank 1 (whose kernel ends) dumps on SIGUSR1; rank 0 releases its kernel from the host; the
two dumps merged name the cross-rank root and what made each rank's dump."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.multigpu


def test_each_rank_dumps_and_the_merge_names_the_cross_rank_root(dist_env, heap):
    import torch

    import ktrace
    from ktrace.analysis.live import live_report
    from ktrace.captures import merge_captures, read_capture
    from ktrace.flight.recorder import FlightConfig
    from tests.flight_kernels import cross_handoff

    rank, world = dist_env
    if world < 2:
        pytest.skip("needs a peer")
    peer = rank ^ 1 if rank ^ 1 < world else -1  # (-1: the odd last rank, without a partner)
    rounds, skip = 8, 5
    flags = heap.zeros(16, dtype=torch.int32, name="flags")
    data = torch.zeros(256, device="cuda")
    side = torch.cuda.Stream()  # before the launch
    release = torch.full((1,), 1 << 30, dtype=torch.int32, device="cuda")
    run_dir = Path(tempfile.gettempdir()) / f"ktrace-flight-2rank-{heap.all_gather_object(time.time_ns())[0]}"
    cfg = FlightConfig(slots=64, stall_s=3.0, poll_s=0.05, out_dir=str(run_dir), registry=str(run_dir / "registry"))
    heap.barrier()
    with ktrace.capture(flight_recorder=cfg, heap=heap) as cap:
        if peer >= 0:
            cross_handoff[(2,)](flags, data, rounds, skip if rank == 1 else rounds, 0, rank, peer, heap.bases)
        rec = cap._flight
        if rank == 0:
            t0 = time.monotonic()
            while not rec.dumps and time.monotonic() - t0 < 30:
                time.sleep(0.05)
            assert rec.dumps, "rank 0's watchdog did not dump"
            (run_dir / "rank0-dumped").write_text("1")
            t0 = time.monotonic()
            while not (run_dir / "rank1-dumped").exists() and time.monotonic() - t0 < 30:
                time.sleep(0.05)
            with torch.cuda.stream(side):
                flags[:1].copy_(release, non_blocking=True)  # release the spinning consumer from the host
        elif rank == 1:
            t0 = time.monotonic()
            while not (run_dir / "rank0-dumped").exists() and time.monotonic() - t0 < 30:
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGUSR1)  # what `ktrace dump` sends
            t0 = time.monotonic()
            while not rec.dumps and time.monotonic() - t0 < 10:
                time.sleep(0.05)
            assert rec.dumps, "rank 1 did not dump on SIGUSR1"
            (run_dir / "rank1-dumped").write_text("1")
        torch.cuda.synchronize()
    paths = heap.all_gather_object(str(rec.dumps[0]) if rec.dumps else None)
    heap.barrier()
    if rank == 0:
        merged = merge_captures([read_capture(p) for p in paths[:2]])
        rep = live_report(merged)
        # (the flag as the heap held it at the dump is read too: 5, what the waiter last read)
        assert rep.headline.startswith(
            "HUNG at the dump (rank 0: watchdog; rank 1: signal): rank 0 program 1 waits on flag 'flags'[0] >= 6 "
            "(last read 5; 5 in the heap at the dump) from rank 1 program 0, which never sent it "
            "(its last notify of that flag wrote 5)"), rep.headline
