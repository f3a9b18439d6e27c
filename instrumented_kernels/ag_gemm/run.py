"""``ktrace run ag_gemm``: all-gather + GEMM traced on N GPUs (run spec and driver).

    ktrace run ag_gemm --nproc 4 -s M=4096 -s N=4096 -s K=2048

``SPEC`` and the driver follow :mod:`instrumented_kernels.runspec`.
"""

from __future__ import annotations

from instrumented_kernels.runspec import Param, RunSpec


def build(dist, params: dict, fault, seed: int, timeout_ns: int | None):
    """The all-gather + GEMM plan on the shared heap, this rank's shard of A and its B_r."""
    import torch

    from instrumented_kernels import harness as H
    from instrumented_kernels.ag_gemm import reference
    from instrumented_kernels.ag_gemm.kernel import AGGemmConfig, AllGatherGemm
    from instrumented_kernels.common_gemm import GemmRunDriver

    p = params
    extra = {"timeout_ns": timeout_ns} if timeout_ns else {}
    heap = H.heap(p["M"] * p["K"] * 2 + (1 << 20))
    cfg = AGGemmConfig(fault=fault, **extra)
    plan = AllGatherGemm(heap, p["M"], p["N"] // dist.world_size, p["K"], torch.bfloat16, cfg)
    return GemmRunDriver(dist, p, seed, heap, plan, reference)


SPEC = RunSpec(
    "ag_gemm",
    "all-gather of A's row shards fused with the GEMM (workgroup-specialised)",
    (
        Param("M", int, 2048, "rows of the gathered A (a multiple of the ranks)"),
        Param("N", int, 2048, "columns in all (a multiple of the ranks; each rank has N / ranks)"),
        Param("K", int, 2048, "depth"),
    ),
    build=build,
    split=("M", "N"),
)
