"""A live dump (``ktrace.flight``): who waits on whom at the moment of the dump, and why.

A dump holds, per lane (rank, launch, program), its last records and, for a lane spinning at
the dump, its open wait: the flag (heap offset), the value and comparison it waits for, the
value it last read and the rank expected to send it. :func:`live_report` builds the wait-for
graph across ranks and lanes:

* an open wait on flag F of rank r from rank q points at the lanes of rank q whose kept records
  hold a notify of F to rank r (the lanes that send F); when none does, at rank q itself (the
  sender is unknown: it never notified F within the records kept);
* following the edges from the waiting lanes ends in a cycle (a deadlock: every lane on it waits
  for the next) or in a root: a lane that is not waiting (finished, or working without records:
  open spans write nothing until they end), a lane that never started, or an unknown sender.

The headline says it in one line (the waiting lanes, the flag, the lane that did not send it
and what that lane is doing); the evidence follows, each line from the dump's own records. Times
are each rank's own: how long before its dump (no clock alignment needed). Merged dumps of
several ranks (``ktrace merge``) are read the same way.

Nothing is said from what a dump's metadata merely claims: when the file is read its fields are
checked and held against its buffers (``ktrace.flight.ring.check_live`` and ``check_dump``:
each open wait listed is the one the buffer holds, the records lost are the buffer's counts, no
wait lasted longer than its launch had run), and a dump that fails is refused in one line naming
it. Every line is printed through ``text.printable``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..schema import CMP_SYMBOLS, EventFlag, EventKind, arg_column
from ..text import fmt_ns, printable, ranges_text
from .hangs import cmp_text, compares

#: A wait's operator (as :func:`cmp_text` writes it) back to its ``schema.Cmp`` code.
_CMP_CODES = {s: c for c, s in CMP_SYMBOLS.items()}

Lane = tuple  # (rank, launch, program)


@dataclass(frozen=True)
class OpenWait:
    """One lane spinning at the dump."""

    rank: int
    launch: int
    kernel: str
    program: int
    flag: int  # heap offset
    flag_name: str
    expected: int
    cmp: str  # operator, e.g. ">="
    seen: int
    peer: int
    region: str
    waited_ns: float  # from the wait's start to the dump
    heap: int | None = None  # the flag's value read from the heap at the dump (None: not read)

    @property
    def lane(self) -> Lane:
        return (self.rank, self.launch, self.program)


@dataclass
class LiveReport:
    """The wait-for graph of a live dump and its summary."""

    headline: str
    evidence: list[str]
    waits: list[OpenWait]
    #: waiting lane -> the lanes that send its flag (empty: unknown sender on the peer rank)
    edges: dict = field(default_factory=dict)
    #: the lanes of a deadlock cycle, in order (empty when there is none)
    cycle: list = field(default_factory=list)
    #: lanes (or ``(rank, None, None)`` for an unknown sender) the waits end at
    roots: list = field(default_factory=list)
    reason: str = ""

    def lines(self) -> list[str]:
        return [self.headline] + ["  " + e for e in self.evidence]

    def to_json(self) -> dict:
        return {"headline": self.headline, "evidence": self.evidence, "reason": self.reason,
                "cycle": [list(x) for x in self.cycle], "roots": [list(x) for x in self.roots],
                "waits": [w.__dict__ | {"lane": list(w.lane)} for w in self.waits]}


def is_live(cap) -> bool:
    """Whether a capture is a live dump (or merges some)."""
    return any("live" in (ln.meta or {}) for rc in cap.ranks.values() for ln in rc.launches)


def _lane_text(lane) -> str:
    r, _, p = lane
    return f"rank {r} (sender unknown)" if p is None else f"rank {r} program {p}"


def _lanes_text(lanes) -> str:
    by_rank: dict = {}
    for r, _, p in lanes:
        by_rank.setdefault(r, set()).add(p)
    parts = []
    for r, ps in sorted(by_rank.items()):
        ps = sorted(ps)
        parts.append(f"rank {r} program{'s' if len(ps) > 1 else ''} {ranges_text(ps)}")
    return "; ".join(parts)


def live_report(cap) -> LiveReport | None:
    """The wait-for graph of a live dump (None when ``cap`` is not one).

    Args:
        cap: a ``ktrace.captures.Capture`` (one rank's dump, or ranks' dumps merged).
    """
    if not is_live(cap):
        return None
    from .names import flag_name, region_label
    from .trace import prepare

    trace = prepare(cap)
    waits: list[OpenWait] = []
    notifies = []  # (rank, launch, program, dest, flag, value, ago_ns)
    last: dict = {}  # lane -> (kind, region, ago_ns, args)
    state: dict = {}  # lane -> "never started" | "idle"
    lost_total = 0
    dump_ago = {}
    reasons: dict[int, str] = {}  # rank -> what made its dump (ranks' dumps merged may differ)
    for r, rc in sorted(cap.ranks.items()):
        for ln in rc.launches:
            live = (ln.meta or {}).get("live")
            if live is None:
                continue
            if "reason" in live:
                reasons[r] = printable(str(live["reason"]))
            d = ln.decode(r, cache=False)
            hz = d.header.tick_hz
            ticks = int(live["dump_ticks"])
            ev = d.events
            if d.header.lanes > 1:  # (a lane of a program traced per lane is a virtual program, as the dump numbers them)
                ev = ev.copy()
                ev["program"] = ev["program"] * d.header.lanes + ev["lane"]
            ago = (ticks - ev["end"].astype(np.int64)) * 1e9 / hz
            is_open = (ev["flags"] & int(EventFlag.OPEN)) != 0
            nt = (ev["kind"] == EventKind.NOTIFY) & ~is_open
            for i in np.flatnonzero(nt):
                notifies.append((r, ln.index, int(ev["program"][i]), int(ev[arg_column(EventKind.NOTIFY, "peer")][i]),
                                 int(ev[arg_column(EventKind.NOTIFY, "flag")][i]), int(ev[arg_column(EventKind.NOTIFY, "value")][i]),
                                 float(ago[i])))
            # each lane's last record that is not the open wait (events are in program order)
            done = np.flatnonzero(~is_open)
            if done.size:
                progs = ev["program"][done]
                lastpos = done[np.r_[progs[1:] != progs[:-1], True]]
                for i in lastpos:
                    last[(r, ln.index, int(ev["program"][i]))] = (int(ev["kind"][i]), int(ev["region"][i]), float(ago[i]),
                                                                  (int(ev["arg0"][i]), int(ev["arg1"][i]), int(ev["arg2"][i])))
            heads = np.asarray(live.get("heads", []), np.int64)
            started = np.asarray(live.get("started", []), np.int64)
            for p in range(min(heads.size, started.size)):
                if heads[p] == 0 and started[p] == 0:
                    state[(r, ln.index, p)] = "never started"
            lost_total += int(d.dropped_per_program.sum(dtype=np.int64))  # (the buffer's counts, equal to the dump's: checked)
            for w in live.get("open_waits", []):
                waits.append(OpenWait(rank=r, launch=ln.index, kernel=ln.kernel, program=int(w["program"]), flag=int(w["flag"]),
                                      flag_name=flag_name(trace, int(w["flag"])), expected=int(w["expected"]),
                                      cmp=cmp_text(int(w["cmp"])), seen=int(w["seen"]), peer=int(w["peer"]),
                                      region=region_label(trace, int(w["region"])),
                                      waited_ns=(ticks - int(w["since"])) * 1e9 / hz,
                                      heap=int(w["heap_value"]) if "heap_value" in w else None))
            dump_ago[r] = live
    if len(set(reasons.values())) > 1:
        reason = "; ".join(f"rank {r}: {x}" for r, x in sorted(reasons.items()))
    else:
        reason = next(iter(reasons.values()), None) or printable(str((cap.meta.get("live") or {}).get("reason", "dump")))
    waiting = {w.lane: w for w in waits}
    # edges: who sends each waiting lane's flag
    senders: dict = {}
    for (r, li, p, dest, flag, value, ago) in notifies:
        senders.setdefault((r, dest, flag), {}).setdefault((r, li, p), []).append((value, ago))
    edges = {}
    for w in waits:
        s = senders.get((w.peer, w.rank, w.flag), {})
        # the senders in the waiter's own launch first (a finished earlier launch sent it too)
        same = sorted(x for x in s if x[1] == w.launch)
        edges[w.lane] = same or sorted(s, key=lambda x: (-x[1], x[2])) or [(w.peer, None, None)]
    cycle = _find_cycle(edges)
    roots = _roots(edges, waiting)
    # (names from the file: kernels, regions, sources, the reason, escaped for the terminal)
    evidence = [printable(e) for e in _evidence(waits, edges, senders, last, state, waiting, trace, lost_total)]
    headline = printable(_headline(waits, edges, cycle, roots, senders, last, state, waiting, trace, reason))
    return LiveReport(headline=headline, evidence=evidence, waits=waits, edges=edges, cycle=cycle, roots=roots, reason=printable(reason))


def _find_cycle(edges: dict) -> list:
    """One cycle of waiting lanes (each waits for the next), or [] (depth-first, iterative)."""
    colour: dict = {}
    for start in sorted(edges):
        if colour.get(start):
            continue
        stack = [(start, iter(edges.get(start, ())))]
        path = [start]
        colour[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
                path.pop()
                continue
            if nxt not in edges:
                continue
            if colour.get(nxt) == 1:
                return path[path.index(nxt):]
            if not colour.get(nxt):
                colour[nxt] = 1
                stack.append((nxt, iter(edges[nxt])))
                path.append(nxt)
    return []


def _roots(edges: dict, waiting: dict) -> list:
    """The lanes the waits end at: senders that are not waiting, or unknown senders."""
    out = set()
    for targets in edges.values():
        for t in targets:
            if t not in waiting:
                out.add(t)
    return sorted(out, key=lambda x: (x[0], -1 if x[1] is None else x[1], -1 if x[2] is None else x[2]))


def _doing(lane, last, state, trace) -> str:
    """What a lane that is not waiting is doing, from its records."""
    if lane[2] is None:
        return "no lane of that rank notified the flag in the records kept"
    if state.get(lane) == "never started":
        return "it never started (no record, no start stamp)"
    rec = last.get(lane)
    if rec is None:
        return "it started but recorded nothing (working without records, or finished)"
    kind, region, ago, args = rec
    what = {EventKind.NOTIFY: "notify", EventKind.WAIT: "wait", EventKind.SPAN: "span", EventKind.INSTANT: "mark",
            EventKind.COUNTER: "counter"}.get(kind, "record")
    extra = ""
    if kind == EventKind.NOTIFY:
        extra = f" ({trace.region_name(region)}: wrote {args[1]} to rank {args[0]}'s {_flag(trace, args[2])})"
    elif kind != EventKind.WAIT:
        extra = f" '{trace.region_name(region)}'"
    return (f"it is not waiting; its last record, a {what}{extra}, ended {fmt_ns(ago)} before the dump "
            "(it finished, or works in a region without records since)")


def _flag(trace, off) -> str:
    from .names import flag_name

    return f"flag {flag_name(trace, off)}"


def _wait_text(ws: list[OpenWait]) -> str:
    w = ws[0]
    seen = sorted({x.seen for x in ws})
    heap = sorted({x.heap for x in ws if x.heap is not None})
    held = f"; {', '.join(map(str, heap))} in the heap at the dump" if heap and len(heap) == 1 and all(x.heap is not None for x in ws) else ""
    return (f"flag {w.flag_name} {w.cmp} {w.expected} (last read {', '.join(map(str, seen))}{held})")


def _group(waits: list[OpenWait]) -> dict:
    g: dict = {}
    for w in waits:
        g.setdefault((w.rank, w.flag, w.expected, w.cmp, w.peer), []).append(w)
    return g


def _headline(waits, edges, cycle, roots, senders, last, state, waiting, trace, reason) -> str:
    if not waits:
        return f"LIVE DUMP ({reason}): no lane is waiting at the dump (the kernels are running or finished)"
    if cycle:
        text = ""
        for i, lane in enumerate(cycle):
            w = waiting[lane]
            nxt = cycle[(i + 1) % len(cycle)]
            text += (f"{_lane_text(lane)} waits" if i == 0 else ", which waits") + \
                f" on flag {w.flag_name} {w.cmp} {w.expected} from {_lane_text(nxt)}"
        return f"DEADLOCK at the dump ({reason}): {text}: a cycle, none of them can send"
    # the waits on a lane that is not waiting (a root), the group that holds up the most lanes
    # (those waiting on it, directly or down a chain) first
    behind = _behind(edges)
    groups = [(k, ws) for k, ws in _group(waits).items() if edges[ws[0].lane][0] not in waiting]
    key, ws = max(groups, key=lambda kv: (sum(len(behind.get(w.lane, ())) for w in kv[1]) + len(kv[1]), -kv[0][0], -kv[0][1]))
    lanes = [w.lane for w in ws]
    root = edges[lanes[0]][0]
    vals = senders.get((ws[0].peer, ws[0].rank, ws[0].flag), {}).get(root)
    sent = f" (its last notify of that flag wrote {vals[-1][0]})" if vals else ""
    held = set().union(*(behind.get(x, set()) for x in lanes)) - set(lanes)
    others = [w.lane for w in waits if w.lane not in held and w.lane not in lanes]
    tail = f"; {_lanes_text(sorted(held))} wait{'s' if len(held) == 1 else ''} behind {'it' if len(lanes) == 1 else 'them'}" if held else ""
    tail += f"; {_lanes_text(others)} wait{'s' if len(others) == 1 else ''} on other lanes" if others else ""
    heap = {w.heap for w in ws}
    if len(heap) == 1 and None not in heap and bool(compares(heap.pop(), ws[0].expected, _CMP_CODES.get(ws[0].cmp, -1))):
        # the flag was written after the lanes' last read (its sender's record may still be in
        # its registers): not "never sent"
        return (f"WAITING at the dump ({reason}): {_lanes_text(lanes)} wait{'s' if len(lanes) == 1 else ''} on {_wait_text(ws)} "
                f"from {_lane_text(root)}: the heap already satisfies the wait (written after their last read){tail}")
    return (f"HUNG at the dump ({reason}): {_lanes_text(lanes)} wait{'s' if len(lanes) == 1 else ''} on {_wait_text(ws)} "
            f"from {_lane_text(root)}, which never sent it{sent}: {_doing(root, last, state, trace)}{tail}")


def _behind(edges: dict) -> dict:
    """Per waiting lane, the waiting lanes that wait on it, directly or down a chain."""
    rev: dict = {}
    for a, ts in edges.items():
        for t in ts:
            rev.setdefault(t, set()).add(a)
    out = {}
    for lane in edges:
        seen, todo = set(), [lane]
        while todo:
            for x in rev.get(todo.pop(), ()):
                if x not in seen:
                    seen.add(x)
                    todo.append(x)
        out[lane] = seen
    return out


def _evidence(waits, edges, senders, last, state, waiting, trace, lost_total) -> list[str]:
    out = []
    for (r, flag, exp, cmp, peer), ws in sorted(_group(waits).items(), key=lambda kv: kv[0]):
        lanes = [w.lane for w in ws]
        longest = max(w.waited_ns for w in ws)
        out.append(f"{_lanes_text(lanes)} ({ws[0].kernel}, launch {ws[0].launch}) spin in {ws[0].region} on "
                   f"{_wait_text(ws)} from rank {peer}, for up to {fmt_ns(longest)}")
        s = senders.get((peer, r, flag), {})
        s = {x: s[x] for x in edges[ws[0].lane] if x in s}  # the senders the graph follows
        if s:
            for lane, vals in sorted(s.items()):
                v, ago = vals[-1]
                state_txt = "waiting itself" if lane in waiting else "not waiting"
                out.append(f"  sender {_lane_text(lane)}: {len(vals)} notif{'y' if len(vals) == 1 else 'ies'} of "
                           f"flag {ws[0].flag_name} kept, the last wrote {v} {fmt_ns(ago)} before the dump; {state_txt}")
        else:
            out.append(f"  no lane of rank {peer} notified flag {ws[0].flag_name} to rank {r} in the records kept")
    for lane in sorted({t for ts in edges.values() for t in ts if t not in waiting and t[2] is not None}):
        out.append(f"{_lane_text(lane)}: {_doing(lane, last, state, trace)}")
    if lost_total:
        out.append(f"{lost_total} older records were overwritten in the rings (the last ones of each lane are kept)")
    return out
