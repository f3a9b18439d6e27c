"""Chrome JSON trace writer (``.json`` / ``.json.gz``), readable by ui.perfetto.dev and chrome://tracing.

Layout as in :mod:`ktrace.io.layout`: ``pid`` = rank + 1 (named ``rank r · GPU``), ``tid`` 1 is
the rank's ``kernels`` track and ``tid`` 2.. are its program tracks (``p<program>``, extra lanes
``p<program> lane<k>``) in program order. Spans, waits and notifies are complete (``X``) events;
waits are named ``wait r<peer>`` in category ``wait`` (``wait TIMEOUT`` / ``wait,timeout`` when
they gave up); notifies ``notify r<peer>``; marks are thread instants; counters are ``C``
events named ``p<program> <counter>``. Each notify's flow arrow to the wait it released uses
the version-2 flow fields (``bind_id`` with ``flow_out`` / ``flow_in``).

Timestamps are microseconds with three decimals (exact nanoseconds) counted from the trace's
first event; the absolute start (``base_ns``, on the common clock: host wall-clock time when
anchored) and the clock model are in ``otherData``.

Per-event rows are laid out with numpy (see ``ktrace.io._rows``); orjson encodes every string
and all metadata.
"""

from __future__ import annotations

import gzip
import logging
import os
import time
from pathlib import Path

import numpy as np
import orjson

from .. import __version__
from ..clock.model import ClockModel
from . import _parallel, _rows
from ..schema import EventKind
from .layout import (COUNTER, INSTANT, NOTIFY, SPAN, WAIT, Batch, TracePlan, batch_flows, batch_lanes, event_class, notify_flow_ids, plan_trace,
                     read_batch, timeout_mask, track_name)

log = logging.getLogger("ktrace")

#: Rows formatted at a time (bounds the writer's working memory).
CHUNK = 262_144
#: About the bytes of one event's row (what decides whether the output is written with direct I/O).
_ROW_BYTES = 150
_WAIT_CMP = {0: "eq", 1: "ge", 2: "gt", 3: "ne"}


def _j(x) -> bytes:
    return orjson.dumps(x)


def _meta_events(plan: TracePlan, tracks: dict[int, set]) -> list[dict]:
    out = []
    for r, rp in sorted(plan.ranks.items()):
        pid = r + 1
        out.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": rp.name}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": r}})
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "kernels"}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": 1, "args": {"sort_index": 0}})
        for tid in sorted(tracks[r]):
            g, prog, lane = rp.track(tid)
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track_name(g, prog, lane)}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    for lp in plan.launches:
        if not lp.n_events:
            continue
        name = lp.kernel + (f" ({lp.dropped} DROPPED)" if lp.dropped else "")
        out.append({
            "ph": "X", "pid": lp.rank + 1, "tid": 1, "name": name, "cat": "kernel",
            "ts": (lp.start_ns - plan.base_ns) / 1000.0, "dur": (lp.end_ns - lp.start_ns) / 1000.0,
            "args": {"launch": lp.index, "grid": list(lp.grid), "events": lp.n_events, "dropped": lp.dropped},
        })
    return out


def _names(keys: np.ndarray, make) -> _rows.Pick:
    """Per row the JSON-encoded name ``make(key)`` (each distinct key's made once)."""
    inv, uk = _rows.codes(keys)
    return _rows.Pick(_rows.table([_j(make(int(k))) for k in uk.tolist()]), inv)


#: The columns the rows are made of.
_COLUMNS = ("program", "region", "hw", "arg0", "arg1", "arg2", "arg3", "arg4", "arg5")


