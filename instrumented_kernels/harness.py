"""The one shared harness of ``instrumented_kernels/``: setup, fault knobs, checks, timing, cases.

Every kernel folder (``all_to_all``, ``all_reduce``, the GEMM folders, ...) uses this module and
nothing else for what they have in common. Its API is stable; extend it, do not change it.

Host API
    ``Dist`` / ``setup()``
        ``dist = setup()`` initialises ``torch.distributed`` from the launcher's environment
        (``ktrace.shmem.init_distributed``), selects this rank's GPU and returns a frozen
        ``Dist(rank, world_size, device)``.
    ``heap(min_free_bytes)``
        The process's symmetric heap (``ktrace.shmem.SymmetricHeap``), shared by every kernel
        plan; collective. A new, larger heap is created when the current one has fewer than
        ``min_free_bytes`` left (the old one lives as long as tensors on it do).
    ``Fault``
        Frozen dataclass, the fault-injection knob: ``Fault(delay_rank=r, delay_ns=D)`` makes
        rank ``r`` spin D ns before each of its notifies; ``Fault(skip_rank=r, skip_notify=k)``
        makes rank ``r`` skip the notify whose *notify index* is ``k`` (each kernel's README says
        how it numbers its notifies). ``fault.kernel_args(rank)`` gives the two runtime ints
        ``(fault_delay_ns, fault_skip)`` and ``fault.active`` the ``FAULTS`` constexpr a kernel
        takes (see :func:`notify` below). ``NO_FAULT`` is the default.
    ``fresh_seed(dist)``
        A random seed drawn on rank 0 and broadcast (every rank gets the same one); logged so a
        failure can be replayed with ``KTRACE_KERNEL_SEED=<seed>``.
    ``poison(t)``
        Fill an output with NaN (floats) or ``-1`` (ints) before a kernel writes it.
    ``rel_err(out, ref)`` / ``check_close(what, out, ref, tol=1e-2)``
        ``||out - ref|| / ||ref||`` computed in float64 (NaN anywhere gives ``inf``);
        ``check_close`` raises :class:`MismatchError` naming the rank and the error.
    ``trace_buffer(n_programs, capacity, device)``
        A zeroed event buffer for a direct traced launch (``ktrace_buf=..., KTRACE=capacity``),
        used by benchmarks to time the probes' own cost without a capture session.
    ``time_interleaved(fns, reps, warmup, dist=None, batch=1, hold_cycles=0)``
        Time callables side by side: each repetition runs every callable ``batch`` times
        between two CUDA events, the callables in a fresh seeded random order each repetition
        (``run_orders``), after ``warmup`` rounds; with ``hold_cycles`` the GPU first sleeps so the host
        can queue the batch (device time, not launch rate); with ``dist`` a one-element NCCL
        all-reduce right before each start event lines the ranks' GPUs up, so no batch pays
        for the skew another callable left behind. Returns ``{name: Timing}`` per call; with
        ``dist`` a repetition's figure is the maximum over ranks (a collective is as slow as
        its slowest rank). ``paired_ratio(timings, a, b)`` gives the median and spread of the
        per-repetition ratio ``a / b``.
    ``RUNTIME_INTS``
        Names of integer kernel arguments that differ between ranks or calls (rank, epoch,
        fault knobs, ...): kernels pass them to ``triton.jit(do_not_specialize=...)`` so that
        every rank and every call runs one binary (Triton otherwise compiles a separate one
        for a value of 1 and for multiples of 16: rank 1, epoch 1, epoch 16, ...).
    ``compile_only(*plans)``
        Context manager: Triton launches inside it compile and cache their binaries but do
        not run, and the plans' attributes (epochs, ...) are restored on exit. Tests use it to
        compile a variant on every rank before a short-bound run, so that no rank starts it
        tens of ms after the others.
    ``BenchCase``
        One benchmark entry: a name, the kernel, a description of the shape and a ``build``
        function ``build(dist) -> Built`` that allocates, generates fresh inputs, and returns
        the variants to time (``{"ktrace": fn, "baseline": fn, "traced": fn}``) plus a
        ``check()`` that raises if the outputs are wrong. Each kernel folder's ``bench.py``
        exposes ``cases(world_size) -> list[BenchCase]``; ``benchmarks/kernels.py`` finds them.

Device API (``@triton.jit``)
    ``spin_ns(delay_ns)``
        Spin on the device timer for ``delay_ns`` ns (the timer's tick converted per target).
    ``notify(kt, flag, value, rank, peer, heap_bases, index, fault_delay_ns, fault_skip, FAULTS, ...)``
        ``ktrace.shmem.language.notify`` with the fault knob: with ``FAULTS`` false (constexpr)
        it *is* ``ks.notify`` (no extra instruction); with ``FAULTS`` true it first spins
        ``fault_delay_ns`` (0 = no delay), and skips the write when ``index == fault_skip``.

Kernels take the knob as trailing runtime parameters ``fault_delay_ns, fault_skip`` and the
constexpr ``FAULTS``, before ``ktrace_buf=None, KTRACE: tl.constexpr = 0``.

What ``ktrace run`` runs of a folder (its ``run.py``: ``Param``, ``RunSpec``, the ``Driver``
protocol) is typed in :mod:`instrumented_kernels.runspec`, kept apart from this module so that
listing and checking a run imports neither torch nor triton.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

import triton
import triton.language as tl

import ktrace.language as kl
import ktrace.shmem.language as ks

log = logging.getLogger("ktrace")

#: Bytes of the first heap a process creates (grown on demand; see :func:`heap`).
DEFAULT_HEAP_BYTES = int(os.environ.get("KTRACE_KERNEL_HEAP_MB", "1024")) << 20

__all__ = [
    "Dist",
    "setup",
    "heap",
    "Fault",
    "NO_FAULT",
    "fresh_seed",
    "poison",
    "rel_err",
    "check_close",
    "MismatchError",
    "trace_buffer",
    "Timing",
    "time_interleaved",
    "BenchCase",
    "Built",
    "paired_ratio",
    "RUNTIME_INTS",
    "compile_only",
    "spin_ns",
    "notify",
    "device_name",
]


# ---------------------------------------------------------------------------------------------
# processes and the heap
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dist:
    """Where this process runs: its rank, the world size, and its device (``torch.device``)."""

    rank: int
    world_size: int
    device: Any

    def __post_init__(self):
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} out of range for world size {self.world_size}")


def setup() -> Dist:
    """Initialise ``torch.distributed`` (if needed) and this rank's GPU; returns a :class:`Dist`."""
    import torch

    from ktrace.shmem import init_distributed

    rank, world = init_distributed()
    if not torch.cuda.is_available():
        raise RuntimeError("instrumented kernels need a GPU per rank")
    return Dist(rank, world, torch.device("cuda", torch.cuda.current_device()))


