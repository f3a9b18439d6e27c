"""``ktrace run all_to_all``: the MoE dispatch + combine traced on N GPUs (run spec and driver).

    ktrace run all_to_all --nproc 4                       # skewed routing (the default)
    ktrace run all_to_all --nproc 4 -s skew=0 --skip 3:256

``SPEC`` and the driver follow :mod:`instrumented_kernels.runspec`.
"""

from __future__ import annotations

from instrumented_kernels.runspec import Param, RunSpec


class AllToAllDriver:
    """The dispatch + combine plan on the shared heap, this rank's tokens and experts' scales.

    Built collectively by ``SPEC.build(dist, params, fault, seed, timeout_ns)`` (arguments: see
    :mod:`instrumented_kernels.runspec`).
    """

    def __init__(self, dist, params: dict, fault, seed: int, timeout_ns: int | None):
        import torch

        from instrumented_kernels import harness as H
        from instrumented_kernels.all_to_all.kernel import MoEAllToAll, MoEConfig
        from instrumented_kernels.all_to_all.reference import expert_scales, generate_input

        p = params
        extra = {"timeout_ns": timeout_ns} if timeout_ns else {}
        mc = MoEConfig(max_tokens=p["max_tokens"], hidden=p["hidden"], num_experts=p["num_experts"], topk=p["topk"], **extra)
        self.plan = MoEAllToAll(H.heap(MoEAllToAll.heap_bytes(mc, dist.world_size)), mc)
        self.heap, self.fault, self.rank = self.plan.heap, fault, dist.rank
        self.inp = generate_input(dist.rank, dist.world_size, seed, p["max_tokens"], p["hidden"], p["num_experts"], p["topk"],
                                  skew=p["skew"], device=dist.device)
        self.scales_all = expert_scales(seed, p["num_experts"], p["hidden"], dist.device)
        EL = self.plan.EL
        self.scales = self.scales_all[dist.rank * EL : (dist.rank + 1) * EL].contiguous()
        self.out = H.poison(torch.empty_like(self.inp["x"]))

    def step(self) -> None:
        """One dispatch and one combine."""
        i = self.inp
        self.plan.dispatch(i["x"], i["topk_idx"], i["topk_w"], i["m"], fault=self.fault)
        self.plan.combine(self.scales, self.out, fault=self.fault)

    def check(self) -> float:
        """The combined tokens against the reference (``reference.check_combine``)."""
        from instrumented_kernels.all_to_all.reference import check_combine

        return check_combine(self.out, self.inp, self.scales_all, rank=self.rank)


def _validate(p: dict, world_size: int) -> None:
    if not 0.0 <= p["skew"] < 1.0:
        raise ValueError(f"skew must be in [0, 1), got {p['skew']}")
    if p["topk"] > min(32, p["num_experts"]) or p["max_tokens"] > 2048:
        raise ValueError("all_to_all needs topk <= min(32, num_experts) and max_tokens <= 2048")


SPEC = RunSpec(
    "all_to_all",
    "MoE all-to-all: dispatch tokens to their experts' ranks, combine them back (default: skewed routing)",
    (
        Param("max_tokens", int, 64, "tokens per rank (M)"),
        Param("hidden", int, 1024, "token width (D)"),
        Param("num_experts", int, 32, "experts in all (E; a multiple of the ranks)"),
        Param("topk", int, 6, "experts per token"),
        Param("skew", float, 0.6, "rank r holds round(M (1 - skew)^r) tokens (0: all M)"),
    ),
    build=AllToAllDriver,
    split=("num_experts",),
    validate=_validate,
)
