"""Slow link: signals from one rank to another slower than the capture's calibration measured.

Only producer -> consumer pairs of different ranks the calibration covers are judged (a rank
signalling itself has no calibrated latency), on the waits that were spinning when the signal
arrived (``model.saw_signal``). Priced by a replay with those waits' release
latency at the calibrated one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...text import fmt_ns
from ..stalls import waits as _waits
from .model import Cause, Changes, Claim, Context, Description, one_way_pairs, one_way_per_rank, saw_signal
from .words import launches_text, saving_text

KIND = "slow_link"
TITLE = "slow link"


@dataclass(frozen=True)
class Detail:
    consumer: int
    magnitude_ns: float  # median signal latency (notify start -> wait end) of the waits that saw the signal arrive
    calibrated_ns: float
    n_waits: int


def detect(ctx: Context) -> list[Cause]:
    trace, cfg = ctx.trace, ctx.config
    w = _waits(trace)
    if w.size == 0 or not np.isfinite(one_way_per_rank(trace)[0]).any():
        return []
    rank = w["rank"].astype(np.int64)
    peer = w["peer"].astype(np.int64)
    # a signal's trip is seen by a wait that was spinning when it arrived (``saw_signal``): from
    # the notify's start to the wait's end. (A wait that found its flag set says nothing of it.)
    paired = w["notify_row"] >= 0
    sig = np.where(paired, (w["end_ns"] - w["notify_start_ns"]).astype(np.float64), np.nan)
    ok = saw_signal(trace) & np.isfinite(sig)
    # the (producer, consumer) pairs that occur with at least 3 usable waits, in pair order (not
    # every pair of a world size: a file may claim millions of ranks)
    R = int(max(rank.max(initial=0), peer.max(initial=0))) + 1
    pairs, n = np.unique(peer[ok] * R + rank[ok], return_counts=True)
    pairs = pairs[n >= 3]
    cals = one_way_pairs(trace, pairs // R, pairs % R)
    out = []
    for (p, c), ow_pc in zip(np.stack([pairs // R, pairs % R], axis=1).tolist(), cals.tolist()):
        if p == c or not math.isfinite(ow_pc):
            continue
        sel = ok & (peer == p) & (rank == c)
        med = float(np.median(sig[sel]))
        if med < cfg.slow_link_factor * ow_pc or med < ow_pc + cfg.min_late_ns:
            continue
        codes = np.unique(w["launch"][sel]).astype(np.int64)

        def changes(sub, p=p, c=c, v=float(ow_pc)):
            mine = (sub.w_peer == p) & (sub.wg_rank[sub.w_wg] == c)
            return Changes(latency=np.where(mine, v, np.nan))

        out.append(Cause(KIND, p, (p, c), codes, changes=changes, excess_ns=float((sig[sel] - ow_pc).sum()),
                         detail=Detail(consumer=c, magnitude_ns=med, calibrated_ns=float(ow_pc), n_waits=int(sel.sum()))))
    return out


def describe(c: Cause, ctx: Context) -> Description:
    d: Detail = c.detail
    n, L = int(c.launches.size), ctx.n_launches
    named = ((c.rank, -1, -1, 0), (d.consumer, -1, -1, 0))
    claims = [Claim("slow_signals", named, {"launches": [int(x) for x in c.launches.tolist()],
                                            "producer": c.rank, "consumer": d.consumer, "median_ns": d.magnitude_ns,
                                            "calibrated_ns": d.calibrated_ns, "n_waits": d.n_waits})]
    text = (f"slow link: signals from rank {c.rank} to rank {d.consumer} took {fmt_ns(d.magnitude_ns)} "
            f"(median over {d.n_waits:,} waits) vs {fmt_ns(d.calibrated_ns)} one way measured by the "
            f"capture's clock calibration; {launches_text(n, L)}. ")
    # (what the change moves is the consumer's waits: "other work" is any but the consumer's, the
    # producer's included; with two ranks, naming both would leave no other work to end the launch)
    saving, more = saving_text(c, "At the calibrated latency", ctx, named[1:])
    return Description(text + saving, f"slow link rank {c.rank} -> rank {d.consumer}", None, None, claims + more)
