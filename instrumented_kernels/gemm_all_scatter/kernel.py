"""GEMM + all-scatter in the four schedules of the Iris taxonomy, traced and untraced from one source.

Problem: every rank holds A (``M x K``, the same on every rank) and its column slice
``B_r`` (``K x N/world``). Rank r computes ``C_r = A @ B_r`` and every rank ends with the whole
``C = [C_0 | C_1 | ... ]`` (``M x N``, on the symmetric heap): a tensor-parallel GEMM followed by
an all-gather, done by each rank writing its tiles straight into every peer's ``C``.

Schedules (:data:`SCHEDULES`)
    ``bulk``               two kernels on one stream: the GEMM on every SM, then the scatter.
    ``producer_consumer``  two kernels on two streams at once: the GEMM on ``num_sms - comm``
                           programs marks each tile ready in a local flag; the scatter kernel's
                           ``comm`` programs wait for each tile and push it to the peers.
    ``fused_sequential``   one kernel: each program pushes every tile to the peers right after
                           computing it (stores issued from registers; the NVLink traffic drains
                           while the program computes its next tile).
    ``fused_ws``           one persistent kernel, workgroup-specialised: programs
                           ``< gemm_programs`` compute tiles and mark them ready; the others wait
                           for tiles and push them.

Synchronisation (all flags are int32 on the heap; values are the launch's *epoch*, a counter
every rank advances on each call, so flags never need resetting between calls)
    ``ready[p]``     peer p's kernel has started this epoch, so p no longer reads the previous
                     epoch's ``C``: a rank waits for it before its first write into p's ``C``.
    ``tile_flags[t]``  tile t of the local slice is in ``C`` (producer/consumer schedules, GPU scope).
    ``arrive[s]``    tiles (or tile counts) received from rank s; each rank's kernel ends after
                     ``arrive[s] >= epoch * tiles`` for every peer s, so when the launch returns on
                     a stream, the whole ``C`` is in place on this rank.

Probes (region names): ``gemm_tile`` span per tile (args: tile, pid_m); ``scatter`` span per
tile pushed (args: tile, peers); WAIT events ``ready_wait``, ``tile_wait``, ``arrive_wait``;
NOTIFY events ``ready``, ``tile_ready``, ``tile_sent``.

Fault knob (``instrumented_kernels.harness.Fault``): delays / skips apply to the notifies that
tell a peer data arrived (``tile_sent``). By default (``notify_per_tile=False``) each program
that pushes tiles notifies once per peer at its end with the number of tiles it pushed: index
``p * (world - 1) + (j - 1)`` for the notify of pushing program ``p`` (the program id; in
``fused_ws`` the communication program's index ``pid - gemm_programs``) to peer
``(rank + j) % world``. With ``notify_per_tile=True``: index ``tile * (world - 1) + (j - 1)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
import ktrace.shmem.language as ks
from instrumented_kernels import harness
from instrumented_kernels.common_gemm import (
    GEMM_TILE,
    GemmConfig,
    announce_ready,
    await_ready,
    load_tile,
    num_sms,
    pick_config,
    store_tile,
    tile_acc,
    tile_coords,
    tile_offsets,
)

log = logging.getLogger("ktrace")

SCHEDULES = ("bulk", "producer_consumer", "fused_sequential", "fused_ws")

SCATTER: tl.constexpr = tl.constexpr("scatter")
TILE_READY: tl.constexpr = tl.constexpr("tile_ready")
TILE_WAIT: tl.constexpr = tl.constexpr("tile_wait")
TILE_SENT: tl.constexpr = tl.constexpr("tile_sent")
ARRIVE_WAIT: tl.constexpr = tl.constexpr("arrive_wait")


# ---------------------------------------------------------------------------------------------
# device building blocks
# ---------------------------------------------------------------------------------------------


@triton.jit
def await_arrivals(kt, arrive, expected, rank, world, heap_bases, worker, workers, TIMEOUT_NS: tl.constexpr):
    """Worker ``worker`` of ``workers`` waits for peers ``(rank + j) % world``, j = 1 + worker, ... .

    Between them the workers wait until ``arrive[s] >= expected`` for every peer s: everything
    the peers send this epoch has landed in this rank's heap.
    """
    for j in range(1 + worker, world, workers):
        peer = (rank + j) % world
        kt = ks.wait(kt, arrive + peer, expected, rank, peer, heap_bases, timeout_ns=TIMEOUT_NS, name=ARRIVE_WAIT)
    return kt


@triton.jit
def announce_sent(kt, arrive, count, index, rank, world, heap_bases, fault_delay_ns, fault_skip, FAULTS: tl.constexpr):
    """Add ``count`` (tiles pushed) to ``arrive[rank]`` on every peer: a release at system scope,
    so the tiles stored before it are visible first. Notify index ``index * (world - 1) + j - 1``
    for peer ``(rank + j) % world`` (the fault knob's numbering). Cost: one release per peer."""
    for j in range(1, world):
        kt = harness.notify(kt, arrive + rank, count, rank, (rank + j) % world, heap_bases, index * (world - 1) + j - 1,
                            fault_delay_ns, fault_skip, FAULTS, op="add", name=TILE_SENT)
    return kt


@triton.jit
def push_tile(kt, ptrs, val, mask, arrive, tile, rank, world, heap_bases, fault_delay_ns, fault_skip, FAULTS: tl.constexpr,
              NOTIFY_PER_TILE: tl.constexpr):
    """Store a tile (``ptrs``: its addresses in this rank's heap) into every peer's heap; with
    ``NOTIFY_PER_TILE`` then count it in each peer's ``arrive[rank]`` (:func:`announce_sent`)."""
    for j in range(1, world):
        ks.store(ptrs, val, rank, (rank + j) % world, heap_bases, mask=mask)
    if NOTIFY_PER_TILE:
        kt = announce_sent(kt, arrive, 1, tile, rank, world, heap_bases, fault_delay_ns, fault_skip, FAULTS)
    return kt


@triton.jit
def _gemm_tiles(
    kt, A, B, C, tile_flags, ready, arrive,
    first, step, M, N_loc, K, col0,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
    FAULTS: tl.constexpr, SIGNAL: tl.constexpr, SCATTER_HERE: tl.constexpr, NOTIFY_PER_TILE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, TIMEOUT_NS: tl.constexpr, TMA: tl.constexpr = False,
):
    """Compute tiles ``first, first + step, ...`` of ``C_r`` into this rank's ``C`` (columns col0..).

    ``SIGNAL``: after each tile, set ``tile_flags[tile] = epoch`` (GPU scope) for a consumer.
    ``SCATTER_HERE``: push each tile to every peer's ``C`` from registers (fused sequential);
    ``NOTIFY_PER_TILE`` then notifies each peer per tile, else once per peer at the end with the
    number of tiles pushed.
    """
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N_loc, BLOCK_N)
    n_tiles = num_pid_m * num_pid_n
    Cr = C + col0 * stride_cn
    count = 0
    for tile in range(first, n_tiles, step):
        pm, pn = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        s = kl.begin(kt, GEMM_TILE, tile, pm)
        acc = tile_acc(A, B, pm * BLOCK_M, pn * BLOCK_N, M, N_loc, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, TMA)
        val = acc.to(C.dtype.element_ty)
        rm, rn, mask = tile_offsets(pm * BLOCK_M, pn * BLOCK_N, M, N_loc, BLOCK_M, BLOCK_N)
        store_tile(Cr, val, rm, rn, mask, stride_cm, stride_cn)
        kt = kl.end(kt, s)
        if SIGNAL:
            kt = ks.notify(kt, tile_flags + tile, epoch, rank, rank, heap_bases, scope="gpu", name=TILE_READY)
        if SCATTER_HERE:
            if tile == first:
                # The peers' kernels started long ago by now: this costs one read per peer.
                kt = await_ready(kt, ready, epoch, rank, world, heap_bases, TIMEOUT_NS)
            s2 = kl.begin(kt, SCATTER, tile, world - 1)
            ptrs = Cr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
            kt = push_tile(kt, ptrs, val, mask, arrive, tile, rank, world, heap_bases, fault_delay_ns, fault_skip, FAULTS,
                           NOTIFY_PER_TILE)
            kt = kl.end(kt, s2)
        count += 1
    if SCATTER_HERE:
        if not NOTIFY_PER_TILE:
            kt = announce_sent(kt, arrive, count, tl.program_id(0), rank, world, heap_bases, fault_delay_ns, fault_skip, FAULTS)
    return kt


