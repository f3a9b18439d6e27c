"""The trace layout both writers share: tracks, lanes, names, flows. Computed once, vectorised.

Layout: one process per rank; under it a ``kernels`` track (one slice per launch) and one
track per workgroup (program), in program order. Spans of one program that overlap without
nesting cannot share a track (a timeline draws nested slices only), so they go to extra lanes
``p<program> lane<k>`` right below it; nothing is dropped. Launches of one rank that overlap in
time (several streams) get separate groups of program tracks. Counters are counter tracks per
(program, counter name). Each notify gets a flow arrow to the wait it released
(``ktrace.clock.pair_notify_wait``).

:func:`plan_trace` makes one streaming pass over the capture (one launch decoded at a time) and
keeps only small per-launch arrays (lanes as uint8, flow ids of notifies and waits).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..clock.causality import pair_notify_wait
from ..clock.model import ClockModel, clock_model_of
from ..schema import EventFlag, EventKind

log = logging.getLogger("ktrace")

#: Event classes the writers emit (each with its own name, category and arguments).
SPAN, WAIT, NOTIFY, INSTANT, COUNTER = "span", "wait", "notify", "instant", "counter"


def lanes_of(program: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Assign each interval a lane so that, per program and lane, intervals nest or are disjoint.

    Fast path (vectorised): per program, check that the intervals form a laminar family
    (every pair is nested or disjoint; touching ends count as disjoint); such programs need
    only lane 0. Programs that fail go through a greedy pass in Python (first lane where the
    interval nests), costing per event only where spans really overlap without nesting.

    Args:
        program: track key per interval (int).
        start, end: interval bounds (int64, ``end >= start``).

    Returns:
        uint8 lane per interval (0 for most).
    """
    n = program.size
    lanes = np.zeros(n, np.uint8)
    if n < 2:
        return lanes
    if (end <= start).any():  # zero-length intervals nest anywhere: lane 0, left out of the check
        pos = np.flatnonzero(end > start)
        lanes[pos] = lanes_of(program[pos], start[pos], end[pos])
        return lanes
    prog = program.astype(np.int64)
    t0 = int(start.min())
    span_t = int(end.max()) - t0 + 1
    pbits = max(1, int(prog.max()).bit_length())
    tbits = span_t.bit_length()
    idx = np.arange(n, dtype=np.int64)
    # boundaries: opens at start, closes at end; at equal times closes first (touching is
    # disjoint), wider opens first (outer), later-started closes first (inner); identical
    # intervals open in index order and close in reverse
    b_type = np.r_[np.ones(n, np.int64), np.zeros(n, np.int64)]
    b_id = np.r_[idx, idx]
    b_time = np.r_[start, end] - t0
    tie = np.r_[-(end - t0), -(start - t0)]
    tie2 = np.r_[idx, -idx]
    if pbits + tbits + 1 <= 62:
        primary = (np.r_[prog, prog] << (tbits + 1)) | (b_time << 1) | b_type
        bo = np.argsort(primary, kind="stable")  # one key: the tie-breaks matter only where it repeats
        ps = primary[bo]
        if (ps[1:] == ps[:-1]).any():
            bo = np.lexsort((tie2, tie, primary))
    else:
        bo = np.lexsort((tie2, tie, b_type, b_time, np.r_[prog, prog]))
    b_type, b_id = b_type[bo], b_id[bo]
    b_prog = np.r_[prog, prog][bo]
    depth_after = np.cumsum(2 * b_type - 1)
    level = depth_after + (1 - b_type)  # an open's level is the depth after it, a close's before it
    lo = np.argsort((b_prog << 32) | level, kind="stable") if pbits <= 30 else np.lexsort((level, b_prog))
    t2, id2, p2 = b_type[lo], b_id[lo], b_prog[lo]
    # in a laminar family each open is immediately followed, at its level, by its own close
    is_open = t2 == 1
    nxt_id = np.r_[id2[1:], -1]
    nxt_type = np.r_[t2[1:], 1]
    bad_open = is_open & ((nxt_type != 0) | (nxt_id != id2))
    if not bad_open.any():
        return lanes
    bad_programs = np.unique(p2[bad_open])
    sel = np.flatnonzero(np.isin(program, bad_programs))
    sel = sel[np.lexsort((-end[sel], start[sel], program[sel]))]
    cur_prog = None
    stacks: list[list[int]] = []
    for i, p, s, e in zip(sel.tolist(), program[sel].tolist(), start[sel].tolist(), end[sel].tolist()):
        if p != cur_prog:
            cur_prog, stacks = p, []
        for k, st in enumerate(stacks):
            while st and st[-1] <= s:
                st.pop()
            if not st or st[-1] >= e:
                st.append(e)
                lanes[i] = k
                break
        else:
            if len(stacks) >= 255:
                raise ValueError(f"program {p}: more than 255 spans overlap at once; cannot lay them out")
            stacks.append([e])
            lanes[i] = len(stacks) - 1
    return lanes


