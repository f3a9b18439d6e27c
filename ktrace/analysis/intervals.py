"""Unions and intersections of time intervals (vectorised)."""

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