@triton.jit
def _scatter_tiles(
    kt, C, tile_flags, arrive,
    first, step, M, N_loc, col0, stride_cm, stride_cn,
    rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
    FAULTS: tl.constexpr, WAIT_TILES: tl.constexpr, NOTIFY_PER_TILE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, TIMEOUT_NS: tl.constexpr,
):
    """Push tiles ``first, first + step, ...`` of this rank's slice of ``C`` to every peer.

    ``WAIT_TILES``: wait for ``tile_flags[tile] >= epoch`` first (producer/consumer). Each tile is
    stored to every peer; with ``NOTIFY_PER_TILE`` each peer's ``arrive[rank]`` is then
    incremented (release, system scope) per tile, else once at the end by the number of tiles
    pushed: a release waits for the program's stores to be acknowledged (a link round trip), so
    one per tile holds the program between tiles (seen as 1-5 µs per notify on 4 x H200).
    """
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N_loc, BLOCK_N)
    n_tiles = num_pid_m * num_pid_n
    Cr = C + col0 * stride_cn
    count = 0
    for tile in range(first, n_tiles, step):
        if WAIT_TILES:
            kt = ks.wait(kt, tile_flags + tile, epoch, rank, rank, heap_bases, scope="gpu", timeout_ns=TIMEOUT_NS, name=TILE_WAIT)
        pm, pn = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        rm, rn, mask = tile_offsets(pm * BLOCK_M, pn * BLOCK_N, M, N_loc, BLOCK_M, BLOCK_N)
        s = kl.begin(kt, SCATTER, tile, world - 1)
        val = load_tile(Cr, rm, rn, mask, stride_cm, stride_cn)
        ptrs = Cr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
        kt = push_tile(kt, ptrs, val, mask, arrive, tile, rank, world, heap_bases, fault_delay_ns, fault_skip, FAULTS, NOTIFY_PER_TILE)
        kt = kl.end(kt, s)
        count += 1
    if not NOTIFY_PER_TILE:
        kt = announce_sent(kt, arrive, count, first, rank, world, heap_bases, fault_delay_ns, fault_skip, FAULTS)
    return kt


