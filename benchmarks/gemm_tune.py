"""Tile-GEMM configurations against ``torch.matmul`` and, across ranks, the GEMM + all-scatter
schedules with each GEMM path: which tile shape and operand path (pointers or TMA descriptors)
to use on this GPU.

    # one GPU: our GEMM alone, every candidate configuration, vs torch.matmul (cuBLAS)
    python benchmarks/gemm_tune.py --world 4 [--json out.json]

    # every rank: the all-scatter schedules with the pointer and the TMA GEMM vs torch + NCCL
    python -m ktrace.testing.launch -n 4 -- python benchmarks/gemm_tune.py --schedules [--json out.json]

Shapes are the GEMM + all-scatter benchmark shapes (``instrumented_kernels/gemm_all_scatter/
shapes.json``); each rank's GEMM is ``M x N/world x K``. Inputs are fresh random bf16 each run;
every configuration's output is checked against ``torch.matmul`` (relative error <= 1e-2)
before it is timed. Times: ``harness.time_interleaved`` (CUDA events, a fresh random order each repetition, medians).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: (block_m, block_n, block_k, num_warps, num_stages) tried with TMA operands.
TMA_CANDIDATES = (
    (128, 256, 64, 8, 3),
    (128, 256, 64, 8, 4),
    (256, 128, 64, 8, 3),
    (256, 128, 64, 8, 4),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 128, 128, 8, 3),
)


def _shapes(world: int) -> list[dict]:
    from instrumented_kernels.gemm_all_scatter.reference import SHAPES

    return [s for s in SHAPES["bench"] if s["N"] % world == 0]


def single(world: int, reps: int) -> list[dict]:
    """Our GEMM alone (pointer path from ``pick_config``, then every TMA candidate) vs torch."""
    import torch

    from instrumented_kernels import harness
    from instrumented_kernels.common_gemm import GemmConfig, matmul, num_sms, pick_config

    dev = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(device=dev).manual_seed(harness.fresh_seed())
    rows = []
    for shape in _shapes(world):
        M, N, K = shape["M"], shape["N"] // world, shape["K"]
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16, generator=gen) / K**0.25
        b = torch.randn(K, N, device=dev, dtype=torch.bfloat16, generator=gen) / K**0.25
        ref = torch.matmul(a.float(), b.float())
        base = pick_config(M, N, K, num_sms(dev.index))
        configs = {"ptr " + _name(base): base, "tma " + _name(replace(base, tma=True)): replace(base, tma=True)}
        for bm, bn, bk, w, st in TMA_CANDIDATES:
            cfg = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=st, tma=True)
            configs.setdefault("tma " + _name(cfg), cfg)
        outs = {n: torch.empty(M, N, device=dev, dtype=torch.bfloat16) for n in configs}
        fns = {"torch.matmul": lambda: torch.matmul(a, b, out=outs.setdefault("torch", torch.empty(M, N, device=dev, dtype=torch.bfloat16)))}
        for n, cfg in configs.items():
            try:
                harness.poison(outs[n])
                matmul(a, b, out=outs[n], config=cfg)
                torch.cuda.synchronize()
                err = harness.check_close(f"{shape['name']} {n}", outs[n], ref)
            except Exception as e:  # a configuration that does not compile or fit is reported and skipped
                print(f"{shape['name']:18s} {n:32s} SKIPPED: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
                continue
            fns[n] = (lambda c=cfg, o=outs[n]: matmul(a, b, out=o, config=c))
            rows.append({"shape": shape["name"], "M": M, "N": N, "K": K, "config": n, "rel_err": err, **asdict(cfg)})
        t = harness.time_interleaved(fns, reps=reps, warmup=3)
        tm = t["torch.matmul"].median_us
        flops = 2.0 * M * N * K
        print(f"{shape['name']} (per rank {M}x{N}x{K}): torch.matmul {tm:.1f} us ({flops / tm / 1e6:.0f} TFLOP/s)", flush=True)
        for r in rows:
            if r["shape"] == shape["name"] and r["config"] in t:
                us = t[r["config"]].median_us
                r.update(us=us, torch_us=tm, vs_torch=tm / us)
                print(f"  {r['config']:34s} {us:9.1f} us  {flops / us / 1e6:5.0f} TFLOP/s  torch/ours {tm / us:.3f}  err {r['rel_err']:.1e}", flush=True)
    return rows


def _name(cfg) -> str:
    return f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages}"


#: Schedule variants timed by ``--schedules``: (name, schedule, tile config or None for
#: ``pick_config`` with TMA operands, AllScatterConfig overrides).
SCHEDULE_VARIANTS = (
    ("bulk/tma", "bulk", None, {}),
    ("producer_consumer/tma", "producer_consumer", None, {}),
    ("producer_consumer/128x128 c16", "producer_consumer", (128, 128, 64, 8, 4), {}),
    ("producer_consumer/128x128 c24", "producer_consumer", (128, 128, 64, 8, 4), {"comm_programs": 24}),
    ("fused_ws/tma", "fused_ws", None, {}),
    ("fused_ws/tma c32", "fused_ws", None, {"comm_programs": 32}),
    ("fused_ws/128x128 c16", "fused_ws", (128, 128, 64, 8, 4), {}),
    ("fused_ws/128x128 c20", "fused_ws", (128, 128, 64, 8, 4), {"comm_programs": 20}),
    ("fused_ws/128x128 c24", "fused_ws", (128, 128, 64, 8, 4), {"comm_programs": 24}),
    ("fused_ws/128x128 c32", "fused_ws", (128, 128, 64, 8, 4), {"comm_programs": 32}),
    ("fused_sequential/tma", "fused_sequential", None, {}),
)


def schedules(reps: int, trace_dir: str | None = None, trace_shape: str | None = None, variants: list | None = None) -> list[dict]:
    """Every rank: the all-scatter schedule variants (TMA GEMM operands) vs torch + NCCL.

    With ``trace_dir``, one traced call of every variant (of ``trace_shape`` only, if given) is
    recorded with the clocks calibrated and written there as ``SHAPE-VARIANT.ktrace`` by rank 0.
    """
    import torch

    import ktrace
    from instrumented_kernels import harness
    from instrumented_kernels.common_gemm import GemmConfig, pick_config
    from instrumented_kernels.gemm_all_scatter.kernel import AllScatterConfig, GemmAllScatter
    from instrumented_kernels.gemm_all_scatter.reference import columns, generate_input, torch_baseline

    dist = harness.setup()
    rows = []
    for shape in _shapes(dist.world_size):
        M, N, K = shape["M"], shape["N"], shape["K"]
        n_loc = N // dist.world_size
        inp = generate_input(dist.rank, dist.world_size, harness.fresh_seed(dist), M=M, K=K, N=N)
        A, B = inp["A"], inp["B"]
        heap = harness.heap(M * N * 2 + (1 << 20))
        C = heap.zeros(M, N, dtype=torch.bfloat16, name=f"tune {shape['name']} C")
        gathered = torch.empty((dist.world_size, M, n_loc), dtype=torch.bfloat16, device=dist.device)
        torch_baseline(A, B, gathered)
        want = columns(gathered).clone()
        fns = {"baseline": lambda: torch_baseline(A, B, gathered)}
        plans = {}
        for name, sched, tile, over in SCHEDULE_VARIANTS:
            if variants and name not in variants:
                continue
            try:
                if tile is None:
                    probe = GemmAllScatter(heap, M, N, K, torch.bfloat16, AllScatterConfig(schedule=sched, **over), C=C)
                    gcfg = replace(pick_config(M, n_loc, K, probe.gemm_programs), tma=True)
                else:
                    bm, bn, bk, w, st = tile
                    gcfg = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=st, tma=True)
                plan = GemmAllScatter(heap, M, N, K, torch.bfloat16, AllScatterConfig(schedule=sched, gemm=gcfg, **over), C=C)
                harness.poison(C)
                heap.barrier()
                got = plan(A, B)
                heap.check()
                harness.check_close(f"{shape['name']} {name}", got, want, rank=dist.rank)
                heap.barrier()
            except Exception as e:  # one variant failing must not hide the others' figures
                print(f"[rank {dist.rank}] {shape['name']} {name}: FAILED: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
                raise
            fns[name] = (lambda p=plan: p(A, B))
            plans[name] = plan
            if sched == "bulk":
                fns["gemm_only/tma"] = (lambda p=plan: p.gemm_only(A, B))
        t = harness.time_interleaved(fns, reps=reps, warmup=3, dist=dist)
        base = t["baseline"].median_us
        if dist.rank == 0:
            print(f"{shape['name']} on {dist.world_size} ranks: torch + NCCL {base:.1f} us", flush=True)
        for n, tm in t.items():
            rows.append({"shape": shape["name"], "variant": n, "us": tm.median_us, "p10": tm.p10_us, "p90": tm.p90_us, "baseline_us": base})
            if dist.rank == 0:
                print(f"  {n:44s} {tm.median_us:9.1f} us ({tm.p10_us:.1f}-{tm.p90_us:.1f})  speedup {base / tm.median_us:.3f}", flush=True)
        if trace_dir and (trace_shape is None or trace_shape == shape["name"]):
            for name, plan in plans.items():
                with ktrace.capture():  # compile the traced kernels
                    plan(A, B)
                torch.cuda.synchronize()
                heap.barrier()
                with ktrace.capture(heap=heap) as cap:
                    heap.barrier()
                    plan(A, B)
                    torch.cuda.synchronize()
                merged = cap.gather(dst=0)
                if dist.rank == 0:
                    merged.meta.update(made_by="benchmarks/gemm_tune.py", shape=shape, variant=name)
                    safe = name.replace("/", "_").replace(" ", "_").replace("+", "_")
                    ktrace.write_capture(Path(trace_dir) / f"{shape['name']}-{safe}.ktrace", merged, compress=True)
        heap.barrier()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=4, help="world size whose per-rank GEMM shapes to tune (single-GPU mode)")
    ap.add_argument("--schedules", action="store_true", help="time the all-scatter schedules on every rank (under the launcher)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", help="write the rows here (rank 0)")
    ap.add_argument("--trace", help="--schedules: record one traced call of every variant into this folder")
    ap.add_argument("--trace-shape", help="only this shape's variants are traced")
    ap.add_argument("--variants", nargs="*", help="--schedules: only these variant names")
    args = ap.parse_args()
    if args.trace:
        Path(args.trace).mkdir(parents=True, exist_ok=True)
    rows = schedules(args.reps, args.trace, args.trace_shape, args.variants) if args.schedules else single(args.world, args.reps)
    if args.json and int(os.environ.get("RANK", "0")) == 0:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
