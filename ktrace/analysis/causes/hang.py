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

from ...schema import EventKind, arg_column, is_local
from ...text import fmt_ns, ranks_text
from ..lanes import lane_name
from ..names import barrier_name, flag_name, region_label
from ..stalls import waits as _waits
from ..trace import has_lanes
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
    local: bool = False  # an mbarrier of one program: ``senders``/``candidates``/``stuck`` are lanes of it
    lane: int = -1  # the waiting lane (programs traced per lane; else -1)
    sms: tuple = ()  # the SMs its waiting programs ran on (in the launch described)


def _local_state(ctx: Context, launch: int, rank: int, program: int, lane: int, flag: int, since: int,
                 gave_up: int) -> tuple:
    """:func:`_producer_state` of an mbarrier phase never completed: the lanes of the waiting
    program that arrive on that barrier (in any launch), whether they were waiting meanwhile."""
    from ..stalls import workgroup_extent
    from ..trace import lane_view, wg_lanes

    trace = ctx.trace
    N = EventKind.NOTIFY
    arrive = (is_local(trace.at(N, "flags")) & (trace.at(N, "rank") == rank) & (trace.at(N, "program") == program)
              & (trace.at(N, arg_column(N, "flag")) == flag))
    senders = tuple(sorted(set(trace.column("lane")[trace.rows_of(N)[arrive]].tolist()) - {lane}))
    w = _waits(trace)
    wl = trace.column("lane")[w["row"]]
    mine = (w["rank"] == rank) & (w["launch"] == launch) & (w["program"] == program) & np.isin(wl, list(senders))
    ws, we = w["start_ns"][mine], w["end_ns"][mine]
    overlap = np.minimum(we, gave_up) - np.maximum(ws, since)
    stuck_sel = overlap >= 0.5 * max(gave_up - since, 1)
    stuck = tuple(sorted(set(wl[mine][stuck_sel].tolist())))
    s0 = int(ws[stuck_sel].min()) if stuck_sel.any() else -1
    s1 = int(we[stuck_sel].max()) if stuck_sel.any() else -1
    last = -1
    if not stuck and senders:
        v = lane_view(trace)
        k = v.wg_keys
        sel = (k[:, 0] == rank) & (k[:, 1] == launch) & (k[:, 2] == program) & np.isin(wg_lanes(v), list(senders))
        if sel.any():
            last = int(workgroup_extent(v)[1][sel].max())
    return senders, False, senders, stuck, s0, s1, last


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
        # (an mbarrier is one program's: its phases never completed are per program)
        prog = int(row["programs"][0]) if row["local"] else -1
        keyed.setdefault((int(row["producer"]), int(row["consumer"]), int(row["flag"]), prog), []).append(i)
    for (prod, cons, flag, prog), idx in keyed.items():
        rows = missing[idx]
        launches = np.unique(rows["launch"]).astype(np.int64)
        first = rows[np.argmin(rows["since_ns"])]
        local = prog >= 0
        sel_to = to[(to["rank"] == cons) & (to["peer"] == prod) & (to["flag"] == flag) & (to["status"] == "never signalled")
                    & (to["local"] == local) & ((to["program"] == prog) if local else True)]
        cut = to[np.isin(to["launch"], launches) & (to["status"] != "never signalled")]
        mine = sel_to[sel_to["launch"] == first["launch"]]
        gave_up = int(mine["gave_up_ns"].max()) if mine.size else int(first["since_ns"])
        waiting = tuple(sorted(set(mine["program"].tolist())))
        lane = int(mine["lane"][np.argmin(mine["since_ns"])]) if mine.size and has_lanes(trace) else -1
        if local:
            senders, feeders, cands, stuck, s0, s1, last = _local_state(ctx, int(first["launch"]), cons, prog, lane, flag,
                                                                        int(first["since_ns"]), gave_up)
        else:
            senders, feeders, cands, stuck, s0, s1, last = _producer_state(ctx, int(first["launch"]), prod, cons, flag,
                                                                           waiting, int(first["since_ns"]), gave_up)

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
                             cut_ranks=tuple(sorted(set(cut["rank"].tolist()))), local=local, lane=lane,
                             sms=tuple(sorted(set(mine["sm"].tolist()))))))
    return out


def _sm_text(sms: tuple) -> str:
    """Where the waiting programs ran: " (SM 61)", " (SMs 3, 9)", " (on 132 SMs)"."""
    if not sms:
        return ""
    if len(sms) == 1:
        return f" (SM {sms[0]})"
    if len(sms) <= 4:
        return f" (SMs {', '.join(str(x) for x in sms)})"
    return f" (on {len(sms)} SMs)"


