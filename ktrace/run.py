"""``ktrace run KERNEL --nproc N``: one instrumented kernel, traced on N GPUs, analysed.

The whole path in one command::

    ktrace run all_to_all --nproc 4                      # the skewed MoE all-to-all
    ktrace run gemm_all_scatter --nproc 4 -s schedule=fused_ws -s M=4096
    ktrace run all_to_all --nproc 4 --skip 3:256         # rank 3 skips a notify: a hang report
    ktrace run all_to_all --nproc 8 --nnodes 2 --rdzv-backend c10d --rdzv-endpoint head:29500   # on each node

What it does:

1. checks the request before any GPU work (known kernel and parameters, sizes that split over
   the ranks, at least N GPUs visible) and refuses with exit status 2 and one line otherwise;
2. starts N ranks on this node through torchrun (``ktrace.launch``: ``--standalone``
   on one node, torchrun's own rendezvous options on several; every rank timed out, the failing
   rank named with the tail of its log in ``OUT/logs``, NVLink multicast off);
3. in each rank: builds the kernel's driver (its plan on a symmetric heap, its inputs), runs it
   once untraced and once traced to compile both variants (a rank still compiling while the
   others wait would put milliseconds of launch skew into the capture), then records
   ``--steps`` steps under ``ktrace.capture(heap=heap)`` (clock calibration before and after),
   each step's launches released on every rank together by a device-side barrier queued right
   before them (``ktrace.shmem.align_launch``; ``--no-align``: a host barrier and a device
   synchronisation, which leave the ranks' launches hundreds of µs apart), checks the last
   output against the kernel's reference, and gathers every rank's capture to rank 0, which
   writes ``OUT/<kernel>.ktrace`` and ``OUT/run.json``;
4. back in this process, on the node of rank 0 (no GPU needed): aligns and merges, prints how far
   apart the ranks started each kernel's launches (:func:`start_skew`; also in ``run.json``),
   writes the Perfetto trace and the HTML/JSON report (:func:`ktrace.demo.analyse`), prints the
   report and the ``ktrace open`` command to run next.

ktrace knows no kernel: each folder of ``instrumented_kernels/`` that has a ``run.py`` offers a
run spec and a driver there (:mod:`instrumented_kernels.runspec`), found the way
``benchmarks/kernels.py`` finds the folders' ``bench.py`` (``instrumented_kernels.folder_modules``).
``ktrace run --list`` shows each kernel's parameters (see ``instrumented_kernels/*/README.md``).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

log = logging.getLogger("ktrace")

#: How the ranks' steps are released (the capture's ``launch_alignment.method``).
DEVICE_BARRIER = "device barrier"
HOST_BARRIER = "host barrier"
#: Longest wait of a rank's launch barrier for its host to queue the step (µs): the host opens
#: the gate once the step is queued, so this only bounds a host that blocks (then the ranks still
#: leave together, and the capture's ``launch_alignment`` counts the round as released by it).
ALIGN_HOLD_US = 20_000.0


@functools.lru_cache(maxsize=None)
def kernels() -> dict:
    """Every kernel ``ktrace run`` can run: folder name -> its ``run.py``'s ``SPEC`` (a
    ``instrumented_kernels.runspec.RunSpec``), in the order of ``instrumented_kernels.KERNELS``.

    Raises:
        TypeError: a folder's ``run.py`` has no ``SPEC``, or one named after another folder.
    """
    from instrumented_kernels import folder_modules
    from instrumented_kernels.runspec import RunSpec

    out = {}
    for name, mod in folder_modules("run"):
        spec = getattr(mod, "SPEC", None)
        if not isinstance(spec, RunSpec) or spec.name != name:
            raise TypeError(f"{mod.__name__}.SPEC must be a RunSpec named {name!r}, got {spec!r}")
        out[name] = spec
    return out


@dataclass(frozen=True)
class RunConfig:
    """One ``ktrace run`` (validated on construction, before any GPU work).

    Args:
        kernel: a kernel ``ktrace run`` found (a key of :func:`kernels`).
        nproc: ranks on each node, one GPU each.
        shape: parameter overrides (name -> value); the rest take the kernel's defaults.
        out: output folder.
        steps: traced steps recorded (after the untraced and traced warm-up).
        delay_rank, delay_ns: ``Fault(delay_rank, delay_ns)``: that rank spins before each notify.
        skip_rank, skip_notify: ``Fault(skip_rank, skip_notify)``: that rank skips one notify
            (its peer's wait then times out: a hang in the report).
        timeout_ms: bound of every wait in the kernel (None: the kernel's own, or 200 ms when a
            notify is skipped).
        check: compare the last step's output with the kernel's reference (off under faults
            that skip a notify, whose output is wrong by design).
        nnodes: nodes, each running ``nproc`` ranks (the world is ``nproc * nnodes`` ranks).
        align: release each step's launches by a device-side barrier (``ktrace.shmem.align_launch``);
            False: by a host barrier and a device synchronisation (the ranks start their launches
            up to hundreds of µs apart: what a report then calls a late launch).
        cost: after recording, time ``cost_steps`` steps traced and as many untraced, interleaved
            (``ktrace.measure_cost``): the capture's ``probe_cost``, which the report states.
        verify: then check the report's first prediction on the GPU (``ktrace.verify``: delays
            injected at its culprit, ``verify_steps`` steps of each size and of none): the
            capture's ``verify`` rows, printed as "predicted +X, measured +Y".
    """

    kernel: str
    nproc: int
    shape: dict = field(default_factory=dict)
    out: str = "ktrace-run"
    steps: int = 2
    delay_rank: int = -1
    delay_ns: int = 0
    skip_rank: int = -1
    skip_notify: int = -1
    timeout_ms: float | None = None
    check: bool = True
    nnodes: int = 1
    align: bool = True
    cost: bool = True
    cost_steps: int = 30
    verify: bool = False
    verify_steps: int = 20

    def __post_init__(self):
        specs = kernels()
        if self.kernel not in specs:
            raise ValueError(f"unknown kernel {self.kernel!r}; choose one of: {', '.join(specs)}")
        for name in ("nproc", "nnodes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"--{name} must be a positive int, got {v!r}")
        if not isinstance(self.steps, int) or not 1 <= self.steps <= 100:
            raise ValueError(f"--steps must be in 1..100, got {self.steps!r}")
        for name in ("cost_steps", "verify_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 4 <= v <= 1000:
                raise ValueError(f"--{name.replace('_', '-')} must be in 4..1000, got {v!r}")
        specs[self.kernel].resolve(self.shape, self.world_size)
        if (self.delay_rank >= 0) != (self.delay_ns > 0):
            raise ValueError("a delay needs a rank and a positive time (--delay RANK:MICROSECONDS)")
        if (self.skip_rank >= 0) != (self.skip_notify >= 0):
            raise ValueError("a skipped notify needs a rank and a notify index (--skip RANK:INDEX)")
        for r in (self.delay_rank, self.skip_rank):
            if r >= self.world_size:
                raise ValueError(f"fault rank {r} is not among the {self.world_size} ranks")
        if self.timeout_ms is not None and not 0 < self.timeout_ms <= 60_000:
            raise ValueError(f"--timeout-ms must be in (0, 60000], got {self.timeout_ms}")

    @property
    def world_size(self) -> int:
        """Ranks in all: ``nproc`` on each of ``nnodes`` nodes."""
        return self.nproc * self.nnodes

    @property
    def spec(self):
        """The kernel's ``RunSpec``."""
        return kernels()[self.kernel]

    @property
    def params(self) -> dict:
        """Every parameter of the kernel: defaults with this run's overrides."""
        return {**self.spec.defaults(), **self.shape}

    @property
    def wait_timeout_ns(self) -> int | None:
        """Bound of every wait for the plan (None: the kernel's default)."""
        if self.timeout_ms is not None:
            return int(self.timeout_ms * 1e6)
        return 200_000_000 if self.skip_rank >= 0 else None

    @property
    def capture_path(self) -> Path:
        return Path(self.out) / f"{self.kernel}.ktrace"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        return cls(**json.loads(text))


