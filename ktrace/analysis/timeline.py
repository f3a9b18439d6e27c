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
from ..keys import group_index, group_sum, lexorder
from ..schema import EventKind
from . import spans as _spans
from .intervals import intersect_length, merge_intervals
from .stalls import _wcol
from .stalls import waits as _waits
from .trace import Trace

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
    """Rows of spans with no other event of their workgroup starting inside them."""
    return trace.cached(("leaf",), lambda: _leaf_spans(trace))


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
    # by workgroup, start, and longer first at a tie: a container comes before what it holds.
    # An event has a child when the next one in that order is of its workgroup and starts
    # before it ends. (The old second test, an event at the same start ending no later inside
    # one of nonzero length, implies the first and adds nothing.)
    lo = int(s.min())
    size = int(e.max()) - lo + 1
    has_child = np.zeros(n, bool)
    if max(size, 1) * (int(wg.max()) + 1) < keys.KEY_LIMIT:
        ks = wg * size + (s - lo)
        o = lexorder(ks, s - e)
        ke_o = wg[o] * size + (e[o] - lo)
        # (a later workgroup's packed start is beyond any end of this one)
        np.less(ks[o[1:]], ke_o[:-1], out=has_child[:-1])
    else:
        o = lexorder(wg, s, s - e)
        so, eo, go = s[o], e[o], wg[o]
        has_child[:-1] = (go[1:] == go[:-1]) & (so[1:] < eo[:-1])
    leaf = np.zeros(n, bool)
    leaf[o[~has_child]] = True
    leaf &= is_span
    return rows[leaf]


def event_class(trace: Trace, classes: RegionClasses = RegionClasses()) -> np.ndarray:
    """Per event: 0 not counted, 1 communication, 2 compute (leaf spans, waits and notifies)."""
    kind = trace.column("kind")
    cls = np.zeros(kind.size, np.int8)
    cls[(kind == int(EventKind.WAIT)) | (kind == int(EventKind.NOTIFY))] = 1
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
        ("kernel_ns", "<i8"),
        ("comm_ns", "<i8"),  # union of communication intervals over the rank's workgroups
        ("compute_ns", "<i8"),
        ("hidden_ns", "<i8"),  # communication while some workgroup of the rank computed
        ("exposed_ns", "<i8"),  # communication with no compute on the rank
        ("hidden_frac", "<f8"),
        ("wait_ns", "<i8"),  # union of the rank's waits
        ("wait_exposed_ns", "<i8"),  # of those, with no compute running
    ]
)


def overlap(trace: Trace, classes: RegionClasses = RegionClasses()) -> np.ndarray:
    """Per rank and launch, communication hidden under compute and exposed.

    Returns:
        A table of ``OVERLAP_DTYPE``.
    """
    cls = event_class(trace, classes)
    s, e, kind = trace.column("start_ns"), trace.column("end_ns"), trace.column("kind")
    if s.size == 0:
        return np.zeros(0, OVERLAP_DTYPE)
    first, r, l = _spans.rank_launch_starts(trace)
    bounds = np.r_[first, s.size]
    out = np.zeros(first.size, OVERLAP_DTYPE)
    for i in range(first.size):  # one pass per (rank, launch): the table is grouped that way
        a, b = bounds[i], bounds[i + 1]
        c, ss, ee, kk = cls[a:b], s[a:b], e[a:b], kind[a:b]
        comm = merge_intervals(ss[c == 1], ee[c == 1])
        comp = merge_intervals(ss[c == 2], ee[c == 2])
        wt = merge_intervals(ss[kk == int(EventKind.WAIT)], ee[kk == int(EventKind.WAIT)])
        cl = int((comm[1] - comm[0]).sum())
        hid = intersect_length(comm, comp)
        wl = int((wt[1] - wt[0]).sum())
        out[i] = (r[i], l[i], int(ee.max() - ss.min()), cl, int((comp[1] - comp[0]).sum()), hid, cl - hid,
                  hid / cl if cl else np.nan, wl, wl - intersect_length(wt, comp))
    return out


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
    out["start_ns"], out["end_ns"], out["dur_ns"] = kt["start_ns"], kt["end_ns"], kt["kernel_ns"]
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
        ("start_ns", "<i8"),
        ("end_ns", "<i8"),
        ("dur_ns", "<i8"),
        ("region", "O"),  # run: the region with the most time in the segment; signal: the wait's name
        ("wait_row", "<i8"),  # signal: the wait; run: -1
    ]
)


