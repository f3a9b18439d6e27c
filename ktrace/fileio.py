"""Files in and out that cannot hurt each other: inputs that are regular files, outputs written
to a temporary of a unique name in their own folder and renamed into place.

Every file ktrace writes goes through :func:`atomic_output` (or :func:`atomic_folder` for a
split trace's parts and :func:`put_folder` for an output folder): the temporary is made with ``O_EXCL`` under a name no other file has (so it
is never an input, nor another writer's temporary: two writers of one output each write their
own and the last rename wins whole), removed when the write fails or the process is
interrupted, and renamed over the output only once it is complete. A reader therefore sees the
old output or the new one, never a part. An output that is a symbolic link is replaced by the
new file, never written through (the file it pointed at is left as it was).

Inputs are checked with :func:`regular_input`: a device, a FIFO or a socket (``/dev/zero``, a
named pipe) would be read forever or block; they are refused in one line.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

#: What a temporary's name starts with (hidden; the output's name follows, then a random part).
TMP_PREFIX = ".ktrace-tmp-"


class OutputError(OSError):
    """An output that cannot be written: its ``errno`` kept, its message one line naming the file."""

    def __init__(self, errno: int | None, text: str):
        super().__init__(errno, text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class InputError(ValueError):
    """An input path that is not a regular file ktrace can read; the message names it."""


def regular_input(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` when it names a regular file (through links); else :class:`InputError` naming it.

    Args:
        path: the input.
        what: what it should be, for the message (``capture file``, ``trace``).
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(f"{p}: no such {what}") from None
    except OSError as e:
        raise InputError(f"{p}: cannot read: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{p}: is a folder, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise InputError(f"{p}: is {kind}, not a {what}: refusing to read it")
    return p


def is_temporary(path: str | os.PathLike) -> bool:
    """Whether ``path`` is named as ktrace's temporaries are (an input named so is refused)."""
    return Path(path).name.startswith(TMP_PREFIX)


def _tmp_name(path: Path) -> str:
    # the output's name is kept short in the temporary's (a long name plus the prefix could pass
    # the file system's limit)
    return TMP_PREFIX + path.name[:80] + "-"


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "wb"):
    """Write ``path`` through a fresh temporary in its folder, renamed into place on success.

    Yields the temporary's path (closed; the caller opens it, or a library writes it); for an
    output that is a device or a FIFO, the output itself (written into, never replaced). On any
    exception, ``KeyboardInterrupt`` and ``SystemExit`` (a handled SIGTERM) included, the
    temporary is removed and the output left as it was.

    Raises:
        OSError: the folder does not exist or cannot be written (the message names the output).
    """
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        # a device or a FIFO (/dev/null, /dev/stdout, a pipe): written into as it is, never
        # replaced by a file (a rename would put a file where the device was); reached through a
        # symbolic link only where the system keeps such links (/dev/stdout, /dev/fd/N): a link
        # elsewhere is not followed (one in a shared folder could point at a disk)
        if os.path.islink(path) and not str(Path(os.path.abspath(path)).parent).startswith(("/dev", "/proc")):
            raise OutputError(None, f"cannot write {path}: it is a symbolic link to a device or FIFO: refusing to write through it")
        try:
            yield path
        except OSError as e:
            if str(path) in str(e):
                raise
            raise OutputError(e.errno, f"cannot write {path}: {e.strerror or e}") from None
        return
    folder = path.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=_tmp_name(path), dir=folder)
    except OSError as e:
        raise OutputError(e.errno, f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        try:
            yield tmp_path
        except OSError as e:  # (a full disk, a quota: said of the output, not of a temporary's name)
            if str(path) in str(e):
                raise
            raise OutputError(e.errno, f"cannot write {path}: {e.strerror or e}") from None
        try:
            os.chmod(tmp_path, 0o666 & ~_umask())  # (mkstemp makes it 0600; an output is an ordinary file)
            os.replace(tmp_path, path)
        except OSError as e:
            raise OutputError(e.errno, f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        raise


@contextlib.contextmanager
def atomic_folder(near: str | os.PathLike):
    """A fresh temporary folder next to ``near`` (in its folder), removed with what it holds on
    any exception or once the caller has moved its files out (or the folder itself:
    :func:`put_folder`)."""
    near = Path(near)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=_tmp_name(near), dir=near.parent))
    except OSError as e:
        raise OutputError(e.errno, f"cannot write into {near.parent}: {e.strerror or e}") from None
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def put_folder(tmp: str | os.PathLike, out: str | os.PathLike, check=None) -> Path:
    """Rename the finished folder ``tmp`` (made by :func:`atomic_folder` next to ``out``) to
    ``out``, whole. What is at ``out`` already (an empty folder, or one ``check(out)`` accepts:
    it raises otherwise) is moved aside first and removed after; if the rename fails it is put
    back. ``out`` itself is never followed: a symbolic link there is refused by ``check``, or
    replaced, never written through.

    Raises:
        OutputError: a rename failed (the message names ``out``).
    """
    tmp, out = Path(tmp), Path(out)
    os.chmod(tmp, 0o777 & ~_umask())  # (mkdtemp makes it 0700; an output folder is an ordinary one)
    old = None
    try:
        if os.path.lexists(out):
            if check is not None:
                check(out)  # (again, at the last moment: nothing the check refuses is replaced)
            old = out.with_name(f"{TMP_PREFIX}old-{out.name[:60]}-{os.urandom(4).hex()}")
            os.rename(out, old)
        os.rename(tmp, out)
    except OSError as e:
        if old is not None and not os.path.lexists(out):
            with contextlib.suppress(OSError):
                os.rename(old, out)
        raise OutputError(e.errno, f"cannot write {out}: {e.strerror or e}") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """``Path(path).write_bytes(data)``, atomically (see :func:`atomic_output`)."""
    with atomic_output(path) as tmp:
        try:
            tmp.write_bytes(data)
        except OSError as e:
            raise OutputError(e.errno, f"cannot write {path}: {e.strerror or e}") from None
    return Path(path)


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m
