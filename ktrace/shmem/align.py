"""Release the ranks' next launches together: a barrier on the device, with no host wait after it.

Ranks that meet at a host barrier and then synchronise their GPUs leave it hundreds of µs apart
(96-273 µs measured at 4 ranks on H100): each host still has to come back from the barrier and
queue its launch. The kernel then starts that much later on some ranks, and a report rightly says
that rank "launched late". :func:`align_launch` queues a one-warp kernel right before the launch,
on the launch's stream, that meets every other rank's copy on the device::

    import ktrace.shmem as shmem

    with shmem.align_launch(heap):          # every rank, the same number of times
        kernel[grid](...)                   # starts on every rank within a few µs

Each rank's barrier kernel

1. waits until its host says the launch is queued (a word of pinned host memory the ``with``
   block sets on leaving, after the launch is queued: no CUDA call, no wait), or until ``hold_us``
   have passed since it started, whichever comes first;
2. writes this round's number into its word in every rank's copy of a small array
   (``atom.release.sys``, one thread per rank, all at once);
3. spins on its own copy until every rank's word holds this round (``ld.acquire.sys``, every
   word at once), or until ``timeout_s``.

Every GPU then leaves step 3 within about one NVLink write of the others, and the launch queued
behind the barrier starts at once: the host that queued last is no longer late, because its GPU
waited for its launch to be queued (step 1) before it let the others go. Rounds are numbered
(1, 2, ...; the same number on every rank, since every rank calls as often) and a word is
compared with ``>=``: the array is never reset, and a rank a round ahead releases its peers of
the round before.

Called without ``with`` (``align_launch(heap)``, then the launch), step 1 has nobody to open the
gate: each rank's barrier holds ``hold_us`` from its own start, so the ranks leave together
``hold_us`` after the last of them started its barrier. The hold gives that rank's host the time
to queue its launch; too short a hold shows as that rank starting late.

The array lives on the heap given (a ktrace ``SymmetricHeap``: ``ktrace.align``, one int32 per
rank, allocated on the first call, collectively) or, without one, on a small heap of torch
symmetric memory over ``group`` (default: the world) made on the first call. With one rank there
is nothing to wait for and nothing is queued.

What the host can read afterwards (:meth:`LaunchAligner.stats`, which synchronises): how many
rounds were released by the hold rather than by the host's gate (the host was busy for longer than
``hold_us`` inside the ``with`` block: that rank may have started late), and how many rounds
ended at ``timeout_s`` with a rank missing (a rank that did not call: its peers went on).
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

import triton
import triton.language as tl

import ktrace.language as kl

from . import language as ks

log = logging.getLogger("ktrace")

#: Default hold (µs): how long a barrier waits for its host's gate before it arrives anyway.
HOLD_US = 200.0
#: Default bound (s) of the wait for the other ranks.
TIMEOUT_S = 60.0
#: Name of the barrier's array on a user's heap.
WORDS_NAME = "ktrace.align"


@triton.jit(do_not_specialize=["rank", "epoch"])
def align_kernel(table, gate, status, rank, epoch, WORLD: tl.constexpr, WP: tl.constexpr, HOLD_NS: tl.constexpr,
                 TIMEOUT_NS: tl.constexpr):
    """One round of the launch barrier on this rank (one program; see the module docstring).

    Args:
        table: int64 (WORLD,): ``table[p]`` = the address of rank ``p``'s copy of the barrier's
            array (one int32 word per rank) in this process.
        gate: int32 (1,) in pinned host memory: the host writes ``epoch`` once its launch is queued.
        status: int32 (2,): counts rounds released by the hold (``[0]``) and rounds that ended
            at ``TIMEOUT_NS`` with a rank missing (``[1]``).
        rank: this rank; epoch: this round's number (>= 1, one more each round).
        WORLD: ranks; WP: WORLD rounded up to a power of two.
        HOLD_NS: longest wait for the gate; TIMEOUT_NS: longest wait for the other ranks.

    Cost: one acquire read of host memory per spin while the gate is shut; then WORLD release
    atomics issued together and one acquire read of the WORLD words per spin; two atomics on
    ``status``. Nothing else is read or written.
    """
    hold = HOLD_NS // ks.tick_ns()
    bound = TIMEOUT_NS // ks.tick_ns()
    t0 = kl.now()
    # 1. the host's gate: its launch is queued behind this kernel (or the hold ran out)
    g = ks.load_acquire(gate, "sys")
    t = t0
    while (g < epoch) & (t - t0 < hold):
        g = ks.load_acquire(gate, "sys")
        t = kl.now()
    # 2. arrive: this rank's word in every rank's copy, one thread per rank, all at once
    p = tl.arange(0, WP)
    live = p < WORLD
    peers = tl.load(table + p, mask=live, other=0)
    dst = peers.to(tl.pointer_type(tl.int32), bitcast=True) + rank
    tl.atomic_xchg(dst, tl.full((WP,), 0, tl.int32) + epoch, mask=live, sem="release", scope="sys")
    # 3. leave when every rank's word here holds this round (all words read at once)
    mine = tl.load(table + rank).to(tl.pointer_type(tl.int32), bitcast=True)
    words = mine + tl.where(live, p, 0)
    low = tl.min(tl.where(live, ks.load_acquire(words, "sys"), epoch), axis=0)
    t1 = kl.now()
    t = t1
    while (low < epoch) & (t - t1 < bound):
        low = tl.min(tl.where(live, ks.load_acquire(words, "sys"), epoch), axis=0)
        t = kl.now()
    tl.atomic_add(status, (g < epoch).to(tl.int32), sem="relaxed")
    tl.atomic_add(status + 1, (low < epoch).to(tl.int32), sem="relaxed")


@dataclass(frozen=True)
class AlignStats:
    """What a rank's barriers did so far (:meth:`LaunchAligner.stats`).

    Attributes:
        rounds: barriers queued.
        released_by_hold: rounds whose gate the host had not opened within the hold (their
            launch may have been queued after the other ranks left).
        missed: rounds that ended at the bound with a rank that had not arrived.
    """

    rounds: int
    released_by_hold: int
    missed: int


class AlignedLaunch:
    """One queued barrier round: opening it (leaving the ``with`` block, or :meth:`open`) tells
    this rank's barrier that the launch behind it is queued."""

    def __init__(self, aligner: "LaunchAligner | None", epoch: int):
        self._aligner, self.epoch = aligner, epoch

    def open(self) -> None:
        """Open this round's gate (a store into pinned host memory; no CUDA call). Idempotent."""
        if self._aligner is not None:
            self._aligner._open(self.epoch)

    def __enter__(self) -> "AlignedLaunch":
        return self

    def __exit__(self, *exc) -> bool:
        self.open()  # (also on an error: the barrier must not wait for the hold)
        return False


