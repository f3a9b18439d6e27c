"""Which notify released which wait: the one implementation.

The causality check of the clock (``ktrace.clock.causality``), the arrows of the trace writers
(``ktrace.export``) and the stall analysis (``ktrace.analysis.stalls``) all pair through
:func:`pair`, so an arrow in a trace and a line of the stall report never disagree.

The rule, for a wait on rank B for peer A on flag ``f`` (WAIT arguments ``peer=A``, ``flag=f``,
``expected=v``) and a notify on rank A that wrote ``v`` to flag ``f`` of rank B (NOTIFY
arguments ``peer=B``, ``value=v``, ``flag=f``):

1. **Exact, by rounds.** Notifies and waits are grouped by (producer, consumer, flag, value).
   The k-th notify of a group, in the producer's own order (launch, then start time), releases
   the k-th wait of *each* waiting program of that group, in that program's order (launch,
   then record order): one notify that sets a flag may release the waits of every program
   spinning on it. A flag signalled with the same value round after round (reset between
   rounds or launches) pairs round by round. Waits that timed out take their round but are not
   paired (they released on nothing).
2. **Counters and round numbers** (``fallback``). A completed ``ge``/``gt``/``eq`` wait left
   unpaired is released by the notify that brought the flag to the value the wait saw (the
   WAIT's ``value`` where given and consistent with its comparison, else the least value that
   satisfies it). The flag is taken where it lives, (consumer rank, heap offset), whoever the
   wait names as its peer: a counter collects several producers' adds (``gemm_rs`` records its
   own rank as the peer of a wait every rank adds to). Per launch, the writes to the flag are
   ordered by their start; the flag's value is not recorded, so it is inferred: notifies that
   all write one value (more than one of them), or whose waits saw more than any single write
   gives, are read as a counter (adds: the flag is the value before the launch plus the running
   sum, the value before the launch being what the wait that saw the most saw less the launch's
   adds, so that counters carried over launches and reset ones both pair); others as sets (the
   flag is the value written).
3. **mbarrier hand-offs** (``local``: events with the LOCAL flag, ``ktrace.gluon``). A wait for
   phase k of an mbarrier is released by what completed that phase in the same program: the
   NOTIFY of the same rank, launch, program, barrier (``flag``) and phase (``value`` ==
   ``expected``); of several (a barrier counting several arrivals), the last to start. A wait
   for phase -1 (the free pass of a barrier just initialised) has no release and is not
   counted unmatched. Local events never pair through rules 1 and 2, nor with remote ones.

No time of one rank is compared with a time of another, except the adds of several ranks to one
counter (rule 2), ordered by the ``start`` the caller gives (every caller passes aligned ns).
Everything else is ordered by each rank's own keys, so raw timer ticks do as well
as aligned nanoseconds, and the pairing can judge the clock alignment instead of depending on it.

Everything is vectorised (packed composite keys, a few sorts and binary searches): millions of
waits pair in about a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from .auto.addresses import owner_of
from .keys import group_index, is_lexsorted, lexorder
from .schema import Cmp

#: Columns :func:`pair` reads of the notifies: the producer's rank, its launch, its own time
#: order (``start``: raw ticks or ns, compared within one rank only), and the NOTIFY arguments
#: ``peer`` (the consumer's rank), ``value`` and ``flag``.
NOTIFY_COLUMNS = ("rank", "launch", "start", "peer", "value", "flag")
#: Columns :func:`pair` reads of the waits: the consumer's rank, launch and program, the wait's
#: place in its program's record order (``order``: its slot), the WAIT arguments ``peer`` (the
#: producer's rank), ``flag``, ``value`` (the flag's value the wait saw; optional),
#: ``expected`` and ``cmp``, and whether it timed out.
WAIT_COLUMNS = ("rank", "launch", "program", "order", "peer", "flag", "value", "expected", "cmp", "timed_out")
#: Optional column of the waits: ``where``, the rank whose memory the flag is (a wait on a
#: location key of ``ktrace.auto.addresses`` may poll a peer's memory); default: the wait's own rank.
WHERE_COLUMN = "where"
#: Optional columns for mbarrier hand-offs (rule 3): ``local`` (bool, on both sides: the LOCAL
#: flag, ``schema.EventFlag.LOCAL``) and the notifies' ``program``. Without them every event
#: pairs through rules 1 and 2.
LOCAL_COLUMNS = ("local", "program")

_LIMIT = 1 << 62
#: Comparisons rule 2 pairs (a flag that reaches a value: ``>=``, ``>``, or ``==`` a count).
_COUNTER_CMPS = (int(Cmp.GE), int(Cmp.GT), int(Cmp.EQ))


@dataclass(frozen=True)
class Pairs:
    """The outcome of :func:`pair`.

    Attributes:
        notify: per pair, the index of its notify among the notifies given (int64).
        wait: per pair, the index of its wait among the waits given (int64, ascending: each
            wait is released by at most one notify).
        exact: per pair, True when it paired by value and round, False through rule 2
            (counters and round numbers).
        unmatched_notifies: notifies that released no wait given.
        unmatched_waits: completed waits no notify was found for (the producer's rank is
            missing from the capture, or the flag was set by something untraced).
    """

    notify: np.ndarray
    wait: np.ndarray
    exact: np.ndarray
    unmatched_notifies: int
    unmatched_waits: int

    @property
    def n(self) -> int:
        return int(self.wait.size)


def _empty(n_notifies: int, n_done: int) -> Pairs:
    z = np.zeros(0, np.int64)
    return Pairs(z, z, np.zeros(0, bool), int(n_notifies), int(n_done))


def _i64(a) -> np.ndarray:
    return np.asarray(a).astype(np.int64, copy=False)


def pair(notifies: Mapping[str, np.ndarray], waits: Mapping[str, np.ndarray], *, fallback: bool = True) -> Pairs:
    """Find, for each wait, the notify that released it (many waits may share one notify).

    Args:
        notifies: the :data:`NOTIFY_COLUMNS` of every notify, each an array of one length.
        waits: the :data:`WAIT_COLUMNS` of every wait (``timed_out`` boolean; ``value`` may be
            left out: rule 2 then takes the least value that satisfies each wait).
        fallback: also pair ``ge``/``gt``/``eq`` waits through rule 2 (counters and round numbers).

    Returns:
        The pairs, ordered by wait.
    """
    n_n = int(np.asarray(notifies["rank"]).size)
    n_w = int(np.asarray(waits["rank"]).size)
    if "local" in notifies and "local" in waits:
        ln, lw = np.asarray(notifies["local"], bool), np.asarray(waits["local"], bool)
        if ln.any() or lw.any():
            return _with_local(notifies, waits, ln, lw, fallback)
    timed_out = np.asarray(waits["timed_out"], bool) if n_w else np.zeros(0, bool)
    done = ~timed_out
    if n_n == 0 or n_w == 0:
        return _empty(n_n, int(done.sum()))
    nw_of = _exact(notifies, waits, timed_out)
    exact = nw_of >= 0
    if fallback:
        counting = ~exact & np.isin(_i64(waits["cmp"]), _COUNTER_CMPS)
        left = np.flatnonzero(counting & done)
        if left.size:
            nw_of[left] = _reaching(notifies, waits, left, np.flatnonzero(counting & timed_out))
    w = np.flatnonzero(nw_of >= 0)
    n = nw_of[w]
    released = np.zeros(n_n, bool)
    released[n] = True
    return Pairs(n, w, exact[w], int(n_n - released.sum()), int((done & (nw_of < 0)).sum()))


def _exact(notifies: Mapping, waits: Mapping, timed_out: np.ndarray) -> np.ndarray:
    """Rule 1: per wait the index of its notify, -1 where none (timed-out waits: -1)."""
    n_n, n_w = int(np.asarray(notifies["rank"]).size), int(np.asarray(waits["rank"]).size)
    sides = [(notifies["rank"], waits["peer"]), (notifies["peer"], _where(waits)), (notifies["flag"], waits["flag"]),
             (notifies["value"], waits["expected"])]
    got = _coded_keys(sides)
    if got is not None:
        # (few distinct keys: a key is its group, the groups counted instead of searched)
        kn, kw, n_groups = got
        on = lexorder(kn, notifies["launch"], notifies["start"])
        g_count = np.bincount(kn, minlength=n_groups + 1)  # (group n_groups: the waits no notify's key matches)
        g_start = np.cumsum(g_count) - g_count
        del kn
        gw = kw
        groups_size = n_groups
    else:
        kn, kw = _packed_keys(sides, n_n, n_w)
        # round of each notify: its occurrence in its group, by (launch, start) on its own rank; the
        # notifies sorted by (group, round), so that round r of a group is at its first position + r
        on = lexorder(kn, notifies["launch"], notifies["start"])
        ks = kn[on]
        del kn
        first = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        groups, g_start = ks[first], first
        g_count = np.diff(np.r_[first, n_n])
        del ks
        # each wait's group among the notifies' (len(groups): a group no notify has, never paired)
        gw = np.searchsorted(groups, kw)
        np.minimum(gw, groups.size - 1, out=gw)
        gw[groups[gw] != kw] = groups.size
        del kw
        groups_size = groups.size
    return _rounds(notifies, waits, timed_out, on, g_start, g_count, gw, groups_size)


#: Most groups :func:`_coded_keys` numbers (their counts are one array of this size).
_MAX_CODED = 1 << 22


def _coded_keys(sides: list) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Per notify and per wait, the number of its key (one column of each side's per part), the
    parts' values coded among those the notifies hold (a table of the values present, over the
    notifies' range of each part): ``(notify keys, wait keys, keys)``, a wait whose key no notify
    has numbered ``keys``. Keys are numbered in the order of the parts' values (first part first).
    None when a part's range or the keys are too many for tables (:func:`_packed_keys` then).
    """
    n_n = int(np.asarray(sides[0][0]).size)
    kn = kw = None
    miss = None
    total = 1
    for a, b in sides:
        a, b = np.asarray(a), np.asarray(b)
        lo, hi = int(a.min()), int(a.max())
        span = hi - lo + 1
        if span > max(4 * n_n + 1024, 1 << 20):
            return None
        oa = np.subtract(a, lo, dtype=np.int64)
        present = np.zeros(span + 1, bool)  # (the last entry: values outside the notifies' range)
        present[oa] = True
        size = int(np.count_nonzero(present))
        if total * size > _MAX_CODED:
            return None
        ob = np.subtract(b, lo, dtype=np.int64)
        u = ob.view(np.uint64)  # (a value below the range wraps above it)
        np.minimum(u, span, out=u)
        if size == span:  # every value of the range is a notify's: its code is its offset
            ca, cb = oa, ob
            absent = ob == span
        else:
            code = np.cumsum(present, dtype=np.int32)
            code -= 1
            ca, cb = code[oa], code[ob]
            absent = ~present[ob]
        del oa, ob
        miss = absent if miss is None else (miss | absent)
        if kn is None:
            kn, kw = ca.astype(np.int64), cb.astype(np.int64)
        else:
            kn *= size
            kn += ca
            kw *= size
            kw += cb
        total *= size
    kw[miss] = total
    return kn, kw, total


