"""Pair each notify with the wait it released, across ranks, and check causality.

A wait on rank B for peer A on flag ``f`` with expected value ``v`` (WAIT args: peer=A,
flag=f, expected=v) is released by a notify on rank A that wrote ``v`` to flag ``f`` of rank B
(NOTIFY args: peer=B, value=v, flag=f). One notify may release many waits (every program of a
rank waiting on one flag), so pairing is many-to-one. When a flag is signalled with the same
value again and again (reset between rounds or launches), the k-th such notify (in the
notifying rank's own order) releases the k-th such wait of each waiting program (in that
program's order). The pairing uses no cross-rank time at all, so it can judge the clocks.

Waits that timed out released nothing and are not paired. Counters that are *added to* (not
set) are paired only where a notify wrote exactly the expected value.

On a correctly aligned trace no wait ends before the notify that released it began, up to
the alignment's error bounds: :func:`check_causality` counts the pairs that do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schema import EventFlag, EventKind

#: One row per notify/wait pair (indices are rows of the table given to the pairing).
PAIR_DTYPE = np.dtype(
    [
        ("notify", "<i8"),
        ("wait", "<i8"),
        ("notify_rank", "<i4"),
        ("wait_rank", "<i4"),
        ("flag", "<i8"),
        ("value", "<i8"),
        ("notify_start_ns", "<i8"),
        ("wait_end_ns", "<i8"),
        ("lag_ns", "<i8"),
        ("tolerance_ns", "<f8"),
        ("violation", "?"),
    ]
)


_LIMIT = 1 << 62


def _dense_groups(events, ni: np.ndarray, wi: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One group id per (src rank, dst rank, flag, value), for notifies and waits, and a bound
    on the ids (every id is below it).

    Each column is mixed in by its offset from its minimum where its span is small enough,
    else made dense with ``np.unique`` (a sort); the ids are made dense only if the product
    would not fit in 62 bits.
    """
    gid = np.zeros(ni.size + wi.size, np.int64)
    bound = 1
    for notify_col, wait_col in (("rank", "arg0"), ("arg0", "rank"), ("arg2", "arg2"), ("arg1", "arg4")):
        col = np.concatenate([events[notify_col][ni].astype(np.int64), events[wait_col][wi].astype(np.int64)])
        lo, hi = int(col.min()), int(col.max())
        if hi - lo < _LIMIT // bound:
            code, size = col - lo, hi - lo + 1
        else:
            u, inv = np.unique(col, return_inverse=True)  # made dense on its own
            code, size = inv.reshape(-1), u.size
            if bound >= _LIMIT // max(size, 1):
                _, gid = np.unique(gid, return_inverse=True)
                gid = gid.reshape(-1).astype(np.int64)
                bound = int(gid.max(initial=0)) + 1
        gid = gid * size + code  # combined in mixed radix
        bound *= size
    return gid[: ni.size], gid[ni.size :], bound


def _sort_by(g: np.ndarray, g_bound: int, *keys: np.ndarray) -> np.ndarray:
    """The order of rows by ``(g, *keys)`` (ties in input order): one sort of one composite
    int64 key where the key ranges allow it, else ``np.lexsort``."""
    code, bound = g, g_bound
    for k in keys:
        lo, hi = (int(k.min()), int(k.max())) if k.size else (0, 0)
        if bound >= _LIMIT // (hi - lo + 1):
            return np.lexsort(tuple(reversed(keys)) + (g,))
        code = code * (hi - lo + 1) + (k - lo)
        bound *= hi - lo + 1
    return np.argsort(code, kind="stable")


