"""What the surface suites (``tests/test_surface_*.py``) share: a ``ktrace`` process run as a user
runs it, under an address-space limit, with its peak memory measured and every signal it tries
to send logged and held back unless the test allows its target, and the checks every refused
case must pass.

Cases run as processes of their own, started by forking a process that has imported ktrace's
command line already (:class:`_Zygote`; a case then costs tens of milliseconds, not the half
second of an interpreter's start): each is a new process with its own limits, environment,
working folder and standard streams, running ``ktrace.cli.main()`` on ``sys.argv`` as the
``ktrace`` command does. ``KT_FRESH=1`` runs every case in a fresh interpreter instead.

A refused case must show: exit status != 0 (below 128: not ended by a signal), one line on
stderr that names the file or option and the fault, no traceback, no escape sequence, no input
changed (hashed before and after), nothing left behind in the folders watched, peak RSS below
:data:`BASE_RSS` plus twice the input's size, and no signal sent anywhere. Each suite counts its
cases per surface and prints them at its end (``[surface] N cases: ...``, with ``-s``).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The address space a ktrace process may take in these tests.
AS_LIMIT = 3 << 30
#: Peak RSS of the interpreter with numpy, orjson and ktrace's readers loaded: the stated constant
#: added to twice an input's size in the memory check.
BASE_RSS = 200 << 20
TIMEOUT = 60

#: The child: limits, with ``KT_SIGLOG`` a guard on every way Python sends a signal (logged there;
#: sent only to the pids in ``KT_ALLOW``, else refused as EPERM: a fault in ktrace cannot reach a
#: process outside the test), then ``ktrace ARGS``; its peak RSS written to ``KT_RSS``.
RUNNER = r"""
import os, resource, signal, sys
lim = int(os.environ["KT_AS"])
resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
if os.environ.get("KT_FSIZE"):  # a full disk: writes past this size fail (EFBIG; Python ignores SIGXFSZ)
    n = int(os.environ["KT_FSIZE"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
_log, _allow = os.environ.get("KT_SIGLOG"), {int(x) for x in os.environ.get("KT_ALLOW", "").split(",") if x}

def _fd_pid(fd):
    try:
        return int(next(l for l in open(f"/proc/self/fdinfo/{fd}") if l.startswith("Pid:")).split()[1])
    except (OSError, StopIteration, ValueError):
        return None

def _guard(kind, real):
    def call(target, sig, *rest):
        pid = _fd_pid(target) if kind == "pidfd" else target
        if _log:
            with open(_log, "a") as f:
                f.write(f"{kind} {pid} {int(sig)}\n")
        if kind == "killpg" or pid not in _allow:
            raise PermissionError(1, "held back by the test's signal guard")
        return real(target, sig, *rest)
    return call

if _log:
    os.kill, os.killpg = _guard("kill", os.kill), _guard("killpg", os.killpg)
    if hasattr(signal, "pidfd_send_signal"):
        signal.pidfd_send_signal = _guard("pidfd", signal.pidfd_send_signal)
sys.argv = ["ktrace", *sys.argv[1:]]
from ktrace.cli import main
code = 1
try:
    code = main()
finally:
    # VmHWM, not RUSAGE_SELF: Linux keeps ru_maxrss across exec (a child of a large pytest would
    # report the parent's peak); workers through RUSAGE_CHILDREN
    hwm = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
    ru = max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    with open(os.environ["KT_RSS"], "w") as f:
        f.write(str(ru * 1024))
sys.exit(code)
"""


#: The forking process: imports the command line once, then for each request (a JSON line on
#: stdin: argv, cwd, env, where stdout and stderr go) forks a child that takes that environment,
#: folder and streams and runs :data:`RUNNER`; answers on fd 3 with the child's pid, then its
#: exit status.
_ZYGOTE = r"""
import json, os, sys
import ktrace.cli, viewers.perfetto_open, ktrace.dump, ktrace.flight.registry  # (what the cases import: once)
import ktrace.captures, ktrace.analysis, ktrace.export, ktrace.export.split, ktrace.export.profile, ktrace.run, ktrace.demo
import ktrace.clock, ktrace.events
ktrace.cli.build_parser()  # (the subcommands' own imports)
runner = sys.argv[1]
answer = os.fdopen(3, "w", buffering=1)
for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            for fd, path in ((1, req["out"]), (2, req["err"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            sys.argv = ["-c", *req["argv"]]
            try:
                exec(compile(runner, "<runner>", "exec"), {"__name__": "__main__"})
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(code)
    answer.write(json.dumps({"id": req["id"], "pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    answer.write(json.dumps({"id": req["id"], "status": os.waitstatus_to_exitcode(status)}) + "\n")
"""


class _Zygote:
    """The forking process (one per test session, restarted if it ends)."""

    _lock = threading.Lock()
    _proc: subprocess.Popen | None = None
    _answers = None

    @classmethod
    def _start(cls) -> None:
        r, w = os.pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), PYTHONIOENCODING="utf-8",
                   OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")  # (no BLAS threads: it forks)
        os.set_inheritable(w, True)
        cls._proc = subprocess.Popen([sys.executable, "-c", f"import os; os.dup2({w}, 3)\n" + _ZYGOTE, RUNNER], stdin=subprocess.PIPE,
                                     env=env, pass_fds=(w,), text=True)
        os.close(w)
        cls._answers = os.fdopen(r, "r", buffering=1)
        atexit.register(cls._stop)

    @classmethod
    def _stop(cls) -> None:
        if cls._proc is not None and cls._proc.poll() is None:
            cls._proc.stdin.close()
            cls._proc.wait(10)

    @classmethod
    def _read(cls, tag: str, key: str, timeout: float):
        """The answer ``key`` to request ``tag`` (answers to earlier requests that timed out are
        passed over)."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0 or not select.select([cls._answers], [], [], left)[0]:
                raise TimeoutError
            line = cls._answers.readline()
            if not line:
                raise RuntimeError("the forking process of the surface tests ended")
            got = json.loads(line)
            if got.get("id") == tag and key in got:
                return got[key]

    @classmethod
    def _restart(cls) -> None:
        if cls._proc is not None:
            cls._proc.kill()
            cls._proc.wait()
        cls._proc = None

    @classmethod
    def run(cls, argv: list[str], cwd: Path, env: dict, timeout: float) -> tuple[int, bytes, bytes]:
        with cls._lock:
            if cls._proc is None or cls._proc.poll() is not None:
                cls._start()
            tag = uuid.uuid4().hex[:12]
            out, err = Path(cwd) / f".out-{tag}", Path(cwd) / f".err-{tag}"
            cls._proc.stdin.write(json.dumps({"id": tag, "argv": argv, "cwd": str(cwd), "env": env, "out": str(out),
                                              "err": str(err)}) + "\n")
            cls._proc.stdin.flush()
            try:
                pid = cls._read(tag, "pid", 60)
            except TimeoutError:  # (a machine too busy to fork in a minute: start afresh)
                cls._restart()
                raise subprocess.TimeoutExpired(argv, 60) from None
            try:
                status = cls._read(tag, "status", timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, 9)
                try:
                    cls._read(tag, "status", 30)
                except TimeoutError:
                    cls._restart()
                raise subprocess.TimeoutExpired(argv, timeout) from None
            try:
                return status, out.read_bytes(), err.read_bytes()
            finally:
                for f in (out, err):
                    with contextlib.suppress(FileNotFoundError):
                        f.unlink()


def env_for(tmp: Path, **extra) -> dict:
    """The environment of a ktrace child: this checkout first on the path, TMPDIR inside the test."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), KT_AS=str(AS_LIMIT),
               KT_RSS=str(tmp / ".rss"), KT_SIGLOG=str(tmp / ".siglog"), TMPDIR=str(tmp), PYTHONIOENCODING="utf-8")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def digest(paths) -> dict:
    """sha256 of each file (None for what is not a regular file), links not followed."""
    out = {}
    for p in paths:
        p = Path(p)
        out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else None
    return out


def listing(folder: Path) -> set[str]:
    """Every path below ``folder`` (relative), the runner's own files left out."""
    out = set()
    for dirpath, dirs, files in os.walk(folder):
        for n in dirs + files:
            rel = os.path.relpath(os.path.join(dirpath, n), folder)
            if not n.startswith((".rss", ".siglog", ".out-", ".err-")):
                out.add(rel)
    return out


class Surface:
    """One surface's cases: runs them, checks them, counts them by class."""

    def __init__(self, name: str):
        self.name = name
        self.cases = self.passed = self.max_rss = 0
        self.classes: dict[str, int] = {}

    def run(self, tmp: Path, *args, env: dict | None = None, timeout: float = TIMEOUT, prefix=(), allow=()) -> subprocess.CompletedProcess:
        """``ktrace ARGS`` under the limits; ``.rss`` its peak RSS, ``.signals`` what it tried to signal."""
        tag = uuid.uuid4().hex[:12]
        rss, log = tmp / f".rss-{tag}", tmp / f".siglog-{tag}"
        e = env_for(tmp, KT_ALLOW=",".join(map(str, allow)), KT_RSS=rss, KT_SIGLOG=log)
        e.update(env or {})
        argv = [*map(os.fsdecode, args)]
        if prefix or os.environ.get("KT_FRESH") == "1":
            p = subprocess.run([*prefix, sys.executable, "-c", RUNNER, *argv], cwd=tmp, env=e, capture_output=True, timeout=timeout)
        else:
            code, out, err = _Zygote.run(argv, tmp, e, timeout)
            p = subprocess.CompletedProcess(argv, code, out, err)
        p.stdout, p.stderr = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        p.rss = int(rss.read_text()) if rss.exists() else 0
        p.signals = [tuple(int(x) if x.lstrip("-").isdigit() else x for x in ln.split()) for ln in log.read_text().splitlines()] if log.exists() else []
        for f in (rss, log):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
        self.max_rss = max(self.max_rss, p.rss)
        return p

    def _count(self, cls: str) -> None:
        self.cases += 1
        self.classes[cls] = self.classes.get(cls, 0) + 1

    def refused(self, tmp: Path, args, *, names: str, fault: str, cls: str, inputs=(), size: int = 0, env=None, watch=None,
                prefix=(), allow=(), exact: bool = True) -> subprocess.CompletedProcess:
        """Run a case that must be refused and check everything a refusal must be (see the module)."""
        self._count(cls)
        watch = [tmp] if watch is None else list(watch)
        before, files = digest(inputs), [listing(w) for w in watch]
        p = self.run(tmp, *args, env=env, prefix=prefix, allow=allow)
        lines = p.stderr.splitlines()
        assert p.returncode not in (0, None) and 0 < p.returncode < 128, (args, p.returncode, p.stderr[-2000:])
        assert "Traceback" not in p.stderr and len(lines) == 1, (args, p.stderr[-3000:])
        if exact:
            assert names in lines[0] and fault in lines[0], (args, lines[0], names, fault)
        assert not any(c in lines[0] for c in "\x1b\x07\r"), lines[0]
        assert digest(inputs) == before, "an input changed"
        for w, f in zip(watch, files):
            assert listing(w) == f, f"{w}: changed: +{listing(w) - f} -{f - listing(w)}"
        assert p.rss < BASE_RSS + 2 * size, (args, p.rss / 1e6)
        assert p.signals == [], f"signals tried: {p.signals}"
        self.passed += 1
        return p

    def ok(self, tmp: Path, args, *, cls: str, inputs=(), size: int = 0, status: int = 0, env=None, allow=()) -> subprocess.CompletedProcess:
        """Run a case that must succeed (status ``status``), inputs unchanged, memory bounded."""
        self._count(cls)
        before = digest(inputs)
        p = self.run(tmp, *args, env=env, allow=allow)
        assert p.returncode == status and "Traceback" not in p.stderr, (args, p.returncode, p.stderr[-3000:])
        assert digest(inputs) == before
        assert p.rss < BASE_RSS + 2 * size, (args, p.rss / 1e6)
        self.passed += 1
        return p

    def counted(self, cls: str) -> None:
        """A case checked in the test itself (not through :meth:`refused`/:meth:`ok`): counted, passed."""
        self._count(cls)
        self.passed += 1

    def summary(self) -> str:
        by = ", ".join(f"{k} {v}" for k, v in sorted(self.classes.items()))
        return (f"[{self.name}] {self.cases} cases: {self.passed} passed ({by}); peak RSS of any ktrace process "
                f"{self.max_rss / 1e6:.0f} MB (limit {BASE_RSS / 1e6:.0f} MB + 2x its input)")


def say_counts(surface: Surface):
    """A module's autouse fixture that prints ``surface``'s counts when its tests are done."""

    @pytest.fixture(scope="module", autouse=True)
    def _say_counts():
        yield
        print("\n" + surface.summary())

    return _say_counts


def random_file(folder: Path, name: str, size: int = 4096) -> Path:
    """A file of ``size`` random bytes (a trace the server serves as it is)."""
    f = folder / name
    f.write_bytes(os.urandom(size))
    return f
