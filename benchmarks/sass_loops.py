"""The tile pipeline's copy loops as ptxas schedules them, per probe variant (sm_90, no GPU needed).

Compiles ``handoff_kernels.pipeline`` for each variant of the hand-off suite's pipeline (untraced,
and traced as ``@ktrace.trace`` prepares it), disassembles it with the ``nvdisasm`` that ships with
Triton, and prints the instruction count of each innermost copy loop (the loops with 16 global
loads: the producer's put and the consumer's copy, unrolled four times; in code order, which in
these builds is the put, then the copy that follows the consumer's spin loop). With ``--maxnreg N`` every
variant is compiled under that register bound, as ``probe_overhead.py --maxnreg`` launches them::

    python3 benchmarks/sass_loops.py            # the consumer's spans alone: 84 against 74
    python3 benchmarks/sass_loops.py --maxnreg 255
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIG = {"src": "*fp32", "dst": "*fp32", "out": "*fp32", "flags": "*i32", "tiles": "i32", "tile_elems": "i32", "epoch": "i32",
       "rank": "i32", "peer": "i32", "heap_bases": "*i64", "ktrace_buf": "*i64"}
BASE = {"BLOCK": 512, "BACKOFF": 0, "CHECK": 1, "PAIR": 1, "WAITS": False, "NOTIFIES": False, "SPANS": 0, "SIDE": 3, "TIMERS": False}
VARIANTS = {
    "untraced": ({}, False),
    "on, no probe": ({}, True),
    "waits": ({"WAITS": True}, True),
    "notifies": ({"NOTIFIES": True}, True),
    "signals": ({"WAITS": True, "NOTIFIES": True}, True),
    "spans": ({"SPANS": 1}, True),
    "spans, producer only": ({"SPANS": 1, "SIDE": 1}, True),
    "spans, consumer only": ({"SPANS": 1, "SIDE": 2}, True),
    "spans' timer reads only": ({"SPANS": 1, "TIMERS": True}, True),
    "all": ({"WAITS": True, "NOTIFIES": True, "SPANS": 1}, True),
}


def sass(fn, consts: dict, **options) -> str:
    from ktrace.testing.compile import compile_sass

    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 9, 10)}  # (the pointers, as a launch specialises them)
    try:
        return compile_sass(fn, SIG, consts, attrs, num_warps=4, **options)
    except FileNotFoundError as e:
        raise SystemExit(f"sass_loops: {e}") from None


def copy_loops(text: str, loads: int = 16) -> list[int]:
    """Instruction counts of the loops (a branch back to a label) holding ``loads`` global loads."""
    ins: list[str] = []
    label: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^\.L_x_(\d+):", line.strip())
        if m:
            label[m.group(1)] = len(ins)
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(.*?);", line)
        if m:
            ins.append(m.group(1).strip())
    out = []
    for i, t in enumerate(ins):
        m = re.search(r"BRA .*\.L_x_(\d+)", t)
        if m and label.get(m.group(1), len(ins)) <= i:
            body = ins[label[m.group(1)] : i + 1]
            if sum("LDG" in x for x in body) == loads:
                out.append(len(body))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--maxnreg", type=int, default=None, help="compile every variant under this register bound")
    a = ap.parse_args(argv)
    import handoff_kernels as hk

    import ktrace

    prepared = ktrace.trace(hk.pipeline).jit_fn
    opts = {"maxnreg": a.maxnreg} if a.maxnreg else {}
    print(f"sm_90, num_warps 4, BLOCK 512{f', maxnreg {a.maxnreg}' if a.maxnreg else ''}: instructions per copy loop, "
          "in code order (here the producer's put, then the consumer's copy, which follows its wait's spin loop)")
    for name, (sw, traced) in VARIANTS.items():
        consts = {**BASE, **sw, "KTRACE": 64 if traced else 0}
        print(f"  {name:<26} {copy_loops(sass(prepared if traced else hk.pipeline, consts, **opts))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
