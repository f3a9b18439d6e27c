"""``ktrace run KERNEL --nproc N``: one instrumented kernel, traced on N GPUs of this node, analysed.

The whole path in one command::

    ktrace run all_to_all --nproc 4                      # the skewed MoE all-to-all
    ktrace run gemm_all_scatter --nproc 4 -s schedule=fused_ws -s M=4096
    ktrace run all_to_all --nproc 4 --skip 3:256         # rank 3 skips a notify: a hang report

What it does:

1. checks the request before any GPU work (known kernel and parameters, sizes that split over
   N ranks, at least N GPUs visible) and refuses with exit status 2 and one line otherwise;
2. starts N worker processes the way ``torchrun`` does (``ktrace.testing.launch``: a free
   rendezvous port, rank-prefixed output, each rank's log in ``OUT/logs``, NVLink multicast off);
3. in each worker: builds the kernel's plan on a symmetric heap, runs it once untraced and once
   traced to compile both variants (a rank still compiling while the others wait would put
   milliseconds of launch skew into the capture), then records ``--steps`` steps under
   ``ktrace.capture(heap=heap)`` (clock calibration before and after), checks the last output
   against the kernel's reference, and gathers every rank's capture to rank 0, which writes
   ``OUT/<kernel>.ktrace`` and ``OUT/run.json``;
4. back in this process (no GPU needed): aligns and merges, writes the Perfetto trace and the
   HTML/JSON report (:func:`ktrace.demo.analyse`), prints the report and the ``ktrace open``
   command to run next.

Each kernel's parameters are listed by ``ktrace run --list``; they are the keyword arguments of
the kernel folder's ``reference.generate_input`` and plan (see ``instrumented_kernels/*/README.md``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger("ktrace")

#: Environment of every worker (NVLink multicast stays off), unless the caller set these.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


@dataclass(frozen=True)
class Param:
    """One shape parameter of a kernel: name, type, default, help, and allowed values."""

    name: str
    type: type
    default: object
    help: str
    choices: tuple = ()

    def parse(self, text: str):
        """The value of ``text`` for this parameter; ValueError with a clear message if bad."""
        try:
            v = self.type(text)
        except ValueError:
            raise ValueError(f"{self.name}={text!r}: expected {self.type.__name__}") from None
        if self.choices and v not in self.choices:
            raise ValueError(f"{self.name}={text!r}: one of {', '.join(map(str, self.choices))}")
        if self.type in (int, float) and v < 0:
            raise ValueError(f"{self.name}={text!r}: must not be negative")
        return v


@dataclass(frozen=True)
class KernelSpec:
    """What ``ktrace run`` knows about one kernel folder of ``instrumented_kernels/``.

    Attributes:
        name: the folder's name.
        summary: one line for ``--list``.
        params: its shape parameters with their defaults.
        split: parameters that must be multiples of the number of ranks.
    """

    name: str
    summary: str
    params: tuple[Param, ...]
    split: tuple[str, ...] = ()

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise ValueError(f"{self.name} has no parameter {name!r}; it has: {', '.join(p.name for p in self.params)}")

    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}


_BF16 = ("bfloat16", "float16")
KERNELS: dict[str, KernelSpec] = {
    s.name: s
    for s in (
        KernelSpec(
            "all_to_all",
            "MoE all-to-all: dispatch tokens to their experts' ranks, combine them back (default: skewed routing)",
            (
                Param("max_tokens", int, 64, "tokens per rank (M)"),
                Param("hidden", int, 1024, "token width (D)"),
                Param("num_experts", int, 32, "experts in all (E; a multiple of the ranks)"),
                Param("topk", int, 6, "experts per token"),
                Param("skew", float, 0.6, "rank r holds round(M (1 - skew)^r) tokens (0: all M)"),
            ),
            split=("num_experts",),
        ),
        KernelSpec(
            "all_reduce",
            "all-reduce (sum) on the symmetric heap, one-shot or two-shot",
            (
                Param("n", int, 1 << 20, "elements per rank"),
                Param("method", str, "one_shot_push", "schedule", ("one_shot_push", "one_shot", "two_shot")),
                Param("dtype", str, "bfloat16", "element type", ("bfloat16", "float16", "float32")),
            ),
        ),
        KernelSpec(
            "gemm_all_scatter",
            "C = all_gather_columns(A @ B_r), in one of the four schedules of the Iris taxonomy",
            (
                Param("M", int, 2048, "rows of A and C"),
                Param("N", int, 2048, "columns of C (a multiple of the ranks)"),
                Param("K", int, 2048, "depth"),
                Param("schedule", str, "fused_sequential", "schedule",
                      ("bulk", "producer_consumer", "fused_sequential", "fused_ws")),
            ),
            split=("N",),
        ),
        KernelSpec(
            "ag_gemm",
            "all-gather of A's row shards fused with the GEMM (workgroup-specialised)",
            (
                Param("M", int, 2048, "rows of the gathered A (a multiple of the ranks)"),
                Param("N", int, 2048, "columns in all (a multiple of the ranks; each rank has N / ranks)"),
                Param("K", int, 2048, "depth"),
            ),
            split=("M", "N"),
        ),
        KernelSpec(
            "gemm_rs",
            "GEMM of K shards fused with the reduce-scatter of its rows",
            (
                Param("M", int, 2048, "rows (a multiple of the ranks)"),
                Param("N", int, 2048, "columns"),
                Param("K", int, 2048, "depth in all (a multiple of the ranks)"),
            ),
            split=("M", "K"),
        ),
    )
}


@dataclass(frozen=True)
class RunConfig:
    """One ``ktrace run`` (validated on construction, before any GPU work).

    Args:
        kernel: a key of :data:`KERNELS`.
        nproc: ranks, one GPU each.
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

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"unknown kernel {self.kernel!r}; choose one of: {', '.join(KERNELS)}")
        spec = KERNELS[self.kernel]
        if isinstance(self.nproc, bool) or not isinstance(self.nproc, int) or self.nproc < 1:
            raise ValueError(f"--nproc must be a positive int, got {self.nproc!r}")
        if not isinstance(self.steps, int) or not 1 <= self.steps <= 100:
            raise ValueError(f"--steps must be in 1..100, got {self.steps!r}")
        full = spec.defaults()
        for k, v in self.shape.items():
            p = spec.param(k)
            if not isinstance(v, p.type) or isinstance(v, bool):
                raise ValueError(f"{k}={v!r}: expected {p.type.__name__}")
            full[k] = v
        for k in spec.split:
            if full[k] % self.nproc:
                raise ValueError(f"{self.kernel}: {k}={full[k]} does not split over {self.nproc} ranks (use a multiple of {self.nproc})")
        for k, v in full.items():
            if spec.param(k).type is int and v < 1:
                raise ValueError(f"{k} must be >= 1, got {v}")
        if self.kernel == "all_to_all":
            if not 0.0 <= full["skew"] < 1.0:
                raise ValueError(f"skew must be in [0, 1), got {full['skew']}")
            if full["topk"] > min(32, full["num_experts"]) or full["max_tokens"] > 2048:
                raise ValueError("all_to_all needs topk <= min(32, num_experts) and max_tokens <= 2048")
        if (self.delay_rank >= 0) != (self.delay_ns > 0):
            raise ValueError("a delay needs a rank and a positive time (--delay RANK:MICROSECONDS)")
        if (self.skip_rank >= 0) != (self.skip_notify >= 0):
            raise ValueError("a skipped notify needs a rank and a notify index (--skip RANK:INDEX)")
        for r in (self.delay_rank, self.skip_rank):
            if r >= self.nproc:
                raise ValueError(f"fault rank {r} is not among the {self.nproc} ranks")
        if self.timeout_ms is not None and not 0 < self.timeout_ms <= 60_000:
            raise ValueError(f"--timeout-ms must be in (0, 60000], got {self.timeout_ms}")

    @property
    def params(self) -> dict:
        """Every parameter of the kernel: defaults with this run's overrides."""
        return {**KERNELS[self.kernel].defaults(), **self.shape}

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
        return 0, "torch is not installed"
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


