"""The picture of each finding, as data: the one launch where it costs most, laid out as swimlanes.

:func:`finding_views` makes the document's ``views["findings"]`` (one entry per finding that has
a culprit to show, by the finding's index): the launch the finding's range falls in, its rows
(one per workgroup for small grids, else one per rank), each row's life in that launch, its waits
(each with the largest part of its time by why it waited: ``causes.wait_causes``' split), which of
them the culprit caused, the culprit itself (a late start, a late rank's idle time, heavy work, the
late notifies, the waits that gave up) and the arrows from the culprit's notifies to the waits they
released. The HTML report draws it (``viewers.swimlanes``) from the document alone.

Everything is bounded: at most :data:`MAX_WAITS` waits (the culprit's first, longest first), and
:data:`MAX_ARROWS` arrows per finding; the totals are kept so a picture says what it leaves out.
"""

from __future__ import annotations

import numpy as np

from . import causes
from .causes import model as _model
from .document import jsonable

#: Why a wait waited, in the order of ``causes.WAIT_CAUSE_DTYPE``'s split columns: the name of a
#: wait's largest part is what the picture colours it by.
WHY = (("late_not_started_ns", "producer not started"), ("late_waiting_ns", "producer itself waiting"),
       ("late_in_region_ns", "producer working"), ("late_outside_ns", "producer outside any region"),
       ("late_missing_ns", "missing signal (gave up)"), ("link_ns", "signal trip"),
       ("unexplained_ns", "unexplained"))
#: A launch with at most this many workgroups is drawn one row per workgroup; else one per rank.
MAX_ROWS = 24
#: Waits drawn per finding (the culprit's first, then the longest).
MAX_WAITS = 400
#: Arrows drawn per finding (the longest waits the culprit caused, each waiting row first).
MAX_ARROWS = 24
#: Findings given a picture (the first ones, in the report's order).
MAX_FINDINGS = 12


def _culprits(f) -> list[tuple[int, int, int]]:
    """The agents a finding blames, ``(rank, launch, program)`` each (-1: any), from its first claim."""
    for c in f.claims:
        d = c.to_dict() if hasattr(c, "to_dict") else c
        ag = [tuple(int(x) for x in a[:3]) for a in d.get("agents") or () if len(a) >= 3]
        if ag:
            return ag
    return []


def _launch_of(trace, wg, f, agents) -> int | None:
    """The launch a finding is drawn in: where most workgroups are alive over its range, else the
    first launch its agents name."""
    o = trace.origin_ns
    mine = _match(wg["rank"], wg["program"], agents) if agents else np.zeros(wg.size, bool)
    if f.start_ns is not None:
        a = f.start_ns + o
        b = (f.end_ns if f.end_ns is not None else f.start_ns) + o
        hit = (wg["start_ns"] <= b + 1) & (wg["end_ns"] >= a)
        if (hit & mine).any():
            hit &= mine
        if hit.any():
            return int(np.bincount(wg["launch"][hit]).argmax())
    named = [ln for _r, ln, _p in agents if ln >= 0]
    if named:
        return min(named)
    if mine.any():  # no range: the launch where the agents' workgroups took longest
        k = np.flatnonzero(mine)
        return int(wg["launch"][k[np.argmax(wg["end_ns"][k] - wg["start_ns"][k])]])
    return None


def _match(rank, program, agents) -> np.ndarray:
    """Whether each (rank, program) is one of ``agents`` (``(rank, launch, program)``, -1: any;
    the launch is not looked at): a pass per rank named, not per agent (a finding may name
    hundreds of thousands of workgroups)."""
    rank, program = np.asarray(rank), np.asarray(program)
    out = np.zeros(rank.size, bool)
    any_rank, any_program, by_rank = set(), set(), {}
    for r, _ln, p in agents:
        if r < 0 and p < 0:
            out[:] = True
            return out
        if r < 0:
            any_program.add(p)
        elif p < 0:
            any_rank.add(r)
        else:
            by_rank.setdefault(r, set()).add(p)
    if any_program:
        out |= np.isin(program, np.fromiter(any_program, np.int64, len(any_program)))
    if any_rank:
        out |= np.isin(rank, np.fromiter(any_rank, np.int64, len(any_rank)))
    for r, ps in by_rank.items():
        out |= (rank == r) & np.isin(program, np.fromiter(ps, np.int64, len(ps)))
    return out