# ---------------------------------------------------------------------------------------------
# GPUs
# ---------------------------------------------------------------------------------------------


def visible_gpus() -> tuple[int, str]:
    """How many GPUs this process sees and what they are (``(0, why)`` with none).

    Counting does not create a CUDA context, so the workers can still take one GPU each.
    """
    try:
        import torch
    except ImportError:
        return 0, "torch is not installed (recording needs pip install 'ktrace[gpu]')"
    try:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except RuntimeError as e:  # a driver that fails to initialise
        return 0, f"the GPU driver did not initialise ({e})"
    if n == 0:
        build = "ROCm" if getattr(torch.version, "hip", None) else ("CUDA " + torch.version.cuda if torch.version.cuda else "CPU-only")
        return 0, f"no GPU visible (torch {torch.__version__}, {build} build)"
    try:
        name = torch.cuda.get_device_name(0)
    except RuntimeError:
        name = "GPU"
    return n, name


def refusal(nproc: int, gpus: tuple[int, str] | None = None) -> str | None:
    """The one-line reason ``ktrace run`` refuses to start ``nproc`` ranks, or None."""
    n, what = gpus if gpus is not None else visible_gpus()
    if n == 0:
        return (f"ktrace run needs {nproc} GPU(s), one per rank, and found none: {what}. "
                "Without a GPU, `ktrace demo` analyses a real 4-GPU capture shipped with ktrace.")
    if n < nproc:
        return f"ktrace run: --nproc {nproc} needs {nproc} GPUs, and only {n} ({what}) are visible."
    return None


