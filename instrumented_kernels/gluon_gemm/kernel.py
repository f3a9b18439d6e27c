"""A warp-specialized, persistent Hopper GEMM in Gluon, traced per partition.

``C[M, N] = A[M, K] @ B[K, N]`` (fp16 in, fp32 accumulate, fp16 out). Each program walks output
tiles ``pid, pid + P, ...``; three partitions hand off through mbarriers in shared memory:

* ``mma_partition`` (the default partition, 4 warps, lane 0): waits for a stage's operands
  (``ready``), issues ``warpgroup_mma`` asynchronously and frees the stage before (``empty``)
  once at most one MMA is in flight; per tile, hands the accumulator to the epilogue in shared
  memory (``c_ready`` / ``c_empty``).
* ``load_partition`` (1 warp, lane 1): per stage waits ``empty``, then ``expect`` + two TMA
  copies complete ``ready``.
* ``epilogue_partition`` (1 warp, lane 2): waits ``c_ready``, TMA-stores the tile, frees the
  buffer.

``LOADER_DELAY_NS`` slows the loader on purpose (a spin on the timer before each stage's
copies): the scenario capture of a partition that holds the others up.
"""

from __future__ import annotations

from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

import ktrace
import ktrace.gluon as kg


@gluon.jit
def _delay(ns: gl.constexpr):
    if ns > 0:
        t0 = kg.now()
        while kg.now() - t0 < ns:
            pass


