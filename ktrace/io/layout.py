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
    # rank intervals by (program, start asc, end desc): a parent comes before its children
    order = np.lexsort((-end, start, program))
    prog_o, s_o, e_o = program[order], start[order], end[order]
    r = np.arange(n, dtype=np.int64)
    # boundaries: opens at start, closes at end; at equal times closes first (touching is
    # disjoint); opens in rank order, closes in reverse rank order (inner closes first)
    b_prog = np.concatenate([prog_o, prog_o])
    b_time = np.concatenate([s_o, e_o])
    b_type = np.concatenate([np.ones(n, np.int8), np.zeros(n, np.int8)])
    b_tie = np.concatenate([r, -r])
    b_id = np.concatenate([r, r])
    bo = np.lexsort((b_tie, b_type, b_time, b_prog))
    b_type, b_id, b_prog = b_type[bo], b_id[bo], b_prog[bo]
    step = np.where(b_type == 1, 1, -1).astype(np.int64)
    depth_after = np.cumsum(step)
    level = np.where(b_type == 1, depth_after, depth_after + 1)
    lo = np.lexsort((level, b_prog))  # stable: time order kept within (program, level)
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
    rank: int
    index: int
    kernel: str
    grid: tuple
    group: int
    n_events: int
    dropped: int
    start_ns: int
    end_ns: int
    lanes: np.ndarray  # uint8 per event
    track_codes: np.ndarray  # unique (program << 8 | lane) used
    counter_codes: np.ndarray  # unique (program << 24 | region) of counters
    flow_out_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    flow_out_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    flow_in_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    flow_in_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass
class RankPlan:
    rank: int
    name: str
    #: (group, program, lane) -> track index (0-based, in display order)
    tracks: dict = field(default_factory=dict)
    #: (group, program, region) of counters -> counter index
    counters: dict = field(default_factory=dict)


@dataclass
class TracePlan:
    model: ClockModel
    launches: list[LaunchPlan]
    ranks: dict[int, RankPlan]
    base_ns: int
    n_events: int
    n_flows: int
    partial: bool
    missing_ranks: list[int]
    regions: dict[int, str]

    def track_index(self, rank: int, group: int, program: np.ndarray, lane: np.ndarray) -> np.ndarray:
        """Track index (display order) of each (program, lane) of one launch group."""
        rp = self.ranks[rank]
        keys = [k for k in rp.tracks if k[0] == group]
        if not keys:
            return np.zeros(program.size, np.int64)
        arr = np.array([(k[1] << 8) | k[2] for k in keys], np.int64)
        idx = np.array([rp.tracks[k] for k in keys], np.int64)
        o = np.argsort(arr)
        arr, idx = arr[o], idx[o]
        code = (program.astype(np.int64) << 8) | lane.astype(np.int64)
        return idx[np.searchsorted(arr, code)]


def rank_title(rank: int, device: dict) -> str:
    dev = device.get("name") or "unknown GPU"
    where = f" (gpu {device['index']})" if "index" in device else ""
    return f"rank {rank} · {dev}{where}"