def critical_path(trace: Trace, launch: int | None = None, *, min_late_ns: int = 0) -> np.ndarray:
    """The cross-rank critical path of each launch (or of one) through notify -> wait edges.

    From the event that ends last in the launch, go back through its workgroup to the latest wait
    whose producer was late (``producer_late_ns > min_late_ns``) and that ended before the
    current point; jump to the producer's notify, and go on from there; stop at a workgroup's
    first event. One step per cross-rank edge: no loop over events.

    Returns:
        A table of ``PATH_DTYPE``, segments in time order within each launch.
    """
    w = _waits(trace)
    # the blocking waits as plain columns (no copy of the waits table), by workgroup and end
    late = np.nan_to_num(_wcol(trace, w, "producer_late_ns"))
    sel = np.flatnonzero((_wcol(trace, w, "notify_row") >= 0) & (late > min_late_ns))
    del late
    b_row, b_end, b_nr = _wcol(trace, w, "row")[sel], _wcol(trace, w, "end_ns")[sel], _wcol(trace, w, "notify_row")[sel]
    bw = trace.wg[b_row]
    o = lexorder(bw, b_end)
    b_row, b_end, b_nr, bw = b_row[o], b_end[o], b_nr[o], bw[o]
    del sel, o
    counts = np.bincount(bw, minlength=trace.n_workgroups)
    lo = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    from .stalls import workgroup_extent

    ws, we = workgroup_extent(trace)
    launches = np.unique(trace.wg_keys[:, 1]) if launch is None else np.array([launch])
    segs: list[tuple] = []
    lr = leaf_spans(trace)
    leaf = (trace.wg[lr], trace.column("start_ns")[lr], trace.column("end_ns")[lr], trace.column("region")[lr])
    for ln in launches.tolist():
        in_launch = np.flatnonzero(trace.wg_keys[:, 1] == ln)
        if in_launch.size == 0:
            continue
        g = int(in_launch[np.argmax(we[in_launch])])
        t = int(we[g])
        path: list[tuple] = []
        for _ in range(b_row.size + 1):
            a, b = lo[g], lo[g] + counts[g]
            j = a + np.searchsorted(b_end[a:b], t, side="right") - 1
            if j >= a:
                w_end = int(b_end[j])
                path.append(("run", g, w_end, t, -1))
                nrow = int(b_nr[j])
                ns = int(trace.column("start_ns")[nrow])
                path.append(("signal", g, ns, w_end, int(b_row[j])))
                if ns >= t:  # alignment error would loop: stop rather than go forwards
                    break
                g, t = int(trace.wg[nrow]), ns
                continue
            path.append(("run", g, int(ws[g]), t, -1))
            break
        path.reverse()
        for i, (kind, gg, s0, e0, wrow) in enumerate(path):
            rank, _, prog = trace.wg_keys[gg].tolist()
            if kind == "signal":
                region = trace.region_name(trace.column("region")[wrow])
            else:
                region = _dominant_region(trace, leaf, gg, s0, e0)
            segs.append((ln, len(path) - 1 - i, kind, rank, prog, s0, e0, e0 - s0, region, wrow))
    out = np.zeros(len(segs), PATH_DTYPE)
    for i, sgm in enumerate(segs):
        out[i] = sgm
    return out


def _dominant_region(trace: Trace, leaf: tuple, g: int, s0: int, e0: int) -> str:
    """The leaf span region of workgroup ``g`` with the most time inside [s0, e0]."""
    wgl, ls, le, lr = leaf
    a, b = np.searchsorted(wgl, g), np.searchsorted(wgl, g, side="right")
    if b <= a:
        return ""
    s = np.clip(ls[a:b], s0, e0)
    e = np.clip(le[a:b], s0, e0)
    d = (e - s).astype(np.float64)
    if not (d > 0).any():
        return ""
    u, inv = np.unique(lr[a:b], return_inverse=True)
    tot = np.bincount(inv.reshape(-1), weights=d)
    return trace.region_name(u[np.argmax(tot)])


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
