"""The tile GEMM shared by the GEMM + communication kernels (all-scatter, AG + GEMM, GEMM + RS).

Device side (``@triton.jit``)
    :func:`tile_coords` maps a linear tile id to ``(pid_m, pid_n)`` in grouped order (``GROUP_M``
    rows of tiles walk the N dimension together so their A rows stay in L2).
    :func:`tile_dot` computes one ``BLOCK_M x BLOCK_N`` output tile in float32 with ``tl.dot``
    over the K dimension; its K loop is what Triton software-pipelines (``num_stages``).
    :func:`tile_dot_tma` is the same with A and B read through tensor descriptors (TMA on
    Hopper: one bulk copy per tile and stage instead of per-thread loads; out-of-range rows,
    columns and K read as zeros). :func:`tile_acc` picks one of the two at compile time.
    :func:`store_tile` / :func:`load_tile` move a tile between registers and a row-major matrix.
    :func:`announce_ready` / :func:`await_ready`: the start-of-epoch handshake of the kernels
    that write into their peers' buffers (a rank waits until every peer's kernel of this epoch
    has started, so that no peer still reads the previous epoch's data).

Host side
    :class:`GemmConfig` (frozen, validated) holds the tile shape and the launch options;
    :func:`pick_config` chooses one for a problem size; :func:`matmul` is the plain persistent GEMM
    (the same device code, no communication), used to compare our GEMM with ``torch.matmul`` alone.
    :func:`gemm_dtype` and :func:`seeded_randn` make the GEMM folders' inputs (``reference.py``):
    the element type by name, and a matrix drawn on the device from a seed.
    :class:`GemmRunDriver` is what the GEMM folders' ``run.py`` drivers share (``ktrace run``).

Loads are unmasked along M and N: out-of-range rows and columns are wrapped (``% M``) onto
valid ones, and only the stores are masked, so the K loop carries no predicates. Along K the
loads are masked only when ``EVEN_K`` is false.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
import ktrace.shmem.language as ks

GEMM_TILE: tl.constexpr = tl.constexpr("gemm_tile")
READY: tl.constexpr = tl.constexpr("ready")
READY_WAIT: tl.constexpr = tl.constexpr("ready_wait")


@triton.jit
def tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped ordering: the ``(pid_m, pid_n)`` of linear tile ``tile_id``.

    Consecutive ids walk ``GROUP_M`` tile rows column by column, so programs working at the same
    time share A row blocks and B column blocks in L2. Cost: a few integer ops.
    """
    in_group = GROUP_M * num_pid_n
    group = tile_id // in_group
    first_m = group * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    r = tile_id % in_group
    return first_m + r % size_m, r // size_m