_HEAPS: list = []


def heap(min_free_bytes: int = 0):
    """The process's symmetric heap with at least ``min_free_bytes`` free. Collective.

    Every rank must call it with the same argument in the same order (the allocations that
    follow must match too: the heap checks it). When the current heap is too full, a new one of
    ``max(DEFAULT_HEAP_BYTES, 2 * min_free_bytes)`` is created and becomes current.
    """
    from ktrace.shmem import SymmetricHeap

    if min_free_bytes < 0:
        raise ValueError(f"min_free_bytes must be >= 0, got {min_free_bytes}")
    if _HEAPS:
        h = _HEAPS[-1]
        if h.config.size_bytes - h.used_bytes >= min_free_bytes + 4096:
            return h
    size = max(DEFAULT_HEAP_BYTES, 2 * min_free_bytes + (1 << 20))
    h = SymmetricHeap(size)
    _HEAPS.append(h)
    return h


def device_name() -> str:
    """The current GPU's name (for tables)."""
    import torch

    return torch.cuda.get_device_name()


# ---------------------------------------------------------------------------------------------
# faults
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """Fault injection for a kernel launch (validated on construction).

    Args:
        delay_rank: the rank whose notifies are delayed (-1: none).
        delay_ns: how long that rank spins on the device timer before each notify (ns, >= 0).
        skip_rank: the rank that skips one notify (-1: none).
        skip_notify: the notify index skipped on ``skip_rank`` (the kernel's README numbers its
            notifies); -1: none. A skipped notify leaves its peer waiting until the wait's
            timeout; the host then reports the wait (``heap.check()``).
    """

    delay_rank: int = -1
    delay_ns: int = 0
    skip_rank: int = -1
    skip_notify: int = -1

    def __post_init__(self):
        for name in ("delay_rank", "delay_ns", "skip_rank", "skip_notify"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"Fault.{name} must be an int, got {v!r}")
        if self.delay_rank < -1 or self.skip_rank < -1 or self.skip_notify < -1:
            raise ValueError(f"Fault ranks and notify index are -1 (none) or >= 0: {self}")
        if self.delay_ns < 0 or self.delay_ns >= 1 << 31:
            raise ValueError(f"Fault.delay_ns must be in [0, 2**31), got {self.delay_ns}")
        if (self.delay_rank >= 0) != (self.delay_ns > 0):
            raise ValueError(f"give both delay_rank and delay_ns > 0, or neither: {self}")
        if (self.skip_rank >= 0) != (self.skip_notify >= 0):
            raise ValueError(f"give both skip_rank and skip_notify, or neither: {self}")

    @property
    def active(self) -> bool:
        """Whether any fault is set (the ``FAULTS`` constexpr of the launch)."""
        return self.delay_rank >= 0 or self.skip_rank >= 0

    def check_world(self, world_size: int) -> None:
        """Raise ValueError if a rank of the fault is not in the world."""
        for r in (self.delay_rank, self.skip_rank):
            if r >= world_size:
                raise ValueError(f"fault rank {r} out of range for world size {world_size}")

    def kernel_args(self, rank: int) -> tuple[int, int]:
        """``(fault_delay_ns, fault_skip)`` for ``rank``'s launch (0 and -1 when not affected)."""
        delay = self.delay_ns if rank == self.delay_rank else 0
        skip = self.skip_notify if rank == self.skip_rank else -1
        return delay, skip