# ---------------------------------------------------------------------------------------------
# the worker (one per rank)
# ---------------------------------------------------------------------------------------------


def _aligned_start(heap) -> None:
    """``--no-align``: wait for every rank's earlier work and meet at a host barrier (the ranks'
    next launches then leave their hosts up to hundreds of µs apart)."""
    import torch
    import torch.distributed as tdist

    heap.barrier()
    tdist.barrier()
    torch.cuda.synchronize()


def launch_alignment(aligned: bool, launches: list[int], stats: list) -> dict:
    """What a capture of ``ktrace run`` says of how its steps were released (``meta["launch_alignment"]``).

    Args:
        aligned: released by the device-side barrier (else by a host barrier).
        launches: each step's first traced launch (its index, the same on every rank): the
            launches the barrier released; a step's later launches follow them on their streams.
        stats: per rank, its barrier rounds of the recorded steps (``rounds``, ``released_by_hold``,
            ``missed``; None under a host barrier).

    The report reads it: a launch released by the device barrier that starts later on one rank
    than on the others was held up by nothing of the user's program (``analysis.causes.late_launch``).
    """
    out = {"method": DEVICE_BARRIER if aligned else HOST_BARRIER, "launches": [int(x) for x in launches]}
    if aligned:
        out["hold_us"] = ALIGN_HOLD_US
        for k in ("released_by_hold", "missed"):
            out[k] = {str(r): int(s[k]) for r, s in enumerate(stats) if s}
    return out


# ---------------------------------------------------------------------------------------------
# how far apart the ranks started (read back from the capture, on the CPU)
# ---------------------------------------------------------------------------------------------


def launch_starts(capture, model=None) -> dict[int, dict[int, int]]:
    """Each launch's first event on each rank, on the common clock: ``{launch: {rank: start_ns}}``
    (launches with no event on a rank leave that rank out)."""
    from .events import iter_batches

    out: dict[int, dict[int, int]] = {}
    for refs, b in iter_batches(capture, model, columns=("start_ns",)):
        counts = np.diff(b.offsets)
        has = np.flatnonzero(counts > 0)
        if not has.size:
            continue
        # (launches with events only: each one's rows run up to the next one's start)
        firsts = np.minimum.reduceat(b.cols["start_ns"], b.offsets[:-1][has])
        for k, t in zip(has.tolist(), firsts.tolist()):
            r, ln = refs[b.launches[k]]
            out.setdefault(int(ln.index), {})[int(r)] = int(t)
    return out