@triton.jit
def tile_dot(
    a_ptr,
    b_ptr,
    row0,
    col0,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    """One output tile ``A[row0:row0+BM, :] @ B[:, col0:col0+BN]`` accumulated in float32.

    Args:
        a_ptr: A (``M x K``, strides ``stride_am, stride_ak``).
        b_ptr: B (``K x N``, strides ``stride_bk, stride_bn``).
        row0, col0: the tile's first row of A and first column of B.
        M, N, K: sizes used to wrap out-of-range rows/columns (loads stay unmasked) and to mask K.
        EVEN_K: ``K % BLOCK_K == 0`` (compile time): no mask in the K loop.

    Returns:
        The ``BLOCK_M x BLOCK_N`` float32 accumulator. Rows ``>= M`` / columns ``>= N`` hold
        garbage (wrapped data): mask them at the store.

    Cost: ``K / BLOCK_K`` iterations of two tile loads and one ``tl.dot``.
    """
    rm = (row0 + tl.arange(0, BLOCK_M)) % M
    rn = (col0 + tl.arange(0, BLOCK_N)) % N
    rm = tl.max_contiguous(tl.multiple_of(rm, BLOCK_M), BLOCK_M)
    rn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_N), BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            kmask = rk < K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=kmask[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def tile_dot_tma(a_desc, b_desc, row0, col0, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """:func:`tile_dot` through tensor descriptors.

    Args:
        a_desc: descriptor of A (``M x K``, block ``[BLOCK_M, BLOCK_K]``).
        b_desc: descriptor of B (``K x N``, block ``[BLOCK_K, BLOCK_N]``).
        row0, col0: the tile's first row of A and first column of B.
        K: the reduction size (a partial last block reads zeros past ``K``).

    Returns:
        The ``BLOCK_M x BLOCK_N`` float32 accumulator; rows ``>= M`` / columns ``>= N`` are 0.

    Cost: ``K / BLOCK_K`` iterations of two descriptor loads and one ``tl.dot``; on Hopper the
    loads are TMA bulk copies into shared memory, pipelined ``num_stages`` deep.
    """
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([row0, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, col0])
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def tile_acc(
    A, B, row0, col0, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, TMA: tl.constexpr,
):
    """One output tile: :func:`tile_dot_tma` when ``TMA`` (``A``, ``B`` are descriptors), else
    :func:`tile_dot` (``A``, ``B`` are pointers)."""
    if TMA:
        acc = tile_dot_tma(A, B, row0, col0, K, BLOCK_M, BLOCK_N, BLOCK_K)
    else:
        acc = tile_dot(A, B, row0, col0, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K)
    return acc


@triton.jit
def tile_offsets(row0, col0, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Row and column indices of a tile and its in-bounds mask (``rows < M`` and ``cols < N``)."""
    rm = row0 + tl.arange(0, BLOCK_M)
    rn = col0 + tl.arange(0, BLOCK_N)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    return rm, rn, mask


@triton.jit
def store_tile(c_ptr, value, rm, rn, mask, stride_cm, stride_cn):
    """Store a tile (already converted to the output type) at rows ``rm``, columns ``rn``."""
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, value, mask=mask)


@triton.jit
def load_tile(c_ptr, rm, rn, mask, stride_cm, stride_cn):
    """Load a tile at rows ``rm``, columns ``rn`` (masked lanes read 0)."""
    return tl.load(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, mask=mask, other=0.0)


# ---------------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------------


@triton.jit
def announce_ready(kt, ready, epoch, rank, world, heap_bases):
    """Tell every peer this rank's kernel of ``epoch`` started (sets ``ready[rank]`` on each peer).

    Call from one program. Cost: ``world - 1`` remote release atomics (each after a CTA barrier).
    """
    for j in range(1, world):
        peer = (rank + j) % world
        kt = ks.notify(kt, ready + rank, epoch, rank, peer, heap_bases, name=READY)
    return kt


@triton.jit
def await_ready(kt, ready, epoch, rank, world, heap_bases, TIMEOUT_NS: tl.constexpr):
    """Wait until every peer announced ``epoch`` (before writing into peers' buffers).

    Cost: one acquire load per peer once the peers have started.
    """
    for j in range(1, world):
        peer = (rank + j) % world
        kt = ks.wait(kt, ready + peer, epoch, rank, peer, heap_bases, timeout_ns=TIMEOUT_NS, name=READY_WAIT)
    return kt


@dataclass(frozen=True)
class GemmConfig:
    """Tile shape and launch options of the tile GEMM.

    Args:
        block_m, block_n, block_k: tile sizes (powers of two, >= 16).
        group_m: tile rows walked together in grouped order (>= 1).
        num_warps, num_stages: Triton launch options (warps per program; software-pipeline depth).
        tma: read A and B through tensor descriptors (:func:`tile_dot_tma`) instead of pointers.
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    tma: bool = False

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 16 or v & (v - 1):
                raise ValueError(f"GemmConfig.{name} must be a power of two >= 16, got {v!r}")
        if not isinstance(self.group_m, int) or self.group_m < 1:
            raise ValueError(f"GemmConfig.group_m must be >= 1, got {self.group_m!r}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"GemmConfig.num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or not 1 <= self.num_stages <= 8:
            raise ValueError(f"GemmConfig.num_stages must be in 1..8, got {self.num_stages!r}")

    def operands(self, a, b):
        """What the kernels take as A and B: the tensors, or tensor descriptors when ``tma``."""
        if not self.tma:
            return a, b
        from triton.tools.tensor_descriptor import TensorDescriptor

        return (TensorDescriptor.from_tensor(a, [self.block_m, self.block_k]),
                TensorDescriptor.from_tensor(b, [self.block_k, self.block_n]))

    def tiles(self, m: int, n: int) -> int:
        """Output tiles of an ``m x n`` result."""
        return triton.cdiv(m, self.block_m) * triton.cdiv(n, self.block_n)


#: Candidate tile shapes for :func:`pick_config`, with their relative per-element throughput on
#: Hopper (a 128x256 / 256x128 tile keeps two warpgroups' wgmma fed; 128x128 does less per load).
_CANDIDATES = ((128, 256, 1.0), (256, 128, 1.0), (128, 128, 0.85), (64, 128, 0.6))


def pick_config(m: int, n: int, k: int, programs: int, tail_weight: float = 0.0, tma: bool = False) -> GemmConfig:
    """A tile shape for an ``m x n x k`` GEMM run by ``programs`` persistent programs.

    Estimates each candidate's time as (waves of tiles) x (tile area / relative throughput),
    counting the padding of partial tiles, and takes the smallest: wave quantization matters as
    much as the tile's efficiency when there are only a few tiles per program.

    Args:
        m, n, k: the problem.
        programs: persistent programs computing tiles.
        tail_weight: cost of the output of the last wave, per tile area of it (0: none). The
            schedules that send tiles while computing (producer/consumer, workgroup-specialised)
            leave the last wave's tiles to send after the GEMM ends, so a last wave of many big
            tiles costs them a long tail: 1 weighs it like compute (what the 4 x H200 figures
            favoured: 128 x 128 tiles on 8192 x 896 x 14336 with 116 programs, 375 vs 405 µs).
        tma: set :attr:`GemmConfig.tma` in the result.
    """
    if min(m, n, k) <= 0 or programs <= 0:
        raise ValueError(f"pick_config needs positive sizes and programs, got {(m, n, k, programs)}")
    if tail_weight < 0:
        raise ValueError(f"tail_weight must be >= 0, got {tail_weight}")
    best, best_cost = None, None
    for bm, bn, eff in _CANDIDATES:
        tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
        waves = triton.cdiv(tiles, programs)
        last = tiles - (waves - 1) * programs
        cost = waves * bm * bn / eff + tail_weight * (last / programs) * bm * bn
        if best_cost is None or cost < best_cost - 1e-9:
            best, best_cost = (bm, bn), cost
    bm, bn = best
    bk = 64 if k >= 64 else max(16, triton.next_power_of_2(k))
    warps = 8 if bm * bn >= 128 * 128 else 4
    stages = 3 if bm * bn >= 128 * 256 else 4
    return GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages, tma=tma)


@functools.lru_cache(maxsize=None)
def num_sms(device_index: int) -> int:
    """Streaming multiprocessors (compute units) of a device."""
    import torch

    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _matmul_slots(meta) -> int:
    return 2 + 2 * triton.cdiv(meta["M"], meta["BLOCK_M"]) * triton.cdiv(meta["N"], meta["BLOCK_N"]) // max(1, meta["NUM_PROGS"])


@ktrace.trace(events_per_program=_matmul_slots)
@triton.jit
def matmul_kernel(
    A,
    B,
    C,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    NUM_PROGS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    TMA: tl.constexpr = False,
    ktrace_buf=None,
    KTRACE: tl.constexpr = 0,
):
    """Persistent GEMM ``C = A @ B``: program p computes tiles p, p + NUM_PROGS, ... (grouped order).

    Records one ``gemm_tile`` span per tile (args: tile id, pid_m).
    """
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(pid, num_pid_m * num_pid_n, NUM_PROGS):
        pm, pn = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        s = kl.begin(kt, GEMM_TILE, tile, pm)
        acc = tile_acc(A, B, pm * BLOCK_M, pn * BLOCK_N, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, TMA)
        rm, rn, mask = tile_offsets(pm * BLOCK_M, pn * BLOCK_N, M, N, BLOCK_M, BLOCK_N)
        store_tile(C, acc.to(C.dtype.element_ty), rm, rn, mask, stride_cm, stride_cn)
        kt = kl.end(kt, s)


def matmul(a, b, out=None, config: GemmConfig | None = None, programs: int | None = None, **trace_kwargs):
    """``a @ b`` with the persistent tile GEMM (2-D, same dtype); returns ``out``.

    Args:
        a, b: ``M x K`` and ``K x N`` CUDA tensors.
        out: optional ``M x N`` output.
        config: tile shape (default: :func:`pick_config`).
        programs: persistent programs (default: the SM count).
        trace_kwargs: ``ktrace_buf=..., KTRACE=n`` for a direct traced launch.
    """
    import torch

    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs M x K and K x N matrices, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"matmul needs one dtype, got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[1]
    if out is None:
        out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    progs = programs or num_sms(a.device.index)
    cfg = config or pick_config(m, n, k, progs)
    progs = min(progs, cfg.tiles(m, n))
    ta, tb = cfg.operands(a, b)
    matmul_kernel[(progs,)](
        ta, tb, out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        NUM_PROGS=progs, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        EVEN_K=k % cfg.block_k == 0, TMA=cfg.tma, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **trace_kwargs,
    )
    return out


# ---------------------------------------------------------------------------------------------
# inputs of the GEMM folders
# ---------------------------------------------------------------------------------------------


def gemm_dtype(dtype):
    """The torch element type of a GEMM input given by name or as a dtype (bfloat16 or float16).

    Raises:
        ValueError: any other type.
    """
    import torch

    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be bfloat16 or float16, got {dtype!r}")
    return dtype


def seeded_randn(shape, seed: int, dtype, device, scale: float = 1.0):
    """A standard-normal matrix drawn on ``device`` from ``seed`` (in float32), times ``scale``,
    cast to ``dtype``: every rank can redraw any rank's input without communicating."""
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(seed)
    x = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
    if scale != 1.0:
        x.mul_(scale)
    return x.to(dtype)


class GemmRunDriver:
    """A GEMM folder's ``ktrace run`` driver (see :mod:`instrumented_kernels.runspec`): this rank's
    ``A`` and ``B`` from the folder's ``reference.generate_input``, a step that calls the plan, and
    a check of the step's output against the folder's ``reference.reference``.

    Args:
        dist: this rank's ``harness.Dist``.
        params: the run's parameters (``M``, ``N``, ``K`` are passed to the reference).
        seed: the inputs' seed (the same on every rank).
        heap: the symmetric heap the plan lives on.
        plan: called as ``plan(A, B)``; returns this rank's output.
        reference: the folder's ``reference`` module (``generate_input``, ``reference``, ``check``).
        barrier_before_check: meet at a heap barrier before checking (an output the peers write
            into is complete only once every peer's step has ended).
    """

    def __init__(self, dist, params: dict, seed: int, heap, plan, reference, barrier_before_check: bool = False):
        self.dist, self.seed, self.heap, self.plan, self.reference = dist, seed, heap, plan, reference
        self.shape = {k: params[k] for k in ("M", "N", "K")}
        self.barrier_before_check = barrier_before_check
        inp = reference.generate_input(dist.rank, dist.world_size, seed, **self.shape, device=dist.device)
        self.A, self.B = inp["A"], inp["B"]
        self.out = None

    def step(self) -> None:
        """One call of the plan."""
        self.out = self.plan(self.A, self.B)

    def check(self) -> float:
        """The last output against the reference; raises ``harness.MismatchError`` naming the rank."""
        d = self.dist
        if self.barrier_before_check:
            self.heap.barrier()
        ref = self.reference.reference(d.rank, d.world_size, self.seed, **self.shape, device=d.device)
        return self.reference.check(self.out, ref, rank=d.rank)
