"""Benchmark cases of GEMM + reduce-scatter for ``benchmarks/kernels.py``: ``cases(world_size)``.

Variants per shape (bf16): ``ktrace`` (the fused kernel), ``traced`` (the same, traced at its
default probe density), ``traced_ring`` (the same in ring mode: the flight recorder's cost), ``baseline`` (``torch.matmul`` + NCCL ``reduce_scatter_tensor``) and
``torch_matmul`` (the baseline's GEMM alone: the compute floor).
"""

from __future__ import annotations

from dataclasses import asdict

from instrumented_kernels import harness
from instrumented_kernels.gemm_rs.kernel import GemmReduceScatter
from instrumented_kernels.gemm_rs.reference import SHAPES, generate_input, torch_baseline

KERNEL = "gemm_rs"


def _build(shape: dict):
    def build(dist) -> harness.Built:
        import torch

        M, N, K = shape["M"], shape["N"], shape["K"]
        w = dist.world_size
        seed = harness.fresh_seed(dist)
        inp = generate_input(dist.rank, w, seed, N=N, M=M, K=K)
        A, B = inp["A"], inp["B"]
        heap = harness.heap(M * N * 2 + (1 << 20))
        plan = GemmReduceScatter(heap, M, N, K // w, torch.bfloat16)
        partial = torch.empty((M, N), dtype=torch.bfloat16, device=dist.device)
        out = torch.empty((M // w, N), dtype=torch.bfloat16, device=dist.device)

        def check():
            want = torch_baseline(A, B, partial, out).clone()
            harness.check_launches(KERNEL, lambda traced: plan(A, B, traced=traced), plan.out, heap, want, rank=dist.rank)

        return harness.Built(
            variants={
                "ktrace": lambda: plan(A, B),
                "traced": lambda: plan(A, B, traced=True),
                "traced_ring": lambda: plan(A, B, traced="ring"),
                "baseline": lambda: torch_baseline(A, B, partial, out),
                "torch_matmul": lambda: torch.matmul(A, B, out=partial),
            },
            check=check,
            bytes=(M // w) * N * 2 * (w - 1),
            extra={"gemm_config": asdict(plan.gemm_cfg), "programs": plan.programs},
        )

    return build


def cases(world_size: int) -> list:
    """One :class:`harness.BenchCase` per shape whose M and K divide by ``world_size``."""
    return [
        harness.BenchCase(
            kernel=KERNEL, name=s["name"], shape={"M": s["M"], "N": s["N"], "K": s["K"], "dtype": "bfloat16"},
            build=_build(s), reps=30, warmup=5,
        )
        for s in SHAPES["bench"]
        if s["M"] % world_size == 0 and s["K"] % world_size == 0
    ]