def _packed_keys(sides: list, n_n: int, n_w: int) -> tuple[np.ndarray, np.ndarray]:
    """Per notify and per wait, its key as one int64: each part offset by its smallest value over
    both sides (mixed radix), or dense codes of the key rows where that is too wide."""
    kn, kw = np.zeros(n_n, np.int64), np.zeros(n_w, np.int64)
    total = 1
    # (keys built in place: waits are millions on a large capture)
    for a, b in sides:
        a, b = np.asarray(a), np.asarray(b)
        lo = min(int(a.min()), int(b.min()))
        size = max(int(a.max()), int(b.max())) - lo + 1
        total *= size
        if total >= _LIMIT:  # too wide to pack: dense codes of the key rows instead
            k, _ = group_index(*(np.concatenate([_i64(x), _i64(y)]) for x, y in sides))
            return k[:n_n], k[n_n:]
        for key, col in ((kn, a), (kw, b)):
            key *= size
            np.add(key, col, out=key, dtype=np.int64)  # (in place: no temporary of millions)
            key -= lo
    return kn, kw


def _rounds(notifies: Mapping, waits: Mapping, timed_out: np.ndarray, on: np.ndarray, g_start: np.ndarray, g_count: np.ndarray,
            gw: np.ndarray, n_groups: int) -> np.ndarray:
    """Rule 1 once the groups are known: the notifies in (group, round) order ``on``, each group's
    first position there and notifies, each wait's group (``n_groups``: none)."""
    n_n, n_w = on.size, int(np.asarray(waits["rank"]).size)
    # round of each wait: its occurrence among its program's waits of the group, by (launch, order)
    prog = np.asarray(waits["program"])
    p_lo = int(prog.min())
    n_prog = int(prog.max()) - p_lo + 1
    if n_groups < 1 << 15 and n_prog <= 1 << 15:  # (held in 16 bits: less memory, and radix sorts)
        gw, prog = gw.astype(np.int16), (prog - prog.dtype.type(p_lo)).astype(np.int16)
    else:
        prog = np.subtract(prog, p_lo, dtype=np.int64)
    ow = _group_order(gw, prog, waits)
    g = gw[ow]
    del gw
    sub = g.astype(np.int32 if g.dtype == np.int16 else np.int64)
    sub *= n_prog
    sub += prog[ow]
    del prog
    occ = _occurrence(sub)  # (the waits in that order)
    del sub
    ok = g < n_groups
    np.minimum(g, max(n_groups - 1, 0), out=g)
    ok &= occ < g_count[g]
    j = g_start[g]
    j += occ
    del g, occ
    np.minimum(j, n_n - 1, out=j)
    ok &= ~np.asarray(timed_out, bool)[ow]
    out = np.empty(n_w, np.int64)
    out[ow] = np.where(ok, on[j], -1)
    return out


