"""The Gluon GEMM fused with an all-scatter of its output over the symmetric heap.

Rank r computes its rows of ``C = A @ B`` (``A_r``: M_loc x K, ``C_r = A_r @ B``) and every rank
ends with all of ``C`` (world * M_loc x N, on the heap, rank r's rows at ``r * M_loc``). Each
program runs the GEMM's loader and MMA partitions (``kernel.py``) and two more:

* ``epilogue_partition`` (lane 2): per tile, waits ``c_ready``, TMA-stores the tile into this
  rank's rows of ``C``, arrives ``c_empty``;
* ``comm_partition`` (lane 3, the communication partition): per tile, waits ``c_ready`` too,
  reads the tile from shared memory and stores it into every rank's copy of ``C`` (this rank's
  included: at one rank the peer is the rank itself), arrives ``c_empty`` (a barrier of two
  arrivals: the MMA partition reuses the buffer once both have read it), then notifies each
  rank that this program's tile landed (``ktrace.shmem.gluon``: a release, one flag per source
  rank and program). At the end it waits until every rank's same program has sent all its tiles.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma

import ktrace
import ktrace.gluon as kg
import ktrace.shmem.gluon as ksg

from .kernel import GluonGemmConfig, events_per_lane, load_partition, mma_partition, pipeline_buffers

#: Rows of the tile the communication partition moves at a time (one warp: 16 x BN halves).
CHUNK: gl.constexpr = gl.constexpr(16)


@gluon.jit
def scatter_epilogue(c_desc, c_smem, c_ready, c_empty, M, N, ktrace_buf, KTRACE: gl.constexpr, KTRACE_LANES: gl.constexpr):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 2)
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    n_n = gl.cdiv(N, BN)
    t = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, BM) * n_n, gl.num_programs(0)):
        kt = kg.wait(kt, c_ready, t, "c_ready")
        span = kg.begin(kt, "store tile", tile)
        tma.async_copy_shared_to_global(c_desc, [(tile // n_n) * BM, (tile % n_n) * BN], c_smem)
        tma.store_wait(0)
        kt = kg.end(kt, span)
        kt = kg.arrive(kt, c_empty, t, "c_empty")
        t += 1


@gluon.jit
def comm_partition(c_all, c_smem, c_ready, c_empty, flags, M, N, rank, world, heap_bases, BM: gl.constexpr,
                   BN: gl.constexpr, ktrace_buf, KTRACE: gl.constexpr, KTRACE_LANES: gl.constexpr):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 3)
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [1, 1], [1, 0])
    rows = gl.arange(0, CHUNK, gl.SliceLayout(1, layout))
    cols = gl.arange(0, BN, gl.SliceLayout(0, layout))
    n_n = gl.cdiv(N, BN)
    P = gl.num_programs(0)
    pid = gl.program_id(0)
    t = 0
    for tile in range(pid, gl.cdiv(M, BM) * n_n, P):
        kt = kg.wait(kt, c_ready, t, "c_ready")
        span = kg.begin(kt, "push tile", tile)
        om = (tile // n_n) * BM
        on = (tile % n_n) * BN
        c_ok = (on + cols) < N
        for r0 in gl.static_range(0, BM, CHUNK):
            v = c_smem.slice(r0, CHUNK, dim=0).load(layout)
            r_ok = (om + r0 + rows) < M
            offs = (rank * M + om + r0 + rows)[:, None].to(gl.int64) * N + (on + cols)[None, :]
            for q in range(world):
                dst = ksg.translate(c_all, rank, q, heap_bases)
                gl.store(dst + offs, v, mask=r_ok[:, None] & c_ok[None, :])
        kt = kg.end(kt, span)
        kt = kg.arrive(kt, c_empty, t, "c_empty")
        t += 1
        for q in range(world):
            kt = ksg.notify(kt, flags + rank * P + pid, t, rank, q, heap_bases, name="tile sent")
    # every rank's same program sends this program's number of tiles
    for q in range(world):
        kt, ok = ksg.wait(kt, flags + q * P + pid, t, rank, q, heap_bases, timeout_ns=2_000_000_000, name="tiles in")


@gluon.jit
def gemm_scatter_kernel(a_desc, b_desc, c_desc, c_all, flags, M, N, K, rank, world, heap_bases, STAGES: gl.constexpr,
                        LOADER_DELAY_NS: gl.constexpr, STAGE_PROBES: gl.constexpr, ktrace_buf=None, KTRACE: gl.constexpr = 0,
                        KTRACE_LANES: gl.constexpr = 1):
    """GEMM of this rank's rows + all-scatter of them (see the module docstring); grid = (programs,)."""
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    # the epilogue and the communication partition both read the tile
    a_bufs, b_bufs, c_smem, ready, empty, c_ready, c_empty = pipeline_buffers(a_desc, b_desc, c_desc, STAGES, 2)
    gl.warp_specialize([
        (mma_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, c_ready, c_empty, c_smem, M, N, K,
                         STAGE_PROBES, ktrace_buf, KTRACE, KTRACE_LANES)),
        (load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, c_ready, c_empty, M, N, K, LOADER_DELAY_NS,
                          STAGE_PROBES, ktrace_buf, KTRACE, KTRACE_LANES)),
        (scatter_epilogue, (c_desc, c_smem, c_ready, c_empty, M, N, ktrace_buf, KTRACE, KTRACE_LANES)),
        (comm_partition, (c_all, c_smem, c_ready, c_empty, flags, M, N, rank, world, heap_bases, BM, BN,
                          ktrace_buf, KTRACE, KTRACE_LANES)),
    ], [1, 1, 1], [48, 48, 96])


