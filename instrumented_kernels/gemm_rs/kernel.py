"""GEMM + reduce-scatter, fused in one persistent kernel, traced and untraced from one source.

Problem (tensor-parallel, K sharded): rank r holds ``A_r`` (``M x K_loc``, its columns of A) and
``B_r`` (``K_loc x N``, its rows of B). ``A @ B = sum_r A_r @ B_r``; rank r must end with rows
``r * M/world ...`` of that sum (``out_r``, ``M/world x N``).

Schedule: every program first computes partial tiles in *rank-swizzled* order — the row block of
rank ``r + 1`` first, then ``r + 2``, ..., its own block last — and stores each tile straight
into the owner's receive buffer ``P[r]`` (``world x M/world x N`` on the heap), then adds 1 to the
owner's per-tile counter ``arrive[tile]`` (release, system scope). Then the programs reduce this
rank's tiles: wait for ``arrive[tile] >= epoch * world`` and sum the ``world`` partials in float32.
Partials travel in the input dtype (as NCCL's reduce-scatter does).

Before its first write into a peer's ``P`` a program waits for the peer's ``ready[rank]`` (the
peer's kernel of this epoch started, so its previous reduction no longer reads ``P``).

Probes: ``gemm_tile`` span per partial tile (args: tile, owner rank); ``reduce`` span per output
tile (args: tile, world); WAIT events ``partial_wait`` (peer recorded: this rank, the counter
collects every rank's contribution) and ``ready_wait``; NOTIFY events ``partial_sent``, ``ready``.

Fault knob: applies to the ``partial_sent`` notifies. Notify index: the linear partial-tile id
``t = step * tiles_per_block + tile`` (step 0 = the block of rank ``r + 1``).
"""

from __future__ import annotations

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
    tile_coords,
    tile_dot,
    tile_offsets,
)

REDUCE: tl.constexpr = tl.constexpr("reduce")
PARTIAL_SENT: tl.constexpr = tl.constexpr("partial_sent")
PARTIAL_WAIT: tl.constexpr = tl.constexpr("partial_wait")


def _slots(meta) -> int:
    w = meta["world"]
    per_block = triton.cdiv(meta["M_loc"], meta["BLOCK_M"]) * triton.cdiv(meta["N"], meta["BLOCK_N"])
    p1 = triton.cdiv(per_block * w, meta["NUM_PROGS"]) * 3
    p2 = triton.cdiv(per_block, meta["NUM_PROGS"]) * 3
    return 4 * (w - 1) + p1 + p2 + 2


