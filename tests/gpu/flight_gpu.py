"""The flight recorder on a GPU: a hung kernel dumped live, and ring mode's cost.

Run on one GPU with ``tests/gpu/flight_gpu.sh`` (each step in a process group killed at its time
limit); ``OUT/flight/dump1.ktrace`` is ``tests/fixtures/flight_dump_h100.ktrace`` (copy it there to
remake the fixture). ``tests/gpu/flight_gpu_device.sh`` runs the hang with the rings in device
memory. By hand::

    python tests/gpu/flight_gpu.py --role bench --out OUT
    python tests/gpu/flight_gpu.py --role hang --out OUT [--stall-s 3] [--placement device]

``--role parent`` (the default) does, each step under its own time limit:

1. ``bench``: ring mode's cost, interleaved CUDA-event medians in one process: the one-GPU
   ping-pong (``benchmarks/handoff_kernels.pingpong``, programs 0 and 1, 500 round trips, WAIT and
   NOTIFY records) and the 64 Mi-element copy (one span per 1024-element program), each
   untraced, traced (dense buffer in device memory), ring mode with the ring in device memory,
   and ring mode with the ring in pinned host memory (what the flight recorder uses). The rings'
   heads and last records are checked against what the kernels must have written.
2. ``hang``: a child process opens ``ktrace.capture(flight_recorder=FlightConfig(stall_s=T))``,
   runs ``tests/flight_kernels.handoff`` once to completion, then again with the notify of round
   ``skip`` skipped and unbounded waits, and blocks in ``torch.cuda.synchronize()``. The parent
   waits for the watchdog's dump, then runs ``ktrace dump`` (SIGUSR1) and waits for the second
   dump while the kernel still spins, then asks the child to release the kernel (it writes the
   flag from the host on a stream made before the launch) and checks that the child ends.
   ``ktrace report`` on the first dump prints the wait-for graph's first line.

Everything lands in ``OUT``: ``bench.json``, ``dump1.ktrace``, ``dump2.ktrace``, ``final.ktrace``,
``report.txt``, ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _heap(nbytes=1 << 20):
    """A one-rank symmetric heap with a ``flags`` tensor; on failure, the benchmarks' stand-in (a
    device block whose first bytes are the error block: flags then have no allocation name)."""
    import torch

    try:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
        import ktrace.shmem as shmem

        shmem.init_distributed()
        heap = shmem.SymmetricHeap(nbytes)
        flags = heap.zeros(16, dtype=torch.int32, name="flags")
        return heap, flags, heap.bases, heap.rank
    except Exception as e:  # noqa: BLE001
        print(f"symmetric heap unavailable ({e}); stand-in heap", flush=True)
        from ktrace.shmem.codes import ERROR_BLOCK_BYTES

        err = torch.zeros(nbytes // 4, dtype=torch.int32, device="cuda")
        bases = torch.tensor([err.data_ptr()], dtype=torch.int64, device="cuda")
        return None, err[ERROR_BLOCK_BYTES // 4 + 64 :][:16], bases, 0


# ---------------------------------------------------------------------------------------------
# 1. cost
# ---------------------------------------------------------------------------------------------


def _interleaved(fns: dict, reps: int, warmup: int = 3) -> dict:
    import torch

    names = list(fns)
    for _ in range(warmup):
        for n in names:
            fns[n]()
    torch.cuda.synchronize()
    ev = {n: [] for n in names}
    for r in range(reps):
        order = names[r % len(names):] + names[: r % len(names)]  # rotate: no variant always first
        for n in order:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fns[n]()
            b.record()
            ev[n].append((a, b))
    torch.cuda.synchronize()
    out = {}
    for n in names:
        ts = sorted(a.elapsed_time(b) * 1000.0 for a, b in ev[n])
        out[n] = {"median_us": statistics.median(ts), "p10_us": ts[len(ts) // 10], "p90_us": ts[(9 * len(ts)) // 10]}
    return out


def bench(out: Path, reps: int) -> dict:
    import numpy as np
    import torch

    import handoff_kernels as hk
    from ktrace import schema
    from ktrace.flight import ring
    from ktrace.schema import EventKind
    from ktrace.shmem.codes import ERROR_BLOCK_BYTES
    from tests.probe_kernels import copy_kernel

    dev = torch.device("cuda")
    res = {"device": torch.cuda.get_device_name(), "reps": reps, "cases": []}
    slots = 64

    def buffers(P, dense_slots, slots):
        return {
            "untraced": (None, 0),
            "traced (device buffer)": (torch.zeros((schema.buffer_bytes(P, dense_slots) + 7) // 8, dtype=torch.int64, device=dev), dense_slots),
            "ring (device memory)": (torch.zeros((schema.ring_buffer_bytes(P, slots) + 7) // 8, dtype=torch.int64, device=dev), schema.ring_gate(slots)),
            "ring (pinned host memory)": (torch.zeros((schema.ring_buffer_bytes(P, slots) + 7) // 8, dtype=torch.int64, pin_memory=True), schema.ring_gate(slots)),
        }

    # the one-GPU ping-pong: 500 round trips between programs 0 and 1, with records stored by
    # each probe (hk.pingpong is a plain @triton.jit kernel) and deferred (the same kernel as
    # @ktrace.trace prepares it: kl.init_deferred, kl.finish appended)
    import ktrace

    deferred_pp = ktrace.trace(hk.pingpong).jit_fn
    rounds = 500
    err = torch.zeros(ERROR_BLOCK_BYTES // 4 + 64, dtype=torch.int32, device=dev)
    bases = torch.tensor([err.data_ptr()], dtype=torch.int64, device=dev)
    flag = torch.zeros(64, dtype=torch.int32, device=dev)[32:]
    scratch = torch.zeros(16, dtype=torch.int64, device=dev)
    epoch = [0]
    last_epoch = {}
    bufs = buffers(2, 4 * rounds, slots)
    bufs.update({f"{n}, deferred": (torch.zeros_like(b).pin_memory() if b.is_pinned() else torch.zeros_like(b), g) for n, (b, g) in bufs.items() if b is not None})

    def pp(name, buf, gate):
        kern = deferred_pp if name.endswith("deferred") else hk.pingpong

        def f():
            epoch[0] += 1
            last_epoch[name] = epoch[0]
            kern[(2,)](flag, scratch, rounds, epoch[0], 0, 0, 0, bases, WAITS=True, NOTIFIES=True, LOCAL=True,
                              ktrace_buf=buf, KTRACE=gate, num_warps=4)
        return f

    t = _interleaved({n: pp(n, *b) for n, b in bufs.items()}, reps)
    torch.cuda.synchronize()
    if int(err[0].item()) or int(flag[0].item()) != epoch[0] * rounds:
        raise SystemExit(f"ping-pong went wrong: error count {int(err[0].item())}, flag {int(flag[0].item())} != {epoch[0] * rounds}")
    checks = {}
    for n, (buf, gate) in bufs.items():
        if not schema.is_ring_gate(gate):
            continue
        raw = buf.cpu().numpy().view(np.uint8)
        rec, heads, now = ring.split_ring(raw, 2, slots)
        hdr = schema.Header(timer=schema.TimerKind.NV_GLOBALTIMER, tick_hz=10**9, capacity=slots, n_programs=2, grid=(2, 1, 1))
        dense, lost = ring.unroll(rec, heads, hdr)
        from ktrace.decode import decode_buffer

        ev = decode_buffer(dense).events
        ok = (heads.tolist() == [4 * rounds, 4 * rounds] and lost.tolist() == [4 * rounds - slots] * 2
              and (now["since"] == 0).all() and (now["started"] != 0).all()
              and len(ev) == slots and set(ev["kind"].tolist()) == {EventKind.WAIT, EventKind.NOTIFY}
              and int(ev["arg1"][ev["kind"] == EventKind.NOTIFY].max()) == last_epoch[n] * rounds
              and (ev["end"] >= ev["start"]).all())
        checks[n] = {"heads": heads.tolist(), "lost": lost.tolist(), "events_kept_both_lanes": int(len(ev)), "ok": bool(ok)}
        if not ok:
            raise SystemExit(f"ring check failed for {n}: {checks[n]}")
    u = t["untraced"]["median_us"]
    for n in bufs:
        res["cases"].append({"case": f"one-GPU ping-pong x{rounds} (WAIT+NOTIFY records)", "variant": n, **t[n],
                             "ratio": t[n]["median_us"] / u, "extra_ns_per_handoff": 1000 * (t[n]["median_us"] - u) / (2 * rounds)})
    res["ring_checks"] = checks

    # the copy: 64 Mi fp32, one span per 1024-element program
    n_el, block = 64 << 20, 1024
    P = n_el // block
    x = torch.randn(n_el, device=dev)
    y = torch.empty_like(x)
    bufs = buffers(P, 1, 2)

    def cp(buf, gate):
        return lambda: copy_kernel[(P,)](x, y, n_el, BLOCK=block, ktrace_buf=buf, KTRACE=gate)

    t = _interleaved({n: cp(*b) for n, b in bufs.items()}, reps)
    y.fill_(float("nan"))
    cp(*bufs["ring (pinned host memory)"])()
    torch.cuda.synchronize()
    if not torch.equal(x, y):
        raise SystemExit("ring-mode copy is wrong")
    raw = bufs["ring (pinned host memory)"][0].numpy().view(np.uint8)
    _, heads, _ = ring.split_ring(raw, P, 2)
    if not (heads == 1).all():
        raise SystemExit(f"copy: heads not all 1: {np.unique(heads)}")
    u = t["untraced"]["median_us"]
    for n in bufs:
        res["cases"].append({"case": "copy 64 Mi fp32, 1 span per 1024-element program", "variant": n, **t[n], "ratio": t[n]["median_us"] / u})
    (out / "bench.json").write_text(json.dumps(res, indent=1))
    for c in res["cases"]:
        print(f"{c['case']:<52} {c['variant']:<28} {c['median_us']:9.2f} us  x{c['ratio']:.4f} "
              f"(p10 {c['p10_us']:.2f}, p90 {c['p90_us']:.2f})", flush=True)
    return res


# ---------------------------------------------------------------------------------------------
# 3. streaming a persistent kernel
# ---------------------------------------------------------------------------------------------


def stream_run(out: Path, secs: float, progs: int, gap_ns: int, slots: int) -> dict:
    """``tests/flight_kernels.ticker`` (``progs`` programs, a mark every ``gap_ns`` for ``secs``)
    in ring mode with the rings in pinned memory, drained every 2 ms by
    ``ktrace.flight.stream.RingDrain`` into a spill file while it runs; then every spilled row is
    checked against the record its sequence number must be (a mark whose ``arg0`` is that
    number), in chunks."""
    import resource

    import numpy as np
    import torch

    from ktrace import schema
    from ktrace.flight import ring, stream
    from tests.flight_kernels import ticker

    iters = int(secs * 1e9 / gap_ns)
    gate = schema.ring_gate(slots)
    buf = torch.zeros(schema.ring_buffer_bytes(progs, slots) // 8, dtype=torch.int64, pin_memory=True)
    host = buf.numpy().view(np.uint8)
    rec, heads, _ = ring.split_ring(host, progs, slots)
    done = torch.zeros(progs, dtype=torch.int32, device="cuda")
    ticker[(progs,)](done, 10, gap_ns, ktrace_buf=buf, KTRACE=gate)  # compile
    torch.cuda.synchronize()
    host[:] = 0
    d = stream.RingDrain(progs, slots)
    spill_path = out / "stream.spill"
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    longest, drains = 0.0, 0
    with open(spill_path, "wb") as spill:
        t0 = time.monotonic()
        ticker[(progs,)](done, iters, gap_ns, ktrace_buf=buf, KTRACE=gate)
        while True:
            t = time.monotonic()
            spill.write(stream.segments_bytes(d.drain(heads, rec)))
            drains += 1
            longest = max(longest, time.monotonic() - t)
            if (d.next >= iters).all() or time.monotonic() - t0 > secs + 30:
                break
            time.sleep(max(0.002 - (time.monotonic() - t), 0))
        run_s = time.monotonic() - t0
        torch.cuda.synchronize()
        spill.write(stream.segments_bytes(d.drain(heads, rec)))
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # check every record, segment by segment (bounded memory): the mark of its own round
    rows_total, bad, per_lane, segments = 0, 0, np.zeros(progs, np.int64), 0
    mm = np.memmap(spill_path, dtype=np.uint8, mode="r")
    for p, s0, r in stream.iter_spill(mm):
        bad += int(np.count_nonzero(r["arg0"].astype(np.int64) != s0 + np.arange(len(r))))
        bad += int(np.count_nonzero((r["tag"] & 0xF) != int(schema.EventKind.INSTANT)))
        per_lane[p] += len(r)
        rows_total += len(r)
        segments += 1
    del mm
    res = {"device": torch.cuda.get_device_name(), "programs": progs, "iters": iters, "gap_ns": gap_ns, "ring_slots": slots,
           "events_written": int(progs * iters), "kernel_and_drain_s": run_s, "rows_spilled": rows_total,
           "lost": int(d.lost.sum()), "rows_not_their_record": bad,
           "every_lane_whole": bool((per_lane + d.lost == iters).all()), "drains": drains, "segments": segments, "longest_drain_ms": longest * 1e3,
           "drained_events_per_s": rows_total / run_s, "spill_bytes": spill_path.stat().st_size,
           "maxrss_mib_before": rss0 / 1024, "maxrss_mib_after": rss1 / 1024, "kernel_done": int(done.min().item())}
    spill_path.unlink()
    (out / "stream.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1), flush=True)
    return res


# ---------------------------------------------------------------------------------------------
# 2. the hang (child)
# ---------------------------------------------------------------------------------------------


def child(out: Path, stall_s: float, progs: int, rounds: int, skip: int, placement: str = "pinned") -> None:
    import torch

    import ktrace
    from ktrace.flight.recorder import FlightConfig
    from tests.flight_kernels import handoff

    heap, flags, bases, rank = _heap()
    data = torch.zeros(256 * (progs + 1), dtype=torch.float32, device="cuda")
    side = torch.cuda.Stream()  # made before the launch: creating one while a kernel spins blocks the host
    release_value = torch.full((1,), 1 << 30, dtype=torch.int32, device="cuda")
    cfg = FlightConfig(slots=64, stall_s=stall_s, poll_s=0.05, out_dir=str(out / "dumps"), registry=str(out / "registry"),
                       placement=placement)
    with ktrace.capture(flight_recorder=cfg, heap=heap) as cap:
        handoff[(progs,)](flags, data, rounds, rounds, 0, rank, bases)  # a whole run (and the compile)
        torch.cuda.synchronize()
        print(f"warm run done; flag {int(flags[0].item())}", flush=True)

        def releaser():
            while not (out / "release").exists():
                time.sleep(0.02)
            with torch.cuda.stream(side):
                flags[:1].copy_(release_value, non_blocking=True)
            print("released", flush=True)

        threading.Thread(target=releaser, daemon=True).start()
        handoff[(progs,)](flags, data, rounds, skip, rounds, rank, bases)  # round `skip` is never notified
        print(f"launched {time.time_ns()} pid {os.getpid()}", flush=True)
        torch.cuda.synchronize()  # blocks until the flag is written from the host
        print("kernel ended", flush=True)
    cap.save(out / "final.ktrace")
    print(f"final capture saved; dumps {[str(p) for p in cap._flight.dumps]}", flush=True)


# ---------------------------------------------------------------------------------------------
# 2. the hang (parent)
# ---------------------------------------------------------------------------------------------


def _wait_for(pred, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def hang(out: Path, stall_s: float, placement: str = "pinned") -> dict:
    from ktrace.captures import read_capture

    progs, rounds, skip = 4, 8, 5
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log = open(out / "child.log", "w")
    ch = subprocess.Popen([sys.executable, __file__, "--role", "child", "--out", str(out), "--stall-s", str(stall_s),
                           "--progs", str(progs), "--rounds", str(rounds), "--skip", str(skip), "--placement", placement],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []

    def pump():
        for line in ch.stdout:
            lines.append(line.rstrip())
            log.write(line)
            log.flush()
            print("  child:", line.rstrip(), flush=True)

    threading.Thread(target=pump, daemon=True).start()
    summary: dict = {"stall_s": stall_s, "progs": progs, "rounds": rounds, "skip": skip, "placement": placement}
    try:
        launched = _wait_for(lambda: next((ln for ln in lines if ln.startswith("launched")), None), 120, "the launch")
        t_launch = int(launched.split()[1])
        dumps = out / "dumps"
        d1 = _wait_for(lambda: next(iter(sorted(dumps.glob("*-1.ktrace"))), None), stall_s + 30, "the watchdog's dump")
        t_d1 = time.time_ns()
        cap1 = read_capture(d1)
        w1 = cap1.ranks[0].launches[-1].meta["live"]["open_waits"]
        live1 = cap1.meta["live"]
        hz = int(cap1.ranks[0].device.get("tick_hz") or 1e9)
        ticks = cap1.ranks[0].launches[-1].meta["live"]["dump_ticks"]
        waited = [(ticks - w["since"]) / hz for w in w1]
        summary["watchdog"] = {"reason": live1["reason"], "dump_after_launch_s": (live1["dump_ns"] - t_launch) / 1e9,
                               "open_waits": len(w1), "waited_s_at_dump": waited, "file_seen_after_launch_s": (t_d1 - t_launch) / 1e9,
                               "clock_bound_ns": live1["clock_bound_ns"]}
        print(f"watchdog dump {d1.name}: {len(w1)} open waits, waited {min(waited):.3f}-{max(waited):.3f} s (T = {stall_s} s)", flush=True)
        # each waited-on flag read from the heap at the dump: the notify was skipped, so the heap
        # holds what the lanes last read
        summary["watchdog"]["heap_read"] = live1.get("heap_read")
        summary["watchdog"]["heap_vs_seen"] = sorted({(w.get("heap_value"), w["seen"]) for w in w1})
        print(f"heap read: {live1.get('heap_read')}; (heap, last read): {summary['watchdog']['heap_vs_seen']}", flush=True)
        if live1.get("heap_read") != "read" or any(w.get("heap_value") != w["seen"] for w in w1):
            raise SystemExit(f"the dump's heap read: {live1.get('heap_read')}, {summary['watchdog']['heap_vs_seen']}")
        if ch.poll() is not None:
            raise SystemExit("the child ended before the signal")
        r = subprocess.run([sys.executable, "-m", "ktrace.cli", "dump", "--registry", str(out / "registry")],
                           capture_output=True, text=True, timeout=30)
        print("ktrace dump:", r.returncode, r.stdout.strip(), r.stderr.strip(), flush=True)
        t_sig = time.time_ns()
        d2 = _wait_for(lambda: next(iter(sorted(dumps.glob("*-2.ktrace"))), None), 15, "the SIGUSR1 dump")
        cap2 = read_capture(d2)
        live2 = cap2.meta["live"]
        w2 = cap2.ranks[0].launches[-1].meta["live"]["open_waits"]
        summary["signal"] = {"reason": live2["reason"], "dump_after_signal_s": (live2["dump_ns"] - t_sig) / 1e9, "open_waits": len(w2),
                             "still_running": ch.poll() is None, "ktrace_dump_rc": r.returncode}
        print(f"signal dump {d2.name}: {len(w2)} open waits, {summary['signal']['dump_after_signal_s']:.3f} s after the signal; "
              f"child running: {ch.poll() is None}", flush=True)
        shutil.copy(d1, out / "dump1.ktrace")
        shutil.copy(d2, out / "dump2.ktrace")
        (out / "release").write_text("1")
        t_rel = time.monotonic()
        rc = ch.wait(timeout=60)
        summary["child_rc"] = rc
        summary["release_to_exit_s"] = time.monotonic() - t_rel
        text = "\n".join(lines)  # (the child's two threads may print on one line)
        summary["released"] = "released" in text and "kernel ended" in text
        rep = subprocess.run([sys.executable, "-m", "ktrace.cli", "report", "-q", str(out / "dump1.ktrace")],
                             capture_output=True, text=True, timeout=60)
        (out / "report.txt").write_text(rep.stdout + rep.stderr)
        summary["report_first_line"] = rep.stdout.splitlines()[0] if rep.stdout else rep.stderr
        print("REPORT:", summary["report_first_line"], flush=True)
    finally:
        if ch.poll() is None:
            ch.kill()
            ch.wait()
            summary["killed"] = True
        log.close()
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="parent", choices=["parent", "child", "bench", "hang", "stream"])
    ap.add_argument("--secs", type=float, default=5.0)
    ap.add_argument("--gap-ns", type=int, default=10_000)
    ap.add_argument("--programs", type=int, default=132)
    ap.add_argument("--slots", type=int, default=4096)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stall-s", type=float, default=3.0)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--progs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--placement", default="pinned", choices=["pinned", "device"])
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.role == "child":
        child(out, a.stall_s, a.progs, a.rounds, a.skip, a.placement)
        return
    summary = {}
    if a.role == "bench":
        bench(out, a.reps)
        return
    if a.role == "stream":
        stream_run(out, a.secs, a.programs, a.gap_ns, a.slots)
        return
    if a.role == "parent":
        try:
            bench(out, a.reps)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the hang test still runs
            summary["bench_error"] = repr(e)
            print("BENCH FAILED:", repr(e), flush=True)
    if a.role in ("parent", "hang"):
        summary.update(hang(out, a.stall_s, a.placement))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
