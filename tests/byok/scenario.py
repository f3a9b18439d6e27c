"""Run the bring-your-own-kernel rings (healthy, a straggler, a skipped signal) and record them.

Started the way users start their programs, at any world size::

    python -m tests.byok.scenario --style plain --fault straggler                   # one GPU
    torchrun --nproc-per-node 4 -m tests.byok.scenario --style asm --fault skip

Without ``--out`` it only runs the kernel (what ``ktrace record -- ...`` traces from outside);
with ``--out DIR`` it records each (style, fault) asked for in-process with
``ktrace.capture(auto=...)`` and writes ``DIR/<style>_<fault>_w<W>.ktrace`` (all ranks, aligned)
with ``.scenario.json`` beside it: what was injected, the outputs checked against a torch
reference (every launch, outputs poisoned first), and per launch the host-timed duration.
``--bench N`` times N traced and N untraced launches of each style, interleaved, and writes
``DIR/bench_w<W>.json``.

The kernels import nothing from ktrace; this driver imports it only to record (and, for the
Iris-style heap, to give its bases in one call: ``ktrace.map_heap``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

STANDINS = Path(__file__).resolve().parent / "standins"
STYLES = ("plain", "asm", "iris")
FAULTS = ("none", "straggler", "skip")
PROGRAMS, TILES, TILE = 8, 4, 256
#: the straggler: the last rank's programs [0, 2) hold back their sends of tiles [1, 3) by this
DELAY_NS = 30_000
DELAY = {"programs": [0, 1], "tiles": [1, 2]}
#: the skipped signal: the last rank's program 0 never signals tile 2
SKIP = {"program": 0, "tile": 2}
#: a traced spin's deadline in these runs (a skipped signal would hang the kernel without one)
WAIT_TIMEOUT_NS = 20_000_000


def _dist():
    import torch
    import torch.distributed as dist

    if "RANK" not in os.environ:  # one GPU, no launcher: a group of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", str(29600 + os.getpid() % 1000)))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ.setdefault(k, v)
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist.get_rank(), dist.get_world_size()


def symmetric(n: int, dtype):
    """A tensor in torch symmetric memory and, as an int64 device tensor, where every rank's copy
    of it is mapped in this process (its allocation's ``buffer_ptrs`` plus its offset there)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    group = dist.group.WORLD.group_name
    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)  # (needed by older torch; a no-op later)
    if enable is not None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            enable(group)
    t = symm_mem.empty(n, dtype=dtype, device="cuda")
    hdl = symm_mem.rendezvous(t, group)
    ptrs = [int(p) for p in hdl.buffer_ptrs]
    off = t.data_ptr() - ptrs[dist.get_rank()]
    return t, torch.tensor([p + off for p in ptrs], dtype=torch.int64, device="cuda")


