"""Unions and intersections of time intervals, and running reductions over runs of groups
(vectorised: rows sorted by a group column, each reduction one numpy pass with no loop over groups)."""

from __future__ import annotations

import numpy as np

def union_length(start: np.ndarray, end: np.ndarray) -> int:
    """Total length covered by a set of intervals (ns)."""
    s, e = merge_intervals(start, end)
    return int((e - s).sum())


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint sorted intervals ``(starts, ends)``."""
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    if start.size == 0:
        return start[:0], end[:0]
    o = np.argsort(start, kind="stable")
    s, e = start[o], end[o]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    last = np.r_[idx[1:] - 1, s.size - 1]
    return s[idx], run_end[last]


def intersect_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length of the intersection of two unions of disjoint intervals (from :func:`merge_intervals`)."""
    (as_, ae), (bs, be) = a, b
    if as_.size == 0 or bs.size == 0:
        return 0
    t = np.concatenate([as_, ae, bs, be])
    d_a = np.concatenate([np.ones(as_.size, np.int64), -np.ones(ae.size, np.int64), np.zeros(bs.size + be.size, np.int64)])
    d_b = np.concatenate([np.zeros(as_.size + ae.size, np.int64), np.ones(bs.size, np.int64), -np.ones(be.size, np.int64)])
    o = np.argsort(t, kind="stable")
    t, ca, cb = t[o], np.cumsum(d_a[o]), np.cumsum(d_b[o])
    both = (ca[:-1] > 0) & (cb[:-1] > 0)
    return int((np.diff(t) * both).sum())


# ---------------------------------------------------------------------------------------------
# runs of groups (rows sorted by a group column)
# ---------------------------------------------------------------------------------------------


def segment_starts(group: np.ndarray) -> np.ndarray:
    """Per element of a nondecreasing group column, the index of its group's first element."""
    n = group.size
    if n == 0:
        return np.zeros(0, np.int64)
    first = np.r_[True, group[1:] != group[:-1]]
    idx = np.arange(n, dtype=np.int64)
    return np.maximum.accumulate(np.where(first, idx, 0))


def segmented_cummax(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running maximum of int64 ``values`` restarting at each new value of the nondecreasing
    ``group`` column (one ``maximum.accumulate`` over keys offset per group)."""
    n = values.size
    if n == 0:
        return values.copy()
    code = np.cumsum(np.r_[False, group[1:] != group[:-1]], dtype=np.int64)
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if span * (int(code[-1]) + 1) < (1 << 62):
        key = code * span + (values - lo)
        return np.maximum.accumulate(key) - code * span + lo
    out = np.empty_like(values)  # too wide to pack: per run of groups that fits
    starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    per = max(1, (1 << 62) // span - 1)
    for a in range(0, starts.size, per):
        i0 = starts[a]
        i1 = starts[a + per] if a + per < starts.size else n
        c = code[i0:i1] - code[i0]
        out[i0:i1] = np.maximum.accumulate(c * span + (values[i0:i1] - lo)) - c * span + lo
    return out


def segmented_cumsum(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running sum of ``values`` restarting at each new value of the nondecreasing ``group``."""
    if values.size == 0:
        return values.copy()
    c = np.cumsum(values)
    s = segment_starts(group)
    return c - c[s] + values[s]


def last_at_or_before(g_sorted: np.ndarray, t_sorted: np.ndarray, g_q: np.ndarray, t_q: np.ndarray) -> np.ndarray:
    """Per query (group, time): index of the last element of the same group, in arrays sorted by
    (group, time), whose time is <= the query's; -1 if none. Packed keys, one binary search."""
    if g_sorted.size == 0 or g_q.size == 0:
        return np.full(g_q.size, -1, np.int64)
    lo = min(int(t_sorted.min()), int(t_q.min()))
    span = max(int(t_sorted.max()), int(t_q.max())) - lo + 1
    top = max(int(g_sorted.max()), int(g_q.max())) + 1
    if span * top < (1 << 62):
        ks = g_sorted.astype(np.int64) * span + (t_sorted - lo)
        kq = g_q.astype(np.int64) * span + (t_q - lo)
        k = np.searchsorted(ks, kq, side="right") - 1
    else:  # per group: the group's range, then the time within it
        a = np.searchsorted(g_sorted, g_q, side="left")
        b = np.searchsorted(g_sorted, g_q, side="right")
        k = np.empty(g_q.size, np.int64)
        for i in range(g_q.size):  # rare (times too wide to pack): one search per query
            k[i] = a[i] + np.searchsorted(t_sorted[a[i]:b[i]], t_q[i], side="right") - 1
    kc = np.maximum(k, 0)
    return np.where((k >= 0) & (g_sorted[kc] == g_q), k, -1)
