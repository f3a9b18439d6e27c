"""What every suite of ``benchmarks/probe_overhead.py`` shares: timing (``median_times`` for one
GPU; ``time_case`` over ranks, through ``instrumented_kernels.harness.time_interleaved``), the
variants' launchers and trace buffers (``variant_launchers``: a kernel as ``@ktrace.trace``
prepares it or as written, a dense or ring-mode buffer), the check of every traced variant's
records (``check_records``), and the table the command prints (``print_rows``)."""

from __future__ import annotations

import statistics
import sys

import torch

import ktrace
from instrumented_kernels import harness as H
from ktrace import schema

#: GPU cycles the stream sleeps before each timed batch (as benchmarks/kernels.py): device time.
HOLD_CYCLES = 5_000_000


#: Slots per lane of the ring-mode variants (``RING``: the flight recorder's ring, in device memory).
RING = 64


#: Compiler options of every hand-off variant, traced and untraced alike (``--maxnreg``: the same
#: register bound on both sides pins ptxas's schedule of the kernels' copy loops; docs/probes.md).
LAUNCH_OPTS: dict = {}


def median_times(launchers: dict, reps: int, warmup: int) -> dict:
    """One GPU: each launcher timed by CUDA events in a fresh random order each repetition, after
    ``warmup`` rounds; per launcher the median and the 10th/90th percentiles (µs)."""
    names = list(launchers)
    for _ in range(warmup):
        for n in names:
            launchers[n]()
    torch.cuda.synchronize()
    ev = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)] for n in names}
    for r, order in enumerate(H.run_orders(names, reps)):  # each variant follows each other about equally often
        for n in order:
            a, b = ev[n][r]
            a.record()
            launchers[n]()
            b.record()
    torch.cuda.synchronize()
    out = {}
    for n in names:
        ts = sorted(a.elapsed_time(b) * 1000.0 for a, b in ev[n])  # µs
        out[n] = {"median_us": statistics.median(ts), "p10_us": ts[len(ts) // 10], "p90_us": ts[(9 * len(ts)) // 10]}
    return out


_PREPARED: dict = {}


def kernel_for(kernel, sw: dict):
    """The kernel a variant launches, and its keyword arguments (compile-time switches, and the
    ping-pong's ``delay``): as ``@ktrace.trace``
    prepares it (records deferred, flushed at the end: the default), or as written (``IMMEDIATE``:
    each record stored by its probe, the old path, for comparison)."""
    sw = {k: v for k, v in sw.items() if k not in ("RING", "PAD", "SLOTS")}  # the buffer's mode, place and size, not kernel switches
    if "DELAY" in sw:  # a runtime argument (the ping-pong's polling-phase sweep), not a switch
        sw["delay"] = sw.pop("DELAY")
    if sw.pop("IMMEDIATE", False):
        return kernel, sw
    if kernel not in _PREPARED:
        prepared = ktrace.trace(kernel).jit_fn
        if prepared is kernel:  # (the decorator left it as written: the log says why)
            raise SystemExit(f"{kernel.__name__}: @ktrace.trace kept its records immediate; the deferred variants would not be")
        _PREPARED[kernel] = prepared
    return _PREPARED[kernel], sw


def is_traced(name: str, sw: dict) -> bool:
    return bool(slots_per_round(sw)) or name == "on, no probe"


def slots_per_round(sw: dict) -> int:
    """Event slots one round (ping-pong, fan-in) or tile (pipeline) takes in a program, at most
    (a WAIT or NOTIFY takes two: the event and its DETAIL record)."""
    return 2 * bool(sw.get("WAITS")) + 2 * bool(sw.get("NOTIFIES")) + sw.get("SPANS", 0) + bool(sw.get("MARKS")) + bool(sw.get("COUNTERS"))


def signals_per_round(sw: dict) -> int:
    """WAIT and NOTIFY events one round (ping-pong, fan-in) or tile (pipeline) records."""
    return bool(sw.get("WAITS")) + bool(sw.get("NOTIFIES"))


def events_per_round(sw: dict) -> int:
    """Events one round of one program records (ping-pong, fan-in)."""
    return bool(sw.get("WAITS")) + bool(sw.get("NOTIFIES")) + sw.get("SPANS", 0) + bool(sw.get("MARKS")) + bool(sw.get("COUNTERS"))


class Epochs:
    """The launch counter of a case's flags, shared by all its variants (flags are never reset)."""

    def __init__(self):
        self.epoch = 0

    def next(self) -> int:
        self.epoch += 1
        return self.epoch


def direct_header(n_programs: int, capacity: int) -> "schema.Header":
    """The header of a direct launch's buffer (one-dimensional grid, NVIDIA timer), which the
    launch itself does not write."""
    return schema.Header(timer=schema.TimerKind.NV_GLOBALTIMER, tick_hz=10**9, capacity=capacity, n_programs=n_programs,
                         grid=(n_programs, 1, 1))


def decode(buf, n_programs: int, capacity: int):
    """Decode a preallocated buffer (the header is written here: a direct launch has none)."""
    import numpy as np

    from ktrace.decode import decode_buffer

    nbytes = schema.buffer_bytes(n_programs, capacity)
    raw = buf.cpu().numpy().view(np.uint8)[:nbytes].copy()
    raw[:64] = np.frombuffer(direct_header(n_programs, capacity).to_bytes(), np.uint8)
    return decode_buffer(raw)


def check_records(name: str, buf, n_programs: int, capacity: int, expected: int, signals: int) -> float | None:
    """Every record of a traced launch is there, none dropped, none ends before it starts.
    ``expected`` events, ``signals`` of them WAITs or NOTIFYs (two slots each: the event and its
    DETAIL record). In ring mode (``capacity`` a ring gate) the lanes' heads count every slot
    written and the records the rings kept decode with none ending before its start.
    Returns the mean number of flag reads per recorded wait (None without WAIT records or in ring mode)."""
    if schema.is_ring_gate(capacity):
        import numpy as np

        from ktrace.decode import decode_buffer
        from ktrace.flight import ring

        slots = capacity & (schema.RING_GATE - 1)
        rec, heads, _ = ring.split_ring(buf.cpu().numpy().view(np.uint8), n_programs, slots)
        ev = decode_buffer(ring.unroll(rec, heads, direct_header(n_programs, slots))[0]).events
        bad = int((ev["end"] < ev["start"]).sum())
        if int(heads.sum()) != expected + signals or not len(ev) or bad:
            raise SystemExit(f"{name}: ring heads sum to {int(heads.sum())} slots (expected {expected + signals}), "
                             f"{len(ev)} events kept, {bad} ending before their start")
        return None
    d = decode(buf, n_programs, capacity)
    ev = d.events
    bad = int((ev["end"] < ev["start"]).sum()) if len(ev) else 0
    if capacity == 1:  # (the control whose records count dropped: a WAIT or NOTIFY needs two slots, a span one)
        keep = 0 if expected == signals else n_programs  # (at most each lane's first span fits)
        if d.written > keep or d.written + d.dropped != expected:
            raise SystemExit(f"{name}: one slot per lane kept {d.written} events and counted {d.dropped} dropped "
                             f"(expected {expected} in all, at most {keep} kept)")
        return None
    if d.written != expected or d.dropped or bad:
        raise SystemExit(f"{name}: decoded {d.written} events (expected {expected}), {d.dropped} dropped, {bad} ending before their start")
    w = ev[ev["kind"] == schema.EventKind.WAIT]
    return float(w["arg1"].mean()) if len(w) else None


def note_spins(rows: list[dict], name: str, spins: float | None) -> None:
    for r in rows:
        if r["variant"] == name and spins is not None:
            r["spins_per_wait"] = spins


def variant_launchers(kernel, variants: dict, grid, args_fn, slots_fn, n_programs: int, device, num_warps: int, fixed: dict):
    """name -> (launch(), buffer, slots) for each variant; ``args_fn(epoch)`` gives the runtime args."""
    import torch

    from instrumented_kernels import harness as H

    out = {}
    ep = fixed.pop("_epochs")
    for name, sw in variants.items():
        k, sw = kernel_for(kernel, sw)
        if not is_traced(name, sw):  # untraced (diagnostics too)
            def fn(sw=sw, k=k):
                k[grid](*args_fn(ep.next()), **fixed, **sw, num_warps=num_warps, **LAUNCH_OPTS)
            out[name] = (fn, None, 0)
            continue
        ring = variants[name].get("RING", 0)
        if ring:  # ring mode: RING slots per lane, KTRACE the ring's gate (``check_records`` reads the heads)
            slots = schema.ring_gate(ring)
            buf = H.ring_buffer(n_programs, device, ring)
        else:
            slots = variants[name].get("SLOTS") or slots_fn(sw)
            pad = variants[name].get("PAD", 0) // 8  # (placement experiment: the buffer starts PAD bytes into its allocation)
            buf = H.trace_buffer(n_programs, slots, device) if not pad else \
                torch.zeros(pad + (schema.buffer_bytes(n_programs, slots) + 7) // 8, dtype=torch.int64, device=device)[pad:]

        def fn(sw=sw, buf=buf, slots=slots, k=k):
            k[grid](*args_fn(ep.next()), **fixed, **sw, num_warps=num_warps, ktrace_buf=buf, KTRACE=slots, **LAUNCH_OPTS)

        out[name] = (fn, buf, slots)
    return out


def time_case(dist, H, case: str, launchers: dict, reps: int, warmup: int, batch: int, handoffs: int, plans=()) -> list[dict]:
    """Compile every variant on every rank, run each once, then time them interleaved."""
    import torch

    with H.compile_only(*plans):
        for fn, _, _ in launchers.values():
            fn()
    barrier(dist)
    t = H.time_interleaved({k: v[0] for k, v in launchers.items()}, reps, warmup, dist=dist, batch=batch, hold_cycles=HOLD_CYCLES)
    torch.cuda.synchronize()
    rows = []
    u = t["untraced"]
    for name in launchers:
        tv = t[name]
        row = {"case": case, "variant": name, "median_us": tv.median_us, "p10_us": tv.p10_us, "p90_us": tv.p90_us, "handoffs": handoffs}
        if name != "untraced":
            med, p10, p90 = H.paired_ratio(t, name, "untraced")
            row.update(ratio=med, ratio_p10=p10, ratio_p90=p90, extra_ns_per_handoff=1000.0 * (tv.median_us - u.median_us) / handoffs)
        rows.append(row)
    return rows


def barrier(dist) -> None:
    if dist.world_size > 1:
        import torch.distributed as tdist

        tdist.barrier()


def peer_of(dist) -> int:
    """The rank a rank hands off to: its pair (r ^ 1), or itself at 1 rank (producer and consumer
    programs on one GPU)."""
    return dist.rank ^ 1 if dist.world_size > 1 else dist.rank


def launch_fresh(H, fn, buf, out) -> None:
    """One checked launch of a variant after timing: its output poisoned, its trace buffer (if
    any) zeroed, launched, waited for."""
    import torch

    H.poison(out)
    if buf is not None:
        buf.zero_()
    fn()
    torch.cuda.synchronize()


def print_rows(rows: list[dict]) -> None:
    print(f"{'case':<26}{'variant':<20}{'µs (p10-p90)':>26}{'ratio (p10-p90)':>26}{'ns/hand-off':>13}")
    for r in rows:
        if "launches" in r:  # (--suite anatomy)
            print(f"{r['case']:<50}{r['variant']:<20}" + "  ".join(f"{k[:-3]} {r[k]:.0f}" for k in r if k.endswith("_ns") and r[k] is not None)
                  + f"  SMs {r['sms'][:3]}")
            continue
        if "cycles" in r:
            print(f"{r['case']:<26}{r['variant']:<20}{r['cycles']:>14.1f} cycles{r['ns']:>10.1f} ns")
            continue
        us = f"{r['median_us']:.2f} ({r['p10_us']:.2f}-{r['p90_us']:.2f})"
        ratio = f"{r['ratio']:.4f}" + (f" ({r['ratio_p10']:.4f}-{r['ratio_p90']:.4f})" if "ratio_p10" in r else "") if "ratio" in r else "-"
        extra = f"{r['extra_ns_per_handoff']:+.1f}" if "extra_ns_per_handoff" in r else ""
        tail = f"  {r['spins_per_wait']:.2f} reads/wait" if "spins_per_wait" in r else ""
        if "extra_ns_min" in r:
            tail += f"  ({r['extra_ns_min']:+.1f} to {r['extra_ns_max']:+.1f} ns over the delays)"
        if "dispatch_us" in r:
            tail += f"  dispatch {r['dispatch_us']:.1f} µs combine {r['combine_us']:.1f} µs"
            if "dispatch_ratio" in r:
                tail += f" (ratios {r['dispatch_ratio']:.4f} / {r['combine_ratio']:.4f})"
        print(f"{r['case']:<26}{r['variant']:<20}{us:>26}{ratio:>26}{extra:>13}{tail}")
    sys.stdout.flush()
