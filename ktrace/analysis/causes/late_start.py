"""Late program start: a program that started late inside its launch, while its SM was free.

The launch-level view (``late_launch``) compares ranks; inside one launch on one GPU a program
can start late too (a persistent producer that spins before its first probe, a program whose
first work waits on a host-side flag): its consumers on the same GPU wait for it, and at one
rank there is no other rank to compare with. A program's start is measured from when its SM
could take it: the launch's first start on that rank, or the end of the program before it on
the same SM (a program of a second wave is not late). Late is that, beyond the rank's median
program, by at least ``CauseConfig.min_skew_ns``. Priced by a replay with those programs starting
that much earlier.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...keys import group_median, lexorder
from ...text import fmt_ns
from .model import Cause, Changes, Claim, Context, Description
from .words import launches_text, progs_text, saving_text, workgroup_agents

KIND = "late_start"
TITLE = "late program start"


@dataclass(frozen=True)
class Detail:
    magnitude_ns: float  # median late start of its late programs
    max_ns: float
    programs: tuple  # the late programs of the rank
    baseline_ns: float  # the rank's median program start after its SM was free
    n_late: int  # (program, launch) pairs that started late
    workgroups: np.ndarray  # their workgroup ids (the replay shifts them)


#: Workgroups per block in :func:`_late_starts`.
_BLOCK = 1 << 16


def _block(rank, launch, sm, start, end) -> tuple[np.ndarray, np.ndarray]:
    """``_late_starts`` of a block of whole (rank, launch) groups."""
    n = rank.size
    o = lexorder(rank, launch, sm, start)
    ro, lo, so = rank[o], launch[o], sm[o]
    same_rl = np.r_[False, (ro[1:] == ro[:-1]) & (lo[1:] == lo[:-1])]
    same_sm = same_rl & np.r_[False, so[1:] == so[:-1]]
    del ro, lo, so
    grp = np.cumsum(~same_rl) - 1
    st = start[o].astype(np.int64)
    t0 = np.minimum.reduceat(st, np.flatnonzero(~same_rl))[grp]
    prev_end = np.where(same_sm, np.r_[0, end[o][:-1]], t0)
    off = np.empty(n)
    off[o] = (st - np.maximum(t0, np.minimum(prev_end, st))).astype(np.float64)
    g = np.empty(n, np.int64)
    g[o] = grp
    med = group_median(g, off, int(grp.max()) + 1)
    return off, off - med[g]


def _late_starts(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """Per workgroup of ``ctx.workgroups``: its start after its SM was free, and that beyond the
    median of its rank and launch (cached)."""
    wg = ctx.workgroups

    def build():
        n = wg.size
        off, excess = np.zeros(n), np.zeros(n)
        if n == 0:
            return off, excess
        # the rows are in (rank, launch, program) order: blocks of whole (rank, launch) groups,
        # each sorted on its own (a few temporaries of a block, not of a million workgroups)
        rank, launch = wg["rank"], wg["launch"]
        head = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (launch[1:] != launch[:-1])])
        bounds = np.r_[head[:: max(1, int(np.ceil(head.size * _BLOCK / n)))], n] if n > _BLOCK else np.r_[0, n]
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            off[a:b], excess[a:b] = _block(rank[a:b], launch[a:b], wg["sm"][a:b], wg["start_ns"][a:b], wg["end_ns"][a:b])
        return off, excess

    return ctx.trace.cached(("late_starts", id(wg)), build)


def detect(ctx: Context) -> list[Cause]:
    wg, cfg = ctx.workgroups, ctx.config
    if wg is None or wg.size == 0:
        return []
    off, excess = _late_starts(ctx)
    late = excess >= cfg.min_skew_ns
    # a second wave of a grid larger than the GPU is not late: only a few programs of a launch
    if not late.any():
        return []
    rank = wg["rank"].astype(np.int64)
    out = []
    for r in np.unique(rank[late]).tolist():  # ranks: a handful
        sel = np.flatnonzero(late & (rank == r))
        codes = np.unique(wg["launch"][sel]).astype(np.int64)
        mine = rank == r
        ids = np.asarray(sel, np.int64)
        vals = excess[sel]

        def changes(sub, ids=ids, vals=vals):
            sh = np.zeros(sub.wg_id.size)
            k = np.searchsorted(ids, sub.wg_id)
            k = np.clip(k, 0, ids.size - 1)
            hit = ids[k] == sub.wg_id
            sh[hit] = vals[k[hit]]
            return Changes(shift=sh)

        out.append(Cause(KIND, int(r), (int(r),), codes, changes=changes, excess_ns=float(vals.sum()), detail=Detail(
            magnitude_ns=float(np.median(vals)), max_ns=float(vals.max()),
            programs=tuple(sorted(set(wg["program"][sel].tolist()))),
            baseline_ns=float(np.median(off[mine] - excess[mine])), n_late=int(sel.size),
            workgroups=ids)))
    return out


def describe(c: Cause, ctx: Context) -> Description:
    d: Detail = c.detail
    n, L = int(c.launches.size), ctx.n_launches
    who = f"rank {c.rank} {progs_text(d.programs)}"
    wg = ctx.workgroups
    ids = np.asarray(d.workgroups, np.int64)
    named, n_agents = workgroup_agents(wg, ids)
    launches = [int(x) for x in c.launches.tolist()]
    claims = [Claim("program_started_late", named, {"launches": launches, "n_agents": n_agents,
                                                    "magnitude_ns": d.magnitude_ns,
                                                    "max_ns": d.max_ns, "n_late": d.n_late})]
    rng = f", up to {fmt_ns(d.max_ns)}" if d.max_ns > 1.05 * d.magnitude_ns else ""
    text = (f"{who} started late: {fmt_ns(d.magnitude_ns)} (median{rng}) after the other programs of its launch "
            f"while its SM was free ({d.n_late:,} program start{'s' if d.n_late != 1 else ''}, {launches_text(n, L)}).")
    saving, more = saving_text(c, "Started with the others", ctx, named)
    wg = ctx.workgroups
    first_l = int(c.launches.min())
    ids = np.asarray(d.workgroups, np.int64)
    here = ids[wg["launch"][ids] == first_l]
    start = end = None
    if here.size:
        same = (wg["launch"] == first_l) & (wg["rank"] == c.rank)
        start, end = ctx.rel(wg["start_ns"][same].min()), ctx.rel(wg["start_ns"][here].max())
    return Description(text + " " + saving, f"{who} started late", start, end, claims + more)
