"""Where recording processes register for ``ktrace dump``, and who may be signalled.

A process recording with a flight recorder writes one entry (``<run>/rank<r>-<pid>.json``) into
the registry folder; ``ktrace dump`` reads them and sends ``SIGUSR1`` to the processes of a run.
A signal reaches a process only when all of these hold, checked on the live process, never
taken from a file:

* the registry folder is this user's own: not a symbolic link, owned by the user, writable by
  nobody else, and every folder above it owned by the user or by root and, when others may write
  into it, sticky (``/tmp``); its run folders and entries likewise (entries opened without
  following links);
* the entry is well formed (:func:`check_entry`): a pid in ``1..PID_MAX``, a rank, a run id, the
  process's start time (``/proc/<pid>/stat``, field 22, in clock ticks since boot) and its
  command line (``/proc/<pid>/cmdline``);
* the process (:func:`verify`) is alive, runs as this user, started when the entry says and runs
  the command line it says (a pid reused by another process differs in both), and catches
  ``SIGUSR1`` (``SigCgt`` of ``/proc/<pid>/status``: one that does not would be ended by it).

The signal is sent through a pidfd opened before the checks (``pidfd_send_signal``): the process
checked is the process signalled, even if it ends and its pid is reused meanwhile. No signal is
ever sent to pid 0, a negative pid (a process group, or every process) or a pid the registry does
not hold. Linux only (``/proc``): elsewhere nothing is signalled, and ``ktrace dump`` says why.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: Environment variable naming the directory where recording processes register for ``ktrace dump``.
REGISTRY_ENV = "KTRACE_FLIGHT_DIR"
#: What an entry's ``format`` says.
ENTRY_FORMAT = "ktrace-flight-entry"
#: Largest pid Linux gives (``/proc/sys/kernel/pid_max`` is at most 2**22).
PID_MAX = 1 << 22
#: Largest entry read (bytes): a command line of a few thousand characters fits many times over.
MAX_ENTRY_BYTES = 64 << 10
#: Entries read at most (run folders and files together): a registry holding more is refused.
MAX_ENTRIES = 4096
_MAX_TEXT = 4096


class RegistryError(ValueError):
    """A registry folder or entry that is not safe to act on; the message names it."""


def registry_dir() -> Path:
    """Where recording processes register (``$KTRACE_FLIGHT_DIR``, else a per-user folder in the
    temporary directory)."""
    d = os.environ.get(REGISTRY_ENV)
    if d:
        return Path(d)
    return Path(tempfile.gettempdir()) / f"ktrace-flight-{os.geteuid() if hasattr(os, 'geteuid') else 'user'}"


# ---------------------------------------------------------------------------------------------
# folders only this user can write
# ---------------------------------------------------------------------------------------------


def _own_mode_problem(st: os.stat_result, what: str) -> str | None:
    if st.st_uid != os.geteuid():
        return f"{what} belongs to user {st.st_uid}, not to this user ({os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} may be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _check_parents(folder: Path) -> None:
    """Every folder above ``folder`` (links resolved) owned by this user or root, and, if others
    may write into it, sticky (others cannot then rename or remove what is not theirs)."""
    for p in [Path(os.path.realpath(folder.parent)), *Path(os.path.realpath(folder.parent)).parents]:
        try:
            st = os.stat(p)
        except OSError as e:
            raise RegistryError(f"{folder}: cannot check the folder {p} above it: {e.strerror or e}") from None
        if st.st_uid not in (0, os.geteuid()):
            raise RegistryError(f"{folder}: the folder {p} above it belongs to user {st.st_uid}: not a safe place for a registry "
                                f"(set ${REGISTRY_ENV} to a folder of your own)")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            raise RegistryError(f"{folder}: the folder {p} above it may be written by other users and is not sticky "
                                f"(set ${REGISTRY_ENV} to a folder of your own)")


def open_folder(folder: str | os.PathLike, *, create: bool = False, dir_fd: int | None = None) -> int:
    """A descriptor of ``folder`` (made, mode 0700, when ``create``), once it is checked to be a
    real folder of this user's that nobody else may write (and, without ``dir_fd``, the folders
    above it too). ``dir_fd``: ``folder`` is a name inside that folder.

    Raises:
        RegistryError: not such a folder (the message names it and why).
        FileNotFoundError: it does not exist (and ``create`` is False).
    """
    name = os.fspath(folder)
    shown = name if dir_fd is None else f"run folder {name}"
    if dir_fd is None:
        _check_parents(Path(name))
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            pass
        except OSError as e:
            raise RegistryError(f"{shown}: cannot make it: {e.strerror or e}") from None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                link = stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
            except OSError:
                link = False
            raise RegistryError(f"{shown}: is {'a symbolic link' if link else 'not a folder'}: refused") from None
        raise RegistryError(f"{shown}: cannot open it: {e.strerror or e}") from None
    problem = _own_mode_problem(os.fstat(fd), shown)
    if problem:
        os.close(fd)
        raise RegistryError(f"{problem}: refused (a registry must be writable by its owner only)")
    return fd


# ---------------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessIdentity:
    """What ``/proc`` says of a live process."""

    pid: int
    uid: int
    starttime: int  # clock ticks after boot (``/proc/<pid>/stat`` field 22)
    cmdline: tuple[str, ...]
    state: str  # R, S, D, Z, ...
    catches_usr1: bool


def _cmdline(raw: bytes) -> tuple[str, ...]:
    return tuple(os.fsdecode(a) for a in raw.split(b"\0")[:-1]) if raw.endswith(b"\0") else tuple(
        os.fsdecode(a) for a in raw.split(b"\0"))


def identity(pid: int, *, proc: str = "/proc") -> ProcessIdentity | None:
    """The live process ``pid``'s identity, or None when there is none (ended, or no ``/proc``)."""
    if not (isinstance(pid, int) and 0 < pid <= PID_MAX):
        return None
    base = f"{proc}/{pid}"
    try:
        uid = os.stat(base).st_uid
        with open(f"{base}/stat", "rb") as f:
            st = f.read(4096)
        with open(f"{base}/cmdline", "rb") as f:
            cmd = f.read(MAX_ENTRY_BYTES)
        with open(f"{base}/status", "rb") as f:
            status = f.read(16384)
    except OSError:
        return None
    try:
        # the command name (field 2) is in parentheses and may hold spaces and ")": split after the last
        fields = st.rsplit(b")", 1)[1].split()
        state, starttime = fields[0].decode(), int(fields[19])
        cgt = next((ln.split()[1] for ln in status.splitlines() if ln.startswith(b"SigCgt:")), b"0")
        catches = bool(int(cgt, 16) >> (int(signal.SIGUSR1) - 1) & 1)
    except (IndexError, ValueError):
        return None
    return ProcessIdentity(pid, uid, starttime, _cmdline(cmd), state, catches)


