"""Canonical form of a trace ktrace wrote, to compare two writers' outputs event for event.

    python scripts/canonical_trace.py TRACE [TRACE2]     # one: summary; two: the differences

Reads a Perfetto protobuf trace (``.pftrace``, with the ``perfetto`` package's own classes) or a
Chrome JSON trace (``.json`` / ``.json.gz``) into one sorted list of events, each
``(process, track, name, categories, start ns, duration ns, arguments)`` with times absolute
(Chrome's ``ts`` plus its ``base_ns``), and the flows as pairs of such events (flow ids differ
between writers; what they join does not). Two traces of the same capture compare equal when
they show the same events on the same tracks with the same arguments and arrows.
"""

from __future__ import annotations

import gzip
import sys
from collections import Counter, defaultdict
from pathlib import Path

import orjson


def _key(ev: tuple) -> tuple:
    return ev[:6]


def _perfetto(path: Path) -> dict:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    t = Trace()
    t.ParseFromString(path.read_bytes())
    names: dict = defaultdict(dict)
    cats: dict = defaultdict(dict)
    anames: dict = defaultdict(dict)
    tracks: dict = {}
    events, open_, flows_out, flows_in = [], defaultdict(list), defaultdict(list), defaultdict(list)
    # a track's events in time order, as the trace processor sorts them (packets of equal time
    # keep their order in the file, which the writer arranges)
    packets = sorted(t.packet, key=lambda p: p.timestamp if p.HasField("track_event") else -1)
    for p in packets:
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & 1:  # incremental state cleared
            names[seq], cats[seq], anames[seq] = {}, {}, {}
        idata = p.interned_data
        for x in idata.event_names:
            names[seq][x.iid] = x.name
        for x in idata.event_categories:
            cats[seq][x.iid] = x.name
        for x in idata.debug_annotation_names:
            anames[seq][x.iid] = x.name
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            tracks[d.uuid] = (d.name, d.parent_uuid if d.HasField("parent_uuid") else None)
            continue
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        if te.type == TrackEvent.TYPE_SLICE_END:
            start, rec = open_[te.track_uuid].pop()
            rec[4] = p.timestamp - start
            continue
        name = te.name if te.HasField("name") else names[seq].get(te.name_iid, "?")
        cat = ",".join(cats[seq].get(c, "?") for c in te.category_iids)
        args = []
        for a in te.debug_annotations:
            an = anames[seq].get(a.name_iid, a.name)
            v = a.string_value if a.HasField("string_value") else a.int_value
            args.append((an, v))
        rec = [te.track_uuid, name, cat, p.timestamp, 0, tuple(sorted(args))]
        if te.type == TrackEvent.TYPE_COUNTER:
            rec[1], rec[5] = "<counter>", (("value", te.counter_value),)
        events.append(rec)
        if te.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_[te.track_uuid].append((p.timestamp, rec))
        for f in te.flow_ids:
            flows_out[f].append(rec)
        for f in te.terminating_flow_ids:
            flows_in[f].append(rec)

    def where(uuid):
        name, parent = tracks.get(uuid, ("?", None))
        proc = tracks.get(parent, ("?", None))[0] if parent is not None else name
        return proc, name

    def fin(rec):
        proc, trk = where(rec[0])
        return (proc, trk, rec[1], rec[2], rec[3], rec[4], rec[5])

    evs = [fin(r) for r in events]
    flows = Counter((_key(fin(flows_out[f][0])), _key(fin(r))) for f, ins in flows_in.items() for r in ins if flows_out.get(f))
    return {"events": evs, "flows": flows}


def _chrome(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    base = int(doc.get("otherData", {}).get("base_ns", 0))
    procs, threads = {}, {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    evs, out, into = [], {}, defaultdict(list)
    for e in doc["traceEvents"]:
        ph = e.get("ph")
        if ph == "M":
            continue
        ts = base + round(float(e["ts"]) * 1000)
        proc = procs.get(e["pid"], "?")
        if ph == "C":
            rec = (proc, e["name"], "<counter>", "", ts, 0, tuple(sorted(e["args"].items())))
        else:
            trk = threads.get((e["pid"], e.get("tid")), "?")
            dur = round(float(e.get("dur", 0)) * 1000)
            args = tuple(sorted((k, v) for k, v in (e.get("args") or {}).items() if k not in ("launch", "grid", "events", "dropped")))
            if e.get("cat") == "kernel":
                args = ()
            rec = (proc, trk, e["name"], e.get("cat", ""), ts, dur, args)
        evs.append(rec)
        if e.get("flow_out"):
            out[e["bind_id"]] = rec
        if e.get("flow_in"):
            into[e["bind_id"]].append(rec)
    flows = Counter((_key(out[b]), _key(r)) for b, rs in into.items() for r in rs if b in out)
    return {"events": evs, "flows": flows}


def canonical(path) -> dict:
    """``{"events": sorted list, "flows": Counter of (from, to)}`` of a trace file."""
    path = Path(path)
    name = path.name.lower()
    got = _chrome(path) if name.endswith((".json", ".json.gz")) else _perfetto(path)
    got["events"] = sorted(got["events"], key=repr)
    return got


def compare(a, b, limit: int = 5) -> list[str]:
    """Lines describing how two traces differ (empty: the same)."""
    ca, cb = canonical(a), canonical(b)
    out = []
    ea, eb = Counter(map(repr, ca["events"])), Counter(map(repr, cb["events"]))
    only_a, only_b = ea - eb, eb - ea
    if only_a or only_b:
        out.append(f"events: {sum(only_a.values())} only in A, {sum(only_b.values())} only in B (of {len(ca['events'])} / {len(cb['events'])})")
        out += [f"  A: {x}" for x in list(only_a)[:limit]] + [f"  B: {x}" for x in list(only_b)[:limit]]
    fa, fb = ca["flows"], cb["flows"]
    if fa != fb:
        out.append(f"flows: {sum((fa - fb).values())} only in A, {sum((fb - fa).values())} only in B (of {sum(fa.values())} / {sum(fb.values())})")
        out += [f"  A: {x}" for x in list(fa - fb)[:limit]] + [f"  B: {x}" for x in list(fb - fa)[:limit]]
    return out


def main(argv: list[str]) -> int:
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (piped into head: end quietly)
    if len(argv) == 1:
        c = canonical(argv[0])
        print(f"{argv[0]}: {len(c['events'])} events, {sum(c['flows'].values())} flows")
        return 0
    if len(argv) != 2:
        print(__doc__)
        return 2
    diff = compare(*argv)
    print("\n".join(diff) if diff else "same events, tracks, arguments and flows")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