def start_skew(capture, model=None) -> list[dict]:
    """How far apart the ranks started each kernel's launches: per launch, the latest rank's first
    event minus the earliest rank's, on the common clock (the capture's alignment).

    Args:
        capture: a merged ``ktrace.captures.Capture`` (every rank's launches numbered alike, as
            ``ktrace run`` and ``cap.gather`` make them).
        model: the clock model (default: the capture's).

    Returns:
        One dict per kernel, in the order of its first launch: ``kernel``; ``launches`` (the
        launch indices on two ranks or more); ``skew_ns`` (per launch); ``max_ns``, ``median_ns``;
        ``last_rank`` (the rank that started last most often); ``released`` (``"device barrier"``,
        ``"host barrier"``: every launch of the kernel was the first of its step in a ``ktrace run``
        capture released so; ``"queued"``: none was, each followed an earlier launch on its
        stream; ``"mixed"``; ``None``: the capture does not say).
    """
    from .clock.model import clock_model_of

    model = model or clock_model_of(capture)
    starts = launch_starts(capture, model)
    names = {}
    for rc in capture.ranks.values():
        for ln in rc.launches:
            names.setdefault(int(ln.index), ln.kernel)
    la = (capture.meta or {}).get("launch_alignment") or {}
    released = set(int(x) for x in la.get("launches") or ())
    by_kernel: dict[str, list] = {}
    for li in sorted(starts):
        ranks = starts[li]
        if len(ranks) < 2:
            continue
        rs = np.array(sorted(ranks))
        t = np.array([ranks[r] for r in rs.tolist()], np.int64)
        by_kernel.setdefault(names.get(li, "?"), []).append((li, int(t.max() - t.min()), int(rs[np.argmax(t)])))
    out = []
    for kernel, rows in by_kernel.items():
        lis = [li for li, _, _ in rows]
        sk = np.array([s for _, s, _ in rows], np.float64)
        lasts = np.bincount([r for _, _, r in rows])
        if not la:
            how = None
        else:
            n_rel = sum(li in released for li in lis)
            how = la.get("method") if n_rel == len(lis) else ("queued" if n_rel == 0 else "mixed")
        out.append({"kernel": kernel, "launches": lis, "skew_ns": sk.astype(np.int64).tolist(), "max_ns": float(sk.max()),
                    "median_ns": float(np.median(sk)), "last_rank": int(lasts.argmax()), "released": how})
    return out


_RELEASED_WORDS = {DEVICE_BARRIER: "released by a device barrier", HOST_BARRIER: "released by a host barrier",
                   "queued": "queued behind the launch before it", "mixed": "some released by the barrier, some queued"}


def skew_text(rows: list[dict], clock_bound_ns: float | None = None) -> str:
    """The lines ``ktrace run`` prints for :func:`start_skew`'s rows."""
    from .text import count_text, fmt_ns, printable

    bound = f"; clocks aligned within ~{fmt_ns(clock_bound_ns)}" if clock_bound_ns else ""
    lines = [f"Start skew (each rank's first event of a launch, latest minus earliest, on the common clock{bound}):"]
    if not rows:
        lines.append("  no launch recorded events on two ranks or more")
    for r in rows:
        how = _RELEASED_WORDS.get(r["released"], "")
        lines.append(f"  {printable(r['kernel'])}: {count_text('launches', len(r['launches']))}"
                     + (f", {how}" if how else "")
                     + f": max {fmt_ns(r['max_ns'])}, median {fmt_ns(r['median_ns'])} (rank {r['last_rank']} last most often)")
    return "\n".join(lines)


def _timeouts_text(heap) -> list[str]:
    """This rank's timed-out waits, described (the heap keeps them until cleared)."""
    count, described = heap.timeouts()
    return [str(t) for t in described] + ([f"... and {count - len(described)} more"] if count > len(described) else [])


def _after_step(drv, faulty: bool) -> None:
    """Wait for every rank; re-arm a plan a skipped notify left uneven."""
    drv.heap.barrier()
    if faulty and hasattr(drv.plan, "reset"):
        drv.plan.reset()


def _timing_hooks(drv, aligner, world_size: int, skips: bool):
    """``(around, after, reduce)`` for ``ktrace.cost``: each timed step released by the launch
    barrier (else a sleep holds the device while the host queues it), the ranks met after it,
    and each step's time the slowest rank's."""
    from .cost import max_over_ranks

    # (at one rank the barrier queues nothing: the sleep then holds the device, or the host's time
    # to queue each step would be timed with it)
    around = (lambda: aligner.release(hold_us=ALIGN_HOLD_US)) if aligner is not None and world_size > 1 else None
    reduce = max_over_ranks(drv.heap.all_gather_object) if world_size > 1 else None
    return around, (lambda: _after_step(drv, skips)), reduce