def finding_views(trace, w, wg, findings: list, max_findings: int = MAX_FINDINGS) -> dict:
    """The picture of each of the first ``max_findings`` findings (see the module docstring).

    Args:
        trace: the report's trace.
        w: its waits (``stalls.waits``).
        wg: its workgroups (``load.workgroups``).
        findings: the report's findings, in order.

    Returns:
        ``{str(finding index): view}``; findings with nothing to draw are left out.
    """
    out = {}
    if wg.size == 0:
        return out
    split_of = {}
    for i, f in enumerate(findings[:max_findings]):
        if f.kind not in causes.KINDS and f.kind != "lane_holdup":
            continue
        agents = _culprits(f)
        ln = _launch_of(trace, wg, f, agents)
        if ln is None:
            continue
        if f.kind == "lane_holdup" and f.data.get("launch") is not None:
            ln = int(f.data["launch"])  # (its worst program's launch: the one it names)
        if ln not in split_of:
            split_of[ln] = _model._wait_split(trace, np.array([ln]))
        if f.kind == "lane_holdup":
            v = _lane_view(trace, w, f, split_of[ln])
        else:
            v = _view(trace, w, wg, f, [a for a in agents if a[1] in (-1, ln)], ln, split_of[ln])
        if v:
            out[str(i)] = v
    return jsonable(out)