def _group_order(gw: np.ndarray, prog: np.ndarray, waits: Mapping) -> np.ndarray:
    """The waits in the stable order of (group ``gw``, program ``prog``, launch, order).

    Waits given in (rank, launch, order) order (as a trace's rows are; a group is one consumer
    rank's) are already in (launch, order) order within each group and program: a stable sort
    by (group, program) alone keeps it, and two radix passes do that when both are held in 16 bits.
    """
    rank, launch, order = (np.asarray(waits[c]) for c in ("rank", "launch", "order"))
    ordered = gw.size <= 1 or is_lexsorted(rank, launch, order)
    if not ordered:
        return lexorder(gw, prog, launch, order)
    if gw.dtype == np.int16 and prog.dtype == np.int16:
        o = np.argsort(prog, kind="stable")  # (numpy: a radix sort for 16 bits)
        return o[np.argsort(gw[o], kind="stable")]
    return lexorder(gw, prog)


def _reaching(notifies: Mapping, waits: Mapping, left: np.ndarray, gave_up: np.ndarray | None = None) -> np.ndarray:
    """Rule 2 for the waits ``left`` (indices): per wait its notify's index, -1 where none
    (``gave_up``: waits of the same kind that timed out: what they saw tells the counter's value
    too)."""
    n_n = int(np.asarray(notifies["rank"]).size)
    # groups: the flag's location (consumer rank, heap offset) and the launch; not the producer
    # the wait names (a counter collects several producers' adds: gemm_rs records itself)
    kn = [_i64(notifies[c]) for c in ("peer", "flag", "launch")]
    extra = gave_up if gave_up is not None and "value" in waits else np.zeros(0, np.int64)
    kw = [_i64(x)[np.concatenate([left, extra])] for x in (_where(waits), waits["flag"], waits["launch"])]
    inv, allk = group_index(*(np.concatenate([a, b]) for a, b in zip(kn, kw)))
    gn, gw, g_up = inv[:n_n], inv[n_n:n_n + left.size], inv[n_n + left.size:]
    n_groups = allk.shape[0]
    # the order in which the writes reached the flag: by start within the group (one producer:
    # its own clock; several ranks adding to one counter: the callers' aligned ns)
    o = lexorder(gn, _i64(notifies["start"]))
    gn_o = gn[o]
    val = _i64(notifies["value"])[o]
    counts = np.bincount(gn_o, minlength=n_groups)
    lo = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    hi = lo + counts
    nz = counts > 0
    cs = np.cumsum(val)
    cs_in = cs - np.repeat(cs[lo[nz]] - val[lo[nz]], counts[nz])  # running sum of the adds within each group
    total = np.zeros(n_groups, np.int64)
    total[nz] = cs_in[hi[nz] - 1]
    target = _target(waits, left)
    vmin = np.full(n_groups, np.iinfo(np.int64).max)
    vmax = np.full(n_groups, np.iinfo(np.int64).min)
    tmax = np.full(n_groups, np.iinfo(np.int64).min)
    np.minimum.at(vmin, gn_o, val)
    np.maximum.at(vmax, gn_o, val)
    np.maximum.at(tmax, gw, target)
    # a counter: notifies that all write one value (more than one of them), or a flag whose
    # waits saw (or wanted) more than any single write of the launch could give
    counter = nz & (((vmin == vmax) & (counts > 1)) | (vmax < tmax))
    if extra.size:  # (a wait that gave up saw the flag too: after a missing add, the last that came)
        np.maximum.at(tmax, g_up, _i64(waits["value"])[extra])
    # the counter's value before the launch's first add: the wait that saw the most saw them all
    # (when the last adds came after every wait, at least none of them: a counter is not below 0)
    base = np.where(counter, np.maximum(tmax - total, 0), 0)
    is_c = counter[gw]
    p_c = _first_reaching(gn_o, cs_in, gw, target - base[gw], hi, counts)
    p_s = _first_reaching(gn_o, val, gw, target, hi, counts)
    p = np.where(is_c, np.where(target - base[gw] > 0, p_c, -1), p_s)
    return np.where(p >= 0, o[np.maximum(p, 0)], -1).astype(np.int64)


