"""Trace writers checked by parsing their output back (perfetto's protobuf classes; json).

Inputs are CONSTRUCTED captures (ktrace.captures.synth): real multi-rank fixtures recorded on H200s
will be added by the lead.
"""

import gzip
import json
from collections import defaultdict

import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from ktrace.captures.synth import constructed_capture
from ktrace.clock import fit_clock
from ktrace.events import aligned_events
from ktrace.export import write_chrome_json, write_perfetto
from ktrace.export.layout import lanes_of
from ktrace.schema import EventFlag, EventKind


@pytest.fixture(scope="module")
def cap():
    c, _ = constructed_capture(world_size=3, programs=3, iters=2, seed=11)
    c.clock = fit_clock(c).to_dict()
    return c


def _json(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.loads(f.read())


def _slices_json(d):
    names = {}
    procs = {}
    for e in d["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        if e["ph"] == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
    return names, procs


def test_lanes_only_where_spans_overlap_without_nesting():
    prog = np.array([0, 0, 0, 0, 1, 1])
    s = np.array([0, 10, 20, 15, 0, 5])
    e = np.array([100, 30, 25, 40, 10, 8])
    lanes = lanes_of(prog, s, e)
    # [10,30] and [15,40] cross: one moves to lane 1; [20,25] nests in [10,30]; program 1 nests
    assert lanes.tolist() == [0, 0, 0, 1, 0, 0]
    assert lanes_of(np.zeros(3, int), np.array([0, 5, 10]), np.array([5, 10, 15])).tolist() == [0, 0, 0]  # touching


def test_lanes_nest_per_lane_and_laminar_programs_keep_lane_0():
    """Random intervals with many ties: every (program, lane) holds only nested or disjoint
    intervals, and a program whose intervals already nest is left on lane 0 (the vectorised
    check against a brute-force one)."""
    rng = np.random.default_rng(3)

    def crossing(s, e):
        return any(s[i] < s[j] < e[i] < e[j] for i in range(len(s)) for j in range(len(s)))

    n_laminar = 0
    for _ in range(1500):
        n = int(rng.integers(2, 40))
        prog = rng.integers(0, 3, n)
        s = rng.integers(0, int(rng.integers(2, 30)), n)
        e = s + rng.integers(0, int(rng.integers(1, 10)), n)
        lanes = lanes_of(prog, s, e)
        for p in np.unique(prog):
            m = prog == p
            for lane in np.unique(lanes[m]):
                k = m & (lanes == lane)
                assert not crossing(s[k], e[k])
            if not crossing(s[m], e[m]):
                n_laminar += 1
                assert (lanes[m] == 0).all()
    assert n_laminar > 100


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_chrome_json_reads_back(cap, tmp_path, suffix):
    out = write_chrome_json(cap, tmp_path / f"t{suffix}")
    d = _json(out)
    assert d["otherData"]["clock"]["method"] == "pingpong+drift" and d["otherData"]["partial"] is False
    names, procs = _slices_json(d)
    assert sorted(procs) == [1, 2, 3] and procs[1].startswith("rank 0 · CONSTRUCTED GPU")
    marks = [e for e in d["traceEvents"] if e.get("name") == "acquired"]
    ev = [e for e in d["traceEvents"] if e["ph"] != "M" and e.get("name") != "acquired"]
    n_events = sum(rc.launches[0].decode(r).events.size for r, rc in cap.ranks.items())
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    assert len(kernels) == 3 and all(names[(e["pid"], e["tid"])] == "kernels" for e in kernels)
    assert len(ev) - len(kernels) == n_events  # nothing dropped
    assert len(marks) == d["otherData"]["acquired_marks"]
    assert all(0 < e["pid"] < 2**31 and 0 < e.get("tid", 1) < 2**31 for e in ev)
    # timestamps are rebased µs that keep exact nanoseconds
    al = aligned_events(cap)
    base = d["otherData"]["base_ns"]
    assert base == int(al["start_ns"].min())
    got = sorted(round(e["ts"] * 1000) for e in ev if e.get("cat") != "kernel")
    assert got == sorted((al["start_ns"] - base).tolist())
    # spans: names and args; lanes: the crossing load/store spans sit on different tracks
    spans = [e for e in ev if e.get("cat") == "span"]
    assert {e["name"] for e in spans} == {"step", "compute", "load", "store"}
    assert all(set(e["args"]) == {"arg0", "arg1", "rank", "program", "launch", "sm"} for e in spans)
    assert all(e["args"]["rank"] == e["pid"] - 1 for e in ev if e.get("cat") != "kernel" and e["ph"] != "C")
    ls = {e["name"]: e for e in spans if e["name"] in ("load", "store") and e["pid"] == 1}
    assert names[(1, ls["load"]["tid"])] == "r0 p0" and names[(1, ls["store"]["tid"])] == "r0 p0 lane1"
    assert ls["store"]["tid"] > ls["load"]["tid"]  # (threads are listed by tid: the lane right after its program)
    # tids are unique in the trace (Perfetto keeps a thread per tid): each names one track
    assert len({tid for (_, tid) in names}) == len(names)
    # per track, X events nest or are disjoint
    by_track = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            by_track[(e["pid"], e["tid"])].append((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)))
    for iv in by_track.values():
        assert lanes_of(np.zeros(len(iv), int), np.array([a for a, _ in iv]), np.array([b for _, b in iv])).max() == 0
    # waits are distinct, with their arguments; every notify's flow ends at a wait on another rank
    waits = [e for e in ev if e.get("cat", "").startswith("wait")]
    notes = [e for e in ev if e.get("cat") == "notify"]
    assert waits and all(e["name"].startswith("waiting for rank ") and set(e["args"]) >= {"peer", "spins", "flag", "value", "expected"}
                         for e in waits)
    # (an arrow ends on a zero-length wait, or on the `acquired` mark at a longer wait's end)
    fo = {e["bind_id"]: e for e in notes if e.get("flow_out")}
    fi = {e["bind_id"]: e for e in waits + marks if e.get("flow_in")}
    assert len(fo) == d["otherData"]["flows"] == len(fi) == 3 * 3 * 2 and set(fo) == set(fi)
    ends = {(e["pid"], e["tid"], round((e["ts"] + e["dur"]) * 1000)): e for e in waits}
    for k, n in fo.items():
        w = fi[k]
        if w["name"] == "acquired":
            assert w["dur"] == 0 and w["args"]["shift_ns"] >= 0
            w = ends[(w["pid"], w["tid"], round(w["ts"] * 1000) - w["args"]["shift_ns"])]  # the wait it ends
        assert n["pid"] != w["pid"] and w["args"]["peer"] == n["pid"] - 1 and n["args"]["peer"] == w["pid"] - 1
        assert w["args"]["flag"] == n["args"]["flag"] and w["args"]["expected"] == n["args"]["value"]
        assert round(fi[k]["ts"] * 1000) >= round(n["ts"] * 1000)  # never backwards
    counters = [e for e in ev if e["ph"] == "C"]
    assert counters and all(e["name"].endswith(" progress") and "value" in e["args"] for e in counters)
    instants = [e for e in ev if e["ph"] == "i"]
    assert instants and all(e["s"] == "t" and e["name"] == "mark" for e in instants)


def _perfetto_model(path):
    t = Trace()
    t.ParseFromString(path.read_bytes())
    tracks, names, cats, ann = {}, {}, {}, {}
    events = []
    for i, p in enumerate(t.packet):
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            tracks[td.uuid] = td
        if p.HasField("interned_data"):
            for n in p.interned_data.event_names:
                names[n.iid] = n.name
            for c in p.interned_data.event_categories:
                cats[c.iid] = c.name
            for a in p.interned_data.debug_annotation_names:
                ann[a.iid] = a.name
        if p.HasField("track_event"):
            events.append((p.timestamp, i, p.track_event))
    return t, tracks, names, cats, ann, events


def test_perfetto_reads_back(cap, tmp_path):
    out = write_perfetto(cap, tmp_path / "t.pftrace")
    t, tracks, names, cats, ann, events = _perfetto_model(out)
    procs = {u: td for u, td in tracks.items() if td.HasField("process")}
    assert sorted(td.process.pid for td in procs.values()) == [1, 2, 3]
    for u, td in tracks.items():  # every track is a thread of its rank's process, or a counter under such a thread
        if td.HasField("thread"):
            assert td.thread.pid in {p.process.pid for p in procs.values()}
        elif not td.HasField("process"):
            assert td.HasField("counter") and tracks[td.parent_uuid].HasField("thread")
    # replay begin/end per track in (timestamp, file order): every end closes an open slice
    events.sort(key=lambda x: (x[0], x[1]))
    stacks = defaultdict(list)
    slices = []
    flows_out, flows_in = {}, {}
    n_begin = 0
    for ts, _, te in events:
        if te.type in (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_INSTANT):
            name = names.get(te.name_iid, te.name)
            args = {ann[a.name_iid]: a.int_value for a in te.debug_annotations}
            rec = {"name": name, "track": te.track_uuid, "ts": ts, "cats": [cats[c] for c in te.category_iids], "args": args}
            for f in te.flow_ids:
                flows_out[f] = rec
            for f in te.terminating_flow_ids:
                flows_in[f] = rec
            if te.type == TrackEvent.TYPE_SLICE_BEGIN:
                stacks[te.track_uuid].append(rec)
                n_begin += 1
            slices.append(rec)
        elif te.type == TrackEvent.TYPE_SLICE_END:
            assert stacks[te.track_uuid], "end without a begin"
            rec = stacks[te.track_uuid].pop()
            rec["dur"] = ts - rec["ts"]
    assert all(not s for s in stacks.values())
    n_events = sum(rc.launches[0].decode(r).events.size for r, rc in cap.ranks.items())
    counters = [te for _, _, te in events if te.type == TrackEvent.TYPE_COUNTER]
    kernels = [s for s in slices if "kernel" in s["cats"]]
    marks = [s for s in slices if s["name"] == "acquired"]
    slices = [s for s in slices if s["name"] != "acquired"]
    th = {u: td.thread for u, td in tracks.items() if td.HasField("thread")}
    assert len(kernels) == 3 and all(th[s["track"]].thread_name == "kernels" and th[s["track"]].tid == th[s["track"]].pid for s in kernels)
    assert len(slices) - len(kernels) + len(counters) == n_events
    # tracks: threads of the rank's process, programs in tid order, the crossing spans on a lane of their own
    load = next(s for s in slices if s["name"] == "load")
    store = next(s for s in slices if s["name"] == "store" and th[s["track"]].pid == th[load["track"]].pid)
    assert th[load["track"]].thread_name == "r0 p0" and th[store["track"]].thread_name == "r0 p0 lane1"
    assert th[store["track"]].tid > th[load["track"]].tid
    assert len({t.tid for t in th.values()}) == len(th)  # (a tid per thread in the whole trace)
    # waits distinct, args present, flows pair notify -> wait across ranks
    waits = [s for s in slices if "wait" in s["cats"]]
    assert waits and all(s["name"].startswith("waiting for rank ") and {"peer", "spins", "flag", "expected"} <= set(s["args"])
                         for s in waits)
    assert set(flows_out) == set(flows_in) and len(flows_out) == 18
    ends = {(s["track"], s["ts"] + s.get("dur", 0)): s for s in waits}
    for f, n in flows_out.items():
        w = flows_in[f]
        assert "notify" in n["cats"] and "wait" in w["cats"] and w["ts"] >= n["ts"]  # never backwards
        if w["name"] == "acquired":
            assert w in marks
            w = ends[(w["track"], w["ts"] - w["args"]["shift_ns"])]  # the wait it ends
        assert th[n["track"]].pid != th[w["track"]].pid
        assert w["args"]["flag"] == n["args"]["flag"] and w["args"]["expected"] == n["args"]["value"]
    assert all(tracks[te.track_uuid].HasField("counter") for te in counters)
    # times are the aligned ones, in ns since the capture's first event (as in Chrome JSON)
    al = aligned_events(cap)
    got = sorted(s["ts"] for s in slices if "kernel" not in s["cats"]) + [ts for ts, _, te in events if te.type == TrackEvent.TYPE_COUNTER]
    assert sorted(got) == sorted((al["start_ns"] - al["start_ns"].min()).tolist())


def test_timeouts_are_marked(tmp_path):
    c, _ = constructed_capture(world_size=2, programs=1, iters=1, seed=2)
    from ktrace.captures.synth import encode_buffer

    ln = c.ranks[1].launches[0]
    ev = ln.decode(1).events.copy()
    w = np.flatnonzero(ev["kind"] == EventKind.WAIT)[0]
    ev["flags"][w] |= EventFlag.TIMEOUT
    ln.raw = encode_buffer(ev, grid=ln.grid, capacity=ln.capacity)
    ln._decoded.clear()
    d = _json(write_chrome_json(c, tmp_path / "t.json"))
    to = [e for e in d["traceEvents"] if e.get("cat") == "wait,timeout"]
    assert len(to) == 1 and to[0]["name"].startswith("timed out waiting for rank ") and "bind_id" not in to[0]
    t, tracks, names, cats, ann, events = _perfetto_model(write_perfetto(c, tmp_path / "t.pftrace"))
    marked = [te for _, _, te in events if te.type == TrackEvent.TYPE_SLICE_BEGIN and "timeout" in [cats[x] for x in te.category_iids]]
    assert len(marked) == 1 and names[marked[0].name_iid].startswith("timed out waiting for rank ")


def test_partial_capture_is_marked(tmp_path, caplog):
    c, _ = constructed_capture(world_size=3, programs=1, iters=1, seed=4)
    del c.ranks[2]
    c.partial = True
    d = _json(write_chrome_json(c, tmp_path / "p.json"))
    assert d["otherData"]["partial"] is True and d["otherData"]["missing_ranks"] == [2]
    assert "PARTIAL" in caplog.text


def _chrome_canonical(path):
    d = _json(path)
    return d["otherData"], sorted(json.dumps(e, sort_keys=True) for e in d["traceEvents"])


def _perfetto_canonical(path):
    """Every track event resolved (track name and parent, interned names on its own sequence), sorted."""
    t = Trace()
    t.ParseFromString(path.read_bytes())
    tracks, names, cats, ann, out = {}, {}, {}, {}, []
    for p in t.packet:
        seq = p.trusted_packet_sequence_id
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if p.HasField("interned_data"):
            if p.sequence_flags & p.SEQ_INCREMENTAL_STATE_CLEARED:
                names[seq], cats[seq], ann[seq] = {}, {}, {}
            names.setdefault(seq, {}).update({n.iid: n.name for n in p.interned_data.event_names})
            cats.setdefault(seq, {}).update({c.iid: c.name for c in p.interned_data.event_categories})
            ann.setdefault(seq, {}).update({a.iid: a.name for a in p.interned_data.debug_annotation_names})
        if p.HasField("track_event"):
            te = p.track_event
            td = tracks[te.track_uuid]
            out.append((p.timestamp, te.type, td.name, tracks[td.parent_uuid].name if td.parent_uuid else "",
                        names[seq].get(te.name_iid, te.name) if te.type != TrackEvent.TYPE_SLICE_END else "",
                        tuple(cats[seq][c] for c in te.category_iids), tuple(sorted((ann[seq][a.name_iid], a.int_value) for a in te.debug_annotations)),
                        tuple(te.flow_ids), tuple(te.terminating_flow_ids), te.counter_value))
    return sorted(out), sorted(td.SerializeToString() for td in tracks.values())


@pytest.mark.parametrize("direct", ["0", "1"], ids=["page-cache", "direct-io"])
def test_workers_write_the_same_trace(cap, tmp_path, monkeypatch, direct):
    """Launches spread over worker processes: the same events, tracks and flows as written here;
    written through the page cache or with direct I/O (what large traces use)."""
    from ktrace.export import pool

    if pool.resolve_workers(2, 0) < 2:
        pytest.skip("no fork on this platform: the writers run in one process")
    monkeypatch.setenv("KTRACE_DIRECT_IO", direct)
    for suffix, canon, write in ((".json", _chrome_canonical, write_chrome_json), (".json.gz", _chrome_canonical, write_chrome_json),
                                 (".pftrace", _perfetto_canonical, write_perfetto)):
        one = canon(write(cap, tmp_path / f"one{suffix}", workers=1))
        two = canon(write(cap, tmp_path / f"two{suffix}", workers=2))
        assert one == two and len(one[1]) > 10
    # each worker's events are on a sequence of its own, which starts by clearing its state
    t = Trace()
    t.ParseFromString((tmp_path / "two.pftrace").read_bytes())
    seqs = {p.trusted_packet_sequence_id for p in t.packet if p.HasField("track_event")}
    # the kernels' sequence (2) and one per worker that got a batch (3, 4: which worker takes
    # which batch is up to the pool)
    assert 2 in seqs and len(seqs) >= 2 and seqs <= {2, 3, 4}
    first = {}
    for p in t.packet:
        first.setdefault(p.trusted_packet_sequence_id, p)
    assert all(first[s].sequence_flags & first[s].SEQ_INCREMENTAL_STATE_CLEARED for s in seqs)


def test_ties_keep_their_order(tmp_path):
    """Packets on one track at one timestamp come out in the order a timeline needs."""
    from ktrace.export.perfetto import _rounds

    t = np.array([5, 5, 5, 9, 5])
    u = np.array([1, 1, 1, 1, 2])
    typ = np.array([2, 0, 2, 0, 2])  # begin, end, begin (inner), end, begin on another track
    k1 = np.array([-20, 0, -10, 0, 0])
    k2 = np.zeros(5, np.int64)
    # on track 1 at t=5: the end first, then the outer begin (ends later), then the inner
    assert _rounds(t, u, typ, k1, k2).tolist() == [1, 0, 2, 0, 0]


def _output_task(state, k):
    rng = np.random.default_rng(k)
    body = rng.integers(0, 256, int(rng.integers(0, 3 << 20)), dtype=np.uint8)  # pieces of any size, some over a MiB
    head = f"<piece {k} {body.size}>".encode()
    out = state["out"]
    n = out.append_async([f"<tiny {k}>".encode()])  # (smaller than a block: held until more comes)
    n += out.append_async([head, body, b"</piece>"])
    out.flush()
    return n


@pytest.mark.parametrize("direct", [False, True], ids=["page-cache", "direct-io"])
def test_output_keeps_every_piece_whole(tmp_path, direct, monkeypatch):
    """Pieces appended by several processes at once land whole, each once; with direct I/O the
    unaligned tails are carried between appends; where direct I/O is refused, ordinary writes
    take over at the same place."""
    import os
    import re

    from ktrace.export import pool

    workers = 2 if pool.resolve_workers(2, 0) >= 2 else 1
    refuse = {"on": False}
    real_open = os.open

    def open_(path, flags, *a):
        if refuse["on"] and flags & getattr(os, "O_DIRECT", 0):
            raise OSError(22, "Invalid argument")
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", open_)
    for refused in ([False, True] if direct else [False]):
        refuse["on"] = refused
        path = tmp_path / f"out-{direct}-{refused}.bin"
        out = pool.Output(path, direct=direct)
        out.append([b"HEAD"])
        sizes = list(pool.imap(_output_task, range(12), workers, {"out": out}))
        out.close()
        data = path.read_bytes()
        assert data.startswith(b"HEAD") and len(data) == 4 + sum(sizes) == out.size
        assert sorted(int(m.group(1)) for m in re.finditer(rb"<tiny (\d+)>", data)) == list(range(12))
        found = [(int(m.group(1)), int(m.group(2)), m.start()) for m in re.finditer(rb"<piece (\d+) (\d+)>", data)]
        assert sorted(k for k, _, _ in found) == list(range(12))
        for k, n, at in found:
            rng = np.random.default_rng(k)
            body = rng.integers(0, 256, int(rng.integers(0, 3 << 20)), dtype=np.uint8)
            start = at + len(f"<piece {k} {n}>")
            assert n == body.size and data[start : start + n] == body.tobytes() and data[start + n : start + n + 8] == b"</piece>"
        assert bool(out._head[2]) == (direct and refused)  # (refusal seen and shared)


def test_writers_leave_no_descriptors_open(cap, tmp_path):
    """Writing again and again (here and in workers, through the page cache and with direct
    I/O) opens no descriptor that stays open."""
    import os

    fd_dir = "/proc/self/fd"
    if not os.path.isdir(fd_dir):
        pytest.skip("no /proc/self/fd here")
    for w in (1, 2, 1):
        write_chrome_json(cap, tmp_path / "warm.json", workers=w)  # (first use of a pool sets up its semaphores)
    before = len(os.listdir(fd_dir))
    for direct in ("0", "1"):
        os.environ["KTRACE_DIRECT_IO"] = direct
        try:
            for w in (1, 2):
                for _ in range(2):
                    write_chrome_json(cap, tmp_path / "t.json", workers=w)
                    write_perfetto(cap, tmp_path / "t.pftrace", workers=w)
        finally:
            del os.environ["KTRACE_DIRECT_IO"]
    assert len(os.listdir(fd_dir)) == before


def _every_arg_capture():
    """One launch on one rank: a span, a mark, a counter, a notify and a wait of every comparison
    code (and one with no code), each argument a distinct value (CONSTRUCTED)."""
    from ktrace.captures import Capture, Launch, RankCapture
    from ktrace.captures.synth import encode_buffer, event_table
    from ktrace.schema import Cmp, region_id

    rows = [(EventKind.SPAN, "work", (11, 12, 0, 0, 0, 0)), (EventKind.INSTANT, "mark", (21, 22, 0, 0, 0, 0)),
            (EventKind.COUNTER, "depth", (1 << 40, 0, 0, 0, 0, 0)), (EventKind.NOTIFY, "signal", (1, 7, 4096, 3, 0, 0))]
    rows += [(EventKind.WAIT, "wait", (1, 30 + c, 64 * c, 5 + c, 6 + c, c)) for c in [0] + [int(x) for x in Cmp]]
    ev = event_table(len(rows))
    for i, (kind, name, args) in enumerate(rows):
        ev[i]["program"], ev[i]["kind"], ev[i]["region"], ev[i]["hw"] = i, kind, region_id(name), 100 + i
        ev[i]["start"], ev[i]["end"] = 1000 + 100 * i, 1000 + 100 * i + (50 if kind in (EventKind.SPAN, EventKind.WAIT) else 0)
        for k, a in enumerate(args):
            ev[i][f"arg{k}"] = a
    raw = encode_buffer(ev, grid=(len(rows), 1, 1), capacity=4)
    cap = Capture(world_size=1, ranks={0: RankCapture(rank=0, launches=[Launch(0, "k", (len(rows), 1, 1), 4, raw)])},
                  regions={region_id(n): n for _, n, _ in rows})
    return cap, rows


@pytest.mark.parametrize("fmt", ["chrome", "perfetto"])
def test_every_argument_is_written_by_its_schema_name(tmp_path, fmt):
    """Waits of every comparison code, a notify, a span, a mark and a counter written to each
    format and read back by argument name: the names and values ``ktrace.schema`` gives (``cmp``
    by its name: ``ge`` for a >= wait; a code without a name as its number)."""
    from ktrace import schema

    cap, rows = _every_arg_capture()
    if fmt == "chrome":
        doc = json.loads(write_chrome_json(cap, tmp_path / "t.json").read_text())
        got = {e["args"].get("sm"): e for e in doc["traceEvents"] if e.get("ph") in ("X", "i")}
        counters = [e["args"] for e in doc["traceEvents"] if e.get("ph") == "C"]
    else:
        t = Trace()
        t.ParseFromString(write_perfetto(cap, tmp_path / "t.pftrace").read_bytes())
        ann = {}
        got, counters = {}, []
        for p in t.packet:
            for a in p.interned_data.debug_annotation_names:
                ann[a.iid] = a.name
            te = p.track_event
            if te.type == TrackEvent.TYPE_COUNTER:
                counters.append({"value": te.counter_value})
            elif te.type in (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_INSTANT) and te.debug_annotations:
                args = {ann[a.name_iid]: (a.string_value if a.HasField("string_value") else a.int_value) for a in te.debug_annotations}
                if "sm" in args:
                    got[args["sm"]] = {"args": args}
    assert counters == [{"value": 1 << 40}]
    for i, (kind, _, values) in enumerate(rows):
        if kind == EventKind.COUNTER:
            continue
        want = {name: values[k] for k, name in enumerate(schema.ARG_NAMES[kind]) if name is not None}
        if kind == EventKind.WAIT:
            want["cmp"] = schema.cmp_name(values[5])
        want.update(sm=100 + i, rank=0, program=i, launch=0)
        assert got[100 + i]["args"] == want, (kind, got[100 + i]["args"])
    cmps = sorted(got[100 + i]["args"]["cmp"] for i, (k, _, _) in enumerate(rows) if k == EventKind.WAIT)
    assert cmps == sorted(["0", "eq", "ne", "ge", "gt", "le", "lt"])
