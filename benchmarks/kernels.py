"""Every instrumented kernel against its torch/NCCL baseline, on the same GPUs, in one run.

Run once per rank (``python -m ktrace.testing.launch -n 4 -- python benchmarks/kernels.py``).
Cases come from each kernel folder's ``bench.py`` (``cases(world_size) -> list[BenchCase]``,
see ``instrumented_kernels.harness``); a folder without one is skipped. For each case: build it
(fresh random inputs), run every variant once, check the outputs against the reference, then
time the variants side by side: interleaved batches of ``batch`` calls between two CUDA events,
in a fresh seeded random order every repetition, each batch queued while the GPU sleeps (so the figure is
device time per call, not the host's launch rate) and started right after a one-element NCCL
all-reduce that lines the GPUs up (so no variant inherits the rank skew another left behind);
a repetition's figure is the maximum over ranks, the table shows the median over ``reps``
repetitions after ``warmup``.

Columns: ``ktrace`` (our kernel, untraced), ``baseline`` (torch/NCCL: ``torch.distributed.all_reduce``,
``all_to_all_single``, ``all_gather_into_tensor`` + ``torch.matmul``, ``torch.matmul`` +
``reduce_scatter_tensor``, ``torch.matmul`` + ``all_gather_into_tensor``; ``torch.matmul`` for the
one-GPU Gluon GEMM), ``ktrace/baseline`` = our kernel's time over the baseline's (below 1: ours
is faster) and ``traced/untraced`` = our kernel traced at its default probe density / untraced:
each the median of the per-repetition ratios (both ran in every repetition, side by side), with
their 10th-90th percentile spread; ``speedup`` = baseline / ktrace of the medians.

    python -m ktrace.testing.launch -n 4 -- python benchmarks/kernels.py [--kernels all_reduce] [--json out.json]
    python -m ktrace.testing.launch -n 4 -- python benchmarks/kernels.py --exact --cases one_shot_push-65536B gpumode
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from instrumented_kernels import KERNELS, folder_modules  # noqa: E402
from instrumented_kernels import harness as H  # noqa: E402

log = logging.getLogger("ktrace")


def discover(world_size: int, only: list[str] | None = None) -> list[H.BenchCase]:
    """Every case of every kernel folder with a ``bench.py`` (in ``KERNELS`` order; see
    ``instrumented_kernels.folder_modules``, which ``ktrace run`` uses for the folders' ``run.py``)."""
    out = []
    for name, mod in folder_modules("bench", only):
        cases = mod.cases(world_size)
        for c in cases:
            if not isinstance(c, H.BenchCase):
                raise TypeError(f"instrumented_kernels.{name}.bench.cases returned {type(c).__name__}, not BenchCase")
        out.extend(cases)
    return out


#: GPU cycles the stream sleeps before each timed batch (about 2-3 ms at H100/H200 clocks), so
#: that the host has queued the batch before the GPU starts it: figures are device times.
HOLD_CYCLES = 5_000_000


def run_case(case: H.BenchCase, dist: H.Dist, reps: int | None, warmup: int | None, batch: int | None = None) -> dict:
    """Build, check and time one case; returns its row (collective)."""
    row = {"kernel": case.kernel, "case": case.name, "shape": case.shape}
    t0 = time.perf_counter()
    built = case.build(dist)
    try:
        for fn in built.variants.values():
            fn()
        try:
            built.check()
            err = None
        except (AssertionError, RuntimeError) as e:  # MismatchError, WaitTimeoutError
            err = f"rank {dist.rank}: {type(e).__name__}: {str(e).splitlines()[0]}"
        errs = [e for e in _gather(err, dist) if e]
        if errs:
            raise H.MismatchError("; ".join(errs))
        row["checked"] = True
        timings = H.time_interleaved(
            built.variants, reps or case.reps, case.warmup if warmup is None else warmup, dist=dist,
            batch=case.batch if batch is None else batch, hold_cycles=HOLD_CYCLES,
        )
        row["us"] = {k: round(v.median_us, 3) for k, v in timings.items()}
        row["p10_us"] = {k: round(v.p10_us, 3) for k, v in timings.items()}
        row["p90_us"] = {k: round(v.p90_us, 3) for k, v in timings.items()}
        us = row["us"]
        base = baseline_of(us)
        if "ktrace" in us and base:
            row["baseline_variant"] = base
            row["speedup"] = round(us[base] / us["ktrace"], 4)
            med, p10, p90 = H.paired_ratio(timings, "ktrace", base)
            row["vs_baseline"], row["vs_baseline_p10"], row["vs_baseline_p90"] = round(med, 4), round(p10, 4), round(p90, 4)
        if "ktrace" in us and "traced" in us:
            # paired: the ratio of each repetition (both ran in it, next to each other), then
            # its median and spread; the ratio of the two medians is kept for comparison
            med, p10, p90 = H.paired_ratio(timings, "traced", "ktrace")
            row["traced_ratio"] = round(med, 4)
            row["traced_ratio_p10"] = round(p10, 4)
            row["traced_ratio_p90"] = round(p90, 4)
            row["traced_ratio_of_medians"] = round(us["traced"] / us["ktrace"], 4)
        if "ktrace" in us and "traced_ring" in us:  # ring mode (the flight recorder), paired the same way
            med, p10, p90 = H.paired_ratio(timings, "traced_ring", "ktrace")
            row["ring_ratio"], row["ring_ratio_p10"], row["ring_ratio_p90"] = round(med, 4), round(p10, 4), round(p90, 4)
        row["bytes"] = built.bytes
        row.update(built.extra)
    finally:
        if built.close is not None:
            built.close()
    row["wall_s"] = round(time.perf_counter() - t0, 2)
    return row


def baseline_of(variants) -> str | None:
    """The variant a case compares ours with: ``baseline`` (torch/NCCL), else ``torch`` (the
    one-GPU GEMM's ``torch.matmul``), else None."""
    return next((k for k in ("baseline", "torch") if k in variants), None)


def _gather(obj, dist: H.Dist) -> list:
    if dist.world_size == 1:
        return [obj]
    import torch.distributed as tdist

    out = [None] * dist.world_size
    tdist.all_gather_object(out, obj)
    return out


def table(rows: list[dict], device: str, world: int) -> str:
    lines = [
        f"# {device} x {world} ranks",
        "",
        "| kernel | case | ktrace µs (p10-p90) | baseline µs | ktrace/baseline (p10-p90) | speedup | traced µs | "
        "traced/untraced (p10-p90) | ring/untraced (p10-p90) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['kernel']} | {r['case']} | FAILED: {r['error']} | | | | | | |")
            continue
        us = r["us"]
        f = lambda k: f"{us[k]:.1f}" if k in us else "-"  # noqa: E731
        spread = ""
        if "ktrace" in us:
            spread = f" ({r['p10_us']['ktrace']:.1f}-{r['p90_us']['ktrace']:.1f})"
        ratio = r.get("traced_ratio", "-")
        if "traced_ratio_p10" in r:
            ratio = f"{ratio} ({r['traced_ratio_p10']}-{r['traced_ratio_p90']})"
        ring = f"{r['ring_ratio']} ({r['ring_ratio_p10']}-{r['ring_ratio_p90']})" if "ring_ratio" in r else "-"
        vs = f"{r['vs_baseline']} ({r['vs_baseline_p10']}-{r['vs_baseline_p90']})" if "vs_baseline" in r else "-"
        lines.append(
            f"| {r['kernel']} | {r['case']} | {f('ktrace')}{spread} | {f(r.get('baseline_variant', 'baseline'))} | {vs} | "
            f"{r.get('speedup', '-')} | {f('traced')} | {ratio} | {ring} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", nargs="*", default=None, help=f"kernel folders to run (default: all of {KERNELS})")
    ap.add_argument("--cases", nargs="*", default=None, help="only cases whose name contains one of these")
    ap.add_argument("--exact", action="store_true", help="--cases names whole case names, not parts of them")
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions (default: each case's)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up rounds (default: each case's)")
    ap.add_argument("--batch", type=int, default=None, help="calls per timed batch (default: each case's)")
    ap.add_argument("--json", default=None, help="write the rows (and device, world size) here (rank 0)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    dist = H.setup()
    cases = discover(dist.world_size, args.kernels)
    if args.cases:
        cases = [c for c in cases if any((s == c.name) if args.exact else (s in c.name) for s in args.cases)]
    if not cases:
        raise SystemExit("no benchmark cases found (is a kernel folder missing its bench.py?)")
    device = H.device_name()
    rows, failed = [], 0
    for case in cases:
        try:
            row = run_case(case, dist, args.reps, args.warmup, args.batch)
        except H.MismatchError as e:
            # every rank saw the same verdict (gathered), so all carry on to the next case
            row = {"kernel": case.kernel, "case": case.name, "shape": case.shape, "error": str(e).splitlines()[0]}
            failed += 1
        if dist.rank == 0:
            print(json.dumps(row), flush=True)
        rows.append(row)
    if dist.rank == 0:
        print(table(rows, device, dist.world_size), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"device": device, "world_size": dist.world_size, "rows": rows}, indent=1))
    import torch.distributed as tdist

    tdist.barrier()
    tdist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
