"""Chrome JSON trace writer (``.json`` / ``.json.gz``), readable by ui.perfetto.dev and chrome://tracing.

Layout as in :mod:`ktrace.export.layout`: ``pid`` = rank + 1 (named ``rank r · GPU``), ``tid`` 1 is
the rank's ``kernels`` track and ``tid`` 2.. are its program tracks (``p<program>``, extra lanes
``p<program> lane<k>``) in program order. Spans, waits and notifies are complete (``X``) events;
waits are named ``wait r<peer>`` in category ``wait`` (``wait TIMEOUT`` / ``wait,timeout`` when
they gave up); notifies ``notify r<peer>``; marks are thread instants; counters are ``C``
events named ``p<program> <counter>``. Each notify's flow arrow to the wait it released uses
the version-2 flow fields (``bind_id`` with ``flow_out`` / ``flow_in``).

Timestamps are microseconds with three decimals (exact nanoseconds) counted from the trace's
first event; the absolute start (``base_ns``, on the common clock: host wall-clock time when
anchored) and the clock model are in ``otherData``.

Per-event rows are laid out with numpy (see ``ktrace.export._rows``); orjson encodes every string
and all metadata.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import orjson

from .. import __version__, schema
from ..clock.model import ClockModel
from ..events import Batch
from ..schema import EventKind, wait_state
from . import _rows
from .layout import (ACQUIRED, CLASS_KIND, COUNTER, INSTANT, NOTIFY, SPAN, WAIT, batch_flows, batch_lanes, event_class,
                     handoff_name, handoff_name_keys, notify_flow_ids)
from .plan import TracePlan
from .formats import SPLIT_BY_LAUNCHES, Format
from .writer import write

log = logging.getLogger("ktrace")

#: Rows formatted at a time (bounds the writer's working memory).
CHUNK = 262_144
#: About the bytes of one event's rows (sizes a split trace's parts; decides whether the output is
#: written with direct I/O): an event row is 150-230 bytes, a wait's or notify's flow and mark more.
_ROW_BYTES = 260


def _j(x) -> bytes:
    return orjson.dumps(x)


def _meta_events(plan: TracePlan, tracks: dict[int, set]) -> list[dict]:
    out = []
    for r, rp in sorted(plan.ranks.items()):
        pid = rp.pid
        out.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": rp.name}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": r}})
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": pid, "args": {"name": "kernels"}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": pid, "args": {"sort_index": 0}})
        for local in sorted(tracks[r]):
            g, prog, lane = rp.track(local)
            tid = int(rp.thread_id(local))
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": rp.track_title(g, prog, lane)}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": local}})
    for lp in plan.launches:
        if not lp.n_events:
            continue
        name = lp.kernel + (f" ({lp.dropped} DROPPED)" if lp.dropped else "")
        out.append({
            "ph": "X", "pid": lp.rank + 1, "tid": lp.rank + 1, "name": name, "cat": "kernel",
            "ts": (lp.start_ns - plan.base_ns) / 1000.0, "dur": (lp.end_ns - lp.start_ns) / 1000.0,
            "args": {"rank": lp.rank, "launch": lp.index, "grid": list(lp.grid), "events": lp.n_events, "dropped": lp.dropped},
        })
    return out


def _names(keys: np.ndarray, make) -> _rows.Pick:
    """Per row the JSON-encoded name ``make(key)`` (each distinct key's made once)."""
    inv, uk = _rows.codes(keys)
    return _rows.Pick(_rows.table([_j(make(int(k))) for k in uk.tolist()]), inv)


#: The columns the rows are made of.
_COLUMNS = ("program", "lane", "region", "hw", "arg0", "arg1", "arg2", "arg3", "arg4", "arg5")


def _arg_parts(kind: EventKind, ev: dict, idx: np.ndarray) -> list:
    """The start of the ``"args"`` object of rows of one event kind: each argument the schema
    names, by name (codes with names written as their names)."""
    parts: list = []
    for i, (name, col) in enumerate(schema.arg_fields(kind)):
        named = schema.ARG_VALUE_NAMES.get((kind, name))
        val = _names(ev[col][idx], named) if named else _rows.Ints(ev[col][idx])
        parts += [(b'"args":{"' if i == 0 else b',"') + name.encode() + b'":', val]
    return parts


def _where_parts(rp, ev: dict, launch: np.ndarray, idx: np.ndarray, first: bool = False) -> list:
    """The arguments that say where an event ran (rank, program, launch, SM or XCC/SE/CU), and
    the end of the row."""
    parts = [(b'"args":{' if first else b",") + b'"rank":' + str(rp.rank).encode() + b',"program":', _rows.Ints(ev["program"][idx]),
             b',"launch":', _rows.Ints(launch[idx])]
    for name, vals in rp.hw_values(ev["hw"][idx]):
        parts += [b',"' + name.encode() + b'":', _rows.Ints(vals)]
    return parts + [b"}},\n"]


def _batch_rows(plan: TracePlan, b: Batch, out) -> np.ndarray:
    """Write the rows of a batch's events through ``out``; returns the local track ids they use."""
    region_name = plan.region_name
    rp = plan.ranks[b.rank]
    ev = b.cols
    s_ns, e_ns = ev["start_ns"], ev["end_ns"]
    n_all = b.size
    pid = str(rp.pid).encode()
    track = rp.track_program(ev["program"], ev["lane"])  # (the program, or its (program, lane))
    lanes = batch_lanes(b, rp.max_programs, track)
    groups = [plan.launches[li].group for li in b.launches]
    local = rp.tids(groups[0] if len(set(groups)) == 1 else b.per_row(groups), track, lanes)
    tids = rp.thread_id(local)
    launch = b.per_row([plan.launches[li].index for li in b.launches])
    flows = batch_flows(plan.flows, b)
    # a wait's arrow ends on the wait itself, or on an ``acquired`` mark (see plan.Flows)
    flow_out, flow_in = notify_flow_ids(flows, n_all), np.where(flows["marker"], 0, flows["in_notify_ids"])
    classes = event_class(ev["kind"])
    for cls, idx_all in classes.items():
        kind = CLASS_KIND[cls]
        for c0 in range(0, idx_all.size, CHUNK):
            idx = idx_all[c0 : c0 + CHUNK]
            n = idx.size
            if n == 0:
                continue
            ts = _rows.Fixed3(s_ns[idx] - plan.base_ns)
            if cls == COUNTER:
                name = _names((ev["program"][idx].astype(np.int64) << 24) | ev["region"][idx],
                              lambda k: f"r{rp.rank} p{k >> 24} {region_name(k & 0xFFFFFF)}")
                value = schema.arg_column(kind, "value")
                out([_rows.rows(n, [b'{"ph":"C","pid":' + pid + b',"ts":', ts, b',"name":', name, b',"args":{"value":',
                                    _rows.Ints(ev[value][idx]), b"}},\n"])])
                continue
            tid = _rows.Ints(tids[idx])
            where = _where_parts(rp, ev, launch, idx)
            if cls == INSTANT:
                out([_rows.rows(n, [b'{"ph":"i","s":"t","pid":' + pid + b',"tid":', tid, b',"ts":', ts, b',"name":',
                                    _names(ev["region"][idx], region_name), b',"cat":"mark",'] + _arg_parts(kind, ev, idx) + where)])
                continue
            dur = _rows.Fixed3(e_ns[idx] - s_ns[idx])
            head = [b'{"ph":"X","pid":' + pid + b',"tid":', tid, b',"ts":', ts, b',"dur":', dur]
            if cls == SPAN:
                out([_rows.rows(n, head + [b',"name":', _names(ev["region"][idx], region_name), b',"cat":"span",']
                                + _arg_parts(kind, ev, idx) + where)])
            elif cls == WAIT:
                to = np.minimum(wait_state(ev["flags"][idx]), 1)
                name = _names(handoff_name_keys(kind, ev[schema.arg_column(kind, "peer")][idx], ev["flags"][idx], ev["region"][idx]),
                              lambda k: handoff_name(EventKind.WAIT, k, region_name))
                cat = _rows.Pick(_rows.table([b'"wait"', b'"wait,timeout"'] if to.any() else [b'"wait"']), to)
                fl = flow_in[idx]
                has = np.flatnonzero(fl)
                flow = _rows.Optional(n, has, [b',"bind_id":', _rows.Ints(fl[has]), b',"flow_in":true'])
                out([_rows.rows(n, head + [flow, b',"name":', name, b',"cat":', cat, b","] + _arg_parts(kind, ev, idx) + where)])
            elif cls == NOTIFY:
                fl = flow_out[idx]
                has = np.flatnonzero(fl)
                flow = _rows.Optional(n, has, [b',"bind_id":', _rows.Ints(fl[has]), b',"flow_out":true'])
                name = _names(handoff_name_keys(kind, ev[schema.arg_column(kind, "peer")][idx], ev["flags"][idx], ev["region"][idx]),
                              lambda k: handoff_name(EventKind.NOTIFY, k, region_name))
                out([_rows.rows(n, head + [flow, b',"name":', name, b',"cat":"notify",']
                                + _arg_parts(kind, ev, idx) + where)])
    marks = np.flatnonzero(flows["marker"])
    for c0 in range(0, marks.size, CHUNK):
        idx = marks[c0 : c0 + CHUNK]
        # a zero-length complete event: Perfetto binds a flow's end to a slice, not to an instant
        out([_rows.rows(idx.size, [b'{"ph":"X","pid":' + pid + b',"tid":', _rows.Ints(tids[idx]), b',"ts":',
                                   _rows.Fixed3(flows["mark_ns"][idx] - plan.base_ns), b',"dur":0,"name":"' + ACQUIRED.encode() + b'","cat":"wait"',
                                   b',"bind_id":', _rows.Ints(flows["in_notify_ids"][idx]), b',"flow_in":true,"args":{"peer":',
                                   _rows.Ints(ev[schema.arg_column(EventKind.WAIT, "peer")][idx]), b',"shift_ns":',
                                   _rows.Ints(flows["shift_ns"][idx])] + _where_parts(rp, ev, launch, idx))])
    return np.unique(local[ev["kind"] != EventKind.COUNTER])


class ChromeWriter:
    """The Chrome JSON format (:class:`ktrace.export.writer.TraceWriter`)."""

    name = "chrome"
    bytes_per_event = _ROW_BYTES

    def head(self, plan: TracePlan) -> bytes:
        other = {
            "ktrace_version": __version__,
            "base_ns": plan.base_ns,
            "time_unit": "ts/dur are microseconds since base_ns on the common clock",
            "clock": plan.model.to_dict(),
            "world_size": plan.world_size,
            "partial": plan.partial,
            "missing_ranks": plan.missing_ranks,
            "events": plan.n_events,
            "flows": plan.n_flows,
            "acquired_marks": plan.flows.n_markers,
        }
        return b'{"displayTimeUnit":"ns","otherData":' + _j(other) + b',"traceEvents":[\n'

    def batch(self, plan: TracePlan, b: Batch, sink) -> tuple[int, np.ndarray]:
        return b.rank, _batch_rows(plan, b, sink)

    def tail(self, plan: TracePlan, results: list) -> bytes:
        tracks: dict[int, set] = {r: set() for r in plan.ranks}
        for rank, tids in results:
            tracks[rank].update(tids.tolist())
        return _trailer(plan, tracks)


def write_chrome_json(capture, path: str | os.PathLike, *, model: ClockModel | None = None, compress: bool | None = None,
                      plan: TracePlan | None = None, workers: int | None = None) -> Path:
    """Write a capture as a Chrome JSON trace.

    Args:
        capture: a ``ktrace.captures.Capture`` (all ranks to show).
        path: output file; gzip-compressed when it ends in ``.gz`` (or ``compress=True``).
        model: the clock model (default: stored in the capture, else fitted from its samples).
        compress: force gzip on or off.
        plan: a plan already made with :func:`ktrace.export.plan.plan_trace`.
        workers: worker processes (default: one per core for large captures; 1: none).

    Returns:
        The path written (atomically: a temporary file renamed into place).
    """
    path = Path(path)
    compress = path.name.endswith(".gz") if compress is None else compress
    return write(capture, path, ChromeWriter(), model=model, plan=plan, workers=workers, compress=compress)


def _trailer(plan: TracePlan, tracks: dict[int, set]) -> bytes:
    # every event row ends in a comma; the metadata events close the array
    return b",\n".join(_j(m) for m in _meta_events(plan, tracks)) + b"\n]}\n"


#: The Chrome JSON format (``ktrace.export.formats``): ``.json``, gzip-compressed as ``.json.gz``.
#: Bytes per event of each kind and per launch: a least-squares fit of the sizes written for the
#: bundled captures, the test fixtures and a constructed capture (13 captures; within 1 % on 12,
#: 22 % on a 5-event one).
FORMAT = Format(name="chrome", extensions=(".json", ".json.gz"), write=write_chrome_json, bytes_per_event=_ROW_BYTES,
                bytes_by_kind=((113.8, 163.3, 163.3, 357.7, 231.5), 3354.0), split=SPLIT_BY_LAUNCHES, part_bytes=256 << 20)
