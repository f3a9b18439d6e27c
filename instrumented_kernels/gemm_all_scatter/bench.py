"""Benchmark cases of GEMM + all-scatter for ``benchmarks/kernels.py``: ``cases(world_size)``.

One case per (shape, schedule), at the Iris paper's shapes (``shapes.json``, bf16). Variants
timed side by side in each case:

``ktrace``       the schedule, untraced.
``traced``       the same launch traced at its default probe density (spans per tile, every
                 wait and notify recorded).
``traced_ring``  the same in ring mode (the flight recorder's cost).
``baseline``     ``torch.matmul`` + ``all_gather_into_tensor`` (NCCL).
``gemm_only``    our GEMM kernel alone on every SM (the bulk schedule's first kernel).
``torch_matmul`` ``torch.matmul`` alone (the baseline's compute).

How much communication a schedule hides (:func:`overlap`): with ``comm = bulk.ktrace -
gemm_only`` (the bulk schedule's exposed communication), ``hidden = (gemm_only + comm -
schedule.ktrace) / comm``: 1 = all of it hidden behind the GEMM, 0 = none, < 0 = slower than bulk.
"""

from __future__ import annotations

from dataclasses import asdict

from instrumented_kernels import harness
from instrumented_kernels.gemm_all_scatter.kernel import SCHEDULES, AllScatterConfig, GemmAllScatter
from instrumented_kernels.gemm_all_scatter.reference import SHAPES, columns, generate_input, torch_baseline

KERNEL = "gemm_all_scatter"
_SHARED: dict = {}


def _shared(dist, shape: dict) -> dict:
    """Inputs, output buffers and the bulk plan of one shape, shared by its schedules' cases."""
    import torch

    key = (shape["name"], dist.world_size)
    if key in _SHARED:
        return _SHARED[key]
    _SHARED.clear()
    M, N, K = shape["M"], shape["N"], shape["K"]
    if N % dist.world_size:
        raise ValueError(f"{shape['name']}: N={N} is not divisible by the world size {dist.world_size}")
    n_loc = N // dist.world_size
    seed = harness.fresh_seed(dist)
    inp = generate_input(dist.rank, dist.world_size, seed, M=M, K=K, N=N)
    heap = harness.heap(M * N * 2 + (1 << 20))
    C = heap.zeros(M, N, dtype=torch.bfloat16, name=f"bench {shape['name']} C")
    bulk = GemmAllScatter(heap, M, N, K, torch.bfloat16, AllScatterConfig(schedule="bulk"), C=C)
    sh = dict(
        A=inp["A"], B=inp["B"], heap=heap, C=C, bulk=bulk,
        gathered=torch.empty((dist.world_size, M, n_loc), dtype=torch.bfloat16, device=dist.device),
        local=torch.empty((M, n_loc), dtype=torch.bfloat16, device=dist.device),
    )
    _SHARED[key] = sh
    return sh


def _build(shape: dict, schedule: str):
    def build(dist) -> harness.Built:
        import torch

        sh = _shared(dist, shape)
        A, B = sh["A"], sh["B"]
        plan = sh["bulk"] if schedule == "bulk" else GemmAllScatter(
            sh["heap"], shape["M"], shape["N"], shape["K"], torch.bfloat16, AllScatterConfig(schedule=schedule), C=sh["C"]
        )

        def check():
            torch_baseline(A, B, sh["gathered"])
            want = columns(sh["gathered"]).clone()
            harness.check_launches(f"{KERNEL}/{schedule}", lambda traced: plan(A, B, traced=traced), sh["C"], sh["heap"], want, rank=dist.rank)

        variants = {
            "ktrace": lambda: plan(A, B),
            "traced": lambda: plan(A, B, traced=True),
            "traced_ring": lambda: plan(A, B, traced="ring"),
            "baseline": lambda: torch_baseline(A, B, sh["gathered"]),
            "gemm_only": lambda: sh["bulk"].gemm_only(A, B),
            "torch_matmul": lambda: torch.matmul(A, B, out=sh["local"]),
        }
        n_loc = shape["N"] // dist.world_size
        return harness.Built(
            variants=variants,
            check=check,
            bytes=shape["M"] * n_loc * 2 * (dist.world_size - 1),
            extra={
                "schedule": schedule,
                "gemm_config": asdict(plan.gemm_cfg),
                "gemm_programs": plan.gemm_programs,
                "comm_programs": plan.comm_programs if schedule in ("producer_consumer", "fused_ws") else 0,
                "tiles": plan.n_tiles,
            },
        )

    return build


def cases(world_size: int) -> list:
    """One :class:`harness.BenchCase` per (paper shape, schedule) whose N divides by ``world_size``."""
    out = []
    for shape in SHAPES["bench"]:
        if shape["N"] % world_size:
            continue
        for schedule in SCHEDULES:
            out.append(
                harness.BenchCase(
                    kernel=KERNEL,
                    name=f"{shape['name']}/{schedule}",
                    shape={"M": shape["M"], "N": shape["N"], "K": shape["K"], "dtype": "bfloat16", "schedule": schedule},
                    build=_build(shape, schedule),
                    reps=30,
                    warmup=5,
                )
            )
    return out


def overlap(timings: dict) -> dict:
    """Hidden fraction of the communication per schedule of one shape.

    Args:
        timings: ``{schedule: {"ktrace": us, "gemm_only": us}}`` for the schedules of one shape
            (``bulk`` required), e.g. from the benchmark's JSON.

    Returns:
        ``{schedule: {"comm_us", "total_us", "gemm_us", "hidden"}}`` as defined in the module doc.
    """
    if "bulk" not in timings:
        raise ValueError("overlap needs the bulk schedule's timings")
    gemm = timings["bulk"]["gemm_only"]
    comm = timings["bulk"]["ktrace"] - gemm
    out = {}
    for sched, t in timings.items():
        hidden = (gemm + comm - t["ktrace"]) / comm if comm > 0 else float("nan")
        out[sched] = {"comm_us": comm, "total_us": t["ktrace"], "gemm_us": gemm, "hidden": hidden}
    return out
