"""Worker processes for the trace writers: per-launch work spread over the machine's cores.

Workers are started with ``fork`` *after* the capture and the trace plan exist, so they see
both without copying or pickling them (pages are shared copy-on-write; the raw buffers are only
read). Each task names one launch; what a task returns travels back pickled, so tasks return
small things (or write their output themselves, see :func:`append_all`).

Where ``fork`` is unavailable, or one worker is asked for, the same task functions run in this
process, one after another: the output is the same either way (tests compare the two).
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing as mp
import os
from typing import Callable, Iterable, Iterator

import numpy as np

#: Below this many events a capture is written in this process (starting workers costs more).
MIN_EVENTS_PER_WORKER = 250_000
#: At most this many workers (the writers are bound by one core each; more rarely helps).
MAX_WORKERS = 8

#: What the current run's tasks read: set before the workers fork, cleared after.
STATE: dict = {}
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


def _init(counter, lock, keep_freed_memory) -> None:
    # a worker is ktrace's own process: its C allocator may keep what it frees for reuse (its
    # launches allocate and free the same sizes over and over; fresh pages cost more than the
    # work on some machines). The calling process's allocator is left as it is.
    keep_freed_memory()
    with counter.get_lock():
        _LOCAL["index"] = counter.value
        counter.value += 1
    _LOCAL["lock"] = lock


def imap(fn: Callable, items: Iterable, workers: int, state: dict, *, ordered: bool = True) -> Iterator:
    """``fn(item)`` for every item, in ``workers`` forked processes (here when ``workers`` is 1).

    Args:
        fn: a module-level function (it is named, not pickled, in the workers); it reads
            :data:`STATE`.
        items: small picklable task descriptions (launch indices).
        workers: processes to use.
        state: what ``fn`` reads through :data:`STATE`; inherited by the workers at fork.
        ordered: yield results in item order (else as they finish).

    Yields:
        The results. An exception in a task is raised here (the other workers are stopped).
    """
    STATE.clear()
    STATE.update(state)
    try:
        if workers <= 1:
            _LOCAL.clear()
            _LOCAL.update(index=0, lock=contextlib.nullcontext())
            for it in items:
                yield fn(it)
            return
        from .._memory import keep_freed_memory

        ctx = mp.get_context("fork")
        counter, lock = ctx.Value("i", 0), ctx.Lock()
        with ctx.Pool(workers, initializer=_init, initargs=(counter, lock, keep_freed_memory)) as pool:
            run = pool.imap if ordered else pool.imap_unordered
            yield from run(fn, items, chunksize=1)
    finally:
        STATE.clear()
        _LOCAL.clear()


def shared_zeros(n: int, dtype) -> np.ndarray:
    """A zeroed array in anonymous shared memory, made before the workers fork: what a worker
    writes there the calling process and later workers see, without pickling or copying it.
    Pages never written cost nothing, so it may be sized by an upper bound."""
    dtype = np.dtype(dtype)
    return np.frombuffer(mmap.mmap(-1, max(1, n * dtype.itemsize)), dtype, count=n)


#: Buffers handed to one ``writev`` call at most (Linux's IOV_MAX is 1024).
_IOV_MAX = 1024
#: Bytes handed to one ``writev`` call at most. Measured on a 2-core VM (ext4, 435 MiB written
#: after a sync): calls of 256 KiB - 4 MiB took 0.11 - 0.15 s, of 16 - 32 MiB 0.12 - 0.53 s and
#: one call per 28 MiB piece 0.09 - 1.08 s (median of eight 0.35 s).
_WRITE_BYTES = 1 << 20


def append_all(fd: int, pieces: list) -> int:
    """Append buffers (bytes or contiguous arrays) to the file ``fd`` (opened with ``O_APPEND``)
    as one unbroken piece, without joining them first (``os.writev`` of up to ``_WRITE_BYTES``
    at a time); returns the bytes written.

    Workers of one run share the output file: the run's lock keeps each piece whole.
    """
    views = [memoryview(p).cast("B") for p in pieces]
    views = [v for v in views if v.nbytes]
    total = sum(v.nbytes for v in views)
    with _LOCAL.get("lock") or contextlib.nullcontext():
        while views:
            batch, size = [], 0
            while views and size < _WRITE_BYTES and len(batch) < _IOV_MAX:
                v = views[0]
                if size + v.nbytes > _WRITE_BYTES:  # (split a large buffer)
                    v, views[0] = v[: _WRITE_BYTES - size], v[_WRITE_BYTES - size :]
                else:
                    views.pop(0)
                batch.append(v)
                size += v.nbytes
            n = os.writev(fd, batch)
            if n < size:  # a short write: put back what was not written
                done = 0
                for k, v in enumerate(batch):
                    if done + v.nbytes > n:
                        views[:0] = [v[n - done :]] + batch[k + 1 :]
                        break
                    done += v.nbytes
    return total


def open_append(path) -> int:
    """A descriptor that appends to ``path``, opened once per process and run."""
    key = ("fd", str(path))
    fd = _LOCAL.get(key)
    if fd is None:
        fd = _LOCAL[key] = os.open(path, os.O_WRONLY | os.O_APPEND)
    return fd


def close_local() -> None:
    """Close the descriptors this process opened through :func:`open_append`."""
    for k in [k for k in _LOCAL if isinstance(k, tuple) and k[0] == "fd"]:
        os.close(_LOCAL.pop(k))