def plan_trace(capture, model: ClockModel | None = None) -> TracePlan:
    """One streaming pass over a capture: the layout and flows both writers need."""
    model = model or clock_model_of(capture)
    launches: list[LaunchPlan] = []
    waits_notifies = []
    base = None
    n_events = 0
    for r, rc in sorted(capture.ranks.items()):
        clk = model.rank(r)
        for ln in rc.launches:
            d = ln.decode(r, cache=False)
            ev = d.events
            hz = d.header.tick_hz
            s, e = clk.to_common(ev["start"], hz), clk.to_common(ev["end"], hz)
            n_events += ev.size
            kind = ev["kind"]
            span_like = np.flatnonzero(((kind == EventKind.SPAN) | (kind == EventKind.WAIT) | (kind == EventKind.NOTIFY)) & (e > s))
            lanes = np.zeros(ev.size, np.uint8)
            lanes[span_like] = lanes_of(ev["program"][span_like], s[span_like], e[span_like])
            lp = LaunchPlan(
                rank=r, index=ln.index, kernel=ln.kernel, grid=tuple(ln.grid), group=0, n_events=int(ev.size),
                dropped=d.dropped, start_ns=int(s.min()) if ev.size else 0, end_ns=int(e.max()) if ev.size else 0, lanes=lanes,
                track_codes=np.unique((ev["program"].astype(np.int64) << 8) | lanes),
                counter_codes=np.unique((ev["program"][kind == EventKind.COUNTER].astype(np.int64) << 24) | ev["region"][kind == EventKind.COUNTER]),
            )
            launches.append(lp)
            if ev.size:
                base = int(s.min()) if base is None else min(base, int(s.min()))
            wn = np.flatnonzero((kind == EventKind.WAIT) | (kind == EventKind.NOTIFY))
            if wn.size:
                sub = np.zeros(wn.size, [("rank", "<i4"), ("kind", "u1"), ("flags", "u1"), ("arg0", "<i8"), ("arg1", "<i8"),
                                         ("arg2", "<i8"), ("arg3", "<i8"), ("arg4", "<i8"), ("start_ns", "<i8"), ("end_ns", "<i8"),
                                         ("li", "<i8"), ("row", "<i8")])
                for c in ("rank", "kind", "flags", "arg0", "arg1", "arg2", "arg3", "arg4"):
                    sub[c] = ev[c][wn]
                sub["start_ns"], sub["end_ns"] = s[wn], e[wn]
                sub["li"] = len(launches) - 1
                sub["row"] = wn
                waits_notifies.append(sub)
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
    # flows
    n_flows = 0
    if waits_notifies:
        wn_all = np.concatenate(waits_notifies)
        nrows, wrows, _, _ = pair_notify_wait(wn_all)
        n_flows = int(nrows.size)
        ids = np.arange(1, n_flows + 1, dtype=np.int64)
        for side, rows in (("out", nrows), ("in", wrows)):
            li = wn_all["li"][rows]
            o = np.argsort(li, kind="stable")
            li_s, rows_s, ids_s = li[o], wn_all["row"][rows][o], ids[o]
            bounds = np.searchsorted(li_s, np.arange(len(launches) + 1))
            for k, lp in enumerate(launches):
                a, b = bounds[k], bounds[k + 1]
                if b > a:
                    setattr(lp, f"flow_{side}_rows", rows_s[a:b])
                    setattr(lp, f"flow_{side}_ids", ids_s[a:b])
    # tracks per rank: (group, program, lane) in order
    ranks: dict[int, RankPlan] = {}
    for r, rc in sorted(capture.ranks.items()):
        ranks[r] = RankPlan(rank=r, name=rank_title(r, rc.device))
    keyset: dict[int, set] = {r: set() for r in ranks}
    counterset: dict[int, set] = {r: set() for r in ranks}
    for lp in launches:
        keyset[lp.rank].update((lp.group, int(c >> 8), int(c & 0xFF)) for c in lp.track_codes.tolist())
        counterset[lp.rank].update((lp.group, int(c >> 24), int(c & 0xFFFFFF)) for c in lp.counter_codes.tolist())
    for r in ranks:
        ranks[r].tracks = {k: i for i, k in enumerate(sorted(keyset[r]))}
        ranks[r].counters = {k: i for i, k in enumerate(sorted(counterset[r]))}
    return TracePlan(
        model=model, launches=launches, ranks=ranks, base_ns=base or 0, n_events=n_events, n_flows=n_flows,
        partial=bool(capture.partial or capture.missing_ranks), missing_ranks=list(capture.missing_ranks),
        regions=dict(capture.regions),
    )


def timeout_mask(flags: np.ndarray) -> np.ndarray:
    return (flags & EventFlag.TIMEOUT) != 0
