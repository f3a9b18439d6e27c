"""Benchmark cases of all-gather + GEMM for ``benchmarks/kernels.py``: ``cases(world_size)``.

Variants per shape (bf16): ``ktrace`` (the fused kernel), ``traced`` (the same, traced at its
default probe density), ``traced_ring`` (the same in ring mode: the flight recorder's cost), ``baseline`` (NCCL ``all_gather_into_tensor`` + ``torch.matmul``) and
``torch_matmul`` (the baseline's GEMM alone: the compute floor).
"""

from __future__ import annotations

from dataclasses import asdict

from instrumented_kernels import harness
from instrumented_kernels.ag_gemm.kernel import AllGatherGemm
from instrumented_kernels.ag_gemm.reference import SHAPES, generate_input, torch_baseline

KERNEL = "ag_gemm"


def _build(shape: dict):
    def build(dist) -> harness.Built:
        import torch

        M, N, K = shape["M"], shape["N"], shape["K"]
        n_loc = N // dist.world_size
        seed = harness.fresh_seed(dist)
        inp = generate_input(dist.rank, dist.world_size, seed, K=K, M=M, N=N)
        A, B = inp["A"], inp["B"]
        heap = harness.heap(M * K * 2 + (1 << 20))
        plan = AllGatherGemm(heap, M, n_loc, K, torch.bfloat16)
        A_full = torch.empty((M, K), dtype=torch.bfloat16, device=dist.device)
        out = torch.empty((M, n_loc), dtype=torch.bfloat16, device=dist.device)

        def check():
            want = torch_baseline(A, B, A_full, out).clone()
            harness.check_launches(KERNEL, lambda traced: plan(A, B, traced=traced), plan.C, heap, want, rank=dist.rank)

        return harness.Built(
            variants={
                "ktrace": lambda: plan(A, B),
                "traced": lambda: plan(A, B, traced=True),
                "traced_ring": lambda: plan(A, B, traced="ring"),
                "baseline": lambda: torch_baseline(A, B, A_full, out),
                "torch_matmul": lambda: torch.matmul(A_full, B, out=out),
            },
            check=check,
            bytes=(M // dist.world_size) * K * 2 * (dist.world_size - 1),
            extra={"gemm_config": asdict(plan.gemm_cfg), "gemm_programs": plan.gemm_programs, "comm_programs": plan.comm_programs},
        )

    return build


def cases(world_size: int) -> list:
    """One :class:`harness.BenchCase` per shape whose M and N divide by ``world_size``."""
    return [
        harness.BenchCase(
            kernel=KERNEL, name=s["name"], shape={"M": s["M"], "N": s["N"], "K": s["K"], "dtype": "bfloat16"},
            build=_build(s), reps=30, warmup=5,
        )
        for s in SHAPES["bench"]
        if s["M"] % world_size == 0 and s["N"] % world_size == 0
    ]
