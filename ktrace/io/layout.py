"""The trace layout both writers share: tracks, lanes, names, flows. Vectorised, in two passes.

Layout: one process per rank; under it a ``kernels`` track (one slice per launch) and one
track per workgroup (program), in program order. Spans of one program that overlap without
nesting cannot share a track (a timeline draws nested slices only), so they go to extra lanes
``p<program> lane<k>`` right below it; nothing is dropped. Launches of one rank that overlap in
time (several streams) get separate groups of program tracks. Counters are counter tracks per
(program, counter name). Each notify gets a flow arrow to the wait it released
(``ktrace.clock.pair_notify_wait``).

How a capture is written (``ktrace.io._parallel`` spreads both passes over forked worker
processes; a task is a *batch*: launches of one rank and one buffer layout, their records read
straight from the file into one array and decoded as one, so that many small launches cost
about what one large launch does):

1. :func:`plan_trace`, the light pass: per launch the header, the event count, the first start
   and last end (the time base and the launch groups come from these), the region ids of its
   counters, and the few fields of waits and notifies that pairing reads. Only kinds, flags
   and times are decoded for every event; the rest is read for the rows that need it, and
   buffers are not CRC-checked here (the writing pass checks each). The wait/notify columns go
   to anonymous shared memory, where pairing tasks (one per destination rank) read them and
   leave their pairs; the calling process only hands each launch its slices.
2. The writer's pass: each task decodes its batch once (:func:`read_batch`), lays it out
   (lanes, track ids, flows) and writes every event of it. Which tracks exist is learnt here,
   so the Chrome writer collects them for its metadata at the end and the Perfetto writer
   emits each track's descriptor before its first use. Output goes through
   ``ktrace.io._parallel.Output``: each piece's place is settled under a lock, its bytes are
   written by a thread of the task's process while the task formats the next ones, and large
   traces (>= 256 MiB expected) bypass the page cache with direct I/O (``KTRACE_DIRECT_IO=0``
   turns that off, ``=1`` forces it).

Track ids and counter track ids are functions of (launch group, program, lane / counter), so
no pass needs to know which tracks another pass or worker has seen.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from ..clock.causality import pair_notify_wait
from ..clock.model import ClockModel, clock_model_of
from ..decode import BufferDecodeError, decode_columns
from ..schema import DETAIL_DTYPE, REGION_SHIFT, EventFlag, EventKind

log = logging.getLogger("ktrace")

#: Event classes the writers emit (each with its own name, category and arguments).
SPAN, WAIT, NOTIFY, INSTANT, COUNTER = "span", "wait", "notify", "instant", "counter"


def lanes_of(program: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Assign each interval a lane so that, per program and lane, intervals nest or are disjoint.

    Fast path (vectorised): per program, check that the intervals form a laminar family
    (every pair is nested or disjoint; touching ends count as disjoint) with one sort of their
    boundaries: such programs need only lane 0. Programs that fail go through a greedy pass in Python (first lane where the
    interval nests), costing per event only where spans really overlap without nesting.

    Args:
        program: track key per interval (int).
        start, end: interval bounds (int64, ``end >= start``).

    Returns:
        uint8 lane per interval (0 for most).
    """
    n = program.size
    lanes = np.zeros(n, np.uint8)
    if n < 2:
        return lanes
    if (end <= start).any():  # zero-length intervals nest anywhere: lane 0, left out of the check
        pos = np.flatnonzero(end > start)
        lanes[pos] = lanes_of(program[pos], start[pos], end[pos])
        return lanes
    prog = program.astype(np.int64)
    t0 = int(start.min())
    span_t = int(end.max()) - t0 + 1
    pbits = max(1, int(prog.max()).bit_length())
    tbits = span_t.bit_length()
    # boundaries 0..n-1 open at start, n..2n-1 close at end; sorted by program and time; at equal
    # times closes first (touching is disjoint), wider opens first (outer), later-started closes
    # first (inner); identical intervals open in index order and close in reverse
    b_type = np.r_[np.ones(n, np.int64), np.zeros(n, np.int64)]
    b_time = np.r_[start, end] - t0
    if pbits + tbits + 1 <= 62:
        primary = (np.r_[prog, prog] << (tbits + 1)) | (b_time << 1) | b_type
        bo = np.argsort(primary, kind="stable")  # one key: the tie-breaks matter only where it repeats
        ps = primary[bo]
        rep = ps[1:] == ps[:-1]
        if rep.any():  # order each run of equal keys by the tie-breaks (runs keep their places)
            at = np.flatnonzero(np.r_[rep, False] | np.r_[False, rep])
            sub = bo[at]
            k = sub % n
            close = sub >= n
            tie = np.where(close, -(start[k] - t0), -(end[k] - t0))
            tie2 = np.where(close, -k, k)
            bo[at] = sub[np.lexsort((tie2, tie, ps[at]))]
    else:
        idx = np.arange(n, dtype=np.int64)
        bo = np.lexsort((np.r_[idx, -idx], np.r_[-(end - t0), -(start - t0)], b_type, b_time, np.r_[prog, prog]))
    bt = b_type[bo]
    level = np.cumsum(2 * bt - 1) + (1 - bt)  # an open's level is the depth after it, a close's before it
    # The family is laminar exactly when every interval opens and closes at the same level: an
    # interval's two levels differ by (intervals that start inside it and end after it) minus
    # (intervals that started before it and end inside it), so if a later interval crosses one,
    # an earlier one crosses it too, and an earlier one that, and so on: impossible.
    lev = np.empty(2 * n, np.int64)
    lev[bo] = level
    bad_iv = lev[:n] != lev[n:]
    if not bad_iv.any():
        return lanes
    bad = prog[bad_iv]
    if int(prog.min()) >= 0 and int(prog.max()) < 4 * n:  # (no sort needed to find them)
        is_bad = np.zeros(int(prog.max()) + 1, bool)
        is_bad[bad] = True
        sel = np.flatnonzero(is_bad[prog])
    else:
        sel = np.flatnonzero(np.isin(program, np.unique(bad)))
    sel = sel[np.lexsort((-end[sel], start[sel], program[sel]))]
    cur_prog = None
    stacks: list[list[int]] = []
    for i, p, s, e in zip(sel.tolist(), program[sel].tolist(), start[sel].tolist(), end[sel].tolist()):
        if p != cur_prog:
            cur_prog, stacks = p, []
        for k, st in enumerate(stacks):
            while st and st[-1] <= s:
                st.pop()
            if not st or st[-1] >= e:
                st.append(e)
                lanes[i] = k
                break
        else:
            if len(stacks) >= 255:
                raise ValueError(f"program {p}: more than 255 spans overlap at once; cannot lay them out")
            stacks.append([e])
            lanes[i] = len(stacks) - 1
    return lanes