NO_FAULT = Fault()

#: Integer kernel arguments that differ between ranks or between calls. Triton specialises an
#: int argument equal to 1 into a constant and one divisible by 16 into an aligned variant, so
#: without this list rank 1 and ranks 0/2/3 compile different binaries (at different speeds:
#: launch skew) and epochs 1, 16, 32, ... trigger compiles in the middle of a run.
#: (Not a column offset such as ``col0 = rank * N_loc``: its divisibility by 16, the same on every
#: rank when N_loc is a multiple of 16, is what lets Triton vectorise the tile loads and stores;
#: with it in this list, a 4 x H200 run timed the scatter-based GEMM schedules up to 3.5x slower
#: than the run before, the likely cause; not re-measured without it.)
RUNTIME_INTS = ("rank", "epoch", "fault_delay_ns", "fault_skip", "m")


_COMPILE_ONLY = [0]


@contextlib.contextmanager
def compile_only(*plans):
    """Inside, Triton kernel launches compile (and cache) their binary without running.

    Args:
        plans: objects whose attributes the launches inside may change (epochs, remembered
            arguments): every attribute is put back on exit, so the plans stay in step with the
            launches that really ran.

    Use it collectively (every rank, the same calls) before a run whose waits have a short bound:
    a first launch compiles on the host, and ranks compile at different speeds, so without it a
    rank can start its kernel tens of ms after its peers and eat their bound. Triton's own
    ``warmup`` path does the compiling (``JITFunction.run(..., warmup=True)``: compile, cache,
    return without a launch); calls that read results on the host read stale data inside.
    """
    from triton.runtime.jit import JITFunction

    saved = [(p, dict(vars(p))) for p in plans]
    if not _COMPILE_ONLY[0]:
        orig = JITFunction.run

        def run(self, *args, grid, warmup, **kwargs):
            return orig(self, *args, grid=grid, warmup=True, **kwargs)

        JITFunction.run = run
        _COMPILE_ONLY.append(orig)
    _COMPILE_ONLY[0] += 1
    try:
        yield
    finally:
        _COMPILE_ONLY[0] -= 1
        if not _COMPILE_ONLY[0]:
            JITFunction.run = _COMPILE_ONLY.pop()
        for p, attrs in saved:
            for k in [k for k in vars(p) if k not in attrs]:
                delattr(p, k)
            for k, v in attrs.items():
                setattr(p, k, v)


#: Spin on the device timer for ``delay_ns`` ns (the probe core's: the timer's tick converted per target).
spin_ns = kl.spin_ns


