"""Benchmark cases of the MoE all-to-all for ``benchmarks/kernels.py``: our dispatch + combine vs
the ``all_to_all_single`` baseline (``baseline.py``) at the shapes of ``shapes.json``."""

from __future__ import annotations

import json
from pathlib import Path

from instrumented_kernels import harness as H

SHAPES = json.loads((Path(__file__).parent / "shapes.json").read_text())


def _build(shape: dict):
    def build(dist: H.Dist) -> H.Built:
        import torch

        from ktrace import schema

        from . import baseline
        from .kernel import MoEAllToAll, MoEConfig
        from .reference import check_combine, expert_scales, generate_input

        W, r = dist.world_size, dist.rank
        sh = {k: v for k, v in shape.items() if k != "name"}
        skew = sh.pop("skew", 0.0)
        cfg = MoEConfig(max_tokens=sh["max_tokens"], hidden=sh["hidden"], num_experts=sh["num_experts"], topk=sh["topk"])
        plan = MoEAllToAll(H.heap(MoEAllToAll.heap_bytes(cfg, W)), cfg)
        seed = H.fresh_seed(dist)
        inp = generate_input(r, W, seed, skew=skew, device=dist.device, **sh)
        scales_all = expert_scales(seed, cfg.num_experts, cfg.hidden, dist.device)
        EL = plan.EL
        scales = scales_all[r * EL : (r + 1) * EL].contiguous()
        out = H.poison(torch.empty_like(inp["x"]))
        out_t = H.poison(torch.empty_like(inp["x"]))
        out_ring = H.poison(torch.empty_like(inp["x"]))
        res = {}
        sd, sc = plan.slots("dispatch"), plan.slots("combine")
        bd = H.trace_buffer(plan.nprog, sd, dist.device)
        bc = H.trace_buffer(plan.nprog, sc, dist.device)
        rd, rc, ring = H.ring_buffer(plan.nprog, dist.device), H.ring_buffer(plan.nprog, dist.device), schema.ring_gate(H.RING_SLOTS)

        def ours():
            plan.dispatch(inp["x"], inp["topk_idx"], inp["topk_w"], inp["m"])
            plan.combine(scales, out)

        def traced():
            plan.dispatch(inp["x"], inp["topk_idx"], inp["topk_w"], inp["m"], ktrace_buf=bd, ktrace_slots=sd)
            plan.combine(scales, out_t, ktrace_buf=bc, ktrace_slots=sc)

        def traced_ring():
            plan.dispatch(inp["x"], inp["topk_idx"], inp["topk_w"], inp["m"], ktrace_buf=rd, ktrace_slots=ring)
            plan.combine(scales, out_ring, ktrace_buf=rc, ktrace_slots=ring)

        def base():
            res["base"] = baseline.dispatch_combine(inp, scales, r, W, EL)

        def checks():
            torch.cuda.synchronize()
            plan.heap.check()
            check_combine(out, inp, scales_all, rank=r)
            check_combine(out_t, inp, scales_all, rank=r)
            check_combine(out_ring, inp, scales_all, rank=r)
            check_combine(res["base"], inp, scales_all, rank=r)

        m = inp["m"]
        moved = int(sum(((inp["topk_idx"][:m].long() // EL) == d).any(dim=1).sum() for d in range(W))) * cfg.hidden * 2 * 2
        return H.Built(
            variants={"ktrace": ours, "traced": traced, "traced_ring": traced_ring, "baseline": base},
            check=checks,
            bytes=moved,
            extra={"m": m, "programs": plan.nprog, "slots_dispatch": sd, "slots_combine": sc},
        )

    return build


def cases(world_size: int) -> list[H.BenchCase]:
    """One case per ``bench`` shape whose expert count the world size divides."""
    return [
        H.BenchCase("all_to_all", s["name"], dict(s), _build(s), reps=20, warmup=10, batch=10)
        for s in SHAPES["bench"]
        if s["num_experts"] % world_size == 0
    ]
