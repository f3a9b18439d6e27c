"""Workgroup load: how busy each workgroup was, how uneven that was, and why.

A workgroup is one program of one launch on one rank. Its lifetime runs from its first event's
start to its last event's end; ``wait_ns`` is the time its waits spun and ``busy_ns`` the rest
(a program traced per lane is busy as long as its busiest lane: its lanes wait and work at once);
``held_ns`` is the part of that in which it held notifies back after being ready, beyond what
the other ranks take (``stalls.notify_holds``: the straggler analysis reports that time as late
notifies, so it is not counted again as slow work), ``slow_ns`` the part its slow rounds took
beyond its usual (``stalls.notify_work``: reported as a straggler) and ``work_ns`` = ``busy_ns`` -
``held_ns`` - ``slow_ns``.
Its work items are its leaf spans (spans with no other event inside: one per tile, row or
token), or the spans of one chosen work region.

Outliers are found among workgroups of the same role (by default the same kernel, on every
rank; optionally also the same dominant region, for kernels whose programs are specialised): a
workgroup whose work time (or wait time) is above ``(1 + min_excess)`` x the role's median and more than
``z`` robust standard deviations (1.4826 x the median absolute deviation) above it. For each
outlier the region that made it slow is the one where it spent the most time beyond the role's
median for that region, and its cause is ``work`` when it is slow mostly from work time
(uneven work distribution) or ``waiting`` when mostly from waiting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schema import EventKind
from .spans import workgroup_starts
from .stalls import hold_columns, notify_work, workgroup_extent
from ..keys import dense_codes, distinct, group_count, group_index, group_median, group_sum
from .trace import ColumnTable, Sparse, Trace, lane_view


@dataclass(frozen=True)
class LoadConfig:
    """How workgroup load is measured.

    Attributes:
        work_region: the region name whose spans count as work items (None: every leaf span,
            whatever its region, is one item).
        z: robust z-score above the role median that makes an outlier.
        min_excess: an outlier also exceeds the role median by at least this fraction.
        roles: which workgroups are compared with each other: ``"kernel"`` (every workgroup of
            the same kernel, on every rank) or ``"region"`` (same kernel and the same dominant
            span region: for kernels whose programs are specialised, e.g. producers and
            consumers). A program that does two kinds of work (a combine program that runs the
            experts on received rows and then sums its own tokens) is overloaded precisely when
            it has more of them than the others, so by default the kernel is the role, split by
            the part its programs take in hand-offs where they differ (producers, consumers).
    """

    work_region: str | None = None
    z: float = 3.5
    min_excess: float = 0.25
    roles: str = "kernel"

    def __post_init__(self):
        if not self.z > 0:
            raise ValueError(f"LoadConfig.z must be positive, got {self.z}")
        if not self.min_excess >= 0:
            raise ValueError(f"LoadConfig.min_excess must be >= 0, got {self.min_excess}")
        if self.roles not in ("kernel", "region"):
            raise ValueError(f"LoadConfig.roles must be 'kernel' or 'region', got {self.roles!r}")
        if self.work_region is not None and not (isinstance(self.work_region, str) and self.work_region):
            raise ValueError(f"LoadConfig.work_region must be a non-empty name or None, got {self.work_region!r}")


WORKGROUP_DTYPE = np.dtype(
    [
        ("rank", "<i4"),
        ("launch", "<i4"),
        ("program", "<i4"),
        ("sm", "<i8"),
        ("start_ns", "<i8"),
        ("end_ns", "<i8"),
        ("lifetime_ns", "<i8"),
        ("busy_ns", "<i8"),  # lifetime - wait_ns
        ("wait_ns", "<i8"),
        ("held_ns", "<i8"),  # time it held notifies back beyond the other ranks' (stalls.notify_holds)
        ("slow_ns", "<i8"),  # time its slow rounds took beyond its usual (stalls.notify_work: a straggler's)
        ("work_ns", "<i8"),  # busy_ns - held_ns - slow_ns: what outliers are judged on
        ("work_items", "<i8"),
        ("n_events", "<i8"),
        ("role", "O"),
        ("overloaded", "?"),  # busy-time outlier: more work (or slower work) than its role's median
        ("wait_outlier", "?"),  # wait-time outlier: slowed by waiting on others
        ("outlier", "?"),  # either
        ("busy_z", "<f8"),
        ("wait_z", "<f8"),
        ("cause", "O"),  # "work" | "waiting" | ""
        ("top_region", "O"),  # for outliers: the region with the most time beyond the role's median
        ("top_region_excess_ns", "<f8"),
    ]
)


def work_region_id(trace: Trace, config: LoadConfig = LoadConfig()) -> int | None:
    """The region id counted as work items (see :class:`LoadConfig`), None if no spans."""
    spans = trace.rows_of(EventKind.SPAN)
    if config.work_region is not None:
        for rid, name in trace.regions.items():
            if name == config.work_region:
                return int(rid)
        from ..schema import region_id

        return region_id(config.work_region)
    if spans.size == 0:
        return None
    u, c = np.unique(trace.column("region")[spans], return_counts=True)
    return int(u[np.argmax(c)])


def region_time(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Time per region and workgroup of leaf spans and waits (by the wait's name), the events
    that say where time went (containers would cover their parts): ``(matrix (W, R) ns, ids (R,))``
    (the matrix uint32 when every sum fits, else float64: convert before summing over rows)."""
    return trace.cached(("region_time",), lambda: _region_time(trace))


