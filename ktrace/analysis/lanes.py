"""Which partition of a warp-specialized program held the others up (``ktrace.gluon`` lanes).

A program traced per lane hands off inside itself through mbarriers: each paired mbarrier wait
(``ktrace.pairing`` rule 3) names the lane whose release ended it. A wait is charged to that
lane for the part of it during which the lane was *not waiting itself*: a loader that spins
before its copies is charged the whole wait of the MMA partition it kept waiting; an MMA
partition that only passed a loader's delay on (it was waiting on the loader meanwhile) is
charged nothing for the epilogue's wait on it. So the lane charged is the one whose own work,
not its waits, held the others up.

:func:`holdups` gives, per (rank, launch, lane), the time charged in each of its programs: its
worst program's is what a launch would save if that lane were never late (the programs run in
parallel); the report's finding (``ktrace.analysis.report``) names the lane by its partition.
"""

from __future__ import annotations

import numpy as np

from ..keys import group_index, lexorder
from ..schema import EventKind, is_local, is_timeout
from . import stalls
from .trace import Trace, lane_view, wg_lanes

#: One row per (rank, launch, lane that held others up).
HOLDUP_DTYPE = np.dtype([
    ("rank", "<i4"), ("launch", "<i4"), ("lane", "<i4"),
    ("programs", "<i8"),  # programs in which the lane's releases ended waits it is charged for
    ("waits", "<i8"),  # those waits
    ("held_ns", "<f8"),  # time charged, all programs
    ("worst_program", "<i4"), ("worst_ns", "<f8"),  # the program charged most, and its time
    ("waiter_lane", "<i4"), ("waiter_ns", "<f8"),  # in the worst program: the lane that waited most on it, how long
    ("barrier", "<u4"),  # the region (barrier name) of those waits
    ("waiter_work_ns", "<f8"),  # in the worst program: the waiter lane's own time not waiting (its extent less its waits)
])


def _own_wait_before(agent: np.ndarray, start: np.ndarray, end: np.ndarray, q_agent: np.ndarray, q_t: np.ndarray) -> np.ndarray:
    """Per query, how long agent ``q_agent`` had waited, in all, before time ``q_t`` (its waits,
    given as ``agent``/``start``/``end``, never overlap: one lane waits for one thing at a time)."""
    if agent.size == 0:
        return np.zeros(q_t.size, np.float64)
    o = lexorder(agent, start)
    a, s, e = agent[o], start[o], end[o]
    d = (e - s).astype(np.float64)
    cs = np.cumsum(d) - d  # waited before each wait started, over all agents
    first = np.r_[True, a[1:] != a[:-1]]
    cs -= np.maximum.accumulate(np.where(first, cs, -np.inf))  # ... within its agent
    # the last wait of the agent started at or before t: pack (agent, time) into one sortable key
    t0 = int(min(s.min(), q_t.min()))
    span = int(max(s.max(), q_t.max())) - t0 + 2
    key = a.astype(np.int64) * span + (s - t0)
    i = np.searchsorted(key, q_agent.astype(np.int64) * span + (q_t - t0), side="right") - 1
    ok = (i >= 0) & (a[np.maximum(i, 0)] == q_agent)
    i = np.maximum(i, 0)
    return np.where(ok, cs[i] + np.clip(q_t - s[i], 0, d[i]), 0.0)


def holdups(trace: Trace) -> np.ndarray:
    """Per (rank, launch, lane), the time other lanes of its programs waited on its releases
    while it was not waiting itself (``HOLDUP_DTYPE``; most first). Empty without lanes."""
    return trace.cached(("lane_holdups",), lambda: _holdups(trace))