class LaunchAligner:
    """The barrier's state on one rank: its array, the address table, the host gate, the round.

    Made by :func:`aligner_for` (one per heap, or per process group without one); collective.

    Args:
        heap: a ``ktrace.shmem.SymmetricHeap`` to put the array on.
    """

    def __init__(self, heap):
        import torch

        self.heap, self.rank, self.world_size = heap, heap.rank, heap.world_size
        self.device = heap.device
        self.epoch = 0
        if self.world_size == 1:
            return
        if heap.device.type != "cuda":
            raise RuntimeError("align_launch needs a GPU heap (symmetric memory)")
        self.words = heap.zeros(self.world_size, dtype=torch.int32, name=WORDS_NAME)
        off = heap.offset_of(self.words)
        self.table = torch.tensor([b + off for b in heap.base_ptrs], dtype=torch.int64, device=self.device)
        self.status = torch.zeros(2, dtype=torch.int32, device=self.device)
        self.gate = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        self._gate_words = self.gate.numpy()  # the same pinned memory, written without torch
        heap.barrier()  # (every rank's array zeroed before any rank writes into it)

    def release(self, stream=None, hold_us: float = HOLD_US, timeout_s: float = TIMEOUT_S) -> AlignedLaunch:
        """Queue one barrier round on ``stream`` (default: the current stream). Collective.

        Returns:
            The round's :class:`AlignedLaunch`: open it once the launch is queued (``with``).
        """
        if not hold_us >= 0 or not timeout_s > 0:
            raise ValueError(f"hold_us must be >= 0 and timeout_s > 0, got {hold_us} and {timeout_s}")
        self.epoch += 1
        if self.world_size == 1:
            return AlignedLaunch(None, self.epoch)
        if self.epoch >= 2**31 - 1:
            raise RuntimeError("align_launch: 2**31 rounds on one array; make a new heap")
        import torch

        W = self.world_size
        launch = lambda: align_kernel[(1,)](  # noqa: E731
            self.table, self.gate, self.status, self.rank, self.epoch, WORLD=W, WP=triton.next_power_of_2(W),
            HOLD_NS=int(hold_us * 1e3), TIMEOUT_NS=int(timeout_s * 1e9), num_warps=1)
        if stream is None or stream == torch.cuda.current_stream(self.device):
            launch()
        else:
            with torch.cuda.stream(stream):
                launch()
        return AlignedLaunch(self, self.epoch)

    def _open(self, epoch: int) -> None:
        if self._gate_words[0] < epoch:
            self._gate_words[0] = epoch

    def stats(self) -> AlignStats:
        """What this rank's barriers did so far (synchronises with the device)."""
        if self.world_size == 1:
            return AlignStats(self.epoch, 0, 0)
        by_hold, missed = (int(x) for x in self.status.cpu().tolist())
        return AlignStats(self.epoch, by_hold, missed)