def event_class(kind: np.ndarray) -> dict[str, np.ndarray]:
    """Row indices of each class: spans, waits, notifies, instants (incl. zero-length), counters."""
    return {
        SPAN: np.flatnonzero(kind == EventKind.SPAN),
        WAIT: np.flatnonzero(kind == EventKind.WAIT),
        NOTIFY: np.flatnonzero(kind == EventKind.NOTIFY),
        INSTANT: np.flatnonzero(kind == EventKind.INSTANT),
        COUNTER: np.flatnonzero(kind == EventKind.COUNTER),
    }


@dataclass
class LaunchPlan:
    """What the light pass learns about one launch."""

    rank: int
    index: int
    kernel: str
    grid: tuple
    n_programs: int
    group: int
    n_events: int
    dropped: int
    start_ns: int
    end_ns: int
    #: flows that start at this launch's notifies: parts ``(rows, pair_index, base)``, one per
    #: rank whose waits they released; a pair's id is ``base + pair_index`` (a notify that
    #: released k waits has k entries)
    flow_out: list = field(default_factory=list)
    #: rows of the waits that end a flow (ascending), the id of the first one's pair (the
    #: others follow in order), and per wait its notify's id (the smallest id of that notify's
    #: pairs: what Chrome JSON binds with, since a v2 flow may end many times) less ``flow_base``
    flow_in_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    flow_in_first_id: int = 0
    flow_in_notify: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    flow_base: int = 0