@triton.jit
def _comm_worker(
    kt, C, tile_flags, ready, arrive, worker, workers, M, N_loc, col0, stride_cm, stride_cn,
    rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
    FAULTS: tl.constexpr, WAIT_TILES: tl.constexpr, NOTIFY_PER_TILE: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, TIMEOUT_NS: tl.constexpr,
):
    """Communication program ``worker`` of ``workers`` (``fused_ws``'s, or the scatter kernel's):
    wait for the peers, push its tiles (ready ones when ``WAIT_TILES``), await arrivals."""
    kt = await_ready(kt, ready, epoch, rank, world, heap_bases, TIMEOUT_NS)
    kt = _scatter_tiles(
        kt, C, tile_flags, arrive, worker, workers, M, N_loc, col0, stride_cm, stride_cn,
        rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
        FAULTS, WAIT_TILES, NOTIFY_PER_TILE, BLOCK_M, BLOCK_N, GROUP_M, TIMEOUT_NS,
    )
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N_loc, BLOCK_N)
    kt = await_arrivals(kt, arrive, epoch * n_tiles, rank, world, heap_bases, worker, workers, TIMEOUT_NS)
    return kt


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------


def _tiles(meta) -> int:
    return triton.cdiv(meta["M"], meta["BLOCK_M"]) * triton.cdiv(meta["N_loc"], meta["BLOCK_N"])


