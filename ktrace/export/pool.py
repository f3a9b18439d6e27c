"""Worker processes for the trace writers: one module holds the run's shared state.

Workers are started with ``fork`` *after* the capture and the run's state exist, so they see
both without copying or pickling them (pages are shared copy-on-write; the raw buffers are only
read). The state a run's tasks read is given to :class:`Pool` and handed to every task as its
first argument (``fn(state, item)``): no other module keeps state for the workers. A task names
its work (a batch of launches); what it returns travels back pickled, so tasks return small
things, write their output themselves through an :class:`Output`, or leave results in shared
memory made before the fork (:func:`shared_zeros`).

Where ``fork`` is unavailable, or one worker is asked for, the same task functions run in this
process, one after another: the output is the same either way (tests compare the two).
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing as mp
import os
import signal
from typing import Any, Callable, Iterable, Iterator

import numpy as np

#: Below this many events a capture is written in this process (starting workers costs more).
MIN_EVENTS_PER_WORKER = 250_000
#: At most this many workers (the writers are bound by one core each; more rarely helps).
MAX_WORKERS = 8

#: The current run's state (what :class:`Pool` was given), as the workers inherit it at fork.
_STATE: dict = {}
#: This process's own: worker index, the run's lock, open output descriptors, writer thread.
_LOCAL: dict = {}


def cpus() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers(n_events: int) -> int:
    """How many workers to use for ``n_events``: one per core, none for small captures."""
    if "fork" not in mp.get_all_start_methods():
        return 1
    return max(1, min(cpus(), MAX_WORKERS, n_events // MIN_EVENTS_PER_WORKER))


def resolve_workers(workers: int | None, n_events: int) -> int:
    """``workers`` checked (>= 1), or the default for ``n_events`` when None."""
    if workers is None:
        return default_workers(n_events)
    if int(workers) < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return 1 if "fork" not in mp.get_all_start_methods() else int(workers)


def worker_index() -> int:
    """0, 1, ... for the workers of the current run (0 when running in this process)."""
    return _LOCAL.get("index", 0)


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _init(counter, lock, keep_freed_memory) -> None:
    # a worker is ktrace's own process: its C allocator may keep what it frees for reuse (its
    # launches allocate and free the same sizes over and over; fresh pages cost more than the
    # work on some machines). The calling process's allocator is left as it is.
    keep_freed_memory()
    # Ctrl-C reaches the whole process group: the calling process handles it (it stops the pool
    # and removes the unfinished output); a worker ends when it is terminated, without a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # (blocked from the fork until here: see Pool)
    _LOCAL.pop("stage", None)  # (the calling process's staging buffer; its writer thread was stopped before the fork)
    with counter.get_lock():
        _LOCAL["index"] = counter.value
        counter.value += 1
    _LOCAL["lock"] = lock


def _run(job: tuple) -> Any:
    """In a worker: ``fn(state, item)`` with the state the worker inherited."""
    fn, item = job
    return fn(_STATE, item)


class Pool:
    """Worker processes kept for several phases of one run (several :meth:`imap` calls): they
    fork once, with ``state``, so a later phase finds the memory an earlier one faulted in.
    Every task is called as ``fn(state, item)``. What a later phase learns goes to it in its
    tasks' arguments or in shared memory made before the fork (:func:`shared_zeros`). With one
    worker, tasks run here."""

    def __init__(self, workers: int, state: dict):
        self.workers = max(1, int(workers))
        self.state = state
        _STATE.clear()
        _STATE.update(state)
        self._pool = None
        if self.workers <= 1:
            close_local()  # (what this process opened before: its descriptors are its own)
            _LOCAL.clear()
            _LOCAL.update(index=0, lock=contextlib.nullcontext())
            return
        from .._memory import keep_freed_memory

        ex = _LOCAL.pop("writer", None)  # (fork with no thread of ours running: its writes are done)
        if ex is not None:
            ex.shutdown(wait=True)
        for f in _LOCAL.pop("pending", []):
            f.result()
        ctx = mp.get_context("fork")
        counter, lock = ctx.Value("i", 0), ctx.Lock()
        # Ctrl-C or SIGTERM while the workers start would stop one inside multiprocessing with its
        # queue's lock held, and terminating the pool would then wait forever: the signals stay
        # blocked in the workers until their initializer has set them aside, and for good in the
        # pool's helper threads (so that the main thread is the one that gets them)
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            self._pool = ctx.Pool(self.workers, initializer=_init, initargs=(counter, lock, keep_freed_memory))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def imap(self, fn: Callable, items: Iterable, *, ordered: bool = True) -> Iterator:
        """``fn(state, item)`` for every item (see :func:`imap`)."""
        if self._pool is None:
            for it in items:
                yield fn(self.state, it)
            return
        run = self._pool.imap if ordered else self._pool.imap_unordered
        yield from run(_run, ((fn, it) for it in items), chunksize=1)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
        _STATE.clear()
        close_local()  # (what tasks run here opened)
        _LOCAL.clear()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def imap(fn: Callable, items: Iterable, workers: int, state: dict, *, ordered: bool = True) -> Iterator:
    """``fn(state, item)`` for every item, in ``workers`` forked processes (here when ``workers`` is 1).

    Args:
        fn: a module-level function (it is named, not pickled, in the workers).
        items: small picklable task descriptions (launch indices).
        workers: processes to use.
        state: what ``fn`` is given; inherited by the workers at fork.
        ordered: yield results in item order (else as they finish).

    Yields:
        The results. An exception in a task is raised here (the other workers are stopped).
    """
    with Pool(workers, state) as pool:
        yield from pool.imap(fn, items, ordered=ordered)


def shared_zeros(n: int, dtype) -> np.ndarray:
    """A zeroed array in anonymous shared memory, made before the workers fork: what a worker
    writes there the calling process and later workers see, without pickling or copying it.
    Pages never written cost nothing, so it may be sized by an upper bound."""
    dtype = np.dtype(dtype)
    return np.frombuffer(mmap.mmap(-1, max(1, n * dtype.itemsize)), dtype, count=n)


#: Bytes handed to one write call at most. Measured on a 2-core VM (ext4, 435 MiB written
#: after a sync): calls of 256 KiB - 4 MiB took 0.11 - 0.15 s, of 16 - 32 MiB 0.12 - 0.53 s and
#: one call per 28 MiB piece 0.09 - 1.08 s (median of eight 0.35 s).
_WRITE_BYTES = 1 << 20


def close_local() -> None:
    """Close the descriptors this process opened for an :class:`Output` (after its writes)."""
    ex = _LOCAL.pop("writer", None)
    if ex is not None:
        ex.shutdown(wait=True)
    _LOCAL.pop("pending", None)
    for k in [k for k in _LOCAL if isinstance(k, tuple) and k[0] == "out"]:
        fds = _LOCAL.pop(k)
        for fd in fds:
            if fd is not None:
                os.close(fd)


#: Direct I/O works in blocks of this many bytes (offsets, sizes and buffer addresses).
_BLOCK = 4096
#: Bytes staged per direct write.
_STAGE = 4 << 20
#: Below this many bytes expected, an output is written through the page cache.
DIRECT_MIN_BYTES = 256 << 20


def direct_io_wanted(expected_bytes: int) -> bool:
    """Whether a trace of about ``expected_bytes`` is written with direct I/O: where the platform
    has it, for large outputs, unless ``KTRACE_DIRECT_IO=0`` (``=1`` forces it)."""
    env = os.environ.get("KTRACE_DIRECT_IO", "")
    if env == "0" or not hasattr(os, "O_DIRECT"):
        return False
    return env == "1" or expected_bytes >= DIRECT_MIN_BYTES


class Output:
    """A file that the processes of a run append pieces to, each piece whole and in the order
    the run's lock grants.

    With ``direct``, pieces bypass the page cache (``O_DIRECT``): a multi-GB trace written
    through the page cache costs system time for every page it takes (on the 2-core test VM,
    1.8 GB written after a sync took 2.4 s of system time when the kernel's free pages were
    cold, 0.4 s when warm; with direct I/O the device took it at 1.5 GB/s and the writer spent
    no CPU on it). Direct writes need block-aligned offsets and sizes, so the unaligned tail
    of what was appended so far waits in memory shared by the run (made before the workers
    fork) until more comes or :meth:`close` writes it. Where the file system refuses direct
    I/O, the output falls back to ordinary writes at the same place.
    """

    def __init__(self, path, *, direct: bool = False):
        self.path = str(path)
        self.direct = bool(direct)
        with open(self.path, "wb"):
            pass
        # shared: [0] the file offset written up to (block-aligned while direct), [1] bytes
        # held, [2] 1 once direct I/O was refused; then the held bytes
        self._shared = mmap.mmap(-1, 24 + _BLOCK)
        self._head = np.frombuffer(self._shared, np.int64, count=3)
        self._held = np.frombuffer(self._shared, np.uint8, count=_BLOCK, offset=24)

    def _fds(self) -> tuple[int | None, int]:
        """This process's descriptors: direct (None where refused) and ordinary."""
        key = ("out", self.path)
        got = _LOCAL.get(key)
        if got is None:
            direct = None
            if self.direct and not self._head[2]:
                try:
                    direct = os.open(self.path, os.O_WRONLY | os.O_DIRECT)
                except OSError:
                    self._head[2] = 1
            got = _LOCAL[key] = (direct, os.open(self.path, os.O_WRONLY))
        return got

    def append(self, pieces: list) -> int:
        """Append buffers (bytes or contiguous arrays) as one unbroken piece; returns the bytes.
        Written before it returns."""
        n = self.append_async(pieces)
        self.flush()
        return n

    def append_async(self, pieces: list) -> int:
        """:meth:`append`, with the writing left to a thread of this process (the caller goes on
        formatting while the device or the page cache takes the bytes): the buffers must not
        change until :meth:`flush`, which a task calls before it ends. Where the piece goes is
        settled here, under the run's lock; the writes of several processes then run at once."""
        views = [v for v in (memoryview(p).cast("B") for p in pieces) if v.nbytes]
        total = sum(v.nbytes for v in views)
        if not total:
            return 0
        with _LOCAL.get("lock") or contextlib.nullcontext():
            off, held = int(self._head[0]), int(self._head[1])
            prefix = bytes(self._held[:held])
            if not self.direct or self._head[2]:  # ordinary writes: no alignment to keep
                self._head[0], self._head[1] = off + held + total, 0
                job = (prefix, views, off)
            else:
                whole = (held + total) // _BLOCK * _BLOCK
                if not whole:  # (all of it still fits in the held tail)
                    self._held[held : held + total] = np.frombuffer(b"".join(views), np.uint8)
                    self._head[1] = held + total
                    return total
                rest = held + total - whole  # < total, since whole > held
                tail, need, k = [], rest, len(views)  # the last ``rest`` bytes wait for the next piece
                while need:
                    k -= 1
                    take = min(need, views[k].nbytes)
                    tail.insert(0, views[k][views[k].nbytes - take :])
                    need -= take
                if rest:
                    self._held[:rest] = np.frombuffer(b"".join(tail), np.uint8)
                cut, body = whole - held, []
                for v in views:  # the rest goes now, after the held bytes
                    if cut <= 0:
                        break
                    body.append(v[: min(cut, v.nbytes)])
                    cut -= v.nbytes
                self._head[0], self._head[1] = off + whole, rest
                job = (prefix, body, off)
        pending = _LOCAL.setdefault("pending", [])
        ex = _LOCAL.get("writer")
        if ex is None:
            from concurrent.futures import ThreadPoolExecutor

            ex = _LOCAL["writer"] = ThreadPoolExecutor(1, thread_name_prefix="ktrace-write")
        pending.append(ex.submit(self._write, *job))
        return total

    def flush(self) -> None:
        """Wait for this process's writes (raising what one raised)."""
        pending = _LOCAL.get("pending") or []
        while pending:
            pending.pop(0).result()

    def _write(self, prefix: bytes, views: list, off: int) -> None:
        fd_direct, plain = self._fds()
        views = ([memoryview(prefix)] if prefix else []) + views
        if fd_direct is None or self._head[2]:
            _pwrite_all(plain, views, off)
            return
        stage = _LOCAL.get("stage")
        if stage is None:
            stage = _LOCAL["stage"] = mmap.mmap(-1, _STAGE)  # (page-aligned)
        sv = memoryview(stage)
        n = 0
        for v in views:  # (a whole number of blocks in all)
            while v.nbytes:
                k = min(v.nbytes, _STAGE - n)
                sv[n : n + k] = v[:k]
                n += k
                v = v[k:]
                if n == _STAGE:
                    off = self._write_direct(fd_direct, plain, sv, n, off)
                    n = 0
        if n:
            self._write_direct(fd_direct, plain, sv, n, off)

    def _write_direct(self, fd_direct: int, plain: int, sv: memoryview, n: int, off: int) -> int:
        try:
            _pwrite_all(fd_direct, [sv[:n]], off)
        except OSError:  # direct I/O refused here: ordinary writes from now on, for every process
            self._head[2] = 1
            _pwrite_all(plain, [sv[:n]], off)
        return off + n

    def close(self) -> None:
        """Write what is held (in the calling process, after the workers are done)."""
        self.flush()
        held, off = int(self._head[1]), int(self._head[0])
        if held:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                _pwrite_all(fd, [memoryview(self._held[:held])], off)
            finally:
                os.close(fd)
            self._head[0], self._head[1] = off + held, 0
        close_local()

    @property
    def size(self) -> int:
        return int(self._head[0] + self._head[1])


def _pwrite_all(fd: int, views: list, off: int) -> None:
    """Write ``views`` one after another at ``off``, in calls of at most ``_WRITE_BYTES``."""
    for v in views:
        while v.nbytes:
            k = os.pwrite(fd, v[:_WRITE_BYTES], off)
            v = v[k:]
            off += k
