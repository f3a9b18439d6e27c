"""05 - Before and after: compare two captures of the same kernel, biggest movers first.

    python examples/05_before_after_diff.py --nproc 4          # record both runs on 4 GPUs of this node
    python examples/05_before_after_diff.py --from-capture     # no GPU: two captures recorded on 4 x H200
    python examples/05_before_after_diff.py --from-capture BEFORE.ktrace AFTER.ktrace

"Before" is the all-to-all with a slow producer (the last rank spins 200 µs before each of its
notifies: ``Fault(delay_rank=W-1, delay_ns=200_000)``); "after" is the same kernel with the
producer fixed (on the GPU: no delay; the bundled pair: a 20 µs delay). ``ktrace.analysis.diff``
(what ``ktrace diff A B`` prints) lines up regions, ranks and workgroups of the two captures,
per launch, and sorts them by how much they moved.
The script ends by printing the commands that show the diff as HTML and open both traces.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record_or_exit, show  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=4, help="GPUs (ranks) to record on (default 4)")
    ap.add_argument("--from-capture", nargs="*", metavar="FILE",
                    help="compare captures instead of recording (none: the two bundled delay captures)")
    ap.add_argument("--out", default="ktrace-example-05", help="output folder")
    args = ap.parse_args(argv)

    from ktrace import analysis as A
    from ktrace.demo import analyse, bundled_capture
    from viewers.report import write_diff_html
    from viewers.text import render_diff_text

    out = Path(args.out)
    if args.from_capture is not None:
        if len(args.from_capture) not in (0, 2):
            ap.error("--from-capture takes no file (the bundled pair) or two: BEFORE AFTER")
        before, after = ([Path(p) for p in args.from_capture] if args.from_capture
                         else [bundled_capture("delay200us"), bundled_capture("delay20us")])
    else:
        from ktrace.run import RunConfig

        W = args.nproc
        if W < 2:
            ap.error("a late producer needs at least two ranks")
        shape = {"max_tokens": 64, "hidden": 512, "num_experts": 16, "topk": 4, "skew": 0.0}
        before = record_or_exit(RunConfig(kernel="all_to_all", nproc=W, out=str(out / "before"), shape=shape,
                                          delay_rank=W - 1, delay_ns=200_000))
        after = record_or_exit(RunConfig(kernel="all_to_all", nproc=W, out=str(out / "after"), shape=shape))

    d = A.build_diff(str(before), str(after))
    print(render_diff_text(d))
    show(d.tables["regions"], ["region", "rank", "a_ns", "b_ns", "delta_ns", "rel_change"], "Regions, biggest movers first")
    out.mkdir(parents=True, exist_ok=True)
    html = write_diff_html(d, out / "diff.html")
    ta = analyse(before, out, stem="before").trace
    tb = analyse(after, out, stem="after").trace
    print(f"\nDiff as HTML: {html}")
    print("The same from the command line, and both traces:")
    print(f"  ktrace diff {shlex.quote(str(before))} {shlex.quote(str(after))} --html {shlex.quote(str(html))}")
    print(f"  ktrace open {shlex.quote(str(ta))}")
    print(f"  ktrace open {shlex.quote(str(tb))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
