"""Start a command once per rank through torchrun, time every rank out, name the rank that failed.

The launcher ``ktrace run`` uses, and a public module of its own (``ktrace.testing.launch`` is its
former name, kept):

    python -m ktrace.launch -n 2 -- python -m pytest -m multigpu tests/multigpu tests/kernels -q
    python -m ktrace.launch -n 2 --timeout 300 --log-dir logs -- python my_script.py
    python -m ktrace.launch -n 8 --nnodes 2 --rdzv-backend c10d --rdzv-endpoint head:29500 -- python my.py

The ranks are started by torchrun (``python -m torch.distributed.run``, see
:func:`torchrun_command`): on one node with ``--standalone`` (a rendezvous store on a free port),
on several with torchrun's own options (``--nnodes``, ``--node-rank``, ``--rdzv-backend``,
``--rdzv-endpoint``, ``--rdzv-id``, ``--master-addr``, ``--master-port``), passed through as
given; always ``--max-restarts 0`` (a capture is not re-run behind the user's back). torchrun
gives each rank ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``,
and stops every rank when one fails. The process group is initialised inside the command
(``ktrace.shmem.init_distributed()``; the multi-GPU tests' conftest does it). NVLink multicast is
off in every rank's environment (``ktrace.dist_env.SAFE_ENV``) unless the caller set those values.

Why this module exists next to torchrun: two things torchrun does not do.

* A time limit. torchrun waits for its workers without one; a rank spinning on a flag whose
  notify never comes, or blocked in a collective with a peer that died on another node, hangs
  it (and the test tier, and ``ktrace run``). Here every rank has a deadline (``--timeout``),
  and the launch as a whole ``--startup`` seconds more for torchrun's start and rendezvous.
* A verdict for every rank. torchrun reports the first worker that exited non-zero (its "root
  cause", with the traceback only when the worker wrote an error file under
  ``torch.distributed.elastic.multiprocessing.errors.record``); it says nothing of the ranks
  it then stopped, of a rank that hung, or of the output before the failure, and
  ``--redirects``/``--tee`` put the logs under a folder per run id, attempt and local rank.
  Here every rank ends with one status (passed, FAILED, TIMED OUT, stopped), the summary
  has one line per rank, repeats the tail of each failed or timed-out rank's log and the
  first line of its error file, and each rank's log is ``LOG_DIR/rank<r>.log``.

For that, torchrun starts this module once per rank in ``--rank-wrapper`` mode (standard
library only: no torch import, no GPU), which runs the command as its child, prefixes its
output lines with ``[rank r]``, copies them to the rank's log, stops the child at the deadline,
when torchrun stops the group or when torchrun is gone, and leaves ``LOG_DIR/rank<r>.json``
saying how the rank ended. The exit status of a launch is 0 only if every rank exited with 0.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field

from .dist_env import apply_safe_env

#: The module torchrun starts once per rank (this one, in ``--rank-wrapper`` mode).
_WRAPPER_MODULE = "ktrace.launch"
#: How often torchrun looks at its workers (s): a failure stops the others within about this.
MONITOR_INTERVAL_S = 0.5
#: Exit status of a rank wrapper whose command it stopped: at its deadline / on torchrun's request.
EXIT_TIMEOUT, EXIT_STOPPED = 124, 143


@dataclass(frozen=True)
class Rendezvous:
    """How the nodes of a launch meet: torchrun's own options, passed through as given.

    With none of them given (one node), the launch uses ``--standalone``. On several nodes every
    node runs the same launch with the same options (``node_rank`` apart, for the static backend).

    Args:
        nnodes: nodes taking part (a fixed number: a capture needs every rank).
        node_rank: this node's index (torchrun's static rendezvous; c10d assigns one).
        rdzv_backend: ``"c10d"`` (recommended on several nodes) or ``"static"`` (torchrun's default).
        rdzv_endpoint: ``HOST[:PORT]`` of the rendezvous, the same on every node.
        rdzv_id: the job's id, the same on every node.
        master_addr, master_port: the static rendezvous' host and port (instead of an endpoint).
    """

    nnodes: int = 1
    node_rank: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    master_addr: str | None = None
    master_port: int | None = None

    def __post_init__(self):
        if isinstance(self.nnodes, bool) or not isinstance(self.nnodes, int) or self.nnodes < 1:
            raise ValueError(f"--nnodes must be a positive int, got {self.nnodes!r}")
        if self.node_rank is not None and not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"--node-rank {self.node_rank} is not among the {self.nnodes} node(s)")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise ValueError(f"--master-port must be in 1..65535, got {self.master_port}")
        if self.nnodes > 1 and not (self.rdzv_endpoint or self.master_addr):
            raise ValueError(f"--nnodes {self.nnodes} needs a rendezvous every node can reach: "
                             "--rdzv-endpoint HOST:PORT (or --master-addr HOST), the same on every node")
        for name in ("rdzv_backend", "rdzv_endpoint", "rdzv_id", "master_addr"):
            v = getattr(self, name)
            if v is not None and (not v.strip() or any(c.isspace() for c in v)):
                raise ValueError(f"--{name.replace('_', '-')} {v!r} is empty or holds a space")

    @property
    def given(self) -> bool:
        """Whether any option beyond one node's defaults was given (then no ``--standalone``)."""
        return self.nnodes > 1 or any(getattr(self, k) is not None for k in (
            "node_rank", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "master_addr", "master_port"))

    def torchrun_args(self) -> list[str]:
        """This rendezvous as torchrun options."""
        if not self.given:
            return ["--standalone"]
        out = ["--nnodes", str(self.nnodes)]
        for flag, v in (("--node-rank", self.node_rank), ("--rdzv-backend", self.rdzv_backend),
                        ("--rdzv-endpoint", self.rdzv_endpoint), ("--rdzv-id", self.rdzv_id),
                        ("--master-addr", self.master_addr), ("--master-port", self.master_port)):
            if v is not None:
                out += [flag, str(v)]
        return out


@dataclass(frozen=True)
class LaunchConfig:
    """What :func:`launch` runs (validated on construction).

    Args:
        command: the command of every rank (``pytest`` / ``python`` run with this interpreter).
        nprocs: ranks on this node (torchrun's ``--nproc-per-node``), >= 1.
        timeout_s: each rank's time limit, from its start; a rank still running is stopped.
        log_dir: where ``rank<r>.log``, ``rank<r>.json`` and ``torchrun.log`` go (default: a new
            temporary folder).
        tail_lines: lines of each failed or timed-out rank's output repeated in the summary.
        rendezvous: how the nodes meet (default: this node alone).
        startup_s: time allowed on top of ``timeout_s`` for torchrun's start, rendezvous and
            shutdown; past it torchrun is stopped.
    """

    command: tuple[str, ...]
    nprocs: int
    timeout_s: float = 900.0
    log_dir: str | None = None
    tail_lines: int = 20
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    startup_s: float = 300.0

    def __post_init__(self):
        if not self.command:
            raise ValueError("no command to launch (put it after --)")
        if isinstance(self.nprocs, bool) or not isinstance(self.nprocs, int) or self.nprocs < 1:
            raise ValueError(f"nprocs must be >= 1, got {self.nprocs}")
        if not self.timeout_s > 0 or not self.startup_s > 0:
            raise ValueError("the timeout and the startup allowance must be positive")
        if self.tail_lines < 1:
            raise ValueError(f"tail_lines must be >= 1, got {self.tail_lines}")


@dataclass
class RankResult:
    """How one rank ended.

    Attributes:
        rank: global rank (-1: torchrun itself, or a rank that left no status).
        returncode: its exit status (None: unknown).
        status: "ok", "failed", "timeout", "stopped" (by torchrun after another rank failed),
            or "lost" (torchrun did not start it, or it was killed before saying how it ended).
        tail: the last lines of its output.
        local_rank: its index on this node.
        error: first line of the error file it left (``@record``), if any.
        ended: when it ended (``time.time()``), to tell the first failure.
    """

    rank: int
    returncode: int | None = None
    status: str = "running"
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=20))
    local_rank: int | None = None
    error: str = ""
    ended: float = 0.0

    @property
    def name(self) -> str:
        """How the summary names it: ``rank r``, ``local rank k`` (no global rank known) or ``torchrun``."""
        if self.rank >= 0:
            return f"rank {self.rank}"
        return "torchrun" if self.local_rank is None else f"local rank {self.local_rank}"

    def describe(self) -> str:
        """One line: who, and how it ended (with the counts of a pytest run, when the command was one)."""
        counts = outcome_counts(self.tail)
        counts = f" ({counts})" if counts else ""
        if self.status == "ok":
            return f"{self.name}: passed{counts}"
        if self.status == "failed":
            if self.rank < 0 and self.local_rank is None:
                return f"torchrun: FAILED with exit status {self.returncode} (its log: torchrun.log)"
            why = f" ({self.error})" if self.error else ""
            return f"{self.name}: FAILED with exit status {self.returncode}{why}{counts}"
        if self.status == "timeout":
            return f"{self.name}: TIMED OUT (stopped)"
        if self.status == "lost":
            return f"{self.name}: no status (torchrun did not start it, or it was killed)"
        return f"{self.name}: stopped after another rank failed (exit status {self.returncode})"