@dataclass
class RankPlan:
    rank: int
    name: str
    #: programs per launch group, the radix of track ids
    max_programs: int = 1
    #: launch groups the rank's launches use
    n_groups: int = 1

    #: region ids of the capture's counters (sorted; the same for every rank)
    counter_regions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __post_init__(self):
        slots = self.n_groups * self.max_programs
        if (slots << 8) + 2 >= 2**31 or slots * max(1, self.counter_regions.size) >= 2**31:
            raise ValueError(f"rank {self.rank}: too many programs ({self.max_programs}) x launch groups ({self.n_groups}) "
                             f"x counters ({self.counter_regions.size}) to number tracks")

    def tids(self, group, program: np.ndarray, lanes) -> np.ndarray:
        """Track id of each (group, program, lane): ordered by group, program, lane; 1 is ``kernels``.

        Ids stay below 2**31 (Chrome JSON tids are read as uint32; Perfetto uuids use them).
        ``group`` and ``lanes`` may be scalars or per-row arrays.
        """
        slot = np.asarray(group, np.int64) * self.max_programs + program.astype(np.int64)
        return (slot << 8) + 2 + lanes

    def track(self, tid: int) -> tuple[int, int, int]:
        """``(group, program, lane)`` of a track id."""
        rel = tid - 2
        g, prog = divmod(rel >> 8, self.max_programs)
        return g, prog, rel & 0xFF

    def counter_code(self, group, program: np.ndarray, region: np.ndarray) -> np.ndarray:
        """A number below 2**31 per counter track: ``(group * max_programs + program) * R + r``,
        with ``r`` the region's place among the capture's ``R`` counter regions."""
        slot = np.asarray(group, np.int64) * self.max_programs + program.astype(np.int64)
        return slot * self.counter_regions.size + np.searchsorted(self.counter_regions, region)

    def counter_track(self, code: int) -> tuple[int, int, int]:
        """``(group, program, region)`` of a counter code."""
        slot, r = divmod(code, self.counter_regions.size)
        g, prog = divmod(slot, self.max_programs)
        return g, prog, int(self.counter_regions[r])


def track_name(group: int, program: int, lane: int) -> str:
    return f"p{program}" + (f" lane{lane}" if lane else "") + (f" [stream group {group}]" if group else "")


@dataclass
class TracePlan:
    """The light pass's result: launches, groups, flows, time base, and how to batch the work."""

    model: ClockModel
    launches: list[LaunchPlan]
    ranks: dict[int, RankPlan]
    base_ns: int
    n_events: int
    n_flows: int
    partial: bool
    missing_ranks: list[int]
    regions: dict[int, str]
    #: worker processes the writers use (1: all in this process)
    workers: int = 1
    #: launch indices (plan order) decoded together by one task
    batches: list[list[int]] = field(default_factory=list)

    def region_name(self, rid: int) -> str:
        return self.regions.get(int(rid), f"region#{int(rid):06x}")


def rank_title(rank: int, device: dict) -> str:
    dev = device.get("name") or "unknown GPU"
    where = f" (gpu {device['index']})" if "index" in device else ""
    return f"rank {rank} · {dev}{where}"


def _launch_refs(capture) -> list:
    return [(r, ln) for r, rc in sorted(capture.ranks.items()) for ln in rc.launches]


#: Largest raw bytes one batch decodes (bounds a worker's memory: ~5x this while writing).
BATCH_BYTES = 8 << 20
#: Batches per worker the batch size aims at (small enough that the workers finish together).
BATCHES_PER_WORKER = 8