def _gemm_slots(meta) -> int:
    per = triton.cdiv(_tiles(meta), meta["NUM_PROGS"])
    return 2 * (meta["world"] - 1) + per * (1 + 2 * bool(meta["SIGNAL"])) + 2


def _scatter_slots(meta) -> int:
    w = meta["world"]
    per = triton.cdiv(_tiles(meta), meta["NUM_PROGS"])
    return 6 * (w - 1) + per * (1 + 2 * bool(meta["WAIT_TILES"]) + 2 * (w - 1) * bool(meta.get("NOTIFY_PER_TILE", False))) + 2


def _fused_seq_slots(meta) -> int:
    w = meta["world"]
    per = triton.cdiv(_tiles(meta), meta["NUM_PROGS"])
    per_tile = 2 + (2 * (w - 1) if meta["NOTIFY_PER_TILE"] else 0)
    return 6 * (w - 1) + per * per_tile + 2


def _ws_slots(meta) -> int:
    w = meta["world"]
    tiles = _tiles(meta)
    g = triton.cdiv(tiles, meta["GEMM_PROGS"]) * 3
    c = triton.cdiv(tiles, meta["NUM_PROGS"] - meta["GEMM_PROGS"]) * (3 + 2 * (w - 1) * bool(meta.get("NOTIFY_PER_TILE", False)))
    return 8 * (w - 1) + max(g, c) + 2


@ktrace.trace(events_per_program=_gemm_slots)
@triton.jit(do_not_specialize=harness.RUNTIME_INTS)
def gemm_kernel(
    A, B, C, tile_flags, ready,
    M, N_loc, K, col0,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    rank, world, heap_bases, epoch,
    NUM_PROGS: tl.constexpr, SIGNAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
    TMA: tl.constexpr = False, ktrace_buf=None, KTRACE: tl.constexpr = 0,
):
    """The GEMM half of ``bulk`` and ``producer_consumer``: persistent tiles of ``C_r`` into ``C``.

    Program 0 first announces the epoch to the peers (``ready``). With ``SIGNAL`` each tile is
    then marked in ``tile_flags`` for the concurrent scatter kernel.
    """
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    if pid == 0:
        kt = announce_ready(kt, ready, epoch, rank, world, heap_bases)
    kt = _gemm_tiles(
        kt, A, B, C, tile_flags, ready, ready, pid, NUM_PROGS, M, N_loc, K, col0,
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
        rank, world, heap_bases, epoch, 0, -1,
        False, SIGNAL, False, False, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EVEN_K, 0, TMA,
    )


@ktrace.trace(events_per_program=_scatter_slots)
@triton.jit(do_not_specialize=harness.RUNTIME_INTS)
def scatter_kernel(
    C, tile_flags, ready, arrive,
    M, N_loc, col0, stride_cm, stride_cn,
    rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
    NUM_PROGS: tl.constexpr, WAIT_TILES: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, TIMEOUT_NS: tl.constexpr,
    FAULTS: tl.constexpr, NOTIFY_PER_TILE: tl.constexpr = False,
    ktrace_buf=None, KTRACE: tl.constexpr = 0,
):
    """The scatter half of ``bulk`` (tiles already computed) and ``producer_consumer`` (``WAIT_TILES``).

    Every program waits for the peers' ``ready``, pushes its tiles, and programs
    ``0 .. world - 2`` then wait for the peers' tiles to have arrived.
    """
    kt = kl.init(ktrace_buf, KTRACE)
    _comm_worker(
        kt, C, tile_flags, ready, arrive, tl.program_id(0), NUM_PROGS, M, N_loc, col0, stride_cm, stride_cn,
        rank, world, heap_bases, epoch, fault_delay_ns, fault_skip, FAULTS, WAIT_TILES, NOTIFY_PER_TILE, BLOCK_M, BLOCK_N,
        GROUP_M, TIMEOUT_NS,
    )