def _measure(cfg: RunConfig, drv, aligner, world_size: int, skips: bool) -> dict | None:
    """``--cost`` (the default): the probes' cost on this kernel's steps (``ktrace.measure_cost``);
    None when off, or under a skipped notify (a hang by design: nothing to time)."""
    if not cfg.cost or skips:
        return None
    from .cost import measure_cost

    around, after, reduce = _timing_hooks(drv, aligner, world_size, skips)
    try:  # (the times are every rank's, gathered: every rank takes the same branch)
        pc = measure_cost(drv.step, n=cfg.cost_steps, around=around, after=after, reduce=reduce)
    except ValueError as e:
        log.warning("ktrace run: the probes' cost could not be figured (%s); the capture does not state it", e)
        return None
    log.info("ktrace run: %s", pc)
    return pc.to_meta()


def _verify(cfg: RunConfig, drv, aligner, dist, merged, skips: bool) -> list | None:
    """``--verify``: rank 0 plans the injection from the merged capture's report, every rank
    times it (``ktrace.verify``); the rows, or None."""
    if not cfg.verify or skips:
        return None
    from .analysis.verify import Plan
    from .check import plan_of, verify

    mine = None
    if dist.rank == 0:
        try:
            p = plan_of(merged)
            mine = p.to_dict() if p is not None else None
            if p is None:
                log.warning("ktrace run --verify: the report names no cause a delay can be injected for: nothing to check")
        except Exception as e:  # (every rank must still meet below)
            log.warning("ktrace run --verify: the capture could not be analysed for a plan (%s)", e)
    shared = drv.heap.all_gather_object(mine)[0] if dist.world_size > 1 else mine
    if shared is None:
        return None
    around, after, reduce = _timing_hooks(drv, aligner, dist.world_size, skips)
    try:  # (as in _measure: the same times on every rank)
        rows = verify(drv.step, Plan.from_dict(shared), n=cfg.verify_steps, around=around, after=after, reduce=reduce)
    except ValueError as e:
        log.warning("ktrace run --verify: the measurement could not be figured (%s)", e)
        return None
    for r in rows:
        log.info("ktrace run --verify: %s", r["text"])
    return rows


