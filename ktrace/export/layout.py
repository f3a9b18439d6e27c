"""The trace layout both writers share: tracks, lanes, names, flows. Pure, vectorised functions.

Layout: one process per rank; under it a ``kernels`` track (one slice per launch) and one
track per workgroup (program), in program order. Spans of one program that overlap without
nesting cannot share a track (a timeline draws nested slices only), so they go to extra lanes
``p<program> lane<k>`` right below it; nothing is dropped. Launches of one rank that overlap in
time (several streams) get separate groups of program tracks. Counters are counter tracks per
(program, counter name). Each notify gets a flow arrow to every wait it released
(``ktrace.pairing``; the pairs are found by :mod:`ktrace.export.plan`).

Track ids and counter track ids are functions of (launch group, program, lane / counter), so
no pass needs to know which tracks another pass or worker has seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..events import Batch
from ..links import RANK_PROCESS_PREFIX
from ..schema import EventKind
from ..text import printable

#: Event classes the writers emit (each with its own name, category and arguments).
SPAN, WAIT, NOTIFY, INSTANT, COUNTER = "span", "wait", "notify", "instant", "counter"
#: The name of the zero-length mark where a wait's arrow ends (the waiter acquired the signal).
ACQUIRED = "acquired"
#: The event kind of each class.
CLASS_KIND = {SPAN: EventKind.SPAN, WAIT: EventKind.WAIT, NOTIFY: EventKind.NOTIFY, INSTANT: EventKind.INSTANT,
              COUNTER: EventKind.COUNTER}


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
class RankPlan:
    """How one rank is laid out: its process, and a thread per (launch group, program, lane).

    Local track ids (:meth:`tids`; 1 is ``kernels``) number a rank's tracks in order; the thread
    ids written to the trace (:meth:`thread_id`) are unique in the whole trace, so that Perfetto
    keeps every workgroup its own thread of its rank's process, and ascend in program order
    within a rank, which is the order the Perfetto UI lists a process's threads in (after the
    main thread: ``kernels``, whose tid is the pid).
    """

    rank: int
    name: str
    #: programs per launch group, the radix of track ids
    max_programs: int = 1
    #: launch groups the rank's launches use
    n_groups: int = 1

    #: region ids of the capture's counters (sorted; the same for every rank)
    counter_regions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: thread ids of rank r are ``(r + 1) * tid_stride + local id`` (the same stride for every rank)
    tid_stride: int = 10_000
    #: what the ``hw`` column says, as named arguments: ``(name, shift, mask)`` each
    hw_fields: tuple = (("sm", 0, 0xFFFFFFFF),)
    #: lanes per program of the rank's launches traced per lane (``ktrace.gluon``; 1: none): a
    #: track is then a (program, lane), numbered ``program * lane_radix + lane`` (``max_programs``
    #: counts those), and named after its lane (:attr:`lane_names`)
    lane_radix: int = 1
    #: the lanes' names (the partition functions), in lane order
    lane_names: tuple = ()

    def __post_init__(self):
        slots = self.n_groups * self.max_programs
        if (slots << 8) + 2 >= 2**31 or slots * max(1, self.counter_regions.size) >= 2**31:
            raise ValueError(f"rank {self.rank}: too many programs ({self.max_programs}) x launch groups ({self.n_groups}) "
                             f"x counters ({self.counter_regions.size}) to number tracks")
        if (self.rank + 2) * self.tid_stride >= 2**31:
            raise ValueError(f"rank {self.rank}: too many ranks x tracks to give each track a thread id below 2**31")

    def track_program(self, program: np.ndarray, lane) -> np.ndarray:
        """The track key of each event's (program, lane): the program itself without lanes."""
        if self.lane_radix == 1:
            return program
        return program.astype(np.int64) * self.lane_radix + lane

    def track_title(self, group: int, key: int, lane: int) -> str:
        """The name of the track of track key ``key`` (see :meth:`track_program`), overlap lane ``lane``."""
        if self.lane_radix == 1:
            return track_name(self.rank, group, key, lane)
        p, k = divmod(key, self.lane_radix)
        part = self.lane_names[k] if k < len(self.lane_names) else f"lane {k}"
        return track_name(self.rank, group, p, lane, part)

    @property
    def pid(self) -> int:
        """The rank's process id in the trace (rank + 1: Perfetto reserves 0)."""
        return self.rank + 1

    def tids(self, group, program: np.ndarray, lanes) -> np.ndarray:
        """Local track id of each (group, program, lane): ordered by group, program, lane; 1 is
        ``kernels``. Below 2**31 (Perfetto track uuids use them). ``group`` and ``lanes`` may
        be scalars or per-row arrays."""
        slot = np.asarray(group, np.int64) * self.max_programs + program.astype(np.int64)
        return (slot << 8) + 2 + lanes

    def thread_id(self, local):
        """The trace's thread id of a local track id (``kernels``, 1, is the main thread: tid = pid)."""
        local = np.asarray(local, np.int64)
        return np.where(local == 1, self.pid, self.pid * self.tid_stride + local)

    def track(self, tid: int) -> tuple[int, int, int]:
        """``(group, program, lane)`` of a local track id."""
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

    def hw_values(self, hw: np.ndarray) -> list[tuple[str, np.ndarray]]:
        """The ``hw`` column as named arguments (``sm`` on NVIDIA; ``xcc``, ``se``, ``cu`` on AMD)."""
        hw = np.asarray(hw).astype(np.int64)
        return [(name, (hw >> shift) & mask) if shift or mask != 0xFFFFFFFF else (name, hw) for name, shift, mask in self.hw_fields]


