"""Overlap of communication with compute, per-launch timing per rank, and the critical path.

Regions are classified as communication or compute (:class:`RegionClasses`): WAIT and NOTIFY
events are communication; spans by their names (regular expressions, configurable; exact names
override). Only leaf spans count (a span with another event inside it, e.g. a ``tile`` span
around a ``gemm`` and a ``put``, is a container and would otherwise cover its parts).

Per rank and launch, the union of communication intervals over all its workgroups is split into
the part during which some workgroup of the rank was computing (``hidden_ns``) and the rest
(``exposed_ns``): communication the rank's GPU spent with no compute to cover it.

The critical path of a launch runs backwards from the last event to end across ranks: within a
workgroup back through its events, and across a wait that its producer made late (the wait
began before its notify) to the producer's notify, then on back through the producer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .. import keys
from ..keys import dense_codes, group_index, group_sum, lexorder
from ..schema import EventKind, is_local
from . import spans as _spans
from .intervals import last_at_or_before
from .stalls import waits as _waits
from .trace import Trace, lane_view, wg_lanes

_COMM = r"comm|send|recv|put|get|copy|dispatch|combine|scatter|gather|all_?reduce|all_?to_?all|a2a|signal|barrier|push|pull|transfer|wait|notify|exchange"
_COMPUTE = r"gemm|matmul|mm|dot|compute|expert|mlp|ffn|attn|softmax|norm|math|reduce_local|epilogue|prologue"


@dataclass(frozen=True)
class RegionClasses:
    """How span regions are classified.

    Attributes:
        comm: regular expression (searched, case-insensitive) of communication region names.
        compute: the same for compute; a name matching both is communication.
        comm_names, compute_names: exact names forced into a class (checked first).
    """

    comm: str = _COMM
    compute: str = _COMPUTE
    comm_names: tuple[str, ...] = ()
    compute_names: tuple[str, ...] = ()

    def __post_init__(self):
        for what in ("comm", "compute"):
            try:
                re.compile(getattr(self, what))
            except re.error as e:
                raise ValueError(f"RegionClasses.{what} is not a valid regular expression: {e}") from None
        both = set(self.comm_names) & set(self.compute_names)
        if both:
            raise ValueError(f"RegionClasses: names in both classes: {sorted(both)}")

    def classify(self, name: str) -> str:
        """``"comm"``, ``"compute"`` or ``"other"`` for one region name."""
        if name in self.comm_names:
            return "comm"
        if name in self.compute_names:
            return "compute"
        if re.search(self.comm, name, re.IGNORECASE):
            return "comm"
        if re.search(self.compute, name, re.IGNORECASE):
            return "compute"
        return "other"


def leaf_spans(trace: Trace) -> np.ndarray:
    """Rows of spans with no other event of their agent starting inside them (of their
    workgroup, or of their lane when programs have several: lanes run at once)."""
    v = lane_view(trace)
    return v.cached(("leaf",), lambda: _leaf_spans(v))


def _leaf_spans(trace: Trace) -> np.ndarray:
    parts = []
    bounds = _spans.workgroup_blocks(trace)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):  # blocks of whole workgroups
        parts.append(a + _leaf_block(trace, a, b))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _leaf_block(trace: Trace, a: int, b: int) -> np.ndarray:
    """:func:`leaf_spans` of the events ``a:b`` (whole workgroups), as offsets from ``a``."""
    kind = trace.column("kind")[a:b]
    is_span = kind == int(EventKind.SPAN)
    sel = is_span | (kind == int(EventKind.WAIT)) | (kind == int(EventKind.NOTIFY))
    rows = np.flatnonzero(sel)
    s, e, wg = trace.column("start_ns")[a:b][rows], trace.column("end_ns")[a:b][rows], trace.wg[a:b][rows]
    is_span = is_span[rows]
    n = s.size
    if n == 0:
        return rows
    wg = wg - int(wg[0])
    # by workgroup, start, and longer first at a tie: a container comes before what it holds;
    # of two events over the same interval, the one recorded later holds the other (a span is
    # recorded when it ends, after what it holds). An event has a child when the next one in that
    # order is of its workgroup and starts before it ends. (The old second test, an event at the
    # same start ending no later inside one of nonzero length, implies the first and adds nothing.)
    lo = int(s.min())
    size = int(e.max()) - lo + 1
    has_child = np.zeros(n, bool)
    later_first = -rows
    if max(size, 1) * (int(wg.max()) + 1) < keys.KEY_LIMIT:
        ks = wg * size + (s - lo)
        o = lexorder(ks, s - e, later_first)
        ke_o = wg[o] * size + (e[o] - lo)
        # (a later workgroup's packed start is beyond any end of this one)
        np.less(ks[o[1:]], ke_o[:-1], out=has_child[:-1])
    else:
        o = lexorder(wg, s, s - e, later_first)
        so, eo, go = s[o], e[o], wg[o]
        has_child[:-1] = (go[1:] == go[:-1]) & (so[1:] < eo[:-1])
    leaf = np.zeros(n, bool)
    leaf[o[~has_child]] = True
    leaf &= is_span
    return rows[leaf]


def event_class(trace: Trace, classes: RegionClasses = RegionClasses()) -> np.ndarray:
    """Per event: 0 not counted, 1 communication, 2 compute (leaf spans, waits and notifies).

    A hand-off inside one program (an mbarrier wait or arrive between the lanes of a program,
    flagged LOCAL) is no communication: it is counted as neither."""
    kind = trace.column("kind")
    cls = np.zeros(kind.size, np.int8)
    cls[((kind == int(EventKind.WAIT)) | (kind == int(EventKind.NOTIFY))) & ~is_local(trace.column("flags"))] = 1
    leaf = leaf_spans(trace)
    if leaf.size:
        rid = trace.column("region")[leaf]
        u, inv = np.unique(rid, return_inverse=True)
        code = np.array([{"comm": 1, "compute": 2, "other": 0}[classes.classify(trace.region_name(x))] for x in u.tolist()], np.int8)
        cls[leaf] = code[inv.reshape(-1)]
    return cls


OVERLAP_DTYPE = np.dtype(
    [
        ("rank", "<i4"),
        ("launch", "<i4"),
        ("extent_ns", "<i8"),  # the rank's first event to its last (stalls.kernel_time)
        ("comm_ns", "<i8"),  # union of communication intervals over the rank's workgroups
        ("compute_ns", "<i8"),
        ("hidden_ns", "<i8"),  # communication while some workgroup of the rank computed
        ("exposed_ns", "<i8"),  # communication with no compute on the rank
        ("hidden_frac", "<f8"),
        ("wait_ns", "<i8"),  # union of the rank's waits
        ("wait_exposed_ns", "<i8"),  # of those, with no compute running
    ]
)


def overlap(trace: Trace, classes: RegionClasses = RegionClasses(), *, launches=None, rows: int | None = None) -> np.ndarray:
    """Per rank and launch (of ``launches`` only, when given; the first ``rows`` of the table only,
    when given), communication hidden under compute and exposed.

    One sweep over many (rank, launch) groups at once (blocks of whole groups of about
    ``spans.BLOCK_EVENTS`` events): the start and end of each communication, compute and wait
    interval become +1/-1 points, sorted once on a packed (group, time, kind) key; the running
    counts say which classes cover each stretch between two points.

    Returns:
        A table of ``OVERLAP_DTYPE``.
    """
    cls = event_class(trace, classes)
    s, e, kind = trace.column("start_ns"), trace.column("end_ns"), trace.column("kind")
    if s.size == 0:
        return np.zeros(0, OVERLAP_DTYPE)
    from .stalls import kernel_time

    first, r, l = _spans.rank_launch_starts(trace)
    extent = kernel_time(trace)["extent_ns"]  # the same (rank, launch) groups, in the same order
    last = np.r_[first[1:], s.size]
    if launches is not None:  # only the groups of those launches, and their rows
        keep = np.isin(l, np.asarray(launches))
        first, last, r, l, extent = first[keep], last[keep], r[keep], l[keep], extent[keep]
    if rows is not None:  # (each group is swept on its own: its row is the same computed alone)
        first, last, r, l, extent = first[:rows], last[:rows], r[:rows], l[:rows], extent[:rows]
    G = first.size
    out = np.zeros(G, OVERLAP_DTYPE)
    out["rank"], out["launch"], out["extent_ns"] = r, l, extent
    if G == 0:
        return out
    cnt = last - first
    ends = np.cumsum(cnt)
    # blocks of whole (rank, launch) groups of about BLOCK_EVENTS rows: each group is swept on
    # its own, so a block's temporaries are all there is at a time
    a = 0
    while a < G:
        done = int(ends[a - 1]) if a else 0
        b = min(max(int(np.searchsorted(ends, done + _spans.BLOCK_EVENTS, side="right")), a + 1), G)
        _overlap_block(out[a:b], first[a:b], cnt[a:b], s, e, kind, cls)
        a = b
    return out


def _overlap_block(out: np.ndarray, first: np.ndarray, cnt: np.ndarray, s, e, kind, cls) -> None:
    """:func:`overlap` of some (rank, launch) groups: ``first`` row and ``cnt`` rows each, into ``out``."""
    G = first.size
    starts = np.cumsum(cnt) - cnt
    rows = np.arange(int(cnt.sum()), dtype=np.int64) - np.repeat(starts, cnt) + np.repeat(first, cnt)
    gid = np.repeat(np.arange(G, dtype=np.int64), cnt)
    s, e, kind, cls = s[rows], e[rows], kind[rows], cls[rows]
    del rows
    is_wait = kind == int(EventKind.WAIT)
    # interval sets: 0 communication, 1 compute, 2 waits
    sets = [np.flatnonzero(cls == 1), np.flatnonzero(cls == 2), np.flatnonzero(is_wait)]
    rows = np.concatenate(sets)
    which = np.concatenate([np.full(x.size, i, np.int64) for i, x in enumerate(sets)])
    comm, comp, wt, hid, wt_comp = _swept_lengths(gid[rows], s[rows], e[rows], which, G)
    out["comm_ns"], out["compute_ns"], out["hidden_ns"] = comm, comp, hid
    out["exposed_ns"] = comm - hid
    with np.errstate(divide="ignore", invalid="ignore"):
        out["hidden_frac"] = np.where(comm > 0, hid / np.maximum(comm, 1), np.nan)
    out["wait_ns"] = wt
    out["wait_exposed_ns"] = wt - wt_comp


def _swept_lengths(group: np.ndarray, start: np.ndarray, end: np.ndarray, which: np.ndarray, n_groups: int):
    """Per group: the length of the union of each of three interval sets (``which`` 0, 1, 2),
    of the intersection of sets 0 and 1, and of sets 2 and 1 (int64 arrays)."""
    if group.size == 0:
        return tuple(np.zeros(n_groups, np.int64) for _ in range(5))
    lo = int(start.min())
    span = int(end.max()) - lo + 1
    if span * n_groups * 8 < (1 << 62):
        # packed: (group, time) in the high bits, the point's kind (set x 2 + is_end) in the low 3
        t_s = (group * span + (start - lo)) << 3
        t_e = (group * span + (end - lo)) << 3
        keys = np.concatenate([t_s | (which * 2), t_e | (which * 2 + 1)])
        del t_s, t_e
        keys.sort()
        code = keys & 7
        pos = keys >> 3
        del keys
        g_o, t_o = np.divmod(pos, span)
        del pos
    else:  # times too wide to pack with the group: a lexicographic sort
        g2 = np.concatenate([group, group])
        t2 = np.concatenate([start, end]) - lo
        c2 = np.concatenate([which * 2, which * 2 + 1])
        o = np.lexsort((c2, t2, g2))
        g_o, t_o, code = g2[o], t2[o], c2[o]
    # +1 at a start, -1 at an end, per set; a stretch between two points of a group is covered by
    # a set while its running count is positive (counts return to 0 at the end of every group)
    delta = np.where(code & 1, -1, 1).astype(np.int8)
    kind_o = code >> 1
    del code
    cover = [np.cumsum(np.where(kind_o == k, delta, 0), dtype=np.int32) > 0 for k in range(3)]
    del delta, kind_o
    new = np.r_[True, g_o[1:] != g_o[:-1]]
    dt = np.zeros(g_o.size, np.int64)
    np.subtract(t_o[1:], t_o[:-1], out=dt[:-1])
    dt[:-1][new[1:]] = 0  # no stretch across two groups
    starts = np.flatnonzero(new)
    present = g_o[starts]
    a, b, c = cover
    out = []
    for m in (a, b, c, a & b, c & b):
        x = np.zeros(n_groups, np.int64)
        x[present] = np.add.reduceat(dt * m, starts)
        out.append(x)
    return tuple(out)


def launch_timing(trace: Trace) -> np.ndarray:
    """Per launch and rank: start, end, duration, and skew against the launch's earliest rank.

    Returns:
        A table with ``launch``, ``rank``, ``start_ns``, ``end_ns``, ``dur_ns``, ``start_skew_ns``
        (start minus the earliest rank's start) and ``end_skew_ns`` (end minus the earliest end),
        in (launch, rank) order.
    """
    from .stalls import kernel_time

    kt = kernel_time(trace)
    out = np.zeros(kt.size, [("launch", "<i4"), ("rank", "<i4"), ("kernel", "O"), ("start_ns", "<i8"), ("end_ns", "<i8"),
                             ("dur_ns", "<i8"), ("start_skew_ns", "<i8"), ("end_skew_ns", "<i8")])
    if kt.size == 0:
        return out
    o = np.lexsort((kt["rank"], kt["launch"]))
    kt = kt[o]
    out["launch"], out["rank"] = kt["launch"], kt["rank"]
    out["kernel"] = np.array([trace.kernel_name(a, b) for a, b in zip(kt["rank"].tolist(), kt["launch"].tolist())], dtype=object)
    out["start_ns"], out["end_ns"], out["dur_ns"] = kt["start_ns"], kt["end_ns"], kt["extent_ns"]
    li, lk = np.unique(kt["launch"], return_inverse=True)
    lk = lk.reshape(-1)
    smin = np.full(li.size, np.iinfo(np.int64).max)
    emin = np.full(li.size, np.iinfo(np.int64).max)
    np.minimum.at(smin, lk, kt["start_ns"])
    np.minimum.at(emin, lk, kt["end_ns"])
    out["start_skew_ns"] = kt["start_ns"] - smin[lk]
    out["end_skew_ns"] = kt["end_ns"] - emin[lk]
    return out


PATH_DTYPE = np.dtype(
    [
        ("launch", "<i4"),
        ("step", "<i4"),  # 0 = the last segment in time
        ("kind", "O"),  # "run": a workgroup's own time; "signal": notify -> the wait that saw it
        ("rank", "<i4"),  # run: the workgroup that ran; signal: the workgroup that waited
        ("program", "<i4"),
        ("lane", "<i4"),  # the program's lane (warp group, partition) that ran or waited; 0 with one lane
        ("start_ns", "<i8"),
        ("end_ns", "<i8"),
        ("dur_ns", "<i8"),
        ("region", "O"),  # run: the region with the most time in the segment; signal: the wait's name
        ("wait_row", "<i8"),  # signal: the wait; run: -1
    ]
)


def critical_path(trace: Trace, launch: int | None = None, *, min_late_ns: int = 0) -> np.ndarray:
    """The cross-rank critical path of each launch (or of one) through notify -> wait edges.

    From the event that ends last in the launch, go back through its agent (workgroup, or lane of
    it when programs have several) to the latest wait
    whose producer was late (``producer_late_ns > min_late_ns``) and that ended before the current
    point; jump to the producer's notify, and go on from there; stop at a workgroup's first event.
    Every launch walks at once: one vectorised step per cross-rank edge of the longest path, no
    loop over launches.

    A run segment's ``region`` is where most of its time went, in the words of the totals
    (:func:`path_region_time`): a leaf span's region, ``waiting in 'NAME'``, ``(outside any
    region)`` or :data:`IN_CONTAINERS`.

    Returns:
        A table of ``PATH_DTYPE``, segments in time order within each launch.
    """
    from .stalls import workgroup_extent

    if trace.n_workgroups == 0:
        return np.zeros(0, PATH_DTYPE)
    w = _waits(trace)
    # the walk goes back through one agent's events: a lane's when programs have several (its
    # lanes run at once); the view's rows are the trace's, so the waits' rows carry over
    trace = lane_view(trace)
    late = np.nan_to_num(w["producer_late_ns"])
    sel = np.flatnonzero((w["notify_row"] >= 0) & (late > min_late_ns))
    del late
    b_row, b_end, b_nr = w["row"][sel], w["end_ns"][sel], w["notify_row"][sel]
    bw = trace.wg[b_row]
    o = lexorder(bw, b_end)
    b_row, b_end, b_nr, bw = b_row[o], b_end[o], b_nr[o], bw[o]
    del sel, o
    ws, we = workgroup_extent(trace)
    wl = trace.wg_keys[:, 1]
    launches = np.unique(wl) if launch is None else np.unique(wl[wl == launch])
    if launches.size == 0:
        return np.zeros(0, PATH_DTYPE)
    # per launch, the workgroup that ends last (the first such workgroup at a tie)
    lc = np.searchsorted(launches, wl)
    cand = np.flatnonzero((lc < launches.size) & (launches[np.minimum(lc, launches.size - 1)] == wl))
    o = lexorder(lc[cand], -we[cand])
    oc = cand[o]
    g = oc[np.r_[True, lc[oc][1:] != lc[oc][:-1]]]
    t = we[g].copy()
    n_l = g.size
    start_ns = trace.column("start_ns")
    parts = []  # per step: (launch index, order, is_signal, workgroup, start, end, wait row)
    step = 0
    active = np.arange(n_l)
    for _ in range(b_row.size + 1):
        if active.size == 0:
            break
        j = last_at_or_before(bw, b_end, g[active], t[active])
        has = j >= 0
        done = active[~has]
        if done.size:  # no blocking wait before the point: run back to the workgroup's start
            parts.append((done, np.full(done.size, step), np.zeros(done.size, bool), g[done], ws[g[done]], t[done].copy(),
                          np.full(done.size, -1, np.int64)))
        go = active[has]
        if go.size:
            jg = j[has]
            w_end, nrow = b_end[jg], b_nr[jg]
            ns = start_ns[nrow]
            parts.append((go, np.full(go.size, step), np.zeros(go.size, bool), g[go], w_end, t[go].copy(),
                          np.full(go.size, -1, np.int64)))
            parts.append((go, np.full(go.size, step + 1), np.ones(go.size, bool), g[go], ns, w_end, b_row[jg]))
            cont = ns < t[go]  # alignment error would loop: stop rather than go forwards
            g[go[cont]] = trace.wg[nrow[cont]]
            t[go[cont]] = ns[cont]
            go = go[cont]
        active = go
        step += 2
    L, order, sig, gg, s0, e0, wrow = (np.concatenate(x) for x in zip(*parts))
    # time order within each launch: the walk appended segments from the end backwards
    srt = lexorder(L, -order)
    L, sig, gg, s0, e0, wrow = L[srt], sig[srt], gg[srt], s0[srt], e0[srt], wrow[srt]
    n_per = np.bincount(L, minlength=n_l)
    first_of = np.cumsum(n_per) - n_per
    out = np.zeros(L.size, PATH_DTYPE)
    out["launch"] = launches[L]
    out["step"] = n_per[L] - 1 - (np.arange(L.size) - first_of[L])
    out["kind"] = np.where(sig, "signal", "run").astype(object)
    out["rank"], out["program"] = trace.wg_keys[gg, 0], trace.wg_keys[gg, 2]
    out["lane"] = wg_lanes(trace)[gg]
    out["start_ns"], out["end_ns"], out["dur_ns"] = s0, e0, e0 - s0
    out["wait_row"] = wrow
    region = np.full(L.size, "", dtype=object)
    if sig.any():
        region[sig] = trace.names_of(trace.column("region")[wrow[sig]])
    run = np.flatnonzero(~sig)
    if run.size:
        region[run] = _dominant_regions(trace, gg[run], s0[run], e0[run])
    out["region"] = region
    return out


def _clipped(trace: Trace, rows: np.ndarray, g: np.ndarray, s0: np.ndarray, e0: np.ndarray):
    """The events ``rows`` (sorted) of each segment's workgroup ``g`` over [s0, e0]: ``(segment,
    row, time inside the segment)`` per (segment, event) pair, vectorised."""
    # (rows are in workgroup order: bounded by the workgroups' first rows, no workgroup per row)
    first = _spans.workgroup_starts(trace)
    lo = first[g]
    hi = np.where(g + 1 < first.size, first[np.minimum(g + 1, first.size - 1)], trace.n_events)
    a = np.searchsorted(rows, lo, side="left")
    cnt = np.searchsorted(rows, hi, side="left") - a
    total = int(cnt.sum())
    seg = np.repeat(np.arange(g.size), cnt)
    idx = np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt) + np.repeat(a, cnt)
    r = rows[idx]
    ls, le = trace.column("start_ns")[r], trace.column("end_ns")[r]
    return seg, r, (np.clip(le, s0[seg], e0[seg]) - np.clip(ls, s0[seg], e0[seg])).astype(np.float64)


def _dominant_regions(trace: Trace, g: np.ndarray, s0: np.ndarray, e0: np.ndarray) -> np.ndarray:
    """Per run segment (workgroup ``g`` over [s0, e0]): where most of its time went, in the words
    of :func:`path_region_time` (the totals the report states): a leaf span's region, ``waiting in
    'NAME'``, ``(outside any region)`` (in no span, wait or notify) or :data:`IN_CONTAINERS` (in a
    notify, or a span outside its parts); "" for a segment of no time."""
    from .names import OUTSIDE

    n = g.size
    out = np.full(n, "", dtype=object)
    best = np.zeros(n)
    accounted = np.zeros(n)
    for rows, wait in ((leaf_spans(trace), False), (trace.rows_of(EventKind.WAIT), True)):
        seg, r, d = _clipped(trace, rows, g, s0, e0)
        if not r.size:
            continue
        rc, rids = dense_codes(trace.column("region")[r])
        R = rids.size
        tot = np.bincount(seg * R + rc, weights=d, minlength=n * R).reshape(n, R)
        accounted += tot.sum(axis=1)
        j = np.argmax(tot, axis=1)
        top = tot[np.arange(n), j]
        win = top > best
        names = trace.names_of(rids[j[win]])
        out[win] = [f"waiting in '{x}'" for x in names] if wait else names
        best[win] = top[win]
    origin = trace.origin_ns
    blocks = _spans.coverage(trace, g)
    covered = _spans.covered(blocks, g, e0 - origin) - _spans.covered(blocks, g, s0 - origin)
    outside = (e0 - s0) - covered
    inside = covered - accounted  # (in notifies and enclosing spans)
    out[(inside > best) & (inside > outside) & (inside > 0)] = IN_CONTAINERS
    out[(outside > best) & (outside >= inside) & (outside > 0)] = OUTSIDE
    return out


def critical_path_summary(path: np.ndarray) -> np.ndarray:
    """Time on the critical path per launch, rank and kind (``run`` / ``signal``), largest first."""

    if path.size == 0:
        return np.zeros(0, [("launch", "<i4"), ("rank", "<i4"), ("kind", "O"), ("dur_ns", "<i8"), ("share", "<f8")])
    kind_code = (path["kind"] == "signal").astype(np.int64)
    inv, keys = group_index(path["launch"], path["rank"], kind_code)
    G = keys.shape[0]
    out = np.zeros(G, [("launch", "<i4"), ("rank", "<i4"), ("kind", "O"), ("dur_ns", "<i8"), ("share", "<f8")])
    out["launch"], out["rank"] = keys[:, 0], keys[:, 1]
    out["kind"] = np.where(keys[:, 2] == 1, "signal", "run").astype(object)
    out["dur_ns"] = group_sum(inv, path["dur_ns"], G).astype(np.int64)
    linv, lk = np.unique(path["launch"], return_inverse=True)
    tot = np.bincount(lk.reshape(-1), weights=path["dur_ns"].astype(np.float64))
    out["share"] = out["dur_ns"] / np.maximum(tot[np.searchsorted(linv, out["launch"])], 1)
    return out[np.argsort(-out["dur_ns"], kind="stable")]


#: Critical-path time in a span that holds other events (outside its parts), or in a notify.
IN_CONTAINERS = "(in notifies and enclosing spans)"


def path_region_time(trace: Trace, path: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the run segments of a critical path (rows of :func:`critical_path`) spent their
    time, exactly: ``(names, ns)`` over leaf span regions, waits (named ``"waiting in 'NAME'"``)
    and ``(outside any region)``, largest first. A segment holding a wait that timed out shows
    that wait, not the span beside it."""
    from .names import OUTSIDE

    run = path[path["kind"] == "run"]
    if run.size == 0:
        return np.zeros(0, object), np.zeros(0)
    trace = lane_view(trace)  # (the path's agents: lanes when programs have several)
    gk = np.c_[trace.wg_keys, wg_lanes(trace)]
    m1, m2, m3 = (int(gk[:, c].max()) + 1 for c in (1, 2, 3))
    code = ((gk[:, 0] * m1 + gk[:, 1]) * m2 + gk[:, 2]) * m3 + gk[:, 3]
    order = np.argsort(code, kind="stable")
    q = ((run["rank"].astype(np.int64) * m1 + run["launch"]) * m2 + run["program"]) * m3 + run["lane"]
    g = order[np.clip(np.searchsorted(code[order], q), 0, code.size - 1)]
    s0, e0 = run["start_ns"].astype(np.int64), run["end_ns"].astype(np.int64)
    waits = trace.rows_of(EventKind.WAIT)
    names_out, ns_out = [], []
    # leaf spans and waits (each sorted: looked up apart, no union of millions of rows)
    parts = [_clipped(trace, rows, g, s0, e0)[1:] for rows in (leaf_spans(trace), waits)]
    r = np.concatenate([p[0] for p in parts])
    d = np.concatenate([p[1] for p in parts])
    if r.size:
        is_wait = np.repeat([0, 1], [parts[0][0].size, parts[1][0].size])
        key = trace.column("region")[r].astype(np.int64) * 2 + is_wait
        u, inv = np.unique(key, return_inverse=True)
        by = np.bincount(inv.reshape(-1), weights=d, minlength=u.size)
        for k, v in zip(u.tolist(), by.tolist()):
            if v > 0:
                nm = trace.region_name(k >> 1)
                names_out.append(f"waiting in '{nm}'" if k & 1 else nm)
                ns_out.append(v)
    origin = trace.origin_ns
    blocks = _spans.coverage(trace, g)
    covered_ns = float(np.sum(_spans.covered(blocks, g, e0 - origin) - _spans.covered(blocks, g, s0 - origin)))
    outside = float((e0 - s0).sum()) - covered_ns
    if outside > 0:
        names_out.append(OUTSIDE)
        ns_out.append(outside)
    rest = covered_ns - float(np.sum(ns_out[: len(ns_out) - (outside > 0)]))
    if rest > 0:  # in a span that holds other events, or in a notify
        names_out.append(IN_CONTAINERS)
        ns_out.append(rest)
    ns = np.array(ns_out)
    o = np.argsort(-ns, kind="stable")
    return np.array(names_out, dtype=object)[o], ns[o]
