"""Benchmark cases of the all-reduce for ``benchmarks/kernels.py``: ours (one-shot and two-shot)
vs NCCL ``all_reduce`` at each message size of ``shapes.json``, plus our traced launch (``traced``:
a dense buffer; ``traced_ring``: ring mode, the flight recorder's cost)."""

from __future__ import annotations

import json
from pathlib import Path

from instrumented_kernels import harness as H

SHAPES = json.loads((Path(__file__).parent / "shapes.json").read_text())


def _build(nbytes: int, method: str, dtype: str):
    def build(dist: H.Dist) -> H.Built:
        import torch
        import torch.distributed as tdist

        from ktrace import schema

        from .kernel import AllReduce, AllReduceConfig
        from .reference import check, generate_input

        esize = torch.empty((), dtype=getattr(torch, dtype)).element_size()
        n = max(1, nbytes // esize)
        cfg = AllReduceConfig(n=n, dtype=dtype, method=method)
        plan = AllReduce(H.heap(AllReduce.heap_bytes(cfg, dist.world_size)), cfg)
        seed = H.fresh_seed(dist)
        x = generate_input(dist.rank, dist.world_size, seed, n, dtype, dist.device)
        out = H.poison(torch.empty_like(x))
        out_t = H.poison(torch.empty_like(x))
        out_ring = H.poison(torch.empty_like(x))
        nccl = x.clone()
        slots = plan.slots()
        tbuf = H.trace_buffer(plan.nprog, slots, dist.device)
        rbuf, ring = H.ring_buffer(plan.nprog, dist.device), schema.ring_gate(H.RING_SLOTS)

        def checks():
            torch.cuda.synchronize()
            plan.heap.check()
            check(out, dist.world_size, seed, n, dtype, rank=dist.rank)
            check(out_t, dist.world_size, seed, n, dtype, rank=dist.rank)
            check(out_ring, dist.world_size, seed, n, dtype, rank=dist.rank)
            ref = x.clone()
            tdist.all_reduce(ref)
            check(ref, dist.world_size, seed, n, dtype, rank=dist.rank)

        return H.Built(
            variants={
                "ktrace": lambda: plan(x, out),
                "traced": lambda: plan(x, out_t, ktrace_buf=tbuf, ktrace_slots=slots),
                "traced_ring": lambda: plan(x, out_ring, ktrace_buf=rbuf, ktrace_slots=ring),
                "baseline": lambda: tdist.all_reduce(nccl),
            },
            check=checks,
            bytes=n * esize,
            extra={"n": n, "block": plan.block, "programs": plan.nprog, "slots_per_program": slots},
        )

    return build


def cases(world_size: int) -> list[H.BenchCase]:
    """One case per (method, message size) of ``shapes.json``."""
    b = SHAPES["bench"]
    out = []
    for method in b["methods"]:
        for nbytes in b["bytes"]:
            out.append(H.BenchCase("all_reduce", f"{method}-{nbytes}B", {"bytes": nbytes, "method": method, "dtype": b["dtype"]},
                                   _build(nbytes, method, b["dtype"]), reps=30, warmup=20, batch=20))
    return out
