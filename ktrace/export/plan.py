"""Planning a trace: one decode of every buffer, the time base, launch groups, and the flows.

How a capture is written (:mod:`ktrace.export.pool` spreads both passes over forked worker
processes; a task is a *batch*: launches of one rank and one buffer layout, their records read
straight from the file and decoded as one by ``ktrace.events.read_batch``):

1. :func:`plan_trace`: each task decodes its batch — once, for the whole export — and leaves
   the columns the writers use in an :class:`EventStore` (anonymous shared memory made before
   the workers fork, each batch at its own place), with the rows of its waits and notifies;
   it returns per launch its events, dropped events, first start and last end (the time base
   and the launch groups come from these) and the region ids of its counters. Then one
   pairing task per destination rank pairs the notifies addressed to it with its waits
   (``ktrace.pairing``, the rule the analyses use too) and leaves the pairs in shared memory;
   the calling process numbers them into :class:`Flows`.
2. The writer's pass (:mod:`ktrace.export.writer`): each task takes its batch's columns from
   the store (no second read or decode), lays them out (lanes, track ids, flows) and writes
   every event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import pairing
from ..clock.model import ClockModel, clock_model_of
from ..events import Batch, launch_refs, make_batches, read_batch, record_slots
from ..schema import EventKind, is_local
from ..text import printable
from . import pool as _pool
from .layout import RankPlan, hw_fields, rank_title, tid_stride

#: The columns the writers use, as the store keeps them (the narrowest type that holds each:
#: a counter's 64-bit value lives in ``arg0``).
STORE_COLUMNS = (("program", "<i4"), ("lane", "u1"), ("kind", "u1"), ("flags", "u1"), ("region", "<u4"), ("hw", "<u4"), ("arg0", "<i8"),
                 ("arg1", "<i4"), ("arg2", "<i8"), ("arg3", "<i8"), ("arg4", "<i4"), ("arg5", "<i4"), ("start_ns", "<i8"),
                 ("end_ns", "<i8"))
_DECODE = tuple(c for c, _ in STORE_COLUMNS)


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


class EventStore:
    """Every batch's decoded columns in shared memory, each batch at its own place (sized by its
    record slots, an upper bound on its events: pages never written cost nothing)."""

    def __init__(self, refs: list, batches: list[list[int]]):
        slots = [sum(record_slots(refs[li][1]) for li in bt) for bt in batches]
        self.at = np.r_[0, np.cumsum(slots)].astype(np.int64)
        n = int(self.at[-1])
        self.cols = {c: _pool.shared_zeros(n, dt) for c, dt in STORE_COLUMNS}
        #: per batch with waits or notifies, their store rows (ascending) and launch (refs index)
        self.wn_row = _pool.shared_zeros(n, np.int64)
        self.wn_li = _pool.shared_zeros(n, np.int32)
        #: per batch: events, waits + notifies; launch offsets (refs of the batch) are in ``offsets``
        self.counts = _pool.shared_zeros(len(batches), np.int64)
        self.n_wn = _pool.shared_zeros(len(batches), np.int64)
        self.offsets: list[np.ndarray] = [np.zeros(1, np.int64)] * len(batches)
        self.batches = batches

    def put(self, k: int, b: Batch) -> None:
        """Store batch ``k``'s columns (in a worker)."""
        a = int(self.at[k])
        n = b.size
        for c, _ in STORE_COLUMNS:
            self.cols[c][a : a + n] = b.cols[c]
        self.counts[k] = n
        kind = b.cols["kind"]
        wn = np.flatnonzero((kind == EventKind.WAIT) | (kind == EventKind.NOTIFY))
        self.wn_row[a : a + wn.size] = a + wn
        self.wn_li[a : a + wn.size] = b.per_row(np.asarray(b.launches, np.int32))[wn]
        self.n_wn[k] = wn.size

    def batch(self, k: int, rank: int) -> Batch:
        """Batch ``k`` as it was stored: views of the store (no copy)."""
        a = int(self.at[k])
        n = int(self.counts[k])
        return Batch(rank=rank, launches=list(self.batches[k]), offsets=self.offsets[k],
                     cols={c: v[a : a + n] for c, v in self.cols.items()}, first_row=a)


