"""The Gluon GEMM and ``ktrace.gluon``'s probes on a GPU (H100/H200), in one run.

    python3 -m instrumented_kernels.gluon_gemm.gpu_checks OUT_DIR [--memcheck]

Writes ``OUT_DIR/results.json`` (every check and figure) and the captures the CPU tests use
(``gluon_gemm.ktrace``: the GEMM traced; ``gluon_gemm_slow_loader.ktrace``: the same with the
loader slowed on purpose; ``gluon_handoff.ktrace``: the probe kernel). ``--memcheck`` runs the
small traced cases only (for ``compute-sanitizer --tool memcheck``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback

import numpy as np


def _expected_slots(seq, cap):
    """Written and dropped events of a lane whose probes take ``seq`` slots each, in order, with
    ``cap`` slots (an event that does not fit whole is dropped; the cursor still advances)."""
    cur = written = dropped = 0
    for n in seq:
        if cur + n <= cap:
            written += 1
        else:
            dropped += 1
        cur += n
    return written, dropped


def probes(out, res):
    import torch

    import ktrace
    from tests import gluon_probe_kernels as gpk

    n_iters, progs = 10, 3
    x = torch.zeros(4, dtype=torch.int32, device="cuda")
    r = {}
    for cap in (64, 16, 7):
        k = ktrace.trace(gpk.handoff_kernel, events_per_program=cap, lanes=(gpk._consumer, gpk._producer))
        with ktrace.capture() as c:
            k[(progs,)](x, n_iters, num_warps=4)
        if cap == 64:
            c.save(os.path.join(out, "gluon_handoff.ktrace"))
        d = ktrace.decode_buffer(c.launches[0].raw)
        ev = d.events
        # consumer: wait (2 slots), mark, counter, arrive (2); producer: wait (2), span, arrive (2)
        want = {0: _expected_slots([2, 1, 1, 2] * n_iters, cap), 1: _expected_slots([2, 1, 2] * n_iters, cap)}
        got = {}
        for lane in (0, 1):
            for p in range(progs):
                m = (ev["program"] == p) & (ev["lane"] == lane)
                got[(lane, p)] = (int(m.sum()), int(d.dropped_per_program[p * 2 + lane]))
        ok = all(got[(l, p)] == want[l] for l in (0, 1) for p in range(progs))
        r[f"cap{cap}"] = {"ok": ok, "want": {str(k): v for k, v in want.items()}, "got": {f"{l}/{p}": v for (l, p), v in got.items()},
                          "end_ge_start": bool((ev["end"] >= ev["start"]).all()), "sms": sorted(set(int(h) for h in ev["hw"]))[:8]}
    res["probes"] = r


def flags(out, res):
    """The communication partition over the symmetric heap at one rank (peer = itself): every
    program's notifies pair with its waiter's wait (rule 1, across lanes), nothing times out."""
    import torch

    import ktrace
    from instrumented_kernels import harness as H
    from tests import gluon_probe_kernels as gpk

    d = H.setup()
    heap = H.heap(1 << 16)
    progs, rounds = 4, 5
    fl = heap.zeros(progs, dtype=torch.int32)
    k = ktrace.trace(gpk.flag_kernel, events_per_program=32, lanes=(gpk._waiter, gpk._comm))
    with ktrace.capture(heap=heap) as c:
        k[(progs,)](fl, heap.rank, heap.rank, heap.rank, heap.bases, rounds, num_warps=4)
    torch.cuda.synchronize()
    c.save(os.path.join(out, "gluon_flags.ktrace"))
    ev = c.events()
    n, w, un, uw = ktrace.pair_table(ev)
    res["flags"] = {"flags": fl.tolist(), "waits": int((ev["kind"] == 4).sum()), "notifies": int((ev["kind"] == 5).sum()),
                    "pairs": int(n.size), "unmatched_waits": int(uw), "timeouts": int(((ev["flags"] & 2) != 0).sum()),
                    "ok": bool(fl.tolist() == [rounds] * progs and n.size == progs and uw == 0), "rank": d.rank}


def scatter(out, res):
    """The GEMM + all-scatter at one rank (peer = itself): output vs torch (poisoned first),
    traced and not; every wait paired (mbarrier waits by rule 3, the flag waits by rule 1)."""
    import torch

    import ktrace
    from instrumented_kernels import harness as H
    from instrumented_kernels.gluon_gemm import reference as R
    from instrumented_kernels.gluon_gemm.scatter import GluonGemmScatter

    H.setup()
    r = {}
    for M, N, K in ((512, 512, 1024), (1000, 1096, 1000)):
        heap = H.heap(2 * M * N * 2 + (1 << 20))
        inp = R.generate_input(0, 1, 3, M, N, K)
        ref = R.reference(0, 1, 3, M, N, K)
        plan = GluonGemmScatter(heap, M, N, K, programs=8)
        for traced in (False, True):
            H.poison(plan.C)
            heap.barrier()
            if traced:
                with ktrace.capture(heap=heap) as c:
                    C = plan(inp["A"], inp["B"], traced=True)
            else:
                C = plan(inp["A"], inp["B"])
            torch.cuda.synchronize()
            heap.check()
            e = H.rel_err(C, ref)
            r[f"{M}x{N}x{K}/{'traced' if traced else 'untraced'}"] = {"rel_err": e, "ok": e <= R.TOL}
        if M == 512:
            c.save(os.path.join(out, "gluon_gemm_scatter.ktrace"))
            ev = c.events()
            n, w, _, uw = ktrace.pair_table(ev)
            r["pairs"] = {"pairs": int(n.size), "unmatched_waits": int(uw), "waits": int((ev["kind"] == 4).sum()),
                          "flag_pairs": int(((ev["flags"][w] & 4) == 0).sum()), "lanes": sorted(set(ev["lane"].tolist()))}
    res["scatter"] = r


def gemm_checks(out, res, memcheck):
    import torch

    import ktrace
    from instrumented_kernels import harness as H
    from instrumented_kernels.gluon_gemm import reference as R
    from instrumented_kernels.gluon_gemm.kernel import GluonGemm, GluonGemmConfig

    shapes = R.SHAPES["test"] if memcheck else R.SHAPES["test"] + [{"M": 4096, "N": 4096, "K": 4096}]
    r = {}
    for sh in shapes:
        M, N, K = sh["M"], sh["N"], sh["K"]
        seed = H.fresh_seed()
        inp = R.generate_input(0, 1, seed, M, N, K)
        ref = R.reference(0, 1, seed, M, N, K)
        for name, cfg, traced in (("untraced", GluonGemmConfig(), False), ("traced_stage", GluonGemmConfig(stage_probes=True), True),
                                  ("traced_tile", GluonGemmConfig(stage_probes=False), True)):
            g = GluonGemm(M, N, K, cfg)
            C = H.poison(torch.empty((M, N), dtype=torch.float16, device="cuda"))
            if traced:
                with ktrace.capture():
                    g(inp["A"], inp["B"], C, traced=True)
            else:
                g(inp["A"], inp["B"], C)
            torch.cuda.synchronize()
            e = H.rel_err(C, ref)
            r[f"{M}x{N}x{K}/{name}"] = {"rel_err": e, "ok": e <= R.TOL}
    # drop counts: a small buffer drops exactly what an ample one records beyond it
    M, N, K = 512, 512, 1024
    inp = R.generate_input(0, 1, 7, M, N, K)
    counts = {}
    for cap in (None, 40):
        g = GluonGemm(M, N, K, GluonGemmConfig(stage_probes=True), programs=8, events_per_lane=cap)
        C = torch.empty((M, N), dtype=torch.float16, device="cuda")
        with ktrace.capture() as c:
            g(inp["A"], inp["B"], C, traced=True)
        d = ktrace.decode_buffer(c.launches[0].raw)
        ev = d.events
        slots = np.zeros(d.dropped_per_program.size, np.int64)
        np.add.at(slots, ev["program"] * 3 + ev["lane"], 1)
        counts[cap] = (slots, d.dropped_per_program.astype(np.int64), d.header.capacity)
    full, _, _ = counts[None]
    small, dropped, cap = counts[40]
    r["drops"] = {"ok": bool((small + dropped == full).all() and dropped.sum() > 0), "capacity": int(cap),
                  "written_small": int(small.sum()), "dropped": int(dropped.sum()), "written_full": int(full.sum())}
    res["gemm"] = r


def captures(out, res):
    import torch

    import ktrace
    from instrumented_kernels.gluon_gemm import reference as R
    from instrumented_kernels.gluon_gemm.kernel import GluonGemm, GluonGemmConfig

    M, N, K = 512, 512, 1024
    inp = R.generate_input(0, 1, 11, M, N, K)
    r = {}
    for name, delay, stage in (("gluon_gemm", 0, True), ("gluon_gemm_slow_loader", 2000, True), ("gluon_gemm_tile", 0, False)):
        g = GluonGemm(M, N, K, GluonGemmConfig(loader_delay_ns=delay, stage_probes=stage), programs=8)
        C = torch.empty((M, N), dtype=torch.float16, device="cuda")
        g(inp["A"], inp["B"], C, traced=False)  # compiled before the capture
        with ktrace.capture() as c:
            g(inp["A"], inp["B"], C, traced=True)
        path = c.save(os.path.join(out, f"{name}.ktrace"))
        r[name] = {"bytes": os.path.getsize(path), "events": int(c.events().size)}
    res["captures"] = r


def bench(out, res):
    import torch

    from instrumented_kernels import harness as H
    from instrumented_kernels.common_gemm import matmul
    from instrumented_kernels.gluon_gemm import reference as R
    from instrumented_kernels.gluon_gemm.kernel import GluonGemm, GluonGemmConfig

    reps = int(os.environ.get("GLUON_BENCH_REPS", "100"))
    batch = int(os.environ.get("GLUON_BENCH_BATCH", "1"))  # launches between a callable's two events
    # GLUON_BEFORE=module: also time the traced launch of an earlier copy of kernel.py
    before = importlib.import_module(os.environ["GLUON_BEFORE"]) if os.environ.get("GLUON_BEFORE") else None
    r = {"device": torch.cuda.get_device_name(), "reps": reps, "batch": batch}
    for sh in R.SHAPES["bench"]:
        M, N, K = sh["M"], sh["N"], sh["K"]
        inp = R.generate_input(0, 1, 5, M, N, K)
        A, B = inp["A"], inp["B"]
        C = torch.empty((M, N), dtype=torch.float16, device="cuda")
        tile = GluonGemm(M, N, K, GluonGemmConfig(stage_probes=False)).direct(A, B, C)
        stage = GluonGemm(M, N, K, GluonGemmConfig(stage_probes=True)).direct(A, B, C)
        fns = {"untraced": tile.untraced, "untraced_twin": tile.untraced, "traced_tile": tile.traced,
               "traced_stage": stage.traced, "triton_gemm": lambda: matmul(A, B, out=C),
               "torch": lambda: torch.matmul(A, B, out=C)}
        if os.environ.get("GLUON_ATTRIBUTE"):  # the default density recorded in one partition only
            for lane, part in enumerate(("mma", "loader", "epilogue")):
                fns[f"traced_{part}_only"] = GluonGemm(M, N, K, GluonGemmConfig(stage_probes=False, traced_lanes=1 << lane)).direct(A, B, C).traced
            # every probe runs, every record is counted dropped (one slot per lane): the stores' share
            fns["traced_tile_all_dropped"] = GluonGemm(M, N, K, GluonGemmConfig(stage_probes=False), events_per_lane=1).direct(A, B, C).traced
        if before:  # the same launch with an earlier copy of the kernel module (a before/after run)
            fns["traced_tile_before"] = before.GluonGemm(M, N, K, before.GluonGemmConfig(stage_probes=False)).direct(A, B, C).traced
        t = H.time_interleaved(fns, reps=reps, warmup=10, batch=batch)
        row = {n: {"median_us": x.median_us, "p10_us": x.p10_us, "p90_us": x.p90_us} for n, x in t.items()}
        for n in [k for k in fns if k != "untraced"]:
            row[f"{n}/untraced"] = H.paired_ratio(t, n, "untraced")
        if before:
            row["traced_tile/traced_tile_before"] = H.paired_ratio(t, "traced_tile", "traced_tile_before")
        row["tflops_untraced"] = 2 * M * N * K / t["untraced"].median_us / 1e6
        row["buffer_bytes"] = {"tile": tile.buffer.numel() * 8, "stage": stage.buffer.numel() * 8}
        r[sh["name"]] = row
    res["bench"] = r


def main():
    out = sys.argv[1]
    memcheck = "--memcheck" in sys.argv
    os.makedirs(out, exist_ok=True)
    res = {}
    only = os.environ.get("GLUON_STEPS")
    steps = [probes, lambda o, r: gemm_checks(o, r, memcheck)] + ([] if memcheck else [flags, scatter, captures, bench])
    if only and not memcheck:  # e.g. GLUON_STEPS=scatter
        gemm = lambda o, r: gemm_checks(o, r, memcheck)  # noqa: E731
        steps = [{"probes": probes, "gemm": gemm, "flags": flags, "scatter": scatter, "captures": captures, "bench": bench}[k]
                 for k in only.split(",")]
    for step in steps:
        t0 = time.time()
        try:
            step(out, res)
        except Exception:
            res.setdefault("errors", []).append(traceback.format_exc())
            traceback.print_exc()
        print(f"step done in {time.time() - t0:.1f}s", flush=True)
    name = "results_memcheck.json" if memcheck else "results.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(res, f, indent=1, default=str)
    print(json.dumps(res, indent=1, default=str)[:6000])


if __name__ == "__main__":
    main()