#: Lanes, in lane order.
LANES = (mma_partition, load_partition, scatter_epilogue, comm_partition)


class GluonGemmScatter:
    """``plan(A_r, B)``: this rank's rows ``A_r @ B`` gathered on every rank (returns all of ``C``).

    Args:
        heap: the symmetric heap (``ktrace.shmem.SymmetricHeap``); ``C`` and the flags live on it.
        M_loc, N, K: the shape of each rank's part (``C`` is ``world * M_loc`` x ``N``).
        cfg: the GEMM's tiles and probe density.
        programs: persistent programs (default: one per SM).
    """

    def __init__(self, heap, M_loc: int, N: int, K: int, cfg: GluonGemmConfig | None = None, programs: int | None = None):
        import torch

        self.heap, self.M, self.N, self.K = heap, M_loc, N, K
        self.cfg = cfg or GluonGemmConfig()
        tiles = -(-M_loc // self.cfg.BM) * -(-N // self.cfg.BN)
        if programs is None:
            programs = torch.cuda.get_device_properties(heap.device).multi_processor_count
        self.programs = max(1, min(programs, tiles))
        self.C = heap.zeros(heap.world_size * M_loc, N, dtype=torch.float16, name="gluon_scatter.C")
        self.flags = heap.zeros(heap.world_size * self.programs, dtype=torch.int32, name="gluon_scatter.flags")
        # per lane: the GEMM's events, and the communication partition's per tile: a wait, a span,
        # one notify per rank (2 slots each), then one wait per rank
        cap = max(events_per_lane(M_loc, N, K, self.cfg, self.programs), -(-tiles // self.programs) * (3 + 2 * heap.world_size)
                  + 2 * heap.world_size + 8)
        self.traced_kernel = ktrace.trace(gemm_scatter_kernel, events_per_program=cap, lanes=LANES, name="gluon_gemm_scatter")

    def __call__(self, A, B, traced: bool = False):
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        c, h = self.cfg, self.heap
        lay = gl.NVMMASharedLayout.get_default_for
        mine = self.C[h.rank * self.M : (h.rank + 1) * self.M]
        descs = (TensorDescriptor.from_tensor(A, [c.BM, c.BK], lay([c.BM, c.BK], gl.float16)),
                 TensorDescriptor.from_tensor(B, [c.BK, c.BN], lay([c.BK, c.BN], gl.float16)),
                 TensorDescriptor.from_tensor(mine, [c.BM, c.BN], lay([c.BM, c.BN], gl.float16)))
        self.flags.zero_()
        h.barrier()  # every rank's flags are clear before any rank signals
        k = self.traced_kernel if traced else gemm_scatter_kernel
        k[(self.programs,)](*descs, self.C, self.flags, self.M, self.N, self.K, h.rank, h.world_size, h.bases,
                            STAGES=c.STAGES, LOADER_DELAY_NS=c.loader_delay_ns, STAGE_PROBES=c.stage_probes, num_warps=4)
        return self.C