def self_identity() -> ProcessIdentity | None:
    """This process's identity (None without ``/proc``)."""
    return identity(os.getpid())


# ---------------------------------------------------------------------------------------------
# entries
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One registered process, as its entry says (checked by :func:`check_entry`)."""

    pid: int
    rank: int
    run_id: str
    out_dir: str
    started_ns: int
    starttime: int
    cmdline: tuple[str, ...]
    file: str  # where it was read (for messages)


def _int(v, what: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise RegistryError(f"{what} is {json.dumps(v)[:40]}, not an integer")
    if not lo <= v <= hi:
        raise RegistryError(f"{what} {v} is outside {lo}..{hi}")
    return v


def _text(v, what: str) -> str:
    if not isinstance(v, str) or len(v) > _MAX_TEXT:
        raise RegistryError(f"{what} is not a string of at most {_MAX_TEXT} characters")
    return v


def check_entry(doc, file: str) -> Entry:
    """An entry's fields, checked: types, ranges, sizes. Raises :class:`RegistryError` (naming ``file``)."""
    try:
        if not isinstance(doc, dict) or doc.get("format") != ENTRY_FORMAT:
            raise RegistryError(f"not a ktrace flight registry entry (its format is not {ENTRY_FORMAT!r})")
        pid = _int(doc.get("pid"), "pid", 1, PID_MAX)
        cmd = doc.get("cmdline")
        if not isinstance(cmd, list) or not 1 <= len(cmd) <= 1024 or not all(isinstance(a, str) for a in cmd):
            raise RegistryError("cmdline is not a list of strings")
        return Entry(pid=pid, rank=_int(doc.get("rank"), "rank", 0, (1 << 16) - 1), run_id=_text(doc.get("run_id"), "run_id"),
                     out_dir=_text(doc.get("out_dir"), "out_dir"), started_ns=_int(doc.get("started_ns"), "started_ns", 0, (1 << 63) - 1),
                     starttime=_int(doc.get("starttime"), "starttime", 0, (1 << 63) - 1), cmdline=tuple(cmd), file=file)
    except RegistryError as e:
        raise RegistryError(f"{file}: {e}") from None