#: pytest's last line: counts of outcomes and the time ("3 passed, 1 skipped in 2.10s"), in ``=`` or not.
_PYTEST_SUMMARY = re.compile(r"^=*\s*((?:\d+ (?:passed|failed|skipped|deselected|errors?|xfailed|xpassed|warnings?)"
                             r"(?:, )?)+) in [\d.]+s(?: \([\d:]+\))?\s*=*$")


def outcome_counts(lines) -> str:
    """The outcome counts of the last pytest summary line among ``lines`` ("113 passed, 22 skipped"),
    or "" when there is none (the command was not a pytest run, or it did not finish)."""
    for line in reversed(list(lines)):
        m = _PYTEST_SUMMARY.match(line.strip())
        if m:
            return m.group(1).rstrip(", ")
    return ""



def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(cmd: tuple[str, ...]) -> list[str]:
    cmd = list(cmd)
    if cmd[0] == "pytest":
        return [sys.executable, "-m", "pytest", *cmd[1:]]
    if cmd[0] in ("python", "python3"):
        return [sys.executable, *cmd[1:]]
    return cmd


def torchrun_command(cfg: LaunchConfig, log_dir: str, launch_id: str) -> list[str]:
    """The torchrun command line of a launch: torchrun starts :data:`_WRAPPER_MODULE` once per rank,
    which runs ``cfg.command``.

    Args:
        cfg: the launch.
        log_dir: where the ranks write their logs and statuses.
        launch_id: tags this launch's statuses (several launches may share a folder).
    """
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc-per-node", str(cfg.nprocs),
        *cfg.rendezvous.torchrun_args(),
        "--max-restarts", "0",
        "--monitor-interval", f"{MONITOR_INTERVAL_S:g}",
        "--module", _WRAPPER_MODULE,
        "--rank-wrapper", "--launch-id", launch_id, "--timeout", f"{cfg.timeout_s:g}", "--log-dir", log_dir,
        "--tail", str(cfg.tail_lines), "--",
        *_command(cfg.command),
    ]


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    apply_safe_env(env)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# ---------------------------------------------------------------------------------------------
# one rank (started by torchrun)
# ---------------------------------------------------------------------------------------------