class _Driver:
    """One kernel's plan, inputs, step and check on this rank (built collectively)."""

    heap = None
    plan = None

    def step(self) -> None:
        raise NotImplementedError

    def check(self) -> float:
        """Relative error of the last step's output against the reference (raises if too big)."""
        raise NotImplementedError


class _AllToAll(_Driver):
    def __init__(self, dist, cfg: RunConfig, fault, seed: int):
        import torch

        from instrumented_kernels import harness as H
        from instrumented_kernels.all_to_all.kernel import MoEAllToAll, MoEConfig
        from instrumented_kernels.all_to_all.reference import expert_scales, generate_input

        p = cfg.params
        extra = {"timeout_ns": cfg.wait_timeout_ns} if cfg.wait_timeout_ns else {}
        mc = MoEConfig(max_tokens=p["max_tokens"], hidden=p["hidden"], num_experts=p["num_experts"], topk=p["topk"], **extra)
        self.plan = MoEAllToAll(H.heap(MoEAllToAll.heap_bytes(mc, dist.world_size)), mc)
        self.heap, self.fault, self.rank = self.plan.heap, fault, dist.rank
        self.inp = generate_input(dist.rank, dist.world_size, seed, p["max_tokens"], p["hidden"], p["num_experts"], p["topk"],
                                  skew=p["skew"], device=dist.device)
        self.scales_all = expert_scales(seed, p["num_experts"], p["hidden"], dist.device)
        EL = self.plan.EL
        self.scales = self.scales_all[dist.rank * EL : (dist.rank + 1) * EL].contiguous()
        self.out = H.poison(torch.empty_like(self.inp["x"]))

    def step(self):
        i = self.inp
        self.plan.dispatch(i["x"], i["topk_idx"], i["topk_w"], i["m"], fault=self.fault)
        self.plan.combine(self.scales, self.out, fault=self.fault)

    def check(self):
        from instrumented_kernels.all_to_all.reference import check_combine

        return check_combine(self.out, self.inp, self.scales_all, rank=self.rank)


