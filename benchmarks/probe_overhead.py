"""Probe overhead on the design brief's worst case: a 64 Mi-element fp32 copy, 1024 elements per
program (65,536 programs), one span per program; and a denser case, 4 spans per program.

Every variant is timed side by side in one run: the launches are interleaved round-robin
(untraced, traced, untraced, traced, ...) and each is timed with CUDA events; medians over
``--reps`` repetitions after ``--warmup`` ones. Ratios are traced / untraced medians.

Variants:
    untraced      KTRACE=0: the kernel with its probes compiled away
    traced        KTRACE=N with a preallocated buffer (the kernel's own cost)
    decorated     through @ktrace.trace inside ktrace.capture(): adds the per-launch buffer
                  allocation and memset, i.e. what a user's step pays
    proton        Triton's Proton instrumentation (enter/exit scope) on the same copy, with
                  its own untraced baseline timed in the same phase, when Proton runs here

    python benchmarks/probe_overhead.py [--reps 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
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
    for r in range(reps):
        for n in names:
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

        session = ktrace.capture()
        session.__enter__()

        def decorated(s=spans):
            traced_copy[grid](x, y, BLOCK=block, SPANS=s)

        try:
            t = _median_times({"untraced": untraced, "traced": traced, "decorated": decorated}, reps, warmup)
        finally:
            session.__exit__(None, None, None)
        # correctness of what was timed: the copy is right and the buffer holds one span per slot
        y.fill_(float("nan"))
        traced()
        torch.cuda.synchronize()
        if not torch.equal(x, y):
            raise SystemExit("traced copy is wrong")
        from ktrace.decode import decode_buffer
        import numpy as np

        raw = buf.cpu().numpy().view(np.uint8)[: schema.buffer_bytes(P, spans)].copy()
        raw[:64] = np.frombuffer(
            schema.Header(timer=schema.TimerKind.NV_GLOBALTIMER, tick_hz=10**9, capacity=spans, n_programs=P, grid=(P, 1, 1)).to_bytes(),
            np.uint8,
        )
        d = decode_buffer(raw)
        if d.written != P * spans or d.dropped:
            raise SystemExit(f"expected {P * spans} events, decoded {d.written} (+{d.dropped} dropped)")
        n_dec = sum(ln.decode(0).written for ln in session.to_capture().ranks[0].launches)
        t["decorated_events_decoded"] = n_dec
        t["ratio_traced"] = t["traced"]["median_us"] / t["untraced"]["median_us"]
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--elems", type=int, default=64 * 2**20)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--proton-only", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-proton", action="store_true", help="skip the Proton reference")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_overhead: needs a GPU", file=sys.stderr)
        return 2
    if a.proton_only is not None:
        x = torch.randn(a.elems, device="cuda")
        print(json.dumps(_proton(x, torch.empty_like(x), (a.elems // a.block,), a.block, a.reps, a.warmup, a.proton_only)))
        return 0
    r = run(a.reps, a.warmup, a.elems, a.block)
    print(f"device: {r['device']}  copy of {r['n_elems']} fp32, {r['programs']} programs, median of {r['reps']} after warm-up")
    print(f"{'case':<22}{'untraced µs':>12}{'traced µs':>12}{'ratio':>8}{'decorated µs':>14}{'ratio':>8}")
    for s in (1, 4):
        t = r[f"spans_{s}"]
        print(
            f"{f'{s} span(s)/program':<22}{t['untraced']['median_us']:>12.1f}{t['traced']['median_us']:>12.1f}"
            f"{t['ratio_traced']:>8.4f}{t['decorated']['median_us']:>14.1f}{t['ratio_decorated']:>8.4f}"
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
