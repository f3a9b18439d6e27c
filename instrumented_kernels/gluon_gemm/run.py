"""``ktrace run gluon_gemm``: the warp-specialized Gluon GEMM traced per partition.

    ktrace run gluon_gemm -s M=4096 -s N=4096 -s K=4096 -s loader_delay_us=2
    ktrace run gluon_gemm --nproc 2 -s variant=all_scatter

``SPEC`` and the driver follow :mod:`instrumented_kernels.runspec`. Each rank runs its own GEMM
(no communication), or with ``variant=all_scatter`` the GEMM of its rows fused with their
all-scatter: the run shows the partitions as lanes and their mbarrier hand-offs (and flags).
"""

from __future__ import annotations

from instrumented_kernels.runspec import Param, RunSpec


class _Plan:
    """``plan(A, B)``: the GEMM into a fresh output (poisoned first, so a missed tile shows)."""

    def __init__(self, gemm):
        self.gemm = gemm

    def __call__(self, A, B):
        import torch

        from instrumented_kernels.harness import poison

        C = poison(torch.empty((A.shape[0], B.shape[1]), dtype=torch.float16, device=A.device))
        return self.gemm(A, B, C, traced=True)


class _Gathered:
    """The reference of the all-scatter: every rank's rows (each rank draws the same inputs from
    the run's seed), stacked."""

    def __init__(self, reference):
        self.generate_input, self.check = reference.generate_input, reference.check
        self._ref = reference

    def reference(self, rank, world_size, seed, **shape):
        return self._ref.reference(rank, world_size, seed, **shape).repeat(world_size, 1)


def build(dist, params: dict, fault, seed: int, timeout_ns: int | None):
    """The GEMM on this rank (its inputs from ``seed``), or with ``variant=all_scatter`` the GEMM
    fused with the all-scatter of every rank's rows over the symmetric heap; ``fault`` and
    ``timeout_ns`` do not apply (its waits have their own bound)."""
    from instrumented_kernels import harness as H
    from instrumented_kernels.common_gemm import GemmRunDriver
    from instrumented_kernels.gluon_gemm import reference
    from instrumented_kernels.gluon_gemm.kernel import GluonGemm, GluonGemmConfig

    p = params
    cfg = GluonGemmConfig(loader_delay_ns=int(p["loader_delay_us"] * 1000), stage_probes=p["probes"] == "stage")
    if p["variant"] == "all_scatter":
        from instrumented_kernels.gluon_gemm.scatter import GluonGemmScatter

        heap = H.heap(dist.world_size * p["M"] * p["N"] * 2 + (1 << 20))
        scatter = GluonGemmScatter(heap, p["M"], p["N"], p["K"], cfg)
        return GemmRunDriver(dist, p, seed, heap, lambda A, B: scatter(A, B, traced=True), _Gathered(reference),
                             barrier_before_check=True)
    heap = H.heap(1 << 20)
    plan = _Plan(GluonGemm(p["M"], p["N"], p["K"], cfg))
    return GemmRunDriver(dist, p, seed, heap, plan, reference)


SPEC = RunSpec(
    "gluon_gemm",
    "warp-specialized Gluon GEMM (TMA loader, wgmma, epilogue partitions; Hopper)",
    (
        Param("M", int, 4096, "rows"),
        Param("N", int, 4096, "columns (a multiple of 8)"),
        Param("K", int, 4096, "depth (a multiple of 8)"),
        Param("loader_delay_us", float, 0.0, "slow the loader on purpose: µs spun before each stage's copies"),
        Param("probes", str, "stage", "stage: every mbarrier hand-off recorded and paired (a diagnosis run; "
              "5-14 % slower); tile: the kernel's default density (spans per tile, the MMA side of the tile hand-off)",
              choices=("stage", "tile")),
        Param("variant", str, "gemm", "gemm: each rank its own GEMM; all_scatter: fused with the all-scatter of its "
              "rows (a communication partition on the symmetric heap)", choices=("gemm", "all_scatter")),
    ),
    build=build,
)
