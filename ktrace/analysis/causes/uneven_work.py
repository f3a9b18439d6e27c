"""Uneven work: workgroups (agents) with much more work than the others of their role.

The candidates are ``load.workgroups``' overloaded workgroups (work time above the role's
median by ``LoadConfig.min_excess`` and a robust z-score). One cause per role and region where
their extra time went; priced by a replay with their work scaled to the role's median.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...keys import distinct, group_median
from ...text import fmt_ns
from ..load import HANDOFF_ROLES, ROLE_SITES, notify_regions
from ..names import OUTSIDE, region_label
from ..trace import Sparse
from .model import Cause, Changes, Claim, Context, Description, objects_coded, roles_coded
from .words import launches_text, workgroup_agents, progs_text, saving_text

KIND = "uneven_work"
TITLE = "uneven work"


@dataclass(frozen=True)
class Detail:
    role: str  # the kernel (or kernel:region) the workgroups are compared within
    region: str  # where their extra time went the most ("" when nowhere in particular)
    region_excess_ns: float  # their mean time there beyond the role's median (> 0, or NaN)
    n_workgroups: int
    work_ns: float  # their mean work time
    median_work_ns: float
    magnitude_ns: float  # work_ns - median_work_ns
    items: float  # their mean work items (innermost spans)
    median_items: float
    programs: dict  # rank -> programs
    workgroups: np.ndarray  # their workgroup ids


def _extra_region(ctx: Context, sel: np.ndarray, role_inv: np.ndarray, ri: int) -> tuple[str, float]:
    """The region (a leaf span: work, not waiting) where the workgroups ``sel`` spent the most
    beyond the median of their role (``ri`` of ``role_inv``), and how much (their mean); ("", NaN)
    when none is above."""
    from ..load import region_time, role_region_medians, wait_regions

    mtx, rids = region_time(ctx.trace)
    if rids.size == 0 or sel.size == 0:
        return "", float("nan")
    mine = mtx[sel].astype(np.float64).mean(axis=0)
    ex = mine - role_region_medians(ctx.trace, role_inv, ri)
    ex[np.isin(rids, wait_regions(ctx.trace))] = -np.inf  # (time in waits is not work)
    j = int(np.argmax(ex))
    if not ex[j] >= 1.0:
        return "", float("nan")
    return ctx.trace.region_name(rids[j]), float(ex[j])


def detect(ctx: Context) -> list[Cause]:
    wg = ctx.workgroups
    if wg is None or wg.size == 0 or not wg["overloaded"].any():
        return []
    over = np.flatnonzero(wg["overloaded"])
    # (their top region alone: not their whole rows, each lazy column made at them)
    top = wg.take("top_region", over) if hasattr(wg, "take") else wg["top_region"][over]
    role_inv, role_codes = roles_coded(wg)
    med = group_median(role_inv, wg["work_ns"].astype(np.float64), role_codes.size)
    med_items = group_median(role_inv, wg["work_items"].astype(np.float64), role_codes.size)
    reg_inv, reg_names = objects_coded(top)
    key = role_inv[over] * max(reg_names.size, 1) + reg_inv
    out = []
    for k in np.unique(key).tolist():  # (role, region): a handful
        sel = over[key == k]
        ri = int(role_inv[sel[0]])
        factor = np.minimum(med[ri] / np.maximum(wg["work_ns"][sel].astype(np.float64), 1.0), 1.0)
        codes = np.unique(wg["launch"][sel]).astype(np.int64)

        def changes(sub, factor=Sparse(sel, factor, 1.0)):  # (sel: sorted workgroup ids)
            return Changes(scale=factor(sub.wg_id))

        ranks = tuple(sorted(set(wg["rank"][sel].tolist())))
        rp = np.unique(wg["rank"][sel].astype(np.int64) * (1 << 32) + wg["program"][sel].astype(np.int64))
        progs = {int(r): (rp[(rp >> 32) == r] & 0xFFFFFFFF).tolist() for r in ranks}
        excess = float(np.clip(wg["work_ns"][sel] - med[ri], 0, None).sum())
        region, rex = _extra_region(ctx, sel, role_inv, ri)
        work = float(np.mean(wg["work_ns"][sel]))
        out.append(Cause(KIND, ranks[0] if len(ranks) == 1 else -1, ranks, codes, changes=changes, excess_ns=excess,
                         detail=Detail(role=str(role_codes[ri]), region=region, region_excess_ns=rex,
                                       n_workgroups=int(sel.size), work_ns=work, median_work_ns=float(med[ri]),
                                       magnitude_ns=work - float(med[ri]),
                                       items=float(np.mean(wg["work_items"][sel])), median_items=float(med_items[ri]),
                                       programs=progs, workgroups=np.asarray(sel, np.int64))))
    return out


def _region_id_of(trace, name: str):
    for rid, n in trace.regions.items():
        if n == name:
            return int(rid)
    return None


def role_values(ctx: Context, role: str) -> dict:
    """What a claim says of the workgroups a role compares (the claims checker rebuilds the role
    from it): its name, its launches, the part its programs take in hand-offs when the kernel's
    programs differ in it (``role_part``, an index of ``load.HANDOFF_ROLES``, -1 when they do
    not) and the call sites its programs notify at when they are what sets it apart
    (``role_notify``, else None)."""
    wg = ctx.workgroups
    role_inv, role_codes = roles_coded(wg)
    ri = int(np.searchsorted(role_codes, role))
    members = np.flatnonzero(role_inv == ri)
    part = next((i for i, n in sorted(enumerate(HANDOFF_ROLES), key=lambda x: -len(x[1])) if role.endswith(" " + n)), -1)
    sites = notify_regions(ctx.trace, int(members[0])) if members.size and f" {ROLE_SITES} " in role else None
    return {"role": role, "role_launches": distinct(wg["launch"][members]).tolist(), "role_part": part, "role_notify": sites}


def describe(c: Cause, ctx: Context) -> Description:
    d: Detail = c.detail
    trace = ctx.trace
    n, L = int(c.launches.size), ctx.n_launches
    progs = "; ".join(f"rank {r} {progs_text(p, 4)}" for r, p in d.programs.items())
    nwg = sum(len(p) for p in d.programs.values())
    wg = ctx.workgroups
    ids = np.asarray(d.workgroups, np.int64)
    named, n_agents = workgroup_agents(wg, ids)
    role = role_values(ctx, d.role)
    launches = [int(x) for x in c.launches.tolist()]
    claims = [Claim("worked_longer", named, {"launches": launches, "n_agents": n_agents, **role,
                                             "work_ns": d.work_ns,
                                             "median_work_ns": d.median_work_ns, "items": d.items,
                                             "median_items": d.median_items, "n_workgroups": d.n_workgroups})]
    why = (f"{d.items:.1f} work items vs {d.median_items:.0f}: uneven work distribution" if d.items > 1.05 * d.median_items
           else f"as many work items ({d.median_items:.0f}) as the others: its work went slower" if nwg == 1
           else f"as many work items ({d.median_items:.0f}) as the others: their work went slower")
    where = ""
    # a region is named only when it holds a real part of the extra (a tenth at least)
    if d.region and np.isfinite(d.region_excess_ns) and d.region_excess_ns >= 0.1 * max(d.magnitude_ns, 1.0):
        rid = _region_id_of(trace, d.region)
        name = region_label(trace, rid) if d.region != OUTSIDE and rid is not None else repr(d.region)
        extra = max(d.magnitude_ns, 1.0)
        most = "most of the extra" if d.region_excess_ns >= 0.5 * extra else "the largest part of the extra"
        where = f"; {most} in {name} (+{fmt_ns(d.region_excess_ns)})"
        claims.append(Claim("extra_in_region", named, {"launches": launches, "n_agents": n_agents, **role,
                                                       "region": d.region,
                                                       "excess_ns": d.region_excess_ns, "extra_ns": d.magnitude_ns,
                                                       "most": d.region_excess_ns >= 0.5 * extra}))
    who = progs if nwg <= 8 else f"{nwg:,} workgroups ({progs})"
    text = (f"uneven work ({d.role}): {who} worked {fmt_ns(d.work_ns)} vs the median workgroup's "
            f"{fmt_ns(d.median_work_ns)} ({d.work_ns / max(d.median_work_ns, 1):.2f}x), {why}{where}; "
            f"{launches_text(n, L)}. ")
    saving, more = saving_text(c, "At the median work", ctx, named)
    here = ids[wg["launch"][ids] == int(c.launches.min())]
    start = end = None
    if here.size:
        start, end = ctx.rel(wg["start_ns"][here].min()), ctx.rel(wg["end_ns"][here].max())
    label = f"uneven work: {who}" if nwg <= 2 else f"uneven work ({nwg:,} workgroups)"
    return Description(text + saving, label, start, end, claims + more)