def verify(e: Entry, *, proc: str = "/proc") -> tuple[str, str | None]:
    """Whether ``e``'s process may be signalled: ``("ok", None)``, ``("gone", why)`` (it ended:
    a stale entry) or ``("refused", why)`` (a live process that is not the one registered)."""
    who = identity(e.pid, proc=proc)
    if who is None or who.state in ("Z", "X"):
        return "gone", f"pid {e.pid} has ended"
    if who.uid != os.geteuid():
        return "refused", f"pid {e.pid} belongs to user {who.uid}, not to this user"
    if who.starttime != e.starttime:
        return "refused", f"pid {e.pid} is another process now (it started at tick {who.starttime}, the entry says {e.starttime})"
    if who.cmdline != e.cmdline:
        return "refused", f"pid {e.pid} runs another command than the entry says"
    if not who.catches_usr1:
        return "refused", (f"pid {e.pid} does not catch SIGUSR1 (its recorder has on_signal=False, or was opened outside the "
                           "main thread): the signal would end it")
    return "ok", None


@dataclass
class Scan:
    """What a registry holds: the entries whose processes may be signalled, and what was left out."""

    live: list[Entry]
    refused: list[str]  # one phrase each, naming the entry
    stale: int = 0


def scan(registry: str | os.PathLike, *, proc: str = "/proc") -> Scan:
    """Read and check every entry of ``registry`` (see the module's docstring).

    Raises:
        RegistryError: the folder itself is not safe (or holds more than :data:`MAX_ENTRIES`).
        FileNotFoundError: it does not exist.
    """
    registry = Path(registry)
    out = Scan([], [])
    fd = open_folder(registry)
    try:
        seen = 0
        for run in sorted(os.listdir(fd)):
            if run.startswith("."):
                continue
            seen += 1
            if seen > MAX_ENTRIES:
                raise RegistryError(f"{registry}: holds more than {MAX_ENTRIES} entries: refused")
            try:
                rfd = open_folder(run, dir_fd=fd)
            except (RegistryError, FileNotFoundError) as e:
                out.refused.append(f"{registry / run}: {_after_name(e, run)}")
                continue
            try:
                for name in sorted(os.listdir(rfd)):
                    if name.startswith(".") or not name.endswith(".json"):
                        continue
                    seen += 1
                    if seen > MAX_ENTRIES:
                        raise RegistryError(f"{registry}: holds more than {MAX_ENTRIES} entries: refused")
                    path = str(registry / run / name)
                    try:
                        e = check_entry(_read_entry(rfd, name, path), path)
                    except RegistryError as err:
                        out.refused.append(str(err))
                        continue
                    state, why = verify(e, proc=proc)
                    if state == "ok":
                        out.live.append(e)
                    elif state == "gone":
                        out.stale += 1
                    else:
                        out.refused.append(f"{path}: {why}")
            finally:
                os.close(rfd)
    finally:
        os.close(fd)
    return out