def worker(cfg: RunConfig) -> int:
    """The per-rank body of ``ktrace run`` (started through torchrun by :func:`launch_run`);
    returns an exit status."""
    import torch

    import ktrace
    from instrumented_kernels import harness as H

    dist = H.setup()
    if dist.world_size != cfg.world_size:
        raise RuntimeError(f"launched with {dist.world_size} ranks for --nproc {cfg.nproc} x --nnodes {cfg.nnodes}")
    fault = H.Fault(delay_rank=cfg.delay_rank, delay_ns=cfg.delay_ns, skip_rank=cfg.skip_rank, skip_notify=cfg.skip_notify)
    seed = H.fresh_seed(dist)
    drv = cfg.spec.build(dist, cfg.params, fault, seed, cfg.wait_timeout_ns)
    skips = cfg.skip_rank >= 0
    aligner = None
    if cfg.align:
        from .shmem.align import aligner_for

        aligner = aligner_for(drv.heap)

    def step() -> None:
        if aligner is None:
            _aligned_start(drv.heap)
            drv.step()
        else:  # (the previous step ended at a heap barrier: every rank's device is idle here)
            with aligner.release(hold_us=ALIGN_HOLD_US):  # released once every rank's step is queued
                drv.step()
        _after_step(drv, skips)

    t0 = time.perf_counter()
    step()  # compile the untraced variant (and the launch barrier)
    with ktrace.capture():  # compile the traced variant (KTRACE > 0 is another compilation)
        step()
    drv.heap.clear_timeouts()  # (the warm-up's, under a skipped notify: not the recorded steps')
    log.info("[rank %d] ktrace run: warm-up (compilation) took %.1f s", dist.rank, time.perf_counter() - t0)
    released = []  # each step's first traced launch: the one its barrier released
    before = aligner.stats() if aligner is not None else None
    with ktrace.capture(heap=drv.heap) as cap:  # (a kernel's timeouts stay in the heap and the capture)
        for _ in range(cfg.steps):
            n0 = len(cap.launches)
            step()
            if len(cap.launches) > n0:
                released.append(n0)
    align = None
    if aligner is not None:
        after = aligner.stats()
        align = {"rounds": after.rounds - before.rounds, "released_by_hold": after.released_by_hold - before.released_by_hold,
                 "missed": after.missed - before.missed}
    timeouts = _timeouts_text(drv.heap)
    drv.heap.clear_timeouts()
    err = None
    if cfg.check and not skips:
        torch.cuda.synchronize()
        err = drv.check()  # raises MismatchError naming the rank
    measured = _measure(cfg, drv, aligner, dist.world_size, skips)
    merged = cap.gather(dst=0)
    every = drv.heap.all_gather_object({"timeouts": timeouts, "rel_err": err, "device": torch.cuda.get_device_name(),
                                        "align": align})
    if dist.rank == 0:  # (before --verify plans from it: the plan is the report's first finding on this capture)
        merged.meta.update(made_by="ktrace run", kernel=cfg.kernel, params=cfg.params, steps=cfg.steps,
                           launch_alignment=launch_alignment(cfg.align, released, [e["align"] for e in every]))
        if measured:
            merged.meta["probe_cost"] = measured
    rows = _verify(cfg, drv, aligner, dist, merged, skips)
    if dist.rank == 0:
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        if rows:
            merged.meta["verify"] = rows
        path = ktrace.write_capture(cfg.capture_path, merged, compress=True)
        info = {
            "kernel": cfg.kernel, "world_size": dist.world_size, "params": cfg.params, "steps": cfg.steps, "seed": seed,
            "fault": asdict(fault), "ranks": {str(r): e for r, e in enumerate(every)}, "capture": str(path),
        }
        (out / "run.json").write_text(json.dumps(info, indent=1, default=str))
        from .text import count_text

        print(f"wrote {path} ({path.stat().st_size:,} bytes, {count_text('launches', merged.n_launches)}, "
              f"{count_text('events', len(merged.events()))})", flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launched:
    """How the ranks of this node ended.

    Attributes:
        ok: every rank of this node passed (and torchrun did not fail).
        summary: the launcher's summary (one line per rank, the tail of a failed rank's log).
        ranks: the global ranks that ran on this node.
    """

    ok: bool
    summary: str
    ranks: tuple[int, ...] = ()


def launch_run(cfg: RunConfig, timeout_s: float = 900.0, rendezvous=None) -> Launched:
    """Start this node's ``cfg.nproc`` ranks through torchrun and wait for them.

    Args:
        cfg: the run.
        timeout_s: each rank's time limit (the launch gets its start-up allowance on top).
        rendezvous: a ``ktrace.launch.Rendezvous`` for several nodes (default: this one).
    """
    from .launch import LaunchConfig, Rendezvous, launch, summarize

    rdzv = rendezvous if rendezvous is not None else Rendezvous(nnodes=cfg.nnodes)
    if rdzv.nnodes != cfg.nnodes:
        raise ValueError(f"the run has --nnodes {cfg.nnodes} and the rendezvous {rdzv.nnodes}")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    lc = LaunchConfig(command=(sys.executable, "-m", "ktrace.run", "--worker", cfg.to_json()), nprocs=cfg.nproc,
                      timeout_s=timeout_s, log_dir=str(out / "logs"), rendezvous=rdzv)
    results = launch(lc)
    return Launched(all(r.status == "ok" for r in results), summarize(results, lc),
                    tuple(r.rank for r in results if r.rank >= 0))


class RunError(RuntimeError):
    """``ktrace run`` could not record: too few GPUs (the one-line reason), or a rank failed
    (the launcher's summary, naming the rank, with the tail of its output)."""


def record(cfg: RunConfig, timeout_s: float = 900.0, rendezvous=None) -> Path | None:
    """Record ``cfg`` on this node's GPUs (the ranks of :func:`worker`).

    Returns:
        The merged capture, or None on a node that does not hold rank 0 (which writes it).

    Raises:
        RunError: fewer GPUs than ``cfg.nproc`` (nothing started), or a rank failed.
    """
    why = refusal(cfg.nproc)
    if why:
        raise RunError(why)
    got = launch_run(cfg, timeout_s=timeout_s, rendezvous=rendezvous)
    if not got.ok:
        raise RunError(f"{got.summary}\nktrace run: a rank failed (each rank's log is in {Path(cfg.out) / 'logs'})")
    return cfg.capture_path if 0 in got.ranks else None


def _parse_rank_value(text: str, what: str, scale: float = 1.0) -> tuple[int, int]:
    try:
        r, v = text.split(":")
        return int(r), int(round(float(v) * scale))
    except ValueError:
        raise ValueError(f"{what} wants RANK:VALUE (e.g. 3:20), got {text!r}") from None


def config_from_args(args) -> RunConfig:
    """A :class:`RunConfig` from parsed ``ktrace run`` arguments (ValueError when bad)."""
    specs = kernels()
    if args.kernel not in specs:
        raise ValueError(f"unknown kernel {args.kernel!r}; choose one of: {', '.join(specs)} (ktrace run --list)")
    spec = specs[args.kernel]
    shape = {}
    for item in args.set or []:
        if "=" not in item:
            raise ValueError(f"-s wants NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        shape[k.strip()] = spec.param(k.strip()).parse(v.strip())
    dr, dn = _parse_rank_value(args.delay, "--delay", 1e3) if args.delay else (-1, 0)
    sr, sn = _parse_rank_value(args.skip, "--skip") if args.skip else (-1, -1)
    return RunConfig(kernel=args.kernel, nproc=args.nproc, shape=shape, out=args.out or f"ktrace-run-{args.kernel}",
                     steps=args.steps, delay_rank=dr, delay_ns=dn, skip_rank=sr, skip_notify=sn, timeout_ms=args.timeout_ms,
                     check=not args.no_check, nnodes=args.nnodes, align=not args.no_align, cost=not args.no_cost,
                     cost_steps=args.cost_steps, verify=args.verify, verify_steps=args.verify_steps)


def report_skew(capture_path: Path, run_json: Path) -> str:
    """:func:`start_skew` of a recorded capture, added to its ``run.json`` (when the ranks wrote
    one) as ``start_skew``; returns the lines to print.

    Raises:
        ktrace.captures.CaptureError: the capture cannot be read.
    """
    from .captures import read_capture
    from .clock.model import clock_model_of
    from .fileio import write_bytes

    cap = read_capture(capture_path)
    model = clock_model_of(cap)
    rows = start_skew(cap, model)
    bound = model.max_rtt_ns / 2 + model.max_residual_ns if model.aligned else None  # (as the report states it)
    if run_json.is_file():
        try:
            info = json.loads(run_json.read_text())
            info["start_skew"] = rows
            info["launch_alignment"] = (cap.meta or {}).get("launch_alignment")
            write_bytes(run_json, json.dumps(info, indent=1, default=str).encode())
        except (OSError, ValueError) as e:
            log.warning("ktrace run: the start skew could not be added to %s (%s); it is printed only", run_json, e)
    return skew_text(rows, bound)


def list_kernels() -> str:
    """The text of ``ktrace run --list``."""
    return "\n".join(spec.listing() for spec in kernels().values())


def _cmd_run(args) -> int:
    from .launch import rendezvous_from_args

    if args.list:
        print(list_kernels())
        return 0
    if not args.kernel:
        print("ktrace run: name a kernel (ktrace run --list shows them)", file=sys.stderr)
        return 2
    try:
        cfg = config_from_args(args)
        rdzv = rendezvous_from_args(args)
    except ValueError as e:
        print(f"ktrace run: {e}", file=sys.stderr)
        return 2
    why = refusal(cfg.nproc)
    if why:
        print(why, file=sys.stderr)
        return 2
    where = f"{cfg.nproc} GPU(s)" if cfg.nnodes == 1 else f"{cfg.nproc} GPU(s) on each of {cfg.nnodes} nodes"
    print(f"ktrace run: {cfg.kernel} on {where}, {', '.join(f'{k}={v}' for k, v in cfg.params.items())}; "
          f"{cfg.steps} traced step(s); output in {cfg.out}/", flush=True)
    try:
        path = record(cfg, timeout_s=args.timeout, rendezvous=rdzv)
    except RunError as e:
        print(e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"ktrace run: interrupted; every rank was stopped (logs in {Path(cfg.out) / 'logs'})", file=sys.stderr)
        return 130
    if path is None:
        print(f"ktrace run: this node's ranks finished; the node of rank 0 wrote the capture and the report "
              f"({cfg.capture_path} there)")
        return 0
    from viewers.terminal import report_text

    from .analysis import AnalysisError
    from .captures import CaptureError
    from .demo import DemoError, analyse, next_steps

    try:
        skew = report_skew(cfg.capture_path, Path(cfg.out) / "run.json")
        o = analyse(cfg.capture_path, cfg.out)
    except (CaptureError, AnalysisError, DemoError) as e:
        print(f"ktrace run: the capture was recorded but cannot be analysed: {e}", file=sys.stderr)
        return 1
    print(skew)
    print()
    print(report_text(o.report, verbose=args.verbose, max_findings=args.max_findings))
    print(next_steps(o))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``run`` to the ``ktrace`` command's subparsers."""
    from .launch import add_rendezvous_args
    from .demo import report_arguments

    try:
        names = f"one of: {', '.join(kernels())}"
    except Exception as e:  # noqa: BLE001 - a broken kernel folder must not break every subcommand
        names = f"a kernel folder (they cannot be listed now: {type(e).__name__})"
    s = subparsers.add_parser(
        "run", help="trace one instrumented kernel on N GPUs per node and report on it (one command)",
        description="Launch an instrumented kernel on N GPUs through torchrun (one process per GPU), record it "
                    "traced with the ranks' clocks calibrated, merge, write the Perfetto trace and the HTML report, "
                    "print the findings and the command to open the trace. Refuses (exit 2) without enough GPUs.",
        epilog="Kernels and their parameters: ktrace run --list. Without a GPU: ktrace demo. "
               "On several nodes: docs/scale.md.")
    s.add_argument("kernel", nargs="?", help=names)
    s.add_argument("--nproc", "-n", type=int, default=1, help="ranks on this node, one GPU each (default 1)")
    s.add_argument("-s", "--set", action="append", metavar="NAME=VALUE", help="a shape parameter (repeatable; see --list)")
    s.add_argument("--out", metavar="DIR", help="output folder (default ./ktrace-run-KERNEL)")
    s.add_argument("--steps", type=int, default=2, help="traced steps recorded after the warm-up (default 2)")
    s.add_argument("--delay", metavar="RANK:US", help="fault: RANK spins US microseconds before each of its notifies")
    s.add_argument("--skip", metavar="RANK:INDEX", help="fault: RANK skips notify INDEX (numbering in the kernel's README): a hang")
    s.add_argument("--timeout-ms", type=float, help="bound of every wait in the kernel (default: the kernel's; 200 ms with --skip)")
    s.add_argument("--no-check", action="store_true", help="do not compare the output with the kernel's reference")
    s.add_argument("--no-align", action="store_true",
                   help="release each step by a host barrier and a device synchronisation instead of a device-side barrier "
                        "(the ranks then start hundreds of µs apart, as a host-timed program does)")
    s.add_argument("--no-cost", action="store_true",
                   help="do not measure the probes' cost (by default COST_STEPS steps are timed traced and untraced, "
                        "interleaved, after recording; the report states the cost)")
    s.add_argument("--cost-steps", type=int, default=30, help="steps of each timed for the probes' cost (default 30)")
    s.add_argument("--verify", action="store_true",
                   help="check the report's first prediction on the GPU: delays of three sizes injected at its culprit, "
                        "the kernel timed with and without them (\"predicted +X µs, measured +Y µs\")")
    s.add_argument("--verify-steps", type=int, default=20, help="steps timed per delay size with --verify (default 20)")
    s.add_argument("--timeout", type=float, default=900.0, help="seconds before a rank is stopped (default 900)")
    report_arguments(s)
    s.add_argument("--list", action="store_true", help="list the kernels and their parameters")
    add_rendezvous_args(s)
    s.set_defaults(func=_cmd_run)


def _worker_main(config_json: str) -> int:
    """One rank, under torch's ``@record``: an exception is written to the error file torchrun
    gives the rank, which both torchrun and the launcher's summary report."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(worker)(RunConfig.from_json(config_json))


def _main(argv: list[str]) -> int:
    """``python -m ktrace.run --worker CONFIG_JSON`` is one rank (started by :func:`launch_run`);
    ``python -m ktrace.run KERNEL --nproc N ...`` is ``ktrace run KERNEL --nproc N ...``."""
    if argv[:1] == ["--worker"]:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        if len(argv) != 2:
            print("usage: python -m ktrace.run --worker CONFIG_JSON (started by `ktrace run`)", file=sys.stderr)
            return 2
        return _worker_main(argv[1])
    p = argparse.ArgumentParser(prog="python -m ktrace.run")
    register(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["run", *argv])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