def _where(waits: Mapping) -> np.ndarray:
    """The rank whose memory each wait's flag is (:data:`WHERE_COLUMN` when given, else read from
    the flag: a location key's owner, or the wait's own rank)."""
    return waits[WHERE_COLUMN] if WHERE_COLUMN in waits else owner_of(waits["flag"], waits["rank"])


def _target(waits: Mapping, left: np.ndarray) -> np.ndarray:
    """The flag value each wait of ``left`` was released at: the value it saw where recorded and
    consistent with its comparison, else the least value that satisfies it."""
    expected = _i64(waits["expected"])[left]
    cmp = _i64(waits["cmp"])[left]
    need = np.where(cmp == int(Cmp.GT), expected + 1, expected)
    if "value" not in waits:
        return need
    seen = _i64(waits["value"])[left]
    ok = np.where(cmp == int(Cmp.EQ), seen == expected, seen >= need)
    return np.where(ok, seen, need)


def _first_reaching(g_sorted: np.ndarray, v: np.ndarray, gw: np.ndarray, need: np.ndarray, hi: np.ndarray,
                    counts: np.ndarray) -> np.ndarray:
    """Per wait, the first position (in the group-sorted notifies) of its group ``gw`` at which
    the running maximum of ``v`` reaches ``need``; -1 where it never does.

    The running maximum is packed with the group (group * 2**34 + value), so one binary search
    over the whole sorted array finds every wait's position."""
    big, half = np.int64(1) << 34, np.int64(1) << 33
    v = np.clip(v, -half + 1, half - 1)
    run = np.maximum.accumulate(g_sorted * big + v + half)
    key = gw * big + np.clip(need, -half + 1, half - 1) + half
    p = np.searchsorted(run, key, side="left")
    return np.where((p < hi[gw]) & (counts[gw] > 0), p, -1)