@ktrace.trace(events_per_program=_fused_seq_slots)
@triton.jit(do_not_specialize=harness.RUNTIME_INTS)
def fused_sequential_kernel(
    A, B, C, ready, arrive,
    M, N_loc, K, col0,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
    NUM_PROGS: tl.constexpr, NOTIFY_PER_TILE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
    TIMEOUT_NS: tl.constexpr, FAULTS: tl.constexpr,
    TMA: tl.constexpr = False, ktrace_buf=None, KTRACE: tl.constexpr = 0,
):
    """Fused sequential: each program computes a tile, then pushes it to every peer, and goes on."""
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    if pid == 0:
        kt = announce_ready(kt, ready, epoch, rank, world, heap_bases)
    kt = _gemm_tiles(
        kt, A, B, C, ready, ready, arrive, pid, NUM_PROGS, M, N_loc, K, col0,
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
        rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
        FAULTS, False, True, NOTIFY_PER_TILE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EVEN_K, TIMEOUT_NS, TMA,
    )
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N_loc, BLOCK_N)
    kt = await_arrivals(kt, arrive, epoch * n_tiles, rank, world, heap_bases, pid, NUM_PROGS, TIMEOUT_NS)


@ktrace.trace(events_per_program=_ws_slots)
@triton.jit(do_not_specialize=harness.RUNTIME_INTS)
def fused_ws_kernel(
    A, B, C, tile_flags, ready, arrive,
    M, N_loc, K, col0,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
    NUM_PROGS: tl.constexpr, GEMM_PROGS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
    TIMEOUT_NS: tl.constexpr, FAULTS: tl.constexpr,
    TMA: tl.constexpr = False, NOTIFY_PER_TILE: tl.constexpr = False, ktrace_buf=None, KTRACE: tl.constexpr = 0,
):
    """Fused, workgroup-specialised: programs ``< GEMM_PROGS`` compute, the rest scatter.

    The grid must not exceed what runs at once on the device (one program per SM): GEMM and
    communication programs wait on each other only through flags.
    """
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    if pid == 0:
        kt = announce_ready(kt, ready, epoch, rank, world, heap_bases)
    if pid < GEMM_PROGS:
        kt = _gemm_tiles(
            kt, A, B, C, tile_flags, ready, arrive, pid, GEMM_PROGS, M, N_loc, K, col0,
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
            rank, world, heap_bases, epoch, 0, -1,
            False, True, False, False, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EVEN_K, TIMEOUT_NS, TMA,
        )
    if pid >= GEMM_PROGS:
        kt = _comm_worker(
            kt, C, tile_flags, ready, arrive, pid - GEMM_PROGS, NUM_PROGS - GEMM_PROGS, M, N_loc, col0, stride_cm, stride_cn,
            rank, world, heap_bases, epoch, fault_delay_ns, fault_skip, FAULTS, True, NOTIFY_PER_TILE, BLOCK_M, BLOCK_N,
            GROUP_M, TIMEOUT_NS,
        )


# ---------------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllScatterConfig:
    """How :class:`GemmAllScatter` runs (validated on construction).

    Args:
        schedule: one of :data:`SCHEDULES`.
        gemm: tile shape (None: :func:`instrumented_kernels.common_gemm.pick_config` for the
            programs that compute).
        comm_programs: programs that scatter in ``producer_consumer`` and ``fused_ws`` (the GEMM
            gets the rest of the SMs); ignored by the other schedules.
        gemm_programs: cap on the programs that compute (None: as many as the SMs allow).
        scatter_programs: programs of the ``bulk`` scatter kernel (None: every SM).
        notify_per_tile: notify the peers after every tile pushed (finer signals, each a
            release that waits for the tile's stores) instead of once per pushing program at its
            end, in every schedule.
        timeout_ns: bound of every wait (then reported by ``heap.check()``).
        fault: the fault-injection knob (``harness.Fault``).
    """

    schedule: str = "fused_sequential"
    gemm: GemmConfig | None = None
    comm_programs: int = 16
    gemm_programs: int | None = None
    scatter_programs: int | None = None
    notify_per_tile: bool = False
    timeout_ns: int = 2_000_000_000
    fault: harness.Fault = field(default_factory=lambda: harness.NO_FAULT)

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.gemm is not None and not isinstance(self.gemm, GemmConfig):
            raise TypeError(f"gemm must be a GemmConfig or None, got {self.gemm!r}")
        if not isinstance(self.comm_programs, int) or self.comm_programs < 1:
            raise ValueError(f"comm_programs must be >= 1, got {self.comm_programs!r}")
        if self.gemm_programs is not None and self.gemm_programs < 1:
            raise ValueError(f"gemm_programs must be >= 1, got {self.gemm_programs!r}")
        if self.scatter_programs is not None and self.scatter_programs < 1:
            raise ValueError(f"scatter_programs must be >= 1, got {self.scatter_programs!r}")
        if not isinstance(self.timeout_ns, int) or self.timeout_ns <= 0:
            raise ValueError(f"timeout_ns must be a positive int, got {self.timeout_ns!r}")
        if not isinstance(self.fault, harness.Fault):
            raise TypeError(f"fault must be a harness.Fault, got {self.fault!r}")


