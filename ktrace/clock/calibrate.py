"""Clock calibration samples: flag ping-pong over the symmetric heap, and host anchors.

GPU timers are not synchronised across devices (offsets of tens of µs to a millisecond and drift
of up to ~10 ppm were measured between GPUs of one host). To put ranks on one clock, a reference
rank exchanges flags with each other rank many times while both read their own timer around each
exchange (NTP-style)::

    ref:  t1 = now(); write ping on peer ............................ see pong; t4 = now()
    peer:                      see ping; t2 = now(); t3 = now(); write pong on ref

``offset ≈ ((t2 - t1) + (t3 - t4)) / 2`` with error bounded by half the round trip
``(t4 - t1) - (t3 - t2)``; the best rounds give ~100 ns. Fitting offset and drift from samples taken
before and after the traced work is ``ktrace.clock.model``'s job; this module only measures.

Formats (what ``ktrace.clock.model`` reads):

* :func:`ping_pong` returns, on every rank, one dict per peer::

      {"ref_rank": int, "peer": int, "phase": "before" | "after",
       "t1": [...], "t2": [...], "t3": [...], "t4": [...]}   # raw timer ticks, one per round

  t1/t4 are ticks of the reference rank's timer, t2/t3 of the peer's.
* :func:`host_anchor` returns this rank's ``{"host_before_ns": [...], "dev_ticks": [...],
  "host_after_ns": [...]}``: a device timer read bracketed by ``time.time_ns()`` around the launch
  and a device synchronisation (ties the device timer to the host's wall clock, coarsely).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import triton
import triton.language as tl

import ktrace.language as kl
import ktrace.shmem.language as ks

log = logging.getLogger("ktrace")

PHASES = ("before", "after")


@dataclass(frozen=True)
class CalibrationConfig:
    """How many round trips and how long to wait for a peer.

    Args:
        rounds: round trips per peer (the best few percent are what a fit uses).
        ref_rank: the rank every other rank is measured against.
        anchor_repeats: host anchor samples per rank.
        timeout_ns: bound of each flag wait (compile-time constant of the kernel).
    """

    rounds: int = 2000
    ref_rank: int = 0
    anchor_repeats: int = 32
    timeout_ns: int = 10_000_000_000

    def __post_init__(self):
        if self.rounds < 1 or self.anchor_repeats < 1:
            raise ValueError(f"rounds and anchor_repeats must be >= 1: {self}")
        if self.ref_rank < 0:
            raise ValueError(f"ref_rank must be >= 0, got {self.ref_rank}")
        if self.timeout_ns <= 0:
            raise ValueError(f"timeout_ns must be positive, got {self.timeout_ns}")


@triton.jit
def _ping_pong_kernel(flags, out, rank, peer, heap_bases, rounds, IS_REF: tl.constexpr, TIMEOUT_NS: tl.constexpr):
    # flags[0]: ping (written by the reference on the peer); flags[1]: pong (peer -> reference).
    # One program, one warp: the exchange is a single thread's store seen by a spinning warp.
    kt = kl.init(None, 0)
    for i in range(rounds):
        v = i + 1
        if IS_REF:
            t1 = kl.now()
            ks.atomic_xchg(flags, v, rank, peer, heap_bases, sem="release", scope="sys")
            kt = ks.wait(kt, flags + 1, v, rank, peer, heap_bases, timeout_ns=TIMEOUT_NS, name="clock.pong")
            t4 = kl.now()
            tl.store(out + 2 * i, t1)
            tl.store(out + 2 * i + 1, t4)
        else:
            kt = ks.wait(kt, flags, v, rank, peer, heap_bases, timeout_ns=TIMEOUT_NS, name="clock.ping")
            t2 = kl.now()
            t3 = kl.now()
            ks.atomic_xchg(flags + 1, v, rank, peer, heap_bases, sem="release", scope="sys")
            tl.store(out + 2 * i, t2)
            tl.store(out + 2 * i + 1, t3)


@triton.jit
def _now_kernel(out):
    tl.store(out, kl.now())


def host_anchor(device=None, repeats: int = 32) -> dict:
    """Read the device timer ``repeats`` times, each bracketed by host wall-clock reads.

    Each sample: ``host_before_ns`` just before the launch, ``dev_ticks`` read by the kernel,
    ``host_after_ns`` after ``torch.cuda.synchronize``. The kernel is compiled (and launched once)
    before the samples, so compile time is not in them.
    """
    import torch

    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    out = torch.zeros(repeats + 1, dtype=torch.int64, device=device)
    with torch.cuda.device(device):
        _now_kernel[(1,)](out[repeats:], num_warps=1)
        torch.cuda.synchronize(device)
        before, after = [], []
        for i in range(repeats):
            before.append(time.time_ns())
            _now_kernel[(1,)](out[i:], num_warps=1)
            torch.cuda.synchronize(device)
            after.append(time.time_ns())
    return {"host_before_ns": before, "dev_ticks": out[:repeats].cpu().tolist(), "host_after_ns": after}


def ping_pong(heap, phase: str = "before", config: CalibrationConfig | None = None) -> list[dict]:
    """Measure the reference rank against every other rank of ``heap``'s group. Collective.

    Peers are measured one at a time (the others wait at the heap's barrier), so each exchange
    has the link to itself. Waits of earlier kernels that timed out stay reported by
    ``heap.timeouts()`` and ``heap.check()`` (they are held on the host first,
    ``heap.hold_timeouts``); only the calibration's own timeouts decide whether it completed.

    Args:
        heap: a :class:`ktrace.shmem.SymmetricHeap` (a small flag tensor is allocated on it).
        phase: "before" or "after" the traced work.
        config: rounds, reference rank, wait bound.

    Returns:
        On every rank, one sample dict per peer (see the module docstring), in peer order.

    Raises:
        ktrace.shmem.WaitTimeoutError: on every rank, if a flag never arrived within the bound.
    """
    import torch

    from ktrace.shmem.heap import WaitTimeoutError

    cfg = config or CalibrationConfig()
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    if cfg.ref_rank >= heap.world_size:
        raise ValueError(f"ref_rank {cfg.ref_rank} is not a rank of a group of {heap.world_size}")
    if heap.device.type != "cuda":
        raise RuntimeError("clock calibration runs on GPUs (the heap has no device memory)")
    torch.cuda.synchronize(heap.device)
    held = heap.hold_timeouts()  # earlier kernels' timeouts: kept for heap.check(), not ours
    if held:
        log.warning("[rank %d] clock calibration (%s): %d earlier timed-out wait(s) kept for heap.check()", heap.rank, phase, held)
    flags = heap.zeros(2, dtype=torch.int32, name="ktrace.clock.flags")
    out = torch.zeros(cfg.rounds * 2, dtype=torch.int64, device=heap.device)
    mine: dict[int, tuple[list, list]] = {}  # partner -> (first, second) timestamps of each round
    for peer in range(heap.world_size):
        if peer == cfg.ref_rank:
            continue
        flags.zero_()
        heap.barrier()
        active = heap.rank in (cfg.ref_rank, peer)
        if active:
            other = peer if heap.rank == cfg.ref_rank else cfg.ref_rank
            _ping_pong_kernel[(1,)](
                flags, out, heap.rank, other, heap.bases, cfg.rounds,
                IS_REF=heap.rank == cfg.ref_rank, TIMEOUT_NS=cfg.timeout_ns, num_warps=1,
            )
        heap.barrier()
        count, described = heap.take_timeouts()
        reports = heap.all_gather_object((count, [str(t) for t in described]))
        if any(c for c, _ in reports):
            msg = "; ".join(s for _, ss in reports for s in ss)
            raise WaitTimeoutError(f"clock calibration of peer {peer} against rank {cfg.ref_rank} did not complete: {msg}", described, count)
        if active:
            pairs = out.view(-1, 2).cpu()
            mine[peer] = (pairs[:, 0].tolist(), pairs[:, 1].tolist())
    everyone = heap.all_gather_object(mine)
    samples = []
    for peer in range(heap.world_size):
        if peer == cfg.ref_rank:
            continue
        t1, t4 = everyone[cfg.ref_rank][peer]
        t2, t3 = everyone[peer][peer]
        samples.append({"ref_rank": cfg.ref_rank, "peer": peer, "phase": phase, "t1": t1, "t2": t2, "t3": t3, "t4": t4})
    log.info("[rank %d] clock calibration (%s): %d peer(s) x %d rounds", heap.rank, phase, len(samples), cfg.rounds)
    return samples


def calibrate(heap, phase: str = "before", config: CalibrationConfig | None = None) -> dict:
    """Ping-pong samples for every peer and host anchors of every rank. Collective.

    Returns:
        ``{"samples": [per-peer dicts of ping_pong], "anchors": {rank: host_anchor dict}}``, the
        same on every rank.
    """
    cfg = config or CalibrationConfig()
    samples = ping_pong(heap, phase, cfg)
    anchor = host_anchor(heap.device, cfg.anchor_repeats)
    anchors = heap.all_gather_object(anchor)
    return {"samples": samples, "anchors": {r: a for r, a in enumerate(anchors)}}