class Ring:
    """One style's kernel, its memory and its launch."""

    def __init__(self, style: str, rank: int, world: int):
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        self.style, self.rank, self.world = style, rank, world
        n = TILES * PROGRAMS * TILE
        self.x = torch.empty(n, device="cuda")
        self.out = torch.empty(n, device="cuda")
        if style == "iris":
            if str(STANDINS) not in sys.path:
                sys.path.insert(0, str(STANDINS))
            import iris

            from tests.byok.ring_iris import ring_iris

            self.heap = iris.Iris(1 << 22)
            self.buf = self.heap.zeros(n, torch.float32)
            self.flags = self.heap.zeros(TILES * PROGRAMS, torch.int32)
            self.kernel = ring_iris
            if "ktrace" in sys.modules:  # the one call that tells ktrace where the heap is
                sys.modules["ktrace"].map_heap(self.heap.heap_bases, self.heap.heap_size, name="iris heap")
        else:
            self.buf, self.buf_ptrs = symmetric(n, torch.float32)
            self.flags, self.flag_ptrs = symmetric(TILES * PROGRAMS, torch.int32)
            self.flags.zero_()
            if style == "plain":
                from tests.byok.ring_plain import ring_plain as kernel
            else:
                from tests.byok.ring_asm import ring_asm as kernel
            self.kernel = kernel
        torch.cuda.synchronize()
        dist.barrier()
        self.epoch = 0
        #: the bench's timing: a GPU-side sleep queued before the first event, so that the events
        #: time what the launch queues on the GPU (ktrace's work there included), not the host's
        #: time to queue it (which the host-timed figure keeps)
        self.queue_ahead = False

    def launch(self, fault: str):
        """One launch (every rank), outputs poisoned first; returns the host-timed ms."""
        import torch
        import torch.distributed as dist

        last = self.world - 1
        d = dict(delay_rank=-1, delay_lo=0, delay_hi=0, delay_ns=0, delay_plo=0, delay_phi=0, skip_rank=-1, skip_tile=-1,
                 skip_prog=-1)
        if fault == "straggler":
            d.update(delay_rank=last, delay_lo=DELAY["tiles"][0], delay_hi=DELAY["tiles"][-1] + 1, delay_ns=DELAY_NS,
                     delay_plo=DELAY["programs"][0], delay_phi=DELAY["programs"][-1] + 1)
        elif fault == "skip":
            d.update(skip_rank=last, skip_tile=SKIP["tile"], skip_prog=SKIP["program"])
        self.epoch += 1
        self.x.normal_()
        self.out.fill_(float("nan"))
        torch.cuda.synchronize()
        dist.barrier()
        shift = 1 if self.world == 1 else 0
        common = dict(rank=self.rank, world=self.world, epoch=self.epoch, n_tiles=TILES, TILE=TILE, shift=shift, **d)
        t0 = time.perf_counter()
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with aligned():
            if self.queue_ahead:  # (the GPU busy until the host has queued the launch and its second event)
                torch.cuda._sleep(QUEUE_AHEAD_CYCLES)
            ev0.record()  # (behind the barrier kernel: the events time the kernel alone)
            q0 = time.perf_counter()
            self._launch(common)
            self.queue_us = (time.perf_counter() - q0) * 1e6  # (the host's time to queue the launch)
            ev1.record()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        self.device_ms = ev0.elapsed_time(ev1)
        return ms, self.check(fault)

    def _launch(self, common):
        if self.style == "iris":
            self.kernel[(PROGRAMS,)](self.x, self.out, self.buf, self.flags, self.heap.heap_bases, **common)
        else:
            self.kernel[(PROGRAMS,)](self.x, self.out, self.buf_ptrs, self.flag_ptrs, **common)

    def check(self, fault: str) -> dict:
        """The output against a torch reference: rank r gets rank r-1's tiles, plus r-1, doubled."""
        import torch
        import torch.distributed as dist

        xs = [torch.empty_like(self.x) for _ in range(self.world)]
        dist.all_gather(xs, self.x)
        src = (self.rank - 1) % self.world
        shift = 1 if self.world == 1 else 0
        x = xs[src].view(TILES, PROGRAMS, TILE)
        want = (torch.roll(x, shifts=shift, dims=1) + src) * 2  # program p gets program p - shift's tile
        got = self.out.view(TILES, PROGRAMS, TILE)
        ok = torch.isclose(got, want).all(dim=2)  # (tile, program)
        bad = [(int(t), int(p)) for t, p in (~ok).nonzero().tolist()]
        return {"bad_slots": bad, "as_expected": outputs_as_expected(fault, bad)}


def outputs_as_expected(fault: str, bad_slots) -> bool:
    """Whether the (tile, program) slots whose output differed from the reference are the ones the
    fault may spoil: none, except after a skipped signal, where a wait that gave up (the skipped
    one, or one of the cascade it starts on later tiles) reads its tile before it came."""
    if fault == "skip":
        return all(t >= SKIP["tile"] for t, _ in bad_slots)
    return not bad_slots


def aligned():
    """The ranks' next launch released together on the device (``ktrace.shmem.align_launch``) when
    recording; a launch as written otherwise (the kernel's own program has no such barrier)."""
    import contextlib

    if "ktrace" in sys.modules and ALIGN:
        try:
            from ktrace.shmem import align_launch
        except ImportError:
            return contextlib.nullcontext()
        return align_launch(hold_us=HOLD_US)
    return contextlib.nullcontext()