@triton.jit
def notify(
    kt,
    flag,
    value,
    rank,
    peer,
    heap_bases,
    index,
    fault_delay_ns,
    fault_skip,
    FAULTS: tl.constexpr,
    op: tl.constexpr = tl.constexpr("set"),
    scope: tl.constexpr = tl.constexpr("sys"),
    name: tl.constexpr = tl.constexpr("notify"),
):
    """``ks.notify`` with the fault knob (see :class:`Fault`).

    Args:
        kt, flag, value, rank, peer, heap_bases, op, scope, name: as ``ks.notify``.
        index: this notify's index in the kernel's numbering (int32; what ``skip_notify`` names).
        fault_delay_ns: ns to spin before notifying (0 = none).
        fault_skip: the notify index to skip (-1 = none).
        FAULTS: compile-time gate; false compiles to exactly ``ks.notify``.

    Returns:
        The tracer, advanced as ``ks.notify`` advances it (a skipped notify records nothing).

    Ordering and cost: those of ``ks.notify``; with ``FAULTS``, plus the spin and a compare.
    """
    if FAULTS:
        if fault_delay_ns > 0:
            spin_ns(fault_delay_ns)
        if index != fault_skip:
            kt = ks.notify(kt, flag, value, rank, peer, heap_bases, op=op, scope=scope, name=name)
        else:
            tl.debug_barrier()  # keep the barrier count of every path equal
    else:
        kt = ks.notify(kt, flag, value, rank, peer, heap_bases, op=op, scope=scope, name=name)
    return kt


# ---------------------------------------------------------------------------------------------
# inputs and checks
# ---------------------------------------------------------------------------------------------


def fresh_seed(dist: Dist | None = None) -> int:
    """A seed for fresh random inputs, the same on every rank.

    ``KTRACE_KERNEL_SEED`` in the environment fixes it (to replay a failure); otherwise rank 0
    draws one from ``os.urandom`` and broadcasts it.
    """
    env = os.environ.get("KTRACE_KERNEL_SEED")
    if env:
        seed = int(env)
    else:
        seed = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
        if dist is not None and dist.world_size > 1:
            import torch
            import torch.distributed as tdist

            t = torch.tensor([seed], dtype=torch.int64, device=dist.device)
            tdist.broadcast(t, src=0)
            seed = int(t.item())
    rank = dist.rank if dist is not None else 0
    log.info("[rank %d] instrumented_kernels: seed %d (KTRACE_KERNEL_SEED=%d replays it)", rank, seed, seed)
    return seed


def poison(t):
    """Fill ``t`` with NaN (floating point) or -1 (integers) in place; returns ``t``."""
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    else:
        t.fill_(-1)
    return t


class MismatchError(AssertionError):
    """A kernel's output differs from its reference by more than the tolerance."""


def rel_err(out, ref) -> float:
    """``||out - ref|| / ||ref||`` in float64; ``inf`` if ``out`` holds a NaN/inf or shapes differ."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return math.inf
    o = out.detach().to(torch.float64)
    r = ref.detach().to(o.device, torch.float64)
    if not torch.isfinite(o).all():
        return math.inf
    den = torch.linalg.vector_norm(r).item()
    num = torch.linalg.vector_norm(o - r).item()
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def check_close(what: str, out, ref, tol: float = 1e-2, rank: int | None = None) -> float:
    """Raise :class:`MismatchError` unless ``rel_err(out, ref) <= tol``; returns the error."""
    e = rel_err(out, ref)
    if not e <= tol:
        import torch

        o = out.detach().float()
        bad = (~torch.isfinite(o)).sum().item() if tuple(out.shape) == tuple(ref.shape) else -1
        where = f"rank {rank}: " if rank is not None else ""
        raise MismatchError(
            f"{where}{what}: relative error {e:.3e} > {tol:.1e} (shape {tuple(out.shape)} vs "
            f"{tuple(ref.shape)}, {bad} non-finite elements)"
        )
    return e


def check_launches(what: str, launch, out, heap, want, rank: int | None = None, modes=(False, True, "ring")) -> None:
    """Check a plan's launch in each trace mode against ``want``: ``launch(traced)`` for each of
    ``modes`` (untraced, a dense trace, ring mode: :func:`trace_args`), its output buffer ``out``
    poisoned before (once every rank is past the previous launch, whose writes into this rank's
    heap could otherwise land on the poison) and the heap's error block checked after."""
    for traced in modes:
        heap.barrier()
        poison(out)
        heap.barrier()
        got = launch(traced)
        heap.check()
        check_close(f"{what}{f' traced ({traced})' if traced else ''} vs baseline", got, want, rank=rank)