def _after_name(e: BaseException, name: str) -> str:
    text = str(e)
    for prefix in (f"run folder {name}: ", f"{name}: "):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def _read_entry(dir_fd: int, name: str, path: str):
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as e:
        why = "a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))
        raise RegistryError(f"{path}: cannot be read ({why}): refused") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RegistryError(f"{path}: not a regular file: refused")
        problem = _own_mode_problem(st, path)
        if problem:
            raise RegistryError(f"{problem}: refused")
        if st.st_size > MAX_ENTRY_BYTES:
            raise RegistryError(f"{path}: {st.st_size} bytes, more than an entry holds ({MAX_ENTRY_BYTES}): refused")
        data = os.read(fd, MAX_ENTRY_BYTES + 1)
    finally:
        os.close(fd)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise RegistryError(f"{path}: not JSON ({' '.join(str(e).split())[:80]}): refused") from None


# ---------------------------------------------------------------------------------------------
# registering (the recording process) and signalling (ktrace dump)
# ---------------------------------------------------------------------------------------------


def safe_name(name: str) -> str:
    """A run id as a file name: letters, digits, ``-_.`` (others as ``_``), not starting with a dot."""
    s = "".join(c if c.isalnum() and c.isascii() or c in "-_." else "_" for c in name)[:200].lstrip(".")
    return s or "run"


def register(registry: str | os.PathLike, run_id: str, rank: int, out_dir: str) -> Path:
    """Register this process in ``registry`` (made, mode 0700, when missing); returns the entry's path.

    Raises:
        RegistryError: the folder is not safe, or this process has no ``/proc`` identity.
        OSError: the entry cannot be written.
    """
    me = self_identity()
    if me is None:
        raise RegistryError("this system has no /proc: `ktrace dump` cannot check a process, so none registers")
    registry = Path(registry)
    fd = open_folder(registry, create=True)
    try:
        run = safe_name(str(run_id))
        rfd = open_folder(run, create=True, dir_fd=fd)
        try:
            name = f"rank{int(rank)}-{os.getpid()}.json"
            doc = {"format": ENTRY_FORMAT, "pid": os.getpid(), "rank": int(rank), "run_id": str(run_id), "out_dir": str(out_dir),
                   "started_ns": time.time_ns(), "starttime": me.starttime, "cmdline": list(me.cmdline)}
            tmp = f".{name}.{os.urandom(4).hex()}"
            wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=rfd)
            try:
                with os.fdopen(wfd, "w") as f:
                    json.dump(doc, f)
                os.replace(tmp, name, src_dir_fd=rfd, dst_dir_fd=rfd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=rfd)
                except OSError:
                    pass
                raise
        finally:
            os.close(rfd)
    finally:
        os.close(fd)
    return registry / run / name


def unregister(entry: str | os.PathLike) -> None:
    """Remove an entry this process wrote, and its run folder once empty (errors ignored)."""
    p = Path(entry)
    for f in (lambda: p.unlink(), lambda: p.parent.rmdir()):
        try:
            f()
        except OSError:
            pass


def send(e: Entry, sig: int = signal.SIGUSR1, *, proc: str = "/proc") -> str | None:
    """Send ``sig`` to ``e``'s process after checking it again (:func:`verify`) through a pidfd
    opened first, so the process checked is the one signalled. None when sent, else why not."""
    if not (isinstance(e.pid, int) and 0 < e.pid <= PID_MAX):  # (never 0, a group, or every process)
        return f"pid {e.pid} is not a process id"
    pidfd = None
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            pidfd = os.pidfd_open(e.pid)
        except ProcessLookupError:
            return f"pid {e.pid} has ended"
        except OSError as err:
            if err.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
                return f"pid {e.pid}: {err.strerror or err}"
    try:
        state, why = verify(e, proc=proc)
        if state != "ok":
            return why
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, sig)
            else:
                os.kill(e.pid, sig)
        except ProcessLookupError:
            return f"pid {e.pid} has ended"
        except PermissionError:
            return f"pid {e.pid}: not allowed to signal it"
        return None
    finally:
        if pidfd is not None:
            os.close(pidfd)
