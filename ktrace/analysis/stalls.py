"""Spin-lock stalls: every wait, the notify that released it, and who made whom wait.

A WAIT event spans from the moment a program began spinning on a flag to the read that saw the
value it wanted (or gave up). The notify that released it is found across ranks on the aligned
clock (:func:`release_pairs`), and each wait is split in two:

``producer_late_ns``
    the part before the producer began its notify: the flag was not yet set when the waiter
    arrived, because the producer was late;
``signal_latency_ns``
    the rest, from the notify to the read that saw it (the signal's trip plus the spin's
    polling interval). A wait whose flag was set before it began is all signal latency.

The two add up to ``wait_ns``. A wait that timed out is all producer lateness (the value never
came); a completed wait whose notify was not captured (its producer's rank is missing, or the
flag was set by untraced code) has NaN for both.

Stragglers (:func:`stragglers`): producers ranked by the waiting their late notifies caused
(sum of ``producer_late_ns`` over the waits they released), with how late they notified and
what each was doing just before it notified (its preceding spans). How late a notify was is
measured on the producer (:func:`notify_holds`): the time from the producer being ready (its
previous event on that program ended) to the notify's start, beyond what the other ranks take.
"""

from __future__ import annotations

import numpy as np

from ..schema import EventKind
from .. import keys, pairing
from ..keys import (
    argsort_stable,
    dense_codes,
    group_count,
    group_index,
    group_max,
    group_median,
    group_median_max,
    group_sum,
)
from ..schema import arg_column, is_local, is_timeout
from .spans import enclosing_span, preceding_span, rank_launch_starts
from .trace import AnalysisError, ColumnTable, Trace, agent_of, fill_table

#: One row per WAIT event (see the module docstring for the two parts of ``wait_ns``).
WAIT_DTYPE = np.dtype(
    [
        ("row", "<i8"),  # row of the event in Trace.events
        ("rank", "<i4"),
        ("launch", "<i4"),
        ("program", "<i4"),
        ("sm", "<i8"),
        ("name", "O"),  # the wait's own name (``ks.wait(..., name=)``)
        ("region", "O"),  # the span enclosing the wait ("" if none)
        ("peer", "<i8"),
        ("flag", "<i8"),  # heap offset (bytes)
        ("expected", "<i8"),
        ("value", "<i8"),  # last value read
        ("cmp", "<i8"),
        ("start_ns", "<i8"),
        ("end_ns", "<i8"),
        ("wait_ns", "<i8"),
        ("spins", "<i8"),
        ("timed_out", "?"),
        ("notify_row", "<i8"),  # releasing notify's row, -1 if none
        ("notify_rank", "<i8"),
        ("notify_program", "<i8"),
        ("notify_start_ns", "<i8"),
        ("producer_late_ns", "<f8"),
        ("signal_latency_ns", "<f8"),
    ]
)


class _Cols:
    """``trace.events``-like access through the trace's contiguous column cache."""

    def __init__(self, trace: Trace):
        self._t = trace

    def __getitem__(self, name: str) -> np.ndarray:
        return self._t.column(name)


