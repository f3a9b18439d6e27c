"""01 - Trace your own Triton kernel on one GPU: the decorator, regions, a capture, the trace.

    python examples/01_trace_a_single_gpu_kernel.py [--out DIR] [--n ELEMENTS]

The kernel below is an ``out = a * x + y`` in which program ``p`` handles ``p % 4 + 1`` consecutive
blocks (every block is handled by exactly one program): uneven on purpose, so the trace shows
programs of four lengths. What it takes to trace a kernel:

1. two trailing parameters, ``ktrace_buf=None, KTRACE: tl.constexpr = 0``;
2. ``kt = kl.init(ktrace_buf, KTRACE)`` once per program, then ``s = kl.begin(kt, "name", ...)`` /
   ``kt = kl.end(kt, s)`` around the regions you want timed (they nest);
3. ``@ktrace.trace(events_per_program=N)`` above ``@triton.jit`` (N slots per program: spans
   past it are counted as dropped, never written out of bounds).

Launched outside a capture the kernel is the plain Triton kernel (``KTRACE=0`` compiles every
probe away). Inside ``with ktrace.capture() as cap:`` each launch gets its own event buffer.
The script prints the time per region, writes the capture and its Perfetto trace, and ends by
printing the command that opens the trace. Needs one GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
from ktrace.export import write_perfetto

BLOCK = 1024
MAX_BLOCKS = 4  # blocks of the busiest program


@ktrace.trace(events_per_program=2 + MAX_BLOCKS)
@triton.jit
def uneven_axpy(x, y, out, n, a, BLOCK: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """``out = a * x + y``; every 4 programs cover 10 blocks: program p handles p % 4 + 1 of them."""
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    blocks = pid % 4 + 1
    first = (pid // 4) * 10 + (pid % 4) * (pid % 4 + 1) // 2  # blocks before p's: 10 per 4 programs
    whole = kl.begin(kt, "program", pid, blocks)          # one span per program...
    for b in range(0, blocks):
        s = kl.begin(kt, "block", b)                      # ...holding one span per block
        off = (first + b) * BLOCK + tl.arange(0, BLOCK)
        m = off < n
        v = a * tl.load(x + off, mask=m) + tl.load(y + off, mask=m)
        tl.store(out + off, v, mask=m)
        kt = kl.end(kt, s, arg1=BLOCK * 12)               # arg1: bytes moved by the block
    kt = kl.end(kt, whole)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="ktrace-example-01", help="output folder")
    ap.add_argument("--n", type=int, default=1 << 22, help="elements")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    if not torch.cuda.is_available():
        print("01_trace_a_single_gpu_kernel: needs a GPU; without one, try: ktrace demo", file=sys.stderr)
        return 2
    n = args.n
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    grid = (4 * triton.cdiv(triton.cdiv(n, BLOCK), 10),)  # 10 blocks per 4 programs

    uneven_axpy[grid](x, y, out, n, 2.0, BLOCK=BLOCK)      # untraced: the plain launch
    torch.testing.assert_close(out, 2.0 * x + y)
    with ktrace.capture() as cap:                          # traced: every launch recorded
        for _ in range(3):
            uneven_axpy[grid](x, y, out, n, 2.0, BLOCK=BLOCK)
    torch.testing.assert_close(out, 2.0 * x + y)

    ev = cap.events()                                      # numpy table, one row per event (raw ticks)
    names = cap.region_names()
    hz = cap.to_capture().ranks[cap.rank].device["tick_hz"]  # timer ticks per second
    print(f"{ev.size} events from {len(cap.launches)} launches of {grid[0]} programs")
    for rid in np.unique(ev["region"]):
        sel = ev[ev["region"] == rid]
        dur_ns = (sel["end"] - sel["start"]) * 1e9 / hz
        print(f"  {names.get(int(rid), rid):>8}: {sel.size:6d} spans, median {np.median(dur_ns):8.0f} ns, "
              f"max {dur_ns.max():8.0f} ns")

    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    path = cap.save(outdir / "uneven_axpy.ktrace")
    trace = write_perfetto(cap.to_capture(), outdir / "uneven_axpy.pftrace")
    print(f"\nwrote {path} and {trace}")
    print("Look at it (one track per program; the four program lengths are plain to see):")
    print(f"  ktrace open {trace}")
    print(f"  ktrace info {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
