"""Late launch: a rank that started a launch after the first rank did while its GPU was idle.

A launch queued right behind a long one on the same GPU starts late because of that one (its
cause is that launch's, not the host's): only the time the GPU sat idle counts. Priced by a
replay with the rank's programs starting that much earlier.

A launch the capture says a device-side barrier released (``meta["launch_alignment"]``, as
``ktrace run`` writes it: ``ktrace.shmem.align_launch`` right before it on every rank) is left
out: what is left of its skew is the barrier's, not the program's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...text import fmt_ns
from ..stalls import kernel_time
from ..stalls import waits as _waits
from .model import Cause, Changes, Claim, Context, Description, launch_makespans
from .words import launches_text, saving_text

KIND = "late_launch"
TITLE = "late launch"
#: A launch started at most this long after the one before it on its GPU was queued behind it.
QUEUED_NS = 5_000.0


@dataclass(frozen=True)
class Detail:
    magnitude_ns: float  # median late start over its launches
    min_ns: float
    max_ns: float
    first_rank: int  # the rank that started first (most often)
    queued_ns: float  # the part of the skew explained by the GPU being busy (not counted)
    late_ns: tuple  # per launch of the cause, the late start
    waited_by: int  # waits of other ranks on this rank that began before it started


def _barrier_released(trace) -> np.ndarray:
    """Launches a device-side barrier released on every rank (``meta["launch_alignment"]``)."""
    la = (getattr(trace, "meta", None) or {}).get("launch_alignment") or {}
    if la.get("method") != "device barrier":
        return np.zeros(0, np.int64)
    return np.asarray([int(x) for x in la.get("launches") or ()], np.int64)


def detect(ctx: Context) -> list[Cause]:
    trace, cfg = ctx.trace, ctx.config
    kt = kernel_time(trace)
    if kt.size == 0 or trace.world_size < 2:
        return []
    all_l = launch_makespans(trace)[0]
    lcode = np.searchsorted(all_l, kt["launch"])
    L = all_l.size
    first = np.full(L, np.iinfo(np.int64).max)
    np.minimum.at(first, lcode, kt["start_ns"])
    skew = (kt["start_ns"] - first[lcode]).astype(np.float64)
    n_ranks = np.bincount(lcode, minlength=L)
    # idle time of the rank's GPU before the launch (kt is in (rank, launch) order)
    same = np.r_[False, kt["rank"][1:] == kt["rank"][:-1]]
    idle = np.where(same, kt["start_ns"] - np.r_[0, kt["end_ns"][:-1]], np.inf).astype(np.float64)
    min_idle = np.full(L, np.inf)
    np.minimum.at(min_idle, lcode, idle)
    # the part of the skew its GPU sat idle for, less the gap any launch has behind the one before
    # it (the least idle time of the launch's ranks, up to QUEUED_NS): a launch queued behind a
    # long one is late because of that one. (Not less the whole of the others' idle time: at a
    # gap the host leaves between launches every rank is idle as long, the late one included.)
    gap = np.where(np.isfinite(min_idle[lcode]), np.minimum(min_idle[lcode], QUEUED_NS), 0.0)
    late = np.clip(np.minimum(skew, idle - gap), 0, None)
    late[np.isin(kt["launch"], _barrier_released(trace))] = 0.0
    queued = skew - late
    w = _waits(trace)
    w_peer = w["peer"]
    out = []
    for r in np.unique(kt["rank"]).tolist():  # ranks: a handful
        sel = (kt["rank"] == r) & (late >= cfg.min_skew_ns) & (n_ranks[lcode] > 1)
        if not sel.any():
            continue
        codes = lcode[sel]
        per_launch = np.zeros(L)
        per_launch[codes] = late[sel]
        firsts = kt[(np.isin(lcode, codes)) & (skew == 0)]["rank"]
        ref = int(np.bincount(firsts).argmax()) if firsts.size else -1
        # the waits of other ranks on this one that began before it started (its peers waited)
        mine_start = np.full(L, np.iinfo(np.int64).min)  # (other launches: no wait counts)
        mine_start[codes] = kt["start_ns"][sel]
        on = np.flatnonzero(w_peer == r)  # (the waits on this rank only: few of all)
        on = on[w["rank"][on] != r]
        wl = np.clip(np.searchsorted(all_l, w["launch"][on]), 0, L - 1)
        waited = int(np.count_nonzero(w["start_ns"][on] < mine_start[wl]))

        def changes(sub, r=r, per_launch=per_launch):
            sh = np.where(sub.wg_rank == r, per_launch[np.searchsorted(all_l, sub.launch_ids)][sub.wg_launch], 0.0)
            return Changes(shift=sh)

        out.append(Cause(KIND, int(r), (int(r),), all_l[codes], changes=changes, excess_ns=float(late[sel].sum()),
                         detail=Detail(magnitude_ns=float(np.median(late[sel])), min_ns=float(late[sel].min()),
                                       max_ns=float(late[sel].max()), first_rank=ref, queued_ns=float(queued[sel].max()),
                                       late_ns=tuple(float(x) for x in late[sel]), waited_by=waited)))
    return out


def describe(c: Cause, ctx: Context) -> Description:
    d: Detail = c.detail
    n, L = int(c.launches.size), ctx.n_launches
    first = f"rank {d.first_rank}" if d.first_rank >= 0 else "the first rank"
    rng = f"; {fmt_ns(d.min_ns)} to {fmt_ns(d.max_ns)}" if d.max_ns - d.min_ns > 0.05 * d.magnitude_ns else ""
    named = ((c.rank, -1, -1, 0),)
    claims = [Claim("started_late", named, {"launches": [int(x) for x in c.launches.tolist()],
                                            "magnitude_ns": d.magnitude_ns, "min_ns": d.min_ns, "max_ns": d.max_ns,
                                            "first_rank": d.first_rank, "queued_ns": d.queued_ns})]
    text = (f"rank {c.rank} launched late: it started {fmt_ns(d.magnitude_ns)} after {first} "
            f"(median {launches_text(n, L)}{rng}) while its GPU was idle")
    if d.waited_by:
        text += f"; {d.waited_by:,} waits of other ranks on it began before it started"
        claims.append(Claim("waited_for", named, {"launches": [int(x) for x in c.launches.tolist()],
                                                  "waits": d.waited_by}))
    saving, more = saving_text(c, "Started on time", ctx, named)
    start = end = None
    kt = kernel_time(ctx.trace)
    first_l = int(c.launches.min())
    sel = kt[kt["launch"] == first_l]
    if sel.size:
        mine = sel[sel["rank"] == c.rank]
        start = ctx.rel(sel["start_ns"].min())
        end = ctx.rel(mine["start_ns"][0]) if mine.size else None
    return Description(text + ". " + saving, f"rank {c.rank} launched late", start, end, claims + more)
