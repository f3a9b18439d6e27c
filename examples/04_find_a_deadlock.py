"""04 - Find a deadlock: one rank skips a notify, its peer's wait gives up, the report says who and why.

    python examples/04_find_a_deadlock.py --nproc 4           # inject it on 4 GPUs of this node
    python examples/04_find_a_deadlock.py --from-capture      # no GPU: the same fault, recorded on 4 x H200

Every wait of the instrumented kernels is bounded (``ks.wait(..., timeout_ns=...)``): a wait that
never sees its flag gives up, records a TIMEOUT event and reports itself to the host, so a lost
signal becomes a finished, traced run instead of a hung job. Here the last rank skips its count
message to rank 0 in the all-to-all's dispatch (``Fault(skip_rank=W-1, skip_notify=M*W)``: the
kernel's README numbers its notifies) and rank 0's waits give up after 200 ms.

The hang analyses name it: ``timeouts`` (each wait that gave up: on which flag, from which peer,
for which value, how long), ``missing_notifies`` (the producer that never sent it, and whether it
was itself stuck) and ``wait_for_cycles`` (a true deadlock: ranks waiting on each other in a ring).
The script ends by printing the commands that open the trace and the report.
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
                    help="analyse a capture instead of recording (no file: the bundled skipped-notify capture)")
    ap.add_argument("--out", default="ktrace-example-04", help="output folder")
    args = ap.parse_args(argv)

    from ktrace import analysis as A
    from ktrace.demo import analyse, bundled_capture, next_steps

    if args.from_capture:
        src = bundled_capture("skip") if args.from_capture == "bundled" else Path(args.from_capture)
    else:
        from ktrace.run import RunConfig

        W, M = args.nproc, 64
        if W < 2:
            ap.error("a lost notify needs at least two ranks")
        src = record_or_exit(RunConfig(kernel="all_to_all", nproc=W, out=args.out, steps=1,
                                       shape={"max_tokens": M, "hidden": 512, "num_experts": 16, "topk": 4, "skew": 0.0},
                                       skip_rank=W - 1, skip_notify=M * W, timeout_ms=200.0))

    t = A.prepare(str(src))
    to = A.timeouts(t)
    show(to, ["rank", "launch", "program", "peer", "expected", "value", "waited_ns", "notifies_sent", "status"],
         "Waits that gave up")
    missing = A.missing_notifies(t, to)
    show(missing, ["producer", "consumer", "launch", "expected", "n_waiters", "last_value_sent", "producer_stuck"],
         "Notifies that never came")
    cycles = A.wait_for_cycles(missing)
    print("\nWait-for cycles (ranks waiting on each other in a ring):", cycles or "none")

    o = analyse(src, args.out)
    hangs = [f for f in o.report.findings if f.kind == "hang"]
    print(f"\nThe report's verdict ({len(hangs)} hang finding(s)):")
    for f in hangs[:3]:
        print(f"  !! {f.text}")
    if not hangs:
        print("  no hang in this capture")
    print(next_steps(o))
    return 0


if __name__ == "__main__":
    sys.exit(main())