@dataclass
class Flows:
    """Every notify -> wait pair of a trace, as store rows, and where each arrow ends.

    Pairs are numbered 1, 2, ... in the order of their waits' rows: ``wait_row[i]`` is pair
    ``i + 1``'s wait (ascending), ``notify_row[i]`` its notify, ``first_id[i]`` the id of its
    notify's first pair (a notify's own id: what Chrome JSON binds with, since one notify may
    start several flows). ``notify_row_sorted`` / ``notify_pair_id``: the same pairs by notify
    row, then id.

    An arrow ends where the waiter acquired the signal: the end of its wait. A flow whose end
    lies before its start is dropped by Perfetto, so an arrow never ends on a wait slice that
    began before the notify: it ends on a zero-length ``acquired`` mark at the wait's end
    (``marker[i]``), except for a wait of zero length that ended after the notify began, which
    is that moment itself. Where the alignment puts a wait's end before its notify's start
    (within the clocks' error bound), the mark sits at the notify's start and ``shift_ns[i]``
    says by how much it was moved.
    """

    wait_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    notify_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    first_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    notify_row_sorted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    notify_pair_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    marker: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    shift_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def n(self) -> int:
        return int(self.wait_row.size)

    @property
    def n_markers(self) -> int:
        return int(self.marker.sum())


@dataclass
class TracePlan:
    """The light pass's result: launches, groups, flows, time base, the decoded events, and how
    the work is batched."""

    model: ClockModel
    launches: list[LaunchPlan]
    ranks: dict[int, RankPlan]
    base_ns: int
    n_events: int
    partial: bool
    missing_ranks: list[int]
    regions: dict[int, str]
    flows: Flows
    store: EventStore
    world_size: int = 0
    #: worker processes the writers use (1: all in this process)
    workers: int = 1
    #: launch indices (plan order) decoded together by one task
    batches: list[list[int]] = field(default_factory=list)

    @property
    def n_flows(self) -> int:
        return self.flows.n

    def region_name(self, rid: int) -> str:
        return self.regions.get(int(rid), f"region#{int(rid):06x}")

    def batch(self, k: int) -> Batch:
        """Batch ``k``'s events from the store."""
        return self.store.batch(k, self.launches[self.batches[k][0]].rank)


def _survey(state: dict, task: tuple[int, list[int]]) -> tuple:
    """Light-pass task: decode batch ``task`` once, store its columns, and return per launch its
    programs, events, dropped events, first start and last end (common clock), and the region
    ids of its counters."""
    k, batch = task
    store: EventStore = state["store"]
    b = read_batch(state["refs"], batch, state["model"], _DECODE)
    store.put(k, b)
    counts = np.diff(b.offsets)
    full = np.flatnonzero(counts)
    first = np.zeros(counts.size, np.int64)
    last = np.zeros(counts.size, np.int64)
    if full.size:
        first[full] = np.minimum.reduceat(b.cols["start_ns"], b.offsets[full])
        last[full] = np.maximum.reduceat(b.cols["end_ns"], b.offsets[full])
    info = list(zip([h.n_programs for h in b.headers], counts.tolist(), [h.dropped for h in b.headers],
                    first.tolist(), last.tolist()))
    counter_regions = np.unique(b.cols["region"][b.cols["kind"] == EventKind.COUNTER]).astype(np.int64)
    return info, counter_regions


def plan_trace(capture, model: ClockModel | None = None, *, workers: int | None = None, base_ns: int | None = None) -> TracePlan:
    """The light pass over a capture: decoded events, time base, launch groups, flows, batches.

    Args:
        capture: a ``ktrace.captures.Capture``.
        model: the clock model (default: stored in the capture, else fitted from its samples).
        workers: processes to spread launches over (default: one per core for large captures;
            1 runs everything here). The plan is the same for any number.
        base_ns: the trace's time 0 on the common clock (default: the capture's first event).
            The parts of a split trace share the whole capture's (``ktrace.export.split``).

    Raises:
        CaptureError: a buffer is damaged (the message names the rank and the launch).
    """
    model = model or clock_model_of(capture)
    refs = launch_refs(capture)
    raw_events = sum(ln.nbytes for _, ln in refs) // 32  # an upper bound: records are 32 bytes
    workers = _pool.resolve_workers(workers, raw_events)
    batches = make_batches(refs, workers)
    store = EventStore(refs, batches)
    # the pairs, made now too (a pair is a wait: sized by the same bound) so that one pool of
    # workers does both steps
    pairs = {c: _pool.shared_zeros(int(store.at[-1]), np.int64) for c in ("wait_row", "notify_row")}
    state = {"refs": refs, "model": model, "store": store, "pairs": pairs, "launch_index": np.array([ln.index for _, ln in refs], np.int64)}
    with _pool.Pool(min(workers, max(1, len(batches))), state) as pool:
        return _plan(capture, model, refs, workers, batches, store, pool, base_ns)


