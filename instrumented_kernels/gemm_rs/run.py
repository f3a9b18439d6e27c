"""``ktrace run gemm_rs``: GEMM + reduce-scatter traced on N GPUs (run spec and driver).

    ktrace run gemm_rs --nproc 4 -s M=4096 -s K=4096

``SPEC`` and the driver follow :mod:`instrumented_kernels.runspec`.
"""

from __future__ import annotations

from instrumented_kernels.runspec import Param, RunSpec


def build(dist, params: dict, fault, seed: int, timeout_ns: int | None):
    """The GEMM + reduce-scatter plan on the shared heap, this rank's K shards of A and B."""
    import torch

    from instrumented_kernels import harness as H
    from instrumented_kernels.common_gemm import GemmRunDriver
    from instrumented_kernels.gemm_rs import reference
    from instrumented_kernels.gemm_rs.kernel import GemmReduceScatter, GemmRSConfig

    p = params
    extra = {"timeout_ns": timeout_ns} if timeout_ns else {}
    heap = H.heap(p["M"] * p["N"] * 2 + (1 << 20))
    cfg = GemmRSConfig(fault=fault, **extra)
    plan = GemmReduceScatter(heap, p["M"], p["N"], p["K"] // dist.world_size, torch.bfloat16, cfg)
    return GemmRunDriver(dist, p, seed, heap, plan, reference)


SPEC = RunSpec(
    "gemm_rs",
    "GEMM of K shards fused with the reduce-scatter of its rows",
    (
        Param("M", int, 2048, "rows (a multiple of the ranks)"),
        Param("N", int, 2048, "columns"),
        Param("K", int, 2048, "depth in all (a multiple of the ranks)"),
    ),
    build=build,
    split=("M", "K"),
)
