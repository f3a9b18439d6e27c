"""Probe overhead: the design brief's worst case (a copy) and hand-off-bound kernels.

``--suite copy`` (one GPU, the default): a 64 Mi-element fp32 copy, 1024 elements per program
(65,536 programs), one span per program; and a denser case, 4 spans per program. Launches are
interleaved in a fresh random order each repetition and each is timed with CUDA events; medians over ``--reps`` repetitions
after ``--warmup`` ones; ratios are traced / untraced medians. Variants:

    untraced      KTRACE=0: the kernel with its probes compiled away
    traced        KTRACE=N with a preallocated buffer (the kernel's own cost)
    decorated     through @ktrace.trace inside ktrace.capture(): adds the per-launch buffer
                  allocation and memset, i.e. what a user's step pays
    proton        Triton's Proton instrumentation (enter/exit scope) on the same copy, with
                  its own untraced baseline timed in the same phase, when Proton runs here

Hand-off-bound suites (``benchmarks/handoff_kernels.py``). At one rank (no launcher: producer
and consumer programs on one GPU, the peer is the rank itself) or two (launched with
``python -m ktrace.testing.launch -n 2 -- python benchmarks/probe_overhead.py --suite ...``):

    handoff   a ping-pong (500 round trips between two programs at one rank, 200 between two
              ranks), a tile pipeline ({8, 32} tiles x {8K, 64K} fp32 elements per launch) and a
              fan-in (one program per SM, 50 rounds), each untraced (and an untraced twin: the
              noise floor) and with one probe kind switched on at a time ("waits", "notifies",
              "signals" = both, "spans", "marks", "counters", "all", and "on, no probe": tracing
              on, no probe executed; the ping-pong also pairs: "all but marks", "signals +
              marks", "spans + marks"). Traced variants run the kernel as ``@ktrace.trace``
              prepares it (records deferred, ``kl.finish`` appended); ", immediate" variants run
              it as written (each record stored by its probe: the old path), side by side.
              ", backoff" variants sleep 200 ns between a waiter's reads (schedule experiment);
              ", check 8" variants read the error word every 8th read (``ks.wait(check_every=8)``);
              ", ring" variants record in ring mode. Two more cases: the ping-pong with a
              pseudo-random 0-4,096-cycle delay after each wait ("jitter": the polling phase
              averaged inside a launch) and the pipeline with its consumer on program SMs / 2
              (another part of the GPU than the producer). Pipeline controls: the buffer 1 MiB
              further, the lanes 128 KiB apart, one slot per lane (every record counted dropped,
              nothing stored; spans: all but each lane's first), one program's spans only, the
              spans' timer reads alone. Reads per wait come from the WAIT records. ``--parts``
              and ``--shapes`` pick cases and pipeline shapes; ``--maxnreg N`` compiles every
              variant, the untraced one too, under one register bound (the control that
              separates ptxas's scheduling of the copy loops from the probes' cost).
    small     fixed costs of a launch of a few microseconds (``handoff_kernels.burst``: a few programs,
              one block copied each, as a small all-reduce at one rank): one span, as prepared and as
              written; the same record made by hand with its lane's address computed before or after
              the copy; each into a buffer next to the output or far from it; the span's timer reads
              alone; tracing on with no probe; 4 programs and one per SM
    anatomy   the pipeline's traced variants decoded launch by launch (the producer's period and
              release, the consumer's flag latency and copy, the SMs they ran on), with the
              consumer on programs 1, 2, 7 and 66
    phase     the ping-pong's polling-phase sweep: each probe kind and its own untraced run at 25
              extra delays (0-1,200 SM cycles after each wait), and per kind the cost averaged
              over the delays (docs/probes.md, "A hand-off's cost, phase averaged")
    diag      the ping-pong with raw operations at the hand-off instead of probes
              (handoff_kernels.DIAG_NAMES): what a store or a timer read costs there
    notify    the ping-pong with its NOTIFY record's timer reads moved (before the barrier, one after the release, none)
    a2a       the MoE all-to-all (GPU MODE shape) with controls: an untraced twin (A/A),
              traced, traced into one slot per program (probes run, nothing stored), each call
              split into dispatch and combine; ``--baseline`` adds all_to_all_single (2 ranks)
    cost      cycles per probe in a loop of 1000 (one GPU; rank 0)
    local     the ping-pong between two programs of one GPU (rank 0; also what ncu profiles)
    hook      rows from another module (``--hook module:function``), e.g. a Gluon GEMM's

Suites combine with commas. Variants of a case are timed side by side by
``instrumented_kernels.harness.time_interleaved`` (a fresh seeded random order each repetition, GPUs lined up before each
batch, the slowest rank per repetition); a ratio is the median over repetitions of that
repetition's variant / untraced time, with its 10th-90th percentile spread. Every variant's
result is checked (received data against the sender's, flag and counter values, no timeout) and
every traced variant's buffer decoded: all events present, none dropped, none ending before it
starts.

    python benchmarks/probe_overhead.py [--reps 200] [--json out.json]          # the copy
    python benchmarks/probe_overhead.py --suite handoff --reps 40                 # one rank
    python -m ktrace.testing.launch -n 2 -- python benchmarks/probe_overhead.py --suite handoff,diag,a2a,cost,local --baseline
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
from instrumented_kernels import harness as H
from ktrace import schema


@triton.jit
def copy_spans(x, y, BLOCK: tl.constexpr, SPANS: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    SUB: tl.constexpr = BLOCK // SPANS
    for j in tl.static_range(SPANS):
        s = kl.begin(kt, "copy", pid, j)
        off = pid * BLOCK + j * SUB + tl.arange(0, SUB)
        tl.store(y + off, tl.load(x + off))
        kt = kl.end(kt, s)


traced_copy = ktrace.trace(copy_spans, events_per_program=lambda meta: meta["SPANS"])


def _median_times(launchers: dict, reps: int, warmup: int) -> dict:
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


def run(reps: int, warmup: int, n_elems: int, block: int) -> dict:
    dev = torch.device("cuda")
    x = torch.randn(n_elems, device=dev)
    y = torch.empty_like(x)
    P = n_elems // block
    grid = (P,)
    results = {"device": torch.cuda.get_device_name(), "n_elems": n_elems, "block": block, "programs": P, "reps": reps}

    for spans in (1, 4):
        buf = torch.zeros((schema.buffer_bytes(P, spans) + 7) // 8, dtype=torch.int64, device=dev)

        def untraced(s=spans):
            copy_spans[grid](x, y, BLOCK=block, SPANS=s)

        def traced(s=spans, b=buf):
            copy_spans[grid](x, y, BLOCK=block, SPANS=s, ktrace_buf=b, KTRACE=s)

        def deferred(s=spans, b=buf):  # as @ktrace.trace prepared it, into the same buffer
            traced_copy.jit_fn[grid](x, y, BLOCK=block, SPANS=s, ktrace_buf=b, KTRACE=s)

        session = ktrace.capture()
        session.__enter__()

        def decorated(s=spans):
            traced_copy[grid](x, y, BLOCK=block, SPANS=s)

        try:
            t = _median_times({"untraced": untraced, "untraced (twin)": untraced, "traced": traced, "deferred": deferred,
                               "decorated": decorated}, reps, warmup)
        finally:
            session.__exit__(None, None, None)
        # correctness of what was timed: the copy is right and the buffer holds one span per slot
        for what, launch in (("traced", traced), ("deferred", deferred)):
            y.fill_(float("nan"))
            buf.zero_()
            launch()
            torch.cuda.synchronize()
            if not torch.equal(x, y):
                raise SystemExit(f"{what} copy is wrong")
            d = _decode(buf, P, spans)
            bad = int((d.events["end"] < d.events["start"]).sum())
            if d.written != P * spans or d.dropped or bad:
                raise SystemExit(f"{what}: expected {P * spans} events, decoded {d.written} (+{d.dropped} dropped, {bad} ending before their start)")
        n_dec = sum(ln.decode(0).written for ln in session.to_capture().ranks[0].launches)
        t["decorated_events_decoded"] = n_dec
        t["ratio_traced"] = t["traced"]["median_us"] / t["untraced"]["median_us"]
        t["ratio_deferred"] = t["deferred"]["median_us"] / t["untraced"]["median_us"]
        t["ratio_twin"] = t["untraced (twin)"]["median_us"] / t["untraced"]["median_us"]
        t["ratio_decorated"] = t["decorated"]["median_us"] / t["untraced"]["median_us"]
        results[f"spans_{spans}"] = t
        del session

    return results


#: Proton configurations tried in order (data structure, mode); the first that runs is reported.
PROTON_CONFIGS = [
    ("tree", None),
    ("trace", None),
    ("tree", "cta-global"),
]


def _proton_mode(name):
    if name is None:
        return None
    import triton.profiler.mode as pm

    return pm.Default(granularity="cta", buffer_type="global")


def _proton_subprocess(args) -> dict:
    """Run the Proton reference in child processes: if Proton crashes, say how, and keep ours."""
    import subprocess

    errors = []
    for k, cfg in enumerate(PROTON_CONFIGS):
        cmd = [sys.executable, __file__, "--proton-only", str(k), "--reps", str(args.reps), "--warmup", str(args.warmup),
               "--elems", str(args.elems), "--block", str(args.block)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode == 0:
            out = json.loads(r.stdout.strip().splitlines()[-1])
            if "error" not in out:
                out["config"] = f"data={cfg[0]} mode={cfg[1] or 'default'}"
                out["failed_configs"] = errors
                return out
            errors.append(f"{cfg}: {out['error']}")
            continue
        sig = f"signal {-r.returncode}" if r.returncode < 0 else f"exit code {r.returncode}"
        tail = (r.stderr or r.stdout).strip().splitlines()[-2:]
        errors.append(f"{cfg}: ended with {sig} {' | '.join(tail)}")
    return {"error": "; ".join(errors)}


def _proton(x, y, grid, block, reps, warmup, config=0) -> dict:
    """Proton's instrumentation on the same copy (one scope per program), if it runs here."""
    try:
        import triton.profiler as proton
        import triton.profiler.language as pl

        pl.enable_semantic("triton")

        @triton.jit
        def copy_proton(x, y, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            pl.enter_scope("copy")
            off = pid * BLOCK + tl.arange(0, BLOCK)
            tl.store(y + off, tl.load(x + off))
            pl.exit_scope("copy")

        @triton.jit
        def copy_plain(x, y, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            off = pid * BLOCK + tl.arange(0, BLOCK)
            tl.store(y + off, tl.load(x + off))

        import tempfile, os

        d = tempfile.mkdtemp()
        data, mode = PROTON_CONFIGS[config]
        proton.start(os.path.join(d, "proton"), backend="instrumentation", data=data, mode=_proton_mode(mode))
        try:
            t = _median_times(
                {"untraced": lambda: copy_plain[grid](x, y, BLOCK=block), "proton": lambda: copy_proton[grid](x, y, BLOCK=block)},
                reps,
                warmup,
            )
        finally:
            proton.finalize()
        t["ratio_proton"] = t["proton"]["median_us"] / t["untraced"]["median_us"]
        return t
    except Exception as e:  # Proton is a reference only: say why it did not run
        return {"error": f"{type(e).__name__}: {e}"}


# ---------------------------------------------------------------------------------------------
# Hand-off-bound suite: ping-pong, tile pipeline, fan-in (2 ranks; benchmarks/handoff_kernels.py)
# ---------------------------------------------------------------------------------------------

#: GPU cycles the stream sleeps before each timed batch (as benchmarks/kernels.py): device time.
HOLD_CYCLES = 5_000_000

#: Probe variants of each hand-off kernel: name -> compile-time switches. "untraced" is KTRACE=0;
#: every other variant is a traced launch (KTRACE = its slots) into a preallocated buffer.
#: Slots per lane of the ring-mode variants (``RING``: the flight recorder's ring, in device memory).
RING = 64
#: The spin reading the error word every 8th read of the flag (``ks.wait(check_every=8)``).
CHECK8 = {"untraced, check 8": {"CHECK": 8}, "signals, check 8": {"WAITS": True, "NOTIFIES": True, "CHECK": 8},
          "all, check 8": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "CHECK": 8}}
PINGPONG_VARIANTS = {
    "untraced": {},
    "untraced (twin)": {},
    "on, no probe": {},
    "waits": {"WAITS": True},
    "notifies": {"NOTIFIES": True},
    "signals": {"WAITS": True, "NOTIFIES": True},
    "spans": {"SPANS": 1},
    "marks": {"MARKS": True},
    "counters": {"COUNTERS": True},
    "all": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "MARKS": True},
    "all but marks": {"WAITS": True, "NOTIFIES": True, "SPANS": 1},
    "signals + marks": {"WAITS": True, "NOTIFIES": True, "MARKS": True},
    "spans + marks": {"SPANS": 1, "MARKS": True},
    "signals, immediate": {"WAITS": True, "NOTIFIES": True, "IMMEDIATE": True},
    "all, immediate": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "MARKS": True, "IMMEDIATE": True},
    "signals, ring": {"WAITS": True, "NOTIFIES": True, "RING": RING},
    "all, ring": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "MARKS": True, "RING": RING},
    **CHECK8,
    "all, check 8": {**CHECK8["all, check 8"], "MARKS": True},  # (the ping-pong's "all" marks too)
}
#: The ping-pong's NOTIFY record with its timer reads moved (``handoff_kernels._notify_timed``):
#: where a traced notify's cost comes from (``--suite notify``).
NOTIFY_VARIANTS = {
    "untraced": {},
    "untraced (twin)": {},
    "notifies": {"NOTIFIES": True},
    "notifies, start read before the barrier": {"NOTIFIES": True, "NOTIFY_T0": 1},
    "notifies, one read after the release": {"NOTIFIES": True, "NOTIFY_T0": 2},
    "notifies, no timer read": {"NOTIFIES": True, "NOTIFY_T0": 3},
    "signals": {"WAITS": True, "NOTIFIES": True},
    "signals, start read before the barrier": {"WAITS": True, "NOTIFIES": True, "NOTIFY_T0": 1},
    "signals, one read after the release": {"WAITS": True, "NOTIFIES": True, "NOTIFY_T0": 2},
    "signals, no timer read": {"WAITS": True, "NOTIFIES": True, "NOTIFY_T0": 3},
}
PIPELINE_VARIANTS = {
    "untraced": {},
    "untraced (twin)": {},
    "on, no probe": {},
    "waits": {"WAITS": True},
    "notifies": {"NOTIFIES": True},
    "signals": {"WAITS": True, "NOTIFIES": True},
    "spans": {"SPANS": 1},
    "all": {"WAITS": True, "NOTIFIES": True, "SPANS": 1},
    "signals, immediate": {"WAITS": True, "NOTIFIES": True, "IMMEDIATE": True},
    "spans, immediate": {"SPANS": 1, "IMMEDIATE": True},
    "all, immediate": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "IMMEDIATE": True},
    "untraced, backoff": {"BACKOFF": 200},
    "signals, backoff": {"WAITS": True, "NOTIFIES": True, "BACKOFF": 200},
    "signals, ring": {"WAITS": True, "NOTIFIES": True, "RING": RING},
    "all, ring": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "RING": RING},
    "signals, buffer +1 MiB": {"WAITS": True, "NOTIFIES": True, "PAD": 1 << 20},
    "signals, lanes 128 KiB apart": {"WAITS": True, "NOTIFIES": True, "SLOTS": 4096},
    "signals, one slot (all dropped)": {"WAITS": True, "NOTIFIES": True, "SLOTS": 1},
    "spans, one slot (all but the first dropped)": {"SPANS": 1, "SLOTS": 1},
    "spans, producer only": {"SPANS": 1, "SIDE": 1},
    "spans, consumer only": {"SPANS": 1, "SIDE": 2},
    "spans' timer reads only": {"SPANS": 1, "TIMERS": True},
    **CHECK8,
}
#: The pipeline's variants timed again with the consumer on program ``SMs // 2`` (another part of
#: the GPU than program 0: two neighbouring SMs share bandwidth, and which of the two programs is
#: the slower then depends on the SM pair; docs/probes.md).
PIPELINE_FAR = ("untraced", "untraced (twin)", "on, no probe", "waits", "notifies", "signals", "spans", "all", "signals, ring",
                "all, ring", "signals, one slot (all dropped)")