def _batch_rows(plan: TracePlan, b: Batch, out) -> np.ndarray:
    """Write the rows of a batch's events through ``out``; returns the track ids they use."""
    region_name = plan.region_name
    rp = plan.ranks[b.rank]
    ev = b.cols
    s_ns, e_ns = b.s_ns, b.e_ns
    n_all = b.size
    pid = str(b.rank + 1).encode()
    lanes = batch_lanes(b, plan.launches[b.launches[0]].n_programs)
    groups = [plan.launches[li].group for li in b.launches]
    tids = rp.tids(groups[0] if len(set(groups)) == 1 else b.per_row(groups), ev["program"], lanes)
    flows = batch_flows(plan, b)
    flow_out, flow_in = notify_flow_ids(flows, n_all), flows["in_notify_ids"]
    classes = event_class(ev["kind"])
    for cls, idx_all in classes.items():
        for c0 in range(0, idx_all.size, CHUNK):
            idx = idx_all[c0 : c0 + CHUNK]
            n = idx.size
            if n == 0:
                continue
            ts = _rows.Fixed3(s_ns[idx] - plan.base_ns)
            if cls == COUNTER:
                name = _names((ev["program"][idx].astype(np.int64) << 24) | ev["region"][idx], lambda k: f"p{k >> 24} {region_name(k & 0xFFFFFF)}")
                out(_rows.rows(n, [b'{"ph":"C","pid":' + pid + b',"ts":', ts, b',"name":', name, b',"args":{"value":',
                                   _rows.Ints(ev["arg0"][idx]), b"}},\n"]))
                continue
            tid = _rows.Ints(tids[idx])
            hw = _rows.Ints(ev["hw"][idx])
            if cls == INSTANT:
                out(_rows.rows(n, [b'{"ph":"i","s":"t","pid":' + pid + b',"tid":', tid, b',"ts":', ts, b',"name":', _names(ev["region"][idx], region_name),
                                   b',"cat":"mark","args":{"arg0":', _rows.Ints(ev["arg0"][idx]), b',"arg1":',
                                   _rows.Ints(ev["arg1"][idx]), b',"sm":', hw, b"}},\n"]))
                continue
            dur = _rows.Fixed3(e_ns[idx] - s_ns[idx])
            head = [b'{"ph":"X","pid":' + pid + b',"tid":', tid, b',"ts":', ts, b',"dur":', dur]
            if cls == SPAN:
                out(_rows.rows(n, head + [b',"name":', _names(ev["region"][idx], region_name), b',"cat":"span","args":{"arg0":',
                                          _rows.Ints(ev["arg0"][idx]), b',"arg1":', _rows.Ints(ev["arg1"][idx]), b',"sm":', hw, b"}},\n"]))
            elif cls == WAIT:
                to = timeout_mask(ev["flags"][idx]).astype(np.int64)
                peer = ev["arg0"][idx].astype(np.int64)
                name = _names((peer << 1) | to, lambda k: f"wait r{k >> 1}" + (" TIMEOUT" if k & 1 else ""))
                cat = _rows.Pick(_rows.table([b'"wait"', b'"wait,timeout"'] if to.any() else [b'"wait"']), to)
                fl = flow_in[idx]
                has = np.flatnonzero(fl)
                flow = _rows.Optional(n, has, [b',"bind_id":', _rows.Ints(fl[has]), b',"flow_in":true'])
                cmp = _names(ev["arg5"][idx], lambda k: _WAIT_CMP.get(k, str(k)))
                out(_rows.rows(n, head + [flow, b',"name":', name, b',"cat":', cat, b',"args":{"peer":', _rows.Ints(peer),
                                          b',"spins":', _rows.Ints(ev["arg1"][idx]), b',"flag":', _rows.Ints(ev["arg2"][idx]),
                                          b',"value":', _rows.Ints(ev["arg3"][idx]), b',"expected":', _rows.Ints(ev["arg4"][idx]),
                                          b',"cmp":', cmp, b',"sm":', hw, b"}},\n"]))
            elif cls == NOTIFY:
                fl = flow_out[idx]
                has = np.flatnonzero(fl)
                flow = _rows.Optional(n, has, [b',"bind_id":', _rows.Ints(fl[has]), b',"flow_out":true'])
                out(_rows.rows(n, head + [flow, b',"name":', _names(ev["arg0"][idx], lambda k: f"notify r{k}"), b',"cat":"notify","args":{"peer":',
                                          _rows.Ints(ev["arg0"][idx]), b',"value":', _rows.Ints(ev["arg1"][idx]), b',"flag":',
                                          _rows.Ints(ev["arg2"][idx]), b',"seq":', _rows.Ints(ev["arg3"][idx]), b',"sm":', hw, b"}},\n"]))
    return np.unique(tids[ev["kind"] != EventKind.COUNTER])


