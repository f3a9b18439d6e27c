"""One rank of ``test_rank_death.py`` (two ranks or more, each started with the rank environment).

Every rank opens ``ktrace.capture(heap=heap)`` (the opening calibration runs); then the last rank
dies (``killed``: SIGKILL; ``raises``: its code raises inside the block and the process ends with
status 1) while rank 0 waits, bounded, for a notify the last rank never sends (the ranks between
launch nothing). The living ranks then leave the block; rank 0 saves its own capture; they gather
(the last rank is gone) and rank 0 writes what it saw as JSON.

    python tests/multigpu/_rank_death_worker.py OUT_DIR killed|raises
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
import ktrace.shmem.language as ks
from ktrace.clock.calibrate import CalibrationConfig
from ktrace.shmem import SymmetricHeap, WaitTimeoutError, init_distributed

#: Bound of rank 0's wait for the handoff (a compile-time constant: one value for every launch).
TIMEOUT_NS = 200_000_000
#: How long the ranks wait for each other at the edges of the capture and in gather.
PEER_TIMEOUT_S = 60.0


@ktrace.trace(events_per_program=4)
@triton.jit
def handoff(flag, value, rank, sender, heap_bases, TIMEOUT_NS: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """Rank ``sender`` writes ``value`` into rank 0's flag; rank 0 waits for it (bounded)."""
    kt = kl.init(ktrace_buf, KTRACE)
    if rank == sender:
        kt = ks.notify(kt, flag, value, rank, 0, heap_bases, name="death.handoff")
    if rank == 0:
        kt = ks.wait(kt, flag, value, rank, sender, heap_bases, timeout_ns=TIMEOUT_NS, name="death.handoff")


def _warm_up(heap, flag, value: int, sender: int) -> None:
    """Compile the variant of ``handoff`` rank 0 and the sender launch with a handoff that
    succeeds: the sender sends first, rank 0 waits after a barrier (its flag is set already,
    however long it compiles)."""
    if heap.rank == sender:
        handoff[(1,)](flag, value, heap.rank, sender, heap.bases, TIMEOUT_NS=TIMEOUT_NS, num_warps=1)
    heap.barrier()
    if heap.rank == 0:
        handoff[(1,)](flag, value, heap.rank, sender, heap.bases, TIMEOUT_NS=TIMEOUT_NS, num_warps=1)
    heap.barrier()
    heap.check()


def main(out_dir: Path, mode: str) -> int:
    rank, world = init_distributed()
    logging.basicConfig(level=logging.INFO, format=f"[rank {rank}] %(levelname)s %(name)s: %(message)s")
    if world < 2:
        raise SystemExit(f"run with two ranks or more, not {world}")
    victim = world - 1
    heap = SymmetricHeap(64 << 20)
    flag = heap.zeros(1, dtype=torch.int32, name="death.flag")
    with ktrace.capture():  # (the traced variant is the one the run launches)
        _warm_up(heap, flag, 3, victim)
    heap.barrier()
    t0 = time.monotonic()
    try:
        with ktrace.capture(heap=heap, peer_timeout_s=PEER_TIMEOUT_S,
                            calibration=CalibrationConfig(rounds=200, anchor_repeats=8)) as cap:
            if rank == victim:
                time.sleep(1.0)  # (dies mid-run, after the opening calibration's last collective)
                if mode == "killed":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError(f"rank {rank} fails on purpose")
            if rank == 0:
                handoff[(1,)](flag, 4, rank, victim, heap.bases, TIMEOUT_NS=TIMEOUT_NS, num_warps=1)
    except RuntimeError as e:  # the last rank, "raises": its own error, and nothing else, came out
        logging.getLogger("ktrace").error("[rank %d] %s", rank, e)
        logging.shutdown()
        os._exit(1)
    out = {"left_s": time.monotonic() - t0}
    mine = cap.to_capture()
    out["notes"] = mine.ranks[rank].notes
    out["timeouts"] = mine.ranks[rank].timeouts
    if rank == 0:
        out["own_file"] = str(cap.save(out_dir / "rank0.ktrace"))
    t1 = time.monotonic()
    merged = cap.gather(dst=0)
    out["gather_s"] = time.monotonic() - t1
    if rank != 0:  # (the ranks between: they lived, launched nothing and gathered)
        print(f"rank {rank} done: {out}", flush=True)
        logging.shutdown()
        os._exit(0)
    out["merged"] = str(ktrace.write_capture(out_dir / "merged.ktrace", merged)) if merged is not None else None
    try:
        heap.check()
        out["check"] = None
    except WaitTimeoutError as e:
        out["check"] = str(e)
    (out_dir / "rank0.json").write_text(json.dumps(out, indent=1))
    print(f"rank 0 done: {out}", flush=True)
    logging.shutdown()
    os._exit(0)  # (no teardown of a process group whose other rank is gone)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2]))
