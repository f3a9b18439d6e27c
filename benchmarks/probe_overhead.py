"""Probe overhead: the design brief's worst case (a copy) and hand-off-bound kernels.

The command; each suite is a module of ``benchmarks/probe_suites`` (its harness:
``probe_suites.common`` and ``probe_suites.cases``).

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
import importlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from probe_suites import ONE_GPU, ONE_RANK, SUITES  # noqa: E402


def _one_gpu_rows(suite: str, reps: int) -> list[dict]:
    """Rows of a suite that runs on one GPU in one process (``local``, ``cost``)."""
    from probe_suites import cost, local

    return local.rows(reps) if suite == "local" else cost.rows()


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
    ap.add_argument("--hook", default=None, help="hook suite: module:function giving rows (see probe_suites.hook)")
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
        from probe_suites import copy

        a.reps = a.reps or 200
        a.warmup = 20 if a.warmup is None else a.warmup
        return copy.main(a)
    if "copy" in suites:
        ap.error("run the copy suite on its own")
    reps, warmup = a.reps or 30, 5 if a.warmup is None else a.warmup
    from probe_suites import common

    if a.maxnreg:
        common.LAUNCH_OPTS["maxnreg"] = a.maxnreg
    rows: list[dict] = []
    if set(suites) <= set(ONE_GPU):
        for x in suites:
            rows += _one_gpu_rows(x, reps)
        print(f"device: {torch.cuda.get_device_name()}, one GPU; medians of {reps} after warm-up")
        common.print_rows(rows)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
        return 0
    from instrumented_kernels import harness as H

    if "RANK" in os.environ or "SLURM_PROCID" in os.environ:
        dist = H.setup()
    else:  # one rank, no launcher: the hand-off suite between programs of this GPU
        dist = H.Dist(0, 1, torch.device("cuda", torch.cuda.current_device()))
        if not set(suites) <= set(ONE_RANK):
            raise SystemExit(f"--suite {a.suite}: a2a needs 2 ranks (python -m ktrace.testing.launch -n 2 -- ...)")
    if dist.world_size > 1 and dist.world_size % 2:
        raise SystemExit(f"--suite {a.suite} needs one rank or an even number of ranks (pairs r, r ^ 1), got {dist.world_size}")
    for x in suites:
        if x in ONE_GPU:
            if dist.rank == 0:  # one-GPU suites, on rank 0 while the others wait
                rows += _one_gpu_rows(x, reps)
        else:
            suite = importlib.import_module(f"probe_suites.{x}")
            if x == "a2a":
                rows += suite.rows(dist, H, reps, warmup, a.baseline)
            elif x == "handoff":
                rows += suite.rows(dist, H, reps, warmup, a.quick, tuple(a.parts.split(",")), shapes)
            elif x == "hook":
                rows += suite.rows(a.hook or "", dist, H, reps, warmup)
            else:
                rows += suite.rows(dist, H, reps, warmup)
        if dist.rank == 0:
            print(f"[{x} done]", flush=True)
    if dist.rank == 0:
        opts = common.LAUNCH_OPTS
        print(f"device: {H.device_name()} x {dist.world_size} ranks{f', every variant compiled with {opts}' if opts else ''}; "
              f"medians of {reps} interleaved repetitions after "
              f"{warmup} warm-up; per repetition the slowest rank; ratio = variant / untraced, paired per repetition")
        common.print_rows(rows)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"device": H.device_name(), "world_size": dist.world_size, "launch_opts": opts, "rows": rows}, f, indent=1)
    if dist.world_size > 1:
        import torch.distributed as tdist

        tdist.barrier()
        tdist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