def _region_time(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    from .timeline import leaf_spans

    reg, s, e, wg = trace.column("region"), trace.column("start_ns"), trace.column("end_ns"), trace.wg
    W = trace.n_workgroups
    # leaf spans and waits, a block of rows at a time (the temporaries of all of them at once
    # would be several times the result)
    blocks = [p[a : a + _BLOCK] for p in (leaf_spans(trace), trace.rows_of(EventKind.WAIT)) for a in range(0, p.size, _BLOCK)]
    if not blocks:
        return np.zeros((W, 0)), np.zeros(0, reg.dtype)
    if int(reg.max()) < 1 << 25:  # region ids of a capture are 24-bit: a table of those present
        present = np.zeros(int(reg.max()) + 1, bool)
        for b in blocks:
            present[reg[b]] = True
        rids = np.flatnonzero(present).astype(reg.dtype)
    else:  # (a table given with wider ids)
        rids = np.unique(np.concatenate([np.unique(reg[b]) for b in blocks]))
    R = rids.size
    m = np.zeros((W, R))
    for b in blocks:
        g = wg[b].astype(np.int64)
        w0, w1 = int(g.min()), int(g.max()) + 1  # (rows in order: a block is a run of workgroups)
        g -= w0
        g *= R
        g += np.searchsorted(rids, reg[b])
        dur = (e[b] - s[b]).astype(np.float64)
        m[w0:w1] += np.bincount(g, weights=dur, minlength=(w1 - w0) * R).reshape(w1 - w0, R)
    # whole nanoseconds: held as uint32 where every sum fits (exact, half the memory)
    return (m.astype(np.uint32) if m.size and 0 <= float(m.min()) and float(m.max()) < 2**32 else m), rids


#: Rows per block in :func:`region_time`.
_BLOCK = 1 << 20


def wait_regions(trace: Trace) -> np.ndarray:
    """The region ids the trace's waits name, sorted (cached)."""
    return trace.cached(("wait_regions",), lambda: distinct(trace.at(EventKind.WAIT, "region")))


def role_region_medians(trace: Trace, rinv: np.ndarray, g: int) -> np.ndarray:
    """Per region (a column of :func:`region_time`), the median time of the workgroups of role
    ``g`` (``rinv``: each workgroup's role), a column at a time (no copy of the role's rows);
    cached per role of that ``rinv`` (the outliers' top regions and the uneven-work causes both
    read them)."""
    def make():
        m, rids = region_time(trace)
        members = rinv == g
        return rinv, np.array([np.median(m[members, j]) for j in range(rids.size)])

    return trace.cached(("role_region_median", id(rinv), int(g)), make)[1]  # (rinv kept: its id stays its own)


def _kernel_codes(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per workgroup, a code into the sorted kernel names (object array) of the capture: one name
    lookup per (rank, launch), not per workgroup (cached)."""
    def build():
        k = trace.wg_keys
        if k.shape[0] == 0:
            return np.zeros(0, np.int64), np.zeros(0, object)
        inv, pairs = group_index(k[:, 0], k[:, 1])
        names = [trace.kernel_name(r, l) if trace.kernels else "?" for r, l in pairs.tolist()]
        uniq = sorted(set(names))
        code_of = {n: i for i, n in enumerate(uniq)}
        pair_code = np.array([code_of[n] for n in names], np.int64)
        return pair_code[inv], np.array(uniq, dtype=object)

    return trace.cached(("kernel_codes",), build)


#: A workgroup's part in the hand-offs of its kernel: whether it notifies (2) and whether it waits (1).
HANDOFF_ROLES = ("without hand-offs", "consumers", "producers", "producers and consumers")


def _handoff_roles(trace: Trace, kcode: np.ndarray, knames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Roles by kernel, split by the part a workgroup takes in hand-offs where the kernel's
    programs are specialised (producer programs that only notify, consumer programs that only
    wait: each compared with its own kind); a kernel whose programs both notify and wait keeps
    one role, its name."""
    W = kcode.size
    if W == 0:
        return kcode, knames
    nrows = trace.rows_of(EventKind.NOTIFY)
    part = 2 * (np.bincount(trace.wg[nrows], minlength=W) > 0) + \
        (np.bincount(trace.wg[trace.rows_of(EventKind.WAIT)], minlength=W) > 0)
    K = knames.size
    seen = np.zeros((K, 4), bool)
    seen[kcode, part] = True
    # split only kernels whose programs are specialised: some only notify, others only wait
    # (a kernel whose programs do both, or vary in how much, keeps one role)
    mixed = seen[:, 1] & seen[:, 2] & ~seen[:, 3]
    # ... or programs that all notify and wait, each kind at call sites of its own (a producer
    # that waits for credits and a consumer that returns them): compared each with its kind
    sites, site_names = _notify_sites(trace, nrows, W)
    both = (part == 3) & ~mixed[kcode]
    n_kinds = np.zeros(K, np.int64)
    if both.any():
        kk = group_index(kcode[both], sites[both])[1]  # (the distinct (kernel, site) pairs)
        n_kinds = np.bincount(kk[:, 0], minlength=K)
    split = both & (n_kinds[kcode] > 1)
    S = max(len(site_names), 1)
    key = (kcode * 4 + np.where(mixed[kcode], part, 0)) * S + np.where(split, sites, 0)
    inv, u = dense_codes(key)  # (a table of the few keys present: no sort of every workgroup)

    def name(k):
        kern, rest = divmod(k, 4 * S)
        p, site = divmod(rest, S)
        if mixed[kern]:
            return f"{knames[kern]} {HANDOFF_ROLES[p]}"
        if n_kinds[kern] > 1 and site > 0:
            return f"{knames[kern]} {ROLE_SITES} {site_names[site]}"
        return knames[kern]

    names = np.array([name(k) for k in u.tolist()], dtype=object)
    o = np.argsort(names, kind="stable")  # (sorted names, as the codes of a column are)
    rank_of = np.empty(o.size, np.int64)
    rank_of[o] = np.arange(o.size)
    return rank_of[inv.reshape(-1)], names[o]


#: How a role of programs that notify at call sites of their own is named: "<kernel> notifying at 'ready'".
ROLE_SITES = "notifying at"


def _notify_sites(trace: Trace, nrows: np.ndarray, W: int) -> tuple[np.ndarray, list[str]]:
    """Per workgroup, a code of the set of regions it notifies at (0: none), and each code's
    regions as text (``'ready', 'free'``)."""
    if nrows.size == 0:
        return np.zeros(W, np.int64), [""]
    g, pairs = group_index(trace.wg[nrows], trace.column("region")[nrows].astype(np.int64))  # (workgroup, region)
    # each workgroup's regions, as one row of a sorted table: (workgroup, its k-th region)
    first = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0]])
    n_per = np.diff(np.r_[first, pairs.shape[0]])
    width = int(n_per.max())
    table = np.full((first.size, width), -1, np.int64)
    table[np.repeat(np.arange(first.size), n_per), np.arange(pairs.shape[0]) - np.repeat(first, n_per)] = pairs[:, 1]
    # (the distinct rows in order, as ``np.unique(axis=0)`` gives them: a packed 1-D key, not a
    # sort of rows as records, which was most of a report's roles at millions of workgroups)
    code, sets = group_index(*table.T)
    out = np.zeros(W, np.int64)
    out[pairs[first, 0]] = code.reshape(-1) + 1
    names = [""] + [", ".join(repr(trace.region_name(r)) for r in row if r >= 0) for row in sets.tolist()]
    return out, names


