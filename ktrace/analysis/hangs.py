"""Hangs: who waited on which flag from whom, since when, and which notifies never came.

A bounded wait that gives up records its WAIT event with the TIMEOUT flag (``ktrace.shmem``);
once one wait of a rank has given up the rank's other spinning waits give up at their next read,
so a kernel with a missing signal ends in about one bound. This module reads those events back:

* :func:`timeouts`: every wait that gave up, with whether its notify ever came (``status``):
  ``never signalled`` (no notify of the producer ever reached the expected value on that flag),
  ``signalled late`` (it came after the wait gave up: the wait was cut short, typically by
  another wait's timeout on its rank) or ``signalled (not seen)`` (it came before and the wait
  still gave up: the value was overwritten, or the wait compared the wrong way).
* :func:`missing_notifies`: the expected notifies that never came, one row per producer,
  consumer, flag and value, with whether the producer was itself stuck waiting.
* :func:`wait_for_cycles`: cycles in the ranks' wait-for graph (a deadlock), from the waits
  that were never signalled.
* :func:`silent_programs`: programs of a launch grid that recorded nothing (a run that never
  finished, or programs that never started), when the capture knows the grid.
"""

from __future__ import annotations

import numpy as np

from ..auto.addresses import owner_of
from ..schema import CMP_SYMBOLS, Cmp, EventKind, is_local
from .stalls import waits as _waits
from ..keys import group_index
from .trace import Trace

TIMEOUT_DTYPE = np.dtype(
    [
        ("row", "<i8"),
        ("rank", "<i4"),
        ("launch", "<i4"),
        ("program", "<i4"),
        ("sm", "<i8"),
        ("name", "O"),
        ("region", "O"),
        ("peer", "<i8"),  # the producer's rank (its own, for an mbarrier wait)
        ("flag", "<i8"),
        ("expected", "<i8"),
        ("cmp", "O"),
        ("value", "<i8"),  # last value read
        ("lane", "<i4"),
        ("local", "?"),  # an mbarrier wait (LOCAL): its release is another lane's of its program
        ("since_ns", "<i8"),
        ("gave_up_ns", "<i8"),
        ("waited_ns", "<i8"),
        ("spins", "<i8"),
        ("first_on_rank", "?"),  # this rank's earliest give-up (others on the rank followed it)
        ("notifies_sent", "<i8"),  # notifies of the peer to this rank's flag in the launch
        ("last_value_sent", "<i8"),  # the largest value they wrote (-1 if none)
        ("satisfied_at_ns", "<i8"),  # when a notify first made the flag reach expected (-1 never)
        ("status", "O"),
    ]
)

def cmp_text(code: int) -> str:
    """The operator of a comparison code (``schema.CMP_SYMBOLS``), ``cmp#N`` for an unknown one."""
    return CMP_SYMBOLS.get(int(code), f"cmp#{int(code)}")


def _reaches(values: np.ndarray, expected: int, cmp: int) -> np.ndarray:
    """Per notify (in time order), whether the flag compares ``cmp`` to ``expected`` after it.

    The flag's value after a notify is not recorded: it is the notify's value when notifies set
    the flag, the running sum when they add to it. Notifies that all write the same value are
    read as a counter (adds: the running sum), others as sets (see ``stalls.release_pairs``).
    """
    counter = values.size > 1 and bool((values == values[0]).all())
    return compares(np.cumsum(values) if counter else values, expected, cmp)


def compares(values, expected: int, cmp: int) -> np.ndarray:
    """Whether each value compares ``cmp`` (a ``schema.Cmp`` code) to ``expected``, as a wait
    tests its flag; False for an unknown code."""
    v = np.asarray(values)
    if cmp == int(Cmp.EQ):
        return v == expected
    if cmp == int(Cmp.NE):
        return v != expected
    if cmp == int(Cmp.GE):
        return v >= expected
    if cmp == int(Cmp.GT):
        return v > expected
    if cmp == int(Cmp.LE):
        return v <= expected
    if cmp == int(Cmp.LT):
        return v < expected
    return np.zeros(v.shape, bool)