def release_pairs(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """For each completed wait that a captured notify released, that notify
    (``ktrace.pairing``: exact pairs by value and round, then the ``ge``/``gt`` counter rule).

    Returns:
        ``(notify_rows, wait_rows)``: rows of ``trace.events``, one pair per position, by wait row.
    """
    w = waits(trace)
    nr = w["notify_row"]
    paired = nr >= 0
    return nr[paired], w["row"][paired]


def _release_pairs(trace: Trace) -> pairing.Pairs:
    """``ktrace.pairing.pair`` on the trace's notifies and waits (indices among each kind's rows)."""
    N, W = EventKind.NOTIFY, EventKind.WAIT
    wi = trace.rows_of(W)
    notifies = {"rank": trace.at(N, "rank"), "launch": trace.at(N, "launch"), "start": trace.at(N, "start_ns"),
                "program": trace.at(N, "program"), "local": is_local(trace.at(N, "flags"))}
    notifies.update((a, trace.at(N, arg_column(N, a))) for a in ("peer", "value", "flag"))
    # rows are in (rank, launch, program, slot) order: a wait's row is its place in record order
    waits = {"rank": trace.at(W, "rank"), "launch": trace.at(W, "launch"), "program": trace.at(W, "program"), "order": wi,
             "timed_out": is_timeout(trace.at(W, "flags")), "local": is_local(trace.at(W, "flags"))}
    waits.update((a, trace.at(W, arg_column(W, a))) for a in ("peer", "flag", "expected", "cmp"))
    return _pair_by_halves(notifies, waits)


#: Fewest waits :func:`_pair_by_halves` splits (below, one call costs less than two threads).
_HALVES_MIN = 1 << 16


def _pair_by_halves(notifies: dict, waits: dict) -> pairing.Pairs:
    """``pairing.pair`` of the waits of the lower and of the higher consumer ranks, each with the
    notifies addressed to them, in two threads (numpy works without the interpreter lock): a
    wait is released only by a notify addressed to its rank (every rule groups by the consumer),
    so the halves pair as the whole does (``ktrace.export.plan`` pairs rank by rank the same way).
    The waits are in rank order: each half's are a slice of them."""
    wr = np.asarray(waits["rank"])
    n_w = wr.size
    if n_w < _HALVES_MIN or int(wr[0]) == int(wr[-1]):
        return pairing.pair(notifies, waits)
    # the rank the waits split at, as evenly as whole ranks allow
    cut = int(np.searchsorted(wr, wr[n_w // 2], side="left")) or int(np.searchsorted(wr, wr[n_w // 2], side="right"))
    if not 0 < cut < n_w:
        return pairing.pair(notifies, waits)
    split = int(wr[cut])
    # a notify is addressed to its peer (a hand-off inside a program, LOCAL: to its own rank)
    dest = np.where(np.asarray(notifies["local"], bool), np.asarray(notifies["rank"]), np.asarray(notifies["peer"]))
    sides = []
    for w_sel, n_sel in ((slice(0, cut), np.flatnonzero(dest < split)), (slice(cut, n_w), np.flatnonzero(dest >= split))):
        sides.append(({c: np.asarray(v)[n_sel] for c, v in notifies.items()}, {c: np.asarray(v)[w_sel] for c, v in waits.items()},
                      n_sel, w_sel.start))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        got = list(pool.map(lambda sd: pairing.pair(sd[0], sd[1]), sides))
    notify = np.concatenate([sd[2][p.notify] for sd, p in zip(sides, got)]).astype(np.int64)
    wait = np.concatenate([p.wait + sd[3] for sd, p in zip(sides, got)]).astype(np.int64)
    exact = np.concatenate([p.exact for p in got])
    n_n = int(np.asarray(notifies["rank"]).size)
    released = np.zeros(n_n, bool)
    released[notify] = True
    return pairing.Pairs(notify, wait, exact, int(n_n - released.sum()), sum(p.unmatched_waits for p in got))


def waits(trace: Trace) -> ColumnTable:
    """Every wait with where it ran, what it waited for, how long, and what released it.

    Returns:
        A :class:`ColumnTable` of ``WAIT_DTYPE``'s columns, one row per WAIT event, in event
        order (cached). It is kept as columns: those of the trace's WAIT rows (rank, program,
        times, arguments) are shared with the trace, the others are computed (``name``,
        ``region`` (the enclosing span: a pass over the spans), ``notify_rank``,
        ``notify_program`` and ``notify_start_ns`` when first read, for the rows read).
    """
    return trace.cached(("waits",), lambda: _waits_table(trace))


def _waits_table(trace: Trace) -> ColumnTable:
    C = trace.column

    def A(name):
        return trace.at(EventKind.WAIT, name)

    rows = trace.rows_of(EventKind.WAIT)
    p = _release_pairs(trace)
    s = A("start_ns")
    e = A("end_ns")
    to = is_timeout(A("flags"))
    nr = np.full(rows.size, -1, np.int64)
    nr[p.wait] = trace.rows_of(EventKind.NOTIFY)[p.notify]
    paired = p.wait
    del p
    # the part before the releasing notify began (in place: these are millions of rows)
    v = C("start_ns")[nr[paired]]
    v -= s[paired]
    hi = e[paired]
    hi -= s[paired]
    np.clip(v, 0, np.maximum(hi, 0, out=hi), out=v)
    del hi
    late = np.full(rows.size, np.nan)
    late[paired] = v
    del v, paired
    late[to] = np.maximum(e[to] - s[to], 0)

    def of_notify(col: str):  # a column of the releasing notify (-1, or 0 for a time, when none)
        def make(idx):
            r = nr[idx]
            return np.where(r >= 0, C(col)[np.maximum(r, 0)], 0 if col == "start_ns" else -1)
        return make

    def region(idx):  # the name of the span enclosing the wait ("" if none)
        q = rows[idx]
        enc = enclosing_span(trace, q)
        out = np.full(q.size, "", dtype=object)
        has = enc >= 0
        out[has] = trace.names_of(C("region")[enc[has]])
        return out

    cols = {"row": rows, "rank": A("rank"), "launch": A("launch"), "program": A("program"), "peer": A("arg0"),
            "flag": A("arg2"), "expected": A("arg4"), "value": A("arg3"), "cmp": A("arg5"), "start_ns": s, "end_ns": e,
            "spins": A("arg1"), "timed_out": to, "notify_row": nr, "producer_late_ns": late}
    lazy = {"name": lambda idx: trace.names_of(C("region")[rows[idx]]), "region": region,
            "sm": lambda idx: C("hw")[rows[idx]], "notify_rank": of_notify("rank"),
            "notify_program": of_notify("program"), "notify_start_ns": of_notify("start_ns")}

    def wait_ns(idx):
        return np.maximum(e[idx] - s[idx], 0)

    return ColumnTable(WAIT_DTYPE, cols, lazy,
                       {"wait_ns": wait_ns, "signal_latency_ns": lambda idx: wait_ns(idx) - late[idx]})


def latest_flag_notify(trace: Trace, wpos: np.ndarray) -> np.ndarray:
    """For waits (positions in :func:`waits`), the row of the last notify on the same flag, from
    the rank waited on to the waiting rank in the same launch, that started before the wait
    ended (-1: none was captured). What a wait the pairing did not match (a counter fed by
    several notifies) waited for at the latest: the replay releases it with that notify, so a
    late producer is not hidden behind a wait held fixed."""
    Nk = EventKind.NOTIFY
    out = np.full(wpos.size, -1, np.int64)
    nrows = trace.rows_of(Nk)
    if wpos.size == 0 or nrows.size == 0:
        return out
    w = waits(trace)
    nk = [trace.at(Nk, "launch"), trace.at(Nk, "rank"), trace.at(Nk, arg_column(Nk, "peer")), trace.at(Nk, arg_column(Nk, "flag"))]
    wk = [w["launch"][wpos], w["peer"][wpos], w["rank"][wpos], w["flag"][wpos]]
    inv, _ = group_index(*(np.concatenate([a.astype(np.int64), b.astype(np.int64)]) for a, b in zip(nk, wk)))
    gn, gw = inv[: nrows.size], inv[nrows.size :]
    ns = trace.at(Nk, "start_ns").astype(np.int64)
    o = np.lexsort((ns, gn))
    gno, nso = gn[o], ns[o]
    we = w["end_ns"][wpos].astype(np.int64)
    # the last notify of the wait's group starting at or before its end: search (group, end)
    lo = np.searchsorted(gno, gw, side="left")
    hi = np.searchsorted(gno, gw, side="right")
    # within each group the starts are sorted: count those <= end by a search on a shifted key
    span = int(max(nso.max() - nso.min(), we.max() - nso.min(), 0)) + 1
    key_n = gno * span + (nso - nso.min())
    key_w = gw * span + np.clip(we - nso.min(), -1, span - 1)
    k = np.searchsorted(key_n, key_w, side="right") - 1
    ok = (hi > lo) & (k >= lo) & (k < hi)
    out[ok] = nrows[o[k[ok]]]
    return out


def kernel_time(trace: Trace) -> np.ndarray:
    """Per (rank, launch), the launch's extent on that rank: first event start to last event end
    (one rank's share of the kernel time, which runs over every rank: ``causes.kernel_time_total``).

    Returns:
        A table with ``rank``, ``launch``, ``start_ns``, ``end_ns``, ``extent_ns``.
    """
    key = ("kernel_time",)
    if key in trace._cache:
        return trace._cache[key]
    s, e = trace.column("start_ns"), trace.column("end_ns")
    out = np.zeros(0, [("rank", "<i4"), ("launch", "<i4"), ("start_ns", "<i8"), ("end_ns", "<i8"), ("extent_ns", "<i8")])
    if s.size:
        # the table is sorted by rank, launch: contiguous groups
        first, r_first, l_first = rank_launch_starts(trace)
        out = np.zeros(first.size, out.dtype)
        out["rank"], out["launch"] = r_first, l_first
        out["start_ns"] = np.minimum.reduceat(s, first)
        out["end_ns"] = np.maximum.reduceat(e, first)
        out["extent_ns"] = out["end_ns"] - out["start_ns"]
    trace._cache[key] = out
    return out


def workgroup_extent(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per workgroup (``trace.wg_keys`` order), its first event start and last event end."""
    key = ("wg_extent",)
    if key in trace._cache:
        return trace._cache[key]
    s, e = trace.column("start_ns"), trace.column("end_ns")
    if s.size == 0:
        out = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    else:
        first = np.flatnonzero(np.r_[True, trace.wg[1:] != trace.wg[:-1]])
        out = (np.minimum.reduceat(s, first), np.maximum.reduceat(e, first))
    trace._cache[key] = out
    return out


_TOTAL_FIELDS = [
    ("n_waits", "<i8"),
    ("timeouts", "<i8"),
    ("wait_ns", "<i8"),
    ("producer_late_ns", "<f8"),
    ("signal_latency_ns", "<f8"),
    ("time_ns", "<i8"),  # the time the fraction is of: kernel time (rank, peer) or lifetime (workgroup)
    ("wait_frac", "<f8"),
]


def stall_totals(trace: Trace, by: str = "rank", w: np.ndarray | None = None) -> np.ndarray:
    """Wait time summed per rank, per (rank, peer) or per workgroup, and its share of the time.

    Args:
        trace: the prepared capture.
        by: ``"rank"`` (the waiting rank; share of its kernel time, summed over launches and
            programs: waiting programs run in parallel, so this is program-time, and
            ``wait_frac`` = wait / (kernel time x programs that recorded events)), ``"peer"``
            (waiting rank and the rank waited on) or ``"workgroup"`` (rank, launch, program;
            share of the workgroup's lifetime).
        w: the :func:`waits` table (computed when not given).

    Returns:
        A table sorted by ``wait_ns``, largest first.
    """
    w = waits(trace) if w is None else w
    if by == "rank":
        kcols = [w["rank"]]
        names = [("rank", "<i4")]
    elif by == "peer":
        kcols = [w["rank"], w["peer"]]
        names = [("rank", "<i4"), ("peer", "<i4")]
    elif by == "workgroup":
        kcols = [w["rank"], w["launch"], w["program"]]
        names = [("rank", "<i4"), ("launch", "<i4"), ("program", "<i4")]
    else:
        raise ValueError(f"stall_totals: by must be 'rank', 'peer' or 'workgroup', got {by!r}")
    # Each group is a cell of a dense table where the keys allow: ranks (and peers) are a few
    # small numbers, and a waits table of this trace has each wait's workgroup; the cells are
    # made, and the waits summed, a block of waits at a time (whole columns of per-wait
    # temporaries would be several hundred MB on a large capture; the sums are of whole
    # nanoseconds, exact in float64). Other keys: dense group ids first.
    rows = w["row"]
    ranks = [np.asarray(c) for c in kcols] if by != "workgroup" and w.size else []
    radix = [int(c.max()) + 1 for c in ranks] if ranks and all(int(c.min()) >= 0 for c in ranks) else []
    inv = None
    if by == "workgroup" and w.size and int(rows.min()) >= 0 and int(rows.max()) < trace.wg.size:
        # (rank, launch, program) is the workgroup: its dense ids are in that order already
        n_cells = trace.n_workgroups

        def cell(b):
            return trace.wg[rows[b]]
    elif radix and int(np.prod(radix)) <= 1 << 20:
        n_cells = int(np.prod(radix))

        def cell(b):
            i = ranks[0][b].astype(np.int64)
            for c, size in zip(ranks[1:], radix[1:]):
                i *= size
                i += c[b]
            return i
    else:
        inv, keys = group_index(*kcols)
        n_cells = keys.shape[0]

        def cell(b):
            return inv[b]
    sums = {c: np.zeros(n_cells) for c in ("n_waits", "timeouts", "wait_ns", "producer_late_ns", "signal_latency_ns")}
    start, end, late, to = w["start_ns"], w["end_ns"], w["producer_late_ns"], w["timed_out"]
    for a in range(0, w.size, _SUM_BLOCK):
        b = slice(a, a + _SUM_BLOCK)
        i = cell(b)
        wait = np.maximum(end[b] - start[b], 0).astype(np.float64)  # the waits table's wait_ns
        sums["n_waits"] += np.bincount(i, minlength=n_cells)
        sums["timeouts"] += np.bincount(i, weights=to[b], minlength=n_cells)
        sums["wait_ns"] += np.bincount(i, weights=wait, minlength=n_cells)
        sums["producer_late_ns"] += np.bincount(i, weights=np.nan_to_num(late[b]), minlength=n_cells)
        wait -= late[b]
        sums["signal_latency_ns"] += np.bincount(i, weights=np.nan_to_num(wait), minlength=n_cells)
    cells = np.flatnonzero(sums["n_waits"])  # the groups with waits, in key order
    if inv is None:
        sums = {c: v[cells] for c, v in sums.items()}
        if by == "workgroup":
            keys = trace.wg_keys[cells]
        else:
            keys = np.stack(np.unravel_index(cells, radix), axis=1) if cells.size else np.zeros((0, len(kcols)), np.int64)
    g = keys.shape[0]
    out = np.zeros(g, names + _TOTAL_FIELDS)
    for i, (n, _) in enumerate(names):
        out[n] = keys[:, i]
    out["n_waits"] = sums["n_waits"].astype(np.int64)
    out["timeouts"] = sums["timeouts"].astype(np.int64)
    out["wait_ns"] = sums["wait_ns"].astype(np.int64)
    out["producer_late_ns"] = sums["producer_late_ns"]
    out["signal_latency_ns"] = sums["signal_latency_ns"]
    if by == "workgroup":
        ws, we = workgroup_extent(trace)
        if inv is None:  # the cells are the workgroups
            out["time_ns"] = (we - ws)[cells]
        else:
            idx = _lookup_rows(trace.wg_keys, keys)
            out["time_ns"] = np.where(idx >= 0, (we - ws)[np.maximum(idx, 0)], 0)
    else:
        # program-time of each rank: kernel extent x programs with events, summed over launches
        kt = kernel_time(trace)
        nprog = np.bincount(_lookup_rows(kt_keys(kt), trace.wg_keys[:, :2]), minlength=kt.size) if kt.size else np.zeros(0)
        per_rank = np.zeros(int(max(kt["rank"].max() + 1 if kt.size else 0, trace.world_size)), np.float64)
        np.add.at(per_rank, kt["rank"], kt["extent_ns"] * nprog)
        out["time_ns"] = per_rank[np.asarray(out["rank"], np.int64)] if per_rank.size else 0
    out["wait_frac"] = np.where(out["time_ns"] > 0, out["wait_ns"] / np.maximum(out["time_ns"], 1), np.nan)
    return out[np.argsort(-out["wait_ns"], kind="stable")]


#: Waits per block in :func:`stall_totals`.
_SUM_BLOCK = 1 << 20


def kt_keys(kt: np.ndarray) -> np.ndarray:
    return np.stack([kt["rank"].astype(np.int64), kt["launch"].astype(np.int64)], axis=1)


def _lookup_rows(table_keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Index of each query key (rows of ints) in ``table_keys`` (unique rows), -1 when absent."""
    if table_keys.shape[0] == 0:
        return np.full(query.shape[0], -1, np.int64)
    both = np.concatenate([table_keys, query])
    inv, keys = group_index(*(both[:, i] for i in range(both.shape[1])))
    where = np.full(keys.shape[0], -1, np.int64)
    where[inv[: table_keys.shape[0]]] = np.arange(table_keys.shape[0])
    return where[inv[table_keys.shape[0] :]]


#: One row per NOTIFY event, in event order (see :func:`notify_holds`).
NOTIFY_HOLD_DTYPE = np.dtype(
    [("row", "<i8"), ("rank", "<i4"), ("launch", "<i4"), ("program", "<i4"), ("start_ns", "<i8"), ("ready_ns", "<f8"),
     ("held_ns", "<f8"), ("baseline_ns", "<f8"), ("held_excess_ns", "<f8")]
)


def notify_holds(trace: Trace) -> np.ndarray:
    """How long each notify came after its producer was ready: the producer-side lateness.

    A program is *ready* to notify when the event it recorded just before the notify ended (the
    span that wrote the data the notify signals, or the previous notify or wait): events are
    recorded when they end, so the previous record of the same workgroup is the last thing the
    program finished. ``held_ns`` is the time from then to the notify's start, on the producer's
    own clock (both ends are on one rank); a notify that is a workgroup's first event has NaN.
    A healthy notify is issued within a few hundred ns of being ready; a producer that spins,
    sleeps or is descheduled before notifying holds it longer, and every waiter on that flag
    waits the extra time (cumulatively, when one program holds several notifies in a row).

    ``baseline_ns`` is what such a notify is held when nothing holds it back, judged per agent
    (``agent_of``: a program, a lane of it once programs have several) and call site (the
    notify's region): the smaller of the agent's own median hold at that site and the median
    over the agents of the same role (all agents notifying at that site in the launch, on every
    rank). ``held_excess_ns`` = ``held_ns`` - ``baseline_ns`` is how late the notify was: a few
    rounds held back stand out against the agent's other rounds, an agent that held every round
    back against its peers, at one rank as at many. These are durations measured on one rank each, so clock alignment cannot bias them;
    which waits a late notify held up, and for how long, is measured across ranks on the aligned
    clock (:func:`waits`, ``producer_late_ns``).

    Returns:
        A table of ``NOTIFY_HOLD_DTYPE``, one row per NOTIFY event, in event order.
    """
    h = hold_columns(trace)
    out = np.zeros(h["row"].size, NOTIFY_HOLD_DTYPE)
    return fill_table(out, h)


def hold_columns(trace: Trace) -> dict:
    """The columns of :func:`notify_holds`, contiguous (cached; what the other analyses read)."""
    return trace.cached(("notify_holds",), lambda: _compute_holds(trace))


def _compute_holds(trace: Trace) -> dict:
    N = EventKind.NOTIFY
    rows = trace.rows_of(N)
    rank, launch, start = trace.at(N, "rank"), trace.at(N, "launch"), trace.at(N, "start_ns")
    cols = {"row": rows, "rank": rank, "launch": launch, "program": trace.at(N, "program"), "start_ns": start}
    held = np.full(rows.size, np.nan)
    ready = np.full(rows.size, np.nan)
    base_of = np.full(rows.size, np.nan)
    if rows.size:
        prev = np.maximum(rows - 1, 0)
        # (the previous event of the same agent: a program's lanes are recorded one after another)
        has = (rows > 0) & (agent_of(trace, prev) == agent_of(trace, rows))
        pe = trace.column("end_ns")[prev]
        # differences in int64 first: absolute ns since the epoch do not fit a float64 exactly
        held = np.maximum(start - pe, 0).astype(np.float64)
        held[~has] = np.nan
        ready = pe.astype(np.float64)
        ready[~has] = np.nan
        ok = np.flatnonzero(has)
        if ok.size:
            base_of[ok] = _hold_baseline(agent_of(trace, rows[ok]), launch[ok].astype(np.int64),
                                         trace.at(N, "region")[ok].astype(np.int64), held[ok])
    cols.update(ready_ns=ready, held_ns=held, baseline_ns=base_of, held_excess_ns=held - base_of)
    return cols


def _hold_baseline(agent: np.ndarray, launch: np.ndarray, site: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Per notify, the hold it is judged against: the smaller of its agent's median hold at the
    same call site (its other rounds: a few rounds held back stand out) and the median, over the
    agents of the same role (every agent notifying at that call site in the launch, on any
    rank), of their median holds there (an agent that held every round back stands out). Never
    the other ranks only: it works at one rank, and when every rank holds the same rounds."""
    inv, keys = group_index(agent, site)  # (agent, call site)
    own = group_median(inv, held, keys.shape[0])
    # the agents of one role: same launch and call site (an agent belongs to one launch)
    a_first = np.zeros(keys.shape[0], np.int64)
    a_first[inv] = np.arange(inv.size)
    r_inv, r_keys = group_index(launch[a_first], keys[:, 1])
    role = group_median(r_inv, own, r_keys.shape[0])
    return np.minimum(own, role[r_inv])[inv]


#: A round is slow when its work took this share more than the agent's usual there (and at least
#: :data:`MIN_SLOW_ROUND_NS` more): a straggler's round (``causes.straggler``).
SLOW_ROUND_SHARE = 0.25
#: ... and at least this much more (``CauseConfig.min_late_ns``'s default).
MIN_SLOW_ROUND_NS = 1_000.0
#: Rounds an agent must have at a call site for any of them to be judged slow.
MIN_ROUNDS = 3


def notify_work(trace: Trace) -> dict:
    """Per notify (event order, as :func:`notify_holds`): the work its agent did for it, and how
    much longer that took than the agent's usual there (cached).

    The work of a round is the time from the agent's previous hand-off (the end of its last wait
    or notify) to the moment it was ready to notify (its previous event's end: what is after that
    is the hold, :func:`notify_holds`). A notify right after another hand-off (one of several a
    tile sends) did none of its own, and the work before an agent's first hand-off holds its
    setup too: theirs is NaN (no round of the agent's is judged by them). ``baseline_ns``
    is the agent's median work at that call site over its rounds, ``work_excess_ns`` the round's
    work beyond it: a straggler's slow rounds stand out against its other rounds. ``slow`` marks
    the rounds at least :data:`SLOW_ROUND_SHARE` and :data:`MIN_SLOW_ROUND_NS` beyond it. Both ends
    of every duration are on the agent's own clock.

    Returns:
        ``{"row", "work_ns", "baseline_ns", "work_excess_ns", "n_rounds", "slow"}``, one entry per
        notify (``n_rounds``: the judged rounds of its agent there; none is slow below
        :data:`MIN_ROUNDS`).
    """
    return trace.cached(("notify_work",), lambda: _compute_work(trace))


def _compute_work(trace: Trace) -> dict:
    h = hold_columns(trace)
    rows = h["row"]
    n = rows.size
    out = {"row": rows, "work_ns": np.full(n, np.nan), "baseline_ns": np.full(n, np.nan), "work_excess_ns": np.full(n, np.nan),
           "n_rounds": np.zeros(n, np.int64), "slow": np.zeros(n, bool)}
    if n == 0:
        return out
    from .trace import lane_view

    hand = np.sort(np.concatenate([trace.rows_of(EventKind.WAIT), rows]))
    k = np.searchsorted(hand, rows)
    prev = hand[np.maximum(k - 1, 0)]
    me = agent_of(trace, rows)
    has_prev = (k > 0) & (agent_of(trace, prev) == me)
    begin = np.where(has_prev, trace.column("end_ns")[prev], 0).astype(np.float64)
    ready = h["ready_ns"]  # (NaN: the notify is its agent's first event)
    # (differences of absolute ns: exact in float64 well below the 2**53 ns of 104 days)
    work = np.maximum(ready - begin, 0.0)
    # a notify right after another hand-off (the next peer's of one tile) did no work of its own:
    # its round's work is the first notify's (NaN here, so that it is no round of the agent's);
    # nor is the work before an agent's first hand-off judged: it holds the program's setup too
    work[(has_prev & (prev == rows - 1)) | ~has_prev] = np.nan
    ok = np.flatnonzero(np.isfinite(work))
    if ok.size:
        inv, keys = group_index(me[ok], trace.at(EventKind.NOTIFY, "region")[ok].astype(np.int64))
        own = group_median(inv, work[ok], keys.shape[0])[inv]
        out["baseline_ns"][ok] = own
        out["work_excess_ns"][ok] = work[ok] - own
        out["n_rounds"][ok] = np.bincount(inv, minlength=keys.shape[0])[inv]
    out["work_ns"] = work
    ex = out["work_excess_ns"]
    # (against fewer than MIN_ROUNDS rounds a median is no usual pace: of two, neither is slow)
    out["slow"] = (np.isfinite(ex) & (out["n_rounds"] >= MIN_ROUNDS)
                   & (ex >= np.maximum(MIN_SLOW_ROUND_NS, SLOW_ROUND_SHARE * np.nan_to_num(out["baseline_ns"]))))
    return out


#: One row per producer rank (``stragglers(...)[0]``) or producer workgroup (``[1]``).
STRAGGLER_FIELDS = [
    ("n_notifies", "<i8"),  # notifies of this producer that released a captured wait
    ("n_waits", "<i8"),  # waits they released
    ("n_late", "<i8"),  # of its notifies, those late: a wait they released began before them
    ("cost_ns", "<f8"),  # sum of producer lateness over the waits released: the waiting caused
    ("late_median_ns", "<f8"),  # per late notify, the lateness (largest over its waits); median (0: none late)
    ("late_max_ns", "<f8"),
    ("excess_late_ns", "<f8"),  # late_median_ns minus the median of the other producers'
    ("held_median_ns", "<f8"),  # per notify, ready -> notify start (notify_holds); median
    ("held_excess_ns", "<f8"),  # per notify, held_ns beyond the other ranks' (notify_holds); median: THE lateness
    ("held_excess_total_ns", "<f8"),  # summed over its notifies (>= 0 each): the time it held them back
    ("waiter_ranks", "O"),  # list of ranks that waited on it
    ("waiter_workgroups", "<i8"),  # distinct (rank, launch, program) that waited on it
    ("worst_notify_row", "<i8"),
    ("worst_start_ns", "<i8"),  # time range of the worst notify's lateness
    ("worst_end_ns", "<i8"),
    ("before_region", "O"),  # the region it most often ran just before notifying
    ("before_ns", "<f8"),  # mean duration of that region before its notifies
    ("before_others_ns", "<f8"),  # mean duration of the same region on other producers
]


#: One row per notify that released a captured wait (see :func:`notify_lateness`).
NOTIFY_LATENESS_DTYPE = np.dtype(
    [("row", "<i8"), ("rank", "<i4"), ("launch", "<i4"), ("program", "<i4"), ("seq", "<i8"), ("flag", "<i8"),
     ("start_ns", "<i8"), ("late_ns", "<f8"), ("cost_ns", "<f8"), ("n_waits", "<i8"), ("before_row", "<i8"),
     ("before_region", "O"), ("before_ns", "<f8"), ("gap_ns", "<f8"), ("held_ns", "<f8"), ("held_excess_ns", "<f8")]
)


def notify_lateness(trace: Trace, w: np.ndarray | None = None) -> ColumnTable:
    """One row per notify that released at least one captured wait: how late it was (a
    :class:`ColumnTable` of ``NOTIFY_LATENESS_DTYPE``'s columns).

    Columns: ``row``, ``rank``, ``launch``, ``program``, ``seq``, ``flag``, ``start_ns``,
    ``late_ns`` (the largest producer lateness among the waits it released: how long its first
    waiter had been spinning), ``cost_ns`` (summed over its waits), ``n_waits``,
    ``before_row`` (the span that ended last before it, -1 if none), ``before_region``,
    ``before_ns`` (that span's duration), ``gap_ns`` (from that span's end to the notify),
    ``held_ns`` and ``held_excess_ns`` (from the producer being ready to the notify, and that
    beyond the other ranks': :func:`notify_holds`). Sorted by ``cost_ns``, largest first.
    """
    return _notify_lateness(trace, w)[0]


def _notify_lateness(trace: Trace, w: np.ndarray | None = None) -> tuple[ColumnTable, dict]:
    """:func:`notify_lateness` and, for :func:`stragglers`, per paired wait (in ``waits`` order)
    its notify's row in that table (``pos``), the paired waits' rank and workgroup (``wg``)."""
    w = waits(trace) if w is None else w
    return trace.cached(("notify_late",), lambda: _compute_notify_lateness(trace, w))


def preceding_notify_spans(trace: Trace) -> np.ndarray:
    """Per NOTIFY event (in row order), the row of the span its program ran last before it, or
    -1 (:func:`ktrace.analysis.trace.preceding_span`; cached: :func:`notify_lateness` reads it,
    ``build_report`` computes it ahead in its other thread)."""
    return trace.cached(("notify_preceding",), lambda: preceding_span(trace, trace.rows_of(EventKind.NOTIFY)))


def _compute_notify_lateness(trace: Trace, w: np.ndarray) -> tuple[ColumnTable, dict]:
    nr_all = w["notify_row"]
    paired = np.flatnonzero(nr_all >= 0)
    nr = nr_all[paired]
    ev = _Cols(trace)
    # distinct notifies in row order, and each paired wait's (np.unique without a sort: rows are < events)
    mark = np.zeros(trace.n_events + 1, bool)
    mark[nr] = True
    u = np.flatnonzero(mark)
    inv = np.searchsorted(u, nr) if nr.size < u.size * 8 else (np.cumsum(mark) - 1)[nr]
    del mark
    g = u.size
    late = np.nan_to_num(w["producer_late_ns"][paired])
    cost = group_sum(inv, late, g)
    order = _order_desc(cost)
    notifies = trace.rows_of(EventKind.NOTIFY)
    at_u = np.searchsorted(notifies, u)  # positions among the notifies (both sorted)
    if at_u.size and (int(at_u.max()) >= notifies.size or (notifies[at_u] != u).any()):
        raise AnalysisError("waits released by events that are not notifies: the waits table is not this trace's")
    at_u_o = at_u[order]
    del at_u
    cols = {"row": u[order]}
    for c, src in (("rank", "rank"), ("launch", "launch"), ("program", "program"), ("seq", "arg3"), ("flag", "arg2"),
                   ("start_ns", "start_ns")):
        cols[c] = trace.at(EventKind.NOTIFY, src)[at_u_o]
    hold = hold_columns(trace)
    cols["held_ns"] = hold["held_ns"][at_u_o]
    cols["held_excess_ns"] = hold["held_excess_ns"][at_u_o]
    prev = preceding_notify_spans(trace)[at_u_o]  # (each row's answer is the same asked alone)
    del at_u_o
    cols["late_ns"] = group_max(inv, late, g, fill=0.0)[order]
    cols["cost_ns"] = cost[order]
    cols["n_waits"] = group_count(inv, g)[order]
    cols["before_row"] = prev
    has = prev >= 0
    reg = np.full(g, "", dtype=object)
    ph = prev[has]
    reg[has] = trace.names_of(ev["region"][ph])
    bn = np.full(g, np.nan)
    gap = np.full(g, np.nan)
    pe = ev["end_ns"][ph]
    bn[has] = pe - ev["start_ns"][ph]
    gap[has] = cols["start_ns"][has] - pe
    cols.update(before_region=reg, before_ns=bn, gap_ns=gap)
    out = ColumnTable(NOTIFY_LATENESS_DTYPE, cols)  # (a row per released notify: millions on a large capture)
    rank_of = np.empty(g, np.int64)
    rank_of[order] = np.arange(g)
    # per paired wait: its notify's place in the table, its rank and its workgroup (kept while the
    # trace is: 32-bit where the counts allow)
    narrow = np.int32 if max(g, trace.n_workgroups) < 2**31 else np.int64
    extra = {"pos": rank_of[inv].astype(narrow), "rank": w["rank"][paired],
             "wg": trace.wg[w["row"][paired]].astype(narrow), "cols": cols}
    return out, extra


def _order_desc(x: np.ndarray) -> np.ndarray:
    """``np.argsort(-x, kind="stable")`` for float64 ``x`` (one packed integer sort when x holds whole numbers)."""
    x = np.asarray(x, np.float64)
    if x.size >= keys.LARGE and np.isfinite(x).all():
        hi = float(x.max())
        if hi - float(x.min()) < 2**52:
            ix = x.astype(np.int64)
            if (ix == x).all():
                return argsort_stable(int(hi) - ix)
    return np.argsort(-x, kind="stable")


def stragglers(trace: Trace, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rank producers by the waiting their late notifies caused.

    Returns:
        ``(by_rank, by_workgroup)``: tables with ``rank`` (and ``launch``, ``program``) plus
        ``STRAGGLER_FIELDS``, sorted by ``cost_ns``, largest first (the waiting its notifies
        caused: ``producer_late_ns`` summed over the waits they released, on the aligned
        clock). Two lateness measures, over the producer's notifies that released a wait:

        * ``held_excess_ns`` (producer side, what "notified late" means): per notify, the time
          from the producer being ready (its previous event on that program ended) to the
          notify's start, beyond what the other ranks take in the same launch
          (:func:`notify_holds`); the median. A rank that spins D before each notify stands out
          by D, however its waiters' arrivals fall.
        * ``late_median_ns`` (consumer side): per notify, how long its first waiter had been
          spinning when it began; the median over the ``n_late`` notifies that were late (a
          producer late on a third of its notifies reads how late those were). ``excess_late_ns``
          compares it with the median of the other producers' medians (ranks with ranks,
          workgroups with workgroups). It sees a producer made late by slow work before the
          notify, which ``held_excess_ns`` does not (that is a load finding), but a held notify
          whose waiters arrive later still reads 0.
    """
    return straggler_table(trace, "rank", w), straggler_table(trace, "workgroup", w)


def straggler_table(trace: Trace, by: str, w: np.ndarray | None = None, head: int | None = None) -> np.ndarray:
    """One of the two tables of :func:`stragglers`: ``by`` is "rank" or "workgroup" (its first
    ``head`` rows only, when given)."""
    w = waits(trace) if w is None else w
    nl, paired = _notify_lateness(trace, w)
    cols = paired["cols"]
    if by == "rank":
        return _straggler_table(trace, cols, paired, cols["rank"].astype(np.int64), ("rank",), head)
    if by == "workgroup":
        return _straggler_table(trace, cols, paired, trace.wg[cols["row"]], ("rank", "launch", "program"), head)
    raise ValueError(f"stragglers by {by!r}: give 'rank' or 'workgroup'")


def _straggler_table(trace: Trace, nl: dict, paired: dict, producer: np.ndarray, by: tuple[str, ...],
                     head: int | None = None) -> np.ndarray:
    """The table of :func:`straggler_table` (its first ``head`` rows only, when given: the rows
    made from the producers' columns, which are made for every producer)."""
    dt = [(c, "<i4") for c in by] + STRAGGLER_FIELDS
    if nl["row"].size == 0:
        return np.zeros(0, dt)
    inv, ukeys = dense_codes(producer)
    g = ukeys.size
    out: dict = {}  # column -> per producer (a row table only of the rows returned)
    first = np.zeros(g, np.int64)
    first[inv[::-1]] = np.arange(inv.size)[::-1]
    for c in by:
        out[c] = nl[c][first]
    out["n_notifies"] = group_count(inv, g)
    out["n_waits"] = group_sum(inv, nl["n_waits"], g).astype(np.int64)
    out["cost_ns"] = group_sum(inv, nl["cost_ns"], g)
    late_ns = nl["late_ns"]
    _, lmax = group_median_max(inv, late_ns, g)  # every group has notifies
    out["late_max_ns"] = lmax
    # lateness over the notifies that were late (a waiter already spinning): a producer late on
    # a third of its notifies shows how late those were, not the median over all (which reads 0)
    is_late = late_ns > 0
    n_late = np.bincount(inv[is_late], minlength=g).astype(np.int64)
    out["n_late"] = n_late
    out["late_median_ns"] = np.where(n_late > 0, group_median(inv[is_late], late_ns[is_late], g), 0.0)
    med = out["late_median_ns"]
    if g > 1:
        # the median of the others' medians, for each producer (leave-one-out on a sorted list)
        srt = np.sort(med)
        k = g - 1
        idx_self = np.searchsorted(srt, med)
        lo_i, hi_i = (k - 1) // 2, k // 2

        def other_at(i):  # i-th smallest of the list without this producer's own value
            return np.where(i < idx_self, srt[np.minimum(i, g - 1)], srt[np.minimum(i + 1, g - 1)])

        out["excess_late_ns"] = med - 0.5 * (other_at(lo_i) + other_at(hi_i))
    else:
        out["excess_late_ns"] = np.nan
    hx = nl["held_excess_ns"]
    okh = np.isfinite(hx)
    out["held_median_ns"] = group_median(inv[okh], nl["held_ns"][okh], g)
    out["held_excess_ns"] = group_median(inv[okh], hx[okh], g)
    out["held_excess_total_ns"] = group_sum(inv[okh], np.maximum(hx[okh], 0.0), g)
    g_of_wait = inv[paired["pos"]]
    # waiting ranks per producer (ranks are few: a dense (producer, rank) table, filled a block of
    # waits at a time)
    prank = paired["rank"]
    nr = int(max(int(prank.max()) + 1 if prank.size else 1, 1))
    seen = np.zeros(g * nr, bool)
    for a in range(0, prank.size, _SUM_BLOCK):
        k = g_of_wait[a : a + _SUM_BLOCK] * nr
        k += prank[a : a + _SUM_BLOCK]
        seen[k] = True
    out["waiter_ranks"] = seen.reshape(g, nr)  # (as tuples at the rows returned)
    W = max(trace.n_workgroups, 1)
    if g * W <= 1 << 26:
        pw = np.zeros(g * W, bool)
        pw[g_of_wait * W + paired["wg"]] = True
        out["waiter_workgroups"] = pw.reshape(g, W).sum(axis=1)
    else:
        wk = g_of_wait * W
        wk += paired["wg"]
        wk.sort()
        wk = wk[np.r_[True, wk[1:] != wk[:-1]]] if wk.size else wk
        out["waiter_workgroups"] = np.bincount(wk // W, minlength=g)
    # worst notify of each producer: its latest row (in nl order) with the largest lateness
    cand = np.flatnonzero(late_ns == lmax[inv])
    worst = np.full(g, -1, np.int64)
    np.maximum.at(worst, inv[cand], cand)
    out["worst_notify_row"] = nl["row"][worst]
    ws = nl["start_ns"][worst]
    out["worst_end_ns"] = ws
    out["worst_start_ns"] = ws - late_ns[worst].astype(np.int64)
    # what the producer ran just before its notifies: the most frequent preceding region
    before_row = nl["before_row"]
    has = before_row >= 0
    # int64 first: a uint32 column beside -1 wraps to 4294967295 (NumPy < 2.5) or raises (2.5)
    reg_ids = np.where(has, trace.column("region")[np.maximum(before_row, 0)].astype(np.int64), -1)
    rcode, runiq = dense_codes(reg_ids)
    R = runiq.size
    cnt = np.bincount(inv * R + rcode, minlength=g * R).reshape(g, R).astype(np.float64)
    dur = np.nan_to_num(nl["before_ns"])
    tot = np.bincount(inv * R + rcode, weights=dur, minlength=g * R).reshape(g, R)
    cnt_valid = np.where((runiq >= 0)[None, :], cnt, -1)
    j = np.argmax(cnt_valid, axis=1)
    ar = np.arange(g)
    top_reg = np.where(cnt_valid[ar, j] > 0, runiq[j], -1)
    before_ns = tot[ar, j] / np.maximum(cnt[ar, j], 1)
    o_cnt = cnt.sum(axis=0)[j] - cnt[ar, j]
    others = np.where(o_cnt > 0, (tot.sum(axis=0)[j] - tot[ar, j]) / np.maximum(o_cnt, 1), np.nan)
    valid_reg = top_reg >= 0
    names = np.full(g, "", dtype=object)
    names[valid_reg] = trace.names_of(top_reg[valid_reg])
    out["before_region"] = names
    out["before_ns"] = np.where(valid_reg, before_ns, np.nan)
    out["before_others_ns"] = np.where(valid_reg, others, np.nan)
    pick = _order_desc(out["cost_ns"])
    if head is not None:
        pick = pick[:head]
    table = np.zeros(pick.size, dt)
    for c, v in out.items():
        table[c] = _rank_tuples(v[pick]) if c == "waiter_ranks" else (v[pick] if np.ndim(v) else v)
    return table


def _rank_tuples(seen: np.ndarray) -> np.ndarray:
    """Per row of a (groups, ranks) boolean table, the tuple of ranks set (object array)."""
    g, nr = seen.shape
    out = np.empty(g, dtype=object)
    if g == 0:
        return out
    if nr <= 62:
        bits = (seen.astype(np.int64) << np.arange(nr, dtype=np.int64)).sum(axis=1)
        code, pats = dense_codes(bits)
        tuples = [tuple(b for b in range(nr) if (p >> b) & 1) for p in pats.tolist()]
        lut = np.empty(len(tuples), dtype=object)
        lut[:] = tuples
        out[:] = lut[code]
        return out
    out[:] = [tuple(np.flatnonzero(row).tolist()) for row in seen]
    return out
