"""Slow link: signals from one rank to another slower than the capture's calibration measured.

Only producer -> consumer pairs of different ranks the calibration covers are judged (a rank
signalling itself has no calibrated latency). Priced by a replay with those waits' release
latency at the calibrated one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...text import fmt_ns
from ..stalls import waits as _waits
from .model import Cause, Changes, Claim, Context, Description, one_way_latency_ns
from .words import launches_text, saving_text

KIND = "slow_link"
TITLE = "slow link"


@dataclass(frozen=True)
class Detail:
    consumer: int
    magnitude_ns: float  # median signal latency (notify start -> wait end) of waits whose producer was late
    calibrated_ns: float
    n_waits: int


def detect(ctx: Context) -> list[Cause]:
    trace, cfg = ctx.trace, ctx.config
    ow = one_way_latency_ns(trace)
    w = _waits(trace)
    if w.size == 0 or not np.isfinite(ow).any():
        return []
    late = np.nan_to_num(w["producer_late_ns"]) > 0
    sig = w["signal_latency_ns"]
    ok = late & np.isfinite(sig)
    rank = w["rank"].astype(np.int64)
    peer = w["peer"].astype(np.int64)
    R = ow.shape[0]
    out = []
    for p in range(R):
        for c in range(R):
            if p == c or not np.isfinite(ow[p, c]):
                continue
            sel = ok & (peer == p) & (rank == c)
            if sel.sum() < 3:
                continue
            med = float(np.median(sig[sel]))
            if med < cfg.slow_link_factor * ow[p, c] or med < ow[p, c] + cfg.min_late_ns:
                continue
            codes = np.unique(w["launch"][sel]).astype(np.int64)

            def changes(sub, p=p, c=c, v=float(ow[p, c])):
                mine = (sub.w_peer == p) & (sub.wg_rank[sub.w_wg] == c)
                return Changes(latency=np.where(mine, v, np.nan))

            out.append(Cause(KIND, p, (p, c), codes, changes=changes, excess_ns=float((sig[sel] - ow[p, c]).sum()),
                             detail=Detail(consumer=c, magnitude_ns=med, calibrated_ns=float(ow[p, c]),
                                           n_waits=int(sel.sum()))))
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
    saving, more = saving_text(c, "At the calibrated latency", ctx, named)
    return Description(text + saving, f"slow link rank {c.rank} -> rank {d.consumer}", None, None, claims + more)