def describe(c: Cause, ctx: Context) -> Description:
    d: Detail = c.detail
    trace = ctx.trace
    n, L = int(c.launches.size), ctx.n_launches
    lane = max(d.lane, 0)
    consumer = tuple((d.consumer, d.launch, int(p), lane) for p in d.programs)
    where = f" in {region_label(trace, d.region_id)}" if d.region_id >= 0 else ""
    rnd = f" (its wait of round {d.round} there)" if d.round >= 0 and len(d.programs) == 1 else ""
    if d.local:  # an mbarrier phase that no lane of the program completed
        prog = int(d.programs[0])

        def lanes_of(ls):
            return ", ".join(f"lane {x} ({lane_name(trace, d.consumer, d.launch, x)})" for x in ls)

        producer = tuple((d.producer, d.launch, prog, int(x)) for x in d.senders) or ((d.producer, d.launch, prog, -1),)
        me = f"rank {d.consumer} program {prog}" + (f" {lanes_of([d.lane])}" if d.lane >= 0 else "")
        who = f"{lanes_of(d.senders)} of its program, which arrive{'s' if len(d.senders) == 1 else ''} on it," if d.senders else "no lane of its program"
        sent = (f"its last arrive on it completed phase {d.last_value_sent}" if d.last_value_sent >= 0
                else "no arrive on it was recorded")
        head = (f"HANG: {me}{_sm_text(d.sms)} waited{rnd} on mbarrier {barrier_name(trace, d.flag)} for phase "
                f"{d.expected} and gave up after {fmt_ns(d.waited_ns)}: {who} never completed that phase ({sent})")
        flag_values = {"flag": d.flag, "peer": -1}
        sent_values = {"local": True, "program": prog}

        def named(ls):
            return tuple((d.producer, d.launch, prog, int(x)) for x in ls)

        def said(ls):
            return lanes_of(ls)
    else:
        producer = ((d.producer, d.launch, -1, 0),)
        sent = (f"its last notify on that flag wrote {d.last_value_sent}" if d.last_value_sent >= 0
                else "it sent no notify on that flag")
        head = (f"HANG: rank {d.consumer} {progs_text(d.programs)}{_sm_text(d.sms)} waited{rnd}"
                f" on flag {flag_name(trace, d.flag)}{where} for value {d.cmp} {d.expected} from rank "
                f"{d.producer} and gave up after {fmt_ns(d.waited_ns)}: rank {d.producer} never sent it ({sent})")
        flag_values = {"flag": d.flag, "peer": d.producer}
        sent_values = {}

        whole = -1 if has_lanes(trace) else 0  # (a program of several lanes: every lane of it)

        def named(ls):
            return tuple((d.producer, d.launch, int(p), whole) for p in ls)

        def said(ls):
            return f"rank {d.producer} {progs_text(ls)}"
    claims = [Claim("gave_up", consumer, {"launch": d.launch, **flag_values, "waited_ns": d.waited_ns,
                                          "round": d.round if len(d.programs) == 1 else -1, "region_id": d.region_id}),
              Claim("never_sent", producer, {"launch": d.launch, "consumer": d.consumer, "flag": d.flag,
                                             "expected": d.expected, "cmp": d.cmp, "last_value_sent": d.last_value_sent,
                                             **sent_values})]
    if d.local:
        who = said(d.candidates) if d.candidates else ""
    else:
        sends = "which released its other waits" if d.feeders else f"which send{'s' if len(d.senders) == 1 else ''} on that flag"
        who = (f"{said(d.senders)} ({sends})" if d.senders else said(d.candidates) if d.candidates else "")
    state = ""
    if d.stuck:
        state = (f"; {said(d.stuck)} w{'as' if len(d.stuck) == 1 else 'ere'} itself stuck "
                 f"waiting (from +{fmt_ns(ctx.rel(d.stuck_since_ns))} to +{fmt_ns(ctx.rel(d.stuck_until_ns))})")
        claims.append(Claim("stuck_waiting", named(d.stuck), {"launch": d.launch, "since_ns": ctx.rel(d.since_ns),
                                                               "gave_up_ns": ctx.rel(d.gave_up_ns)}))
    elif who and d.last_event_ns >= 0:
        state = (f"; {who} w{'as' if len(d.candidates) == 1 else 'ere'} not waiting on anything (the last of "
                 f"{'its' if len(d.candidates) == 1 else 'their'} events ended at +{fmt_ns(ctx.rel(d.last_event_ns))})")
        claims.append(Claim("not_waiting", named(d.candidates), {"launch": d.launch, "since_ns": ctx.rel(d.since_ns),
                                                                  "gave_up_ns": ctx.rel(d.gave_up_ns),
                                                                  "last_event_ns": ctx.rel(d.last_event_ns)}))
    text = f"{head}{state}; {launches_text(n, L)}."
    if d.cut_short:
        text += (f" Its cascade: {d.cut_short} more wait{'s' if d.cut_short != 1 else ''} on "
                 f"{ranks_text(d.cut_ranks)} gave up with it (cut short by the first timeout on their rank, "
                 f"not missing signals themselves).")
    saving, more = saving_text(c, "Sent on time" if not d.local else "Arrived on time", ctx, producer)
    start = ctx.rel(d.since_ns)
    end = ctx.rel(d.gave_up_ns) if d.gave_up_ns >= 0 else None
    label = (f"hang: rank {d.consumer} program {d.programs[0]} waited on its mbarrier" if d.local
             else f"hang: rank {d.consumer} waited on rank {d.producer}")
    return Description(text + " " + saving, label, start, end, claims + more)
