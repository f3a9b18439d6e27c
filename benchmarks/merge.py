"""Merge per-rank capture files and write each trace format: events per second and peak memory.

    python benchmarks/merge.py [--events 10000000] [--ranks 4] [--dir DIR]
    python benchmarks/merge.py --source ktrace/data/a2a_skewed_4xh200.ktrace [--events 10000000]
    python benchmarks/merge.py --source benchmarks/data/gemm_all_scatter_fused_ws_2xh200.ktrace

Inputs replicated into many launches shifted in time until the capture holds ``--events``
events, written as one capture file per rank:

- CONSTRUCTED (default): one launch per rank from ``ktrace.captures.synth.constructed_capture``
  (spans, nested spans, marks, waits and notifies paired across ranks, counters, calibration
  samples), 264 programs x 8 iterations: ~12.7 k events per launch, dense buffers.
- ``--source CAPTURE``: a recorded capture (the bundled 4 x H200 all-to-all captures in
  ``ktrace/data``, the 2 x H200 GEMM + all-scatter one in ``benchmarks/data``): every launch
  of every rank, its events byte for byte (packed as capture files store them), with the
  timestamps of copy ``k`` moved ``k`` periods later (a period: the capture's whole span plus
  10 µs, so copies never overlap and each notify still pairs with the waits of its own copy).
  Launch indices are renumbered; calibration samples and devices are the recorded ones. Real
  launches are small (the all-to-all ones: 200-1,200 events; the GEMM + all-scatter ones ~3.6 k),
  so these inputs have many more launches (~16.5 k and ~2.8 k for 10 M events).

The raw capture the memory is compared with is the event buffers as the capture files store
them (packed); the device buffers' size is printed too.

Each step then runs in a fresh child process so that its peak resident memory
(``ru_maxrss``) is its own:

- ``merge``: read the per-rank files, merge them, fit the clock, write one ``.ktrace``;
- ``chrome``: read the merged capture, write Chrome JSON;
- ``chrome.gz``: the same, gzip-compressed (level 1);
- ``perfetto``: read the merged capture, write Perfetto protobuf.

Events per second count the capture's events over the step's wall time, reading included.
The writers spread launches over worker processes (one per core; ``--workers`` to choose).
Peak memory is the largest sum, over the step's process and its workers, of their
proportional set sizes (``Pss`` in ``/proc/PID/smaps_rollup``: pages the workers share with the
process they forked from count once), sampled every 10 ms in a second run of the step (reading ``smaps_rollup`` takes CPU and the
processes' memory locks, so the timed run goes unsampled); it is compared with the raw capture
(the bytes of every event buffer). ``maxrss`` is the step process's own peak resident size and
``+workers`` adds each worker's peak resident size (shared pages counted again: an upper bound).
``--repeat N`` times each step N times (one memory run). Before each run, untimed, the step's
output from an earlier run is removed and the machine's dirty page cache is written out
(``os.sync``): on the 2-core test machine, replacing the 1.3 GB Chrome file of a previous run
added 1.5 s (its unlink), and a step that started with the previous steps' gigabytes still
unwritten was throttled by their writeback (a write phase of 7.7 s instead of 3.3 s).
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
import threading
import time
from pathlib import Path

import numpy as np


def build(dirpath: Path, n_events: int, ranks: int) -> dict:
    """The CONSTRUCTED input (see the module docstring)."""
    from ktrace.decode import decode_buffer
    from ktrace.captures.file import Capture, Launch, write_capture
    from ktrace.captures.synth import constructed_capture, encode_buffer

    cap, _ = constructed_capture(world_size=ranks, programs=264, iters=8, seed=3)
    per_launch = cap.ranks[0].launches[0].decode(0).events.size
    n_launch = max(1, round(n_events / (per_launch * ranks)))
    files, device_bytes, total = [], 0, 0
    for r, rc in cap.ranks.items():
        ln0 = rc.launches[0]
        d = decode_buffer(ln0.raw)
        ev = d.events
        period = int(ev["end"].max() - ev["start"].min()) + 10_000
        launches = []
        for k in range(n_launch):
            e = ev.copy()
            e["start"] += k * period
            e["end"] += k * period
            raw = encode_buffer(e, grid=ln0.grid, capacity=ln0.capacity)
            launches.append(Launch(index=k, kernel=ln0.kernel, grid=ln0.grid, capacity=ln0.capacity, raw=raw, host_ns=ln0.host_ns))
            device_bytes += raw.nbytes
            total += e.size
        rc1 = type(rc)(rank=r, device=rc.device, launches=launches, clock_samples=rc.clock_samples)
        one = Capture(world_size=ranks, ranks={r: rc1}, regions=cap.regions, meta={"constructed": True})
        f = dirpath / f"rank{r}.ktrace"
        write_capture(f, one)
        files.append(str(f))
    return {"files": files, "events": total, "raw_bytes": stored_bytes(files), "device_bytes": device_bytes, "launches_per_rank": n_launch,
            "input": "CONSTRUCTED", "ranks": ranks}


def stored_bytes(files: list[str]) -> int:
    """The raw capture's size: the event buffers' bytes as the capture files store them."""
    from ktrace.captures.file import read_capture

    return sum(ln.nbytes for f in files for rc in read_capture(f).ranks.values() for ln in rc.launches)


def build_from(dirpath: Path, n_events: int, source: str) -> dict:
    """The input replicated from a recorded capture (see the module docstring)."""
    from ktrace import schema
    from ktrace.decode import decode_buffer, head_bytes, pack_buffer
    from ktrace.captures.file import Capture, Launch, RankCapture, read_capture, write_capture

    cap = read_capture(source)
    decoded = {(r, ln.index): decode_buffer(ln.raw) for r, rc in cap.ranks.items() for ln in rc.launches}
    per_copy = sum(d.events.size for d in decoded.values())
    if per_copy == 0:
        raise SystemExit(f"{source} holds no events")
    # one period in ns on every rank's own clock: the widest span of any rank, plus 10 µs
    spans = []
    for r, rc in cap.ranks.items():
        evs = [decoded[(r, ln.index)].events for ln in rc.launches if decoded[(r, ln.index)].events.size]
        if evs:
            hz = decoded[(r, rc.launches[0].index)].header.tick_hz
            spans.append((max(int(e["end"].max()) for e in evs) - min(int(e["start"].min()) for e in evs)) * 1e9 / hz)
    period_ns = int(max(spans)) + 10_000
    copies = max(1, round(n_events / per_copy))
    files, device_bytes, total, n_launches = [], 0, 0, 0
    for r, rc in sorted(cap.ranks.items()):
        launches = []
        per_rank = len(rc.launches)
        for ln in rc.launches:  # where each launch's timestamps lie, once (in its packed buffer)
            ln._packed = pack_buffer(ln.raw)
            h = decoded[(r, ln.index)].header
            n_rec = (ln._packed.nbytes - schema.packed_bytes(h.n_programs, 0)) // schema.RECORD_BYTES
            ln._rec = slice(head_bytes(decode_buffer(ln._packed).header), head_bytes(decode_buffer(ln._packed).header) + n_rec * schema.RECORD_BYTES)
            kind = ln._packed[ln._rec].view(schema.RECORD_DTYPE)["tag"] & 0xF
            ln._where = np.flatnonzero((kind != schema.EventKind.EMPTY) & (kind != schema.EventKind.DETAIL))
            ln._step = np.uint64(period_ns * h.tick_hz // 1_000_000_000)
        for k in range(copies):
            for j, ln in enumerate(rc.launches):
                raw = ln._packed.copy()
                rec = raw[ln._rec].view(schema.RECORD_DTYPE)
                shift = np.uint64(k) * ln._step
                rec["t0"][ln._where] += shift
                rec["t1"][ln._where] += shift
                launches.append(Launch(index=k * per_rank + j, kernel=ln.kernel, grid=ln.grid, capacity=ln.capacity, raw=raw,
                                       host_ns=ln.host_ns + k * period_ns, stream=ln.stream, meta=dict(ln.meta)))
                device_bytes += decoded[(r, ln.index)].header.nbytes  # (dense, as on the device)
                total += decoded[(r, ln.index)].events.size
        n_launches += len(launches)
        one = Capture(world_size=cap.world_size, ranks={r: RankCapture(rank=r, device=rc.device, launches=launches,
                                                                        clock_samples=rc.clock_samples)},
                      regions=cap.regions, meta={"replicated_from": Path(source).name, "copies": copies})
        f = dirpath / f"rank{r}.ktrace"
        write_capture(f, one)
        files.append(str(f))
    return {"files": files, "events": total, "raw_bytes": stored_bytes(files), "device_bytes": device_bytes,
            "launches_per_rank": n_launches // len(cap.ranks), "input": f"REPLICATED from {Path(source).name} ({copies} copies)", "ranks": len(cap.ranks)}


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def run_step(cmd: list[str], sample: bool = True) -> tuple[subprocess.CompletedProcess, int]:
    """Run a step's process; returns it and the peak PSS (bytes) of its process tree, sampled
    (0 when not ``sample``)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not sample:
        out, err = proc.communicate()
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err), 0
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], sum(_pss_kib(p) for p in _tree(proc.pid)))
            done.wait(0.01)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    done.set()
    th.join()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), peak[0] * 1024


