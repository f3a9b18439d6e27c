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
    flow_out_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    flow_out_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    flow_in_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    flow_in_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def flows(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Per event row: the id of the flow it starts (notifies) and ends (waits); 0 for none."""
        out = np.zeros(n, np.int64)
        out[self.flow_out_rows] = self.flow_out_ids
        inn = np.zeros(n, np.int64)
        inn[self.flow_in_rows] = self.flow_in_ids
        return out, inn


@dataclass
class RankPlan:
    rank: int
    name: str
    #: programs per launch group, the radix of track ids
    max_programs: int = 1
    #: track ids seen while writing: tid -> (group, program, lane)
    tracks: dict = field(default_factory=dict)
    #: counters seen while writing: (group, program, region) -> index
    counters: dict = field(default_factory=dict)

    def tids(self, group: int, program: np.ndarray, lanes: np.ndarray) -> np.ndarray:
        """Track id of each (program, lane): ordered by group, program, lane; 1 is ``kernels``.

        Ids stay below 2**31 (Chrome JSON tids are read as uint32; Perfetto uuids use them).
        """
        base = (group * self.max_programs) << 8
        if base + (self.max_programs << 8) + 2 >= 2**31:
            raise ValueError(f"rank {self.rank}: too many programs ({self.max_programs}) x launch groups to number tracks")
        return (base + 2) + ((program.astype(np.int64) << 8) | lanes)

    def note_tracks(self, group: int, tids: np.ndarray) -> np.ndarray:
        """Record the tracks a launch used; returns the ids not seen before."""
        new = [t for t in np.unique(tids).tolist() if t not in self.tracks]
        for t in new:
            rel = t - 2 - ((group * self.max_programs) << 8)
            self.tracks[t] = (group, rel >> 8, rel & 0xFF)
        return np.array(new, np.int64)

    def counter_index(self, group: int, program: np.ndarray, region: np.ndarray) -> np.ndarray:
        code = (program.astype(np.int64) << 24) | region.astype(np.int64)
        uk, inv = np.unique(code, return_inverse=True)
        idx = np.empty(uk.size, np.int64)
        for j, c in enumerate(uk.tolist()):
            key = (group, c >> 24, c & 0xFFFFFF)
            idx[j] = self.counters.setdefault(key, len(self.counters))
        return idx[inv.reshape(-1)]


def track_name(group: int, program: int, lane: int) -> str:
    return f"p{program}" + (f" lane{lane}" if lane else "") + (f" [stream group {group}]" if group else "")


@dataclass
class TracePlan:
    """The first pass's result: launches, groups, flows, time base; tracks fill in while writing."""

    model: ClockModel
    launches: list[LaunchPlan]
    ranks: dict[int, RankPlan]
    base_ns: int
    n_events: int
    n_flows: int
    partial: bool
    missing_ranks: list[int]
    regions: dict[int, str]

    def region_name(self, rid: int) -> str:
        return self.regions.get(int(rid), f"region#{int(rid):06x}")


def rank_title(rank: int, device: dict) -> str:
    dev = device.get("name") or "unknown GPU"
    where = f" (gpu {device['index']})" if "index" in device else ""
    return f"rank {rank} · {dev}{where}"


_WN_DTYPE = np.dtype([("rank", "<i4"), ("kind", "u1"), ("flags", "u1"), ("arg0", "<i8"), ("arg1", "<i8"), ("arg2", "<i8"),
                      ("arg3", "<i8"), ("arg4", "<i8"), ("start_ns", "<i8"), ("end_ns", "<i8"), ("li", "<i8"), ("row", "<i8")])


def plan_trace(capture, model: ClockModel | None = None) -> TracePlan:
    """First pass over a capture (one launch decoded at a time): time base, launch groups, flows."""
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
            kind = ev["kind"]
            hz = d.header.tick_hz
            n_events += ev.size
            lp = LaunchPlan(rank=r, index=ln.index, kernel=ln.kernel, grid=tuple(ln.grid), n_programs=d.header.n_programs, group=0,
                            n_events=int(ev.size), dropped=d.dropped, start_ns=0, end_ns=0)
            if ev.size:
                lp.start_ns = int(clk.to_common(ev["start"].min(), hz))
                lp.end_ns = int(clk.to_common(ev["end"].max(), hz))
                base = lp.start_ns if base is None else min(base, lp.start_ns)
            launches.append(lp)
            wn = np.flatnonzero((kind == EventKind.WAIT) | (kind == EventKind.NOTIFY))
            if wn.size:
                sub = np.empty(wn.size, _WN_DTYPE)
                for c in ("rank", "kind", "flags", "arg0", "arg1", "arg2", "arg3", "arg4"):
                    sub[c] = ev[c][wn]
                sub["start_ns"], sub["end_ns"] = clk.to_common(ev["start"][wn], hz), clk.to_common(ev["end"][wn], hz)
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
    ranks = {r: RankPlan(rank=r, name=rank_title(r, rc.device),
                         max_programs=max([lp.n_programs for lp in launches if lp.rank == r], default=1))
             for r, rc in sorted(capture.ranks.items())}
    return TracePlan(
        model=model, launches=launches, ranks=ranks, base_ns=base or 0, n_events=n_events, n_flows=n_flows,
        partial=bool(capture.partial or capture.missing_ranks), missing_ranks=list(capture.missing_ranks),
        regions=dict(capture.regions),
    )


def launch_lanes(ev: np.ndarray, s_ns: np.ndarray, e_ns: np.ndarray) -> np.ndarray:
    """Lane of every event of one launch (spans, waits, notifies of non-zero length; 0 for others)."""
    kind = ev["kind"]
    span_like = np.flatnonzero(((kind == EventKind.SPAN) | (kind == EventKind.WAIT) | (kind == EventKind.NOTIFY)) & (e_ns > s_ns))
    lanes = np.zeros(ev.size, np.uint8)
    if span_like.size > 1:
        lanes[span_like] = lanes_of(ev["program"][span_like], s_ns[span_like], e_ns[span_like])
    return lanes


def iter_launches(capture, plan: TracePlan):
    """Second pass: per launch, ``(launch_plan, events, start_ns, end_ns, lanes)``."""
    li = 0
    for r, rc in sorted(capture.ranks.items()):
        clk = plan.model.rank(r)
        for ln in rc.launches:
            lp = plan.launches[li]
            li += 1
            d = ln.decode(r, cache=False)
            ev = d.events
            hz = d.header.tick_hz
            s, e = clk.to_common(ev["start"], hz), clk.to_common(ev["end"], hz)
            yield lp, ev, s, e, launch_lanes(ev, s, e)


def timeout_mask(flags: np.ndarray) -> np.ndarray:
    return (flags & EventFlag.TIMEOUT) != 0
