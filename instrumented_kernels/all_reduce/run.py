"""``ktrace run all_reduce``: the symmetric-heap all-reduce traced on N GPUs (run spec and driver).

    ktrace run all_reduce --nproc 4 -s method=two_shot -s n=4194304

``SPEC`` and the driver follow :mod:`instrumented_kernels.runspec`.
"""

from __future__ import annotations

from instrumented_kernels.runspec import Param, RunSpec


class AllReduceDriver:
    """The all-reduce plan on the shared heap and this rank's input.

    Built collectively by ``SPEC.build(dist, params, fault, seed, timeout_ns)`` (arguments: see
    :mod:`instrumented_kernels.runspec`).
    """

    def __init__(self, dist, params: dict, fault, seed: int, timeout_ns: int | None):
        import torch

        from instrumented_kernels import harness as H
        from instrumented_kernels.all_reduce.kernel import AllReduce, AllReduceConfig
        from instrumented_kernels.all_reduce.reference import generate_input

        p = params
        extra = {"timeout_ns": timeout_ns} if timeout_ns else {}
        ac = AllReduceConfig(n=p["n"], dtype=p["dtype"], method=p["method"], **extra)
        self.plan = AllReduce(H.heap(AllReduce.heap_bytes(ac, dist.world_size)), ac)
        self.heap, self.fault, self.dist, self.seed, self.p = self.plan.heap, fault, dist, seed, p
        self.x = generate_input(dist.rank, dist.world_size, seed, p["n"], p["dtype"], dist.device)
        self.out = H.poison(torch.empty_like(self.x))

    def step(self) -> None:
        """One all-reduce."""
        self.plan(self.x, self.out, fault=self.fault)

    def check(self) -> float:
        """The sum against the reference (``reference.check``)."""
        from instrumented_kernels.all_reduce.reference import check

        return check(self.out, self.dist.world_size, self.seed, self.p["n"], self.p["dtype"], rank=self.dist.rank)


SPEC = RunSpec(
    "all_reduce",
    "all-reduce (sum) on the symmetric heap, one-shot or two-shot",
    (
        Param("n", int, 1 << 20, "elements per rank"),
        Param("method", str, "one_shot_push", "schedule", ("one_shot_push", "one_shot", "two_shot")),
        Param("dtype", str, "bfloat16", "element type", ("bfloat16", "float16", "float32")),
    ),
    build=AllReduceDriver,
)