FANIN_VARIANTS = {
    "untraced": {},
    "untraced (twin)": {},
    "signals": {"WAITS": True, "NOTIFIES": True},
    "spans": {"SPANS": 1},
    "all": {"WAITS": True, "NOTIFIES": True, "SPANS": 1},
    "signals, immediate": {"WAITS": True, "NOTIFIES": True, "IMMEDIATE": True},
    "untraced, backoff": {"BACKOFF": 200},
    "signals, backoff": {"WAITS": True, "NOTIFIES": True, "BACKOFF": 200},
    "signals, ring": {"WAITS": True, "NOTIFIES": True, "RING": RING},
    "all, ring": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "RING": RING},
    **CHECK8,
}
#: Ping-pong with raw operations at each hand-off instead of probes (untraced launches).
DIAG_VARIANTS = {"untraced": {}, **{f"diag {d}": {"DIAG": d} for d in range(1, 7)}}

#: Pipeline shapes: (tiles, fp32 elements per tile).
PIPELINE_SHAPES = [(8, 8192), (32, 8192), (8, 65536), (32, 65536)]

_PREPARED: dict = {}


def _kernel_for(kernel, sw: dict):
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


def _traced(name: str, sw: dict) -> bool:
    return bool(_slots_per_round(sw)) or name == "on, no probe"


