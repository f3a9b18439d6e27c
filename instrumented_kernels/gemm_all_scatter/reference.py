"""Inputs, torch reference and check of GEMM + all-scatter (``C = [A @ B_0 | ... | A @ B_{w-1}]``).

Inputs are generated on the GPU from a seed, so every rank can rebuild every other rank's
``B_s`` for the reference without communicating. ``A`` is the same on every rank (drawn from
``seed``); ``B_s`` is drawn from ``seed + 1 + s`` and scaled by ``1/sqrt(K)`` so ``C`` has unit
variance whatever ``K``.
"""

from __future__ import annotations

import json
import math
import pathlib

from instrumented_kernels import harness
from instrumented_kernels.common_gemm import gemm_dtype, seeded_randn

#: Shapes for the tests and the benchmark (``shapes.json`` next to this file).
SHAPES = json.loads((pathlib.Path(__file__).with_name("shapes.json")).read_text())


def global_n(world_size: int, N: int | None = None, N_per_rank: int | None = None) -> int:
    """The global N of a shape given either ``N`` (divisible by the world size) or ``N_per_rank``."""
    if (N is None) == (N_per_rank is None):
        raise ValueError("give exactly one of N and N_per_rank")
    n = N if N is not None else N_per_rank * world_size
    if n <= 0 or n % world_size:
        raise ValueError(f"N={n} must be a positive multiple of the world size {world_size}")
    return n


def generate_input(rank: int, world_size: int, seed: int, M: int, K: int, N: int | None = None,
                   N_per_rank: int | None = None, dtype="bfloat16", device=None) -> dict:
    """This rank's inputs: ``{"A": M x K, "B": K x N/world}`` on ``device`` (default: current GPU)."""
    import torch

    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world size {world_size}")
    if min(M, K) <= 0:
        raise ValueError(f"M and K must be positive, got {M}, {K}")
    n = global_n(world_size, N, N_per_rank)
    dt = gemm_dtype(dtype)
    device = device or torch.device("cuda", torch.cuda.current_device())
    a = seeded_randn((M, K), seed, dt, device)
    b = seeded_randn((K, n // world_size), seed + 1 + rank, dt, device, scale=1.0 / math.sqrt(K))
    return {"A": a, "B": b}


def reference(rank: int, world_size: int, seed: int, M: int, K: int, N: int | None = None,
              N_per_rank: int | None = None, dtype="bfloat16", device=None):
    """The full ``C`` (``M x N``, float32) every rank must end with."""
    import torch

    n = global_n(world_size, N, N_per_rank)
    dt = gemm_dtype(dtype)
    device = device or torch.device("cuda", torch.cuda.current_device())
    a = seeded_randn((M, K), seed, dt, device).float()
    cols = [a @ seeded_randn((K, n // world_size), seed + 1 + s, dt, device, scale=1.0 / math.sqrt(K)).float() for s in range(world_size)]
    return torch.cat(cols, dim=1)


def torch_baseline(A, B, gathered, group=None):
    """The baseline: ``torch.matmul`` then ``all_gather_into_tensor`` into ``gathered``
    (``world x M x N_loc``, rank-major, what NCCL produces); returns it.

    The baseline's output is rank-major; :func:`columns` turns it into ``C``'s ``M x N`` layout
    for checking. That copy is not part of the timed baseline, which keeps the comparison
    conservative (our kernels produce the column layout directly).
    """
    import torch
    import torch.distributed as dist

    local = torch.matmul(A, B)
    dist.all_gather_into_tensor(gathered, local, group=group)
    return gathered


def columns(gathered):
    """``world x M x N_loc`` (rank-major) -> ``M x N`` with rank s's slice in columns s*N_loc.."""
    w, m, n = gathered.shape
    return gathered.permute(1, 0, 2).reshape(m, w * n)


def check(out, ref, rank: int | None = None, tol: float = 1e-2) -> float:
    """Raise ``harness.MismatchError`` unless ``||out - ref|| / ||ref|| <= tol``; returns the error."""
    return harness.check_close("gemm_all_scatter C", out, ref, tol=tol, rank=rank)