def _plan(capture, model: ClockModel, refs: list, workers: int, batches: list, store: EventStore, pool, base_ns: int | None) -> TracePlan:
    """:func:`plan_trace` with its pool of workers."""
    launches: list[LaunchPlan] = [None] * len(refs)  # type: ignore[list-item]
    counter_regions = [np.zeros(0, np.int64)]
    tasks = list(enumerate(batches))
    for (k, batch), (info, cregions) in zip(tasks, pool.imap(_survey, tasks)):
        counter_regions.append(cregions)
        for li, (n_programs, n, dropped, t0, t1) in zip(batch, info):
            r, ln = refs[li]
            launches[li] = LaunchPlan(rank=r, index=ln.index, kernel=printable(ln.kernel), grid=tuple(ln.grid), n_programs=n_programs, group=0,
                                      n_events=n, dropped=dropped, start_ns=t0, end_ns=t1)
        store.offsets[k] = np.r_[0, np.cumsum([launches[li].n_events for li in batch])].astype(np.int64)
    n_events = sum(lp.n_events for lp in launches)
    starts = [lp.start_ns for lp in launches if lp.n_events]
    base = int(base_ns) if base_ns is not None else (min(starts) if starts else 0)
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
    # lanes (``ktrace.gluon``): a rank's tracks are (program, lane), ``lane_radix`` lanes per program
    lane_names = {r: [tuple(printable(x) for x in (ln.meta or {}).get("lanes") or ()) for ln in rc.launches]
                  for r, rc in capture.ranks.items()}
    radix = {r: max([len(x) for x in names] + [1]) for r, names in lane_names.items()}
    n_lanes = [max(1, len((ln.meta or {}).get("lanes") or ())) for _, ln in refs]
    max_programs = {r: max([lp.n_programs // nl for lp, nl in zip(launches, n_lanes) if lp.rank == r], default=1) * radix[r]
                    for r in capture.ranks}
    stride = tid_stride(max(((n_groups[r] * max_programs[r]) << 8) + 2 + 255 for r in capture.ranks) if capture.ranks else 0)
    hw = hw_fields(rc.device for rc in capture.ranks.values())
    ranks = {r: RankPlan(rank=r, name=rank_title(r, rc.device), n_groups=n_groups[r], counter_regions=counter_regions,
                         max_programs=max_programs[r], tid_stride=stride, hw_fields=hw, lane_radix=radix[r],
                         lane_names=next((x for x in lane_names[r] if len(x) == radix[r]), ()))
             for r, rc in sorted(capture.ranks.items())}
    flows = _plan_flows(capture, refs, batches, store, pool)
    return TracePlan(
        model=model, launches=launches, ranks=ranks, base_ns=base, n_events=n_events, flows=flows, store=store,
        # (a selection of ranks, ktrace.export.split, is not partial for the ranks it leaves out)
        partial=bool(capture.partial or (capture.missing_ranks and "selection" not in capture.meta)),
        missing_ranks=[] if "selection" in capture.meta else list(capture.missing_ranks),
        regions={k: printable(v) for k, v in capture.regions.items()}, world_size=int(capture.world_size), workers=workers, batches=batches,
    )


def _pair_rank(state: dict, task: tuple[int, list, int]) -> int:
    """Pairing task ``(dst, parts, at)``: the notify -> wait pairs whose wait is on rank ``dst``.

    A wait on rank B can only be released by a notify addressed to B (pairing groups by
    producer, consumer and flag), so the ranks pair independently and in parallel, and every
    pair of one notify is in one rank's task. ``parts``: per batch with waits or notifies, its
    rank, index and rows; ``at``: the rank's place in the shared pair columns, where its pairs are
    left ordered by wait row.

    Returns:
        The number of pairs.
    """
    dst, parts, pair_at = task
    store: EventStore = state["store"]
    cols = store.cols
    picks, ranks = [], []
    for rank, k, n in parts:  # this rank's waits and the notifies addressed to it, in store order
        a = int(store.at[k])
        rows = store.wn_row[a : a + n]
        peer = cols["arg0"][rows]
        # (an mbarrier release, LOCAL, releases waits of its own rank)
        remote_notify = (cols["kind"][rows] == EventKind.NOTIFY) & ~is_local(cols["flags"][rows])
        sel = np.flatnonzero(np.where(remote_notify, peer, rank) == dst)
        picks.append(np.stack([rows[sel], store.wn_li[a : a + n][sel]]))
        ranks.append(np.full(sel.size, rank, np.int32))
    got = np.concatenate(picks, axis=1) if picks else np.zeros((2, 0), np.int64)
    rows, li = got[0], got[1]
    if not rows.size:
        return 0
    rank = np.concatenate(ranks)
    kind = cols["kind"][rows]
    N, W = EventKind.NOTIFY, EventKind.WAIT
    ni, wi = np.flatnonzero(kind == N), np.flatnonzero(kind == W)
    launch = state["launch_index"][li]
    own = {"rank": rank, "launch": launch}  # (the batch's, not columns of the store)

    def col(sel):
        return lambda name: own[name][sel] if name in own else cols[name][rows[sel]]

    # store rows are in (launch, program, slot) order within a batch: a wait's row is its record order
    p = pairing.pair(*pairing.inputs(col(ni), col(wi), order=rows[wi]))
    w_row, n_row = rows[wi][p.wait], rows[ni][p.notify]
    o = np.argsort(w_row, kind="stable")  # (waits of several batches: store order is wait-row order)
    n = w_row.size
    state["pairs"]["wait_row"][pair_at : pair_at + n] = w_row[o]
    state["pairs"]["notify_row"][pair_at : pair_at + n] = n_row[o]
    return int(n)


def _plan_flows(capture, refs: list, batches: list, store: EventStore, pool) -> Flows:
    """Pair notifies with waits (ranks in parallel, in ``pool``) and number the pairs."""
    parts = [(refs[bt[0]][0], k, int(store.n_wn[k])) for k, bt in enumerate(batches) if store.n_wn[k]]
    if not parts:
        return Flows()
    ranks = sorted(capture.ranks)
    # a rank's pairs are at most its waits; its place in the pair columns is after the lower ranks'
    n_waits = dict.fromkeys(ranks, 0)
    for rank, k, n in parts:
        a = int(store.at[k])
        n_waits[rank] += int((store.cols["kind"][store.wn_row[a : a + n]] == EventKind.WAIT).sum())
    pair_at = dict(zip(ranks, np.r_[0, np.cumsum([n_waits[r] for r in ranks])].tolist()))
    got = []
    pairs = pool.state["pairs"]
    for dst, n in zip(ranks, pool.imap(_pair_rank, [(r, parts, pair_at[r]) for r in ranks])):
        if n:
            got.append((pairs["wait_row"][pair_at[dst] : pair_at[dst] + n], pairs["notify_row"][pair_at[dst] : pair_at[dst] + n]))
    if not got:
        return Flows()
    w_row = np.concatenate([g[0] for g in got])
    n_row = np.concatenate([g[1] for g in got])
    o = np.argsort(w_row, kind="stable")  # (ranks' batches are in rank order: already sorted)
    w_row, n_row = w_row[o], n_row[o]
    ids = np.arange(1, w_row.size + 1, dtype=np.int64)
    on = np.lexsort((ids, n_row))
    ns, ids_n = n_row[on], ids[on]
    # each notify's own id: the least id among its pairs (the first of its run in notify order)
    first = np.r_[True, ns[1:] != ns[:-1]]
    first_of_run = ids_n[np.flatnonzero(first)][np.cumsum(first) - 1]
    first_id = np.empty(w_row.size, np.int64)
    first_id[on] = first_of_run
    cols = store.cols
    w_start, w_end, n_start = cols["start_ns"][w_row], cols["end_ns"][w_row], cols["start_ns"][n_row]
    shift = np.maximum(n_start - w_end, 0)
    marker = (w_end > w_start) | (shift > 0)
    return Flows(wait_row=w_row, notify_row=n_row, first_id=first_id, notify_row_sorted=ns, notify_pair_id=ids_n, marker=marker,
                 shift_ns=shift)
