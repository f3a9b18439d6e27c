"""``ktrace run gemm_all_scatter``: GEMM + all-scatter traced on N GPUs (run spec and driver).

    ktrace run gemm_all_scatter --nproc 4 -s schedule=fused_ws -s M=4096

``SPEC`` and the driver follow :mod:`instrumented_kernels.runspec`.
"""

from __future__ import annotations

from instrumented_kernels.runspec import Param, RunSpec


def build(dist, params: dict, fault, seed: int, timeout_ns: int | None):
    """The GEMM + all-scatter plan (one schedule) on the shared heap, this rank's A and B_r; the
    check reads the whole C once every peer's columns have landed (a heap barrier)."""
    import torch

    from instrumented_kernels import harness as H
    from instrumented_kernels.common_gemm import GemmRunDriver
    from instrumented_kernels.gemm_all_scatter import reference
    from instrumented_kernels.gemm_all_scatter.kernel import AllScatterConfig, GemmAllScatter

    p = params
    extra = {"timeout_ns": timeout_ns} if timeout_ns else {}
    heap = H.heap(p["M"] * p["N"] * 2 + (1 << 20))
    cfg = AllScatterConfig(schedule=p["schedule"], fault=fault, **extra)
    plan = GemmAllScatter(heap, p["M"], p["N"], p["K"], torch.bfloat16, cfg)
    return GemmRunDriver(dist, p, seed, heap, plan, reference, barrier_before_check=True)


SPEC = RunSpec(
    "gemm_all_scatter",
    "C = all_gather_columns(A @ B_r), in one of the four schedules of the Iris taxonomy",
    (
        Param("M", int, 2048, "rows of A and C"),
        Param("N", int, 2048, "columns of C (a multiple of the ranks)"),
        Param("K", int, 2048, "depth"),
        Param("schedule", str, "fused_sequential", "schedule",
              ("bulk", "producer_consumer", "fused_sequential", "fused_ws")),
    ),
    build=build,
    split=("N",),
)
