"""``--suite copy`` (one GPU, the default): the design brief's worst case, a 64 Mi-element fp32 copy with
one span (or four) per program: untraced (and its twin), traced into a preallocated buffer, as
``@ktrace.trace`` prepares it, decorated inside a capture; Proton's instrumentation beside it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
from ktrace import schema

from . import common as C

#: The command that runs this suite (the Proton reference runs in a child process of it).
COMMAND = Path(__file__).resolve().parents[1] / "probe_overhead.py"

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


def run(reps: int, warmup: int, n_elems: int, block: int) -> dict:
    """The copy's variants timed side by side, each traced one's records checked (one span per slot)."""
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
            t = C.median_times({"untraced": untraced, "untraced (twin)": untraced, "traced": traced, "deferred": deferred,
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
            d = C.decode(buf, P, spans)
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
        cmd = [sys.executable, str(COMMAND), "--proton-only", str(k), "--reps", str(args.reps), "--warmup", str(args.warmup),
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
            t = C.median_times(
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


def main(a) -> int:
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