def free_pass(local, expected) -> np.ndarray:
    """Per wait, whether it is an mbarrier's free pass: a LOCAL wait for phase -1, released by the
    barrier's initialisation (rule 3), so that no notify is missing for it."""
    return np.asarray(local, bool) & (np.asarray(expected) < 0)


def _with_local(notifies: Mapping, waits: Mapping, ln: np.ndarray, lw: np.ndarray, fallback: bool) -> Pairs:
    """Rules 1-2 on the remote events and rule 3 on the local ones, as one :class:`Pairs`."""
    rn, rw = np.flatnonzero(~ln), np.flatnonzero(~lw)
    keep_n = [c for c in notifies if c not in LOCAL_COLUMNS]
    keep_w = [c for c in waits if c != "local"]
    remote = pair({c: np.asarray(notifies[c])[rn] for c in keep_n}, {c: np.asarray(waits[c])[rw] for c in keep_w},
                  fallback=fallback)
    li, lwi = np.flatnonzero(ln), np.flatnonzero(lw)
    of = _local({c: np.asarray(notifies[c])[li] for c in ("rank", "launch", "program", "flag", "value", "start")},
                {c: np.asarray(waits[c])[lwi] for c in ("rank", "launch", "program", "flag", "expected", "timed_out")})
    got = of >= 0
    free = free_pass(np.ones(lwi.size, bool), np.asarray(waits["expected"])[lwi])
    done = ~np.asarray(waits["timed_out"], bool)[lwi]
    w = np.concatenate([rw[remote.wait], lwi[got]])
    n = np.concatenate([rn[remote.notify], li[of[got]]])
    exact = np.concatenate([remote.exact, np.ones(int(got.sum()), bool)])
    o = np.argsort(w, kind="stable")
    released = np.zeros(li.size, bool)
    released[of[got]] = True
    return Pairs(n[o].astype(np.int64), w[o].astype(np.int64), exact[o], remote.unmatched_notifies + int((~released).sum()),
                 remote.unmatched_waits + int((done & ~got & ~free).sum()))


