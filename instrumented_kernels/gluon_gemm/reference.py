"""Inputs, reference and check of the Gluon GEMM (``C = A @ B``, fp16 in and out)."""

from __future__ import annotations

import json
import os

from instrumented_kernels.common_gemm import seeded_randn
from instrumented_kernels.harness import check_close

with open(os.path.join(os.path.dirname(__file__), "shapes.json")) as f:
    SHAPES = json.load(f)

#: Relative error allowed (fp16 inputs, fp32 accumulation, fp16 output).
TOL = 1e-2


def generate_input(rank: int, world_size: int, seed: int, M: int, N: int, K: int, device="cuda"):
    """Fresh random ``A`` (M x K) and ``B`` (K x N), fp16, drawn from ``seed`` (the same on every rank)."""
    import torch

    return {"A": seeded_randn((M, K), seed, torch.float16, device, scale=K ** -0.25),
            "B": seeded_randn((K, N), seed + 1, torch.float16, device, scale=K ** -0.25)}


def reference(rank: int, world_size: int, seed: int, M: int, N: int, K: int, device="cuda"):
    """``A @ B`` in float32 by torch."""
    import torch

    inp = generate_input(rank, world_size, seed, M, N, K, device)
    return torch.matmul(inp["A"].float(), inp["B"].float())


def check(out, ref, rank: int | None = None) -> float:
    """Relative error of ``out`` against ``ref``; raises ``harness.MismatchError`` above :data:`TOL`."""
    return check_close("gluon_gemm", out, ref, tol=TOL, rank=rank)