class GemmAllScatter:
    """A plan for ``C = all_gather_columns(A @ B_r)`` on a symmetric heap. Creating it is collective.

    Args:
        heap: the symmetric heap (``harness.heap(...)``); ``C`` and the flags are allocated on it.
        M, N, K: global sizes; ``N`` must be a multiple of the world size (N_loc = N / world).
        dtype: element type of A, B and C (bf16 or fp16).
        config: an :class:`AllScatterConfig`.
        C: optional ``M x N`` heap tensor to write (plans of several schedules may share one,
            as long as their calls are issued on one stream); allocated when None.

    Call it with ``A`` (``M x K``) and ``B_r`` (``K x N_loc``) to get ``C`` (a view of the heap,
    overwritten by the next call). Every rank must call it the same number of times.
    """

    def __init__(self, heap, M: int, N: int, K: int, dtype, config: AllScatterConfig | None = None, C=None):
        import torch

        self.heap = heap
        self.rank, self.world = heap.rank, heap.world_size
        if min(M, N, K) <= 0:
            raise ValueError(f"sizes must be positive, got M={M} N={N} K={K}")
        if N % self.world:
            raise ValueError(f"N={N} is not a multiple of the world size {self.world}")
        if dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"dtype must be bfloat16 or float16, got {dtype}")
        self.M, self.N, self.K, self.N_loc = M, N, K, N // self.world
        self.dtype = dtype
        self.config = config or AllScatterConfig()
        self.config.fault.check_world(self.world)
        dev = heap.device
        self.sms = num_sms(dev.index)
        cfg = self.config
        if cfg.schedule in ("producer_consumer", "fused_ws"):
            if cfg.comm_programs >= self.sms:
                raise ValueError(f"comm_programs={cfg.comm_programs} leaves no SM for the GEMM ({self.sms} SMs)")
            self.gemm_programs = self.sms - cfg.comm_programs
        else:
            self.gemm_programs = self.sms
        if cfg.gemm_programs is not None:
            self.gemm_programs = min(self.gemm_programs, cfg.gemm_programs)
        if cfg.gemm is None:
            # TMA operands on NVIDIA (4 x H200: 3-6 % faster GEMM than pointer loads); the
            # schedules that send while computing pay for a big last wave (see pick_config)
            overlapped = cfg.schedule in ("producer_consumer", "fused_ws")
            self.gemm_cfg = pick_config(M, self.N_loc, K, self.gemm_programs, tail_weight=1.0 if overlapped else 0.0,
                                        tma=torch.version.hip is None)
        else:
            self.gemm_cfg = cfg.gemm
        self.n_tiles = self.gemm_cfg.tiles(M, self.N_loc)
        self.gemm_programs = min(self.gemm_programs, self.n_tiles)
        self.comm_programs = min(cfg.comm_programs, self.n_tiles)
        self.scatter_programs = min(cfg.scatter_programs or self.sms, self.n_tiles)
        if C is None:
            C = heap.zeros(M, N, dtype=dtype, name="gemm_all_scatter.C")
        elif tuple(C.shape) != (M, N) or C.dtype != dtype or not C.is_contiguous():
            raise ValueError(f"C must be a contiguous {M}x{N} {dtype} heap tensor, got {tuple(C.shape)} {C.dtype}")
        else:
            heap.offset_of(C)  # raises unless C lies on this heap
        self.C = C
        self.tile_flags = heap.zeros(self.n_tiles, dtype=torch.int32, name="gemm_all_scatter.tile_flags")
        self.ready = heap.zeros(self.world, dtype=torch.int32, name="gemm_all_scatter.ready")
        self.arrive = heap.zeros(self.world, dtype=torch.int32, name="gemm_all_scatter.arrive")
        self.epoch = 0
        self._comm_stream = torch.cuda.Stream(device=dev) if cfg.schedule == "producer_consumer" else None
        self._trace_bufs: dict = {}
        heap.barrier()

    # ------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Collective: zero the flags and the epoch (after a faulty launch left them uneven)."""
        self.heap.barrier()
        self.tile_flags.zero_()
        self.ready.zero_()
        self.arrive.zero_()
        self.epoch = 0
        self.heap.barrier()

    def _check_inputs(self, A, B):
        if tuple(A.shape) != (self.M, self.K) or tuple(B.shape) != (self.K, self.N_loc):
            raise ValueError(
                f"expected A {self.M}x{self.K} and B_r {self.K}x{self.N_loc}, got {tuple(A.shape)} and {tuple(B.shape)}"
            )
        if A.dtype != self.dtype or B.dtype != self.dtype:
            raise ValueError(f"A and B must be {self.dtype}, got {A.dtype} and {B.dtype}")
        if A.device != self.heap.device or B.device != self.heap.device:
            raise ValueError("A and B must be on the heap's device")

    def _trace(self, name: str, traced, n_programs: int, capacity: int) -> dict:
        """Direct-launch trace arguments (a buffer kept per kernel) when ``traced`` (True or "ring")."""
        return harness.trace_args(self._trace_bufs, name, traced, n_programs, capacity, self.heap.device)

    def _common(self, A=None, B=None):
        C = self.C
        return dict(
            M=self.M, N_loc=self.N_loc, col0=self.rank * self.N_loc,
            stride_cm=C.stride(0), stride_cn=C.stride(1),
            rank=self.rank, world=self.world, heap_bases=self.heap.bases, epoch=self.epoch,
        )

    def _gemm_args(self, A, B):
        g = self.gemm_cfg
        return dict(
            K=self.K, stride_am=A.stride(0), stride_ak=A.stride(1), stride_bk=B.stride(0), stride_bn=B.stride(1),
            BLOCK_M=g.block_m, BLOCK_N=g.block_n, BLOCK_K=g.block_k, GROUP_M=g.group_m, EVEN_K=self.K % g.block_k == 0,
            TMA=g.tma, num_warps=g.num_warps, num_stages=g.num_stages,
        )

    def _fault_args(self):
        d, s = self.config.fault.kernel_args(self.rank)
        return dict(fault_delay_ns=d, fault_skip=s, FAULTS=self.config.fault.active)

    def __call__(self, A, B, traced: bool | str = False):
        """Run the schedule; returns ``C`` (``M x N``, this rank's heap).

        Args:
            A: ``M x K``; B: this rank's ``K x N_loc`` slice.
            traced: launch with this plan's own event buffers (for timing the probes without a
                capture session; ``"ring"``: in ring mode, :func:`harness.trace_args`). Under
                ``ktrace.capture()`` launches are traced anyway.
        """
        self._check_inputs(A, B)
        self.epoch += 1
        sched = self.config.schedule
        tA, tB = self.gemm_cfg.operands(A, B)
        if sched == "bulk":
            self._launch_gemm(A, B, signal=False, traced=traced)
            self._launch_scatter(wait_tiles=False, programs=self.scatter_programs, traced=traced)
        elif sched == "producer_consumer":
            import torch

            main = torch.cuda.current_stream(self.heap.device)
            side = self._comm_stream
            side.wait_stream(main)
            self._launch_gemm(A, B, signal=True, traced=traced)
            with torch.cuda.stream(side):
                self._launch_scatter(wait_tiles=True, programs=self.comm_programs, traced=traced)
            main.wait_stream(side)
        elif sched == "fused_sequential":
            progs = self.gemm_programs
            meta = dict(M=self.M, N_loc=self.N_loc, BLOCK_M=self.gemm_cfg.block_m, BLOCK_N=self.gemm_cfg.block_n,
                        NUM_PROGS=progs, world=self.world, NOTIFY_PER_TILE=self.config.notify_per_tile)
            fused_sequential_kernel[(progs,)](
                tA, tB, self.C, self.ready, self.arrive, **self._common(A, B), **self._gemm_args(A, B), **self._fault_args(),
                NUM_PROGS=progs, NOTIFY_PER_TILE=self.config.notify_per_tile, TIMEOUT_NS=self.config.timeout_ns,
                **self._trace("fused_sequential", traced, progs, _fused_seq_slots(meta)),
            )
        else:
            progs = self.gemm_programs + self.comm_programs
            meta = dict(M=self.M, N_loc=self.N_loc, BLOCK_M=self.gemm_cfg.block_m, BLOCK_N=self.gemm_cfg.block_n,
                        NUM_PROGS=progs, GEMM_PROGS=self.gemm_programs, world=self.world, NOTIFY_PER_TILE=self.config.notify_per_tile)
            fused_ws_kernel[(progs,)](
                tA, tB, self.C, self.tile_flags, self.ready, self.arrive, **self._common(A, B), **self._gemm_args(A, B),
                **self._fault_args(), NUM_PROGS=progs, GEMM_PROGS=self.gemm_programs, TIMEOUT_NS=self.config.timeout_ns,
                NOTIFY_PER_TILE=self.config.notify_per_tile,
                **self._trace("fused_ws", traced, progs, _ws_slots(meta)),
            )
        return self.C

    def _launch_gemm(self, A, B, signal: bool, traced: bool | str):
        progs = self.gemm_programs
        meta = dict(M=self.M, N_loc=self.N_loc, BLOCK_M=self.gemm_cfg.block_m, BLOCK_N=self.gemm_cfg.block_n,
                    NUM_PROGS=progs, world=self.world, SIGNAL=signal)
        tA, tB = self.gemm_cfg.operands(A, B)
        gemm_kernel[(progs,)](
            tA, tB, self.C, self.tile_flags, self.ready, **self._common(A, B), **self._gemm_args(A, B),
            NUM_PROGS=progs, SIGNAL=signal, **self._trace("gemm", traced, progs, _gemm_slots(meta)),
        )

    def _launch_scatter(self, wait_tiles: bool, programs: int, traced: bool | str):
        g = self.gemm_cfg
        meta = dict(M=self.M, N_loc=self.N_loc, BLOCK_M=g.block_m, BLOCK_N=g.block_n, NUM_PROGS=programs,
                    world=self.world, WAIT_TILES=wait_tiles, NOTIFY_PER_TILE=self.config.notify_per_tile)
        scatter_kernel[(programs,)](
            self.C, self.tile_flags, self.ready, self.arrive, **self._common(), **self._fault_args(),
            NUM_PROGS=programs, WAIT_TILES=wait_tiles, BLOCK_M=g.block_m, BLOCK_N=g.block_n, GROUP_M=g.group_m,
            TIMEOUT_NS=self.config.timeout_ns, NOTIFY_PER_TILE=self.config.notify_per_tile, num_warps=8,
            **self._trace("scatter", traced, programs, _scatter_slots(meta)),
        )

    # pieces of the bulk schedule, timed alone for the overlap figures ---------------------------
    def gemm_only(self, A, B):
        """Only the GEMM kernel (all SMs, no signals): the compute time of the bulk schedule."""
        self._check_inputs(A, B)
        # The epoch does not advance: the kernel re-announces the current one (a no-op for the
        # peers) and no arrival counter moves, so later full calls stay in step.
        self._launch_gemm(A, B, signal=False, traced=False)
        return self.C
