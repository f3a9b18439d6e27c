"""What tracing costs a CUDA graph: traced replays against untraced replays of the same step.

    python benchmarks/graphs.py [--reps 200] [--batch 20] [--json OUT.json]

Each case captures the same step into three graphs: ``untraced`` (captured with no capture open:
the user's graph, node for node), an identical ``untraced twin`` (the noise floor: its ratio to
``untraced`` is what side-by-side timing can resolve) and ``traced`` (captured inside
``ktrace.capture()``: the traced kernel writes its stage and ktrace's commit kernel, one more
node, copies it into the replay ring). The graphs are replayed ``--batch`` times between two CUDA
events, the GPU held first so the host has queued the batch (device time, not launch rate), the
three in a fresh random order every repetition (``instrumented_kernels.harness.time_interleaved``);
figures are medians over ``--reps`` repetitions per replay, ratios paired per repetition.

Cases (one GPU):

    copy 1 Mi      a 1 Mi-element fp32 copy, one span per 1024-element program (1,024 programs,
                   a 131 KB stage): a short step, where the commit's own launch shows most
    copy 64 Mi     the design brief's worst case: 64 Mi elements, 65,536 programs (an 8.6 MB
                   stage copied at every replay; a ring of 4 replays)
    tile a2a       examples/08's tile all-to-all at one rank (programs of one GPU exchanging
                   tiles through the symmetric heap, the round read from device memory)

It prints the device, a table (ready for BENCHMARKS.md) and, with ``--json``, every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("KTRACE_KERNEL_HEAP_MB", "64")  # (read when the harness is imported)


def _graph(step):
    import torch

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    return g


def _cases(only: set):
    import torch

    from tests import probe_kernels as pk

    cases = []
    for label, n, ring in (("copy 1 Mi", 1 << 20, 64), ("copy 64 Mi", 1 << 26, 4)):
        if only and label not in only:
            continue
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        grid = (n // 1024,)

        def step(x=x, y=y, n=n, grid=grid):
            pk.copy_kernel[grid](x, y, n, BLOCK=1024)

        cases.append((label, step, ring))
    if not only or "tile a2a" in only:
        from tests.gpu.graphs_gpu import example08

        ex = example08()
        ex._one_rank_env()
        from instrumented_kernels import harness as H

        H.setup()
        plan = ex.TileExchange(H.heap(1 << 22), chunks=4, tiles=8)
        cases.append(("tile a2a", plan.step, 64))
    return cases


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=20, help="replays between two events")
    ap.add_argument("--cases", default="", help="comma-separated labels (default: all)")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args(argv)

    import torch

    import ktrace
    from instrumented_kernels import harness as H

    if not torch.cuda.is_available():
        print("graphs benchmark: needs a GPU", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name()
    only = {c.strip() for c in args.cases.split(",") if c.strip()}
    rows = []
    for label, step, ring in _cases(only):
        step()  # the untraced binaries loaded, then the traced ones: before any graph capture
        with ktrace.capture():
            step()
        torch.cuda.synchronize()
        graphs = {"untraced": _graph(step), "untraced twin": _graph(step)}
        with ktrace.capture(graph_ring=ring) as cap:
            graphs["traced"] = _graph(step)
            t = H.time_interleaved({k: g.replay for k, g in graphs.items()}, reps=args.reps, warmup=args.warmup,
                                   batch=args.batch, hold_cycles=20_000_000)
        s = cap.graph_summaries()
        want = (args.warmup + args.reps) * args.batch
        if not s or s[0]["replays"] != want:  # every replay of the traced graph committed on the device
            print(f"{label}: the traced graph counted {s[0]['replays'] if s else 0} replays, not {want}", file=sys.stderr)
            return 1
        r_on = H.paired_ratio(t, "traced", "untraced")
        r_twin = H.paired_ratio(t, "untraced twin", "untraced")
        rows.append({"case": label, "device": device, "reps": args.reps, "batch": args.batch,
                     **{f"{k} median_us": v.median_us for k, v in t.items()},
                     "traced/untraced": r_on, "twin/untraced": r_twin,
                     "traced added us": t["traced"].median_us - t["untraced"].median_us,
                     "replays counted": s[0]["replays"] if s else 0, "ring": ring})
        print(f"{label}: untraced {t['untraced'].median_us:.2f} µs, twin {t['untraced twin'].median_us:.2f} µs, "
              f"traced {t['traced'].median_us:.2f} µs per replay; traced/untraced {r_on[0]:.4f} "
              f"(p10 {r_on[1]:.4f}, p90 {r_on[2]:.4f}); twin/untraced {r_twin[0]:.4f}", flush=True)
    print(f"\n{device}, {args.reps} repetitions of {args.batch} replays each, interleaved (per replay, medians):\n")
    print("| step | untraced µs | untraced twin µs | traced µs | traced / untraced (p10-p90) | twin / untraced |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        a, b = r["traced/untraced"], r["twin/untraced"]
        print(f"| {r['case']} | {r['untraced median_us']:.2f} | {r['untraced twin median_us']:.2f} | {r['traced median_us']:.2f} "
              f"| {a[0]:.4f} ({a[1]:.4f}-{a[2]:.4f}) | {b[0]:.4f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
