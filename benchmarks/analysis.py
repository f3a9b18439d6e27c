"""How long the full analysis report takes on a large capture (target: 10 M events in <= 10 s).

The capture is CONSTRUCTED: the all-to-all-like kernel of ``ktrace.analysis.scenario`` (one rank's
notifies late, a few overloaded workgroups) replicated as many launches as it takes to reach the
event count; or, with ``--capture FILE``, a real capture's aligned events replicated the same
way. Two timings are printed: the whole report from the aligned event table (``build_report``:
every analysis and the findings), and, with ``--from-capture``, the same starting from a
``Capture`` of encoded event buffers (decoding and clock alignment included).

    python benchmarks/analysis.py                    # 10 M events
    python benchmarks/analysis.py --events 2e6 --repeat 3
    python benchmarks/analysis.py --from-capture     # decode + align + analyse
    python benchmarks/analysis.py --from-capture --only-capture   # a process that starts from the capture

Every run's time is listed (a process's first run also pays for growing its memory), with the
process CPU time (two threads run at once) and the peak RSS.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from ktrace.analysis import ReportConfig, Trace, build_report, prepare  # noqa: E402
from ktrace.analysis import scenario as S  # noqa: E402


def _table(args) -> tuple[np.ndarray, dict, str]:
    if args.capture:
        tr = prepare(args.capture)
        base, regions, what = tr.events, tr.regions, f"real capture {args.capture}"
    else:
        sc = S.Scenario(world=args.world, programs=args.programs, iters=args.iters, late_rank=1, late_ns=20_000,
                        work={(0, 1): 3, (2, 3): 2})
        base, regions, what = S.build(sc), S.REGIONS, f"CONSTRUCTED scenario {args.world} ranks x {args.programs} programs x {args.iters} tiles"
    copies = max(1, int(round(args.events / max(base.size, 1))))
    return S.replicate(base, copies), regions, f"{what}, {copies} launches"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=float, default=10e6, help="events to analyse (default 10 M)")
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--programs", type=int, default=64)
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--capture", help="replicate this real capture's events instead of the constructed kernel")
    p.add_argument("--repeat", type=int, default=1, help="timed repetitions (the median is reported)")
    p.add_argument("--from-capture", action="store_true", help="also time decode + align + analyse from event buffers")
    p.add_argument("--only-capture", action="store_true",
                   help="with --from-capture: skip the aligned-table runs (a process that starts from the capture)")
    args = p.parse_args()

    table, regions, what = _table(args)
    print(f"{what}: {table.size:,} events; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"numpy {np.__version__}")
    times, cpus = [], []
    rep = None
    for _ in range(0 if args.only_capture else args.repeat):
        rep = None  # the previous run's tables are freed before the next run
        t0, c0 = time.perf_counter(), time.process_time()
        tr = Trace(events=table, regions=regions)
        rep = build_report(tr, ReportConfig())
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        del tr
    if times:
        print(f"report from the aligned table: median {np.median(times):.2f} s over {len(times)} run(s) "
              f"[{', '.join(f'{t:.2f}' for t in times)}] "
              f"({table.size / np.median(times) / 1e6:.2f} M events/s; process CPU {np.median(cpus):.2f} s, peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB); {len(rep.findings)} findings")
        for f in rep.findings[:3]:
            print("   ", f.text[:160])
    if args.from_capture:
        n_events = table.size
        cap = S.to_capture(table, regions=regions)
        del table  # only the capture's event buffers stay, as in `ktrace report CAPTURE`
        times, cpus, split = [], [], []
        for _ in range(args.repeat):
            rep = None
            for rc in cap.ranks.values():
                for ln in rc.launches:
                    ln._decoded.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            trace = prepare(cap)
            t1 = time.perf_counter()
            rep = build_report(trace, ReportConfig())
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            split.append(t1 - t0)
            del trace
        print(f"report from event buffers (decode + align + analyse): median {np.median(times):.2f} s "
              f"[{', '.join(f'{t:.2f}' for t in times)}] "
              f"({n_events / np.median(times) / 1e6:.2f} M events/s; process CPU {np.median(cpus):.2f} s; of which "
              f"decode + align + sort check {np.median(split):.2f} s); peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
