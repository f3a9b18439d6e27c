"""All-gather + GEMM, fused in one workgroup-specialised persistent kernel, traced and untraced.

Problem (sequence-parallel input, tensor-parallel weight): rank r holds ``A_r`` (``M/world x K``,
its rows of A) and ``B_r`` (``K x N_loc``); it needs ``C_r = A @ B_r`` (``M x N_loc``) where
``A = [A_0; A_1; ...]`` is the row-wise all-gather of the shards.

Schedule: programs ``>= gemm_programs`` are copy workers. They push this rank's shard into every
peer's ``A_full`` (``M x K`` on the heap) in chunks of ``BLOCK_M`` rows, chunk-major (chunk 0 to
every peer, then chunk 1, ...), and after each chunk set the peer's flag
``chunk_flags[rank, chunk] = epoch``. GEMM programs walk the output tiles in *rank-swizzled*
order: first every tile whose rows are this rank's own shard (read straight from ``A_r``, no
wait), then the rows of rank ``r + 1``, ``r + 2``, ... — before a tile of rank s's rows they wait
for ``chunk_flags[s, chunk]``. So each rank starts on local data while the first chunks travel.

Before writing into a peer's ``A_full`` a copy worker waits for the peer's ``ready[rank]`` (the
peer's kernel of this epoch started, so its previous GEMM no longer reads ``A_full``).

Probes: ``gemm_tile`` span per tile (args: tile, source rank); ``push`` span per chunk sent
(args: chunk, peer); WAIT events ``chunk_wait`` (per remote tile row block) and ``ready_wait``;
NOTIFY events ``chunk_ready`` and ``ready``.

Fault knob: applies to the ``chunk_ready`` notifies. Notify index: ``chunk * (world - 1) + (j - 1)``
for chunk ``chunk`` sent to peer ``(rank + j) % world``.
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
    num_sms,
    pick_config,
    store_tile,
    tile_coords,
    tile_dot,
    tile_offsets,
)

PUSH: tl.constexpr = tl.constexpr("push")
CHUNK_READY: tl.constexpr = tl.constexpr("chunk_ready")
CHUNK_WAIT: tl.constexpr = tl.constexpr("chunk_wait")


@triton.jit
def _push_chunks(
    kt, A_loc, A_full, chunk_flags, ready, worker, workers, M_loc, K, stride_am, stride_ak,
    rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
    FAULTS: tl.constexpr, BLOCK_M: tl.constexpr, COPY_K: tl.constexpr, TIMEOUT_NS: tl.constexpr,
):
    """Copy worker: push chunks of this rank's shard into the peers' ``A_full``, then flag them.

    Items are ``chunk * (world - 1) + (j - 1)`` (chunk-major), taken round-robin by the workers.
    """
    kt = await_ready(kt, ready, epoch, rank, world, heap_bases, TIMEOUT_NS)
    n_chunks = tl.cdiv(M_loc, BLOCK_M)
    rk = tl.arange(0, COPY_K)
    for item in range(worker, n_chunks * (world - 1), workers):
        chunk = item // (world - 1)
        j = item % (world - 1) + 1
        peer = (rank + j) % world
        s = kl.begin(kt, PUSH, chunk, peer)
        rm = chunk * BLOCK_M + tl.arange(0, BLOCK_M)
        mrow = rm < M_loc
        src = A_loc + rm[:, None] * stride_am
        dst = A_full + (rank * M_loc + rm)[:, None] * stride_am
        for k0 in range(0, K, COPY_K):
            m = mrow[:, None] & ((k0 + rk) < K)[None, :]
            v = tl.load(src + (k0 + rk)[None, :] * stride_ak, mask=m)
            ks.store(dst + (k0 + rk)[None, :] * stride_ak, v, rank, peer, heap_bases, mask=m)
        kt = harness.notify(kt, chunk_flags + rank * n_chunks + chunk, epoch, rank, peer, heap_bases, item,
                            fault_delay_ns, fault_skip, FAULTS, name=CHUNK_READY)
        kt = kl.end(kt, s)
    return kt


@triton.jit
def _gemm_swizzled(
    kt, A_loc, A_full, B, C, chunk_flags, first, step, M_loc, N_loc, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    rank, world, heap_bases, epoch,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, TIMEOUT_NS: tl.constexpr,
):
    """GEMM programs: tiles in rank-swizzled order (own rows first), waiting for remote rows."""
    pm_per = tl.cdiv(M_loc, BLOCK_M)
    pn_n = tl.cdiv(N_loc, BLOCK_N)
    per_rank = pm_per * pn_n
    for t in range(first, per_rank * world, step):
        src = (rank + t // per_rank) % world
        pm, pn = tile_coords(t % per_rank, pm_per, pn_n, GROUP_M)
        if src != rank:
            kt = ks.wait(kt, chunk_flags + src * pm_per + pm, epoch, rank, src, heap_bases, timeout_ns=TIMEOUT_NS, name=CHUNK_WAIT)
            a_rows = A_full + (src * M_loc) * stride_am
        else:
            a_rows = A_loc
        s = kl.begin(kt, GEMM_TILE, t, src)
        acc = tile_dot(a_rows, B, pm * BLOCK_M, pn * BLOCK_N, M_loc, N_loc, K, stride_am, stride_ak, stride_bk, stride_bn,
                       BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K)
        rm, rn, mask = tile_offsets(pm * BLOCK_M, pn * BLOCK_N, M_loc, N_loc, BLOCK_M, BLOCK_N)
        store_tile(C + (src * M_loc) * stride_cm, acc.to(C.dtype.element_ty), rm, rn, mask, stride_cm, stride_cn)
        kt = kl.end(kt, s)
    return kt


def _slots(meta) -> int:
    w = meta["world"]
    pm_per = triton.cdiv(meta["M_loc"], meta["BLOCK_M"])
    tiles = pm_per * triton.cdiv(meta["N_loc"], meta["BLOCK_N"]) * w
    g = triton.cdiv(tiles, meta["GEMM_PROGS"]) * 3
    c = triton.cdiv(pm_per * max(1, w - 1), meta["NUM_PROGS"] - meta["GEMM_PROGS"]) * 3
    return 4 * (w - 1) + max(g, c) + 2


@ktrace.trace(events_per_program=_slots)
@triton.jit(do_not_specialize=harness.RUNTIME_INTS)
def ag_gemm_kernel(
    A_loc, A_full, B, C, chunk_flags, ready,
    M_loc, N_loc, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    rank, world, heap_bases, epoch, fault_delay_ns, fault_skip,
    NUM_PROGS: tl.constexpr, GEMM_PROGS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
    COPY_K: tl.constexpr, TIMEOUT_NS: tl.constexpr, FAULTS: tl.constexpr,
    ktrace_buf=None, KTRACE: tl.constexpr = 0,
):
    """AG + GEMM: programs ``< GEMM_PROGS`` compute ``C_r`` tile by tile, the others push A.

    The grid must fit on the device at once (one program per SM): GEMM programs wait on chunks
    that the peers' copy programs push.
    """
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    if pid == 0:
        kt = announce_ready(kt, ready, epoch, rank, world, heap_bases)
    if pid < GEMM_PROGS:
        kt = _gemm_swizzled(
            kt, A_loc, A_full, B, C, chunk_flags, pid, GEMM_PROGS, M_loc, N_loc, K,
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, rank, world, heap_bases, epoch,
            BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EVEN_K, TIMEOUT_NS,
        )
    if pid >= GEMM_PROGS:
        kt = _push_chunks(
            kt, A_loc, A_full, chunk_flags, ready, pid - GEMM_PROGS, NUM_PROGS - GEMM_PROGS, M_loc, K, stride_am, stride_ak,
            rank, world, heap_bases, epoch, fault_delay_ns, fault_skip, FAULTS, BLOCK_M, COPY_K, TIMEOUT_NS,
        )


@dataclass(frozen=True)
class AGGemmConfig:
    """How :class:`AllGatherGemm` runs (validated on construction).

    Args:
        gemm: tile shape (None: picked for the problem); its ``block_m`` is also the chunk size.
        comm_programs: copy-worker programs (the GEMM gets the other SMs).
        gemm_programs: cap on the GEMM programs (None: the rest of the SMs).
        copy_k: columns moved per copy step (power of two).
        timeout_ns: bound of every wait.
        fault: the fault-injection knob.
    """

    gemm: GemmConfig | None = None
    comm_programs: int = 16
    gemm_programs: int | None = None
    copy_k: int = 256
    timeout_ns: int = 2_000_000_000
    fault: harness.Fault = field(default_factory=lambda: harness.NO_FAULT)

    def __post_init__(self):
        if self.gemm is not None and not isinstance(self.gemm, GemmConfig):
            raise TypeError(f"gemm must be a GemmConfig or None, got {self.gemm!r}")
        if not isinstance(self.comm_programs, int) or self.comm_programs < 1:
            raise ValueError(f"comm_programs must be >= 1, got {self.comm_programs!r}")
        if self.gemm_programs is not None and self.gemm_programs < 1:
            raise ValueError(f"gemm_programs must be >= 1, got {self.gemm_programs!r}")
        if self.copy_k < 16 or self.copy_k & (self.copy_k - 1):
            raise ValueError(f"copy_k must be a power of two >= 16, got {self.copy_k!r}")
        if not isinstance(self.timeout_ns, int) or self.timeout_ns <= 0:
            raise ValueError(f"timeout_ns must be a positive int, got {self.timeout_ns!r}")
        if not isinstance(self.fault, harness.Fault):
            raise TypeError(f"fault must be a harness.Fault, got {self.fault!r}")


class AllGatherGemm:
    """A plan for ``C_r = all_gather_rows(A_r) @ B_r``. Creating it is collective.

    Args:
        heap: the symmetric heap; ``A_full`` (``M x K``) and the flags are allocated on it.
        M, N_loc, K: global rows (a multiple of the world size), this rank's columns, depth.
        dtype: bf16 or fp16.
        config: an :class:`AGGemmConfig`.

    Call it with ``A_r`` (``M/world x K``) and ``B_r`` (``K x N_loc``); returns ``C_r``
    (``M x N_loc``, a buffer of the plan overwritten by the next call).
    """

    def __init__(self, heap, M: int, N_loc: int, K: int, dtype, config: AGGemmConfig | None = None):
        import torch

        self.heap = heap
        self.rank, self.world = heap.rank, heap.world_size
        if min(M, N_loc, K) <= 0 or M % self.world:
            raise ValueError(f"need positive sizes with M a multiple of the world size {self.world}: M={M} N_loc={N_loc} K={K}")
        if dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"dtype must be bfloat16 or float16, got {dtype}")
        self.M, self.M_loc, self.N_loc, self.K, self.dtype = M, M // self.world, N_loc, K, dtype
        self.config = cfg = config or AGGemmConfig()
        cfg.fault.check_world(self.world)
        self.sms = num_sms(heap.device.index)
        if cfg.comm_programs >= self.sms:
            raise ValueError(f"comm_programs={cfg.comm_programs} leaves no SM for the GEMM ({self.sms} SMs)")
        gp = self.sms - cfg.comm_programs
        if cfg.gemm_programs is not None:
            gp = min(gp, cfg.gemm_programs)
        self.gemm_cfg = cfg.gemm or pick_config(M, N_loc, K, gp)
        self.n_chunks = triton.cdiv(self.M_loc, self.gemm_cfg.block_m)
        self.n_tiles = self.world * self.n_chunks * triton.cdiv(N_loc, self.gemm_cfg.block_n)
        self.gemm_programs = min(gp, self.n_tiles)
        self.comm_programs = min(cfg.comm_programs, max(1, self.n_chunks * (self.world - 1)))
        self.A_full = heap.zeros(M, K, dtype=dtype, name="ag_gemm.A_full")
        self.chunk_flags = heap.zeros(self.world * self.n_chunks, dtype=torch.int32, name="ag_gemm.chunk_flags")
        self.ready = heap.zeros(self.world, dtype=torch.int32, name="ag_gemm.ready")
        self.C = torch.empty((M, N_loc), dtype=dtype, device=heap.device)
        self.epoch = 0
        self._trace_bufs: dict = {}
        heap.barrier()

    def reset(self) -> None:
        """Collective: zero the flags and the epoch (after a faulty launch)."""
        self.heap.barrier()
        self.chunk_flags.zero_()
        self.ready.zero_()
        self.epoch = 0
        self.heap.barrier()

    def __call__(self, A_loc, B, traced: bool | str = False):
        """Run the fused kernel; returns ``C_r`` (``M x N_loc``). ``traced``: use the plan's own
        event buffer (timing the probes without a capture session; ``"ring"``: in ring mode,
        :func:`harness.trace_args`)."""
        if tuple(A_loc.shape) != (self.M_loc, self.K) or tuple(B.shape) != (self.K, self.N_loc):
            raise ValueError(f"expected A_r {self.M_loc}x{self.K} and B_r {self.K}x{self.N_loc}, got {tuple(A_loc.shape)}, {tuple(B.shape)}")
        if A_loc.dtype != self.dtype or B.dtype != self.dtype:
            raise ValueError(f"A_r and B_r must be {self.dtype}")
        if A_loc.stride() != (self.K, 1):
            raise ValueError("A_r must be contiguous (its rows are copied into A_full with A_full's strides)")
        self.epoch += 1
        g = self.gemm_cfg
        progs = self.gemm_programs + self.comm_programs
        meta = dict(world=self.world, M_loc=self.M_loc, N_loc=self.N_loc, BLOCK_M=g.block_m, BLOCK_N=g.block_n,
                    NUM_PROGS=progs, GEMM_PROGS=self.gemm_programs)
        extra = {}
        if traced:
            cap = _slots(meta)
            extra = harness.trace_args(self._trace_bufs, "kernel", traced, progs, cap, self.heap.device)
        d, s = self.config.fault.kernel_args(self.rank)
        C = self.C
        ag_gemm_kernel[(progs,)](
            A_loc, self.A_full, B, C, self.chunk_flags, self.ready,
            self.M_loc, self.N_loc, self.K,
            self.A_full.stride(0), self.A_full.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
            self.rank, self.world, self.heap.bases, self.epoch, d, s,
            NUM_PROGS=progs, GEMM_PROGS=self.gemm_programs, BLOCK_M=g.block_m, BLOCK_N=g.block_n, BLOCK_K=g.block_k,
            GROUP_M=g.group_m, EVEN_K=self.K % g.block_k == 0, COPY_K=min(self.config.copy_k, triton.next_power_of_2(self.K)),
            TIMEOUT_NS=self.config.timeout_ns, FAULTS=self.config.fault.active,
            num_warps=g.num_warps, num_stages=g.num_stages, **extra,
        )
        return C