def _error_line(path: str | None) -> str:
    """The first line of the error file a command wrote under ``@record`` ("" if none)."""
    if not path or not os.path.isfile(path):
        return ""
    try:
        with open(path) as f:
            msg = json.load(f).get("message", "")
    except (OSError, ValueError, AttributeError):
        return ""
    if isinstance(msg, dict):
        msg = msg.get("message", "")
    return str(msg).strip().splitlines()[0][:300] if str(msg).strip() else ""


def _end_child(child: subprocess.Popen) -> None:
    """Stop the command (and what it started in this rank's process group), SIGKILL after 5 s."""
    if child.poll() is not None:
        return
    try:
        if os.getpgrp() == os.getpid():  # torchrun made this wrapper a group leader: stop the group
            os.killpg(os.getpgrp(), signal.SIGTERM)  # this process only records the request
        else:
            child.terminate()
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def run_rank(launch_id: str, timeout_s: float, log_dir: str, tail_lines: int, command: list[str]) -> int:
    """One rank, under torchrun: run ``command``, stream and log its output, stop it at the
    deadline, write the rank's status (``LOG_DIR/rank<r>.json``).

    Args:
        launch_id: the launch's tag, written into the status.
        timeout_s: the rank's time limit, from now.
        log_dir: where ``rank<r>.log`` and ``rank<r>.json`` go.
        tail_lines: lines of output kept in the status.
        command: what to run (the rank's ``RANK``/``LOCAL_RANK`` come from torchrun).

    Returns:
        The wrapper's exit status: the command's (128 + N for a signal N), :data:`EXIT_TIMEOUT`
        at the deadline, :data:`EXIT_STOPPED` when torchrun stopped the rank.
    """
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    os.makedirs(log_dir, exist_ok=True)
    stop: list[str] = []  # why this rank was stopped, once decided
    signal.signal(signal.SIGTERM, lambda *_: stop or stop.append("stopped"))
    signal.signal(signal.SIGINT, lambda *_: stop or stop.append("stopped"))
    tail: collections.deque = collections.deque(maxlen=tail_lines)
    prefix = f"[rank {rank}] ".encode()
    parent, t0 = os.getppid(), time.monotonic()
    out = sys.stdout.buffer
    with open(os.path.join(log_dir, f"rank{rank}.log"), "wb") as log_file:
        child = subprocess.Popen(command, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def pump():
            for raw in iter(child.stdout.readline, b""):
                line = raw if raw.endswith(b"\n") else raw + b"\n"
                tail.append(line.decode("utf-8", "replace").rstrip("\n"))
                out.write(prefix + line)  # one write per line: lines of ranks do not interleave
                out.flush()
                log_file.write(line)
                log_file.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        stopped_it = False
        while child.poll() is None:
            if not stop:
                if time.monotonic() - t0 > timeout_s:
                    stop.append("timeout")
                elif os.getppid() != parent:  # torchrun is gone: nobody else will stop us
                    stop.append("stopped")
            if stop:
                stopped_it = True
                _end_child(child)
                break
            time.sleep(0.1)
        reader.join(timeout=5)
    rc = child.returncode
    if stopped_it:
        status = stop[0]
    elif rc == 0:
        status = "ok"
    elif rc < 0 and (stop or rc == -signal.SIGTERM):  # torchrun's stop reached the command first
        status = "stopped"
    else:  # it failed on its own (perhaps while torchrun was stopping the group)
        status = "failed"
    record = {
        "launch": launch_id, "rank": rank, "local_rank": local, "host": socket.gethostname(), "status": status,
        "returncode": rc, "error": _error_line(os.environ.get("TORCHELASTIC_ERROR_FILE")) if status == "failed" else "",
        "tail": list(tail), "ended": time.time(), "seconds": round(time.monotonic() - t0, 3),
    }
    path = os.path.join(log_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)
    if status == "timeout":
        return EXIT_TIMEOUT
    if status == "stopped":
        return EXIT_STOPPED
    return rc if rc >= 0 else 128 - rc


# ---------------------------------------------------------------------------------------------
# the launch
# ---------------------------------------------------------------------------------------------


def _pump_lines(stream, sink) -> None:
    for raw in iter(stream.readline, b""):
        sink(raw.decode("utf-8", "replace").rstrip("\n"))
    stream.close()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _stop_torchrun(proc: subprocess.Popen) -> None:
    """Ask torchrun to stop its ranks (SIGTERM; it waits up to 30 s for them), then kill it."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=45)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the ranks, in their own sessions, see it gone
        except ProcessLookupError:
            pass
        proc.wait()


def _statuses(log_dir: str, launch_id: str, tail_lines: int) -> list[RankResult]:
    out = []
    for path in glob.glob(os.path.join(log_dir, "rank*.json")):
        try:
            with open(path) as f:
                s = json.load(f)
        except (OSError, ValueError):
            continue
        if s.get("launch") != launch_id:
            continue
        out.append(RankResult(rank=int(s["rank"]), returncode=s.get("returncode"), status=s["status"],
                              tail=collections.deque(s.get("tail", []), maxlen=tail_lines),
                              local_rank=s.get("local_rank"), error=s.get("error", ""), ended=s.get("ended", 0.0)))
    return sorted(out, key=lambda r: r.rank)


def launch(cfg: LaunchConfig) -> list[RankResult]:
    """Run ``cfg.command`` once per rank of this node through torchrun and wait (at most
    ``cfg.timeout_s + cfg.startup_s``); returns how each rank ended (see :class:`RankResult`),
    plus an entry for torchrun itself (rank -1) when it failed on its own."""
    launch_id = uuid.uuid4().hex[:12]
    log_dir = cfg.log_dir or tempfile.mkdtemp(prefix="ktrace-launch-")
    os.makedirs(log_dir, exist_ok=True)
    cmd = torchrun_command(cfg, log_dir, launch_id)
    torchrun_tail: collections.deque = collections.deque(maxlen=cfg.tail_lines)
    out_lock = threading.Lock()

    def to_stdout(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    with open(os.path.join(log_dir, "torchrun.log"), "w") as tlog:
        tlog.write("$ " + shlex.join(cmd) + "\n")
        tlog.flush()

        def to_log(line: str) -> None:
            torchrun_tail.append(line)
            tlog.write(line + "\n")
            tlog.flush()

        proc = subprocess.Popen(cmd, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        pumps = [threading.Thread(target=_pump_lines, args=(proc.stdout, to_stdout), daemon=True),
                 threading.Thread(target=_pump_lines, args=(proc.stderr, to_log), daemon=True)]
        for t in pumps:
            t.start()
        deadline = time.monotonic() + cfg.timeout_s + cfg.startup_s
        too_long = False
        # torchrun runs in its own session (a Ctrl-C reaches only this process): when this
        # process is interrupted or terminated, it stops torchrun, which stops the ranks
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _raise_interrupt) if in_main else None
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    too_long = True
                    _stop_torchrun(proc)
                    break
                time.sleep(0.1)
        except KeyboardInterrupt:
            _stop_torchrun(proc)
            raise
        finally:
            if in_main and previous is not None:
                signal.signal(signal.SIGTERM, previous)
            for t in pumps:
                t.join(timeout=5)
    results = _statuses(log_dir, launch_id, cfg.tail_lines)
    reported = bool(results)
    if too_long:  # the launch's own deadline: nobody "failed first"
        for r in results:
            if r.status == "stopped":
                r.status = "timeout"
    seen = {r.local_rank for r in results}
    for k in range(cfg.nprocs):
        if k not in seen:
            rank = -1 if cfg.rendezvous.given else k  # one node: local rank = global rank
            results.append(RankResult(rank=rank, status="timeout" if too_long else "lost", local_rank=k))
    if not reported or (proc.returncode != 0 and all(r.status == "ok" for r in results)):
        # torchrun failed on its own (bad options, a rendezvous that never completed, another
        # node's failure): its last lines say why
        results.append(RankResult(rank=-1, returncode=proc.returncode, status="failed", tail=torchrun_tail))
    return results


def summarize(results: list[RankResult], cfg: LaunchConfig) -> str:
    """The text printed after a launch: one line per rank, the tail of each failed or timed-out
    rank's output, and a last line naming every rank that did not pass, the first failure first."""
    ranks = sum(1 for r in results if r.rank >= 0 or r.local_rank is not None)
    lines = [f"ktrace.launch: {ranks} rank(s) through torchrun, command: {' '.join(cfg.command)}"]
    lines += ["  " + r.describe() for r in results]
    order = {"failed": 0, "timeout": 1, "lost": 2, "stopped": 3}  # the first failure first
    bad = sorted((r for r in results if r.status != "ok"), key=lambda r: (order.get(r.status, 4), r.ended or float("inf")))
    for r in bad:
        if r.status in ("failed", "timeout"):
            why = f"timed out after {cfg.timeout_s:g} s" if r.status == "timeout" else f"exit status {r.returncode}"
            lines.append(f"--- {r.name} ({why}); last {len(r.tail)} lines:")
            lines.extend("    " + ln for ln in r.tail)
    lines.append("ALL RANKS PASSED" if not bad else "FAILED: " + ", ".join(f"{r.name} ({r.status})" for r in bad))
    return "\n".join(lines)


def add_rendezvous_args(ap: argparse.ArgumentParser) -> None:
    """torchrun's multi-node options (for :class:`Rendezvous`); ``ktrace run`` takes them too."""
    g = ap.add_argument_group("several nodes (torchrun's own options, passed through)")
    g.add_argument("--nnodes", type=int, default=1, help="nodes taking part (default 1)")
    g.add_argument("--node-rank", type=int, default=None, help="this node's index (static rendezvous)")
    g.add_argument("--rdzv-backend", default=None, help="c10d (recommended) or static (torchrun's default)")
    g.add_argument("--rdzv-endpoint", default=None, metavar="HOST[:PORT]",
                   help="the rendezvous, the same on every node")
    g.add_argument("--rdzv-id", default=None, help="the job's id, the same on every node")
    g.add_argument("--master-addr", default=None, help="the static rendezvous' host")
    g.add_argument("--master-port", type=int, default=None, help="the static rendezvous' port")


def rendezvous_from_args(args) -> Rendezvous:
    """A :class:`Rendezvous` from arguments added by :func:`add_rendezvous_args` (ValueError when bad)."""
    return Rendezvous(nnodes=args.nnodes, node_rank=args.node_rank, rdzv_backend=args.rdzv_backend,
                      rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id, master_addr=args.master_addr,
                      master_port=args.master_port)


def _wrapper_main(argv: list[str]) -> int:
    i = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(prog="python -m ktrace.launch --rank-wrapper")
    ap.add_argument("--rank-wrapper", action="store_true")
    ap.add_argument("--launch-id", required=True)
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--tail", type=int, default=20)
    args = ap.parse_args(argv[:i])
    if not argv[i + 1 :]:
        ap.error("no command to run (put it after --)")
    return run_rank(args.launch_id, args.timeout, args.log_dir, args.tail, argv[i + 1 :])


def main(argv: list[str] | None = None) -> int:
    """``python -m ktrace.launch -n N [options] -- COMMAND ...`` (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--rank-wrapper"]:
        return _wrapper_main(argv)
    if "--" in argv:
        i = argv.index("--")
        ours, cmd = argv[:i], argv[i + 1 :]
    else:
        ours, cmd = argv, []
    ap = argparse.ArgumentParser(prog="python -m ktrace.launch", description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--nprocs", "--nproc-per-node", type=int, required=True, help="ranks on this node")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds each rank may run before it is stopped")
    ap.add_argument("--startup", type=float, default=300.0, help="seconds more for torchrun's start and rendezvous")
    ap.add_argument("--log-dir", default=None, help="where rank<r>.log, rank<r>.json and torchrun.log go")
    ap.add_argument("--tail", type=int, default=20, help="lines of a failed rank's output repeated at the end")
    add_rendezvous_args(ap)
    args = ap.parse_args(ours)
    try:
        cfg = LaunchConfig(tuple(cmd), args.nprocs, args.timeout, args.log_dir, args.tail,
                           rendezvous_from_args(args), args.startup)
    except ValueError as e:
        ap.error(str(e))
    try:
        results = launch(cfg)
    except KeyboardInterrupt:
        print("ktrace.launch: interrupted; every rank was stopped", file=sys.stderr, flush=True)
        return 130
    print(summarize(results, cfg), flush=True)
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
