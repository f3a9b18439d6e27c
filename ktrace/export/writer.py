"""The writer protocol: what a trace format provides, and the one driver that runs it.

A format (:mod:`ktrace.export.chrome`, :mod:`ktrace.export.perfetto`) is a :class:`TraceWriter`:
the bytes that open the file, the bytes of each batch of events (made in a worker process, from
the plan's decoded columns), and the bytes that close it. :func:`write` does the rest for every
format alike: plan the trace (``ktrace.export.plan``), fork the workers (``ktrace.export.pool``),
append each batch's bytes to a temporary file as the workers make them, close it, and rename it
into place — so a third format writes no scaffolding of its own.
"""

from __future__ import annotations

import gzip
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from ..clock.model import ClockModel
from ..fileio import atomic_output
from ..text import ranges_text
from ..events import Batch
from . import pool as _pool
from .plan import TracePlan, plan_trace

log = logging.getLogger("ktrace")

#: Where a batch's bytes go: call it with a list of buffers (bytes or contiguous arrays) that
#: must not change until the batch is done; they are written in order, as one piece.
Sink = Callable[[list], None]


class TraceWriter(Protocol):
    """One trace format.

    Attributes:
        name: the format's name (``chrome``, ``perfetto``).
        bytes_per_event: about the bytes one event takes (decides whether the output is written
            with direct I/O).
    """

    name: str
    bytes_per_event: int

    def head(self, plan: TracePlan) -> bytes:
        """What opens the file (written by the calling process, before any batch)."""

    def batch(self, plan: TracePlan, b: Batch, sink: Sink) -> Any:
        """Write the events of one batch through ``sink`` (in a worker process; the writer object
        is the worker's own copy, so it may keep per-process state). Returns something small
        and picklable for :meth:`tail`."""

    def tail(self, plan: TracePlan, results: list) -> bytes:
        """What closes the file, given every batch's result (in the calling process)."""


def _write_batch(state: dict, k: int) -> tuple[Any, list | None]:
    """Worker task: batch ``k`` through the run's writer, to the output (or returned, compressed runs)."""
    plan: TracePlan = state["plan"]
    writer: TraceWriter = state["writer"]
    b = plan.batch(k)
    out = state.get("out")
    if out is None:  # a compressed output: the calling process writes it
        parts: list = []
        res = writer.batch(plan, b, lambda pieces: parts.extend(bytes(p) for p in pieces))
        return res, parts
    res = writer.batch(plan, b, out.append_async)
    out.flush()
    return res, None


def write(capture, path: str | os.PathLike, writer: TraceWriter, *, model: ClockModel | None = None, plan: TracePlan | None = None,
          workers: int | None = None, compress: bool = False) -> Path:
    """Write ``capture`` to ``path`` with ``writer``.

    Batches are written by worker processes (see :mod:`ktrace.export.pool`), each appending its
    bytes as one piece as soon as it has them: pieces of different batches come in any order
    (both formats allow it), and the trace holds the same events whatever the number of
    workers.

    Args:
        capture: a ``ktrace.captures.Capture``.
        path: the output file.
        writer: the format.
        model: the clock model (default: stored in the capture, else fitted from its samples).
        plan: a plan already made with :func:`ktrace.export.plan.plan_trace`.
        workers: worker processes (default: one per core for large captures; 1: none).
        compress: gzip the output (its pieces are then made in the workers and written here).

    Returns:
        The path written (atomically: a temporary file renamed into place).
    """
    path = Path(path)
    t0 = time.perf_counter()
    plan = plan or plan_trace(capture, model, workers=workers)
    workers = plan.workers if workers is None else _pool.resolve_workers(workers, plan.n_events)
    if plan.partial:
        log.warning("writing a PARTIAL trace: ranks %s are missing", ranges_text(plan.missing_ranks))
    tasks = [k for k, bt in enumerate(plan.batches) if any(plan.launches[li].n_events for li in bt)]
    state: dict = {"plan": plan, "writer": writer}
    results: list = []
    # a temporary of a unique name in the output's folder, removed on any failure or interruption
    # (never a name made from the output's alone: that could be an input, or another writer's)
    with atomic_output(path) as tmp:
        if compress:
            with gzip.open(tmp, "wb", compresslevel=1) as gz:
                gz.write(writer.head(plan))
                for res, parts in _pool.imap(_write_batch, tasks, min(workers, max(1, len(tasks))), state, ordered=False):
                    results.append(res)
                    for p in parts:
                        gz.write(p)
                gz.write(writer.tail(plan, results))
        else:
            out = state["out"] = _pool.Output(tmp, direct=_pool.direct_io_wanted(plan.n_events * writer.bytes_per_event))
            out.append([writer.head(plan)])
            try:
                for res, _ in _pool.imap(_write_batch, tasks, min(workers, max(1, len(tasks))), state, ordered=False):
                    results.append(res)
            finally:
                out.close()
            tail = writer.tail(plan, results)
            if tail:
                with open(tmp, "ab") as f:
                    f.write(tail)
    log.info("wrote %s (%s): %d events in %.2f s", path, writer.name, plan.n_events, time.perf_counter() - t0)
    return path
