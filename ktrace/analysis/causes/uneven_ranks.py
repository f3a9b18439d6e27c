"""Uneven ranks: one rank's workgroups of a kernel working much longer than another rank's
(uneven routing of an all-to-all, a rank with a larger shard).

Priced by a replay with the kernel's work spread evenly over the ranks (each rank's workgroups
scaled to the mean over all of them, the total unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...keys import group_median
from ...text import ranks_text
from ...text import fmt_ns
from ..names import region_label
from .model import Cause, Changes, Claim, Context, Description, roles_coded
from .uneven_work import role_values
from .words import launches_text, saving_text

KIND = "uneven_ranks"
TITLE = "uneven ranks"


@dataclass(frozen=True)
class Detail:
    role: str
    region: str  # where the heavy ranks' workgroups spend the most beyond the others' ("" if none)
    region_diff_ns: float
    heavy: tuple
    rank_work_ns: dict  # rank -> median workgroup work
    rank_items: dict
    balanced_ns: float
    magnitude_ns: float
    ratio: float
    light_rank: int


def detect(ctx: Context) -> list[Cause]:
    trace, wg, cfg = ctx.trace, ctx.workgroups, ctx.config
    if wg is None or wg.size == 0 or trace.world_size < 2:
        return []
    from ..load import region_time

    role_inv, role_codes = roles_coded(wg)
    rank = wg["rank"].astype(np.int64)
    R = int(rank.max()) + 1
    out = []
    for ri, role in enumerate(role_codes.tolist()):  # kernels: a handful
        sel = role_inv == ri
        ranks_here = np.unique(rank[sel])
        if ranks_here.size < 2:
            continue
        work = wg["work_ns"][sel].astype(np.float64)
        med = group_median(rank[sel], work, R)
        items = group_median(rank[sel], wg["work_items"][sel].astype(np.float64), R)
        meds = med[ranks_here]
        lo_r, hi_r = ranks_here[np.argmin(meds)], ranks_here[np.argmax(meds)]
        if not (med[hi_r] >= (1 + ctx.min_excess) * max(med[lo_r], 1.0) and med[hi_r] - med[lo_r] >= cfg.min_late_ns):
            continue
        balanced = float(work.mean())
        # the ranks well above the mean; the heaviest at least (one rank of many may be uneven
        # against the lightest without being a quarter above the mean)
        heavy = [int(r) for r in ranks_here if med[r] >= 1.25 * balanced] or [int(hi_r)]
        factor = np.ones(wg.size)
        per_rank = np.where(med > 0, balanced / np.maximum(med, 1.0), 1.0)
        factor[sel] = per_rank[rank[sel]]
        codes = np.unique(wg["launch"][sel]).astype(np.int64)
        mtx, rids = region_time(trace)
        region, rdiff = "", float("nan")
        if rids.size:
            hv = sel & np.isin(rank, heavy)
            lt = sel & ~np.isin(rank, heavy)
            if hv.any() and lt.any():
                # (means as products: no copy of the workgroups' rows of the matrix)
                diff = (hv.astype(np.float64) @ mtx) / hv.sum() - (lt.astype(np.float64) @ mtx) / lt.sum()
                j = int(np.argmax(diff))
                if diff[j] >= 1.0:
                    region, rdiff = trace.region_name(rids[j]), float(diff[j])

        def changes(sub, factor=factor):
            return Changes(scale=factor[sub.wg_id])

        hv_sel = sel & np.isin(rank, heavy)
        excess = float(np.clip(wg["work_ns"][hv_sel] - balanced, 0, None).sum())
        out.append(Cause(KIND, heavy[0] if len(heavy) == 1 else -1, tuple(heavy), codes, changes=changes,
                         excess_ns=excess, detail=Detail(
                             role=role, region=region, region_diff_ns=rdiff, heavy=tuple(heavy),
                             rank_work_ns={int(r): float(med[r]) for r in ranks_here},
                             rank_items={int(r): float(items[r]) for r in ranks_here}, balanced_ns=balanced,
                             magnitude_ns=float(med[hi_r] - balanced), ratio=float(med[hi_r] / max(med[lo_r], 1.0)),
                             light_rank=int(lo_r))))
    return out


def describe(c: Cause, ctx: Context) -> Description:
    d: Detail = c.detail
    trace = ctx.trace
    n, L = int(c.launches.size), ctx.n_launches
    rw, ri = d.rank_work_ns, d.rank_items
    parts = ", ".join(f"rank {r} {fmt_ns(rw[r])} ({ri[r]:.0f} item{'s' if ri[r] != 1 else ''})" for r in sorted(rw))
    named = tuple((int(r), -1, -1, 0) for r in d.heavy)
    launches = [int(x) for x in c.launches.tolist()]
    role = role_values(ctx, d.role)
    claims = [Claim("ranks_worked_longer", named, {"launches": launches, **role,
                                                   "rank_work_ns": {str(k): v for k, v in rw.items()},
                                                   "ratio": d.ratio, "light_rank": d.light_rank})]
    where = ""
    if d.region:
        rid = next((int(k) for k, v in trace.regions.items() if v == d.region), None)
        where = f"; most of the difference in {region_label(trace, rid) if rid is not None else repr(d.region)}"
        claims.append(Claim("difference_in_region", named, {"launches": launches, **role, "region": d.region,
                                                            "diff_ns": d.region_diff_ns}))
    text = (f"uneven work across ranks ({d.role}): the median workgroup of {ranks_text(d.heavy)} worked "
            f"{d.ratio:.1f}x as long as rank {d.light_rank}'s: {parts}{where}; {launches_text(n, L)}. ")
    saving, more = saving_text(c, "Spread evenly over the ranks", ctx, named,
                               ("the other ranks would work longer by as much", "not_shorter_balanced",
                                {**role, "light_rank": d.light_rank}))
    return Description(text + saving, f"uneven work across ranks ({ranks_text(d.heavy)})", None, None, claims + more)