#: The probe kinds of the polling-phase sweep.
PHASE_KINDS = {"waits": {"WAITS": True}, "notifies": {"NOTIFIES": True}, "signals": {"WAITS": True, "NOTIFIES": True},
               "all": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "MARKS": True}}


def _phase_name(kind: str, delay: int) -> str:
    """A sweep variant's name; the untraced one at no delay is "untraced" (the case's reference)."""
    return "untraced" if kind == "untraced" and delay == 0 else f"{kind} @{delay}"


def _phase_variants(delays) -> dict:
    """The ping-pong's polling-phase sweep: each probe kind at each extra delay (SM cycles) between
    a wait and the next notify, with its own untraced reference."""
    return {_phase_name(k, d): {**sw, "DELAY": d} for d in delays for k, sw in {"untraced": {}, **PHASE_KINDS}.items()}


#: Extra cycles of the phase sweep: 0 to 1,200 in steps of 50 (past two flag reads at ~1.9 GHz).
PHASE_DELAYS = list(range(0, 1201, 50))
#: The jittered ping-pong: each side waits a pseudo-random 0 to JITTER SM cycles per round (about 2 µs at
#: 1.98 GHz: several flag reads, so the polling phase averages out within a launch).
JITTER_CYCLES = 4096


def _phase_rows(rows: list[dict], delays) -> list[dict]:
    """Each sweep row's cost against its own delay's untraced run (set in place: ratio of the
    medians, ns per hand-off), and per probe kind the cost averaged over the delays (the rows
    returned: ns per hand-off and ratio of the summed times). A ping-pong's hand-off moves by whole
    flag reads with the path's length, so one delay measures where the step falls, and the mean
    over a range of delays measures the path."""
    by = {r["variant"]: r for r in rows}
    for kind in ("untraced", *PHASE_KINDS):
        for d in delays:
            r, u = by[_phase_name(kind, d)], by[_phase_name("untraced", d)]
            r["extra_ns_per_handoff"] = 1000.0 * (r["median_us"] - u["median_us"]) / r["handoffs"]
            r["ratio"] = r["median_us"] / u["median_us"]
            r.pop("ratio_p10", None)  # (the paired percentiles were against the delay-0 run)
            r.pop("ratio_p90", None)
    out = []
    for kind in PHASE_KINDS:
        runs = [(by[_phase_name(kind, d)], by[_phase_name("untraced", d)]) for d in delays]
        diffs = [r["extra_ns_per_handoff"] for r, _ in runs]
        ratio = sum(r["median_us"] for r, _ in runs) / sum(u["median_us"] for _, u in runs)
        out.append({"case": rows[0]["case"] + ", mean over delays", "variant": kind, "median_us": float("nan"), "p10_us": float("nan"),
                    "p90_us": float("nan"), "handoffs": rows[0]["handoffs"], "ratio": ratio, "extra_ns_min": min(diffs), "extra_ns_max": max(diffs),
                    "extra_ns_per_handoff": sum(diffs) / len(diffs)})
    return out


def _slots_per_round(sw: dict) -> int:
    """Event slots one round (ping-pong, fan-in) or tile (pipeline) takes in a program, at most
    (a WAIT or NOTIFY takes two: the event and its DETAIL record)."""
    return 2 * bool(sw.get("WAITS")) + 2 * bool(sw.get("NOTIFIES")) + sw.get("SPANS", 0) + bool(sw.get("MARKS")) + bool(sw.get("COUNTERS"))


def _signals(sw: dict) -> int:
    """WAIT and NOTIFY events one round (ping-pong, fan-in) or tile (pipeline) records."""
    return bool(sw.get("WAITS")) + bool(sw.get("NOTIFIES"))


def _events_per_round(sw: dict) -> int:
    """Events one round of one program records (ping-pong, fan-in)."""
    return bool(sw.get("WAITS")) + bool(sw.get("NOTIFIES")) + sw.get("SPANS", 0) + bool(sw.get("MARKS")) + bool(sw.get("COUNTERS"))


class _Epochs:
    """The launch counter of a case's flags, shared by all its variants (flags are never reset)."""

    def __init__(self):
        self.epoch = 0

    def next(self) -> int:
        self.epoch += 1
        return self.epoch


def _direct_header(n_programs: int, capacity: int) -> "schema.Header":
    """The header of a direct launch's buffer (one-dimensional grid, NVIDIA timer), which the
    launch itself does not write."""
    return schema.Header(timer=schema.TimerKind.NV_GLOBALTIMER, tick_hz=10**9, capacity=capacity, n_programs=n_programs,
                         grid=(n_programs, 1, 1))


def _decode(buf, n_programs: int, capacity: int):
    """Decode a preallocated buffer (the header is written here: a direct launch has none)."""
    import numpy as np

    from ktrace.decode import decode_buffer

    nbytes = schema.buffer_bytes(n_programs, capacity)
    raw = buf.cpu().numpy().view(np.uint8)[:nbytes].copy()
    raw[:64] = np.frombuffer(_direct_header(n_programs, capacity).to_bytes(), np.uint8)
    return decode_buffer(raw)


def _check_records(name: str, buf, n_programs: int, capacity: int, expected: int, signals: int) -> float | None:
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
        ev = decode_buffer(ring.unroll(rec, heads, _direct_header(n_programs, slots))[0]).events
        bad = int((ev["end"] < ev["start"]).sum())
        if int(heads.sum()) != expected + signals or not len(ev) or bad:
            raise SystemExit(f"{name}: ring heads sum to {int(heads.sum())} slots (expected {expected + signals}), "
                             f"{len(ev)} events kept, {bad} ending before their start")
        return None
    d = _decode(buf, n_programs, capacity)
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