def _producer_of_unknown(w: np.ndarray, out: np.ndarray) -> None:
    """A timed-out wait that did not know its producer (a kernel traced without edits, whose flag
    no rank ever signalled in the capture: ``ktrace.events.AddressResolver`` had none to learn it
    from) gets the one rank that released the same program's other waits at the same call site,
    when exactly one did; else it stays -1."""
    for i in np.flatnonzero(out["peer"] < 0):
        same = (w["rank"] == out["rank"][i]) & (w["program"] == out["program"][i]) & (w["name"] == out["name"][i]) & \
            (w["notify_rank"] >= 0)
        feeders = np.unique(w["notify_rank"][same])
        if feeders.size == 1:
            out["peer"][i] = feeders[0]


def timeouts(trace: Trace) -> np.ndarray:
    """Every wait that gave up, with what it waited for and whether its notify ever came.

    Returns:
        A table of ``TIMEOUT_DTYPE`` sorted by give-up time.
    """
    w = _waits(trace)
    t = w[w["timed_out"]]
    out = np.zeros(t.size, TIMEOUT_DTYPE)
    if t.size == 0:
        return out
    for c in ("row", "rank", "launch", "program", "sm", "name", "region", "peer", "flag", "expected", "value", "spins"):
        out[c] = t[c]
    local = is_local(trace.column("flags")[t["row"]])
    out["local"] = local
    out["lane"] = trace.column("lane")[t["row"]]
    out["peer"] = np.where(local, t["rank"], t["peer"])  # (an mbarrier's release is its own rank's)
    _producer_of_unknown(w, out)
    out["cmp"] = np.array([cmp_text(c) for c in t["cmp"].tolist()], dtype=object)
    out["since_ns"] = t["start_ns"]
    out["gave_up_ns"] = t["end_ns"]
    out["waited_ns"] = t["wait_ns"]
    first = np.full(t.size, np.iinfo(np.int64).max)
    ri, rk = np.unique(t["rank"], return_inverse=True)
    m = np.full(ri.size, np.iinfo(np.int64).max)
    np.minimum.at(m, rk.reshape(-1), t["end_ns"])
    first = m[rk.reshape(-1)]
    out["first_on_rank"] = t["end_ns"] == first
    # the notifies of each (producer, consumer, flag, launch) group, in time order. Timed-out
    # waits are few (one per stuck workgroup at most), so one vectorised pass per wait is fine.
    nots = trace.rows_of(EventKind.NOTIFY)

    def N(name):
        return trace.at(EventKind.NOTIFY, name)

    # (producer, consumer, flag, launch, program): a remote flag's notifies are matched by the
    # ranks (program -1), an mbarrier's in the program (consumer -1: LOCAL events name no peer)
    nl = is_local(N("flags"))
    kn = np.stack([N("rank"), np.where(nl, -1, N("arg0")), N("arg2"), N("launch"), np.where(nl, N("program"), -1)],
                  axis=1).astype(np.int64)
    kw = np.stack([out["peer"], np.where(local, -1, owner_of(t["flag"], t["rank"])), t["flag"], t["launch"],
                   np.where(local, t["program"], -1)], axis=1).astype(np.int64)
    status = np.empty(t.size, dtype=object)
    sent = np.zeros(t.size, np.int64)
    last_val = np.full(t.size, -1, np.int64)
    sat = np.full(t.size, -1, np.int64)
    if nots.size:
        inv, keys = group_index(*(np.concatenate([kn[:, i], kw[:, i]]) for i in range(5)))
        gn, gw = inv[: nots.size], inv[nots.size :]
        o = np.lexsort((N("start_ns"), gn))
        gno, nso = gn[o], N("start_ns")[o]
        vals = N("arg1")[o].astype(np.int64)
        for i in range(t.size):
            a, b = np.searchsorted(gno, gw[i]), np.searchsorted(gno, gw[i], side="right")
            sent[i] = b - a
            if b > a:
                v = vals[a:b]
                last_val[i] = int(v.max())
                ok = _reaches(v, int(t["expected"][i]), int(t["cmp"][i]))
                if ok.any():
                    sat[i] = int(nso[a:b][np.argmax(ok)])
    for i in range(t.size):  # (the order is the waits': out's rows are still t's)
        if sat[i] < 0:
            status[i] = "never signalled"
        elif sat[i] >= t["end_ns"][i]:
            status[i] = "signalled late"
        else:
            status[i] = "signalled (not seen)"
    out["notifies_sent"], out["last_value_sent"], out["satisfied_at_ns"], out["status"] = sent, last_val, sat, status
    return out[np.argsort(out["gave_up_ns"], kind="stable")]