def _local(notifies: Mapping, waits: Mapping) -> np.ndarray:
    """Rule 3: per local wait the index of its local notify, -1 where none (timed out: -1)."""
    n_n = int(np.asarray(notifies["rank"]).size)
    n_w = int(np.asarray(waits["rank"]).size)
    if n_n == 0 or n_w == 0:
        return np.full(n_w, -1, np.int64)
    k, _ = group_index(*(np.concatenate([_i64(notifies[a]), _i64(waits[b])]) for a, b in
                         (("rank", "rank"), ("launch", "launch"), ("program", "program"), ("flag", "flag"),
                          ("value", "expected"))))
    kn, kw = k[:n_n], k[n_n:]
    o = lexorder(kn, _i64(notifies["start"]))  # each key's last notify ends its run
    ks = kn[o]
    last = np.r_[ks[1:] != ks[:-1], True]
    best = np.full(int(k.max()) + 1, -1, np.int64)
    best[ks[last]] = o[last]
    out = best[kw]
    out[np.asarray(waits["timed_out"], bool)] = -1
    return out


def _occurrence(sorted_keys: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal values of a sorted array."""
    n = sorted_keys.size
    out = np.arange(n, dtype=np.int64)
    if n == 0:
        return out
    first = np.ones(n, bool)
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    start = np.where(first, out, 0)  # each run's first index, carried over the run
    del first
    np.maximum.accumulate(start, out=start)
    out -= start
    return out


def inputs(notify_col: Callable[[str], np.ndarray], wait_col: Callable[[str], np.ndarray], *,
           start: str = "start_ns", order: np.ndarray | None = None) -> tuple[dict, dict]:
    """The arguments of :func:`pair` from event columns: the one place that names them.

    Args:
        notify_col: ``notify_col(name)`` gives event column ``name`` (``rank``, ``launch``,
            ``start_ns``/``start``, ``arg0``..``arg5``) on the notifies' rows.
        wait_col: the same on the waits' rows (``program``, ``slot`` and ``flags`` too).
        start: the notifies' time column (aligned ``start_ns``: see the module docstring).
        order: the waits' record order (default: their ``slot``).

    Returns:
        ``(notifies, waits)``, the :data:`NOTIFY_COLUMNS` and :data:`WAIT_COLUMNS`.
    """
    from .schema import EventKind, arg_column, is_local, is_timeout

    N, W = EventKind.NOTIFY, EventKind.WAIT
    notifies = {"rank": notify_col("rank"), "launch": notify_col("launch"), "start": notify_col(start),
                "program": notify_col("program"), "local": is_local(notify_col("flags"))}
    notifies.update((a, notify_col(arg_column(N, a))) for a in ("peer", "value", "flag"))
    waits = {"rank": wait_col("rank"), "launch": wait_col("launch"), "program": wait_col("program"),
             "order": wait_col("slot") if order is None else order, "timed_out": is_timeout(wait_col("flags")),
             "local": is_local(wait_col("flags"))}
    waits.update((a, wait_col(arg_column(W, a))) for a in ("peer", "flag", "value", "expected", "cmp"))
    return notifies, waits


def pair_table(events, *, fallback: bool = True) -> tuple[np.ndarray, np.ndarray, int, int]:
    """:func:`pair` on the rows of an event table (a structured array or a dict of columns).

    Args:
        events: columns ``rank``, ``kind``, ``flags``, ``arg0``..``arg5`` and ``start`` or
            ``start_ns``; ``launch``, ``program``, ``slot`` where present (without them all
            waits count as one program's, in row order).
        fallback: see :func:`pair`.

    Returns:
        ``(notify_rows, wait_rows, unmatched_notifies, unmatched_waits)``: row indices into
        ``events``, one pair per position, ordered by wait row.
    """
    from .schema import EventKind

    names = tuple(events.dtype.names or ()) if hasattr(events, "dtype") else tuple(events)
    kind = np.asarray(events["kind"])
    ni = np.flatnonzero(kind == EventKind.NOTIFY)
    wi = np.flatnonzero(kind == EventKind.WAIT)

    def col(rows):
        return lambda name: np.asarray(events[name])[rows] if name in names else np.zeros(rows.size, np.int64)

    notifies, waits = inputs(col(ni), col(wi), start="start_ns" if "start_ns" in names else "start",
                             order=None if "slot" in names else wi.astype(np.int64))
    p = pair(notifies, waits, fallback=fallback)
    return ni[p.notify].astype(np.int64), wi[p.wait].astype(np.int64), p.unmatched_notifies, p.unmatched_waits