def _note_spins(rows: list[dict], name: str, spins: float | None) -> None:
    for r in rows:
        if r["variant"] == name and spins is not None:
            r["spins_per_wait"] = spins


#: Compiler options of every hand-off variant, traced and untraced alike (``--maxnreg``: the same
#: register bound on both sides pins ptxas's schedule of the kernels' copy loops; docs/probes.md).
LAUNCH_OPTS: dict = {}


def _variant_launchers(kernel, variants: dict, grid, args_fn, slots_fn, n_programs: int, device, num_warps: int, fixed: dict):
    """name -> (launch(), buffer, slots) for each variant; ``args_fn(epoch)`` gives the runtime args."""
    import torch

    from instrumented_kernels import harness as H

    out = {}
    ep = fixed.pop("_epochs")
    for name, sw in variants.items():
        k, sw = _kernel_for(kernel, sw)
        if not _traced(name, sw):  # untraced (diagnostics too)
            def fn(sw=sw, k=k):
                k[grid](*args_fn(ep.next()), **fixed, **sw, num_warps=num_warps, **LAUNCH_OPTS)
            out[name] = (fn, None, 0)
            continue
        ring = variants[name].get("RING", 0)
        if ring:  # ring mode: RING slots per lane, KTRACE the ring's gate (``_check_records`` reads the heads)
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


def _time_case(dist, H, case: str, launchers: dict, reps: int, warmup: int, batch: int, handoffs: int, plans=()) -> list[dict]:
    """Compile every variant on every rank, run each once, then time them interleaved."""
    import torch

    with H.compile_only(*plans):
        for fn, _, _ in launchers.values():
            fn()
    _barrier(dist)
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


def _barrier(dist) -> None:
    if dist.world_size > 1:
        import torch.distributed as tdist

        tdist.barrier()


def _peer(dist) -> int:
    """The rank a rank hands off to: its pair (r ^ 1), or itself at 1 rank (producer and consumer
    programs on one GPU)."""
    return dist.rank ^ 1 if dist.world_size > 1 else dist.rank


def _pingpong_case(dist, H, heap, variants: dict, rounds: int, reps: int, warmup: int, case: str) -> list[dict]:
    """Two ranks: one program each. One rank: programs 0 and 1 of one launch (``LOCAL``)."""
    import torch

    import handoff_kernels as hk

    local = dist.world_size == 1
    P = 2 if local else 1
    flag = heap.zeros(2, dtype=torch.int32, name=f"{case}.flag")
    scratch = torch.zeros(16, dtype=torch.int64, device=dist.device)
    heap.barrier()
    ep = _Epochs()
    peer = _peer(dist)
    first = int(dist.rank % 2 == 0)
    launchers = _variant_launchers(
        hk.pingpong, variants, (P,), lambda e: (flag, scratch, rounds, e, dist.rank, peer, first, heap.bases),
        lambda sw: max(1, rounds * _slots_per_round(sw)), P, dist.device, 4, {"_epochs": ep, "LOCAL": local},
    )
    rows = _time_case(dist, H, case, launchers, reps, warmup, 1, 2 * rounds, plans=(ep,))
    torch.cuda.synchronize()
    heap.check()
    seen = flag[:P].tolist()
    _barrier(dist)  # the peer's next launch would move the flag on
    if seen != [ep.epoch * rounds] * P:
        raise SystemExit(f"{case}: flags hold {seen}, expected {ep.epoch * rounds}")
    for name, (fn, buf, slots) in launchers.items():
        if buf is not None:
            buf.zero_()
            fn()
            torch.cuda.synchronize()
            _note_spins(rows, name, _check_records(f"{case}/{name}", buf, P, slots, P * rounds * _events_per_round(variants[name]),
                                                        P * rounds * _signals(variants[name])))
    return rows


def _pipeline_launchers(dist, heap, variants: dict, tiles: int, tile_elems: int, case: str, pair: int, src, out, ep):
    """Allocate the pipeline's heap tensors and make its variants' launchers (``_variant_launchers``),
    program 0 the producer and program ``pair`` the consumer; returns the launchers and the grid
    size."""
    import torch

    import handoff_kernels as hk

    n = tiles * tile_elems
    dst = heap.zeros(2 * n, dtype=torch.float32, name=f"{case}.dst")
    flags = heap.zeros(tiles, dtype=torch.int32, name=f"{case}.flags")
    heap.barrier()
    P = pair + 1
    peer = _peer(dist)
    launchers = _variant_launchers(
        hk.pipeline, variants, (P,), lambda e: (src, dst, out, flags, tiles, tile_elems, e, dist.rank, peer, heap.bases),
        lambda sw: max(1, tiles * _slots_per_round(sw)), P, dist.device, 4, {"_epochs": ep, "BLOCK": 512, "PAIR": pair},
    )
    return launchers, P


def _launch_fresh(H, fn, buf, out) -> None:
    """One checked launch of a variant after timing: its output poisoned, its trace buffer (if
    any) zeroed, launched, waited for."""
    import torch

    H.poison(out)
    if buf is not None:
        buf.zero_()
    fn()
    torch.cuda.synchronize()