def notify_regions(trace: Trace, wg_id: int) -> list[str]:
    """The names of the regions workgroup ``wg_id`` notifies at, sorted."""
    n = trace.rows_of(EventKind.NOTIFY)
    mine = n[trace.wg[n] == int(wg_id)]
    return sorted({trace.region_name(r) for r in np.unique(trace.column("region")[mine]).tolist()})


def kernel_names(trace: Trace) -> np.ndarray:
    """Per workgroup, the name of its kernel (object array; ``?`` when the capture does not say)."""
    codes, names = _kernel_codes(trace)
    return names[codes] if names.size else np.zeros(0, object)


def workgroups(trace: Trace, config: LoadConfig = LoadConfig()) -> ColumnTable:
    """Per workgroup: lifetime, busy and wait time, work items, role, and whether it is an outlier.

    Returns:
        A :class:`ColumnTable` of ``WORKGROUP_DTYPE``'s columns in (rank, launch, program) order
        (``role``, ``cause`` and ``top_region`` are made when read: a name per workgroup).
    """
    W = trace.n_workgroups
    k = trace.wg_keys
    ws, we = workgroup_extent(trace)
    cols = {"rank": k[:, 0], "launch": k[:, 1], "program": k[:, 2], "start_ns": ws, "end_ns": we}
    if W == 0:
        z = np.zeros(0)
        return ColumnTable(WORKGROUP_DTYPE, {n: cols.get(n, z) for n in WORKGROUP_DTYPE.names})
    cols["sm"] = trace.column("hw")[workgroup_starts(trace)]
    wr = trace.rows_of(EventKind.WAIT)
    wdur = trace.at(EventKind.WAIT, "end_ns") - trace.at(EventKind.WAIT, "start_ns")
    v = lane_view(trace)
    if v is trace:
        wait = cols["wait_ns"] = np.minimum(np.bincount(trace.wg[wr], weights=wdur, minlength=W).astype(np.int64), we - ws)
    else:
        # the lanes of a program wait at the same time as others work: the program is busy as
        # long as its busiest lane (its first start to its last end, less its own waits)
        vs, ve = workgroup_extent(v)
        lane_busy = np.maximum((ve - vs) - np.bincount(v.wg[wr], weights=wdur, minlength=v.n_workgroups).astype(np.int64), 0)
        busy_p = np.zeros(W, np.int64)
        np.maximum.at(busy_p, trace.wg[workgroup_starts(v)], lane_busy)
        wait = cols["wait_ns"] = (we - ws) - np.minimum(busy_p, we - ws)
    del wdur
    busy = (we - ws) - wait
    # time spent holding notifies back (a late producer, reported as a straggler) is not work
    hold = hold_columns(trace)
    hx = np.nan_to_num(np.maximum(hold["held_excess_ns"], 0.0))
    held = cols["held_ns"] = np.minimum(np.bincount(trace.wg[hold["row"]], weights=hx, minlength=W).astype(np.int64), busy)
    # nor is the time a straggler's slow rounds took beyond its usual (reported as a straggler):
    # a workgroup slow on a few rounds is not one with more work
    nw = notify_work(trace)
    sx = np.where(nw["slow"], nw["work_excess_ns"], 0.0)
    slow = cols["slow_ns"] = np.minimum(np.bincount(trace.wg[nw["row"]], weights=sx, minlength=W).astype(np.int64), busy - held)
    cols["work_ns"] = busy - held - slow
    del busy
    spans = trace.rows_of(EventKind.SPAN)
    if config.work_region is not None:
        wid = work_region_id(trace, config)
        cols["work_items"] = np.bincount(trace.wg[spans[trace.column("region")[spans] == wid]], minlength=W)
    else:  # every leaf span is an item of work (a row sent, a tile computed, a token summed)
        from .timeline import leaf_spans

        leaf = leaf_spans(trace)
        cols["work_items"] = np.bincount(trace.wg[leaf[trace.column("kind")[leaf] == int(EventKind.SPAN)]], minlength=W)
    m, rids = region_time(trace)
    if config.roles == "region":  # kernel + the leaf span region (not a wait) with the most time
        kern = kernel_names(trace)
        is_wait_col = np.isin(rids, wait_regions(trace))
        is_wait_col &= ~np.isin(rids, dense_codes(trace.column("region")[spans])[1])
        if rids.size:
            ms = np.where(is_wait_col[None, :], -1.0, m)
            dom_name = trace.names_of(rids[np.argmax(ms, axis=1)])
            dom_name[ms.max(axis=1) <= 0] = "(no spans)"
            del ms
        else:
            dom_name = np.full(W, "(no spans)", object)
        role = np.array([f"{a}:{b}" for a, b in zip(kern.tolist(), dom_name.tolist())], dtype=object)
        rkeys, rinv = np.unique(role, return_inverse=True)
        rinv = rinv.reshape(-1)
    else:
        rinv, rkeys = _handoff_roles(trace, *_kernel_codes(trace))
    G = rkeys.size
    n_role = group_count(rinv, G)[rinv] >= 3
    robust = {}  # per role, the median and the scaled median absolute deviation of a column

    def z_of(col):  # robust z-score of each workgroup's value of ``col`` within its role
        med_g, mad_g = robust[col]

        def make(idx):
            r = rinv[idx]
            x, med, mad = cols[col][idx].astype(np.float64), med_g[r], mad_g[r]
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(mad > 0, (x - med) / np.where(mad > 0, mad, 1), np.where(x > med, np.inf, 0.0))
        return make

    for col, flag, z in (("work_ns", "overloaded", "busy_z"), ("wait_ns", "wait_outlier", "wait_z")):
        x = cols[col].astype(np.float64)
        med_g = group_median(rinv, x, G)
        med = med_g[rinv]
        dev = np.abs(x - med)
        mad_g = group_median(rinv, dev, G) * 1.4826
        del dev
        robust[col] = (med_g, mad_g)
        cols[flag] = (x > med * (1 + config.min_excess)) & (z_of(col)(slice(None)) > config.z) & n_role
        del x, med
    outlier = cols["outlier"] = cols["overloaded"] | cols["wait_outlier"]
    oi = np.flatnonzero(outlier)
    # for outliers: the region with the most time beyond the role's median (a handful of roles)
    top = np.full(oi.size, "", dtype=object)
    top_ex = np.full(oi.size, np.nan)
    if oi.size and rids.size:
        for g in np.unique(rinv[oi]).tolist():
            med_r = role_region_medians(trace, rinv, g)
            sel = np.flatnonzero(rinv[oi] == g)
            ex = m[oi[sel]] - med_r
            j = np.argmax(ex, axis=1)
            top[sel] = trace.names_of(rids[j])
            top_ex[sel] = ex[np.arange(sel.size), j]
    overloaded = cols["overloaded"]

    def role(idx):  # the workgroups it is compared with
        c = rinv[idx]
        return rkeys[c] if rkeys.size else np.full(c.size, "?", object)

    def cause(idx):  # an outlier is slow from work unless it also waited more than it worked extra
        return np.where(outlier[idx], np.where(overloaded[idx], "work", "waiting"), "").astype(object)

    def n_events(idx):
        return np.diff(np.r_[workgroup_starts(trace), trace.n_events])[idx]

    return ColumnTable(WORKGROUP_DTYPE, cols,
                       {"role": role, "cause": cause, "top_region": Sparse(oi, top, "", W),
                        "top_region_excess_ns": Sparse(oi, top_ex, np.nan, W), "n_events": n_events,
                        "busy_z": z_of("work_ns"), "wait_z": z_of("wait_ns")},
                       {"lifetime_ns": lambda idx: we[idx] - ws[idx], "busy_ns": lambda idx: we[idx] - ws[idx] - wait[idx]},
                       codes={"role": (rinv, rkeys)} if rkeys.size else None)


