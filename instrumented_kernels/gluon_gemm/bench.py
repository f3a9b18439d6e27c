"""Benchmark cases of the Gluon GEMM for ``benchmarks/kernels.py``: ``cases(world_size)``.

Variants per shape (fp16): ``ktrace`` (the kernel untraced), ``traced`` (traced at its default
density: per tile), ``traced_stage`` (every stage's hand-off), ``triton_gemm`` (the Triton
GEMM of ``common_gemm.py``) and ``torch`` (``torch.matmul``).
"""

from __future__ import annotations

from instrumented_kernels import harness
from instrumented_kernels.gluon_gemm.reference import SHAPES, TOL, generate_input

KERNEL = "gluon_gemm"


def _build(shape: dict):
    def build(dist) -> harness.Built:
        import torch

        from instrumented_kernels.common_gemm import matmul
        from instrumented_kernels.gluon_gemm.kernel import GluonGemm, GluonGemmConfig

        M, N, K = shape["M"], shape["N"], shape["K"]
        inp = generate_input(dist.rank, dist.world_size, harness.fresh_seed(dist), M=M, N=N, K=K, device=dist.device)
        A, B = inp["A"], inp["B"]
        C = torch.empty((M, N), dtype=torch.float16, device=dist.device)
        tile = GluonGemm(M, N, K, GluonGemmConfig(stage_probes=False)).direct(A, B, C)
        stage = GluonGemm(M, N, K, GluonGemmConfig(stage_probes=True)).direct(A, B, C)

        def check():
            want = torch.matmul(A.float(), B.float())
            for name, fn in (("untraced", tile.untraced), ("traced", tile.traced), ("traced_stage", stage.traced)):
                harness.poison(C)
                fn()
                harness.check_close(f"{KERNEL} {name} vs torch", C, want, tol=TOL, rank=dist.rank)

        return harness.Built(
            variants={"ktrace": tile.untraced, "traced": tile.traced, "traced_stage": stage.traced,
                      "triton_gemm": lambda: matmul(A, B, out=C), "torch": lambda: torch.matmul(A, B, out=C)},
            check=check,
            extra={"programs": tile.gemm.programs, "events_per_lane": {"tile": tile.capacity, "stage": stage.capacity}},
        )

    return build


def cases(world_size: int) -> list:
    """One :class:`harness.BenchCase` per shape (each rank runs its own GEMM)."""
    return [
        harness.BenchCase(kernel=KERNEL, name=s["name"], shape={"M": s["M"], "N": s["N"], "K": s["K"], "dtype": "float16"},
                          build=_build(s), reps=100, warmup=10)
        for s in SHAPES["bench"]
    ]
