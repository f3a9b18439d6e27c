"""Run a command once per rank, the way torchrun would, and say which rank failed and why.

    python -m ktrace.testing.launch -n 4 -- pytest -m multigpu tests/multigpu -q
    python -m ktrace.testing.launch -n 2 --timeout 300 --log-dir logs -- python my_script.py

Each rank runs the command with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` (a free port picked here) in its environment, plus NVLink
multicast off (``ktrace.shmem.SAFE_ENV``); the process group is initialised inside the command
(``ktrace.shmem.init_distributed()``; the multi-GPU tests' conftest does it). Output lines are
prefixed with ``[rank r]``. When a rank fails, the others get ``--grace`` seconds to finish (they
are usually stuck in a collective with it) and are then stopped; past ``--timeout`` every rank
still running is stopped. The exit status is 0 only if every rank exited with 0.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

#: Environment of every rank unless the caller set these already (NVLink multicast stays off).
_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


@dataclass(frozen=True)
class LaunchConfig:
    """What :func:`launch` runs.

    Args:
        command: the command (``pytest`` is run as ``python -m pytest`` of this interpreter).
        nprocs: ranks to start (>= 1).
        timeout_s: wall-clock limit for the whole run; ranks still running are stopped.
        grace_s: after a rank fails, how long the others may run before they are stopped.
        log_dir: if set, each rank's output is also written to ``<log_dir>/rank<r>.log``.
        port: rendezvous port (0 = pick a free one).
        tail_lines: lines of each failed rank's output repeated in the summary.
    """

    command: tuple[str, ...]
    nprocs: int
    timeout_s: float = 900.0
    grace_s: float = 30.0
    log_dir: str | None = None
    port: int = 0
    tail_lines: int = 20

    def __post_init__(self):
        if not self.command:
            raise ValueError("no command to launch (put it after --)")
        if self.nprocs < 1:
            raise ValueError(f"nprocs must be >= 1, got {self.nprocs}")
        if self.timeout_s <= 0 or self.grace_s < 0:
            raise ValueError("timeout must be positive and grace non-negative")
        if not 0 <= self.port < 65536:
            raise ValueError(f"bad port {self.port}")


@dataclass
class RankResult:
    """How one rank ended: status is "ok", "failed", "timeout" or "stopped" (after another failed)."""

    rank: int
    returncode: int | None = None
    status: str = "running"
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=20))

    def describe(self) -> str:
        if self.status == "ok":
            return f"rank {self.rank}: passed"
        if self.status == "failed":
            return f"rank {self.rank}: FAILED with exit status {self.returncode}"
        if self.status == "timeout":
            return f"rank {self.rank}: TIMED OUT (stopped)"
        return f"rank {self.rank}: stopped after another rank failed (exit status {self.returncode})"


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


def _pump(stream, rank: int, res: RankResult, log_file, out_lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        res.tail.append(line)
        with out_lock:
            sys.stdout.write(f"[rank {rank}] {line}\n")
            sys.stdout.flush()
        if log_file is not None:
            log_file.write(line + "\n")
            log_file.flush()
    stream.close()


def _stop(proc: subprocess.Popen) -> None:
    """Stop a rank and everything it started (it leads its own process group)."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def launch(cfg: LaunchConfig) -> list[RankResult]:
    """Run ``cfg.command`` once per rank; returns how each rank ended (see :class:`RankResult`)."""
    port = cfg.port or free_port()
    cmd = _command(cfg.command)
    if cfg.log_dir:
        os.makedirs(cfg.log_dir, exist_ok=True)
    out_lock = threading.Lock()
    procs, results, pumps, files = [], [], [], []
    for r in range(cfg.nprocs):
        env = dict(os.environ)
        for k, v in _SAFE_ENV.items():
            env.setdefault(k, v)
        env.update(
            RANK=str(r),
            LOCAL_RANK=str(r),
            WORLD_SIZE=str(cfg.nprocs),
            LOCAL_WORLD_SIZE=str(cfg.nprocs),
            GROUP_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            KTRACE_LAUNCHER="1",
            PYTHONUNBUFFERED="1",
        )
        res = RankResult(r, tail=collections.deque(maxlen=cfg.tail_lines))
        lf = open(os.path.join(cfg.log_dir, f"rank{r}.log"), "w") if cfg.log_dir else None
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        t = threading.Thread(target=_pump, args=(p.stdout, r, res, lf, out_lock), daemon=True)
        t.start()
        procs.append(p)
        results.append(res)
        pumps.append(t)
        files.append(lf)
    deadline = time.monotonic() + cfg.timeout_s
    first_failure: float | None = None
    try:
        while True:
            running = 0
            for p, res in zip(procs, results):
                rc = p.poll()
                if rc is None:
                    running += 1
                elif res.status == "running":
                    res.returncode = rc
                    res.status = "ok" if rc == 0 else "failed"
                    if rc != 0 and first_failure is None:
                        first_failure = time.monotonic()
            if running == 0:
                break
            now = time.monotonic()
            if now > deadline:
                for p, res in zip(procs, results):
                    if p.poll() is None:
                        _stop(p)
                        res.status, res.returncode = "timeout", p.returncode
                break
            if first_failure is not None and now - first_failure > cfg.grace_s:
                for p, res in zip(procs, results):
                    if p.poll() is None:
                        _stop(p)
                        res.status, res.returncode = "stopped", p.returncode
                break
            time.sleep(0.1)
    except KeyboardInterrupt:
        for p in procs:
            _stop(p)
        raise
    finally:
        for t in pumps:
            t.join(timeout=5)
        for f in files:
            if f is not None:
                f.close()
    return results


def summarize(results: list[RankResult], cfg: LaunchConfig) -> str:
    """The text printed after a run: one line per rank, and the tail of each failed rank's output."""
    lines = [f"ktrace.testing.launch: {len(results)} rank(s), command: {' '.join(cfg.command)}"]
    for res in results:
        lines.append("  " + res.describe())
    for res in results:
        if res.status in ("failed", "timeout"):
            why = "timed out after %.0f s" % cfg.timeout_s if res.status == "timeout" else f"exit status {res.returncode}"
            lines.append(f"--- rank {res.rank} ({why}); last {len(res.tail)} lines:")
            lines.extend("    " + ln for ln in res.tail)
    ok = all(r.status == "ok" for r in results)
    lines.append("ALL RANKS PASSED" if ok else "FAILED: " + ", ".join(f"rank {r.rank} ({r.status})" for r in results if r.status != "ok"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        i = argv.index("--")
        ours, cmd = argv[:i], argv[i + 1 :]
    else:
        ours, cmd = argv, []
    ap = argparse.ArgumentParser(prog="python -m ktrace.testing.launch", description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--nprocs", type=int, required=True, help="number of ranks")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before every rank is stopped")
    ap.add_argument("--grace", type=float, default=30.0, help="seconds the others may run after a rank fails")
    ap.add_argument("--log-dir", default=None, help="also write rank<r>.log here")
    ap.add_argument("--port", type=int, default=0, help="rendezvous port (default: a free one)")
    args = ap.parse_args(ours)
    try:
        cfg = LaunchConfig(tuple(cmd), args.nprocs, args.timeout, args.grace, args.log_dir, args.port)
    except ValueError as e:
        ap.error(str(e))
    results = launch(cfg)
    print(summarize(results, cfg), flush=True)
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