#: cycles of the bench's GPU-side sleep before its first event (about 1 ms at the H100's and
#: H200's clocks: longer than a traced launch takes its host to queue)
QUEUE_AHEAD_CYCLES = 2_000_000

#: release recorded launches by ktrace's device barrier (``--no-align``: the host barrier alone)
ALIGN = True
#: how long the barrier waits for its host to queue the traced launch (the traced launch's host
#: work, a buffer from a fresh arena on a capture's first launch, can take longer than the default)
HOLD_US = 5000.0


def _injected(fault: str, world: int) -> dict:
    last = world - 1
    shift = 1 if world == 1 else 0
    if fault == "straggler":
        return {"kind": "late_notifies", "rank": last, "programs": DELAY["programs"], "tiles": DELAY["tiles"],
                "delay_ns": DELAY_NS, "consumer_rank": (last + 1) % world,
                "consumer_programs": [(p + shift) % PROGRAMS for p in DELAY["programs"]]}
    if fault == "skip":
        return {"kind": "hang", "producer": last, "consumer": (last + 1) % world, "program": SKIP["program"],
                "consumer_program": (SKIP["program"] + shift) % PROGRAMS, "tile": SKIP["tile"]}
    return {"kind": None}


def record(args, rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    import ktrace
    from ktrace.auto import declarations as declare
    from ktrace.auto.config import AutoConfig
    from ktrace.auto.hooks import watch

    watch()  # (the rings allocate their symmetric memory before the captures open)
    declare.load_file(Path(__file__).with_name("ring_asm.json"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    def say(what):
        if rank == 0:
            print(f"[{time.perf_counter() - t_start:7.1f} s] {what}", flush=True)

    for style in args.style:
        ring = Ring(style, rank, world)
        cfg = AutoConfig(kernels=f"ring_{style}", wait_timeout_ns=WAIT_TIMEOUT_NS)
        ring.launch("none")  # (warm-up: compiles the kernel as written, first touch; not recorded)
        with ktrace.capture(auto=cfg, run_id=f"byok-warmup-{style}-w{world}"):
            ring.launch("none")  # (and its traced copy, so that no rank compiles inside a capture)
        say(f"{style}: set up and warmed up")
        for fault in args.fault:
            launches = []
            with ktrace.capture(auto=cfg, run_id=f"byok-{style}-{fault}-w{world}") as cap:
                say(f"{style} {fault}: capture open")
                for _ in range(args.launches):
                    launches.append(ring.launch(fault))
                say(f"{style} {fault}: {args.launches} launches")
            say(f"{style} {fault}: capture closed")
            merged = cap.gather(dst=0)
            say(f"{style} {fault}: gathered")
            checks = [c for _, c in launches]
            everywhere = [None] * world
            dist.all_gather_object(everywhere, checks)
            name = f"{style}_{fault}_w{world}"
            if merged is not None:
                ktrace.write_capture(out / f"{name}.ktrace", merged)
                info = {"style": style, "fault": fault, "world_size": world, "launches": args.launches,
                        "programs": PROGRAMS, "tiles": TILES, "injected": _injected(fault, world),
                        "device": torch.cuda.get_device_name(), "host_ms": [ms for ms, _ in launches],
                        "checks": {str(r): c for r, c in enumerate(everywhere)},
                        "outputs_as_expected": all(c["as_expected"] for per in everywhere for c in per)}
                (out / f"{name}.scenario.json").write_text(json.dumps(info, indent=1))
                print(f"[rank 0] wrote {name}.ktrace: outputs as expected: {info['outputs_as_expected']}", flush=True)
        del ring
        torch.cuda.synchronize()
        dist.barrier()


def bench(args, rank: int, world: int) -> None:
    """Traced and untraced launches of each style, interleaved (healthy ring), host-timed around a
    synchronised launch and timed on the GPU by CUDA events (behind a GPU-side sleep, so that the
    host's time to queue the launch is not in them); the median of each and their ratio."""
    import statistics

    import torch
    import torch.distributed as dist

    import ktrace
    from ktrace.auto import declarations as declare, hooks
    from ktrace.auto.config import AutoConfig

    hooks.watch()
    declare.load_file(Path(__file__).with_name("ring_asm.json"))
    res = {}
    for style in args.style:
        ring = Ring(style, rank, world)
        ring.queue_ahead = True
        for _ in range(3):
            ring.launch("none")
        traced, plain, traced_dev, plain_dev, traced_q, plain_q = [], [], [], [], [], []
        cfg = AutoConfig(kernels=f"ring_{style}", wait_timeout_ns=0)
        with ktrace.capture(auto=cfg, max_launches=args.bench, run_id=f"byok-bench-{style}-w{world}"):
            for i in range(args.bench):
                for which in ((0, 1) if i % 2 else (1, 0)):
                    if which:
                        traced.append(ring.launch("none")[0])
                        traced_dev.append(ring.device_ms)
                        traced_q.append(ring.queue_us)
                    else:
                        with hooks.quiet():  # (the kernel as written, while the capture is open)
                            plain.append(ring.launch("none")[0])
                        plain_dev.append(ring.device_ms)
                        plain_q.append(ring.queue_us)
        t, u = statistics.median(traced), statistics.median(plain)
        td, ud = statistics.median(traced_dev), statistics.median(plain_dev)
        res[style] = {"traced_ms": t, "untraced_ms": u, "ratio": t / u, "traced_device_ms": td, "untraced_device_ms": ud,
                      "device_ratio": td / ud, "traced_queue_us": statistics.median(traced_q),
                      "untraced_queue_us": statistics.median(plain_q), "n": args.bench}
        del ring
    if rank == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        info = {"world_size": world, "device": torch.cuda.get_device_name(), "styles": res}
        (out / f"bench_w{world}.json").write_text(json.dumps(info, indent=1))
        for s, r in res.items():
            print(f"[bench] {s} w{world} {info['device']}: kernel (CUDA events) {r['traced_device_ms'] * 1e3:.1f} us / "
                  f"{r['untraced_device_ms'] * 1e3:.1f} us = {r['device_ratio']:.4f}; the host's time to queue the launch "
                  f"traced {r['traced_queue_us']:.1f} us / untraced {r['untraced_queue_us']:.1f} us (median of {r['n']} each, "
                  f"interleaved)", flush=True)
    dist.barrier()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--style", default="plain", help="plain, asm, iris (several: comma-separated)")
    ap.add_argument("--fault", default="none", help="none, straggler, skip (several: comma-separated)")
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--out", help="record in-process into this folder")
    ap.add_argument("--bench", type=int, default=0, help="time N traced and N untraced launches (with --out)")
    ap.add_argument("--no-align", action="store_true", help="release launches by the host barrier alone")
    args = ap.parse_args(argv)
    global ALIGN
    ALIGN = not args.no_align
    args.style = args.style.split(",")
    args.fault = args.fault.split(",")
    if not set(args.style) <= set(STYLES) or not set(args.fault) <= set(FAULTS):
        ap.error(f"--style from {STYLES}, --fault from {FAULTS}")
    rank, world = _dist()
    import torch.distributed as dist

    if args.bench:
        bench(args, rank, world)
    elif args.out:
        record(args, rank, world)
    else:  # the program as its user runs it: ktrace record traces it from outside
        if "skip" in args.fault and not os.environ.get("KTRACE_RECORD"):
            ap.error("a skipped signal hangs the untraced kernel: run it under ktrace record (its spins have a deadline)")
        for style in args.style:
            ring = Ring(style, rank, world)
            for fault in args.fault:
                for _ in range(args.launches):
                    ms, c = ring.launch(fault)
                    print(f"[rank {rank}] {style} {fault}: {ms:.3f} ms, outputs as expected: {c['as_expected']}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