def _pipeline_case(dist, H, heap, variants: dict, tiles: int, tile_elems: int, reps: int, warmup: int, case: str,
                   pair: int = 1) -> list[dict]:
    """Program 0 the producer, program ``pair`` the consumer (a grid of ``pair + 1``; the others
    return at once)."""
    import torch

    n = tiles * tile_elems
    seed = H.fresh_seed(dist)
    gen = lambda r: torch.randn(n, generator=torch.Generator(device=dist.device).manual_seed(seed + r), device=dist.device)  # noqa: E731
    src, want = gen(dist.rank), gen(_peer(dist))
    out = H.poison(torch.empty(n, dtype=torch.float32, device=dist.device))
    ep = _Epochs()
    launchers, P = _pipeline_launchers(dist, heap, variants, tiles, tile_elems, case, pair, src, out, ep)
    rows = _time_case(dist, H, case, launchers, reps, warmup, max(1, 256 // tiles), tiles, plans=(ep,))
    for name, (fn, buf, slots) in launchers.items():
        _launch_fresh(H, fn, buf, out)
        heap.check()
        if not torch.equal(out, want):
            raise SystemExit(f"{case}/{name}: the tiles received differ from the peer's source")
        if buf is not None:
            sw = variants[name]  # producer: notify + spans per tile; consumer: wait + spans
            side = 0 if sw.get("TIMERS") else sw.get("SIDE", 3)  # (producer 1, consumer 2: whose spans record)
            sides = bool(side & 1) + bool(side & 2)
            per_tile = bool(sw.get("WAITS")) + bool(sw.get("NOTIFIES")) + sides * sw.get("SPANS", 0)
            _note_spins(rows, name, _check_records(f"{case}/{name}", buf, P, slots, tiles * per_tile, tiles * _signals(sw)))
    return rows


def _fanin_case(dist, H, heap, variants: dict, rounds: int, reps: int, warmup: int, case: str) -> list[dict]:
    import torch

    import handoff_kernels as hk

    CHUNK = 256
    nprog = torch.cuda.get_device_properties(dist.device).multi_processor_count
    dst = heap.zeros(nprog * CHUNK, dtype=torch.float32, name=f"{case}.dst")
    counter = heap.zeros(1, dtype=torch.int32, name=f"{case}.counter")
    heap.barrier()
    seed = H.fresh_seed(dist)
    peer = _peer(dist)
    gen = lambda r: torch.randn(nprog * CHUNK, generator=torch.Generator(device=dist.device).manual_seed(seed + r), device=dist.device)  # noqa: E731
    src, want = gen(dist.rank), gen(peer)
    ep = _Epochs()
    launchers = _variant_launchers(
        hk.fanin, variants, (nprog,), lambda e: (src, dst, counter, rounds, e, dist.rank, peer, nprog, heap.bases),
        lambda sw: max(1, rounds * _slots_per_round(sw)), nprog, dist.device, 4, {"_epochs": ep, "CHUNK": CHUNK},
    )
    rows = _time_case(dist, H, case, launchers, reps, warmup, 4, rounds, plans=(ep,))
    torch.cuda.synchronize()
    heap.check()
    same, seen = torch.equal(dst, want), int(counter.item())
    _barrier(dist)  # the peer's next launch would add to the counter
    if not same:
        raise SystemExit(f"{case}: the chunks received differ from the peer's source")
    if seen != nprog * rounds * ep.epoch:
        raise SystemExit(f"{case}: counter {seen}, expected {nprog * rounds * ep.epoch}")
    for name, (fn, buf, slots) in launchers.items():
        if buf is not None:
            buf.zero_()
            fn()
            torch.cuda.synchronize()
            _note_spins(rows, name, _check_records(f"{case}/{name}", buf, nprog, slots, nprog * rounds * _events_per_round(variants[name]),
                                                        nprog * rounds * _signals(variants[name])))
    return rows


#: ``--suite small``: variants of ``handoff_kernels.burst`` (name -> switches). Every variant writes
#: the same output; ``KTRACE``: slots per program of a traced launch (two, as ``burst``'s hand-made
#: record assumes); the buffer is one of two, the same for every variant that names it: ``near``,
#: carved from the output's own allocation right after it, or ``far``, 32 MiB into an allocation
#: of its own.
SMALL_VARIANTS = {
    "untraced": {},
    "untraced (twin)": {},
    "on, no probe": {"KTRACE": 2, "BUF": "near"},
    "span": {"SPANS": 1, "KTRACE": 2, "BUF": "near"},
    "span, far buffer": {"SPANS": 1, "KTRACE": 2, "BUF": "far"},
    "by hand, lane at the start": {"MANUAL": 2, "BUF": "near"},
    "by hand, lane at the end": {"MANUAL": 1, "BUF": "near"},
    "by hand, lane at the end, far": {"MANUAL": 1, "BUF": "far"},
    "by hand, grid read at the start": {"MANUAL": 3, "BUF": "near"},
    "by hand, stored at the start": {"MANUAL": 4, "BUF": "near"},
    "by hand, lane at the end, no store": {"MANUAL": 5, "BUF": "near"},
    "timer reads only": {"TIMERS": True},
}
#: (programs, bf16 elements per program): a 4 KiB launch (the 4 KiB all-reduce's grid at one rank),
#: and one program per SM moving 1 MiB.
SMALL_SHAPES = [(4, 512), (0, 4096)]


def _small_case(dist, H, programs: int, block: int, reps: int, warmup: int) -> list[dict]:
    """Fixed costs of a traced launch of a few microseconds (``handoff_kernels.burst``: each program
    copies one block, with or without one span): the kernel as ``@ktrace.trace`` prepares it and as
    written, the same record made by hand with its lane's address computed before or after the
    copy, each into a buffer next to the output or far from it, the span's timer reads alone.
    Every output is checked, every record decoded."""
    import torch

    import handoff_kernels as hk

    P = programs or torch.cuda.get_device_properties(dist.device).multi_processor_count
    n = P * block
    case = f"small: {P} programs x {block} bf16"
    x = torch.randn(n, device=dist.device).to(torch.bfloat16)
    scratch = torch.zeros(16, dtype=torch.int64, device=dist.device)
    nb = schema.buffer_bytes(P, 2)
    at = -(-n * 2 // 256) * 256
    whole = torch.zeros(at + nb, dtype=torch.uint8, device=dist.device)  # the output, then the near buffer
    y = whole[: n * 2].view(torch.bfloat16)
    far = torch.zeros(64 << 20, dtype=torch.uint8, device=dist.device)
    bufs = {"near": whole[at : at + nb].view(torch.int64), "far": far[32 << 20 : (32 << 20) + nb].view(torch.int64)}
    launchers, spans = {}, {}
    for name, sw in SMALL_VARIANTS.items():
        sw = dict(sw)
        slots, buf = sw.pop("KTRACE", 0), bufs.get(sw.pop("BUF", ""))
        k, sw = _kernel_for(hk.burst, sw) if slots else (hk.burst, sw)
        kw = {} if buf is None else {"ktrace_buf": buf, **({"KTRACE": slots} if slots else {})}

        def fn(k=k, sw=sw, kw=kw):
            k[(P,)](x, y, n, scratch, BLOCK=block, **sw, **kw, num_warps=8)

        launchers[name] = (fn, buf, 2 if buf is not None else 0)
        spans[name] = bool(sw.get("SPANS")) or sw.get("MANUAL", 0) in (1, 2, 3, 4)
    rows = _time_case(dist, H, case, launchers, reps, warmup, 20, 1)
    for name, (fn, buf, _) in launchers.items():
        _launch_fresh(H, fn, buf, y)
        if not torch.equal(y, x):
            raise SystemExit(f"{case}/{name}: the copy differs from its source")
        if buf is not None:
            _check_records(f"{case}/{name}", buf, P, 2, P if spans[name] else 0, 0)
    return rows  # (one "hand-off" per launch: the extra ns are per launch)


#: ``--suite anatomy``: the pipeline's traced variants whose records show where a tile's time goes.
ANATOMY_VARIANTS = {
    "notifies": {"NOTIFIES": True},
    "signals": {"WAITS": True, "NOTIFIES": True},
    "all": {"WAITS": True, "NOTIFIES": True, "SPANS": 1},
    "notifies + spans": {"NOTIFIES": True, "SPANS": 1},
}


def _anatomy_case(dist, H, heap, tiles: int, tile_elems: int, launches: int, case: str, pair: int = 1) -> list[dict]:
    """Launch each of ``ANATOMY_VARIANTS`` ``launches`` times in a random order, decode every
    buffer, and take per launch the medians over tiles of: the producer's period (its NOTIFY
    starts, tile to tile), its release (NOTIFY end - start: the barrier is before, the fence and
    the atomic between), its put (the producer's span, where recorded); the consumer's flag latency
    (WAIT end - the same tile's NOTIFY end), its copy (its span, or the next WAIT's start - this
    WAIT's end) and the launch's span (last event end - first start). Rows: the median over
    launches of each."""
    import random
    import statistics

    import numpy as np
    import torch

    from ktrace.schema import EventKind

    n = tiles * tile_elems
    src = torch.randn(n, device=dist.device)
    out = torch.empty(n, dtype=torch.float32, device=dist.device)
    launchers, P = _pipeline_launchers(dist, heap, ANATOMY_VARIANTS, tiles, tile_elems, case, pair, src, out, _Epochs())
    per: dict = {name: [] for name in launchers}
    order = [name for name in launchers for _ in range(launches)]
    random.Random(1234).shuffle(order)
    for name in list(launchers) + order:  # (a first launch of each, not kept: compiles)
        fn, buf, slots = launchers[name]
        buf.zero_()
        fn()
        torch.cuda.synchronize()
        per[name].append(_decode(buf, P, slots).events)
    heap.check()
    rows = []
    med = lambda x: float(np.median(x)) if len(x) else float("nan")  # noqa: E731
    for name, evs in per.items():
        m: dict = {k: [] for k in ("period", "release", "put", "flag_latency", "copy", "launch")}
        sms: set = set()
        for ev in evs[1:]:
            nt = ev[(ev["kind"] == EventKind.NOTIFY) & (ev["program"] == 0)]
            wt = ev[(ev["kind"] == EventKind.WAIT) & (ev["program"] == pair)]
            sp0 = ev[(ev["kind"] == EventKind.SPAN) & (ev["program"] == 0)]
            sp1 = ev[(ev["kind"] == EventKind.SPAN) & (ev["program"] == pair)]
            sms.add(tuple(sorted({(int(p), int(h)) for p, h in zip(ev["program"], ev["hw"])})))
            m["period"].append(med(np.diff(nt["start"])))
            m["release"].append(med(nt["end"] - nt["start"]))
            if len(sp0):
                m["put"].append(med(sp0["end"] - sp0["start"]))
            if len(wt) == len(nt) == tiles:
                m["flag_latency"].append(med(wt["end"] - nt["end"]))
            if len(sp1):
                m["copy"].append(med(sp1["end"] - sp1["start"]))
            elif len(wt) == tiles:
                m["copy"].append(med(wt["start"][1:] - wt["end"][:-1]))
            m["launch"].append(float(ev["end"].max() - ev["start"].min()))
        rows.append({"case": case, "variant": name, "launches": len(evs) - 1, "sms": sorted(sms),
                     **{f"{k}_ns": (statistics.median(v) if v else None) for k, v in m.items()}})
    return rows


class OneGpuHeap:
    """The symmetric heap at one rank without torch.distributed: one allocation, its first bytes
    the error block, ``bases`` its one base. Producer and consumer programs share the GPU."""

    def __init__(self, nbytes: int, device):
        import torch

        from ktrace.shmem.symmetric import RESERVED_BYTES

        self._mem = torch.zeros(nbytes + 256, dtype=torch.uint8, device=device)
        off = (-self._mem.data_ptr()) % 256
        self._base = self._mem[off : off + nbytes]
        self._used = -(-RESERVED_BYTES // 256) * 256
        self.bases = torch.tensor([self._base.data_ptr()], dtype=torch.int64, device=device)

    def zeros(self, n: int, dtype, name: str = ""):
        import torch

        nb = n * torch.empty((), dtype=dtype).element_size()
        if self._used + nb > self._base.numel():
            raise MemoryError(f"one-GPU heap full ({name})")
        t = self._base[self._used : self._used + nb].view(dtype)
        self._used += -(-nb // 256) * 256
        return t

    def barrier(self) -> None:
        pass

    def check(self) -> None:
        import torch

        if int(self._base[:4].view(torch.int32)[0].item()):
            raise SystemExit("a wait timed out (one-GPU heap's error block)")


def handoff_suite(dist, H, reps: int, warmup: int, which: str = "handoff", quick: bool = False,
                  parts: tuple = ("pingpong", "pipeline", "fanin"), shapes: list | None = None) -> list[dict]:
    """The hand-off-bound suite (``which="handoff"``) or the ping-pong diagnostics (``"diag"``: raw
    operations at the hand-off; ``"notify"``: the NOTIFY record's timer reads moved).
    At one rank (``dist.world_size == 1``) the peer is the rank itself: the ping-pong runs
    between two programs, the pipeline's producer and consumer are two programs of one GPU.
    ``parts``: which of the ping-pong, the pipeline and the fan-in to time; ``shapes``: the
    pipeline's (tiles, elements per tile), default ``PIPELINE_SHAPES`` (the first alone if ``quick``)."""
    heap = H.heap(64 << 20) if dist.world_size > 1 else OneGpuHeap(64 << 20, dist.device)
    rows: list[dict] = []
    if which == "diag":
        return _pingpong_case(dist, H, heap, DIAG_VARIANTS, 200, reps, warmup, "ping-pong, raw ops")
    if which == "notify":
        rounds = 200 if dist.world_size > 1 else 500
        return _pingpong_case(dist, H, heap, NOTIFY_VARIANTS, rounds, reps, warmup, f"ping-pong x{rounds}, notify timer reads")
    if which == "anatomy":
        return [r for t, e in ((8, 65536), (32, 8192)) for pair in (1, 2, 7, 66) for r in
                _anatomy_case(dist, H, heap, t, e, 30, f"pipeline {t} x {e // 1024}K fp32, consumer {pair}, anatomy", pair)]
    if which == "phase":
        rounds = 200 if dist.world_size > 1 else 500
        rows = _pingpong_case(dist, H, heap, _phase_variants(PHASE_DELAYS), rounds, reps, warmup, f"ping-pong x{rounds}, phase sweep")
        return rows + _phase_rows(rows, PHASE_DELAYS)
    rounds = 200 if dist.world_size > 1 else 500
    if "pingpong" in parts:
        rows += _pingpong_case(dist, H, heap, PINGPONG_VARIANTS, rounds, reps, warmup, f"ping-pong x{rounds}")
        jit = {k: {**v, "JITTER": JITTER_CYCLES} for k, v in PINGPONG_VARIANTS.items() if "ring" not in k and "immediate" not in k}
        rows += _pingpong_case(dist, H, heap, jit, rounds, reps, warmup, f"ping-pong x{rounds}, jitter 0-{JITTER_CYCLES} cycles")
    import torch

    pair = torch.cuda.get_device_properties(dist.device).multi_processor_count // 2  # a consumer far from program 0's SM
    far = {k: PIPELINE_VARIANTS[k] for k in PIPELINE_FAR}
    for tiles, elems in (shapes or (PIPELINE_SHAPES[:1] if quick else PIPELINE_SHAPES)) if "pipeline" in parts else ():
        rows += _pipeline_case(dist, H, heap, PIPELINE_VARIANTS, tiles, elems, reps, warmup, f"pipeline {tiles} x {elems // 1024}K fp32")
        rows += _pipeline_case(dist, H, heap, far, tiles, elems, reps, warmup, f"pipeline {tiles} x {elems // 1024}K fp32, consumer {pair}",
                               pair)
    if "fanin" in parts:
        rows += _fanin_case(dist, H, heap, FANIN_VARIANTS, 50, reps, warmup, "fan-in x50")
    return rows


def _a2a_suite(dist, H, reps: int, warmup: int, baseline: bool) -> list[dict]:
    """The all-to-all (gpumode shape) with controls: an untraced twin (A/A), traced at its default
    density, traced into one slot per program (every probe runs, every record is counted
    dropped), only the dispatch or only the combine traced, each call split into dispatch and
    combine by CUDA events; a fresh random order each repetition. Runs at one rank too (under
    ``ktrace.testing.launch -n 1``: the all-to-all sends to itself)."""
    import torch
    import torch.distributed as tdist

    from instrumented_kernels.all_to_all import baseline as a2a_base
    from instrumented_kernels.all_to_all.kernel import MoEAllToAll, MoEConfig
    from instrumented_kernels.all_to_all.reference import check_combine, expert_scales, generate_input

    W, r = dist.world_size, dist.rank
    sh = {"max_tokens": 256, "hidden": 7168, "num_experts": 256, "topk": 8}
    cfg = MoEConfig(**sh)
    plan = MoEAllToAll(H.heap(MoEAllToAll.heap_bytes(cfg, W)), cfg)
    seed = H.fresh_seed(dist)
    inp = generate_input(r, W, seed, device=dist.device, **sh)
    scales_all = expert_scales(seed, cfg.num_experts, cfg.hidden, dist.device)
    scales = scales_all[r * plan.EL : (r + 1) * plan.EL].contiguous()
    sd, sc = plan.slots("dispatch"), plan.slots("combine")
    bufs = {k: (H.trace_buffer(plan.nprog, n_d, dist.device), H.trace_buffer(plan.nprog, n_c, dist.device), n_d, n_c)
            for k, n_d, n_c in (("traced", sd, sc), ("traced, 1 slot", 1, 1), ("traced dispatch only", sd, sc), ("traced combine only", sd, sc))}
    outs = {}

    def variant(name):
        out = outs.setdefault(name, H.poison(torch.empty_like(inp["x"])))
        kw_d, kw_c = {}, {}
        if name in bufs:
            bd, bc, n_d, n_c = bufs[name]
            kw_d, kw_c = {"ktrace_buf": bd, "ktrace_slots": n_d}, {"ktrace_buf": bc, "ktrace_slots": n_c}
            if name == "traced dispatch only":
                kw_c = {}
            if name == "traced combine only":
                kw_d = {}
        return (lambda: plan.dispatch(inp["x"], inp["topk_idx"], inp["topk_w"], inp["m"], **kw_d)), (lambda: plan.combine(scales, out, **kw_c))

    names = ["untraced", "untraced (twin)", "traced", "traced, 1 slot", "traced dispatch only", "traced combine only"]
    fns = {n: variant(n) for n in names}
    if baseline:
        fns["baseline"] = (lambda: a2a_base.dispatch_combine(inp, scales, r, W, plan.EL), lambda: None)
        names.append("baseline")
    for d, c in fns.values():
        d()
        c()
    torch.cuda.synchronize()
    plan.heap.check()
    for n in outs:
        check_combine(outs[n], inp, scales_all, rank=r)
    batch = 10
    token = torch.zeros(1, device=dist.device)
    samples = {n: ([], []) for n in names}

    def one(n, ev=None):
        torch.cuda._sleep(HOLD_CYCLES)
        tdist.all_reduce(token)
        d, c = fns[n]
        for _ in range(batch):
            if ev is not None:
                ev.append(torch.cuda.Event(enable_timing=True))
                ev[-1].record()
            d()
            if ev is not None:
                ev.append(torch.cuda.Event(enable_timing=True))
                ev[-1].record()
            c()
        if ev is not None:
            ev.append(torch.cuda.Event(enable_timing=True))
            ev[-1].record()

    for w in range(warmup):
        for i in range(len(names)):
            one(names[(w + i) % len(names)])
    torch.cuda.synchronize()
    tdist.barrier()
    recs = {n: [] for n in names}
    for order in H.run_orders(names, reps):  # a fresh random order each repetition
        for n in order:
            ev = []
            one(n, ev)
            recs[n].append(ev)
    torch.cuda.synchronize()
    for n in names:
        for ev in recs[n]:
            disp = sum(ev[2 * k].elapsed_time(ev[2 * k + 1]) for k in range(batch)) * 1000 / batch
            tot = ev[0].elapsed_time(ev[-1]) * 1000 / batch
            samples[n][0].append(disp)
            samples[n][1].append(tot)
    t = torch.tensor([samples[n][0] for n in names] + [samples[n][1] for n in names], dtype=torch.float64, device=dist.device)
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    t = t.tolist()
    k = len(names)
    rows = []
    tot_u, disp_u = t[k], t[0]
    for i, n in enumerate(names):
        tot, disp = t[k + i], t[i]
        comb = [a - b for a, b in zip(tot, disp)]
        comb_u = [a - b for a, b in zip(tot_u, disp_u)]
        q = lambda xs: H._quantiles(xs)  # noqa: E731
        row = {"case": "all-to-all gpumode", "variant": n, "median_us": q(tot)[0], "p10_us": q(tot)[1], "p90_us": q(tot)[2],
               "dispatch_us": q(disp)[0], "combine_us": q(comb)[0]}
        if i:
            row["ratio"], row["ratio_p10"], row["ratio_p90"] = q([a / b for a, b in zip(tot, tot_u)])
            row["dispatch_ratio"] = q([a / b for a, b in zip(disp, disp_u)])[0]
            row["combine_ratio"] = q([a / b for a, b in zip(comb, comb_u)])[0]
        rows.append(row)
    return rows


def _local_suite(reps: int, variants: dict, rounds: int = 500) -> list[dict]:
    """Ping-pong between programs 0 and 1 of one launch on one GPU (no NVLink): a hand-off is an
    L2 round trip, the probes' share is larger; one process, no peer (also for ``ncu``)."""
    import torch

    import handoff_kernels as hk
    from ktrace.shmem.codes import ERROR_BLOCK_BYTES

    dev = torch.device("cuda")
    err = torch.zeros(ERROR_BLOCK_BYTES // 4 + 64, dtype=torch.int32, device=dev)
    bases = torch.tensor([err.data_ptr()], dtype=torch.int64, device=dev)
    flag = torch.zeros(64, dtype=torch.int32, device=dev)[32:]
    scratch = torch.zeros(16, dtype=torch.int64, device=dev)
    ep = _Epochs()
    fns = {}
    for name, sw in variants.items():
        k, sw = _kernel_for(hk.pingpong, sw)
        slots = max(1, rounds * _slots_per_round(sw))
        buf = None if not _traced(name, sw) else torch.zeros((schema.buffer_bytes(2, slots) + 7) // 8, dtype=torch.int64, device=dev)
        extra = {} if buf is None else {"ktrace_buf": buf, "KTRACE": slots}

        def fn(sw=sw, extra=extra, k=k):
            k[(2,)](flag, scratch, rounds, ep.next(), 0, 0, 0, bases, LOCAL=True, **sw, **extra, num_warps=4)

        fns[name] = fn
    t = _median_times(fns, reps, 3)
    torch.cuda.synchronize()
    if int(err[0].item()):
        raise SystemExit("local ping-pong: a wait timed out")
    if int(flag[0].item()) != ep.epoch * rounds:
        raise SystemExit(f"local ping-pong: flag {int(flag[0].item())}, expected {ep.epoch * rounds}")
    rows = []
    u = t["untraced"]["median_us"]
    for name in variants:
        m = t[name]["median_us"]
        rows.append({"case": f"local ping-pong x{rounds}", "variant": name, "median_us": m, "p10_us": t[name]["p10_us"], "p90_us": t[name]["p90_us"],
                     "handoffs": 2 * rounds, "ratio": m / u, "extra_ns_per_handoff": 1000.0 * (m - u) / (2 * rounds)})
    return rows


def _cost_suite() -> list[dict]:
    """Cycles and ns per probe in a loop of 1000 (one program of 4 warps, records kept)."""
    import torch

    import handoff_kernels as hk

    n = 1000
    dev = torch.device("cuda")
    out = torch.zeros(4, dtype=torch.int64, device=dev)
    buf = torch.zeros((schema.buffer_bytes(1, 2 * n) + 7) // 8, dtype=torch.int64, device=dev)
    rows = []
    names = {0: "empty loop", 1: "timer read", 2: "mark", 3: "span (begin + end)", 4: "counter", 5: "wait record", 6: "notify record"}
    for kind, name in names.items():
        res = []
        for _ in range(5):
            hk.probe_cost[(1,)](out, n, KIND=kind, ktrace_buf=buf, KTRACE=2 * n, num_warps=4)
            torch.cuda.synchronize()
            res.append((int(out[0]) / n, int(out[1]) / n))
        res.sort()
        rows.append({"case": "probe in a loop", "variant": name, "cycles": res[2][0], "ns": res[2][1]})
    return rows


def _print_rows(rows: list[dict]) -> None:
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


SUITES = ("copy", "handoff", "phase", "anatomy", "diag", "notify", "small", "a2a", "local", "cost", "hook")


def _hook_suite(spec: str, dist, H, reps: int, warmup: int) -> list[dict]:
    """Rows from another module's benchmark, printed in this table: ``--hook module:function``,
    called as ``function(dist, H, reps, warmup)`` and returning rows shaped like the hand-off
    suite's (``case``, ``variant``, ``median_us``, ``p10_us``, ``p90_us``, and for traced variants
    ``ratio``, ``ratio_p10``, ``ratio_p90``, ``extra_ns_per_handoff``). For kernels written
    elsewhere, e.g. a Gluon GEMM with its own probes, timed with ``H.time_interleaved``."""
    import importlib

    mod, _, fn = spec.partition(":")
    if not fn:
        raise SystemExit(f"--hook wants module:function, got {spec!r}")
    return list(getattr(importlib.import_module(mod), fn)(dist, H, reps, warmup))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="copy",
                    help="comma-separated, of: copy: the worst-case copy (one GPU); handoff: ping-pong, pipeline, fan-in "
                         "(2 ranks, launched with ktrace.testing.launch, or 1 rank without a launcher: programs of one GPU); phase: the "
                         "ping-pong's polling-phase sweep (each probe kind at 25 extra delays); diag: the ping-pong with raw operations instead "
                         "of probes (2 ranks); a2a: the all-to-all with controls (2 ranks); local: ping-pong inside one GPU; "
                         "cost: cycles per probe in a loop (one GPU)")
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions (default 200 for copy, 30 otherwise)")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--elems", type=int, default=64 * 2**20)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="handoff: one pipeline shape only")
    ap.add_argument("--parts", default="pingpong,pipeline,fanin", help="handoff: which cases, comma-separated (default all three)")
    ap.add_argument("--maxnreg", type=int, default=None,
                    help="handoff: compile every variant (untraced too) with this register bound (NVIDIA)")
    ap.add_argument("--shapes", default=None, help="handoff: pipeline shapes as TILESxELEMS, comma-separated (e.g. 8x65536,32x8192)")
    ap.add_argument("--baseline", action="store_true", help="a2a: also time the all_to_all_single baseline in the rotation")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--hook", default=None, help="hook suite: module:function giving rows (see _hook_suite)")
    ap.add_argument("--proton-only", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-proton", action="store_true", help="skip the Proton reference")
    a = ap.parse_args(argv)
    suites = a.suite.split(",")
    bad = set(a.parts.split(",")) - {"pingpong", "pipeline", "fanin"}
    if bad:
        ap.error(f"--parts: unknown {sorted(bad)}; choose from pingpong, pipeline, fanin")
    try:
        shapes = [tuple(int(v) for v in x.split("x")) for x in a.shapes.split(",")] if a.shapes else None
        if shapes and any(len(t) != 2 or min(t) < 1 for t in shapes):
            raise ValueError
    except ValueError:
        ap.error(f"--shapes wants TILESxELEMS[,...], got {a.shapes!r}")
    bad = [x for x in suites if x not in SUITES]
    if bad:
        ap.error(f"unknown suite(s) {bad}; choose from {SUITES}")
    if not torch.cuda.is_available():
        print("probe_overhead: needs a GPU", file=sys.stderr)
        return 2
    if suites == ["copy"]:
        a.reps = a.reps or 200
        a.warmup = 20 if a.warmup is None else a.warmup
        return _copy_main(a)
    if "copy" in suites:
        ap.error("run the copy suite on its own")
    reps, warmup = a.reps or 30, 5 if a.warmup is None else a.warmup
    if a.maxnreg:
        LAUNCH_OPTS["maxnreg"] = a.maxnreg
    rows: list[dict] = []
    if set(suites) <= {"local", "cost"}:
        for x in suites:
            rows += (_local_suite(reps, PINGPONG_VARIANTS) + _local_suite(reps, DIAG_VARIANTS)) if x == "local" else _cost_suite()
        print(f"device: {torch.cuda.get_device_name()}, one GPU; medians of {reps} after warm-up")
        _print_rows(rows)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
        return 0
    from instrumented_kernels import harness as H

    import os

    if "RANK" in os.environ or "SLURM_PROCID" in os.environ:
        dist = H.setup()
    else:  # one rank, no launcher: the hand-off suite between programs of this GPU
        dist = H.Dist(0, 1, torch.device("cuda", torch.cuda.current_device()))
        if not set(suites) <= {"handoff", "phase", "anatomy", "diag", "notify", "small", "hook"}:
            raise SystemExit(f"--suite {a.suite}: a2a needs 2 ranks (python -m ktrace.testing.launch -n 2 -- ...)")
    if dist.world_size > 1 and dist.world_size % 2:
        raise SystemExit(f"--suite {a.suite} needs one rank or an even number of ranks (pairs r, r ^ 1), got {dist.world_size}")
    for x in suites:
        if x == "a2a":
            rows += _a2a_suite(dist, H, reps, warmup, a.baseline)
        elif x in ("handoff", "phase", "anatomy", "diag", "notify"):
            rows += handoff_suite(dist, H, reps, warmup, x, a.quick, tuple(a.parts.split(",")), shapes)
        elif x == "hook":
            rows += _hook_suite(a.hook or "", dist, H, reps, warmup)
        elif x == "small":
            rows += [r for p, b in SMALL_SHAPES for r in _small_case(dist, H, p, b, reps, warmup)]
        elif dist.rank == 0:  # one-GPU suites, on rank 0 while the others wait
            rows += (_local_suite(reps, PINGPONG_VARIANTS) + _local_suite(reps, DIAG_VARIANTS)) if x == "local" else _cost_suite()
        if dist.rank == 0:
            print(f"[{x} done]", flush=True)
    if dist.rank == 0:
        print(f"device: {H.device_name()} x {dist.world_size} ranks{f', every variant compiled with {LAUNCH_OPTS}' if LAUNCH_OPTS else ''}; "
              f"medians of {reps} interleaved repetitions after "
              f"{warmup} warm-up; per repetition the slowest rank; ratio = variant / untraced, paired per repetition")
        _print_rows(rows)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"device": H.device_name(), "world_size": dist.world_size, "launch_opts": LAUNCH_OPTS, "rows": rows}, f, indent=1)
    if dist.world_size > 1:
        import torch.distributed as tdist

        tdist.barrier()
        tdist.destroy_process_group()
    return 0


def _copy_main(a) -> int:
    if a.proton_only is not None:
        x = torch.randn(a.elems, device="cuda")
        print(json.dumps(_proton(x, torch.empty_like(x), (a.elems // a.block,), a.block, a.reps, a.warmup, a.proton_only)))
        return 0
    r = run(a.reps, a.warmup, a.elems, a.block)
    print(f"device: {r['device']}  copy of {r['n_elems']} fp32, {r['programs']} programs, median of {r['reps']} after warm-up")
    print(f"{'case':<22}{'untraced µs':>12}{'twin':>8}{'traced µs':>12}{'ratio':>8}{'deferred µs':>13}{'ratio':>8}{'decorated µs':>14}{'ratio':>8}")
    for s in (1, 4):
        t = r[f"spans_{s}"]
        print(
            f"{f'{s} span(s)/program':<22}{t['untraced']['median_us']:>12.1f}{t['ratio_twin']:>8.4f}{t['traced']['median_us']:>12.1f}"
            f"{t['ratio_traced']:>8.4f}{t['deferred']['median_us']:>13.1f}{t['ratio_deferred']:>8.4f}"
            f"{t['decorated']['median_us']:>14.1f}{t['ratio_decorated']:>8.4f}"
        )
    sys.stdout.flush()
    p = r["proton"] = {"error": "skipped (--no-proton)"} if a.no_proton else _proton_subprocess(a)
    if "error" in p:
        print(f"proton: did not run ({p['error']})")
    else:
        print(f"{'proton 1 scope/program':<22}{p['untraced']['median_us']:>12.1f}{p['proton']['median_us']:>12.1f}{p['ratio_proton']:>8.4f}  ({p['config']})")
        for e in p["failed_configs"]:
            print(f"  proton config that failed first: {e}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
