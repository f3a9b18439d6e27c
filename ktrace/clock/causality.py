"""Check an alignment by causality: no wait may end before the notify that released it began.

Which notify released which wait comes from ``ktrace.pairing``, which compares no time of one
rank with a time of another, so it can judge the clocks. On a correctly aligned trace no wait
ends before its notify began, up to the alignment's error bounds: :func:`check_causality`
counts the pairs that do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..pairing import pair_table
from ..schema import EventKind, arg_column, is_timeout

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
        events: an aligned table (``ktrace.events.aligned_events``).
        model: the ``ClockModel`` the table was aligned with; each pair's tolerance is the sum
            of its two ranks' error bounds (half the round-trip bound plus the fit residual; for
            a rank reached through the host chain, the sum of its legs' bounds).
            Without a model the tolerance is ``slack_ns`` alone.
        slack_ns: added to every pair's tolerance.

    Returns:
        A :class:`CausalityReport`.

    Raises:
        ValueError: the table has no ``start_ns``/``end_ns`` (align it first).
    """
    names = events.dtype.names or ()
    if "start_ns" not in names or "end_ns" not in names:
        raise ValueError("check_causality needs an aligned table (start_ns, end_ns): use ktrace.events.aligned_events")
    nrows, wrows, un_n, un_w = pair_table(events)
    timeouts = int(((events["kind"] == EventKind.WAIT) & is_timeout(events["flags"])).sum())
    pairs = np.zeros(nrows.size, PAIR_DTYPE)
    pairs["notify"] = nrows
    pairs["wait"] = wrows
    pairs["notify_rank"] = events["rank"][nrows]
    pairs["wait_rank"] = events["rank"][wrows]
    pairs["flag"] = events[arg_column(EventKind.WAIT, "flag")][wrows]
    pairs["value"] = events[arg_column(EventKind.WAIT, "expected")][wrows]
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