MISSING_DTYPE = np.dtype(
    [
        ("producer", "<i4"),
        ("consumer", "<i4"),
        ("launch", "<i4"),
        ("flag", "<i8"),
        ("expected", "<i8"),
        ("cmp", "O"),
        ("n_waiters", "<i8"),  # timed-out waits that wanted it
        ("programs", "O"),  # the waiting programs (tuple)
        ("since_ns", "<i8"),  # the earliest of those waits' starts
        ("last_value_sent", "<i8"),
        ("producer_stuck", "?"),  # the producer rank itself had waits that gave up
        ("producer_last_event_ns", "<i8"),  # the producer rank's last event end in the launch
        ("local", "?"),  # an mbarrier of one program (``programs`` holds it): its lanes' hand-off
    ]
)


def missing_notifies(trace: Trace, to: np.ndarray | None = None) -> np.ndarray:
    """The notifies waits expected and that never came (timed-out waits ``never signalled``)."""
    to = timeouts(trace) if to is None else to
    m = to[to["status"] == "never signalled"]
    out = np.zeros(0, MISSING_DTYPE)
    if m.size == 0:
        return out
    # (an mbarrier is one program's: its waits are grouped per program)
    inv, keys = group_index(m["peer"], m["rank"], m["launch"], m["flag"], m["expected"], np.where(m["local"], m["program"], -1))
    G = keys.shape[0]
    out = np.zeros(G, MISSING_DTYPE)
    out["producer"], out["consumer"], out["launch"], out["flag"], out["expected"] = (keys[:, i] for i in range(5))
    out["local"] = keys[:, 5] >= 0
    stuck_ranks = set(to["rank"].tolist())
    r, l, e = trace.column("rank"), trace.column("launch"), trace.column("end_ns")
    for g in range(G):  # one row per missing signal: few
        sel = m[inv == g]
        out["cmp"][g] = sel["cmp"][0]
        out["n_waiters"][g] = sel.size
        out["programs"][g] = tuple(sorted(set(sel["program"].tolist())))
        out["since_ns"][g] = sel["since_ns"].min()
        out["last_value_sent"][g] = sel["last_value_sent"].max()
        p = int(keys[g, 0])
        out["producer_stuck"][g] = p in stuck_ranks
        pe = e[(r == p) & (l == keys[g, 2])]
        out["producer_last_event_ns"][g] = pe.max() if pe.size else -1
    return out[np.argsort(out["since_ns"], kind="stable")]


def wait_for_cycles(missing: np.ndarray) -> list[list[int]]:
    """Cycles of ranks each waiting for the next one's missing notify (a deadlock), shortest first."""
    edges: dict[int, set[int]] = {}
    for c, p in zip(missing["consumer"].tolist(), missing["producer"].tolist()):
        edges.setdefault(c, set()).add(p)
    cycles: set[tuple[int, ...]] = set()

    def walk(start: int, node: int, path: list[int]):
        for nxt in sorted(edges.get(node, ())):
            if nxt == start:
                k = min(range(len(path)), key=lambda i: path[i])
                cycles.add(tuple(path[k:] + path[:k]))
            elif nxt not in path and nxt > start:
                walk(start, nxt, path + [nxt])

    for s in sorted(edges):  # ranks: a handful
        walk(s, s, [s])
    return sorted((list(c) for c in cycles), key=lambda c: (len(c), c))


def silent_programs(trace: Trace) -> np.ndarray:
    """Per (rank, launch) whose grid is known: programs in the grid and programs that recorded events.

    Returns:
        A table with ``rank``, ``launch``, ``n_programs``, ``n_recorded``, ``n_silent``, only for
        launches with silent programs.
    """
    rows = []
    if trace.n_programs:
        k = trace.wg_keys
        inv, keys = group_index(k[:, 0], k[:, 1])
        cnt = np.bincount(inv, minlength=keys.shape[0])
        have = {(int(a), int(b)): int(c) for (a, b), c in zip(keys.tolist(), cnt.tolist())}
        for (r, l), n in sorted(trace.n_programs.items()):
            got = have.get((r, l), 0)
            if n and got < n:
                rows.append((r, l, n, got, n - got))
    return np.array(rows, dtype=[("rank", "<i4"), ("launch", "<i4"), ("n_programs", "<i8"), ("n_recorded", "<i8"), ("n_silent", "<i8")])