def trace_buffer(n_programs: int, capacity: int, device):
    """A zeroed int64 event buffer for ``n_programs`` programs of ``capacity`` slots each."""
    import torch

    from ktrace import schema

    return torch.zeros((schema.buffer_bytes(n_programs, capacity) + 7) // 8, dtype=torch.int64, device=device)


#: Slots per lane of a benchmark's ring-mode launch (the flight recorder's default ring).
RING_SLOTS = 64


def ring_buffer(n_programs: int, device, slots: int = RING_SLOTS):
    """A zeroed int64 buffer in ring mode's layout (``schema.ring_buffer_bytes``) in device memory."""
    import torch

    from ktrace import schema

    return torch.zeros((schema.ring_buffer_bytes(n_programs, slots) + 7) // 8, dtype=torch.int64, device=device)


def trace_args(cache: dict, key, traced, n_programs: int, capacity: int, device) -> dict:
    """The trace arguments of a direct launch (no capture session; for timing the probes).

    Args:
        cache: where the buffers are kept between launches (one per key, programs, capacity, mode).
        key: names the kernel within the plan.
        traced: False (untraced: no arguments), True (a dense buffer of ``capacity`` slots per
            program) or ``"ring"`` (ring mode, :data:`RING_SLOTS` slots per program, as the flight
            recorder launches it, with the ring in device memory).
        n_programs, capacity, device: the launch's programs, slots per program and device.
    """
    from ktrace import schema

    if not traced:
        return {}
    if traced not in (True, "ring"):
        raise ValueError(f"traced must be False, True or 'ring', got {traced!r}")
    ring = traced == "ring"
    k = (key, n_programs, capacity, ring)
    if k not in cache:
        cache[k] = ring_buffer(n_programs, device) if ring else trace_buffer(n_programs, capacity, device)
    return {"ktrace_buf": cache[k], "KTRACE": schema.ring_gate(RING_SLOTS) if ring else capacity}


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Times of one variant (µs): median, 10th and 90th percentiles, and repetitions.

    ``samples_us`` holds the per-call time of each repetition in repetition order (with ``dist``,
    the maximum over ranks), for paired comparisons (:func:`paired_ratio`).
    """

    median_us: float
    p10_us: float
    p90_us: float
    reps: int
    samples_us: tuple = ()


def _quantiles(xs) -> tuple[float, float, float]:
    ts = sorted(xs)
    return statistics.median(ts), ts[len(ts) // 10], ts[(9 * len(ts)) // 10]


def paired_ratio(timings: dict, a: str, b: str) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile over repetitions of ``a / b`` (same repetition each).

    Both variants ran in every repetition, next to each other in time, so the ratio of one
    repetition is free of what drifts between repetitions (clocks, the other ranks' skew).
    """
    sa, sb = timings[a].samples_us, timings[b].samples_us
    if not sa or len(sa) != len(sb):
        raise ValueError(f"no paired samples for {a!r} and {b!r}")
    return _quantiles([x / y for x, y in zip(sa, sb) if y > 0])


def run_orders(names: list, reps: int, seed: int = 0) -> list[list]:
    """The order of the callables in each of ``reps`` repetitions: a random permutation each,
    from a fixed seed (every rank of a run draws the same orders, so their GPUs run the same
    callable at the same time)."""
    rng = random.Random(0x6B74 + seed)
    return [rng.sample(list(names), len(names)) for _ in range(reps)]


def time_interleaved(
    fns: dict[str, Callable[[], Any]],
    reps: int = 100,
    warmup: int = 10,
    dist: Dist | None = None,
    batch: int = 1,
    hold_cycles: int = 0,
) -> dict[str, Timing]:
    """Time callables side by side with CUDA events (see the module docstring).

    Fairness between the callables (each point was seen to bias traced/untraced ratios by up to
    11 % when ignored):

    * each repetition runs the callables in a fresh random order (:func:`run_orders`: seeded, the
      same on every rank), so every callable follows every other about equally often (what ran
      before a batch decides the caches' and the peers' state). A rotation by one place, used
      before, let each callable follow the same one in every repetition: an untraced twin of the
      untraced Gluon GEMM timed 0.995 of it (H100, 500 repetitions);
    * with ``dist``, a one-element NCCL all-reduce is queued right before each start event:
      a callable whose ranks finish unevenly (a local GEMM, a skewed all-to-all) would
      otherwise hand the skew to whichever multi-rank callable comes next, which then times
      its waits for the late peer;
    * warm-up rounds run the same sequence (hold, line-up, batch), so every binary is compiled
      and every buffer touched before the first timed repetition.

    Args:
        fns: name -> callable launching the work on the current stream.
        reps: timed repetitions (each runs every callable ``batch`` times).
        warmup: untimed rounds first.
        dist: if given, the GPUs are lined up before each batch (above) and a repetition's figure
            is the maximum over ranks.
        batch: calls of a callable between its two events; the figure of a repetition is the
            elapsed time divided by ``batch``.
        hold_cycles: if > 0, the stream first sleeps this many GPU cycles before each batch, so
            that the host queues the whole batch while the GPU waits: the events then time the
            device, not the host's launch rate. A callable that synchronises with the host is
            timed with its synchronisations, as it runs.

    Returns:
        ``{name: Timing}`` (per call).
    """
    import torch

    if reps < 1 or warmup < 0 or batch < 1 or hold_cycles < 0:
        raise ValueError(f"need reps >= 1, warmup >= 0, batch >= 1, hold_cycles >= 0; got {reps}, {warmup}, {batch}, {hold_cycles}")
    names = list(fns)
    multi = dist is not None and dist.world_size > 1
    if multi:
        import torch.distributed as tdist

        token = torch.zeros(1, dtype=torch.float32, device=dist.device)

    def one_batch(n, ev=None):
        if hold_cycles:
            torch.cuda._sleep(hold_cycles)
        if multi:
            tdist.all_reduce(token)  # the ranks' GPUs leave it together
        if ev is not None:
            ev[0].record()
        for _ in range(batch):
            fns[n]()
        if ev is not None:
            ev[1].record()

    for order in run_orders(names, warmup, seed=1):
        for n in order:
            one_batch(n)
    torch.cuda.synchronize()
    if multi:
        tdist.barrier()
    ev = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)] for n in names}
    for r, order in enumerate(run_orders(names, reps)):
        for n in order:
            one_batch(n, ev[n][r])
    torch.cuda.synchronize()
    samples = [[a.elapsed_time(b) * 1000.0 / batch for a, b in ev[n]] for n in names]
    if multi:
        t = torch.tensor(samples, dtype=torch.float64, device=dist.device)
        tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
        samples = t.tolist()
    out = {}
    for n, xs in zip(names, samples):
        med, p10, p90 = _quantiles(xs)
        out[n] = Timing(med, p10, p90, reps * batch, tuple(xs))
    return out


