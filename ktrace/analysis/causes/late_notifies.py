"""Late notifies: notifies held back after their producer was ready.

Judged per agent and call site (``stalls.notify_holds``): a notify held beyond what that program
takes at its other rounds, or beyond what the agents of the same role take there, by at least
``CauseConfig.min_late_ns``. One cause per producer rank and call site, naming the programs and
rounds (the k-th notify of each program there: a tile index in a tile loop) held back by at least
:data:`SHARE_OF_WORST` of the longest hold there (a program held 1-2 µs by jitter is not named
beside one held 30 µs). Priced by a replay with those holds removed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...keys import dense_codes
from ...schema import EventKind
from ...text import fmt_ns, ranges_text
from ..names import region_label
from ..stalls import hold_columns
from ..trace import Sparse, Trace, agent_of, has_lanes
from .model import Cause, Changes, Context, Description
from .words import agents, lane_text, launches_text, progs_text, rounds_claim, saving_text, worst_in_first_launch

KIND = "late_notifies"
TITLE = "late notifies"
#: The notifies a cause names at one call site: those held back by at least this share of the
#: longest hold there (and by ``CauseConfig.min_late_ns``).
SHARE_OF_WORST = 0.1


@dataclass(frozen=True)
class Detail:
    region_id: int  # the call site (the notify's region)
    magnitude_ns: float  # median hold beyond the baseline, over the late notifies
    max_ns: float
    baseline_ns: float  # median baseline of the late notifies
    n_late: int
    n_notifies: int  # the rank's notifies at that call site
    programs: tuple
    rounds: tuple
    rows: np.ndarray  # the late notifies' rows
    lanes: tuple = ()  # the lane of its programs that held them (programs traced per lane; else empty)
    floor_ns: float = 0.0  # the least hold named (``CauseConfig.min_late_ns``, or a share of the longest)


def notify_rounds(trace: Trace, pos: np.ndarray | None = None) -> np.ndarray:
    """Per notify (row order; or at positions ``pos`` among them), its place among its agent's
    notifies of the same region."""
    N = EventKind.NOTIFY
    if pos is not None and not has_lanes(trace):
        # an agent is a workgroup, its notifies contiguous: per region, a running count of that
        # region's notifies, less the count before the workgroup's first notify
        rows = trace.rows_of(N)
        reg = trace.at(N, "region")
        g = trace.wg[rows]
        start = np.searchsorted(g, g[pos], side="left")
        out = np.zeros(pos.size, np.int64)
        for rid in np.unique(reg[pos]).tolist():  # (the regions of the late notifies: a handful)
            c = np.cumsum(reg == rid, dtype=np.int32)
            here = reg[pos] == rid
            before = np.where(start[here] > 0, c[np.maximum(start[here] - 1, 0)], 0)
            out[here] = c[pos[here]] - before - 1
        return out
    g = agent_of(trace, trace.rows_of(N))
    reg = trace.at(N, "region").astype(np.int64)
    rc, _ = dense_codes(reg)
    key = g * (int(rc.max()) + 1 if rc.size else 1) + rc
    o = np.argsort(key, kind="stable")
    ks = key[o]
    idx = np.arange(ks.size)
    first = np.r_[True, ks[1:] != ks[:-1]] if ks.size else np.zeros(0, bool)
    occ = idx - np.maximum.accumulate(np.where(first, idx, 0)) if ks.size else idx
    out = np.empty(ks.size, np.int64)
    out[o] = occ
    # (with lanes every notify is counted: the rounds asked for are picked out of them)
    return out if pos is None else out[pos]


def site_groups(rank: np.ndarray, reg: np.ndarray, lane: np.ndarray, li: np.ndarray):
    """The notifies at positions ``li`` (of the per-notify columns ``rank``, ``reg``, ``lane``)
    grouped by (rank, call site, lane): per group (a handful), its rank, region id, lane and which
    of ``li`` are in it."""
    gk = (rank[li] * (1 << 24) + reg[li]) * 64 + lane[li]
    for key in np.unique(gk).tolist():
        yield (key >> 6) >> 24, (key >> 6) & ((1 << 24) - 1), key & 63, gk == key


def held_less(sel: np.ndarray, excess: np.ndarray, rows: np.ndarray):
    """The replay's change for a cause of the notifies at sorted positions ``sel`` (of the
    notifies whose rows are ``rows``): each held back ``excess`` less."""
    hold = Sparse(sel, excess[sel], 0.0)
    return lambda sub: Changes(hold=hold(np.searchsorted(rows, sub.n_row)))


def detect(ctx: Context) -> list[Cause]:
    trace, cfg = ctx.trace, ctx.config
    h = hold_columns(trace)
    hx = h["held_excess_ns"]
    late = np.isfinite(hx) & (hx >= cfg.min_late_ns)
    if not late.any():
        return []
    reg = trace.at(EventKind.NOTIFY, "region").astype(np.int64)
    rank = h["rank"].astype(np.int64)
    out = []
    li = np.flatnonzero(late)
    rounds = np.zeros(late.size, np.int64)
    rounds[li] = notify_rounds(trace, li)
    lanes = has_lanes(trace)
    lane = trace.column("lane")[h["row"]].astype(np.int64) if lanes else np.zeros(rank.size, np.int64)
    # one cause per (rank, call site, lane): the partitions of a program are agents of their own
    for r, rid, ln, at in site_groups(rank, reg, lane, li):
        sel = li[at]
        floor = max(float(cfg.min_late_ns), SHARE_OF_WORST * float(hx[sel].max()))
        sel = sel[hx[sel] >= floor]
        mine = (rank == r) & (reg == rid)
        codes = np.unique(h["launch"][sel]).astype(np.int64)
        base = h["baseline_ns"][sel]
        out.append(Cause(KIND, int(r), (int(r),), codes, changes=held_less(sel, hx, h["row"]), excess_ns=float(hx[sel].sum()), detail=Detail(
            region_id=int(rid), magnitude_ns=float(np.median(hx[sel])), max_ns=float(hx[sel].max()),
            baseline_ns=float(np.nanmedian(base)) if np.isfinite(base).any() else math.nan,
            n_late=int(sel.size), n_notifies=int(mine.sum()),
            programs=tuple(sorted(set(h["program"][sel].tolist()))), rounds=tuple(sorted(set(rounds[sel].tolist()))),
            rows=h["row"][sel], lanes=(int(ln),) if lanes else (), floor_ns=floor)))
    return out


def describe(c: Cause, ctx: Context) -> Description:
    d: Detail = c.detail
    trace = ctx.trace
    n, L = int(c.launches.size), ctx.n_launches
    who = f"rank {c.rank} {progs_text(d.programs)}" + lane_text(trace, c, d.lanes)
    named = agents(c.rank, d.programs, lane=d.lanes[0] if d.lanes else 0)
    base = (f", beyond the {fmt_ns(d.baseline_ns)} its other rounds and its peers there take" if math.isfinite(d.baseline_ns)
            else "")
    rounds = ranges_text(d.rounds, 3)
    site = region_label(trace, d.region_id)
    claims = [rounds_claim("held_back", named, c, trace, floor_ns=d.floor_ns)]
    text = (f"{who} notified late: {d.n_late:,} of rank {c.rank}'s {d.n_notifies:,} notifies {site} "
            f"w{'as' if d.n_late == 1 else 'ere'} held back "
            f"{fmt_ns(d.magnitude_ns)} each (median; up to {fmt_ns(d.max_ns)}) after the program was ready (after its "
            f"previous event had ended{base}): round{'s' if len(d.rounds) != 1 else ''} {rounds} of each program's notifies there, "
            f"{launches_text(n, L)}. ")
    saving, more = saving_text(c, "Notified on time", ctx, named)
    start = end = None
    hx = hold_columns(trace)
    worst = worst_in_first_launch(ctx, c, hx["row"], d.rows, hx["held_excess_ns"])
    if worst is not None:
        s_n = int(hx["start_ns"][worst])
        start, end = ctx.rel(s_n - int(hx["held_ns"][worst])), ctx.rel(s_n)
    return Description(text + saving, f"{who} notified late", start, end, claims + more)