@triton.jit
def _reduce_tiles(
    kt, P, out, arrive, first, step, M_loc, N, stride_pm, stride_pn, stride_om, stride_on,
    rank, world, heap_bases, epoch,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, TIMEOUT_NS: tl.constexpr,
):
    """Sum the ``world`` partials of tiles ``first, first + step, ...`` of this rank's block."""
    pm_per = tl.cdiv(M_loc, BLOCK_M)
    pn_n = tl.cdiv(N, BLOCK_N)
    for j in range(first, pm_per * pn_n, step):
        kt = ks.wait(kt, arrive + j, epoch * world, rank, rank, heap_bases, timeout_ns=TIMEOUT_NS, name=PARTIAL_WAIT)
        pm, pn = tile_coords(j, pm_per, pn_n, GROUP_M)
        s = kl.begin(kt, REDUCE, j, world)
        rm, rn, mask = tile_offsets(pm * BLOCK_M, pn * BLOCK_N, M_loc, N, BLOCK_M, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for src in range(0, world):
            acc += load_tile(P + src * M_loc * stride_pm, rm, rn, mask, stride_pm, stride_pn).to(tl.float32)
        store_tile(out, acc.to(out.dtype.element_ty), rm, rn, mask, stride_om, stride_on)
        kt = kl.end(kt, s)
    return kt


@ktrace.trace(events_per_program=_slots)
@triton.jit(do_not_specialize=harness.RUNTIME_INTS)
def gemm_rs_kernel(
    A, B, P, out, arrive, ready,
    M_loc, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_pm, stride_pn, stride_om, stride_on,
    rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
    NUM_PROGS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
    TIMEOUT_NS: tl.constexpr, FAULTS: tl.constexpr,
    ktrace_buf=None, KTRACE: tl.constexpr = 0,
):
    """GEMM + RS: partial tiles pushed to their owners, then this rank's tiles reduced.

    The grid must fit on the device at once: reducing programs wait for every rank's partials.
    """
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    if pid == 0:
        kt = announce_ready(kt, ready, epoch, rank, world, heap_bases)
    pm_per = tl.cdiv(M_loc, BLOCK_M)
    pn_n = tl.cdiv(N, BLOCK_N)
    per_block = pm_per * pn_n
    for t in range(pid, per_block * world, NUM_PROGS):
        if t == pid:
            # Long after the peers started: one read per peer.
            kt = await_ready(kt, ready, epoch, rank, world, heap_bases, TIMEOUT_NS)
        dest = (rank + 1 + t // per_block) % world
        within = t % per_block
        pm, pn = tile_coords(within, pm_per, pn_n, GROUP_M)
        s = kl.begin(kt, GEMM_TILE, t, dest)
        acc = tile_dot(A + dest * M_loc * stride_am, B, pm * BLOCK_M, pn * BLOCK_N, M_loc, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K)
        rm, rn, mask = tile_offsets(pm * BLOCK_M, pn * BLOCK_N, M_loc, N, BLOCK_M, BLOCK_N)
        ptrs = P + rank * M_loc * stride_pm + rm[:, None] * stride_pm + rn[None, :] * stride_pn
        ks.store(ptrs, acc.to(P.dtype.element_ty), rank, dest, heap_bases, mask=mask)
        kt = kl.end(kt, s)
        kt = harness.notify(kt, arrive + within, 1, rank, dest, heap_bases, t, fault_delay_ns, fault_skip, FAULTS,
                            op="add", name=PARTIAL_SENT)
    kt = _reduce_tiles(
        kt, P, out, arrive, pid, NUM_PROGS, M_loc, N, stride_pm, stride_pn, stride_om, stride_on,
        rank, world, heap_bases, epoch, BLOCK_M, BLOCK_N, GROUP_M, TIMEOUT_NS,
    )


@dataclass(frozen=True)
class GemmRSConfig:
    """How :class:`GemmReduceScatter` runs (validated on construction).

    Args:
        gemm: tile shape (None: picked for the problem).
        programs: cap on the persistent programs (None: one per SM).
        timeout_ns: bound of every wait.
        fault: the fault-injection knob.
    """

    gemm: GemmConfig | None = None
    programs: int | None = None
    timeout_ns: int = 2_000_000_000
    fault: harness.Fault = field(default_factory=lambda: harness.NO_FAULT)

    def __post_init__(self):
        if self.gemm is not None and not isinstance(self.gemm, GemmConfig):
            raise TypeError(f"gemm must be a GemmConfig or None, got {self.gemm!r}")
        if self.programs is not None and self.programs < 1:
            raise ValueError(f"programs must be >= 1, got {self.programs!r}")
        if not isinstance(self.timeout_ns, int) or self.timeout_ns <= 0:
            raise ValueError(f"timeout_ns must be a positive int, got {self.timeout_ns!r}")
        if not isinstance(self.fault, harness.Fault):
            raise TypeError(f"fault must be a harness.Fault, got {self.fault!r}")


class GemmReduceScatter:
    """A plan for ``out_r = rows_r(sum_s A_s @ B_s)``. Creating it is collective.

    Args:
        heap: the symmetric heap; the partial buffers ``P`` and the flags are allocated on it.
        M, N, K_loc: global rows (a multiple of the world size), columns, this rank's depth.
        dtype: bf16 or fp16.
        config: a :class:`GemmRSConfig`.

    Call it with ``A_r`` (``M x K_loc``) and ``B_r`` (``K_loc x N``); returns ``out_r``
    (``M/world x N``, a buffer of the plan overwritten by the next call).
    """

    def __init__(self, heap, M: int, N: int, K_loc: int, dtype, config: GemmRSConfig | None = None):
        import torch

        self.heap = heap
        self.rank, self.world = heap.rank, heap.world_size
        if min(M, N, K_loc) <= 0 or M % self.world:
            raise ValueError(f"need positive sizes with M a multiple of the world size {self.world}: M={M} N={N} K_loc={K_loc}")
        if dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"dtype must be bfloat16 or float16, got {dtype}")
        self.M, self.M_loc, self.N, self.K, self.dtype = M, M // self.world, N, K_loc, dtype
        self.config = cfg = config or GemmRSConfig()
        cfg.fault.check_world(self.world)
        progs = num_sms(heap.device.index)
        if cfg.programs is not None:
            progs = min(progs, cfg.programs)
        self.gemm_cfg = cfg.gemm or pick_config(self.M_loc, N, K_loc, max(1, progs // self.world))
        self.per_block = self.gemm_cfg.tiles(self.M_loc, N)
        self.programs = min(progs, self.per_block * self.world)
        self.P = heap.zeros(self.world, self.M_loc, N, dtype=dtype, name="gemm_rs.P")
        self.arrive = heap.zeros(self.per_block, dtype=torch.int32, name="gemm_rs.arrive")
        self.ready = heap.zeros(self.world, dtype=torch.int32, name="gemm_rs.ready")
        self.out = torch.empty((self.M_loc, N), dtype=dtype, device=heap.device)
        self.epoch = 0
        self._trace_bufs: dict = {}
        heap.barrier()

    def reset(self) -> None:
        """Collective: zero the flags and the epoch (after a faulty launch)."""
        self.heap.barrier()
        self.arrive.zero_()
        self.ready.zero_()
        self.epoch = 0
        self.heap.barrier()

    def __call__(self, A, B, traced: bool | str = False):
        """Run the fused kernel; returns ``out_r``. ``traced``: use the plan's own event buffer
        (``"ring"``: in ring mode, :func:`harness.trace_args`)."""
        if tuple(A.shape) != (self.M, self.K) or tuple(B.shape) != (self.K, self.N):
            raise ValueError(f"expected A_r {self.M}x{self.K} and B_r {self.K}x{self.N}, got {tuple(A.shape)}, {tuple(B.shape)}")
        if A.dtype != self.dtype or B.dtype != self.dtype:
            raise ValueError(f"A_r and B_r must be {self.dtype}")
        self.epoch += 1
        g = self.gemm_cfg
        progs = self.programs
        extra = {}
        if traced:
            cap = _slots(dict(world=self.world, M_loc=self.M_loc, N=self.N, BLOCK_M=g.block_m, BLOCK_N=g.block_n, NUM_PROGS=progs))
            extra = harness.trace_args(self._trace_bufs, "kernel", traced, progs, cap, self.heap.device)
        d, s = self.config.fault.kernel_args(self.rank)
        P, out = self.P, self.out
        gemm_rs_kernel[(progs,)](
            A, B, P, out, self.arrive, self.ready, self.M_loc, self.N, self.K,
            A.stride(0), A.stride(1), B.stride(0), B.stride(1), P.stride(1), P.stride(2), out.stride(0), out.stride(1),
            self.rank, self.world, self.heap.bases, self.epoch, d, s,
            NUM_PROGS=progs, BLOCK_M=g.block_m, BLOCK_N=g.block_n, BLOCK_K=g.block_k, GROUP_M=g.group_m,
            EVEN_K=self.K % g.block_k == 0, TIMEOUT_NS=self.config.timeout_ns, FAULTS=self.config.fault.active,
            num_warps=g.num_warps, num_stages=g.num_stages, **extra,
        )
        return out
