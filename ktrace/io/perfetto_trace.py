"""Perfetto protobuf trace writer (``.pftrace``), through the ``perfetto`` package's own classes.

Layout as in :mod:`ktrace.io.layout`: one process track per rank (``rank r · GPU``), under it a
``kernels`` track and one track per program (and extra lanes), explicitly ordered; counter
tracks per (program, counter) under their program's track. Spans, waits and notifies are
slices (``TYPE_SLICE_BEGIN``/``END``; zero-length ones are instants); waits are named
``wait r<peer>`` in category ``wait`` (``wait TIMEOUT`` in ``wait,timeout``), notifies
``notify r<peer>`` in ``notify``; each notify slice starts a flow (``flow_ids``) that the wait it
released terminates (``terminating_flow_ids``). Arguments are debug annotations. Timestamps
are nanoseconds on the common clock (host wall-clock time when anchored).

Encoding: every packet is a ``TracePacket`` built with the generated classes. For speed, one
message per event class is kept and refilled, and each is serialised wrapped in a one-packet
``Trace``: the concatenation of serialised ``Trace`` messages is itself a ``Trace`` holding all
their packets (protobuf's rule for repeated fields), which is how the ``perfetto`` package's
own streaming builder writes files. Event names, categories and argument names are interned
per sequence.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    CounterDescriptor,
    DebugAnnotationName,
    EventCategory,
    EventName,
    InternedData,
    ProcessDescriptor,
    Trace,
    TrackDescriptor,
    TrackEvent,
    TracePacket,
)

from ..clock.model import ClockModel
from ..schema import EventKind
from .layout import COUNTER, INSTANT, NOTIFY, SPAN, WAIT, TracePlan, event_class, iter_launches, plan_trace, timeout_mask, track_name

log = logging.getLogger("ktrace")

_DESC_SEQ = 1
_EVENT_SEQ = 2
_SEQ_CLEARED = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_SEQ_NEEDS = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE

_CATEGORIES = {"span": 1, "wait": 2, "timeout": 3, "notify": 4, "mark": 5, "kernel": 6}
_ARGS = ("arg0", "arg1", "sm", "peer", "spins", "flag", "value", "expected", "cmp", "seq", "launch", "events", "dropped")
_ARG_IID = {name: i + 1 for i, name in enumerate(_ARGS)}
_CLASS_ARGS = {
    SPAN: (("arg0", "arg0"), ("arg1", "arg1"), ("sm", "hw")),
    INSTANT: (("arg0", "arg0"), ("arg1", "arg1"), ("sm", "hw")),
    WAIT: (("peer", "arg0"), ("spins", "arg1"), ("flag", "arg2"), ("value", "arg3"), ("expected", "arg4"), ("cmp", "arg5"), ("sm", "hw")),
    NOTIFY: (("peer", "arg0"), ("value", "arg1"), ("flag", "arg2"), ("seq", "arg3"), ("sm", "hw")),
}


def _proc_uuid(rank: int) -> int:
    return (rank + 1) << 32


def _counter_uuid(rank: int, index: int) -> int:
    return _proc_uuid(rank) | (1 << 31) | index


def _ser(pkt: TracePacket) -> bytes:
    t = Trace()
    t.packet.append(pkt)
    return t.SerializeToString()


def _desc(**kw) -> bytes:
    return _ser(TracePacket(trusted_packet_sequence_id=_DESC_SEQ, track_descriptor=TrackDescriptor(**kw)))


def _process_descriptors(plan: TracePlan) -> bytes:
    out = []
    for r, rp in sorted(plan.ranks.items()):
        pu = _proc_uuid(r)
        out.append(_desc(uuid=pu, name=rp.name, process=ProcessDescriptor(pid=r + 1, process_name=rp.name),
                         child_ordering=TrackDescriptor.EXPLICIT))
        out.append(_desc(uuid=pu | 1, parent_uuid=pu, name="kernels", sibling_order_rank=1,
                         sibling_merge_behavior=TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE))
    return b"".join(out)


def _track_descriptors(plan: TracePlan, rank: int, new_tids, new_counters) -> bytes:
    """Descriptors of the tracks a launch uses for the first time (written before its events)."""
    rp = plan.ranks[rank]
    pu = _proc_uuid(rank)
    out = []
    for tid in new_tids:
        g, prog, lane = rp.tracks[tid]
        out.append(_desc(uuid=pu | tid, parent_uuid=pu, name=track_name(g, prog, lane), sibling_order_rank=tid,
                         sibling_merge_behavior=TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE))
    for (g, prog, region), i in new_counters:
        parent = rp.tids(g, np.array([prog]), np.zeros(1, np.uint8))[0]
        out.append(_desc(uuid=_counter_uuid(rank, i), parent_uuid=pu | int(parent) if int(parent) in rp.tracks else pu,
                         name=f"p{prog} {plan.region_name(region)}", counter=CounterDescriptor()))
    return b"".join(out)


class _Interner:
    """Event names interned on the event sequence; new ones are emitted before first use."""

    def __init__(self):
        self.iids: dict[str, int] = {}
        self.pending: list[tuple[int, str]] = []

    def ids(self, codes: np.ndarray, make) -> np.ndarray:
        uk, inv = np.unique(codes, return_inverse=True)
        table = np.empty(uk.size, np.int64)
        for j, k in enumerate(uk.tolist()):
            name = make(int(k))
            iid = self.iids.get(name)
            if iid is None:
                iid = self.iids[name] = len(self.iids) + 1
                self.pending.append((iid, name))
            table[j] = iid
        return table[inv.reshape(-1)]

    def flush(self) -> bytes:
        if not self.pending:
            return b""
        pkt = TracePacket(trusted_packet_sequence_id=_EVENT_SEQ, sequence_flags=_SEQ_NEEDS,
                          interned_data=InternedData(event_names=[EventName(iid=i, name=n) for i, n in self.pending]))
        self.pending = []
        return _ser(pkt)


def _first_packet() -> bytes:
    return _ser(TracePacket(
        trusted_packet_sequence_id=_EVENT_SEQ, sequence_flags=_SEQ_CLEARED, first_packet_on_sequence=True,
        interned_data=InternedData(
            event_categories=[EventCategory(iid=i, name=n) for n, i in _CATEGORIES.items()],
            debug_annotation_names=[DebugAnnotationName(iid=i, name=n) for n, i in _ARG_IID.items()],
        )))


class _Template:
    """One reusable packet of one event class: refill its fields, serialise, repeat."""

    def __init__(self, type_, categories=(), args=(), flow=None):
        self.trace = Trace()
        p = self.trace.packet.add()
        p.trusted_packet_sequence_id = _EVENT_SEQ
        p.sequence_flags = _SEQ_NEEDS
        te = p.track_event
        te.type = type_
        te.category_iids.extend(_CATEGORIES[c] for c in categories)
        self.annotations = [te.debug_annotations.add(name_iid=_ARG_IID[a]) for a in args]
        self.packet, self.event = p, te
        self.flow = flow
        if flow == "out":
            te.flow_ids.append(0)
            self.flow_field = te.flow_ids
        elif flow == "in":
            te.terminating_flow_ids.append(0)
            self.flow_field = te.terminating_flow_ids


def _emit_starts(tpl: _Template, ts, uuids, names, argcols, flows=None) -> list[bytes]:
    """Serialised begin/instant packets: one loop per template, no branches per event."""
    p, te, ser = tpl.packet, tpl.event, tpl.trace.SerializeToString
    out = []
    ap = out.append
    ann = tpl.annotations
    cols = [c.tolist() for c in argcols]
    if flows is not None:
        ff = tpl.flow_field
        for t, u, nm, fl, *vals in zip(ts.tolist(), uuids.tolist(), names.tolist(), flows.tolist(), *cols):
            p.timestamp = t
            te.track_uuid = u
            te.name_iid = nm
            ff[0] = fl
            for a, v in zip(ann, vals):
                a.int_value = v
            ap(ser())
        return out
    if len(ann) == 3:
        a0, a1, a2 = ann
        for t, u, nm, v0, v1, v2 in zip(ts.tolist(), uuids.tolist(), names.tolist(), *cols):
            p.timestamp = t
            te.track_uuid = u
            te.name_iid = nm
            a0.int_value = v0
            a1.int_value = v1
            a2.int_value = v2
            ap(ser())
        return out
    for t, u, nm, *vals in zip(ts.tolist(), uuids.tolist(), names.tolist(), *cols):
        p.timestamp = t
        te.track_uuid = u
        te.name_iid = nm
        for a, v in zip(ann, vals):
            a.int_value = v
        ap(ser())
    return out


def _emit_ends(tpl: _Template, ts, uuids) -> list[bytes]:
    p, te, ser = tpl.packet, tpl.event, tpl.trace.SerializeToString
    out = []
    ap = out.append
    for t, u in zip(ts.tolist(), uuids.tolist()):
        p.timestamp = t
        te.track_uuid = u
        ap(ser())
    return out


def _emit_counters(tpl: _Template, ts, uuids, values) -> list[bytes]:
    p, te, ser = tpl.packet, tpl.event, tpl.trace.SerializeToString
    out = []
    ap = out.append
    for t, u, v in zip(ts.tolist(), uuids.tolist(), values.tolist()):
        p.timestamp = t
        te.track_uuid = u
        te.counter_value = v
        ap(ser())
    return out


class _Writer:
    def __init__(self, plan: TracePlan):
        self.plan = plan
        self.names = _Interner()
        B, E, I, C = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END, TrackEvent.TYPE_INSTANT, TrackEvent.TYPE_COUNTER
        arg_names = {cls: tuple(a for a, _ in spec) for cls, spec in _CLASS_ARGS.items()}
        self.t = {}
        for shape, typ in (("begin", B), ("instant", I)):
            self.t[(SPAN, shape)] = _Template(typ, ("span",), arg_names[SPAN])
            self.t[(INSTANT, shape)] = _Template(typ, ("mark",), arg_names[INSTANT])
            for to, cats in ((0, ("wait",)), (1, ("wait", "timeout"))):
                self.t[(WAIT, shape, to)] = _Template(typ, cats, arg_names[WAIT])
                self.t[(WAIT, shape, to, "flow")] = _Template(typ, cats, arg_names[WAIT], flow="in")
            self.t[(NOTIFY, shape)] = _Template(typ, ("notify",), arg_names[NOTIFY])
            self.t[(NOTIFY, shape, "flow")] = _Template(typ, ("notify",), arg_names[NOTIFY], flow="out")
        self.end = _Template(E)
        self.end.packet.ClearField("sequence_flags")
        self.counter = _Template(C)
        self.counter.packet.ClearField("sequence_flags")

    def launch(self, lp, ev, s_ns, e_ns, lanes) -> bytes:
        plan = self.plan
        region_name = plan.region_name
        rp = plan.ranks[lp.rank]
        tids = rp.tids(lp.group, ev["program"], lanes)
        is_counter = ev["kind"] == EventKind.COUNTER
        new_tids = rp.note_tracks(lp.group, tids[~is_counter]).tolist()
        n_counters = len(rp.counters)
        cidx = rp.counter_index(lp.group, ev["program"][is_counter], ev["region"][is_counter]) if is_counter.any() else None
        new_counters = [(k, i) for k, i in rp.counters.items() if i >= n_counters]
        head = _track_descriptors(plan, lp.rank, new_tids, new_counters)
        uuids = tids | _proc_uuid(lp.rank)
        flow_out, flow_in = lp.flows(ev.size)
        blobs: list[list[bytes]] = []
        keys: list[tuple] = []  # (time, type, k1, k2) per blob list: end 0 < instant 1 < begin 2

        def add(b, t, typ, k1, k2):
            blobs.append(b)
            keys.append((t, np.full(t.size, typ, np.int8), k1, k2))

        for cls, idx in event_class(ev["kind"], s_ns, e_ns).items():
            if idx.size == 0:
                continue
            if cls == COUNTER:
                cu = cidx + (_proc_uuid(lp.rank) | (1 << 31))
                add(_emit_counters(self.counter, s_ns[idx], cu, ev["arg0"][idx]), s_ns[idx], 1, np.zeros(idx.size, np.int64), idx)
                continue
            if cls in (SPAN, INSTANT):
                names = self.names.ids(ev["region"][idx], region_name)
            elif cls == WAIT:
                to = timeout_mask(ev["flags"][idx]).astype(np.int64)
                names = self.names.ids((ev["arg0"][idx] << 1) | to, lambda k: f"wait r{k >> 1}" + (" TIMEOUT" if k & 1 else ""))
            else:
                names = self.names.ids(ev["arg0"][idx], lambda k: f"notify r{k}")
            zero = e_ns[idx] == s_ns[idx]
            flows = flow_in if cls == WAIT else flow_out if cls == NOTIFY else None
            for shape, part in (("begin", np.flatnonzero(~zero)), ("instant", np.flatnonzero(zero))):
                if part.size == 0:
                    continue
                rows = idx[part]
                if cls == INSTANT:
                    shape = "instant"
                subsets = [((cls, shape), rows, part)]
                if cls == WAIT:
                    tom = to[part].astype(bool)
                    subsets = [((cls, shape, 1), rows[tom], part[tom]), ((cls, shape, 0), rows[~tom], part[~tom])]
                for key, rws, pp in subsets:
                    if rws.size == 0:
                        continue
                    groups = [(key, rws, pp, None)]
                    if flows is not None:
                        has = flows[rws] != 0
                        groups = [(key, rws[~has], pp[~has], None), (key + ("flow",), rws[has], pp[has], flows[rws[has]])]
                    for k, rr, ppp, fl in groups:
                        if rr.size == 0:
                            continue
                        argcols = [ev[col][rr] for _, col in _CLASS_ARGS[cls]]
                        b = _emit_starts(self.t[k], s_ns[rr], uuids[rr], names[ppp], argcols, fl)
                        typ = 2 if shape == "begin" else 1
                        add(b, s_ns[rr], typ, -e_ns[rr] if typ == 2 else np.zeros(rr.size, np.int64), rr)
                if shape == "begin" and cls != INSTANT:
                    add(_emit_ends(self.end, e_ns[rows], uuids[rows]), e_ns[rows], 0, -s_ns[rows], -rows)
        if not blobs:
            return head + self.names.flush()
        t = np.concatenate([k[0] for k in keys])
        order = np.lexsort((np.concatenate([k[3] for k in keys]), np.concatenate([k[2] for k in keys]),
                            np.concatenate([k[1] for k in keys]), t))
        objs = np.empty(t.size, object)
        pos = 0
        for b in blobs:
            objs[pos : pos + len(b)] = b
            pos += len(b)
        return head + self.names.flush() + b"".join(objs[order].tolist())

    def kernels(self) -> bytes:
        out = []
        for lp in self.plan.launches:
            if not lp.n_events:
                continue
            name = lp.kernel + (f" ({lp.dropped} DROPPED)" if lp.dropped else "")
            uu = _proc_uuid(lp.rank) | 1
            anns = [{"name_iid": _ARG_IID["launch"], "int_value": lp.index}, {"name_iid": _ARG_IID["events"], "int_value": lp.n_events},
                    {"name_iid": _ARG_IID["dropped"], "int_value": lp.dropped}]
            out.append(_ser(TracePacket(timestamp=lp.start_ns, trusted_packet_sequence_id=_EVENT_SEQ, sequence_flags=_SEQ_NEEDS,
                                        track_event=TrackEvent(type=TrackEvent.TYPE_SLICE_BEGIN, track_uuid=uu, name=name,
                                                               category_iids=[_CATEGORIES["kernel"]], debug_annotations=anns))))
            out.append(_ser(TracePacket(timestamp=lp.end_ns, trusted_packet_sequence_id=_EVENT_SEQ,
                                        track_event=TrackEvent(type=TrackEvent.TYPE_SLICE_END, track_uuid=uu))))
        return b"".join(out)


def write_perfetto(capture, path: str | os.PathLike, *, model: ClockModel | None = None, plan: TracePlan | None = None) -> Path:
    """Write a capture as a Perfetto protobuf trace (open it in ui.perfetto.dev).

    Args:
        capture: a ``ktrace.io.Capture``.
        path: the output file (``.pftrace`` by convention).
        model: the clock model (default: stored in the capture, else fitted from its samples).
        plan: a layout already computed with :func:`ktrace.io.layout.plan_trace`.

    Returns:
        The path written (atomically: a temporary file renamed into place).
    """
    path = Path(path)
    t0 = time.perf_counter()
    plan = plan or plan_trace(capture, model)
    if plan.partial:
        log.warning("writing a PARTIAL trace: ranks %s are missing", plan.missing_ranks)
    tmp = path.with_name(path.name + ".tmp")
    w = _Writer(plan)
    try:
        with open(tmp, "wb", buffering=1 << 20) as out:
            out.write(_process_descriptors(plan))
            out.write(_first_packet())
            out.write(w.kernels())
            for lp, ev, s_ns, e_ns, lanes in iter_launches(capture, plan):
                out.write(w.launch(lp, ev, s_ns, e_ns, lanes))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    log.info("wrote %s: %d events in %.2f s", path, plan.n_events, time.perf_counter() - t0)
    return path