class _AllReduce(_Driver):
    def __init__(self, dist, cfg: RunConfig, fault, seed: int):
        import torch

        from instrumented_kernels import harness as H
        from instrumented_kernels.all_reduce.kernel import AllReduce, AllReduceConfig
        from instrumented_kernels.all_reduce.reference import generate_input

        p = cfg.params
        extra = {"timeout_ns": cfg.wait_timeout_ns} if cfg.wait_timeout_ns else {}
        ac = AllReduceConfig(n=p["n"], dtype=p["dtype"], method=p["method"], **extra)
        self.plan = AllReduce(H.heap(AllReduce.heap_bytes(ac, dist.world_size)), ac)
        self.heap, self.fault, self.dist, self.seed, self.p = self.plan.heap, fault, dist, seed, p
        self.x = generate_input(dist.rank, dist.world_size, seed, p["n"], p["dtype"], dist.device)
        self.out = H.poison(torch.empty_like(self.x))

    def step(self):
        self.plan(self.x, self.out, fault=self.fault)

    def check(self):
        from instrumented_kernels.all_reduce.reference import check

        return check(self.out, self.dist.world_size, self.seed, self.p["n"], self.p["dtype"], rank=self.dist.rank)


class _GemmAllScatter(_Driver):
    def __init__(self, dist, cfg: RunConfig, fault, seed: int):
        import torch

        from instrumented_kernels import harness as H
        from instrumented_kernels.gemm_all_scatter.kernel import AllScatterConfig, GemmAllScatter
        from instrumented_kernels.gemm_all_scatter.reference import generate_input

        p = cfg.params
        extra = {"timeout_ns": cfg.wait_timeout_ns} if cfg.wait_timeout_ns else {}
        heap = H.heap(p["M"] * p["N"] * 2 + (1 << 20))
        self.plan = GemmAllScatter(heap, p["M"], p["N"], p["K"], torch.bfloat16,
                                   AllScatterConfig(schedule=p["schedule"], fault=fault, **extra))
        self.heap, self.dist, self.seed, self.p = heap, dist, seed, p
        inp = generate_input(dist.rank, dist.world_size, seed, M=p["M"], K=p["K"], N=p["N"], device=dist.device)
        self.A, self.B = inp["A"], inp["B"]

    def step(self):
        self.plan(self.A, self.B)

    def check(self):
        from instrumented_kernels.gemm_all_scatter.reference import check, reference

        p, d = self.p, self.dist
        self.heap.barrier()  # every peer's columns have landed
        return check(self.plan.C, reference(d.rank, d.world_size, self.seed, M=p["M"], K=p["K"], N=p["N"], device=d.device), rank=d.rank)