def _cpu_s() -> float:
    """CPU seconds of this process and its finished workers (user + system)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


#: What each writing step writes (removed before each run of a step).
OUTPUTS = {"chrome": "trace.json", "chrome.gz": "trace.json.gz", "perfetto": "trace.pftrace"}


def step(name: str, info: dict, dirpath: Path, workers: int | None = None) -> dict:
    from ktrace.captures import merge_captures, read_capture, write_capture
    from ktrace.clock import attach_clock
    from ktrace.export.chrome import write_chrome_json
    from ktrace.export.perfetto import write_perfetto

    merged = dirpath / "merged.ktrace"
    c0 = _cpu_s()
    t0 = time.perf_counter()
    if name == "merge":
        cap = merge_captures(read_capture(f) for f in info["files"])
        attach_clock(cap)
        write_capture(merged, cap)
        out = merged
    else:
        cap = read_capture(merged)
        if name not in OUTPUTS:
            raise SystemExit(f"unknown step {name}")
        write = write_perfetto if name == "perfetto" else write_chrome_json
        out = write(cap, dirpath / OUTPUTS[name], workers=workers)
    wall = time.perf_counter() - t0
    cpu = _cpu_s() - c0
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest worker's
    n_workers = workers or 0
    if workers is None:
        from ktrace.export.pool import default_workers

        n_workers = default_workers(info["events"]) if name != "merge" else 0
    n_workers = n_workers if n_workers > 1 else 0
    return {"step": name, "wall_s": wall, "events_per_s": info["events"] / wall, "cpu_s": cpu, "maxrss_bytes": own,
            "maxrss_workers_bytes": own + n_workers * kids, "workers": n_workers, "out_bytes": os.path.getsize(out)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--steps", default="merge,chrome,chrome.gz,perfetto")
    ap.add_argument("--workers", type=int, help="writer worker processes (default: one per core)")
    ap.add_argument("--source", help="replicate this recorded capture instead of the constructed launch")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of each step (default 1)")
    ap.add_argument("--_step", help=argparse.SUPPRESS)
    ap.add_argument("--_info", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._step:
        print(json.dumps(step(args._step, json.loads(args._info), Path(args.dir), args.workers)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.dir or tmp)
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        info = build_from(d, args.events, args.source) if args.source else build(d, args.events, args.ranks)
        print(f"built {info['events']:,} events, {info['input']} ({info['ranks']} ranks x {info['launches_per_rank']} launches), "
              f"raw capture {info['raw_bytes'] / 2**20:.0f} MiB as stored ({info['raw_bytes'] / info['events']:.0f} B per event; "
              f"{info['device_bytes'] / 2**20:.0f} MiB of device buffers), in {time.perf_counter() - t0:.1f} s")
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"load average {os.getloadavg()[0]:.2f} at the start (other work on the machine slows the steps down)")
        print(f"{'step':10s} {'workers':>7s} {'wall s':>8s} {'cpu s':>7s} {'events/s':>12s} {'PSS MiB':>8s} {'PSS/raw':>8s} {'maxrss/raw':>10s} "
              f"{'+workers/raw':>12s} {'output MiB':>11s}")
        for name in args.steps.split(","):
            cmd = [sys.executable, __file__, "--dir", str(d), "--_step", name, "--_info", json.dumps(info)]
            cmd += ["--workers", str(args.workers)] if args.workers else []
            timed = []
            for _ in range(args.repeat + 1):  # the timed runs, then one with its memory sampled
                for old in OUTPUTS.values():  # (replacing a 1.3 GB file costs its unlink, ~1-2 s here)
                    (d / old).unlink(missing_ok=True)
                os.sync()  # the previous steps' outputs on disk first: their writeback is not this step's work
                timed.append(run_step(cmd, sample=len(timed) == args.repeat))
            (mem, pss), timed = timed[-1], [t for t, _ in timed[:-1]]
            for rr in timed + [mem]:
                if rr.returncode:
                    print(f"{name}: FAILED\n{rr.stderr}", file=sys.stderr)
                    return 1
            raw = info["raw_bytes"]
            for res in timed:
                r = json.loads(res.stdout.strip().splitlines()[-1])
                print(f"{name:10s} {r['workers']:7d} {r['wall_s']:8.2f} {r['cpu_s']:7.2f} {r['events_per_s']:12,.0f} {pss / 2**20:8.0f} {pss / raw:8.2f} "
                      f"{r['maxrss_bytes'] / raw:10.2f} {r['maxrss_workers_bytes'] / raw:12.2f} {r['out_bytes'] / 2**20:11.0f}   "
                      f"(load {os.getloadavg()[0]:.2f})")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
