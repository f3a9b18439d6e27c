"""Clock calibration samples: flag ping-pong over the symmetric heap, host anchors, and the host
chain between nodes.

GPU timers are not synchronised across devices (offsets of tens of µs to a millisecond and drift
of up to ~10 ppm were measured between GPUs of one host). To put ranks on one clock, a reference
rank exchanges flags with each other rank many times while both read their own timer around each
exchange (NTP-style)::

    ref:  t1 = now(); write ping on peer ............................ see pong; t4 = now()
    peer:                      see ping; t2 = now(); t3 = now(); write pong on ref

``offset ≈ ((t2 - t1) + (t3 - t4)) / 2`` with error bounded by half the round trip
``(t4 - t1) - (t3 - t2)``; the best rounds give ~100 ns. Fitting offset and drift from samples taken
before and after the traced work is ``ktrace.clock.model``'s job; this module only measures.

The heap reaches only the GPUs of one node. Between nodes (``ktrace.clock.paths`` decides who
takes which path, from ``ktrace.dist_env.node_name``) the same exchange runs twice more, with
other clocks on its two sides:

* GPU <-> host (:func:`gpu_host_exchange`): the host writes a ping into pinned host memory that a
  one-warp kernel spins on; the kernel answers with a pong there. t1/t4 are host wall-clock
  nanoseconds, t2/t3 device ticks. Without it (AMD, or when it fails) the launch-bracketed host
  anchors (:func:`host_anchor`) serve, more coarsely.
* host <-> host (:func:`host_exchange`): the reference rank's process and one process per other
  node send a one-word tensor back and forth over a gloo process group; all four stamps are host
  wall-clock nanoseconds (``time.time_ns``, the clock PTP and NTP daemons discipline).

Formats (what ``ktrace.clock.model`` reads):

* :func:`ping_pong` returns, on every rank, one dict per measured pair::

      {"ref_rank": int, "peer": int, "phase": "before" | "after",
       "t1": [...], "t2": [...], "t3": [...], "t4": [...]}   # raw timer ticks, one per round

  t1/t4 are ticks of the ``ref_rank``'s timer, t2/t3 of the peer's (global ranks). A pair
  measured only as a check carries ``"check": True``.
* :func:`host_anchor` returns this rank's ``{"host_before_ns": [...], "dev_ticks": [...],
  "host_after_ns": [...]}``: a device timer read bracketed by ``time.time_ns()`` around the launch
  and a device synchronisation (ties the device timer to the host's wall clock, coarsely).
* :func:`gpu_host_exchange`: ``{"phase", "t1": [host ns], "t2": [dev ticks], "t3": [dev ticks],
  "t4": [host ns], "transport": "pinned"}``.
* :func:`host_exchange`: on each chained rank, ``{"ref_rank", "peer", "phase", "t1".."t4": [host
  ns], "transport": "gloo"}`` (t1/t4 on the reference rank's host).

:func:`calibrate` runs them all for one phase and returns what ``ktrace.clock.paths.rank_samples``
turns into a rank's ``clock_samples``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable

import triton
import triton.language as tl
from triton.language import core

import ktrace.language as kl
import ktrace.shmem.language as ks

from .hostclock import HostClockSkew, host_clock, host_clock_state, skew_from_env
from .paths import PHASES, ClockPlan, plan_paths

log = logging.getLogger("ktrace")

#: ``KTRACE_CLOCK_CROSSCHECK=1``: also ping-pong across nodes over the heap, kept as a check only.
CROSSCHECK_ENV = "KTRACE_CLOCK_CROSSCHECK"


@dataclass(frozen=True)
class CalibrationConfig:
    """How many round trips, how long to wait for a peer, and how nodes are told apart.

    Args:
        rounds: round trips per peer of the heap ping-pong (the best few percent are what a fit uses).
        ref_rank: the rank every other rank is measured against (global rank).
        anchor_repeats: host anchor samples per rank.
        timeout_ns: bound of each flag wait (compile-time constant of the kernel).
        gpu_host_rounds: round trips of the GPU<->host exchange through pinned host memory, on
            the ranks at the ends of a host chain (0: use the launch-bracketed host anchors).
        host_rounds: round trips of the host exchange per chained node (over ``torch.distributed``).
        host_timeout_s: how long the host exchange and the GPU<->host exchange may wait for the
            other side.
        node: this rank's node name, as a template (``"sim{rank}"``); None: ``$KTRACE_NODE``, else
            the host name (``ktrace.dist_env.node_name``).
        crosscheck: also ping-pong the reference against the ranks of other nodes that its heap
            reaches, kept as a check (not used for alignment unless asked); None:
            ``$KTRACE_CLOCK_CROSSCHECK``.
        host_skew: simulation only: add this offset + drift to one rank's host timestamps
            (:class:`ktrace.clock.hostclock.HostClockSkew`); None: ``$KTRACE_CLOCK_SKEW``.
    """

    rounds: int = 2000
    ref_rank: int = 0
    anchor_repeats: int = 32
    timeout_ns: int = 10_000_000_000
    gpu_host_rounds: int = 1000
    host_rounds: int = 200
    host_timeout_s: float = 60.0
    node: str | None = None
    crosscheck: bool | None = None
    host_skew: HostClockSkew | None = None

    def __post_init__(self):
        if self.rounds < 1 or self.anchor_repeats < 1:
            raise ValueError(f"rounds and anchor_repeats must be >= 1: {self}")
        if self.ref_rank < 0:
            raise ValueError(f"ref_rank must be >= 0, got {self.ref_rank}")
        if self.timeout_ns <= 0:
            raise ValueError(f"timeout_ns must be positive, got {self.timeout_ns}")
        if self.gpu_host_rounds < 0 or self.host_rounds < 1:
            raise ValueError(f"gpu_host_rounds must be >= 0 and host_rounds >= 1: {self}")
        if not self.host_timeout_s > 0:
            raise ValueError(f"host_timeout_s must be positive, got {self.host_timeout_s}")

    def crosscheck_on(self) -> bool:
        if self.crosscheck is not None:
            return bool(self.crosscheck)
        return os.environ.get(CROSSCHECK_ENV, "").strip().lower() not in ("", "0", "false", "off", "no")

    def skew(self) -> HostClockSkew | None:
        return self.host_skew if self.host_skew is not None else skew_from_env()


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


@core.extern
def _store_release_sys(ptr, value, _semantic=None):
    """``st.release.sys`` of a 32-bit value (every thread stores the same value): a plain store
    that host memory sees, ordered after this thread's earlier stores; no atomic, which PCIe
    hosts need not support."""
    return core.inline_asm_elementwise(
        "st.release.sys.global.b32 [$1], $2;\n\tmov.u32 $0, 0;", "=r,l,r,~{memory}", [ptr, value],
        dtype=core.int32, is_pure=False, pack=1, _semantic=_semantic,
    )


@triton.jit
def _gpu_host_kernel(flags, out, rounds, TIMEOUT_NS: tl.constexpr):
    """The GPU side of the GPU<->host exchange (NVIDIA; one program of one warp).

    ``flags`` is pinned host memory: ``flags[0]`` the host's ping, ``flags[1]`` this kernel's
    pong. Round ``i``: spin until the ping reads ``i + 1``, read the timer twice (t2, t3), store
    them in ``out`` (device memory), then release the pong ``i + 1`` to the host. Past
    ``TIMEOUT_NS`` since the kernel started, every remaining round answers -1 at once: the host
    then stops and uses its host anchors instead.
    """
    t_start = kl.now()
    for i in range(rounds):
        v = i + 1
        seen = ks.load_acquire(flags, "sys")
        t2 = kl.now()
        stop = (seen == v) | ((t2 - t_start) > TIMEOUT_NS)
        while not stop:
            seen = ks.load_acquire(flags, "sys")
            t2 = kl.now()
            stop = (seen == v) | ((t2 - t_start) > TIMEOUT_NS)
        t3 = kl.now()
        tl.store(out + 2 * i, t2)
        tl.store(out + 2 * i + 1, t3)
        _store_release_sys(flags + 1, tl.where(seen == v, v, -1))


def host_anchor(device=None, repeats: int = 32, *, clock: Callable[[], int] = time.time_ns) -> dict:
    """Read the device timer ``repeats`` times, each bracketed by host wall-clock reads.

    Each sample: ``host_before_ns`` just before the launch, ``dev_ticks`` read by the kernel,
    ``host_after_ns`` after ``torch.cuda.synchronize``. The kernel is compiled (and launched once)
    before the samples, so compile time is not in them.

    Args:
        device: the GPU (default: the current one).
        repeats: samples.
        clock: the host clock to read (``time.time_ns``; a simulation's skewed clock).
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
            before.append(clock())
            _now_kernel[(1,)](out[i:], num_warps=1)
            torch.cuda.synchronize(device)
            after.append(clock())
    return {"host_before_ns": before, "dev_ticks": out[:repeats].cpu().tolist(), "host_after_ns": after}


def gpu_host_exchange(device=None, phase: str = "before", rounds: int = 1000, *, clock: Callable[[], int] = time.time_ns,
                      timeout_s: float = 10.0) -> dict:
    """Measure this GPU's timer against the host clock through pinned host memory (NVIDIA).

    The host stamps t1, writes ping ``i + 1`` into a pinned word; the kernel (:func:`_gpu_host_kernel`)
    sees it, stamps t2 and t3 on the device timer and writes pong ``i + 1`` into the next word; the
    host sees it and stamps t4. Each round's offset estimate is off by at most half its round
    trip ``(t4 - t1) - (t3 - t2)``, which here is two PCIe crossings and the host loop's reads,
    not a kernel launch. A short exchange first compiles the kernel and checks that the GPU sees
    the host's writes.

    Args:
        device: the GPU (default: the current one).
        phase: "before" or "after".
        rounds: round trips.
        clock: the host clock (``time.time_ns``; a simulation's skewed clock).
        timeout_s: give up (and say so) when a round takes longer than this in all.

    Returns:
        ``{"phase", "t1", "t2", "t3", "t4", "transport": "pinned"}`` (t1/t4 host ns, t2/t3 ticks).

    Raises:
        RuntimeError: not an NVIDIA GPU, or the exchange did not complete (the kernel timed out).
    """
    import numpy as np
    import torch

    if torch.version.hip is not None:
        raise RuntimeError("the GPU<->host exchange is written for NVIDIA GPUs; host anchors serve on AMD")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    timeout_ns = int(timeout_s * 1e9)

    def run(n: int):
        flags = torch.zeros(2, dtype=torch.int32, pin_memory=True)
        words = flags.numpy()  # the same pinned memory, read and written by the host without torch
        out = torch.zeros(2 * n, dtype=torch.int64, device=device)
        t1 = np.zeros(n, np.int64)
        t4 = np.zeros(n, np.int64)
        with torch.cuda.device(device):
            torch.cuda.synchronize(device)
            _gpu_host_kernel[(1,)](flags, out, n, TIMEOUT_NS=timeout_ns, num_warps=1)
            deadline = time.monotonic() + timeout_s + 1.0
            failed = ""
            for i in range(n):
                v = i + 1
                t1[i] = clock()
                words[0] = v
                spins = 0
                while True:
                    seen = int(words[1])
                    if seen == v:
                        break
                    if seen < 0:
                        failed = f"the GPU gave up waiting for the host's ping {v} after {timeout_s:g} s"
                        break
                    spins += 1
                    if spins & 1023 == 0 and time.monotonic() > deadline:
                        failed = f"no pong {v} from the GPU within {timeout_s:g} s"
                        break
                t4[i] = clock()
                if failed:
                    break
            torch.cuda.synchronize(device)  # (the kernel ends by its own bound at the latest)
        if failed:
            raise RuntimeError(f"GPU<->host exchange through pinned memory failed: {failed}")
        pairs = out.view(-1, 2).cpu()
        return t1.tolist(), pairs[:, 0].tolist(), pairs[:, 1].tolist(), t4.tolist()

    run(8)  # compile, and see that the GPU sees the host's writes
    t1, t2, t3, t4 = run(rounds)
    return {"phase": phase, "t1": t1, "t2": t2, "t3": t3, "t4": t4, "transport": "pinned"}


def ping_pong(heap, phase: str = "before", config: CalibrationConfig | None = None, pairs=None, *, ranks=None,
              check: bool = False) -> list[dict]:
    """Measure pairs of ranks of ``heap``'s group against each other. Collective over the heap.

    Pairs are measured one at a time (the others wait at the heap's barrier), so each exchange
    has the link to itself. Waits of earlier kernels that timed out stay reported by
    ``heap.timeouts()`` and ``heap.check()`` (they are held on the host first,
    ``heap.hold_timeouts``); only the calibration's own timeouts decide whether it completed.

    Args:
        heap: a :class:`ktrace.shmem.SymmetricHeap` (a small flag tensor is allocated on it).
        phase: "before" or "after" the traced work.
        config: rounds, reference rank, wait bound.
        pairs: ``(ref, peer)`` heap ranks to measure, in order (default: ``config.ref_rank``
            against every other rank of the heap). The same on every rank of the heap.
        ranks: the global rank of each heap rank (default: the heap's own numbering); the
            samples name global ranks.
        check: mark the samples as a check (not used for alignment unless asked).

    Returns:
        On every rank, one sample dict per pair (see the module docstring), in pair order.

    Raises:
        ktrace.shmem.WaitTimeoutError: on every rank, if a flag never arrived within the bound.
    """
    import torch

    from ktrace.shmem.heap import WaitTimeoutError

    cfg = config or CalibrationConfig()
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    if pairs is None:
        if cfg.ref_rank >= heap.world_size:
            raise ValueError(f"ref_rank {cfg.ref_rank} is not a rank of a group of {heap.world_size}")
        pairs = [(cfg.ref_rank, p) for p in range(heap.world_size) if p != cfg.ref_rank]
    pairs = [(int(a), int(b)) for a, b in pairs]
    bad = [p for p in pairs if not (0 <= p[0] < heap.world_size and 0 <= p[1] < heap.world_size) or p[0] == p[1]]
    if bad:
        raise ValueError(f"ping-pong pairs {bad} are not pairs of distinct ranks of a group of {heap.world_size}")
    glob = list(range(heap.world_size)) if ranks is None else [int(r) for r in ranks]
    if not pairs:
        return []
    if heap.device.type != "cuda":
        raise RuntimeError("clock calibration runs on GPUs (the heap has no device memory)")
    torch.cuda.synchronize(heap.device)
    held = heap.hold_timeouts()  # earlier kernels' timeouts: kept for heap.check(), not ours
    if held:
        log.warning("[rank %d] clock calibration (%s): %d earlier timed-out wait(s) kept for heap.check()", heap.rank, phase, held)
    flags = heap.zeros(2, dtype=torch.int32, name="ktrace.clock.flags")
    out = torch.zeros(cfg.rounds * 2, dtype=torch.int64, device=heap.device)
    mine: dict[tuple[int, int], tuple[list, list]] = {}  # pair -> (first, second) timestamps of each round
    for ref, peer in pairs:
        flags.zero_()
        heap.barrier()
        active = heap.rank in (ref, peer)
        if active:
            other = peer if heap.rank == ref else ref
            _ping_pong_kernel[(1,)](
                flags, out, heap.rank, other, heap.bases, cfg.rounds,
                IS_REF=heap.rank == ref, TIMEOUT_NS=cfg.timeout_ns, num_warps=1,
            )
        heap.barrier()
        count, described = heap.take_timeouts()
        reports = heap.all_gather_object((count, [str(t) for t in described]))
        if any(c for c, _ in reports):
            msg = "; ".join(s for _, ss in reports for s in ss)
            raise WaitTimeoutError(f"clock calibration of rank {glob[peer]} against rank {glob[ref]} did not complete: {msg}",
                                   described, count)
        if active:
            both = out.view(-1, 2).cpu()
            mine[(ref, peer)] = (both[:, 0].tolist(), both[:, 1].tolist())
    everyone = heap.all_gather_object(mine)
    samples = []
    for ref, peer in pairs:
        t1, t4 = everyone[ref][(ref, peer)]
        t2, t3 = everyone[peer][(ref, peer)]
        s = {"ref_rank": glob[ref], "peer": glob[peer], "phase": phase, "t1": t1, "t2": t2, "t3": t3, "t4": t4}
        if check:
            s["check"] = True
        samples.append(s)
    log.info("[rank %d] clock calibration (%s): %d pair(s) x %d rounds%s", glob[heap.rank], phase, len(samples), cfg.rounds,
             " (check)" if check else "")
    return samples


# ---------------------------------------------------------------------------------------------
# host <-> host
# ---------------------------------------------------------------------------------------------

_HOST_GROUPS: dict = {}


def host_group(timeout_s: float = 60.0):
    """A gloo process group of every rank, for the host exchange (the default group when it is gloo
    already). Created once per process; collective the first time.

    Host timestamps must travel between host processes without a device in the way: an NCCL
    group would add a device copy and a kernel to every round trip.
    """
    import datetime

    import torch.distributed as dist

    if "gloo" in str(dist.get_backend()).lower():
        return None
    key = id(dist.group.WORLD)
    if key not in _HOST_GROUPS:
        _HOST_GROUPS[key] = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return _HOST_GROUPS[key]


def host_exchange(reference: int, peers, phase: str = "before", *, rounds: int = 200, clock: Callable[[], int] = time.time_ns,
                  group=None) -> dict | None:
    """Exchange host timestamps between the reference rank's process and each of ``peers``, NTP-style.
    Every rank of ``group`` may call it; only the reference and the peers take part.

    Round ``i`` with peer ``p``: the reference stamps t1 and sends ``i + 1``; ``p`` receives it and
    stamps t2, stamps t3 and sends it back; the reference receives it and stamps t4. The offset
    ``((t2 - t1) + (t3 - t4)) / 2`` of ``p``'s host clock is off by at most half the round trip
    ``(t4 - t1) - (t3 - t2)`` whatever the two directions' delays. At the end the reference sends
    its stamps to ``p``, whose capture keeps the whole exchange. Peers are served one at a time.

    Args:
        reference: the reference rank (global).
        peers: the ranks to measure (global; the reference is skipped).
        phase: "before" or "after".
        rounds: round trips per peer.
        clock: this rank's host clock (``time.time_ns``; a simulation's skewed clock).
        group: a CPU process group of all ranks (:func:`host_group`; None: the default group).

    Returns:
        On a peer: ``{"ref_rank", "peer", "phase", "t1", "t2", "t3", "t4", "transport"}``; else None.

    Raises:
        RuntimeError: a round came back with the wrong value (the two sides disagree on the order).
    """
    import torch
    import torch.distributed as dist

    me = dist.get_rank()
    peers = [int(p) for p in peers if int(p) != int(reference)]
    backend = str(dist.get_backend(group)).lower()
    word = torch.zeros(1, dtype=torch.int64)
    if me == reference:
        for p in peers:
            t1, t4 = [], []
            for i in range(rounds):
                word[0] = i + 1
                a = clock()
                dist.send(word, p, group=group)
                dist.recv(word, p, group=group)
                b = clock()
                if int(word[0]) != i + 1:
                    raise RuntimeError(f"host exchange with rank {p}: round {i + 1} came back as {int(word[0])}")
                t1.append(a)
                t4.append(b)
            dist.send(torch.tensor(t1 + t4, dtype=torch.int64), p, group=group)
        return None
    if me not in peers:
        return None
    t2, t3 = [], []
    for i in range(rounds):
        dist.recv(word, reference, group=group)
        a = clock()
        b = clock()
        dist.send(word, reference, group=group)
        if int(word[0]) != i + 1:
            raise RuntimeError(f"host exchange with rank {reference}: round {i + 1} arrived as {int(word[0])}")
        t2.append(a)
        t3.append(b)
    theirs = torch.empty(2 * rounds, dtype=torch.int64)
    dist.recv(theirs, reference, group=group)
    ref_stamps = theirs.tolist()
    return {"ref_rank": int(reference), "peer": me, "phase": phase, "t1": ref_stamps[:rounds], "t2": t2, "t3": t3,
            "t4": ref_stamps[rounds:], "transport": backend}


# ---------------------------------------------------------------------------------------------
# one phase of a calibration
# ---------------------------------------------------------------------------------------------


def _world_rank_size() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _plan(heap, cfg: CalibrationConfig, me: int, world: int, node: str) -> tuple[ClockPlan, list[int]]:
    """Every rank's node and heap, gathered (over the heap when it spans the world, else over the
    host group), and the plan made of them."""
    import torch.distributed as dist

    members = [int(x) for x in heap.all_gather_object(me)]  # heap rank -> global rank
    info = (node, tuple(members))
    if len(members) == world:
        infos = heap.all_gather_object(info)
    else:
        infos = [None] * world
        dist.all_gather_object(infos, info, group=host_group(cfg.host_timeout_s))
    if cfg.ref_rank >= world:
        raise ValueError(f"ref_rank {cfg.ref_rank} is not a rank of a world of {world}")
    plan = plan_paths([i[0] for i in infos], cfg.ref_rank, [i[1] for i in infos], crosscheck=cfg.crosscheck_on())
    return plan, members


def device_now(device=None) -> int:
    """One read of the device timer (raw ticks), after the device's earlier work."""
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    out = torch.zeros(1, dtype=torch.int64, device=device)
    with torch.cuda.device(device):
        _now_kernel[(1,)](out, num_warps=1)
    return int(out.item())


def _meet(heap, cfg: CalibrationConfig, members: list[int], world: int) -> None:
    """Every rank at one point (over the heap when it spans the world, else the host group)."""
    import torch.distributed as dist

    if len(members) == world:
        heap.barrier()
    else:
        dist.barrier(group=host_group(cfg.host_timeout_s))


def calibrate(heap, phase: str = "before", config: CalibrationConfig | None = None) -> dict:
    """One phase of the clock calibration of every rank. Collective over all ranks.

    Decides every rank's path (``ktrace.clock.paths.plan_paths``: node names from
    ``config.node`` / ``$KTRACE_NODE`` / the host name), then: the heap ping-pong within each node
    (and across nodes as a check when ``crosscheck``), this rank's host anchors, and where chains
    are needed the GPU<->host exchange at their ends and the host exchange between the
    reference host and each other node's host.

    Returns:
        This rank's part: ``{"samples": [ping-pong dicts of its heap], "anchors": {rank: host
        anchor}, "gpu_host": dict | None, "host_exchange": [dicts], "rank", "reference_rank",
        "node", "path", "host_clock", "host_skew" (simulation), "cost_ns": {step: ns}, "notes",
        "edge_ticks"}``: with chains, ``edge_ticks`` is this device's timer when every rank had
        finished the opening calibration (``before``) or had not yet begun the closing one
        (``after``); the traced work lies between the two, where every leg is interpolated.
        (``ktrace.clock.paths.rank_samples`` keeps what the capture needs).
    """
    cfg = config or CalibrationConfig()
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    from ..dist_env import node_name

    me, world = _world_rank_size()
    skew = cfg.skew()
    clock = host_clock(skew, me)
    cost: dict[str, int] = {}
    notes: list[str] = []
    t = time.perf_counter_ns()
    node = node_name(rank=me, template=cfg.node)
    plan, members = _plan(heap, cfg, me, world, node)
    local = {g: i for i, g in enumerate(members)}

    def heap_pairs(pairs):
        return [(local[a], local[b]) for a, b in pairs if a in local and b in local]

    cost["plan"] = time.perf_counter_ns() - t
    edge = None
    if phase == "after" and plan.multi_node:
        # every leg's closing points come after this read on every rank: between the two edges
        # the chain interpolates
        _meet(heap, cfg, members, world)
        edge = device_now(heap.device)
    t = time.perf_counter_ns()
    samples = ping_pong(heap, phase, cfg, heap_pairs(plan.pingpong), ranks=members)
    cost["pingpong"] = time.perf_counter_ns() - t
    if plan.checks:
        t = time.perf_counter_ns()
        samples += ping_pong(heap, phase, cfg, heap_pairs(plan.checks), ranks=members, check=True)
        cost["pingpong_check"] = time.perf_counter_ns() - t
    gpu_host = None
    if me in plan.gpu_host and cfg.gpu_host_rounds:
        t = time.perf_counter_ns()
        try:
            gpu_host = gpu_host_exchange(heap.device, phase, cfg.gpu_host_rounds, clock=clock, timeout_s=min(cfg.host_timeout_s, 10.0))
        except Exception as e:  # (the launch-bracketed anchors serve instead: recorded, never fatal)
            notes.append(f"{phase}: GPU<->host exchange not made ({' '.join(str(e).split())}); host anchors used")
            log.warning("[rank %d] ktrace clock: %s", me, notes[-1])
        cost["gpu_host"] = time.perf_counter_ns() - t
    t = time.perf_counter_ns()
    anchor = host_anchor(heap.device, cfg.anchor_repeats, clock=clock)
    cost["anchors"] = time.perf_counter_ns() - t
    hx = []
    if plan.chained:
        t = time.perf_counter_ns()
        group = host_group(cfg.host_timeout_s)
        try:
            got = host_exchange(plan.reference, plan.chained, phase, rounds=cfg.host_rounds, clock=clock, group=group)
        except Exception as e:  # (the heap's samples stay; the chained ranks fall back, and say so)
            got = None
            notes.append(f"{phase}: host exchange failed ({' '.join(str(e).split())})")
            log.error("[rank %d] ktrace clock: %s", me, notes[-1])
        hx = [got] if got else []
        cost["host_exchange"] = time.perf_counter_ns() - t
    if phase == "before" and plan.multi_node:
        _meet(heap, cfg, members, world)
        edge = device_now(heap.device)
    log.info("[rank %d] clock calibration (%s): node %s, path %s%s", me, phase, node, plan.path(me),
             f", {len(plan.chained)} node(s) chained" if plan.chained else "")
    out = {
        "samples": samples, "anchors": {me: anchor}, "gpu_host": gpu_host, "host_exchange": hx, "rank": me,
        "reference_rank": plan.reference, "node": node, "path": plan.path(me), "cost_ns": cost, "notes": notes,
        "edge_ticks": edge,
    }
    if plan.multi_node:
        out["host_clock"] = host_clock_state()
    if skew is not None and skew.rank == me:
        out["host_skew"] = skew.to_dict()
    return out