class _AGGemm(_Driver):
    def __init__(self, dist, cfg: RunConfig, fault, seed: int):
        import torch

        from instrumented_kernels import harness as H
        from instrumented_kernels.ag_gemm.kernel import AGGemmConfig, AllGatherGemm
        from instrumented_kernels.ag_gemm.reference import generate_input

        p = cfg.params
        extra = {"timeout_ns": cfg.wait_timeout_ns} if cfg.wait_timeout_ns else {}
        heap = H.heap(p["M"] * p["K"] * 2 + (1 << 20))
        self.plan = AllGatherGemm(heap, p["M"], p["N"] // dist.world_size, p["K"], torch.bfloat16, AGGemmConfig(fault=fault, **extra))
        self.heap, self.dist, self.seed, self.p = heap, dist, seed, p
        inp = generate_input(dist.rank, dist.world_size, seed, K=p["K"], M=p["M"], N=p["N"], device=dist.device)
        self.A, self.B = inp["A"], inp["B"]

    def step(self):
        self.C = self.plan(self.A, self.B)

    def check(self):
        from instrumented_kernels.ag_gemm.reference import check, reference

        p, d = self.p, self.dist
        return check(self.C, reference(d.rank, d.world_size, self.seed, K=p["K"], M=p["M"], N=p["N"], device=d.device), rank=d.rank)


class _GemmRS(_Driver):
    def __init__(self, dist, cfg: RunConfig, fault, seed: int):
        import torch

        from instrumented_kernels import harness as H
        from instrumented_kernels.gemm_rs.kernel import GemmReduceScatter, GemmRSConfig
        from instrumented_kernels.gemm_rs.reference import generate_input

        p = cfg.params
        extra = {"timeout_ns": cfg.wait_timeout_ns} if cfg.wait_timeout_ns else {}
        heap = H.heap(p["M"] * p["N"] * 2 + (1 << 20))
        self.plan = GemmReduceScatter(heap, p["M"], p["N"], p["K"] // dist.world_size, torch.bfloat16,
                                      GemmRSConfig(fault=fault, **extra))
        self.heap, self.dist, self.seed, self.p = heap, dist, seed, p
        inp = generate_input(dist.rank, dist.world_size, seed, N=p["N"], M=p["M"], K=p["K"], device=dist.device)
        self.A, self.B = inp["A"], inp["B"]

    def step(self):
        self.out = self.plan(self.A, self.B)

    def check(self):
        from instrumented_kernels.gemm_rs.reference import check, reference

        p, d = self.p, self.dist
        return check(self.out, reference(d.rank, d.world_size, self.seed, N=p["N"], M=p["M"], K=p["K"], device=d.device), rank=d.rank)


_DRIVERS = {"all_to_all": _AllToAll, "all_reduce": _AllReduce, "gemm_all_scatter": _GemmAllScatter, "ag_gemm": _AGGemm,
            "gemm_rs": _GemmRS}


def _aligned_start(heap) -> None:
    """Wait for every rank's earlier work, then release the ranks together (a device-side
    collective last, so that their next launches start within microseconds of each other)."""
    import torch
    import torch.distributed as tdist

    heap.barrier()
    tdist.barrier()
    torch.cuda.synchronize()


def _after_step(drv, faulty: bool) -> list[str]:
    """Collect (and clear) this rank's timed-out waits; re-arm a plan a skipped notify left uneven."""
    count, described = drv.heap.timeouts()
    got = [str(t) for t in described] + ([f"... and {count - len(described)} more"] if count > len(described) else [])
    if count:
        drv.heap.clear_timeouts()  # before the closing calibration, which waits on flags too
    drv.heap.barrier()
    if faulty and hasattr(drv.plan, "reset"):
        drv.plan.reset()
    return got


def worker(cfg: RunConfig) -> int:
    """The per-rank body of ``ktrace run`` (started by :func:`launch_run`); returns an exit status."""
    import torch

    import ktrace
    from instrumented_kernels import harness as H

    dist = H.setup()
    if dist.world_size != cfg.nproc:
        raise RuntimeError(f"launched with {dist.world_size} ranks for --nproc {cfg.nproc}")
    fault = H.Fault(delay_rank=cfg.delay_rank, delay_ns=cfg.delay_ns, skip_rank=cfg.skip_rank, skip_notify=cfg.skip_notify)
    seed = H.fresh_seed(dist)
    drv = _DRIVERS[cfg.kernel](dist, cfg, fault, seed)
    skips = cfg.skip_rank >= 0
    t0 = time.perf_counter()
    _aligned_start(drv.heap)
    drv.step()  # compile the untraced variant
    _after_step(drv, skips)
    _aligned_start(drv.heap)
    with ktrace.capture():  # compile the traced variant (KTRACE > 0 is another compilation)
        drv.step()
    _after_step(drv, skips)
    log.info("[rank %d] ktrace run: warm-up (compilation) took %.1f s", dist.rank, time.perf_counter() - t0)
    timeouts: list[str] = []
    with ktrace.capture(heap=drv.heap) as cap:
        for _ in range(cfg.steps):
            _aligned_start(drv.heap)
            drv.step()
            timeouts += _after_step(drv, skips)
    err = None
    if cfg.check and not skips:
        torch.cuda.synchronize()
        err = drv.check()  # raises MismatchError naming the rank
    merged = cap.gather(dst=0)
    every = drv.heap.all_gather_object({"timeouts": timeouts, "rel_err": err, "device": torch.cuda.get_device_name()})
    if dist.rank == 0:
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        merged.meta.update(made_by="ktrace run", kernel=cfg.kernel, params=cfg.params, steps=cfg.steps)
        path = ktrace.write_capture(cfg.capture_path, merged, compress=True)
        info = {
            "kernel": cfg.kernel, "world_size": dist.world_size, "params": cfg.params, "steps": cfg.steps, "seed": seed,
            "fault": asdict(fault), "ranks": {str(r): e for r, e in enumerate(every)}, "capture": str(path),
        }
        (out / "run.json").write_text(json.dumps(info, indent=1, default=str))
        print(f"wrote {path} ({path.stat().st_size:,} bytes, {len(merged.events()):,} events)", flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------


def launch_run(cfg: RunConfig, timeout_s: float = 900.0) -> tuple[bool, str]:
    """Start ``cfg.nproc`` workers and wait for them; returns (every rank ok, the launcher's summary)."""
    from .testing.launch import LaunchConfig, launch, summarize

    for k, v in SAFE_ENV.items():
        os.environ.setdefault(k, v)  # inherited by the workers (the launcher sets them too)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    lc = LaunchConfig(command=(sys.executable, "-m", "ktrace.run", "--worker", cfg.to_json()), nprocs=cfg.nproc,
                      timeout_s=timeout_s, grace_s=30.0, log_dir=str(out / "logs"))
    results = launch(lc)
    return all(r.status == "ok" for r in results), summarize(results, lc)


class RunError(RuntimeError):
    """``ktrace run`` could not record: too few GPUs (the one-line reason), or a rank failed
    (the launcher's summary, naming the rank, with the tail of its output)."""


def record(cfg: RunConfig, timeout_s: float = 900.0) -> Path:
    """Record ``cfg`` on this node's GPUs (the workers of :func:`worker`); returns the merged capture.

    Raises:
        RunError: fewer GPUs than ``cfg.nproc`` (nothing started), or a rank failed.
    """
    why = refusal(cfg.nproc)
    if why:
        raise RunError(why)
    ok, summary = launch_run(cfg, timeout_s=timeout_s)
    if not ok:
        raise RunError(f"{summary}\nktrace run: a rank failed (each rank's log is in {Path(cfg.out) / 'logs'})")
    return cfg.capture_path


def _parse_rank_value(text: str, what: str, scale: float = 1.0) -> tuple[int, int]:
    try:
        r, v = text.split(":")
        return int(r), int(round(float(v) * scale))
    except ValueError:
        raise ValueError(f"{what} wants RANK:VALUE (e.g. 3:20), got {text!r}") from None


def config_from_args(args) -> RunConfig:
    """A :class:`RunConfig` from parsed ``ktrace run`` arguments (ValueError when bad)."""
    if args.kernel not in KERNELS:
        raise ValueError(f"unknown kernel {args.kernel!r}; choose one of: {', '.join(KERNELS)} (ktrace run --list)")
    spec = KERNELS[args.kernel]
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
                     check=not args.no_check)


