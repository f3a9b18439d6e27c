"""Straggler: an agent (a program, a lane of one, every program of a rank) whose work before a
notify took longer on some rounds than on its others.

Judged per agent and call site (``stalls.notify_work``): a round's work runs from the agent's
previous hand-off to the moment it was ready to notify; a round is slow when that took at least
``stalls.SLOW_ROUND_SHARE`` more than the agent's median there and ``CauseConfig.min_late_ns``
more. A slower agent on every round is uneven work (``uneven_work``), a notify held back after the
work was done a late notify (``late_notifies``): neither is counted here. One cause per rank, call
site and lane, naming the programs and rounds; priced by a replay with the extra time removed.
The first round of most agents at a call site slow at once is the launch warming up (first
touches of its memory), not a straggler (:func:`_warming_up`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...schema import EventKind
from ...text import fmt_ns, ranges_text
from ..names import region_label
from ..stalls import MIN_ROUNDS, SLOW_ROUND_SHARE, hold_columns, notify_work
from ...keys import group_index
from ..trace import agent_of, has_lanes
from .late_notifies import held_less, notify_rounds, site_groups
from .model import Cause, Context, Description
from .words import agents, lane_text, launches_text, progs_text, rounds_claim, saving_text, worst_in_first_launch

KIND = "straggler"
TITLE = "straggler"
#: Slow rounds whose work is looked at for the region it went to (the most common is named).
_REGION_SAMPLE = 64


@dataclass(frozen=True)
class Detail:
    region_id: int  # the call site (the notify's region)
    magnitude_ns: float  # median extra work of the slow rounds, beyond the agent's usual
    max_ns: float
    baseline_ns: float  # median usual work of the slow rounds' agents there
    n_late: int  # slow rounds
    n_notifies: int  # the rank's notifies at that call site
    programs: tuple
    rounds: tuple
    rows: np.ndarray  # the notifies after the slow rounds
    lanes: tuple = ()  # the lane of its programs (programs traced per lane; else empty)
    work_region: str = ""  # the region of the longest event of most slow rounds ("" when none)


def detect(ctx: Context) -> list[Cause]:
    trace, cfg = ctx.trace, ctx.config
    nw = notify_work(trace)
    ex, base = nw["work_excess_ns"], nw["baseline_ns"]
    late = (np.isfinite(ex) & (nw["n_rounds"] >= MIN_ROUNDS)
            & (ex >= np.maximum(cfg.min_late_ns, SLOW_ROUND_SHARE * np.nan_to_num(base))))
    if not late.any():
        return []
    N = EventKind.NOTIFY
    reg = trace.at(N, "region").astype(np.int64)
    rank = trace.at(N, "rank").astype(np.int64)
    prog = trace.at(N, "program")
    launch = trace.at(N, "launch")
    rows = nw["row"]
    lanes = has_lanes(trace)
    lane = trace.column("lane")[rows].astype(np.int64) if lanes else np.zeros(rows.size, np.int64)
    late &= ~_warming_up(agent_of(trace, rows), launch, reg * 64 + lane, np.isfinite(ex), late)
    if not late.any():
        return []
    li = np.flatnonzero(late)
    rounds = notify_rounds(trace, li)
    out = []
    for r, rid, ln, at in site_groups(rank, reg, lane, li):  # (rank, call site, lane)
        sel = li[at]
        codes = np.unique(launch[sel]).astype(np.int64)
        out.append(Cause(KIND, int(r), (int(r),), codes, changes=held_less(sel, ex, rows), excess_ns=float(ex[sel].sum()), detail=Detail(
            region_id=int(rid), magnitude_ns=float(np.median(ex[sel])), max_ns=float(ex[sel].max()),
            baseline_ns=float(np.median(base[sel])), n_late=int(sel.size),
            n_notifies=int(np.count_nonzero((rank == r) & (reg == rid) & (lane == ln))),
            programs=tuple(sorted(set(prog[sel].tolist()))), rounds=tuple(sorted(set(rounds[at].tolist()))),
            rows=rows[sel], lanes=(int(ln),) if lanes else (), work_region=_work_region(trace, rows[sel]))))
    return out


#: The first judged round of (at least) this share of a call site's agents slow, two agents at
#: least: the launch warming up (first touches), not a straggler.
WARMING_SHARE = 0.75


def _warming_up(agent: np.ndarray, launch: np.ndarray, site: np.ndarray, judged: np.ndarray, late: np.ndarray) -> np.ndarray:
    """Per notify, whether it ends the first judged round of its agent at its call site (``site``:
    of one lane), and that round was slow for :data:`WARMING_SHARE` of the agents notifying there
    in the launch (two or more): the launch's first rounds warming caches up, everywhere at once."""
    out = np.zeros(agent.size, bool)
    j = np.flatnonzero(judged)
    if j.size == 0:
        return out
    g, keys = group_index(agent[j], site[j])  # (agent, call site): its judged rounds, in row order
    first = np.full(keys.shape[0], agent.size, np.int64)
    np.minimum.at(first, g, j)
    # the (launch, call site) of each agent's first round, and how many of them were slow
    f = first
    r_inv, r_keys = group_index(launch[f], site[f])
    n = np.bincount(r_inv, minlength=r_keys.shape[0])
    slow = np.bincount(r_inv, weights=late[f], minlength=r_keys.shape[0])
    common = (n >= 2) & (slow >= WARMING_SHARE * n)
    out[f[common[r_inv]]] = True
    return out


