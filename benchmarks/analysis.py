"""How long the full analysis report takes on a large capture (target: 10 M events in <= 10 s).

The capture is CONSTRUCTED: the all-to-all-like kernel of ``ktrace.analysis.scenario`` (one rank's
notifies late, a few overloaded workgroups) replicated as many launches as it takes to reach the
event count; or, with ``--capture FILE``, a real capture's aligned events replicated the same
way (each copy keeps the capture's launches apart: a dispatch and a combine stay two launches). Two timings are printed: the whole report from the aligned event table (``build_report``:
every analysis and the findings), and, with ``--from-capture``, the same starting from a
``Capture`` of encoded event buffers (decoding and clock alignment included).

    python benchmarks/analysis.py                    # 10 M events
    python benchmarks/analysis.py --events 2e6 --repeat 3
    python benchmarks/analysis.py --from-capture     # decode + align + analyse
    python benchmarks/analysis.py --from-capture --only-capture   # a process that starts from the capture
    python benchmarks/analysis.py --fresh-process --repeat 3      # as `ktrace report FILE` runs: one new process per run

With ``--fresh-process`` the capture is written to a temporary ``.ktrace`` file and each run is a
new Python process that does what ``ktrace report FILE`` does (``prepare(path)``: read, decode,
align; then ``build_report``); it reports its wall time, user and system CPU, minor page faults
and peak RSS and the wall time of each step of the report (as its progress callback sees them:
``prepare`` is reading, decoding and aligning; a step's time runs until the next one starts), and
the load average is printed before and after.

Every run's time is listed (a process's first run also pays for growing its memory), with the
process CPU time (two threads run at once) and the peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
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
    return S.replicate(base, copies), regions, f"{what}, {copies} copies of its launches"


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


#: What one fresh-process run executes (argv[1]: the capture file).
_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r})
from ktrace.analysis import ReportConfig, build_report, prepare
from ktrace._memory import keep_freed_memory
keep_freed_memory()  # as the `ktrace` command does
t1 = time.perf_counter()
r0 = resource.getrusage(resource.RUSAGE_SELF)
steps, mark = [], [time.perf_counter(), "prepare"]
def step(name, done, total):  # wall time of each of the report's steps
    t = time.perf_counter(); steps.append((mark[1], t - mark[0])); mark[:] = [t, name]
trace = prepare(sys.argv[1])
step("build_report", 0, 0)
rep = build_report(trace, ReportConfig(), progress=step)
from viewers.text import render_text
render_text(rep)  # what the command prints
t2 = time.perf_counter()
r1 = resource.getrusage(resource.RUSAGE_SELF)
try:  # this process's own peak: ru_maxrss of a process started by fork and exec can be its parent's
    with open("/proc/self/status") as f:
        peak_kib = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
except (OSError, StopIteration):
    peak_kib = r1.ru_maxrss
print(json.dumps({{"analysis_s": t2 - t1, "import_s": t1 - t0, "user_s": r1.ru_utime - r0.ru_utime,
                  "sys_s": r1.ru_stime - r0.ru_stime, "minflt": r1.ru_minflt - r0.ru_minflt,
                  "peak_mib": peak_kib / 1024, "findings": len(rep.findings),
                  "steps": [(n, t) for n, t in steps if t >= 0.005 and n not in ("build_report", "done")]}}))
"""


def _fresh_processes(box: list, regions: dict, repeat: int) -> None:
    from ktrace.captures.file import write_capture

    table = box.pop()

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.ktrace")
        write_capture(path, S.to_capture(table, regions=regions))
        n, mb = table.size, os.path.getsize(path) / 2**20
        from ktrace.captures.file import read_capture

        raw = sum(ln.nbytes for rc in read_capture(path).ranks.values() for ln in rc.launches) / 2**20
        del table
        import gc

        gc.collect()
        print(f"this process now holds {_rss_mib():.0f} MiB")
        print(f"capture file: {mb:.0f} MiB, its event buffers (raw, as the GPUs wrote them, packed) {raw:.0f} MiB; "
              f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", _CHILD.format(root=os.path.abspath(root)), path],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            r["process_s"] = time.perf_counter() - t0
            runs.append(r)
            print(f"  fresh process: analysis {r['analysis_s']:.2f} s (prepare(path) + build_report; whole process "
                  f"{r['process_s']:.2f} s), user {r['user_s']:.2f} s, sys {r['sys_s']:.2f} s, "
                  f"{r['minflt']:,} minor faults, peak RSS {r['peak_mib'] / 1024:.2f} GiB ({r['peak_mib'] / raw:.1f}x the raw "
                  f"buffers); {r['findings']} findings")
            print("    steps (wall s): " + ", ".join(f"{n} {t:.2f}" for n, t in r["steps"]))
        a = [r["analysis_s"] for r in runs]
        print(f"report of a {n:,}-event capture file in a fresh process: median {np.median(a):.2f} s, max {max(a):.2f} s "
              f"[{', '.join(f'{t:.2f}' for t in a)}]; load average after: "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


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
    p.add_argument("--fresh-process", action="store_true",
                   help="only: each run a new process analysing a capture file, as `ktrace report FILE` does")
    args = p.parse_args()

    table, regions, what = _table(args)
    if args.fresh_process:
        print(f"{what}: {table.size:,} events; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
              f"numpy {np.__version__}")
        box = [table]
        del table  # this process keeps no table while the runs go on (the function frees it)
        _fresh_processes(box, regions, args.repeat)
        return 0
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