_BY_HEAP: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_BY_GROUP: dict = {}


def aligner_for(heap=None, group=None) -> LaunchAligner:
    """The :class:`LaunchAligner` of ``heap`` (or, without one, of a small heap of torch symmetric
    memory over ``group``, default the world), made on first use. Collective on first use."""
    if heap is not None:
        if group is not None:
            raise ValueError("give a heap or a group, not both")
        a = _BY_HEAP.get(heap)
        if a is None:
            a = _BY_HEAP[heap] = LaunchAligner(heap)
        return a
    import torch
    import torch.distributed as dist

    from .heap import HeapConfig, SymmetricHeap
    from .symmetric import RESERVED_BYTES

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("align_launch needs torch.distributed initialised (ktrace.shmem.init_distributed) or a heap")
    g = group if group is not None else dist.group.WORLD
    key = (dist.get_rank(g), g.group_name if hasattr(g, "group_name") else id(g), torch.cuda.current_device())
    a = _BY_GROUP.get(key)
    if a is None:
        # its own small heap: the error block ktrace keeps at the start, then the array
        h = SymmetricHeap(group=g, config=HeapConfig(size_bytes=2 * RESERVED_BYTES, check="off", backing="symmetric"))
        a = _BY_GROUP[key] = LaunchAligner(h)
    return a


def align_launch(heap=None, *, stream=None, group=None, hold_us: float = HOLD_US, timeout_s: float = TIMEOUT_S) -> AlignedLaunch:
    """Queue a device-side barrier over every rank right before a launch (see the module docstring).

    Collective: every rank of the heap (or group) calls it as often, in the same order as its
    other collectives. Use it as ``with align_launch(heap): kernel[grid](...)``; the launches queued
    inside the block start together on every rank, with no host wait after the barrier.

    Args:
        heap: a ``ktrace.shmem.SymmetricHeap`` (its ranks meet); None: ``group``'s ranks, over a
            small buffer of torch symmetric memory ktrace allocates once.
        stream: the stream the launch goes to (default: the current one).
        group: the process group without a heap (default: the world).
        hold_us: how long a rank's barrier waits for its host to queue the launch (the ``with``
            block opens the gate as soon as it is queued); without ``with``, every rank waits
            this long after its barrier started.
        timeout_s: how long a barrier waits for the other ranks before it gives up (counted in
            :meth:`LaunchAligner.stats`; the launch then runs unaligned).

    Returns:
        The round (:class:`AlignedLaunch`): a context manager; ``open()`` without ``with``.
    """
    return aligner_for(heap, group).release(stream, hold_us=hold_us, timeout_s=timeout_s)