def list_kernels() -> str:
    """The text of ``ktrace run --list``."""
    lines = []
    for s in KERNELS.values():
        lines.append(f"{s.name}: {s.summary}")
        for p in s.params:
            ch = f" (one of {', '.join(p.choices)})" if p.choices else ""
            lines.append(f"    -s {p.name}={p.default}  {p.help}{ch}")
    return "\n".join(lines)


def _cmd_run(args) -> int:
    if args.list:
        print(list_kernels())
        return 0
    if not args.kernel:
        print("ktrace run: name a kernel (ktrace run --list shows them)", file=sys.stderr)
        return 2
    try:
        cfg = config_from_args(args)
    except ValueError as e:
        print(f"ktrace run: {e}", file=sys.stderr)
        return 2
    why = refusal(cfg.nproc)
    if why:
        print(why, file=sys.stderr)
        return 2
    print(f"ktrace run: {cfg.kernel} on {cfg.nproc} GPU(s), {', '.join(f'{k}={v}' for k, v in cfg.params.items())}; "
          f"{cfg.steps} traced step(s); output in {cfg.out}/", flush=True)
    try:
        record(cfg, timeout_s=args.timeout)
    except RunError as e:
        print(e, file=sys.stderr)
        return 1
    from .analysis import AnalysisError, render_text
    from .demo import DemoError, analyse, next_steps
    from .captures import CaptureError

    try:
        o = analyse(cfg.capture_path, cfg.out)
    except (CaptureError, AnalysisError, DemoError) as e:
        print(f"ktrace run: the capture was recorded but cannot be analysed: {e}", file=sys.stderr)
        return 1
    print()
    print(render_text(o.report, max_findings=args.max_findings))
    print(next_steps(o))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``run`` to the ``ktrace`` command's subparsers."""
    s = subparsers.add_parser(
        "run", help="trace one instrumented kernel on N GPUs of this node and report on it (one command)",
        description="Launch an instrumented kernel on N GPUs (one process per GPU, like torchrun), record it traced "
                    "with the ranks' clocks calibrated, merge, write the Perfetto trace and the HTML report, print the "
                    "findings and the command to open the trace. Refuses (exit 2) without enough GPUs.",
        epilog="Kernels and their parameters: ktrace run --list. Without a GPU: ktrace demo.")
    s.add_argument("kernel", nargs="?", help=f"one of: {', '.join(KERNELS)}")
    s.add_argument("--nproc", "-n", type=int, default=1, help="ranks, one GPU each (default 1)")
    s.add_argument("-s", "--set", action="append", metavar="NAME=VALUE", help="a shape parameter (repeatable; see --list)")
    s.add_argument("--out", metavar="DIR", help="output folder (default ./ktrace-run-KERNEL)")
    s.add_argument("--steps", type=int, default=2, help="traced steps recorded after the warm-up (default 2)")
    s.add_argument("--delay", metavar="RANK:US", help="fault: RANK spins US microseconds before each of its notifies")
    s.add_argument("--skip", metavar="RANK:INDEX", help="fault: RANK skips notify INDEX (numbering in the kernel's README): a hang")
    s.add_argument("--timeout-ms", type=float, help="bound of every wait in the kernel (default: the kernel's; 200 ms with --skip)")
    s.add_argument("--no-check", action="store_true", help="do not compare the output with the kernel's reference")
    s.add_argument("--timeout", type=float, default=900.0, help="seconds before every rank is stopped (default 900)")
    s.add_argument("--max-findings", type=int, default=10, help="findings printed (default 10)")
    s.add_argument("--list", action="store_true", help="list the kernels and their parameters")
    s.set_defaults(func=_cmd_run)


def _main(argv: list[str]) -> int:
    """``python -m ktrace.run --worker CONFIG_JSON`` is one rank (started by :func:`launch_run`);
    ``python -m ktrace.run KERNEL --nproc N ...`` is ``ktrace run KERNEL --nproc N ...``."""
    if argv[:1] == ["--worker"]:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        if len(argv) != 2:
            print("usage: python -m ktrace.run --worker CONFIG_JSON (started by `ktrace run`)", file=sys.stderr)
            return 2
        return worker(RunConfig.from_json(argv[1]))
    p = argparse.ArgumentParser(prog="python -m ktrace.run")
    register(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["run", *argv])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
