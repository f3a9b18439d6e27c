"""What the surface suites (``tests/test_surface_*.py``) share: a ``ktrace`` process run as a user
runs it, under an address-space limit, with its peak memory measured and every signal it tries
to send logged and held back unless the test allows its target, and the checks every refused
case must pass.

A refused case must show: exit status != 0 (below 128: not ended by a signal), one line on
stderr that names the file or option and the fault, no traceback, no escape sequence, no input
changed (hashed before and after), nothing left behind in the folders watched, peak RSS below
:data:`BASE_RSS` plus twice the input's size, and no signal sent anywhere. Each suite counts its
cases per surface and prints them at its end (``[surface] N cases: ...``, with ``-s``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
from pathlib import Path

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


def env_for(tmp: Path, **extra) -> dict:
    """The environment of a ktrace child: this checkout first on the path, TMPDIR inside the test."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), KT_AS=str(AS_LIMIT),
                KT_RSS=str(tmp / ".rss"), KT_SIGLOG=str(tmp / ".siglog"), TMPDIR=str(tmp), PYTHONIOENCODING="utf-8",
                **{k: str(v) for k, v in extra.items()})


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
            if rel not in (".rss", ".siglog"):
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
        for f in (".rss", ".siglog"):
            with contextlib.suppress(FileNotFoundError):
                (tmp / f).unlink()
        e = env_for(tmp, KT_ALLOW=",".join(map(str, allow)))
        e.update(env or {})
        p = subprocess.run([*prefix, sys.executable, "-c", RUNNER, *map(os.fsdecode, args)], cwd=tmp, env=e, capture_output=True,
                           timeout=timeout)
        p.stdout, p.stderr = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        rss, log = tmp / ".rss", tmp / ".siglog"
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