@gluon.jit
def load_partition(a_desc, b_desc, a_bufs, b_bufs, ready, empty, c_ready, c_empty, M, N, K,
                   LOADER_DELAY_NS: gl.constexpr, STAGE_PROBES: gl.constexpr, ktrace_buf, KTRACE: gl.constexpr,
                   KTRACE_LANES: gl.constexpr):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 1)
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    STAGES: gl.constexpr = a_bufs.type.shape[0]
    NBYTES: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    n_n = gl.cdiv(N, BN)
    n_tiles = gl.cdiv(M, BM) * n_n
    k_tiles = gl.cdiv(K, BK)
    it = 0
    for tile in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        om = (tile // n_n) * BM
        on = (tile % n_n) * BN
        span = kg.begin(kt, "load tile", tile)
        for kk in range(k_tiles):
            s = it % STAGES
            u = it // STAGES
            kt = kg.wait(kt, empty.index(s), u - 1, "empty", s, record=STAGE_PROBES)
            _delay(LOADER_DELAY_NS)
            kt = kg.expect(kt, ready.index(s), NBYTES, u, "ready", s, record=STAGE_PROBES)
            tma.async_copy_global_to_shared(a_desc, [om, kk * BK], ready.index(s), a_bufs.index(s))
            tma.async_copy_global_to_shared(b_desc, [kk * BK, on], ready.index(s), b_bufs.index(s))
            it += 1
        kt = kg.end(kt, span)


@gluon.jit
def mma_partition(a_desc, b_desc, a_bufs, b_bufs, ready, empty, c_ready, c_empty, c_smem, M, N, K,
                  STAGE_PROBES: gl.constexpr, ktrace_buf, KTRACE: gl.constexpr, KTRACE_LANES: gl.constexpr):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 0)
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    STAGES: gl.constexpr = a_bufs.type.shape[0]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BN, 16])
    n_n = gl.cdiv(N, BN)
    n_tiles = gl.cdiv(M, BM) * n_n
    k_tiles = gl.cdiv(K, BK)
    it = 0
    t = 0
    for tile in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        span = kg.begin(kt, "mma tile", tile)
        acc = gl.zeros((BM, BN), gl.float32, acc_layout)
        for kk in range(k_tiles):
            s = it % STAGES
            u = it // STAGES
            kt = kg.wait(kt, ready.index(s), u, "ready", s, record=STAGE_PROBES)
            acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
            # at most one MMA in flight: the one before this has read its stage, which is freed
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            if kk > 0:
                sp = (it - 1) % STAGES
                kt = kg.arrive(kt, empty.index(sp), (it - 1) // STAGES, "empty", sp, record=STAGE_PROBES)
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        sl = (it - 1) % STAGES
        kt = kg.arrive(kt, empty.index(sl), (it - 1) // STAGES, "empty", sl, record=STAGE_PROBES)
        kt = kg.end(kt, span)
        kt = kg.wait(kt, c_empty, t - 1, "c_empty")
        c_smem.store(acc.to(gl.float16))
        fence_async_shared()
        kt = kg.arrive(kt, c_ready, t, "c_ready")
        t += 1


@gluon.jit
def epilogue_partition(c_desc, c_smem, c_ready, c_empty, M, N, STAGE_PROBES: gl.constexpr, ktrace_buf, KTRACE: gl.constexpr,
                       KTRACE_LANES: gl.constexpr):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 2)
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    n_n = gl.cdiv(N, BN)
    n_tiles = gl.cdiv(M, BM) * n_n
    t = 0
    for tile in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        # the tile's hand-off is recorded here only with STAGE_PROBES: per tile, the epilogue's
        # wait and release records cost 1.5-2 % at 4096^3 (H100; its span alone, with the MMA
        # partition's side of the hand-off recorded, 0.7-0.9 %: BENCHMARKS.md)
        kt = kg.wait(kt, c_ready, t, "c_ready", record=STAGE_PROBES)
        span = kg.begin(kt, "store tile", tile)
        tma.async_copy_shared_to_global(c_desc, [(tile // n_n) * BM, (tile % n_n) * BN], c_smem)
        tma.store_wait(0)
        kt = kg.end(kt, span)
        kt = kg.arrive(kt, c_empty, t, "c_empty", record=STAGE_PROBES)
        t += 1


@gluon.jit
def pipeline_buffers(a_desc, b_desc, c_desc, STAGES: gl.constexpr, C_READERS: gl.constexpr):
    """The pipeline's shared memory, its mbarriers initialised: ``STAGES`` operand stages
    (``ready`` / ``empty``), the output tile and its hand-off (``c_ready``; ``c_empty`` completes
    when all ``C_READERS`` partitions that read the tile have arrived).

    Returns ``(a_bufs, b_bufs, c_smem, ready, empty, c_ready, c_empty)``."""
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    c_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    c_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    mbarrier.init(c_ready, count=1)
    mbarrier.init(c_empty, count=C_READERS)
    return a_bufs, b_bufs, c_smem, ready, empty, c_ready, c_empty


@gluon.jit
def gluon_gemm_kernel(a_desc, b_desc, c_desc, M, N, K, STAGES: gl.constexpr, LOADER_DELAY_NS: gl.constexpr,
                      STAGE_PROBES: gl.constexpr, ktrace_buf=None, KTRACE: gl.constexpr = 0, KTRACE_LANES: gl.constexpr = 1,
                      TRACED_LANES: gl.constexpr = 7):
    """Warp-specialized persistent GEMM (see the module docstring); grid = (programs,).

    ``TRACED_LANES``: a traced launch records in lane ``l`` if bit ``l`` is set (all by default;
    fewer splits the probes' cost by partition, for timing only)."""
    K_MMA: gl.constexpr = KTRACE * (TRACED_LANES & 1)
    K_LOAD: gl.constexpr = KTRACE * ((TRACED_LANES >> 1) & 1)
    K_EPI: gl.constexpr = KTRACE * ((TRACED_LANES >> 2) & 1)
    a_bufs, b_bufs, c_smem, ready, empty, c_ready, c_empty = pipeline_buffers(a_desc, b_desc, c_desc, STAGES, 1)
    gl.warp_specialize([
        (mma_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, c_ready, c_empty, c_smem, M, N, K,
                         STAGE_PROBES, ktrace_buf, K_MMA, KTRACE_LANES)),
        (load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, c_ready, c_empty, M, N, K, LOADER_DELAY_NS,
                          STAGE_PROBES, ktrace_buf, K_LOAD, KTRACE_LANES)),
        (epilogue_partition, (c_desc, c_smem, c_ready, c_empty, M, N, STAGE_PROBES, ktrace_buf, K_EPI, KTRACE_LANES)),
    ], [1, 1], [48, 48])


#: Lanes, in lane order: each partition records as the lane of its place here.
LANES = (mma_partition, load_partition, epilogue_partition)


def events_per_lane(M: int, N: int, K: int, cfg: "GluonGemmConfig", programs: int) -> int:
    """Slots per lane for a launch: each program's share of the tiles times the events per tile
    of the busiest lane (the MMA partition: with ``stage_probes``, per K step a wait and a
    release of two slots each; per tile a span and the hand-off to the epilogue, 5 slots)."""
    tiles = -(-M // cfg.BM) * -(-N // cfg.BN)
    per_program = -(-tiles // programs)
    per_tile = 5 + (4 * -(-K // cfg.BK) if cfg.stage_probes else 1)
    return per_program * per_tile + 8




@dataclass(frozen=True)
class GluonGemmConfig:
    """Tile and pipeline of the Gluon GEMM (validated on construction)."""

    BM: int = 128
    BN: int = 128
    BK: int = 64
    STAGES: int = 4
    #: spin this long before each stage's copies (the slowed-loader scenario); 0 = off
    loader_delay_ns: int = 0
    #: False (the default density): per tile, a span in each partition and the MMA partition's
    #: side of the tile's hand-off (its wait for ``c_empty``, its release of ``c_ready``); True:
    #: every stage's hand-off as well (waits, arrives, expects) and the epilogue's side of the
    #: tile's: every mbarrier hand-off paired (what a diagnosis wants; 5-14 % slower)
    stage_probes: bool = False
    #: lanes that record in a traced launch (bit l: lane l of LANES); fewer only to time each one's cost
    traced_lanes: int = 7

    def __post_init__(self):
        if self.BM != 64 * (self.BM // 64) or self.BN not in (64, 128, 256) or self.BK not in (32, 64):
            raise ValueError(f"unsupported tile {self.BM}x{self.BN}x{self.BK}")
        if not 2 <= self.STAGES <= 8 or self.loader_delay_ns < 0 or not 0 < self.traced_lanes < 8:
            raise ValueError(f"bad STAGES {self.STAGES}, loader_delay_ns {self.loader_delay_ns} or traced_lanes {self.traced_lanes}")


class GluonGemm:
    """The launcher: ``GluonGemm(M, N, K)(A, B, C, traced=...)`` computes ``C = A @ B``.

    Args:
        M, N, K: the shape (A is M x K, B is K x N, row-major fp16; K and N multiples of 8).
        cfg: tile, pipeline, probe density and the loader's delay.
        programs: persistent programs (default: one per SM, at most one per tile).
        events_per_lane: slots per lane of a traced launch (default: every event fits,
            :func:`events_per_lane`); smaller drops events (counted exactly).
    """

    def __init__(self, M: int, N: int, K: int, cfg: GluonGemmConfig | None = None, programs: int | None = None,
                 events_per_lane: int | None = None):
        import torch

        self.M, self.N, self.K = M, N, K
        self.cfg = cfg or GluonGemmConfig()
        tiles = -(-M // self.cfg.BM) * -(-N // self.cfg.BN)
        if programs is None:
            programs = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        self.programs = max(1, min(programs, tiles))
        cap = events_per_lane or globals()["events_per_lane"](M, N, K, self.cfg, self.programs)
        self.traced_kernel = ktrace.trace(gluon_gemm_kernel, events_per_program=cap, lanes=LANES, name="gluon_gemm")

    def descriptors(self, A, B, C):
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        c = self.cfg
        lay = gl.NVMMASharedLayout.get_default_for
        return (TensorDescriptor.from_tensor(A, [c.BM, c.BK], lay([c.BM, c.BK], gl.float16)),
                TensorDescriptor.from_tensor(B, [c.BK, c.BN], lay([c.BK, c.BN], gl.float16)),
                TensorDescriptor.from_tensor(C, [c.BM, c.BN], lay([c.BM, c.BN], gl.float16)))

    def direct(self, A, B, C) -> "DirectLaunch":
        """Launches of ``C = A @ B`` with the descriptors made once and, for the traced one, an
        event buffer allocated once and reused (no capture session): what benchmarks time."""
        return DirectLaunch(self, A, B, C)

    def __call__(self, A, B, C, traced: bool = False):
        a, b, c = self.descriptors(A, B, C)
        k = self.traced_kernel if traced else gluon_gemm_kernel
        k[(self.programs,)](a, b, c, self.M, self.N, self.K, STAGES=self.cfg.STAGES,
                            LOADER_DELAY_NS=self.cfg.loader_delay_ns, STAGE_PROBES=self.cfg.stage_probes,
                            TRACED_LANES=self.cfg.traced_lanes, num_warps=4)
        return C


class DirectLaunch:
    """``untraced()`` / ``traced()``: the GEMM launched with fixed operands (see :meth:`GluonGemm.direct`).

    The traced launch writes into one buffer sized as a capture would size it (its records are
    overwritten launch after launch: for timing, not for reading).
    """

    def __init__(self, gemm: GluonGemm, A, B, C):
        import torch

        from ktrace import schema

        self.gemm = gemm
        self.descs = gemm.descriptors(A, B, C)
        self.capacity = gemm.traced_kernel.events_per_program
        n_virtual = gemm.programs * len(LANES)
        self.buffer = torch.zeros(-(-schema.buffer_bytes(n_virtual, self.capacity) // 8), dtype=torch.int64, device=A.device)

    def _launch(self, **trace):
        g = self.gemm
        gluon_gemm_kernel[(g.programs,)](*self.descs, g.M, g.N, g.K, STAGES=g.cfg.STAGES, LOADER_DELAY_NS=g.cfg.loader_delay_ns,
                                         STAGE_PROBES=g.cfg.stage_probes, TRACED_LANES=g.cfg.traced_lanes, num_warps=4, **trace)

    def untraced(self):
        self._launch()

    def traced(self):
        self._launch(ktrace_buf=self.buffer, KTRACE=self.capacity, KTRACE_LANES=len(LANES))
