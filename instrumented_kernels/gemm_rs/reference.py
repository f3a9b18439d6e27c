"""Inputs, torch reference and check of GEMM + reduce-scatter (``out_r = rows_r(sum_s A_s @ B_s)``).

``A`` (``M x K``) is drawn from ``seed`` and ``B`` (``K x N``) from ``seed + 1`` (scaled by
``1/sqrt(K)``) on every rank; rank r keeps columns ``r*K_loc ..`` of A and the same rows of B.
"""

from __future__ import annotations

import json
import math
import pathlib

from instrumented_kernels import harness
from instrumented_kernels.common_gemm import gemm_dtype, seeded_randn

SHAPES = json.loads((pathlib.Path(__file__).with_name("shapes.json")).read_text())


def _sizes(world_size, M=None, M_per_rank=None, K=None, K_per_rank=None):
    if (M is None) == (M_per_rank is None) or (K is None) == (K_per_rank is None):
        raise ValueError("give exactly one of M / M_per_rank and one of K / K_per_rank")
    m = M if M is not None else M_per_rank * world_size
    k = K if K is not None else K_per_rank * world_size
    if m <= 0 or k <= 0 or m % world_size or k % world_size:
        raise ValueError(f"M={m} and K={k} must be positive multiples of the world size {world_size}")
    return m, k


def generate_input(rank: int, world_size: int, seed: int, N: int, M=None, M_per_rank=None, K=None, K_per_rank=None,
                   dtype="bfloat16", device=None) -> dict:
    """This rank's inputs: ``{"A": M x K_loc, "B": K_loc x N}``."""
    import torch

    if not 0 <= rank < world_size or N <= 0:
        raise ValueError(f"bad rank {rank} / world {world_size} / N {N}")
    m, k = _sizes(world_size, M, M_per_rank, K, K_per_rank)
    dt = gemm_dtype(dtype)
    device = device or torch.device("cuda", torch.cuda.current_device())
    kl = k // world_size
    a = seeded_randn((m, k), seed, dt, device)[:, rank * kl : (rank + 1) * kl].contiguous()
    b = seeded_randn((k, N), seed + 1, dt, device, scale=1.0 / math.sqrt(k))[rank * kl : (rank + 1) * kl].contiguous()
    return {"A": a, "B": b}


def reference(rank: int, world_size: int, seed: int, N: int, M=None, M_per_rank=None, K=None, K_per_rank=None,
              dtype="bfloat16", device=None):
    """Rows ``rank * M/world ...`` of ``A @ B`` in float32 (``M/world x N``)."""
    import torch

    m, k = _sizes(world_size, M, M_per_rank, K, K_per_rank)
    dt = gemm_dtype(dtype)
    device = device or torch.device("cuda", torch.cuda.current_device())
    m_loc = m // world_size
    a = seeded_randn((m, k), seed, dt, device)[rank * m_loc : (rank + 1) * m_loc].float()
    return a @ seeded_randn((k, N), seed + 1, dt, device, scale=1.0 / math.sqrt(k)).float()


def torch_baseline(A, B, partial, out, group=None):
    """The baseline: ``torch.matmul`` of the local shards, then NCCL ``reduce_scatter_tensor`` (sum)."""
    import torch
    import torch.distributed as dist

    torch.matmul(A, B, out=partial)
    dist.reduce_scatter_tensor(out, partial, group=group)
    return out


def check(out, ref, rank: int | None = None, tol: float = 1e-2) -> float:
    """Raise ``harness.MismatchError`` unless ``||out - ref|| / ||ref|| <= tol``."""
    return harness.check_close("gemm_rs out_r", out, ref, tol=tol, rank=rank)