def _view(trace, w, wg, f, agents, ln: int, split: dict) -> dict:
    o = trace.origin_ns
    sel = np.flatnonzero(wg["launch"] == ln)
    if sel.size == 0:
        return {}
    g_rank, g_prog = wg["rank"][sel].astype(np.int64), wg["program"][sel].astype(np.int64)
    g_s, g_e = wg["start_ns"][sel].astype(np.int64) - o, wg["end_ns"][sel].astype(np.int64) - o
    per_wg = sel.size <= MAX_ROWS
    ranks = np.unique(g_rank)
    if per_wg:
        order = np.lexsort((g_prog, g_rank))
        row_rank, row_prog = g_rank[order], g_prog[order]
        key = {(int(r), int(p)): k for k, (r, p) in enumerate(zip(row_rank.tolist(), row_prog.tolist()))}

        def row(r, p):
            return np.array([key.get((int(a), int(b)), -1) for a, b in zip(np.atleast_1d(r), np.atleast_1d(p))], np.int64)
    else:
        row_rank, row_prog = ranks, np.full(ranks.size, -1, np.int64)

        def row(r, _p):
            r = np.atleast_1d(np.asarray(r, np.int64))
            k = np.searchsorted(ranks, r)
            return np.where((k < ranks.size) & (ranks[np.minimum(k, ranks.size - 1)] == r), k, -1)
    g_row = row(g_rank, g_prog)
    # each row's life: its workgroups' first start to last end (a rank row: the rank's launch)
    n_rows = row_rank.size
    life_s = np.full(n_rows, np.iinfo(np.int64).max)
    life_e = np.full(n_rows, np.iinfo(np.int64).min)
    np.minimum.at(life_s, g_row, g_s)
    np.maximum.at(life_e, g_row, g_e)
    t0, t1 = int(g_s.min()), int(g_e.max())

    # the waits of this launch, with why each waited (its largest part) and its producer
    wi = np.flatnonzero(np.asarray(w["launch"]) == ln)
    rows_ev = np.asarray(w["row"])[wi]
    pos = np.searchsorted(split["row"], rows_ev) if split["row"].size else np.zeros(0, np.int64)
    parts = np.stack([np.nan_to_num(np.asarray(split[c], np.float64))[np.minimum(pos, max(split["row"].size - 1, 0))]
                      if split["row"].size else np.zeros(wi.size) for c, _ in WHY], axis=1) if wi.size else np.zeros((0, len(WHY)))
    why = np.argmax(parts, axis=1) if wi.size else np.zeros(0, np.int64)
    w_rank, w_prog = np.asarray(w["rank"])[wi].astype(np.int64), np.asarray(w["program"])[wi].astype(np.int64)
    w_s, w_e = np.asarray(w["start_ns"])[wi].astype(np.int64) - o, np.asarray(w["end_ns"])[wi].astype(np.int64) - o
    nr = np.asarray(w["notify_row"])[wi]
    has_n = nr >= 0
    n_rank = np.where(has_n, trace.column("rank")[np.maximum(nr, 0)], -1).astype(np.int64)
    n_prog = np.where(has_n, trace.column("program")[np.maximum(nr, 0)], -1).astype(np.int64)
    n_t = np.where(has_n, trace.column("start_ns")[np.maximum(nr, 0)].astype(np.int64) - o, 0)
    timed_out = np.asarray(w["timed_out"])[wi].astype(bool)
    root_r = np.asarray(split["root_rank"])[pos].astype(np.int64) if wi.size and split["row"].size else np.full(wi.size, -1)
    root_p = np.asarray(split["root_program"])[pos].astype(np.int64) if wi.size and split["row"].size else np.full(wi.size, -1)
    dur = w_e - w_s

    # what the culprit is, and which waits it caused
    kind = f.kind
    missing = {"from_row": [], "from_ns": [], "to_row": [], "to_ns": []}
    marks = {"row": [], "start_ns": [], "end_ns": [], "what": []}
    if kind == "hang":
        caused = timed_out | (~has_n & (dur > 0))
        if agents:
            caused &= _match(w_rank, w_prog, agents) | _match(np.asarray(w["peer"])[wi].astype(np.int64), np.full(wi.size, -1), agents)
        for k in np.flatnonzero(caused)[:MAX_ARROWS]:
            marks["row"].append(int(row(w_rank[k], w_prog[k])[0]))
            marks["start_ns"].append(int(w_s[k]))
            marks["end_ns"].append(int(w_e[k]))
            marks["what"].append("no signal came")
        # the producer that never sent: from its last event to the launch's end, with a dashed
        # arrow from there to each waiting row's wait that gave up ("missing")
        prod = f.data.get("producer")
        if prod is not None and np.any(row_rank == int(prod)):
            mine = row_rank == int(prod)
            senders = [int(x) for x in f.data.get("senders") or ()]
            if per_wg and senders and np.any(mine & (row_prog == senders[0])):  # the program that should have sent
                mine &= row_prog == senders[0]
            prow = int(np.flatnonzero(mine)[0])
            stuck = per_wg and int(row_prog[prow]) in [int(x) for x in f.data.get("stuck") or ()]
            last = f.data.get("stuck_since_ns") if stuck else f.data.get("last_event_ns")
            since = int(last) - o if last is not None and int(last) >= 0 else int(life_s[prow])
            since = min(max(since, t0), t1)
            marks["row"].append(prow)
            marks["start_ns"].append(since)
            marks["end_ns"].append(t1)
            marks["what"].append("stuck, never sent" if stuck else "never sent")
            ks = np.flatnonzero(caused)
            ks = ks[np.argsort(-dur[ks], kind="stable")]
            krow = row(w_rank[ks], w_prog[ks]) if ks.size else np.zeros(0, np.int64)
            _, first = np.unique(krow, return_index=True)
            ks, krow = ks[np.sort(first)][:MAX_ARROWS], krow[np.sort(first)][:MAX_ARROWS]
            missing = {"from_row": [prow] * ks.size, "from_ns": [since] * ks.size, "to_row": krow, "to_ns": w_e[ks]}
    else:
        caused = (has_n & _match(n_rank, n_prog, agents)) | _match(root_r, root_p, agents)
        # (the culprit's own waits are not its consequences)
        caused &= (dur > 0) & ~_match(w_rank, w_prog, agents)
        if kind == "slow_link" and f.data.get("consumer") is not None:  # the link: its consumer's waits on its producer
            caused = (dur > 0) & (w_rank == int(f.data["consumer"])) & has_n & (n_rank == int(f.data.get("rank", -1)))
        cg = _match(g_rank, g_prog, agents)
        if kind in ("late_launch", "late_start"):
            # the idle time before the culprit started: from the launch's (late_launch) or its
            # rank's (late_start) first start
            for r in np.unique(g_rank[cg]).tolist():
                mine = cg & (g_rank == r)
                first = t0 if kind == "late_launch" else int(g_s[g_rank == r].min())
                for k in (np.flatnonzero(mine) if per_wg else [np.flatnonzero(mine)[np.argmin(g_s[mine])]]):
                    if g_s[k] > first:
                        marks["row"].append(int(g_row[k]))
                        marks["start_ns"].append(first)
                        marks["end_ns"].append(int(g_s[k]))
                        marks["what"].append("started late")
        elif kind in ("late_notifies", "straggler", "slow_link"):
            # the culprit's notifies that released the caused waits: for a held notify, the gap
            # since its workgroup's previous event ended; for a slow producer, that previous
            # event (its work); for a slow link, the notify itself
            what = {"late_notifies": "notified late", "straggler": "slow producer", "slow_link": "slow signal"}[kind]
            nrs = np.unique(nr[caused & has_n])[:MAX_WAITS]
            if nrs.size:
                wgid, st, en = trace.wg, trace.column("start_ns"), trace.column("end_ns")
                prev = np.maximum(nrs - 1, 0)
                same = (nrs > 0) & (wgid[prev] == wgid[nrs])
                ns = st[nrs].astype(np.int64) - o
                pe, ps = en[prev].astype(np.int64) - o, st[prev].astype(np.int64) - o
                if kind == "late_notifies":
                    a = np.where(same & (pe <= ns), pe, ns)
                elif kind == "straggler":
                    a = np.where(same, np.minimum(ps, ns), ns)
                else:
                    a = ns
                rr = row(trace.column("rank")[nrs], trace.column("program")[nrs])
                for r, x, y in zip(rr.tolist(), a.tolist(), ns.tolist()):
                    if r >= 0:
                        marks["row"].append(r)
                        marks["start_ns"].append(x)
                        marks["end_ns"].append(y)
                        marks["what"].append(what)
        else:
            what = {"uneven_work": "heavy work", "uneven_ranks": "heavy rank", "lane_holdup": "held the others"}.get(kind, kind)
            ks = np.flatnonzero(cg)
            if not per_wg and ks.size:  # one mark per rank row: its culprit workgroups' span
                for r in np.unique(g_rank[ks]).tolist():
                    m = ks[g_rank[ks] == r]
                    marks["row"].append(int(g_row[m[0]]))
                    marks["start_ns"].append(int(g_s[m].min()))
                    marks["end_ns"].append(int(g_e[m].max()))
                    marks["what"].append(what)
            else:
                for k in ks.tolist():
                    marks["row"].append(int(g_row[k]))
                    marks["start_ns"].append(int(g_s[k]))
                    marks["end_ns"].append(int(g_e[k]))
                    marks["what"].append(what)
    if not marks["row"] and not caused.any():
        return {}

    # the waits drawn: the caused ones first, longest first, then the others, longest first
    pick = np.lexsort((-dur, ~caused))
    pick = pick[dur[pick] > 0][:MAX_WAITS]
    wrow = row(w_rank[pick], w_prog[pick]) if pick.size else np.zeros(0, np.int64)
    keep = wrow >= 0
    pick, wrow = pick[keep], wrow[keep]
    # arrows: from the notify that released a caused wait to that wait's end; every waiting row
    # gets its longest one first, then the longest of the rest
    ca = pick[caused[pick] & has_n[pick]]
    arrows = {"from_row": [], "from_ns": [], "to_row": [], "to_ns": []}
    if ca.size:
        crow = row(w_rank[ca], w_prog[ca])
        _, first = np.unique(crow, return_index=True)
        rest = np.setdiff1d(np.arange(ca.size), first)
        chosen = np.r_[first[np.argsort(-dur[ca[first]], kind="stable")], rest][:MAX_ARROWS]
        fr = row(n_rank[ca[chosen]], n_prog[ca[chosen]])
        ok = fr >= 0
        arrows = {"from_row": fr[ok], "from_ns": n_t[ca[chosen]][ok], "to_row": crow[chosen][ok],
                  "to_ns": w_e[ca[chosen]][ok]}
    return {
        "finding": f.label or f.kind, "kind": kind, "launch": int(ln), "start_ns": t0, "end_ns": t1,
        "rows": {"rank": row_rank, "program": row_prog, "start_ns": life_s, "end_ns": life_e},
        "waits": {"row": wrow, "start_ns": w_s[pick], "end_ns": w_e[pick], "why": why[pick], "caused": caused[pick]},
        "why_names": [name for _c, name in WHY],
        "culprit": marks, "arrows": arrows, "missing": missing,
        "waits_total": int((dur > 0).sum()), "caused_total": int(caused.sum()),
        "arrows_total": int((caused & has_n).sum()),
    }