def _occurrence(*sorted_keys: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal rows of sorted key columns."""
    n = sorted_keys[0].size
    if n == 0:
        return np.zeros(0, np.int64)
    new = np.zeros(n, bool)
    new[0] = True
    for k in sorted_keys:
        new[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(new)
    return np.arange(n, dtype=np.int64) - np.repeat(starts, np.diff(np.r_[starts, n]))


def pair_notify_wait(events: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Find, for each wait, the notify that released it (many waits may share one notify).

    Args:
        events: a table with ``rank``, ``kind``, ``flags``, ``arg0``..``arg4``,
            ``start``/``start_ns`` and, when present, ``launch``, ``program``, ``slot`` (without
            them, all waits count as one program's, in time order). Only one rank's own times
            are ever compared, so raw ticks do as well as aligned nanoseconds.

    Returns:
        ``(notify_rows, wait_rows, unmatched_notifies, unmatched_waits)``: two int64 arrays of
        row indices into ``events``, one pair per position, ordered by wait row; the number of
        notifies that released no recorded wait, and of completed waits with no matching notify.
    """
    names = tuple(events.dtype.names or ()) if hasattr(events, "dtype") else tuple(events)
    s_col = "start_ns" if "start_ns" in names else "start"
    kind = events["kind"]
    ni = np.flatnonzero(kind == EventKind.NOTIFY)
    wa = np.flatnonzero(kind == EventKind.WAIT)  # timed-out waits too: they take their round
    if ni.size == 0 or wa.size == 0:
        done = int(((events["flags"][wa] & EventFlag.TIMEOUT) == 0).sum())
        return np.zeros(0, np.int64), np.zeros(0, np.int64), int(ni.size), done
    gn, gw, bound = _dense_groups(events, ni, wa)

    def col(name, rows, default=None):
        if name in names:
            return events[name][rows].astype(np.int64)
        return np.zeros(rows.size, np.int64) if default is None else default

    # round of each notify: its order among its group's notifies, by the notifying rank's clock
    on = _sort_by(gn, bound, col("launch", ni), events[s_col][ni].astype(np.int64))
    occ_n = np.empty(ni.size, np.int64)
    occ_n[on] = _occurrence(gn[on])
    # round of each wait: its order among its program's waits of the group
    prog = col("program", wa)
    launch = col("launch", wa)
    order = col("slot", wa, events[s_col][wa].astype(np.int64))
    ow = _sort_by(gw, bound, prog, launch, order)
    gs, ps = gw[ow], prog[ow]
    occ_w = np.empty(wa.size, np.int64)
    occ_w[ow] = _occurrence(gs, ps)
    big = int(max(occ_n.max(initial=0), occ_w.max(initial=0)) + 1)
    if bound >= _LIMIT // big:  # make the group ids dense so that (group, round) fits one int64
        _, dense = np.unique(np.concatenate([gn, gw]), return_inverse=True)
        dense = dense.reshape(-1).astype(np.int64)
        gn, gw = dense[: gn.size], dense[gn.size :]
    kn = gn * big + occ_n
    kw = gw * big + occ_w
    sn = np.argsort(kn, kind="stable")
    j = np.searchsorted(kn[sn], kw)
    found = (j < ni.size) & (kn[sn][np.minimum(j, ni.size - 1)] == kw)
    done = (events["flags"][wa] & EventFlag.TIMEOUT) == 0
    keep = found & done
    nrows = ni[sn[j[keep]]]
    wrows = wa[keep]
    released = np.zeros(ni.size, bool)
    released[sn[j[keep]]] = True
    return nrows.astype(np.int64), wrows.astype(np.int64), int(ni.size - released.sum()), int((done & ~found).sum())


@dataclass(frozen=True)
class CausalityReport:
    """The outcome of :func:`check_causality`.

    Attributes:
        pairs: one row per notify/wait pair (``PAIR_DTYPE``); ``lag_ns`` is the wait's end
            minus the notify's start, ``violation`` marks ``lag_ns < -tolerance_ns``.
        n_pairs: pairs found.
        n_violations: pairs whose wait ends before its notify starts, beyond the tolerance.
        unmatched_notifies: notifies no wait was found for (nobody waited, or a wait timed out).
        unmatched_waits: completed waits no notify was found for (the notifier's rank is
            missing, or the flag was set by something untraced).
        timeouts: waits that gave up.
        worst_lag_ns: the most negative lag (0 when there are no pairs).
    """

    pairs: np.ndarray
    n_pairs: int
    n_violations: int
    unmatched_notifies: int
    unmatched_waits: int
    timeouts: int
    worst_lag_ns: int

    @property
    def ok(self) -> bool:
        return self.n_violations == 0

    def summary(self) -> str:
        return (
            f"{self.n_pairs} notify->wait pairs, {self.n_violations} causality violations "
            f"(worst lag {self.worst_lag_ns} ns), {self.unmatched_waits} waits and "
            f"{self.unmatched_notifies} notifies unpaired, {self.timeouts} timeouts"
        )


def check_causality(events: np.ndarray, model=None, *, slack_ns: float = 0.0) -> CausalityReport:
    """Count waits that appear to end before the notify that released them began.

    Args:
        events: an aligned table (``ktrace.clock.aligned_events``).
        model: the ``ClockModel`` the table was aligned with; each pair's tolerance is the sum
            of its two ranks' error bounds (half the round-trip bound plus the fit residual).
            Without a model the tolerance is ``slack_ns`` alone.
        slack_ns: added to every pair's tolerance.

    Returns:
        A :class:`CausalityReport`.

    Raises:
        ValueError: the table has no ``start_ns``/``end_ns`` (align it first).
    """
    names = events.dtype.names or ()
    if "start_ns" not in names or "end_ns" not in names:
        raise ValueError("check_causality needs an aligned table (start_ns, end_ns): use ktrace.clock.aligned_events")
    nrows, wrows, un_n, un_w = pair_notify_wait(events)
    timeouts = int(((events["kind"] == EventKind.WAIT) & ((events["flags"] & EventFlag.TIMEOUT) != 0)).sum())
    pairs = np.zeros(nrows.size, PAIR_DTYPE)
    pairs["notify"] = nrows
    pairs["wait"] = wrows
    pairs["notify_rank"] = events["rank"][nrows]
    pairs["wait_rank"] = events["rank"][wrows]
    pairs["flag"] = events["arg2"][wrows]
    pairs["value"] = events["arg4"][wrows]
    pairs["notify_start_ns"] = events["start_ns"][nrows]
    pairs["wait_end_ns"] = events["end_ns"][wrows]
    pairs["lag_ns"] = pairs["wait_end_ns"] - pairs["notify_start_ns"]
    tol = np.full(nrows.size, float(slack_ns))
    if model is not None and nrows.size:
        n_ranks = int(max(pairs["notify_rank"].max(), pairs["wait_rank"].max())) + 1
        bounds = model.error_bounds_ns(n_ranks)
        # a rank without a measured map has no bound: nothing about its pairs can be trusted,
        # so its tolerance stays the slack and violations show.
        bounds = np.where(np.isnan(bounds), 0.0, bounds)
        tol += bounds[pairs["notify_rank"]] + bounds[pairs["wait_rank"]]
    pairs["tolerance_ns"] = tol
    pairs["violation"] = pairs["lag_ns"] < -tol
    return CausalityReport(
        pairs=pairs,
        n_pairs=int(nrows.size),
        n_violations=int(pairs["violation"].sum()),
        unmatched_notifies=un_n,
        unmatched_waits=un_w,
        timeouts=timeouts,
        worst_lag_ns=int(pairs["lag_ns"].min()) if nrows.size else 0,
    )