def _task(batch: list[int]):
    """Worker task: one batch's rows, appended to the output as each block of them is formatted
    (written while the next is formatted) or returned, when compressing; and the track ids
    they use."""
    st = _parallel.STATE
    plan = st["plan"]
    b = read_batch(batch, _COLUMNS)
    if st["compress"]:
        parts: list[np.ndarray] = []
        tids = _batch_rows(plan, b, parts.append)
        return b.rank, tids, b"".join(parts)
    out = st["out"]
    tids = _batch_rows(plan, b, lambda rows: out.append_async([rows]))
    out.flush()
    return b.rank, tids, None


def write_chrome_json(capture, path: str | os.PathLike, *, model: ClockModel | None = None, compress: bool | None = None,
                      plan: TracePlan | None = None, workers: int | None = None) -> Path:
    """Write a capture as a Chrome JSON trace.

    Batches of launches are formatted in worker processes (see ``ktrace.io.layout`` and
    ``ktrace.io._parallel``), each appending its rows to the file as one piece; rows of
    different batches may come in any order (the format does not care), and the result parses
    to the same events whatever the number of workers. The thread names of the tracks the
    batches used close the file.

    Args:
        capture: a ``ktrace.io.Capture`` (all ranks to show).
        path: output file; gzip-compressed when it ends in ``.gz`` (or ``compress=True``).
        model: the clock model (default: stored in the capture, else fitted from its samples).
        compress: force gzip on or off.
        plan: a layout already computed with :func:`ktrace.io.layout.plan_trace`.
        workers: worker processes (default: one per core for large captures; 1: none).

    Returns:
        The path written (atomically: a temporary file renamed into place).
    """
    path = Path(path)
    compress = path.name.endswith(".gz") if compress is None else compress
    t0 = time.perf_counter()
    plan = plan or plan_trace(capture, model, workers=workers)
    workers = plan.workers if workers is None else _parallel.resolve_workers(workers, plan.n_events)
    other = {
        "ktrace_version": __version__,
        "base_ns": plan.base_ns,
        "time_unit": "ts/dur are microseconds since base_ns on the common clock",
        "clock": plan.model.to_dict(),
        "world_size": capture.world_size,
        "partial": plan.partial,
        "missing_ranks": plan.missing_ranks,
        "events": plan.n_events,
        "flows": plan.n_flows,
    }
    if plan.partial:
        log.warning("writing a PARTIAL trace: ranks %s are missing", plan.missing_ranks)
    tmp = path.with_name(path.name + ".tmp")
    head = b'{"displayTimeUnit":"ns","otherData":' + _j(other) + b',"traceEvents":[\n'
    tasks = [bt for bt in plan.batches if any(plan.launches[li].n_events for li in bt)]
    state = {"capture": capture, "model": plan.model, "refs": [(r, ln) for r, rc in sorted(capture.ranks.items()) for ln in rc.launches],
             "plan": plan, "compress": compress}
    tracks: dict[int, set] = {r: set() for r in plan.ranks}
    run = _parallel.imap(_task, tasks, min(workers, max(1, len(tasks))), state, ordered=False)
    try:
        if compress:
            with gzip.open(tmp, "wb", compresslevel=1) as out:
                out.write(head)
                for rank, tids, data in run:
                    tracks[rank].update(tids.tolist())
                    out.write(data)
                out.write(_trailer(plan, tracks))
        else:
            out = state["out"] = _parallel.Output(tmp, direct=_parallel.direct_io_wanted(plan.n_events * _ROW_BYTES))
            out.append([head])
            try:
                for rank, tids, _ in run:
                    tracks[rank].update(tids.tolist())
            finally:
                out.close()
            with open(tmp, "ab") as f:
                f.write(_trailer(plan, tracks))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    log.info("wrote %s: %d events in %.2f s", path, plan.n_events, time.perf_counter() - t0)
    return path


def _trailer(plan: TracePlan, tracks: dict[int, set]) -> bytes:
    # every event row ends in a comma; the metadata events close the array
    return b",\n".join(_j(m) for m in _meta_events(plan, tracks)) + b"\n]}\n"