IMBALANCE_DTYPE = np.dtype(
    [
        ("rank", "<i4"),  # -1: all ranks of the launch together
        ("launch", "<i4"),
        ("n_workgroups", "<i8"),
        ("busy_mean_ns", "<f8"),
        ("busy_max_ns", "<f8"),
        ("max_over_mean", "<f8"),
        ("cv", "<f8"),  # coefficient of variation of busy time
        ("wait_mean_ns", "<f8"),
        ("finish_median_ns", "<f8"),
        ("finish_last_ns", "<i8"),
        ("tail_ns", "<f8"),  # last finish - median finish
        ("tail_program", "<i4"),  # the last workgroup to finish
        ("tail_rank", "<i4"),
        ("tail_from_work_ns", "<f8"),  # its busy time beyond the mean
        ("tail_from_wait_ns", "<f8"),  # its wait time beyond the mean
        ("cause", "O"),  # what the tail comes from: "work" | "waiting" | "start" (it began late)
        ("n_outliers", "<i8"),
    ]
)


def imbalance(trace: Trace, wg: np.ndarray | None = None) -> np.ndarray:
    """Imbalance of busy time across workgroups per (rank, launch), and per launch over all ranks.

    Returns:
        A table of ``IMBALANCE_DTYPE``; rows with ``rank == -1`` take a launch's workgroups of
        every rank together.
    """
    wg = workgroups(trace) if wg is None else wg
    if wg.size == 0:
        return np.zeros(0, IMBALANCE_DTYPE)
    parts = []
    for scope_rank in (True, False):
        keys = [wg["rank"], wg["launch"]] if scope_rank else [wg["launch"]]
        inv, gk = group_index(*keys)
        G = gk.shape[0]
        t = np.zeros(G, IMBALANCE_DTYPE)
        t["rank"] = gk[:, 0] if scope_rank else -1
        t["launch"] = gk[:, 1] if scope_rank else gk[:, 0]
        n = group_count(inv, G)
        t["n_workgroups"] = n
        b = wg["busy_ns"].astype(np.float64)
        mean = group_sum(inv, b, G) / np.maximum(n, 1)
        sq = group_sum(inv, b * b, G) / np.maximum(n, 1)
        std = np.sqrt(np.maximum(sq - mean * mean, 0))
        bmax = np.full(G, -np.inf)
        np.maximum.at(bmax, inv, b)
        t["busy_mean_ns"], t["busy_max_ns"] = mean, bmax
        t["max_over_mean"] = np.where(mean > 0, bmax / np.where(mean > 0, mean, 1), np.nan)
        t["cv"] = np.where(mean > 0, std / np.where(mean > 0, mean, 1), np.nan)
        wmean = group_sum(inv, wg["wait_ns"], G) / np.maximum(n, 1)
        t["wait_mean_ns"] = wmean
        fin_med = group_median(inv, wg["end_ns"], G)
        t["finish_median_ns"] = fin_med
        o = np.lexsort((wg["end_ns"], inv))
        last = o[np.r_[np.flatnonzero(np.diff(inv[o])), o.size - 1]]
        t["finish_last_ns"] = wg["end_ns"][last]
        t["tail_ns"] = wg["end_ns"][last] - fin_med
        t["tail_program"], t["tail_rank"] = wg["program"][last], wg["rank"][last]
        fw = wg["busy_ns"][last] - mean
        fwt = wg["wait_ns"][last] - wmean
        t["tail_from_work_ns"], t["tail_from_wait_ns"] = fw, fwt
        start_med = group_median(inv, wg["start_ns"], G)
        fs = wg["start_ns"][last] - start_med
        t["cause"] = np.where((fs > fw) & (fs > fwt), "start", np.where(fw >= fwt, "work", "waiting")).astype(object)
        t["n_outliers"] = group_sum(inv, wg["outlier"], G).astype(np.int64)
        parts.append(t)
    return np.concatenate(parts)


def per_sm(trace: Trace, wg: np.ndarray | None = None) -> np.ndarray:
    """Busy time, wait time and work items per (rank, SM), summed over launches.

    Returns:
        A table with ``rank``, ``sm``, ``n_workgroups``, ``busy_ns``, ``wait_ns``, ``work_items``,
        sorted by busy time, largest first.
    """
    wg = workgroups(trace) if wg is None else wg
    inv, gk = group_index(wg["rank"], wg["sm"])
    G = gk.shape[0]
    out = np.zeros(G, [("rank", "<i4"), ("sm", "<i8"), ("n_workgroups", "<i8"), ("busy_ns", "<i8"), ("wait_ns", "<i8"), ("work_items", "<i8")])
    out["rank"], out["sm"] = gk[:, 0], gk[:, 1]
    out["n_workgroups"] = group_count(inv, G)
    out["busy_ns"] = group_sum(inv, wg["busy_ns"], G).astype(np.int64)
    out["wait_ns"] = group_sum(inv, wg["wait_ns"], G).astype(np.int64)
    out["work_items"] = group_sum(inv, wg["work_items"], G).astype(np.int64)
    return out[np.argsort(-out["busy_ns"], kind="stable")]
