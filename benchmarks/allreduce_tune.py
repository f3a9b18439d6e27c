"""All-reduce launch configurations and probe densities against NCCL, side by side on every rank.

    python -m ktrace.testing.launch -n 4 -- python benchmarks/allreduce_tune.py [--json out.json]

For each message size: every (method, warps, block) variant of :data:`VARIANTS` untraced, and
for the small sizes the traced launch at each probe density, all timed in one interleaved run
with NCCL ``all_reduce`` (``harness.time_interleaved``: batches of 20 calls, a fresh random order each repetition,
GPUs lined up before each batch, maximum over ranks, medians). Every variant's output is checked
against the reference first (fresh random bf16 inputs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: (method, num_warps, block or 0 for the default) timed at every size.
VARIANTS = (
    ("one_shot", 8, 0),
    ("one_shot_push", 8, 0),
    ("one_shot_push", 16, 0),
    ("one_shot_push", 4, 0),
    ("one_shot_push", 8, 1024),
    ("one_shot_push", 16, 8192),
    ("two_shot", 8, 0),
    ("two_shot", 16, 0),
    ("two_shot", 8, 1024),
)
SIZES = (4096, 65536, 262144, 1048576)
#: sizes whose traced launches are timed at each density, with this method
TRACED_SIZES = (4096, 16384, 65536)
TRACED_METHOD = "one_shot_push"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--sizes", type=int, nargs="*", help=f"message bytes (default {SIZES})")
    ap.add_argument("--variants", nargs="*", help="METHOD:WARPS:BLOCK each (default: VARIANTS)")
    ap.add_argument("--no-traced", action="store_true", help="skip the traced densities")
    ap.add_argument("--traced-sizes", type=int, nargs="*", help=f"sizes whose traced densities are timed (default {TRACED_SIZES})")
    ap.add_argument("--traced-methods", nargs="*", help=f"methods traced (default {TRACED_METHOD})")
    ap.add_argument("--one-slot", action="store_true",
                    help="also time each traced method with 1 slot per program: the probes run but every record is "
                         "counted dropped instead of stored (separates the cost of the record stores from the rest)")
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch
    import torch.distributed as tdist

    from instrumented_kernels import harness as H
    from instrumented_kernels.all_reduce.kernel import PROBES, AllReduce, AllReduceConfig
    from instrumented_kernels.all_reduce.reference import check, generate_input

    dist = H.setup()
    sizes = tuple(args.sizes or SIZES)
    traced_sizes = () if args.no_traced else tuple(args.traced_sizes or TRACED_SIZES)
    traced_methods = tuple(args.traced_methods or (TRACED_METHOD,))
    variants_all = tuple((m, int(w), int(b)) for m, w, b in (v.split(":") for v in args.variants)) if args.variants else VARIANTS
    rows = []
    for nbytes in sorted(set(sizes) | set(traced_sizes)):
        n = nbytes // 2
        seed = H.fresh_seed(dist)
        x = generate_input(dist.rank, dist.world_size, seed, n, "bfloat16", dist.device)
        nccl = x.clone()
        fns = {"nccl": lambda: tdist.all_reduce(nccl)}
        outs = []
        variants = variants_all if nbytes in sizes else ()
        for method, warps, block in variants:
            cfg = AllReduceConfig(n=n, method=method, num_warps=warps, block=block)
            plan = AllReduce(H.heap(AllReduce.heap_bytes(cfg, dist.world_size)), cfg)
            out = H.poison(torch.empty_like(x))
            plan(x, out)
            torch.cuda.synchronize()
            plan.heap.check()
            check(out, dist.world_size, seed, n, "bfloat16", rank=dist.rank)
            outs.append(out)
            fns[f"{method} w{plan.num_warps} b{plan.block}"] = (lambda p=plan, o=out: p(x, o))
        for tm_name in traced_methods if nbytes in traced_sizes else ():
            for probes in PROBES:
                cfg = AllReduceConfig(n=n, method=tm_name, probes=probes)
                plan = AllReduce(H.heap(AllReduce.heap_bytes(cfg, dist.world_size)), cfg)
                out = H.poison(torch.empty_like(x))
                buf = H.trace_buffer(plan.nprog, plan.slots(), dist.device)
                plan(x, out, ktrace_buf=buf, ktrace_slots=plan.slots())
                torch.cuda.synchronize()
                plan.heap.check()
                check(out, dist.world_size, seed, n, "bfloat16", rank=dist.rank)
                outs.append(out)
                fns[f"{tm_name} traced:{probes}"] = (lambda p=plan, o=out, b=buf, k=plan.slots(): p(x, o, ktrace_buf=b, ktrace_slots=k))
                if f"{tm_name} untraced" not in fns:
                    fns[f"{tm_name} untraced"] = (lambda p=plan, o=out: p(x, o))
                if args.one_slot and probes == "lean":
                    buf1 = H.trace_buffer(plan.nprog, 1, dist.device)
                    fns[f"{tm_name} traced:lean-1slot"] = (lambda p=plan, o=out, b=buf1: p(x, o, ktrace_buf=b, ktrace_slots=1))
        t = H.time_interleaved(fns, reps=args.reps, warmup=10, dist=dist, batch=20, hold_cycles=5_000_000)
        base = t["nccl"].median_us
        if dist.rank == 0:
            print(f"{nbytes} B: NCCL {base:.2f} us", flush=True)
        for name, tm in t.items():
            row = {"bytes": nbytes, "variant": name, "us": tm.median_us, "p10": tm.p10_us, "p90": tm.p90_us, "nccl_us": base}
            extra = ""
            if "traced:" in name:
                med, lo, hi = H.paired_ratio(t, name, name.split(" traced:")[0] + " untraced")
                row["traced_ratio"] = med
                extra = f"  traced/untraced {med:.4f} ({lo:.4f}-{hi:.4f})"
            rows.append(row)
            if dist.rank == 0:
                print(f"  {name:34s} {tm.median_us:8.2f} us ({tm.p10_us:.2f}-{tm.p90_us:.2f})  vs NCCL {base / tm.median_us:.3f}{extra}", flush=True)
    if args.json and dist.rank == 0:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
