"""03 - GEMM + all-scatter in four schedules, side by side: how much communication each hides.

    python examples/03_gemm_all_scatter_schedules.py --nproc 4 [--M 4096 --N 4096 --K 8192]

``C = all_gather_columns(A @ B_r)`` (``instrumented_kernels/gemm_all_scatter``) in the four
schedules of the Iris taxonomy:

``bulk``               the GEMM, then a separate scatter kernel: nothing overlaps.
``producer_consumer``  the GEMM signals each tile; a scatter kernel on a second stream waits
                       for tiles and sends them while the GEMM runs.
``fused_sequential``   one kernel: each program computes its tiles and stores them straight
                       into every peer's C.
``fused_ws``           one kernel, workgroup-specialised: GEMM programs signal tiles, a few
                       communication programs send them.

Two measures of the overlap, per schedule:

- from timing (untraced, CUDA events, median of ``--reps``, max over ranks), as the benchmark
  defines it (``instrumented_kernels/gemm_all_scatter/bench.py: overlap``): with
  ``comm = bulk - gemm_only``, ``hidden = (gemm_only + comm - schedule) / comm`` (1: all of the
  bulk schedule's communication hidden, 0: none, < 0: slower than bulk);
- from the trace (one traced call per schedule, ranks aligned): ``ktrace.analysis.overlap``,
  the share of the time spent in communication regions during which compute regions ran on the
  same rank.

The script starts one process per GPU itself (like ``torchrun``), records one capture per
schedule, and ends by printing the commands that open the traces. Needs ``--nproc`` GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import show  # noqa: E402

SCHEDULES = ("bulk", "producer_consumer", "fused_sequential", "fused_ws")


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=4, help="GPUs (ranks), default 4")
    ap.add_argument("--M", type=int, default=4096)
    ap.add_argument("--N", type=int, default=4096, help="columns of C in all (a multiple of --nproc)")
    ap.add_argument("--K", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=30, help="timed repetitions per schedule")
    ap.add_argument("--out", default="ktrace-example-03", help="output folder")
    return ap.parse_args(argv)


def rank_main(args) -> int:
    """One rank: plans, check, timing, one traced capture per schedule (rank 0 writes them)."""
    import torch

    import ktrace
    from instrumented_kernels import harness as H
    from instrumented_kernels.gemm_all_scatter.kernel import AllScatterConfig, GemmAllScatter
    from instrumented_kernels.gemm_all_scatter.reference import check, generate_input, reference

    dist = H.setup()
    M, N, K = args.M, args.N, args.K
    seed = H.fresh_seed(dist)
    inp = generate_input(dist.rank, dist.world_size, seed, M=M, K=K, N=N, device=dist.device)
    A, B = inp["A"], inp["B"]
    heap = H.heap(M * N * 2 + (1 << 20))
    C = heap.zeros(M, N, dtype=torch.bfloat16, name="example C")
    plans = {s: GemmAllScatter(heap, M, N, K, torch.bfloat16, AllScatterConfig(schedule=s), C=C) for s in SCHEDULES}
    want = reference(dist.rank, dist.world_size, seed, M=M, K=K, N=N, device=dist.device)
    for s, plan in plans.items():  # correct first, and compiled (untraced and traced) before timing or tracing
        H.poison(C)
        heap.barrier()
        plan(A, B)
        heap.barrier()
        check(C, want, rank=dist.rank)
        with ktrace.capture():
            plan(A, B)
        heap.barrier()
        heap.check()
    fns = {s: (lambda p=p: p(A, B)) for s, p in plans.items()}
    fns["gemm_only"] = lambda: plans["bulk"].gemm_only(A, B)
    tm = H.time_interleaved(fns, reps=args.reps, warmup=5, dist=dist)
    out = Path(args.out)
    for s, plan in plans.items():
        heap.barrier()
        with ktrace.capture(heap=heap) as cap:
            heap.barrier()
            plan(A, B)
            heap.barrier()
        merged = cap.gather(dst=0)
        if dist.rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            merged.meta.update(made_by="examples/03_gemm_all_scatter_schedules.py", schedule=s, M=M, N=N, K=K)
            ktrace.write_capture(out / f"{s}.ktrace", merged, compress=True)
    heap.check()
    if dist.rank == 0:
        timings = {s: {"ktrace": tm[s].median_us, "gemm_only": tm["gemm_only"].median_us} for s in SCHEDULES}
        (out / "timings.json").write_text(json.dumps({"M": M, "N": N, "K": K, "world_size": dist.world_size,
                                                      "device": H.device_name(), "timings": timings}, indent=1))
    return 0


def main(argv=None) -> int:
    args = _args(argv)
    if "RANK" in os.environ:  # started by the launcher below: one rank
        return rank_main(args)
    from ktrace.run import refusal

    why = refusal(args.nproc)
    if why:
        print(why, file=sys.stderr)
        return 2
    if args.N % args.nproc:
        print(f"--N {args.N} must be a multiple of --nproc {args.nproc}", file=sys.stderr)
        return 2
    from ktrace.launch import LaunchConfig, launch, summarize

    lc = LaunchConfig(command=(sys.executable, str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:])),
                      nprocs=args.nproc, timeout_s=900, log_dir=str(Path(args.out) / "logs"))
    results = launch(lc)
    if not all(r.status == "ok" for r in results):
        print(summarize(results, lc), file=sys.stderr)
        return 1

    import numpy as np

    from instrumented_kernels.gemm_all_scatter.bench import overlap as timed_overlap
    from ktrace import analysis as A
    from ktrace.demo import analyse

    out = Path(args.out)
    info = json.loads((out / "timings.json").read_text())
    hid = timed_overlap(info["timings"])
    rows = []
    traces = {}
    for s in SCHEDULES:
        t = A.prepare(str(out / f"{s}.ktrace"))
        ov = A.overlap(t)
        comm = float(ov["comm_ns"].sum())
        traced = float(ov["hidden_ns"].sum()) / comm if comm else float("nan")
        rows.append((s, hid[s]["total_us"], hid[s]["hidden"], traced, float(ov["exposed_ns"].sum()) / max(len(set(ov["rank"].tolist())), 1)))
        traces[s] = analyse(out / f"{s}.ktrace", out, stem=s).trace
    table = np.array(rows, dtype=[("schedule", "U20"), ("time_us", "f8"), ("hidden_timed", "f8"), ("hidden_traced", "f8"),
                                  ("exposed_per_rank_ns", "f8")])
    print(f"\nGEMM + all-scatter, M={info['M']} N={info['N']} K={info['K']} bf16 on {info['world_size']} x {info['device']}; "
          f"GEMM alone {hid['bulk']['gemm_us']:.1f} µs, bulk communication {hid['bulk']['comm_us']:.1f} µs")
    print("time_us: untraced median; hidden_timed: share of the bulk communication hidden (timing); "
          "hidden_traced: share of communication time under compute (trace)")
    show(table, ["schedule", "time_us", "hidden_timed", "hidden_traced", "exposed_per_rank_ns"], "Schedules side by side")
    print("\nLook at them (each trace has every rank on one clock; compare the communication tracks):")
    for s in SCHEDULES:
        print(f"  ktrace open {traces[s]}")
    print(f"and the reports: {out}/<schedule>.report.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