def _why(split: dict, rows_ev: np.ndarray) -> np.ndarray:
    """The largest part of each wait's time (an index into :data:`WHY`)."""
    if rows_ev.size == 0 or split["row"].size == 0:
        return np.zeros(rows_ev.size, np.int64)
    pos = np.minimum(np.searchsorted(split["row"], rows_ev), split["row"].size - 1)
    return np.argmax(np.stack([np.nan_to_num(np.asarray(split[c], np.float64))[pos] for c, _ in WHY], axis=1), axis=1)


def _lane_view(trace, w, f, split: dict) -> dict:
    """A lane hold-up in its worst program: one row per lane (partition), the waits of the other
    lanes on the culprit's releases, its work before each release marked."""
    d = f.data
    o = trace.origin_ns
    r = int(f.ranks[0]) if f.ranks else 0
    ln, p, lane = int(d["launch"]), int(d["program"]), int(d["lane"])
    names = (trace.lanes or {}).get((r, ln)) or ()
    col = trace.column
    ev = np.flatnonzero((col("rank") == r) & (col("launch") == ln) & (col("program") == p))
    if ev.size == 0:
        return {}
    ev_lane = col("lane")[ev].astype(np.int64)
    lanes = np.unique(ev_lane)
    life_s = np.array([int(col("start_ns")[ev[ev_lane == x]].min()) - o for x in lanes.tolist()], np.int64)
    life_e = np.array([int(col("end_ns")[ev[ev_lane == x]].max()) - o for x in lanes.tolist()], np.int64)
    wi = np.flatnonzero((np.asarray(w["rank"]) == r) & (np.asarray(w["launch"]) == ln) & (np.asarray(w["program"]) == p))
    rows_ev = np.asarray(w["row"])[wi]
    w_lane = col("lane")[rows_ev].astype(np.int64)
    w_s, w_e = np.asarray(w["start_ns"])[wi].astype(np.int64) - o, np.asarray(w["end_ns"])[wi].astype(np.int64) - o
    nr = np.asarray(w["notify_row"])[wi]
    has_n = nr >= 0
    n_lane = np.where(has_n, col("lane")[np.maximum(nr, 0)], -1).astype(np.int64)
    n_t = np.where(has_n, col("start_ns")[np.maximum(nr, 0)].astype(np.int64) - o, 0)
    dur = w_e - w_s
    caused = has_n & (n_lane == lane) & (w_lane != lane) & (dur > 0)
    row = np.searchsorted(lanes, w_lane)
    pick = np.lexsort((-dur, ~caused))
    pick = pick[dur[pick] > 0][:MAX_WAITS]
    marks = {"row": [], "start_ns": [], "end_ns": [], "what": []}
    nrs = np.unique(nr[caused])[:MAX_WAITS]
    if nrs.size:  # the culprit's work before each release it made late
        prev = np.maximum(nrs - 1, 0)
        same = (nrs > 0) & (trace.wg[prev] == trace.wg[nrs]) & (col("lane")[prev] == lane)
        ns = col("start_ns")[nrs].astype(np.int64) - o
        a = np.where(same, np.minimum(col("start_ns")[prev].astype(np.int64) - o, ns), ns)
        k = int(np.searchsorted(lanes, lane))
        for x, y in zip(a.tolist(), ns.tolist()):
            marks["row"].append(k)
            marks["start_ns"].append(x)
            marks["end_ns"].append(y)
            marks["what"].append("held the others")
    ca = pick[caused[pick]]
    _, first = np.unique(row[ca], return_index=True)
    chosen = np.r_[first, np.setdiff1d(np.arange(ca.size), first)][:MAX_ARROWS].astype(np.int64)
    arrows = {"from_row": np.searchsorted(lanes, n_lane[ca[chosen]]), "from_ns": n_t[ca[chosen]],
              "to_row": row[ca[chosen]], "to_ns": w_e[ca[chosen]]}
    return {
        "finding": f.label or f.kind, "kind": f.kind, "launch": ln, "start_ns": int(life_s.min()), "end_ns": int(life_e.max()),
        "rows": {"rank": np.full(lanes.size, r), "program": np.full(lanes.size, p), "start_ns": life_s, "end_ns": life_e,
                 "label": [str(names[x]) if x < len(names) else f"lane {x}" for x in lanes.tolist()]},
        "waits": {"row": row[pick], "start_ns": w_s[pick], "end_ns": w_e[pick], "why": _why(split, rows_ev[pick]),
                  "caused": caused[pick]},
        "why_names": [name for _c, name in WHY], "culprit": marks, "arrows": arrows,
        "waits_total": int((dur > 0).sum()), "caused_total": int(caused.sum()), "arrows_total": int(caused.sum()),
    }


__all__ = ["MAX_ARROWS", "MAX_ROWS", "MAX_WAITS", "WHY", "finding_views"]