def _work_region(trace, rows: np.ndarray) -> str:
    """The region of the longest span of each slow round (between its previous hand-off and its
    notify, begun in it: not one around that hand-off), most common over the slow rounds (the
    first such region at a tie)."""
    W, N = int(EventKind.WAIT), int(EventKind.NOTIFY)
    kind, reg = trace.column("kind"), trace.column("region")
    s, e = trace.column("start_ns"), trace.column("end_ns")
    agent = trace.wg  # (rows of one agent are contiguous; its lanes one after another)
    lane = trace.column("lane")
    found: dict = {}
    for row in rows[:: max(1, rows.size // _REGION_SAMPLE)][:_REGION_SAMPLE].tolist():
        a = row - 1
        while a >= 0 and agent[a] == agent[row] and lane[a] == lane[row] and kind[a] not in (W, N):
            a -= 1
        begin = e[a] if a >= 0 and agent[a] == agent[row] and lane[a] == lane[row] else s[a + 1]
        best, best_d = None, -1
        for b in range(a + 1, row):  # (in record order: the first longest at a tie)
            if kind[b] == int(EventKind.SPAN) and s[b] >= begin and e[b] - s[b] > best_d:
                best, best_d = int(reg[b]), int(e[b] - s[b])
        if best is not None:
            found[best] = found.get(best, 0) + 1
    if not found:
        return ""
    top = max(found.values())
    if sum(1 for v in found.values() if v == top) > 1:
        return ""  # (no one region holds most of them)
    return trace.region_name(max(found, key=found.get))


def describe(c: Cause, ctx: Context) -> Description:
    d: Detail = c.detail
    trace = ctx.trace
    n, L = int(c.launches.size), ctx.n_launches
    who = f"rank {c.rank} {progs_text(d.programs)}" + lane_text(trace, c, d.lanes)
    named = agents(c.rank, d.programs, lane=d.lanes[0] if d.lanes else 0)
    site = region_label(trace, d.region_id)
    claims = [rounds_claim("slow_rounds", named, c, trace, work_region=d.work_region)]
    rounds = ranges_text(d.rounds, 3)
    where = f", most of it in '{d.work_region}'" if d.work_region else ""
    usual = f" its usual {fmt_ns(d.baseline_ns)}" if math.isfinite(d.baseline_ns) else " its usual"
    text = (f"straggler: {who} was slow on round{'s' if len(d.rounds) != 1 else ''} {rounds} of its notifies {site}: "
            f"its work before notifying took {fmt_ns(d.magnitude_ns)} more than{usual} there (median of "
            f"{d.n_late:,} slow round{'s' if d.n_late != 1 else ''}; up to {fmt_ns(d.max_ns)} more){where}; "
            f"{launches_text(n, L)}. ")
    saving, more = saving_text(c, "At its usual pace", ctx, named)
    start = end = None
    nw = notify_work(trace)
    worst = worst_in_first_launch(ctx, c, nw["row"], d.rows, nw["work_excess_ns"])
    if worst is not None:  # (from the round's start to its notify)
        end = ctx.rel(trace.column("start_ns")[nw["row"][worst]])
        start = end - int(nw["work_ns"][worst]) - int(np.nan_to_num(hold_columns(trace)["held_ns"][worst]))
    return Description(text + saving, f"{who} was slow on rounds {rounds}", start, end, claims + more)
