"""02 - Who waited on whom in the MoE all-to-all, and why: the stall and load analyses.

    python examples/02_all_to_all_stalls.py --nproc 4          # record it on 4 GPUs of this node
    python examples/02_all_to_all_stalls.py --from-capture     # no GPU: a real 4 x H200 capture shipped with ktrace
    python examples/02_all_to_all_stalls.py --from-capture my.ktrace

The all-to-all here routes skewed traffic (rank r holds round(M (1 - 0.6)^r) of M tokens): the
ranks with many tokens send and receive most rows, their workgroups are overloaded, and the
others spin in waits until the rows arrive. The script runs the analyses one by one, as
functions returning tables (the building blocks of ``ktrace report``):

- ``waits``: one row per wait, paired with the notify that released it; its ``wait_ns`` splits
  into ``producer_late_ns`` (the notify came late) and ``signal_latency_ns`` (the signal's flight);
- ``stall_totals``: the waiting summed per rank;
- ``stragglers``: the producers that made others wait, and what they were doing before;
- ``workgroups`` / ``imbalance``: busy and waiting time per workgroup, outliers and their cause.

It ends by printing the commands that open the trace and the report it wrote.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record_or_exit, show  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=4, help="GPUs (ranks) to record on (default 4)")
    ap.add_argument("--from-capture", nargs="?", const="bundled", metavar="FILE",
                    help="analyse a capture instead of recording (no file: the bundled skewed all-to-all)")
    ap.add_argument("--out", default="ktrace-example-02", help="output folder")
    args = ap.parse_args(argv)

    from ktrace import analysis as A
    from ktrace.demo import analyse, bundled_capture, next_steps

    if args.from_capture:
        src = bundled_capture("skewed") if args.from_capture == "bundled" else Path(args.from_capture)
    else:
        from ktrace.run import RunConfig

        src = record_or_exit(RunConfig(kernel="all_to_all", nproc=args.nproc, out=args.out))

    t = A.prepare(str(src))                     # align the ranks' clocks: one time axis
    w = A.waits(t)
    show(A.stall_totals(t, "rank", w), ["rank", "n_waits", "wait_ns", "producer_late_ns", "signal_latency_ns", "wait_frac"],
         "Wait time per rank")
    by_rank, _ = A.stragglers(t, w)
    show(by_rank, ["rank", "n_notifies", "n_late", "cost_ns", "held_median_ns", "held_excess_ns", "before_region", "before_ns"],
         "Producers, most costly first (who made the others wait)")
    wg = A.workgroups(t)
    over = wg[wg["outlier"]]
    show(over[(-over["busy_ns"]).argsort(kind="stable")], ["rank", "launch", "program", "sm", "busy_ns", "work_ns", "held_ns", "wait_ns", "work_items", "cause"],
         "Outlier workgroups, busiest first")
    show(A.imbalance(t, wg), ["rank", "launch", "max_over_mean", "cv", "tail_ns", "tail_program", "cause"],
         "Imbalance per rank and launch (rank -1: all ranks)")

    o = analyse(src, args.out)                  # the trace, the HTML and JSON report
    print("\nIn plain words, the costliest findings:")
    for f in o.report.findings[:3]:
        print(f"  - {f.text}")
    print(next_steps(o))
    return 0


if __name__ == "__main__":
    sys.exit(main())