def event_class(kind: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> dict[str, np.ndarray]:
    """Row indices of each class: spans, waits, notifies, instants (incl. zero-length), counters."""
    return {
        SPAN: np.flatnonzero(kind == EventKind.SPAN),
        WAIT: np.flatnonzero(kind == EventKind.WAIT),
        NOTIFY: np.flatnonzero(kind == EventKind.NOTIFY),
        INSTANT: np.flatnonzero(kind == EventKind.INSTANT),
        COUNTER: np.flatnonzero(kind == EventKind.COUNTER),
    }


@dataclass
class LaunchPlan:
    """What the first pass learns about one launch."""

    rank: int
    index: int
    kernel: str
    grid: tuple
    n_programs: int
    group: int
    n_events: int
    dropped: int
    start_ns: int
    end_ns: int
    #: lane of every event (uint8; 0 for most)
    lanes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    #: one entry per notify -> wait pair: the notify's row and the pair's id (a notify that
    #: released k waits appears k times)
    flow_out_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    flow_out_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: one entry per released wait: its row, its pair's id, and its notify's id (the smallest
    #: pair id of that notify; what Chrome JSON binds with, since a v2 flow may end many times)
    flow_in_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    flow_in_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    flow_in_notify_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def flows(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Per event row, by notify: the notify's id on notifies that released a wait, and the
        releasing notify's id on waits; 0 for none (Chrome JSON's one-id-per-slice view)."""
        out = np.zeros(n, np.int64)
        if self.flow_out_rows.size:
            o = np.lexsort((self.flow_out_ids, self.flow_out_rows))
            r = self.flow_out_rows[o]
            first = np.r_[True, r[1:] != r[:-1]]
            out[r[first]] = self.flow_out_ids[o][first]
        inn = np.zeros(n, np.int64)
        inn[self.flow_in_rows] = self.flow_in_notify_ids
        return out, inn

    def pair_flows(self, n: int) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        """Per pair (Perfetto's view): ``((notify_rows, pair_ids), wait_pair_id_per_row)``,
        the first sorted by row then id; the second 0 where a row ends no flow."""
        o = np.lexsort((self.flow_out_ids, self.flow_out_rows))
        inn = np.zeros(n, np.int64)
        inn[self.flow_in_rows] = self.flow_in_ids
        return (self.flow_out_rows[o], self.flow_out_ids[o]), inn


@dataclass
class RankPlan:
    rank: int
    name: str
    #: programs per launch group, the radix of track ids
    max_programs: int = 1
    #: every track the rank's events use: tid -> (group, program, lane), in first-use order
    tracks: dict = field(default_factory=dict)
    #: every counter track: (group, program, region) -> index, in first-use order
    counters: dict = field(default_factory=dict)

    def tids(self, group: int, program: np.ndarray, lanes: np.ndarray) -> np.ndarray:
        """Track id of each (program, lane): ordered by group, program, lane; 1 is ``kernels``.

        Ids stay below 2**31 (Chrome JSON tids are read as uint32; Perfetto uuids use them).
        """
        base = (group * self.max_programs) << 8
        if base + (self.max_programs << 8) + 2 >= 2**31:
            raise ValueError(f"rank {self.rank}: too many programs ({self.max_programs}) x launch groups to number tracks")
        return (base + 2) + ((program.astype(np.int64) << 8) | lanes)

    def note_tracks(self, group: int, tids: np.ndarray) -> None:
        """Record tracks a launch uses."""
        for t in np.unique(tids).tolist():
            if t not in self.tracks:
                rel = t - 2 - ((group * self.max_programs) << 8)
                self.tracks[t] = (group, rel >> 8, rel & 0xFF)

    def note_counters(self, group: int, codes: np.ndarray) -> None:
        """Record counter tracks a launch uses (codes: ``program << 24 | region``, unique)."""
        for c in codes.tolist():
            self.counters.setdefault((group, c >> 24, c & 0xFFFFFF), len(self.counters))

    def counter_index(self, group: int, program: np.ndarray, region: np.ndarray) -> np.ndarray:
        """Index of each counter event's track (all noted by the plan)."""
        code = (program.astype(np.int64) << 24) | region.astype(np.int64)
        uk, inv = np.unique(code, return_inverse=True)
        idx = np.array([self.counters[(group, c >> 24, c & 0xFFFFFF)] for c in uk.tolist()], np.int64)
        return idx[inv.reshape(-1)]


def track_name(group: int, program: int, lane: int) -> str:
    return f"p{program}" + (f" lane{lane}" if lane else "") + (f" [stream group {group}]" if group else "")


@dataclass
class TracePlan:
    """The first pass's result: launches, groups, lanes, tracks, flows, time base."""

    model: ClockModel
    launches: list[LaunchPlan]
    ranks: dict[int, RankPlan]
    base_ns: int
    n_events: int
    n_flows: int
    partial: bool
    missing_ranks: list[int]
    regions: dict[int, str]
    #: worker processes the writers use (1: all in this process)
    workers: int = 1

    def region_name(self, rid: int) -> str:
        return self.regions.get(int(rid), f"region#{int(rid):06x}")


def rank_title(rank: int, device: dict) -> str:
    dev = device.get("name") or "unknown GPU"
    where = f" (gpu {device['index']})" if "index" in device else ""
    return f"rank {rank} · {dev}{where}"


#: The columns of waits and notifies that pairing reads (``ktrace.clock.pair_notify_wait``),
#: plus where each row came from (launch, row).
_WN_COLS = (("rank", "<i4"), ("kind", "u1"), ("flags", "u1"), ("arg0", "<i8"), ("arg1", "<i8"), ("arg2", "<i8"), ("arg4", "<i8"),
            ("launch", "<i4"), ("program", "<i4"), ("slot", "<i4"),
            ("start_ns", "<i8"), ("li", "<i4"), ("row", "<i4"))
#: Columns the first pass sends back per wait/notify row (the rest are the same for a whole
#: launch: rank, launch and li are filled in at pairing time).
_WN_ROW_COLS = ("kind", "flags", "arg0", "arg1", "arg2", "arg4", "program", "slot")


def _launch_refs(capture) -> list:
    return [(r, ln) for r, rc in sorted(capture.ranks.items()) for ln in rc.launches]


def decode_launch(li: int, capture=None, model: ClockModel | None = None):
    """Launch ``li`` (in plan order) decoded: ``(events, start_ns, end_ns, header, dropped)``.

    Without ``capture`` (in a worker task) the capture and model are the run's shared state.
    """
    from . import _parallel

    if capture is None:
        capture, model, refs = _parallel.STATE["capture"], _parallel.STATE["model"], _parallel.STATE["refs"]
    else:
        refs = _launch_refs(capture)
    r, ln = refs[li]
    d = ln.decode(r, cache=False)
    ev = d.events
    clk = model.rank(r)
    hz = d.header.tick_hz
    return ev, clk.to_common(ev["start"], hz), clk.to_common(ev["end"], hz), d.header, d.dropped


def _scan(li: int) -> tuple:
    """First-pass task: one launch's summary, lanes, tracks, counters, waits and notifies."""
    ev, s, e, header, dropped = decode_launch(li)
    kind = ev["kind"]
    lanes = launch_lanes(ev, s, e)
    is_counter = kind == EventKind.COUNTER
    prog = ev["program"].astype(np.int64)
    track_codes = np.unique((prog[~is_counter] << 8) | lanes[~is_counter])
    counter_codes = (prog[is_counter] << 24) | ev["region"][is_counter].astype(np.int64)
    if counter_codes.size:  # unique, in order of first use
        _, first = np.unique(counter_codes, return_index=True)
        counter_codes = counter_codes[np.sort(first)]
    wn = np.flatnonzero((kind == EventKind.WAIT) | (kind == EventKind.NOTIFY))
    cols = {}
    if wn.size:
        dts = dict(_WN_COLS)
        for c in _WN_ROW_COLS:
            cols[c] = ev[c][wn].astype(dts[c], copy=False)
        cols["start_ns"] = s[wn]
        cols["row"] = wn.astype(np.int32)
    span = (int(s.min()), int(e.max())) if ev.size else (0, 0)
    return header.n_programs, int(ev.size), dropped, span, lanes, track_codes, counter_codes, cols


def plan_trace(capture, model: ClockModel | None = None, *, workers: int | None = None) -> TracePlan:
    """First pass over a capture (one launch decoded at a time): time base, launch groups, lanes,
    tracks, flows.

    Args:
        capture: a ``ktrace.io.Capture``.
        model: the clock model (default: stored in the capture, else fitted from its samples).
        workers: processes to spread launches over (default: one per core for large captures;
            1 runs everything here). The plan is the same for any number.
    """
    from . import _parallel

    model = model or clock_model_of(capture)
    refs = _launch_refs(capture)
    raw_events = sum(ln.nbytes for _, ln in refs) // 32  # an upper bound: records are 32 bytes
    workers = _parallel.resolve_workers(workers, raw_events)
    launches: list[LaunchPlan] = []
    wn_parts: list[dict] = []
    track_codes, counter_codes = [], []
    base = None
    n_events = 0
    state = {"capture": capture, "model": model, "refs": refs}
    for li, res in enumerate(_parallel.imap(_scan, range(len(refs)), min(workers, max(1, len(refs))), state)):
        n_programs, n, dropped, (t0, t1), lanes, tcodes, ccodes, cols = res
        r, ln = refs[li]
        n_events += n
        lp = LaunchPlan(rank=r, index=ln.index, kernel=ln.kernel, grid=tuple(ln.grid), n_programs=n_programs, group=0,
                        n_events=n, dropped=dropped, start_ns=t0, end_ns=t1, lanes=lanes)
        if n:
            base = t0 if base is None else min(base, t0)
        launches.append(lp)
        track_codes.append(tcodes)
        counter_codes.append(ccodes)
        wn_parts.append(cols)
    # launch groups: launches of one rank that overlap in time get separate track groups
    for r in capture.ranks:
        mine = sorted((lp for lp in launches if lp.rank == r and lp.n_events), key=lambda lp: lp.start_ns)
        group_end: list[int] = []
        for lp in mine:
            for g, ge in enumerate(group_end):
                if ge <= lp.start_ns:
                    lp.group, group_end[g] = g, lp.end_ns
                    break
            else:
                lp.group = len(group_end)
                group_end.append(lp.end_ns)
    ranks = {r: RankPlan(rank=r, name=rank_title(r, rc.device),
                         max_programs=max([lp.n_programs for lp in launches if lp.rank == r], default=1))
             for r, rc in sorted(capture.ranks.items())}
    for lp, tcodes, ccodes in zip(launches, track_codes, counter_codes):
        rp = ranks[lp.rank]
        rp.note_tracks(lp.group, rp.tids(lp.group, tcodes >> 8, (tcodes & 0xFF).astype(np.uint8)))
        rp.note_counters(lp.group, ccodes)
    n_flows = _plan_flows(launches, wn_parts, refs, workers, sorted(capture.ranks))
    return TracePlan(
        model=model, launches=launches, ranks=ranks, base_ns=base or 0, n_events=n_events, n_flows=n_flows,
        partial=bool(capture.partial or capture.missing_ranks), missing_ranks=list(capture.missing_ranks),
        regions=dict(capture.regions), workers=workers,
    )


def _pair_rank(dst: int) -> tuple:
    """Pairing task: the notify -> wait pairs whose wait is on rank ``dst``.

    A wait on rank B can only be released by a notify addressed to B (``pair_notify_wait``
    groups by source rank, destination rank, flag and value), so the ranks pair independently
    and in parallel. Reads the first pass's wait/notify columns from :data:`_parallel.STATE`.

    Returns:
        ``(notify_li, notify_row, wait_li, wait_row)`` per pair (int64), ordered by wait.
    """
    from . import _parallel

    parts, refs = _parallel.STATE["wn_parts"], _parallel.STATE["refs"]
    picks = []
    for cols, (rank, ln) in zip(parts, refs):  # this rank's waits and the notifies addressed to it, in launch order
        if not cols:
            picks.append(None)
            continue
        dst_of = np.where(cols["kind"] == EventKind.NOTIFY, cols["arg0"], rank)
        picks.append(np.flatnonzero(dst_of == dst))
    sizes = [0 if p is None else p.size for p in picks]
    total = sum(sizes)
    empty = np.zeros(0, np.int64)
    if not total:
        return empty, empty, empty, empty
    wn = np.empty(total, np.dtype(list(_WN_COLS)))
    for c in _WN_ROW_COLS + ("start_ns", "row"):
        wn[c] = np.concatenate([cols[c][p] for cols, p in zip(parts, picks) if p is not None])
    for c, per_launch in (("rank", [r for r, _ in refs]), ("launch", [ln.index for _, ln in refs]), ("li", range(len(refs)))):
        wn[c] = np.repeat(np.asarray(per_launch, np.int64), sizes)
    nrows, wrows, _, _ = pair_notify_wait(wn)
    li, row = wn["li"].astype(np.int64), wn["row"].astype(np.int64)
    return li[nrows], row[nrows], li[wrows], row[wrows]


def _plan_flows(launches: list[LaunchPlan], wn_parts: list[dict], refs: list, workers: int, ranks: list[int]) -> int:
    """Pair notifies with waits (all launches at once; ranks in parallel) and hand each launch
    its flow ids. ``wn_parts``: per launch, the first pass's wait/notify columns (or {})."""
    from . import _parallel

    if not any(wn_parts):
        return 0
    state = {"wn_parts": wn_parts, "refs": refs}
    res = list(_parallel.imap(_pair_rank, ranks, min(workers, len(ranks)), state))
    n_li, n_row, w_li, w_row = (np.concatenate([r[k] for r in res]) for k in range(4))
    # pairs in the order a single pairing over every rank gives: by wait (launch, row)
    o = np.lexsort((w_row, w_li))
    n_li, n_row, w_li, w_row = n_li[o], n_row[o], w_li[o], w_row[o]
    n_flows = int(n_li.size)
    if not n_flows:
        return 0
    ids = np.arange(1, n_flows + 1, dtype=np.int64)
    # each notify's id: the smallest id of its pairs
    nkey = (n_li << 32) | n_row
    u, first = np.unique(nkey, return_index=True)
    notify_id = ids[first][np.searchsorted(u, nkey)]
    for side, li, rows, extra in (("out", n_li, n_row, None), ("in", w_li, w_row, notify_id)):
        o = np.argsort(li, kind="stable")
        li_s, rows_s, ids_s = li[o], rows[o], ids[o]
        extra_s = extra[o] if extra is not None else None
        bounds = np.searchsorted(li_s, np.arange(len(launches) + 1))
        for k, lp in enumerate(launches):
            a, b = bounds[k], bounds[k + 1]
            if b > a:
                setattr(lp, f"flow_{side}_rows", rows_s[a:b])
                setattr(lp, f"flow_{side}_ids", ids_s[a:b])
                if extra_s is not None:
                    lp.flow_in_notify_ids = extra_s[a:b]
    return n_flows


def launch_lanes(ev: np.ndarray, s_ns: np.ndarray, e_ns: np.ndarray) -> np.ndarray:
    """Lane of every event of one launch (spans, waits, notifies of non-zero length; 0 for others)."""
    kind = ev["kind"]
    span_like = np.flatnonzero(((kind == EventKind.SPAN) | (kind == EventKind.WAIT) | (kind == EventKind.NOTIFY)) & (e_ns > s_ns))
    lanes = np.zeros(ev.size, np.uint8)
    if span_like.size > 1:
        lanes[span_like] = lanes_of(ev["program"][span_like], s_ns[span_like], e_ns[span_like])
    return lanes


def iter_launches(capture, plan: TracePlan):
    """Second pass, in this process: per launch, ``(launch_plan, events, start_ns, end_ns, lanes)``."""
    for lp, (r, ln) in zip(plan.launches, _launch_refs(capture)):
        d = ln.decode(r, cache=False)
        ev = d.events
        clk = plan.model.rank(r)
        yield lp, ev, clk.to_common(ev["start"], d.header.tick_hz), clk.to_common(ev["end"], d.header.tick_hz), lp.lanes


def timeout_mask(flags: np.ndarray) -> np.ndarray:
    return (flags & EventFlag.TIMEOUT) != 0