def tid_stride(max_local: int) -> int:
    """The power of ten above every local track id (at least 10,000): thread ids then read as
    ``<pid><local id>`` in decimal."""
    stride = 10_000
    while stride <= max_local:
        stride *= 10
    return stride


#: ``hw`` as the probes record it, by vendor (``schema.RECORD_DTYPE``): the SM on NVIDIA;
#: ``(xcc << 16) | (se << 5) | (sh << 4) | cu`` on AMD.
HW_FIELDS = {"nvidia": (("sm", 0, 0xFFFFFFFF),), "amd": (("xcc", 16, 0xFFFF), ("se", 5, 0x7FF), ("cu", 0, 0xF))}


def hw_fields(devices) -> tuple:
    """How the ranks' ``hw`` column is written: by their vendor (the raw ``hw`` when vendors mix)."""
    vendors = {str((d or {}).get("vendor") or "nvidia") for d in devices}
    if len(vendors) == 1 and next(iter(vendors)) in HW_FIELDS:
        return HW_FIELDS[next(iter(vendors))]
    return (("hw", 0, 0xFFFFFFFF),)


def track_name(rank: int, group: int, program: int, lane: int, partition: str | None = None) -> str:
    """A workgroup's track: ``r<rank> p<program>`` (the rank in it too: a pinned track says
    where it is), the partition of a program traced per lane (``ktrace.gluon``: its function's
    name), ``lane<k>`` for spans that overlap without nesting, the stream group."""
    return (f"r{rank} p{program}" + (f" {partition}" if partition else "") + (f" lane{lane}" if lane else "")
            + (f" [stream group {group}]" if group else ""))


#: Names of waits, timeouts and notifies. The Perfetto UI colours a slice by a hash of its name
#: without its digits: these read plainly and land on clearly different colours there (waiting
#: red-orange, timed out dark magenta, releasing dark green).
WAIT_NAME = "waiting for rank {peer}"
TIMEOUT_NAME = "timed out waiting for rank {peer}"
#: A wait still spinning when a live dump (``ktrace.flight``) was taken: it ends at the dump.
OPEN_NAME = "still waiting for rank {peer} at the dump"
NOTIFY_NAME = "releasing rank {peer}"


#: Names of mbarrier waits and releases (``ktrace.gluon``: the LOCAL flag), by barrier name.
BARRIER_WAIT_NAME = "waiting for barrier {barrier}"
BARRIER_RELEASE_NAME = "releasing barrier {barrier}"


def wait_name(peer: int, timed_out: int) -> str:
    """A wait's slice name; ``timed_out``: 0 or False (it saw its flag), 1 or True (it gave up),
    2 (open at a live dump, ``schema.wait_state``)."""
    return (OPEN_NAME if timed_out == 2 else TIMEOUT_NAME if timed_out else WAIT_NAME).format(peer=peer)


def notify_name(peer: int) -> str:
    return NOTIFY_NAME.format(peer=peer)


def handoff_name_keys(kind: int, arg0: np.ndarray, flags: np.ndarray, region: np.ndarray) -> np.ndarray:
    """A key per wait (``kind`` WAIT) or notify naming it (see :func:`handoff_name`): the peer
    and, for a wait, whether it saw its flag, timed out or was open at a live dump
    (``schema.wait_state``); for an mbarrier hand-off (LOCAL) its barrier's region."""
    from ..schema import is_local, wait_state

    peer = arg0.astype(np.int64)
    key = (peer << 2) | (wait_state(flags) if kind == EventKind.WAIT else 0)
    return np.where(is_local(flags), (region.astype(np.int64) << 1) | 1, key << 1)


