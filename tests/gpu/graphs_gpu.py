"""Traced CUDA graph replays on one GPU, the parts that need a process of their own (a one-rank
symmetric heap, a kernel that hangs): run by ``tests/gpu/test_graphs_gpu.py``, or by hand::

    python tests/gpu/graphs_gpu.py --role straggler --out OUT   # examples/08: 200 replays, a straggler in 10
    python tests/gpu/graphs_gpu.py --role hang --out OUT        # the flight recorder, a replay that hangs

``straggler``: examples/08's tile all-to-all at one rank (programs of one GPU exchanging tiles),
warmed up, captured with ``torch.cuda.graph``, replayed 200 times and drained every 100; program 1
holds back its notifies of tiles 2-5 by 60 µs in replays 50-59. Writes ``OUT/replays.ktrace`` and
``OUT/summary.json`` (what ``record`` returns).

``hang``: the same step traced by the flight recorder (ring mode, a watchdog after ``--stall-s``),
its waits unbounded, and program 1's notify of tile 3 skipped in replay 5: replay 5 hangs. A
thread waits for the watchdog's dump, then writes the flag from the host (on a stream made before
the replays) and the remaining replays run. Writes ``OUT/summary.json``: the dump, its launches'
meta, the live report's first line, and what the capture recorded of the replays.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("KTRACE_KERNEL_HEAP_MB", "64")  # (read when the harness is imported)


def example08():
    """examples/08_cuda_graph_replays.py as a module."""
    name = "ktrace_example_08"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "08_cuda_graph_replays.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def straggler(out: Path) -> dict:
    ex = example08()
    ex._one_rank_env()
    faults = ex.Faults(slow_rank=0, slow_prog=1, slow_from=52, slow_to=62, slow_ns=60_000, slow_mask=0b111100)
    info = ex.record(out, replays=200, drain_every=100, faults=faults)
    info["injected"] = {"rank": 0, "program": 1, "replays": list(range(50, 60)), "tiles": [2, 3, 4, 5], "delay_ns": 60_000}
    return info


def hang(out: Path, stall_s: float) -> dict:
    import torch

    import ktrace
    from instrumented_kernels import harness as H
    from ktrace.analysis.live import live_report
    from ktrace.captures import read_capture
    from ktrace.schema import EventFlag

    ex = example08()
    ex._one_rank_env()
    H.setup()
    heap = H.heap(1 << 22)
    plan = ex.TileExchange(heap, chunks=4, tiles=8)
    K, tile, prog = 5, 3, 1  # replay K (round K + 2) hangs: program 1 never notifies tile 3
    faults = ex.Faults(skip_rank=0, skip_epoch=K + 2, skip_index=prog * plan.T + tile)
    flag = (0 * plan.C + prog // heap.world_size) * plan.T + tile  # (sending rank 0, chunk 1, tile 3)
    side = torch.cuda.Stream()  # made before anything spins: creating a stream while a kernel spins blocks the host
    value = torch.full((1,), K + 2, dtype=torch.int32, device="cuda")
    cfg = ktrace.FlightConfig(slots=64, stall_s=stall_s, poll_s=0.05, out_dir=str(out / "dumps"), registry=str(out / "reg"),
                              on_signal=False)
    with ktrace.capture(flight_recorder=cfg):  # the warm-up, in ring mode: the binary the graph will hold
        plan.step(faults, timeout_ns=0)
    torch.cuda.synchronize()
    released = {}
    with ktrace.capture(flight_recorder=cfg, graph_ring=64) as cap:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            plan.step(faults, timeout_ns=0)

        def release():
            end = time.monotonic() + 60
            while not cap._flight.dumps and time.monotonic() < end:
                time.sleep(0.05)
            released["after_dump"] = bool(cap._flight.dumps)
            with torch.cuda.stream(side):
                plan.flags.view(-1)[flag : flag + 1].copy_(value, non_blocking=True)

        th = threading.Thread(target=release, daemon=True)
        th.start()
        for _ in range(K + 5):
            g.replay()
        torch.cuda.synchronize()  # blocks in replay K until the flag is written
        th.join()
    dumps = [str(p) for p in cap._flight.dumps]
    summary = {"K": K, "dumps": dumps, "released": released, "graphs": cap.graph_summaries()}
    if dumps:
        d = read_capture(dumps[0])
        summary["dump_launches"] = [{"kernel": ln.kernel, "meta_graph": ln.meta.get("graph"),
                                     "open_waits": len(ln.meta["live"]["open_waits"])} for ln in d.ranks[0].launches]
        summary["report_first_line"] = live_report(d).headline
    c = cap.to_capture()
    summary["replay_launches"] = [ln.meta["graph"]["replay"] for ln in c.ranks[0].launches if "graph" in ln.meta]
    summary["timed_out_waits"] = int(((c.events()["flags"] & int(EventFlag.TIMEOUT)) != 0).sum())
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=("straggler", "hang"), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stall-s", type=float, default=2.0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info = straggler(out) if args.role == "straggler" else hang(out, args.stall_s)
    (out / "summary.json").write_text(json.dumps(info, indent=1, default=str))
    print(json.dumps(info, default=str)[:2000], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