# ---------------------------------------------------------------------------------------------
# benchmark cases
# ---------------------------------------------------------------------------------------------


@dataclass
class Built:
    """What a case's ``build`` returns.

    Attributes:
        variants: name -> callable to time. Conventional names: ``"ktrace"`` (our kernel,
            untraced), ``"traced"`` (the same launch traced at its default probe density),
            ``"baseline"`` (the torch/NCCL implementation). Others are timed and reported too.
        check: raises (e.g. :class:`MismatchError`) if the outputs of the variants are wrong;
            called after one run of every variant and before timing.
        bytes: bytes moved per call (for a bandwidth column; 0 if not meaningful).
        extra: anything the case wants in the JSON output.
        close: called when the case is done (free heap-independent resources).
    """

    variants: dict[str, Callable[[], Any]]
    check: Callable[[], Any]
    bytes: int = 0
    extra: dict = field(default_factory=dict)
    close: Callable[[], Any] | None = None


@dataclass(frozen=True)
class BenchCase:
    """One benchmark entry of a kernel folder (see the module docstring).

    Args:
        kernel: the kernel folder's name (``"all_to_all"``).
        name: the case's name (``"gpumode-256x7168"``).
        shape: the shape parameters, for the table and the JSON.
        build: ``build(dist) -> Built``; collective (every rank builds the same case).
        reps, warmup: timing repetitions for this case.
        batch: calls per timed batch (see :func:`time_interleaved`).
    """

    kernel: str
    name: str
    shape: dict
    build: Callable[[Dist], Built]
    reps: int = 100
    warmup: int = 10
    batch: int = 1

    def __post_init__(self):
        if self.batch < 1:
            raise ValueError(f"{self.kernel}/{self.name}: batch must be >= 1")
        if not self.kernel or not self.name:
            raise ValueError("a BenchCase needs a kernel and a name")
        if self.reps < 1 or self.warmup < 0:
            raise ValueError(f"{self.kernel}/{self.name}: reps must be >= 1, warmup >= 0")