def handoff_name(kind: int, key: int, region_name) -> str:
    """The name of a wait or notify from its :func:`handoff_name_keys` key."""
    if key & 1:
        barrier = region_name(key >> 1)
        return (BARRIER_WAIT_NAME if kind == EventKind.WAIT else BARRIER_RELEASE_NAME).format(barrier=barrier)
    k = key >> 1
    return wait_name(k >> 2, k & 3) if kind == EventKind.WAIT else notify_name(k >> 2)


def rank_title(rank: int, device: dict) -> str:
    dev = printable(device.get("name") or "unknown GPU")  # (names from a file: control characters escaped)
    where = f" (gpu {printable(device['index'])})" if "index" in device else ""
    return RANK_PROCESS_PREFIX.format(rank=rank) + f"{dev}{where}"  # (what a link's rank order finds: ktrace.links)


def batch_lanes(b: Batch, n_programs: int, program: np.ndarray | None = None) -> np.ndarray:
    """Lane of every event of a batch (spans, waits, notifies of non-zero length; 0 for others).

    Lanes are per (launch, program): launches of one group never overlap in time. ``program``:
    the track key of each row when it is not the program (``RankPlan.track_program``; below
    ``n_programs``).
    """
    kind, s_ns, e_ns = b.cols["kind"], b.cols["start_ns"], b.cols["end_ns"]
    program = b.cols["program"] if program is None else program
    span_like = np.flatnonzero(((kind == EventKind.SPAN) | (kind == EventKind.WAIT) | (kind == EventKind.NOTIFY)) & (e_ns > s_ns))
    lanes = np.zeros(b.size, np.uint8)
    if span_like.size > 1:
        key = b.per_row(np.arange(len(b.launches), dtype=np.int64) * n_programs)[span_like] + program[span_like]
        lanes[span_like] = lanes_of(key, s_ns[span_like], e_ns[span_like])
    return lanes


def batch_flows(flows, b: Batch) -> dict[str, np.ndarray]:
    """The flows of a batch of the plan's event store (its rows ``[b.first_row, b.first_row +
    b.size)``), rows counted from the batch's first.

    Returns:
        ``out_rows``/``out_ids``: one entry per notify -> wait pair whose notify is here, by row
        then id; ``in_ids``: per row, the pair id a wait ends (0 for none); ``in_notify_ids``: per
        row, the releasing notify's own id; ``marker``: per row, whether the wait's arrow ends on
        an ``acquired`` mark (else on the wait itself; see :class:`ktrace.export.plan.Flows`);
        ``mark_ns``: per row, the mark's time (the wait's end, or its notify's start where the
        alignment put that later); ``shift_ns``: per row, how far the mark was moved.
    """
    n, at = b.size, b.first_row
    lo, hi = np.searchsorted(flows.wait_row, [at, at + n])
    in_ids = np.zeros(n, np.int64)
    in_notify = np.zeros(n, np.int64)
    marker = np.zeros(n, bool)
    shift = np.zeros(n, np.int64)
    rows = flows.wait_row[lo:hi] - at
    in_ids[rows] = np.arange(lo + 1, hi + 1, dtype=np.int64)  # pair ids: 1, 2, ... in wait order
    in_notify[rows] = flows.first_id[lo:hi]
    marker[rows] = flows.marker[lo:hi]
    shift[rows] = flows.shift_ns[lo:hi]
    mark_ns = b.cols["end_ns"] + shift
    lo, hi = np.searchsorted(flows.notify_row_sorted, [at, at + n])
    out_rows = flows.notify_row_sorted[lo:hi] - at
    out_ids = flows.notify_pair_id[lo:hi]
    return {"out_rows": out_rows, "out_ids": out_ids, "in_ids": in_ids, "in_notify_ids": in_notify, "marker": marker,
            "mark_ns": mark_ns, "shift_ns": shift}


def notify_flow_ids(flows: dict, n: int) -> np.ndarray:
    """Per row, the notify's own id (its smallest pair id) where it released a wait; else 0."""
    out = np.zeros(n, np.int64)
    r = flows["out_rows"]
    if r.size:
        first = np.r_[True, r[1:] != r[:-1]]
        out[r[first]] = flows["out_ids"][first]
    return out
