"""07 - Trace your own Gluon kernel: lanes per partition, mbarrier hand-offs as arrows.

    python examples/07_trace_a_gluon_kernel.py [--out DIR] [--loader-delay-us US]
    python examples/07_trace_a_gluon_kernel.py --from-capture [FILE]

A warp-specialized kernel (``triton.experimental.gluon``, ``gl.warp_specialize``) runs several
partitions per program; ktrace records each partition as its own *lane* (docs/gluon.md). What it
takes, shown on the Gluon GEMM of ``instrumented_kernels/gluon_gemm`` (a TMA loader, a wgmma
partition, an epilogue, handing off through mbarriers):

1. three trailing parameters, ``ktrace_buf=None, KTRACE: gl.constexpr = 0,
   KTRACE_LANES: gl.constexpr = 1``, passed on to every partition;
2. in each partition ``kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, lane)`` (``import
   ktrace.gluon as kg``), then the probes: ``kg.begin``/``kg.end``, ``kg.mark``, and the traced
   hand-offs ``kg.wait`` (an mbarrier wait), ``kg.arrive``, ``kg.expect`` (TMA);
3. ``ktrace.trace(kernel, lanes=(partition functions...))``: each lane named after its function.

On a GPU (H100/H200) the script runs the GEMM traced, optionally with its loader slowed on purpose
(``--loader-delay-us``), checks it against torch, writes the capture and its Perfetto trace (one
thread per program and partition, an arrow from each release to the wait it ended) and prints
the report's first finding: which partition held the others up. ``--from-capture`` does the same
from a saved capture (default: the slowed-loader capture recorded on an H100, shipped in
``ktrace/data/gluon``). It ends by
printing the commands that open the trace and the report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ktrace
from ktrace.export import write_perfetto

#: The slowed-loader capture recorded on an H100, shipped with ktrace (an install has it).
RECORDED = Path(ktrace.__file__).parent / "data" / "gluon" / "gluon_gemm_slow_loader_1xh100.ktrace"


def record(out: Path, delay_us: float) -> Path:
    """Run the Gluon GEMM traced (M=N=512, K=1024, 8 programs) and save the capture."""
    import torch

    from instrumented_kernels.gluon_gemm import reference as R
    from instrumented_kernels.gluon_gemm.kernel import GluonGemm, GluonGemmConfig

    M, N, K = 512, 512, 1024
    inp = R.generate_input(0, 1, 1, M, N, K)
    gemm = GluonGemm(M, N, K, GluonGemmConfig(loader_delay_ns=int(delay_us * 1000), stage_probes=True), programs=8)
    C = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    gemm(inp["A"], inp["B"], C)                                # untraced: the plain launch
    with ktrace.capture() as cap:                              # traced: each partition its lane
        gemm(inp["A"], inp["B"], C, traced=True)
    R.check(C, R.reference(0, 1, 1, M, N, K))
    return cap.save(out / "gluon_gemm.ktrace")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="ktrace-example-07", help="output folder")
    ap.add_argument("--loader-delay-us", type=float, default=2.0, help="slow the loader: µs before each stage's copies")
    ap.add_argument("--from-capture", nargs="?", const=str(RECORDED), default=None, metavar="FILE",
                    help="analyse a saved capture instead of running (default: the recorded slowed-loader one)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.from_capture:
        src = Path(args.from_capture)
    else:
        try:
            import torch
        except ImportError:
            torch = None
        if torch is None or not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
            print("07_trace_a_gluon_kernel: needs a Hopper GPU (H100/H200); without one, try: --from-capture",
                  file=sys.stderr)
            return 2
        out.mkdir(parents=True, exist_ok=True)
        src = record(out, args.loader_delay_us)

    from ktrace.analysis.report import build_report
    from ktrace.captures import read_capture

    out.mkdir(parents=True, exist_ok=True)
    cap = read_capture(src)
    ln = cap.ranks[min(cap.ranks)].launches[0]
    print(f"{src.name}: {ln.kernel}, lanes {', '.join(ln.meta.get('lanes', []))}")
    trace = write_perfetto(cap, out / "gluon_gemm.pftrace")
    rep = build_report(src)
    print("The report's first finding:")
    print("  " + rep.findings[0].text)
    print("Open the trace (one thread per program and partition, arrows from each release to its wait):")
    print(f"  ktrace open {trace}")
    print(f"and the whole report: ktrace report {src}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