def make_batches(refs: list, workers: int) -> list[list[int]]:
    """Launches of one rank and one buffer layout (programs x slots, dense or packed), in launch
    order, about the same raw size each: what one task decodes and writes together."""
    total = sum(ln.nbytes for _, ln in refs)
    target = min(BATCH_BYTES, max(1 << 20, total // (BATCHES_PER_WORKER * max(1, workers))))
    open_: dict[tuple, tuple[list[int], int]] = {}
    out: list[list[int]] = []
    for li, (r, ln) in enumerate(refs):
        sizes = ln.split_sizes()
        k = (r, math.prod(ln.grid), ln.capacity, sizes[0] if sizes else None)
        cur, size = open_.get(k, (None, 0))
        if cur is None or size + ln.nbytes > target:
            cur, size = [], 0
            out.append(cur)
        cur.append(li)
        open_[k] = (cur, size + ln.nbytes)
    return out


@dataclass
class Batch:
    """Some launches of one rank, decoded together: plain columns, one row per event."""

    rank: int
    #: launch indices (plan order) and where each one's rows start (one more entry: the end)
    launches: list[int]
    offsets: np.ndarray
    cols: dict
    #: start and end on the common clock (ns)
    s_ns: np.ndarray
    e_ns: np.ndarray
    #: each launch's header (``written`` and ``dropped`` filled in)
    headers: list = field(default_factory=list)
    #: the launches' record slots, stacked (what the ``index`` column points into)
    records: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def per_row(self, values) -> np.ndarray:
        """A per-launch value repeated over each launch's rows."""
        return np.repeat(np.asarray(values), np.diff(self.offsets))


def read_batch(batch: list[int], columns, capture=None, model: ClockModel | None = None, *, verify: bool = True, times: bool = True) -> Batch:
    """Decode launches ``batch`` (plan order; one rank, one buffer layout) into one :class:`Batch`.

    Without ``capture`` (in a worker task) the capture, model and launch list are the run's
    shared state (``ktrace.io._parallel.STATE``). ``verify=False`` skips the CRC-32 of buffers
    read from their file (the light pass: the writing pass reads every buffer again, checked,
    and fails before anything is written if one is damaged); a buffer that does not decode is
    still checked, so that damage is reported as such. ``times=False`` leaves ``s_ns``/``e_ns``
    (the events' times on the common clock) empty.
    """
    from . import _parallel
    from .capture_file import CaptureError, read_buffers

    if capture is None:
        capture, model, refs = _parallel.STATE["capture"], _parallel.STATE["model"], _parallel.STATE["refs"]
    else:
        refs = _launch_refs(capture)
    mine = [refs[li] for li in batch]
    rank = mine[0][0]
    try:
        bufs = read_buffers([ln for _, ln in mine], verify=verify)
        headers, counts, cols, records = decode_columns(bufs, columns, records=True)
    except BufferDecodeError as e:
        ln = mine[e.index][1]
        if not verify:
            ln.load_raw()  # (damaged: raises saying so)
        raise CaptureError(f"rank {rank}, launch {ln.index} ({ln.kernel}): {e}") from None
    except ValueError:  # headers that disagree with their launches' grid and capacity
        for _, ln in mine:
            try:
                h = decode_columns([ln.load_raw()], ())[0][0]
            except BufferDecodeError as e:
                raise CaptureError(f"rank {rank}, launch {ln.index} ({ln.kernel}): {e}") from None
            if (h.grid, h.capacity) != (tuple(ln.grid), ln.capacity):
                raise CaptureError(f"rank {rank}, launch {ln.index} ({ln.kernel}): its buffer's header says grid {h.grid} and "
                                   f"{h.capacity} slots, its launch record grid {tuple(ln.grid)} and {ln.capacity} slots") from None
        raise
    offsets = np.r_[0, np.cumsum(counts)]
    clk = model.rank(rank)
    hz = [h.tick_hz for h in headers]
    if not times:
        s_ns = e_ns = np.zeros(0, np.int64)
    elif len(set(hz)) <= 1:
        s_ns = clk.to_common(cols["start"], hz[0] if hz else None)
        e_ns = clk.to_common(cols["end"], hz[0] if hz else None)
    else:  # launches timed at different rates: convert each on its own
        s_ns, e_ns = np.empty(offsets[-1], np.int64), np.empty(offsets[-1], np.int64)
        for k, h in enumerate(hz):
            a, b = offsets[k], offsets[k + 1]
            s_ns[a:b] = clk.to_common(cols["start"][a:b], h)
            e_ns[a:b] = clk.to_common(cols["end"][a:b], h)
    return Batch(rank=rank, launches=list(batch), offsets=offsets, cols=cols, s_ns=s_ns, e_ns=e_ns, headers=headers, records=records)


def batch_lanes(b: Batch, n_programs: int) -> np.ndarray:
    """Lane of every event of a batch (spans, waits, notifies of non-zero length; 0 for others).

    Lanes are per (launch, program): launches of one group never overlap in time.
    """
    kind = b.cols["kind"]
    span_like = np.flatnonzero(((kind == EventKind.SPAN) | (kind == EventKind.WAIT) | (kind == EventKind.NOTIFY)) & (b.e_ns > b.s_ns))
    lanes = np.zeros(b.size, np.uint8)
    if span_like.size > 1:
        key = b.per_row(np.arange(len(b.launches), dtype=np.int64) * n_programs)[span_like] + b.cols["program"][span_like]
        lanes[span_like] = lanes_of(key, b.s_ns[span_like], b.e_ns[span_like])
    return lanes


def batch_flows(plan: TracePlan, b: Batch) -> dict[str, np.ndarray]:
    """The batch's flows, rows counted from the batch's first: ``out_rows``/``out_ids`` (one
    entry per notify -> wait pair, by row then id), ``in_ids`` (per row: the pair id a wait
    ends, 0 for none) and ``in_notify_ids`` (per row: the releasing notify's id)."""
    lps = [plan.launches[li] for li in b.launches]
    off = b.offsets[:-1].tolist()
    # every launch's parts joined at once (a per-launch loop of array operations costs more
    # than the arrays when launches are small)
    outs = [(rows, idx, base, o) for lp, o in zip(lps, off) for rows, idx, base in lp.flow_out]
    if outs:
        sizes = [r.size for r, _, _, _ in outs]
        out_rows = np.concatenate([r for r, _, _, _ in outs]).astype(np.int64) + np.repeat(np.array([o for *_, o in outs], np.int64), sizes)
        out_ids = np.concatenate([i for _, i, _, _ in outs]).astype(np.int64) + np.repeat(np.array([bs for _, _, bs, _ in outs], np.int64), sizes)
    else:
        out_rows = out_ids = np.zeros(0, np.int64)
    in_ids = np.zeros(b.size, np.int64)
    in_notify = np.zeros(b.size, np.int64)
    ins = [(lp, o) for lp, o in zip(lps, off) if lp.flow_in_rows.size]
    if ins:
        sizes = np.array([lp.flow_in_rows.size for lp, _ in ins], np.int64)
        starts = np.cumsum(sizes) - sizes
        rows = np.concatenate([lp.flow_in_rows for lp, _ in ins]).astype(np.int64) + np.repeat(np.array([o for _, o in ins], np.int64), sizes)
        # ids: each launch's run from its first id on
        in_ids[rows] = np.arange(rows.size, dtype=np.int64) + np.repeat(np.array([lp.flow_in_first_id for lp, _ in ins], np.int64) - starts, sizes)
        in_notify[rows] = np.concatenate([lp.flow_in_notify for lp, _ in ins]).astype(np.int64) + np.repeat(
            np.array([lp.flow_base for lp, _ in ins], np.int64), sizes)
    if out_rows.size:
        if int(out_ids.max()) < 1 << 40 and int(out_rows.max()) < 1 << 22 and int(out_ids.min()) >= 0:
            o = np.argsort((out_rows << 40) | out_ids)  # (one key: faster than lexsort)
        else:
            o = np.lexsort((out_ids, out_rows))
        out_rows, out_ids = out_rows[o], out_ids[o]
    return {"out_rows": out_rows, "out_ids": out_ids, "in_ids": in_ids, "in_notify_ids": in_notify}


def notify_flow_ids(flows: dict, n: int) -> np.ndarray:
    """Per row, the notify's own id (its smallest pair id) where it released a wait; else 0."""
    out = np.zeros(n, np.int64)
    r = flows["out_rows"]
    if r.size:
        first = np.r_[True, r[1:] != r[:-1]]
        out[r[first]] = flows["out_ids"][first]
    return out


#: Columns of waits and notifies that pairing reads (``ktrace.clock.pair_notify_wait``), as
#: the light pass leaves them in shared memory: ``value`` is a notify's value (arg1) or a
#: wait's expected value (arg4); ``order`` is a notify's start in raw ticks (pairing compares
#: times of one launch only) or a wait's slot; ``li`` and ``row`` say where the row came from.
_WN_COLS = (("kind", "u1"), ("flags", "u1"), ("arg0", "<i4"), ("value", "<i4"), ("arg2", "<i8"), ("program", "<i4"),
            ("order", "<i8"), ("li", "<i4"), ("row", "<i4"))
#: What a pairing task leaves in shared memory per pair (see :func:`_pair_rank`).
_PAIR_COLS = ("w_li", "w_row", "first", "n_li", "n_row", "n_pair")


def _survey(task: tuple[int, list[int]]) -> tuple:
    """Light-pass task: per launch of batch ``task`` its programs, events, dropped events, first
    start and last end (common clock); the batch's wait/notify columns for pairing, written
    to the run's shared columns at the batch's place; the region ids of its counters. Beyond
    kinds, flags and times, fields are read only for the rows that need them, straight from
    the records.

    Returns:
        ``(info per launch, wait/notify rows written, completed waits, counter regions)``.
    """
    from . import _parallel

    k_batch, batch = task
    model, shared, at = _parallel.STATE["model"], _parallel.STATE["wn"], _parallel.STATE["wn_at"][k_batch]
    b = read_batch(batch, ("index", "program", "slot"), verify=False, times=False)
    counts = np.diff(b.offsets)
    # first start and last end of each launch with events: raw ticks, then the common clock
    # (monotonic: the least tick is the earliest time)
    full = np.flatnonzero(counts)
    first = np.zeros(counts.size, np.int64)
    last = np.zeros(counts.size, np.int64)
    if full.size:
        clk = model.rank(b.rank)
        hz = np.array([h.tick_hz for h in b.headers], np.int64)[full]
        lo = np.minimum.reduceat(b.cols["start"], b.offsets[full])
        hi = np.maximum.reduceat(b.cols["end"], b.offsets[full])
        for rate in np.unique(hz).tolist():
            sel = hz == rate
            first[full[sel]] = clk.to_common(lo[sel], rate)
            last[full[sel]] = clk.to_common(hi[sel], rate)
    info = list(zip([h.n_programs for h in b.headers], counts.tolist(), [h.dropped for h in b.headers], zip(first.tolist(), last.tolist())))
    kind, flags = b.cols["kind"], b.cols["flags"]
    rec = b.records
    wn = np.flatnonzero((kind == EventKind.WAIT) | (kind == EventKind.NOTIFY))
    n_waits = 0
    if wn.size:
        idx = b.cols["index"][wn]
        wk, wf = kind[wn], flags[wn]
        is_notify = wk == EventKind.NOTIFY
        has = (wf & EventFlag.DETAIL) != 0  # (waits and notifies carry one; a DETAIL-less one reads 0)
        d = rec.view(DETAIL_DTYPE)
        det = np.minimum(idx + 1, rec.shape[0] - 1)
        out = {c: shared[c][at : at + wn.size] for c, _ in _WN_COLS}
        out["kind"][:], out["flags"][:] = wk, wf
        out["arg0"][:] = rec["arg0"][idx]
        out["value"][:] = np.where(is_notify, rec["arg1"][idx], np.where(has, d["x2"][det], 0))
        out["arg2"][:] = np.where(has, d["x0"][det], 0)
        out["program"][:] = b.cols["program"][wn]
        out["order"][:] = np.where(is_notify, b.cols["start"][wn], b.cols["slot"][wn])
        out["li"][:] = b.per_row(np.asarray(batch, np.int32))[wn]
        out["row"][:] = wn - b.per_row(b.offsets[:-1])[wn]
        n_waits = int(wn.size - is_notify.sum())
    cr = b.cols["index"][kind == EventKind.COUNTER]
    counter_regions = np.unique(rec["tag"][cr] >> REGION_SHIFT)
    return info, int(wn.size), n_waits, counter_regions


def _record_slots(ln) -> int:
    """Record slots of a launch's buffer (its layout's; an upper bound on its events)."""
    sizes = ln.split_sizes()
    return sizes[1] if sizes else math.prod(ln.grid) * ln.capacity


def plan_trace(capture, model: ClockModel | None = None, *, workers: int | None = None) -> TracePlan:
    """The light pass over a capture: time base, launch groups, flows, batches.

    Args:
        capture: a ``ktrace.io.Capture``.
        model: the clock model (default: stored in the capture, else fitted from its samples).
        workers: processes to spread launches over (default: one per core for large captures;
            1 runs everything here). The plan is the same for any number.
    """
    from . import _parallel

    model = model or clock_model_of(capture)
    refs = _launch_refs(capture)
    raw_events = sum(ln.nbytes for _, ln in refs) // 32  # an upper bound: records are 32 bytes
    workers = _parallel.resolve_workers(workers, raw_events)
    batches = make_batches(refs, workers)
    # the light pass's wait/notify columns, in shared memory: each batch at its own place,
    # sized by its record slots (an upper bound; pages never written cost nothing)
    slots = [sum(_record_slots(refs[li][1]) for li in bt) for bt in batches]
    wn_at = np.r_[0, np.cumsum(slots)].astype(np.int64)
    shared = {c: _parallel.shared_zeros(int(wn_at[-1]), dt) for c, dt in _WN_COLS}
    # the pairs, made now too (sized by the same bound: a pair is a wait) so that one pool of
    # workers does both passes
    pairs = {c: _parallel.shared_zeros(int(wn_at[-1]), np.int32) for c in _PAIR_COLS}
    state = {"capture": capture, "model": model, "refs": refs, "wn": shared, "wn_at": wn_at, "pairs": pairs,
             "launch_index": np.array([ln.index for _, ln in refs], np.int64)}
    with _parallel.Pool(min(workers, max(1, len(batches))), state) as pool:
        return _plan(capture, model, refs, workers, batches, wn_at, pool)


def _plan(capture, model: ClockModel, refs: list, workers: int, batches: list, wn_at: np.ndarray, pool) -> TracePlan:
    """:func:`plan_trace` with its pool of workers."""
    launches: list[LaunchPlan] = [None] * len(refs)  # type: ignore[list-item]
    counter_regions = [np.zeros(0, np.int64)]
    wn_parts: list[tuple[int, int, int]] = []  # per batch with waits or notifies: rank, place, rows
    waits = dict.fromkeys(capture.ranks, 0)
    tasks = list(enumerate(batches))
    for (k, batch), (info, n_wn, n_waits, cregions) in zip(tasks, pool.imap(_survey, tasks)):
        counter_regions.append(cregions.astype(np.int64))
        for li, (n_programs, n, dropped, (t0, t1)) in zip(batch, info):
            r, ln = refs[li]
            launches[li] = LaunchPlan(rank=r, index=ln.index, kernel=ln.kernel, grid=tuple(ln.grid), n_programs=n_programs, group=0,
                                      n_events=n, dropped=dropped, start_ns=t0, end_ns=t1)
        rank = refs[batch[0]][0]
        if n_wn:
            wn_parts.append((rank, int(wn_at[k]), n_wn))
        waits[rank] += n_waits
    n_events = sum(lp.n_events for lp in launches)
    starts = [lp.start_ns for lp in launches if lp.n_events]
    base = min(starts) if starts else 0
    # launch groups: launches of one rank that overlap in time get separate track groups
    n_groups = {}
    for r in capture.ranks:
        mine = sorted((lp for lp in launches if lp.rank == r and lp.n_events), key=lambda lp: lp.start_ns)
        group_end: list[int] = []
        for lp in mine:
            for g, ge in enumerate(group_end):
                if ge <= lp.start_ns:
                    lp.group, group_end[g] = g, lp.end_ns
                    break
            else:
                lp.group = len(group_end)
                group_end.append(lp.end_ns)
        n_groups[r] = max(1, len(group_end))
    counter_regions = np.unique(np.concatenate(counter_regions))
    ranks = {r: RankPlan(rank=r, name=rank_title(r, rc.device), n_groups=n_groups[r], counter_regions=counter_regions,
                         max_programs=max([lp.n_programs for lp in launches if lp.rank == r], default=1))
             for r, rc in sorted(capture.ranks.items())}
    n_flows = _plan_flows(launches, wn_parts, waits, pool)
    return TracePlan(
        model=model, launches=launches, ranks=ranks, base_ns=base, n_events=n_events, n_flows=n_flows,
        partial=bool(capture.partial or capture.missing_ranks), missing_ranks=list(capture.missing_ranks),
        regions=dict(capture.regions), workers=workers, batches=batches,
    )


def _pair_rank(task: tuple[int, list, int]) -> int:
    """Pairing task ``(dst, parts, at)``: the notify -> wait pairs whose wait is on rank
    ``dst``, ready to number; ``parts`` the light pass's wait/notify rows per batch (rank, place,
    rows) and ``at`` the rank's place in the pair columns.

    A wait on rank B can only be released by a notify addressed to B (``pair_notify_wait``
    groups by source rank, destination rank, flag and value), so the ranks pair independently
    and in parallel; and every pair of one notify is in one rank's task. Reads the light pass's
    wait/notify columns from shared memory and writes its pairs (int32) to the rank's place in
    the run's shared pair columns: ``w_li, w_row`` the pairs ordered by wait (launch, row) (pair
    ``k`` of this rank is the ``k``-th); ``first`` per pair the index of its notify's first
    pair; ``n_li, n_row, n_pair`` the same pairs ordered by notify launch (stable): their
    notify's (launch, row) and their own index.

    Returns:
        The number of pairs.
    """
    from . import _parallel

    st = _parallel.STATE
    dst, parts, pair_at = task
    shared, launch_index = st["wn"], st["launch_index"]
    picks = []
    for rank, at, n in parts:  # this rank's waits and the notifies addressed to it, in launch order
        kind, peer = shared["kind"][at : at + n], shared["arg0"][at : at + n]
        picks.append(at + np.flatnonzero(np.where(kind == EventKind.NOTIFY, peer, rank) == dst))
    rows = np.concatenate(picks) if picks else np.zeros(0, np.int64)
    if not rows.size:
        return 0
    wn = {c: shared[c][rows] for c, _ in _WN_COLS}
    wn["rank"] = np.repeat(np.asarray([r for r, _, _ in parts], np.int32), [p.size for p in picks])
    wn["launch"] = launch_index[wn["li"]]
    wn["arg1"] = wn["arg4"] = wn["value"]  # (what pairing reads of notifies and of waits)
    wn["start"] = wn["slot"] = wn["order"]
    nrows, wrows, _, _ = pair_notify_wait(wn)
    li, row = wn["li"], wn["row"]
    w_li, w_row = li[wrows], row[wrows]
    o = np.argsort((w_li.astype(np.int64) << 32) | w_row)  # pairs numbered by wait (launch, row): one key, each wait once
    nrows, w_li, w_row = nrows[o], w_li[o], w_row[o]
    n_li, n_row = li[nrows], row[nrows]
    # each notify's first pair (its id in Chrome JSON): the least pair index among its own
    first_of = np.full(rows.size, nrows.size, np.int64)
    np.minimum.at(first_of, nrows, np.arange(nrows.size, dtype=np.int64))
    first = first_of[nrows]
    on = np.argsort(n_li, kind="stable")
    at, n = pair_at, w_li.size
    for c, v in zip(_PAIR_COLS, (w_li, w_row, first, n_li[on], n_row[on], on)):
        st["pairs"][c][at : at + n] = v
    return int(n)


def _plan_flows(launches: list[LaunchPlan], wn_parts: list, waits: dict, pool) -> int:
    """Pair notifies with waits (all launches at once; ranks in parallel, in ``pool``) and hand
    each launch its flows: pairs are numbered from 1 by wait (launch, row), which is rank by rank
    since launches are in rank order. ``wn_parts``: per batch with waits or notifies, its rank,
    place in the shared columns and rows; ``waits``: waits per rank (a bound on its pairs)."""
    from . import _parallel

    if not wn_parts:
        return 0
    ranks = sorted(waits)
    pair_at = dict(zip(ranks, np.r_[0, np.cumsum([waits[r] for r in ranks])].tolist()))
    pairs = _parallel.STATE["pairs"]
    n_flows = 0
    edges = np.arange(len(launches) + 1)
    for dst, n in zip(ranks, pool.imap(_pair_rank, [(r, wn_parts, pair_at[r]) for r in ranks])):
        base = n_flows + 1
        n_flows += n
        if not n:
            continue
        v = {c: a[pair_at[dst] : pair_at[dst] + n] for c, a in pairs.items()}
        bounds = np.searchsorted(v["w_li"], edges)
        for k in np.flatnonzero(bounds[1:] > bounds[:-1]).tolist():  # (a launch's waits are all on its rank)
            lp, a, b = launches[k], bounds[k], bounds[k + 1]
            lp.flow_in_rows, lp.flow_in_first_id, lp.flow_in_notify, lp.flow_base = v["w_row"][a:b], base + a, v["first"][a:b], base
        bounds = np.searchsorted(v["n_li"], edges)
        for k in np.flatnonzero(bounds[1:] > bounds[:-1]).tolist():  # (a launch's notifies may release waits on several ranks)
            a, b = bounds[k], bounds[k + 1]
            launches[k].flow_out.append((v["n_row"][a:b], v["n_pair"][a:b], base))
    return n_flows


def timeout_mask(flags: np.ndarray) -> np.ndarray:
    return (flags & EventFlag.TIMEOUT) != 0
