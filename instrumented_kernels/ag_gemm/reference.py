"""Inputs, torch reference and check of all-gather + GEMM (``C_r = [A_0; ...; A_{w-1}] @ B_r``).

``A`` (``M x K``) is drawn from ``seed`` on every rank, which keeps its rows ``A_r``; ``B_r``
(``K x N_loc``) is drawn from ``seed + 1 + rank`` and scaled by ``1/sqrt(K)``.
"""

from __future__ import annotations

import json
import math
import pathlib

from instrumented_kernels import harness
from instrumented_kernels.common_gemm import gemm_dtype, seeded_randn

SHAPES = json.loads((pathlib.Path(__file__).with_name("shapes.json")).read_text())


def _sizes(world_size, M=None, M_per_rank=None, N=None, N_per_rank=None):
    if (M is None) == (M_per_rank is None) or (N is None) == (N_per_rank is None):
        raise ValueError("give exactly one of M / M_per_rank and one of N / N_per_rank")
    m = M if M is not None else M_per_rank * world_size
    n = N if N is not None else N_per_rank * world_size
    if m <= 0 or n <= 0 or m % world_size or n % world_size:
        raise ValueError(f"M={m} and N={n} must be positive multiples of the world size {world_size}")
    return m, n // world_size


def generate_input(rank: int, world_size: int, seed: int, K: int, M=None, M_per_rank=None, N=None, N_per_rank=None,
                   dtype="bfloat16", device=None) -> dict:
    """This rank's inputs: ``{"A": M/world x K (rows of rank r), "B": K x N_loc}``."""
    import torch

    if not 0 <= rank < world_size or K <= 0:
        raise ValueError(f"bad rank {rank} / world {world_size} / K {K}")
    m, n_loc = _sizes(world_size, M, M_per_rank, N, N_per_rank)
    dt = gemm_dtype(dtype)
    device = device or torch.device("cuda", torch.cuda.current_device())
    m_loc = m // world_size
    a = seeded_randn((m, K), seed, dt, device)[rank * m_loc : (rank + 1) * m_loc].contiguous()
    b = seeded_randn((K, n_loc), seed + 1 + rank, dt, device, scale=1.0 / math.sqrt(K))
    return {"A": a, "B": b}


def reference(rank: int, world_size: int, seed: int, K: int, M=None, M_per_rank=None, N=None, N_per_rank=None,
              dtype="bfloat16", device=None):
    """``C_r = A @ B_r`` in float32 (``M x N_loc``)."""
    import torch

    m, n_loc = _sizes(world_size, M, M_per_rank, N, N_per_rank)
    dt = gemm_dtype(dtype)
    device = device or torch.device("cuda", torch.cuda.current_device())
    a = seeded_randn((m, K), seed, dt, device).float()
    return a @ seeded_randn((K, n_loc), seed + 1 + rank, dt, device, scale=1.0 / math.sqrt(K)).float()


def torch_baseline(A_loc, B, A_full, out, group=None):
    """The baseline: NCCL ``all_gather_into_tensor`` of the row shards, then ``torch.matmul``."""
    import torch
    import torch.distributed as dist

    dist.all_gather_into_tensor(A_full, A_loc, group=group)
    return torch.matmul(A_full, B, out=out)


def check(out, ref, rank: int | None = None, tol: float = 1e-2) -> float:
    """Raise ``harness.MismatchError`` unless ``||out - ref|| / ||ref|| <= tol``."""
    return harness.check_close("ag_gemm C_r", out, ref, tol=tol, rank=rank)