def _holdups(trace: Trace) -> np.ndarray:
    empty = np.zeros(0, HOLDUP_DTYPE)
    if not trace.lanes or not trace.n_events:
        return empty
    w = stalls.waits(trace)
    W = EventKind.WAIT
    flags = trace.at(W, "flags")
    nr = np.asarray(w["notify_row"])
    sel = np.flatnonzero(is_local(flags) & (nr >= 0) & ~is_timeout(flags))
    if sel.size == 0:
        return empty
    lane = trace.column("lane")
    rank, launch, prog = (np.asarray(trace.at(W, c)) for c in ("rank", "launch", "program"))
    ws, we = np.asarray(trace.at(W, "start_ns")), np.asarray(trace.at(W, "end_ns"))
    wlane = np.asarray(trace.at(W, "lane"))
    # every wait of every lane is a span of its own waiting (local or not)
    agent_all, _ = group_index(rank, launch, prog, wlane)
    n = nr[sel]
    plane = lane[n]
    # the producer lane's agent code: the same (rank, launch, program) with the producer's lane
    q, _ = group_index(np.r_[rank, rank[sel]], np.r_[launch, launch[sel]], np.r_[prog, prog[sel]], np.r_[wlane, plane])
    agent_all2, q_agent = q[: rank.size], q[rank.size :]
    del agent_all
    a_s, a_e = ws[sel], we[sel]
    own = _own_wait_before(agent_all2, ws, we, q_agent, a_e) - _own_wait_before(agent_all2, ws, we, q_agent, a_s)
    charged = np.maximum((a_e - a_s) - own, 0.0)
    r, l, p = rank[sel], launch[sel], prog[sel]
    region = np.asarray(trace.at(W, "region"))[sel]
    # per (rank, launch, program, producer lane): time charged
    g, keys = group_index(r, l, p, plane)
    per_prog = np.bincount(g, weights=charged, minlength=keys.shape[0])
    cnt = np.bincount(g, minlength=keys.shape[0])
    # per (rank, launch, producer lane)
    h, hk = group_index(keys[:, 0], keys[:, 1], keys[:, 3])
    out = np.zeros(hk.shape[0], HOLDUP_DTYPE)
    out["rank"], out["launch"], out["lane"] = hk[:, 0], hk[:, 1], hk[:, 2]
    out["programs"] = np.bincount(h, weights=(per_prog > 0), minlength=hk.shape[0]).astype(np.int64)
    out["waits"] = np.bincount(h, weights=cnt, minlength=hk.shape[0]).astype(np.int64)
    out["held_ns"] = np.bincount(h, weights=per_prog, minlength=hk.shape[0])
    o = lexorder(h, -np.round(per_prog).astype(np.int64))  # each group's worst program first
    firsts = o[np.r_[True, h[o][1:] != h[o][:-1]]]
    out["worst_program"][h[firsts]] = keys[firsts, 2]
    out["worst_ns"][h[firsts]] = per_prog[firsts]
    # in the worst program: which lane waited most on it, and on which barrier
    worst_of = np.full(keys.shape[0], False)
    worst_of[firsts] = True
    m = worst_of[g]
    if m.any():
        k2, kk = group_index(g[m], wlane[sel][m], region[m])
        tot = np.bincount(k2, weights=charged[m], minlength=kk.shape[0])
        o2 = lexorder(kk[:, 0], -np.round(tot).astype(np.int64))
        top = o2[np.r_[True, kk[o2, 0][1:] != kk[o2, 0][:-1]]]
        gi = kk[top, 0]
        out["waiter_lane"][h[gi]] = kk[top, 1]
        out["waiter_ns"][h[gi]] = tot[top]
        out["barrier"][h[gi]] = kk[top, 2]
        out["waiter_work_ns"][h[gi]] = _work(trace, out["rank"][h[gi]], out["launch"][h[gi]], out["worst_program"][h[gi]],
                                             out["waiter_lane"][h[gi]])
    return out[np.argsort(-out["worst_ns"], kind="stable")]


def _work(trace: Trace, rank: np.ndarray, launch: np.ndarray, program: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """Per (rank, launch, program, lane) asked: the lane's own time not waiting, its first start
    to its last end less its waits (a lane waits for one thing at a time: they do not overlap)."""
    v = lane_view(trace)
    ws, we = stalls.workgroup_extent(v)
    wr = trace.rows_of(EventKind.WAIT)
    waited = np.bincount(v.wg[wr], weights=(trace.at(EventKind.WAIT, "end_ns") - trace.at(EventKind.WAIT, "start_ns")).astype(np.float64),
                         minlength=v.n_workgroups)
    gk = np.c_[v.wg_keys, wg_lanes(v)]
    m = [int(max(gk[:, c].max(), q.max())) + 1 for c, q in ((1, launch), (2, program), (3, lane))]
    code = ((gk[:, 0] * m[0] + gk[:, 1]) * m[1] + gk[:, 2]) * m[2] + gk[:, 3]  # (sorted: the view's workgroup order)
    q = ((rank.astype(np.int64) * m[0] + launch) * m[1] + program) * m[2] + lane
    i = np.clip(np.searchsorted(code, q), 0, code.size - 1)
    ok = code[i] == q
    return np.where(ok, (we[i] - ws[i]) - waited[i], 0.0)


def lane_name(trace: Trace, rank: int, launch: int, lane: int) -> str:
    """A lane's name: its partition's (the decorator's ``lanes``), else ``lane <k>``."""
    names = trace.lanes.get((int(rank), int(launch)), ())
    return names[lane] if 0 <= lane < len(names) else f"lane {lane}"


__all__ = ["HOLDUP_DTYPE", "holdups", "lane_name"]
