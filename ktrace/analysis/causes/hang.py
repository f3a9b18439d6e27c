"""Hang: a notify that never came, so its waits gave up (``hangs.missing_notifies``).

Who should have sent it is named as agents: the producer rank's programs that send on that flag
to that consumer (in any launch of the capture), else the producer rank's other programs. Whether
they were themselves stuck is read from their own waits in the launch that hung (a wait that
covered the consumer's wait), never from the rank as a whole or from another launch. Priced by a
replay in which the timed-out waits of those launches are released (never-signalled ones when
they start, cut-short ones by the notify that came after).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...schema import EventKind, arg_column
from ...text import fmt_ns, ranks_text
from ..names import flag_name, region_label
from ..stalls import waits as _waits
from .model import Cause, Changes, Claim, Context, Description
from .words import launches_text, progs_text, saving_text

KIND = "hang"
TITLE = "hang"


@dataclass(frozen=True)
class Detail:
    consumer: int
    producer: int
    flag: int
    expected: int
    cmp: str
    programs: tuple  # the consumer's programs that waited
    n_waiters: int
    waited_ns: float
    magnitude_ns: float
    launch: int  # the first launch that hung (what the text describes)
    since_ns: int  # its waits' earliest start (absolute)
    gave_up_ns: int
    last_value_sent: int
    senders: tuple  # producer programs that send on that flag (in any launch), or that fed the waiters' other waits
    feeders: bool  # (senders are those feeders: nobody ever sent on that flag)
    candidates: tuple  # the producer agents judged: senders, else the producer rank's other programs
    stuck: tuple  # of those, the programs that were waiting while the consumer waited
    stuck_since_ns: int  # their earliest such wait's start (-1)
    stuck_until_ns: int  # and its end
    last_event_ns: int  # else: the candidates' last event end in that launch (-1 when they recorded none)
    region_id: int
    round: int  # the first waiter's wait is its round-th wait at that call site in the launch (-1)
    sm: int
    cut_short: int
    cut_ranks: tuple


def _producer_state(ctx: Context, launch: int, prod: int, cons: int, flag: int, waiting: tuple, since: int,
                    gave_up: int) -> tuple:
    """``(senders, feeders, candidates, stuck, stuck_since, stuck_until, last_event)`` of a missing
    notify: the producer's programs that send on that flag (or, ``feeders``, none ever did and these
    released the waiting programs' other waits), those judged, which were stuck and when, else
    when the last of them ended."""
    trace = ctx.trace
    N = EventKind.NOTIFY
    nr, npg = trace.at(N, "rank"), trace.at(N, "program")
    sends = (nr == prod) & (trace.at(N, arg_column(N, "peer")) == cons) & (trace.at(N, arg_column(N, "flag")) == flag)
    senders = tuple(sorted(set(npg[sends].tolist())))
    keys = trace.wg_keys
    here = (keys[:, 0] == prod) & (keys[:, 1] == launch)
    progs = set(keys[here, 2].tolist())
    w = _waits(trace)
    if not senders:  # a flag nobody ever notified: the programs that released the waiters' other waits
        fed = (w["rank"] == cons) & np.isin(w["program"], list(waiting)) & (w["notify_rank"] == prod)
        senders = tuple(sorted(set(w["notify_program"][fed].tolist())))
        feeders = True
    else:
        feeders = False
    if senders:
        cands = tuple(p for p in senders if p in progs) or senders
    else:
        cands = tuple(sorted(progs - (set(waiting) if prod == cons else set())))
    mine = (w["rank"] == prod) & (w["launch"] == launch) & np.isin(w["program"], list(cands))
    if prod == cons:
        mine &= ~np.isin(w["program"], list(waiting))
    ws, we = w["start_ns"][mine], w["end_ns"][mine]
    overlap = np.minimum(we, gave_up) - np.maximum(ws, since)
    stuck_sel = overlap >= 0.5 * max(gave_up - since, 1)
    stuck = tuple(sorted(set(w["program"][mine][stuck_sel].tolist())))
    s0 = int(ws[stuck_sel].min()) if stuck_sel.any() else -1
    s1 = int(we[stuck_sel].max()) if stuck_sel.any() else -1
    last = -1
    if not stuck and cands:
        sel = here & np.isin(keys[:, 2], list(cands))
        if sel.any():
            from ..stalls import workgroup_extent

            last = int(workgroup_extent(trace)[1][sel].max())
    return senders, feeders, cands, stuck, s0, s1, last


def detect(ctx: Context) -> list[Cause]:
    trace, to, missing = ctx.trace, ctx.timeouts, ctx.missing
    if to is None or missing is None or missing.size == 0:
        return []
    out = []
    keyed: dict = {}
    for i, row in enumerate(missing):
        keyed.setdefault((int(row["producer"]), int(row["consumer"]), int(row["flag"])), []).append(i)
    for (prod, cons, flag), idx in keyed.items():
        rows = missing[idx]
        launches = np.unique(rows["launch"]).astype(np.int64)
        first = rows[np.argmin(rows["since_ns"])]
        sel_to = to[(to["rank"] == cons) & (to["peer"] == prod) & (to["flag"] == flag) & (to["status"] == "never signalled")]
        cut = to[np.isin(to["launch"], launches) & (to["status"] != "never signalled")]
        mine = sel_to[sel_to["launch"] == first["launch"]]
        gave_up = int(mine["gave_up_ns"].max()) if mine.size else int(first["since_ns"])
        waiting = tuple(sorted(set(mine["program"].tolist())))
        senders, feeders, cands, stuck, s0, s1, last = _producer_state(ctx, int(first["launch"]), prod, cons, flag, waiting,
                                                              int(first["since_ns"]), gave_up)

        def changes(sub, launches=launches):
            in_l = np.isin(sub.launch_ids[sub.wg_launch[sub.w_wg]], launches)
            return Changes(release_timeouts=in_l)

        programs = sorted({p for ps in rows["programs"] for p in ps})
        rnd = -1
        if mine.size:
            f0 = mine[np.argmin(mine["since_ns"])]
            w = _waits(trace)
            reg = trace.column("region")
            same = (w["rank"] == f0["rank"]) & (w["launch"] == f0["launch"]) & (w["program"] == f0["program"])
            same &= reg[w["row"]] == reg[f0["row"]]
            rnd = int(np.count_nonzero(same & (w["row"] < f0["row"])))
        med = float(np.median(sel_to["waited_ns"])) if sel_to.size else math.nan
        f = sel_to[np.argmin(sel_to["since_ns"])] if sel_to.size else None
        out.append(Cause(KIND, prod, (cons, prod), launches, changes=changes, excess_ns=float(sel_to["waited_ns"].sum()),
                         detail=Detail(
                             consumer=cons, producer=prod, flag=flag, expected=int(rows["expected"][0]),
                             cmp=str(rows["cmp"][0]), programs=tuple(programs), n_waiters=int(rows["n_waiters"].sum()),
                             waited_ns=med, magnitude_ns=med, launch=int(first["launch"]), since_ns=int(first["since_ns"]),
                             gave_up_ns=int(f["gave_up_ns"]) if f is not None else -1,
                             last_value_sent=int(rows["last_value_sent"].max()), senders=senders, feeders=feeders,
                             candidates=cands,
                             stuck=stuck, stuck_since_ns=s0, stuck_until_ns=s1, last_event_ns=last,
                             region_id=int(trace.column("region")[f["row"]]) if f is not None else -1, round=rnd,
                             sm=int(f["sm"]) if f is not None else -1, cut_short=int(cut.size),
                             cut_ranks=tuple(sorted(set(cut["rank"].tolist()))))))
    return out


def describe(c: Cause, ctx: Context) -> Description:
    d: Detail = c.detail
    trace = ctx.trace
    n, L = int(c.launches.size), ctx.n_launches
    launches = [int(x) for x in c.launches.tolist()]
    consumer = tuple((d.consumer, d.launch, int(p), 0) for p in d.programs)
    producer = (d.producer, d.launch, -1, 0)
    where = f" in {region_label(trace, d.region_id)}" if d.region_id >= 0 else ""
    sent = (f"its last notify on that flag wrote {d.last_value_sent}" if d.last_value_sent >= 0
            else "it sent no notify on that flag")
    claims = [Claim("gave_up", consumer, {"launch": d.launch, "flag": d.flag, "peer": d.producer,
                                          "waited_ns": d.waited_ns, "round": d.round if len(d.programs) == 1 else -1,
                                          "region_id": d.region_id}),
              Claim("never_sent", (producer,), {"launch": d.launch, "consumer": d.consumer, "flag": d.flag,
                                                "expected": d.expected, "cmp": d.cmp,
                                                "last_value_sent": d.last_value_sent})]
    sends = "which released its other waits" if d.feeders else f"which send{'s' if len(d.senders) == 1 else ''} on that flag"
    who = (f"rank {d.producer} {progs_text(d.senders)} ({sends})"
           if d.senders else f"rank {d.producer} {progs_text(d.candidates)}" if d.candidates else "")
    state = ""
    if d.stuck:
        agents = tuple((d.producer, d.launch, int(p), 0) for p in d.stuck)
        state = (f"; rank {d.producer} {progs_text(d.stuck)} w{'as' if len(d.stuck) == 1 else 'ere'} itself stuck "
                 f"waiting (from +{fmt_ns(ctx.rel(d.stuck_since_ns))} to +{fmt_ns(ctx.rel(d.stuck_until_ns))})")
        claims.append(Claim("stuck_waiting", agents, {"launch": d.launch, "since_ns": ctx.rel(d.since_ns),
                                                       "gave_up_ns": ctx.rel(d.gave_up_ns)}))
    elif who and d.last_event_ns >= 0:
        agents = tuple((d.producer, d.launch, int(p), 0) for p in d.candidates)
        state = (f"; {who} w{'as' if len(d.candidates) == 1 else 'ere'} not waiting on anything (the last of "
                 f"{'its' if len(d.candidates) == 1 else 'their'} events ended at +{fmt_ns(ctx.rel(d.last_event_ns))})")
        claims.append(Claim("not_waiting", agents, {"launch": d.launch, "since_ns": ctx.rel(d.since_ns),
                                                     "gave_up_ns": ctx.rel(d.gave_up_ns),
                                                     "last_event_ns": ctx.rel(d.last_event_ns)}))
    text = (f"HANG: rank {d.consumer} {progs_text(d.programs)}" + (f" (SM {d.sm})" if d.sm >= 0 else "")
            + f" waited{f' (its wait of round {d.round} there)' if d.round >= 0 and len(d.programs) == 1 else ''}"
            f" on flag {flag_name(trace, d.flag)}{where} for value {d.cmp} {d.expected} from rank "
            f"{d.producer} and gave up after {fmt_ns(d.waited_ns)}: rank {d.producer} never sent it ({sent}){state}; "
            f"{launches_text(n, L)}.")
    if d.cut_short:
        text += (f" Its cascade: {d.cut_short} more wait{'s' if d.cut_short != 1 else ''} on "
                 f"{ranks_text(d.cut_ranks)} gave up with it (cut short by the first timeout on their rank, "
                 f"not missing signals themselves).")
    saving, more = saving_text(c, "Sent on time", ctx, (producer,))
    start = ctx.rel(d.since_ns)
    end = ctx.rel(d.gave_up_ns) if d.gave_up_ns >= 0 else None
    return Description(text + " " + saving, f"hang: rank {d.consumer} waited on rank {d.producer}", start, end,
                       claims + more)
