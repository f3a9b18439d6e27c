"""The one event model: a capture's events as plain columns on the common clock.

Every way out of a capture — a Perfetto or Chrome trace (``ktrace.export``), a report
(``ktrace.analysis``), the aligned table (:func:`aligned_events`) — decodes its launches'
buffers here, with :func:`read_batch`, and nowhere else. A :class:`Batch` is some launches of
one rank decoded together: one array per column, named as ``ktrace.schema`` names the fields
of an event (``program``, ``slot``, ``kind``, ``flags``, ``region``, ``hw``, ``start``, ``end``
in raw timer ticks, ``arg0`` .. ``arg5``), plus ``start_ns``/``end_ns``, the event's times on
the common clock (``ktrace.clock``). Rows come launch by launch, each in program order (by
program, then slot), exactly as ``ktrace.decode`` gives them.

Launches are batched (:func:`make_batches`) by rank and buffer layout, so that the buffers of
many small launches are read with one read call and decoded as one array: a batch of small
launches costs about what one large launch does.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import schema
from .captures.file import CaptureError, Launch, read_adjacent, read_buffers
from .clock.model import ClockModel, clock_model_of
from .decode import (BufferDecodeError, DecodeError, decode_columns, gather_records, impossible_times, launch_verdict,
                     program_columns, scan, times_ok)
from .decode import stack_buffers
from .schema import EventKind, is_local
from .text import printable

#: Every column of an event: ``schema.EVENT_DTYPE``'s per-event fields and the common-clock times.
COLUMNS = ("program", "lane", "slot", "kind", "flags", "region", "hw", "start", "end", *schema.ARG_COLUMNS, "start_ns", "end_ns")
#: Columns computed from others rather than decoded.
_TIMES = ("start_ns", "end_ns")

#: Largest raw bytes one batch decodes (bounds a worker's memory: ~5x this while writing).
BATCH_BYTES = 8 << 20
#: Batches per worker the batch size aims at (small enough that the workers finish together).
BATCHES_PER_WORKER = 8


class Refs(list):
    """:func:`launch_refs`'s list, carrying what :func:`read_batch` needs beyond the launches: the
    capture's :class:`AddressResolver` (None when no launch recorded raw addresses)."""

    resolver: "AddressResolver | None" = None


def launch_refs(capture) -> Refs:
    """Every ``(rank, launch)`` of a capture: ranks in order, each rank's launches in its order.
    Batches name launches by their place in this list."""
    refs = Refs((r, ln) for r, rc in sorted(capture.ranks.items()) for ln in rc.launches)
    cached = getattr(capture, "_address_resolver", _UNSET)  # (finding it reads the raw launches' notifies)
    if cached is _UNSET:
        cached = address_resolver(capture, refs)
        try:
            capture._address_resolver = cached
        except AttributeError:  # (a capture-like object that takes no attributes)
            pass
    refs.resolver = cached
    return refs


_UNSET = object()


#: A launch's ``meta["addresses"]`` when its waits and notifies recorded the addresses they touched
#: (a kernel traced without edits, ``ktrace.auto``) instead of ktrace heap offsets.
RAW_ADDRESSES = "raw"


def is_raw(ln: Launch) -> bool:
    return isinstance(ln.meta, dict) and ln.meta.get("addresses") == RAW_ADDRESSES


@dataclass
class AddressResolver:
    """Turns the addresses raw launches recorded into location keys (``ktrace.auto.addresses``),
    the same on every rank for the same flag: a notify's ``peer`` becomes the rank that owns the
    flag it wrote, and a wait that did not know its producer gets the one rank that notifies
    its flag in the capture (when exactly one does)."""

    tables: dict
    #: location keys notified in the capture (sorted) and, per key, the one rank notifying it
    #: (-1 where several do: a counter several producers add to)
    keys: np.ndarray
    producer: np.ndarray

    def apply(self, rank: int, cols: dict, raw_rows: np.ndarray) -> None:
        """Rewrite the WAIT and NOTIFY rows ``raw_rows`` (a mask) of one rank's columns in place."""
        flag, peer = schema.arg_column(schema.EventKind.NOTIFY, "flag"), schema.arg_column(schema.EventKind.NOTIFY, "peer")
        assert flag == schema.arg_column(schema.EventKind.WAIT, "flag") and peer == schema.arg_column(schema.EventKind.WAIT, "peer")
        for k in (schema.EventKind.NOTIFY, schema.EventKind.WAIT):
            rows = np.flatnonzero(raw_rows & (cols["kind"] == k))
            if rows.size:
                f, p = cols[flag][rows], cols[peer][rows]
                self.apply_kind(rank, k, f, p)
                cols[flag][rows], cols[peer][rows] = f, p

    def apply_kind(self, rank: int, kind, flag: np.ndarray, peer: np.ndarray) -> None:
        """Rewrite in place one rank's raw WAITs' or NOTIFYs' ``flag`` and ``peer`` arguments (the
        rows of one kind, all of raw launches): a flag becomes its location key; a notify's peer
        the flag's owner, a wait's unknown peer (-1) the rank that notifies its flag."""
        from .auto.addresses import resolve

        keys, owners = resolve(flag, rank, self.tables.get(rank, []))
        flag[:] = keys
        if kind == schema.EventKind.NOTIFY:
            peer[:] = owners
            return
        unknown = np.flatnonzero(peer < 0)
        if unknown.size and self.keys.size:
            k = keys[unknown]
            i = np.minimum(np.searchsorted(self.keys, k), self.keys.size - 1)
            peer[unknown] = np.where(self.keys[i] == k, self.producer[i], -1)


def address_resolver(capture, refs=None) -> AddressResolver | None:
    """The capture's :class:`AddressResolver`, or None when no launch recorded raw addresses.
    Finding the producers reads the raw launches' notifies once (their kind, flag and rank)."""
    from .auto.addresses import resolve

    refs = refs if refs is not None else [(r, ln) for r, rc in sorted(capture.ranks.items()) for ln in rc.launches]
    raw = [(r, ln) for r, ln in refs if is_raw(ln)]
    if not raw:
        return None
    tables = {r: list(getattr(rc, "mappings", None) or []) for r, rc in capture.ranks.items()}
    keys, ranks = [], []
    by_rank: dict[int, list[Launch]] = {}
    for r, ln in raw:
        by_rank.setdefault(r, []).append(ln)
    N = schema.EventKind.NOTIFY
    flag = schema.arg_column(N, "flag")
    for r, lns in by_rank.items():
        for group in _same_layout(lns):
            try:
                _, _, cols = decode_columns(read_buffers(group, verify=False), (flag,))
            except (BufferDecodeError, ValueError, CaptureError):
                continue  # (a damaged buffer: reading it for the analysis says so)
            sel = cols["kind"] == N
            if sel.any():
                k, _ = resolve(cols[flag][sel], r, tables.get(r, []))
                keys.append(k)
                ranks.append(np.full(k.size, r, np.int64))
    if not keys:
        return AddressResolver(tables, np.zeros(0, np.int64), np.zeros(0, np.int64))
    k, rk = np.concatenate(keys), np.concatenate(ranks)
    o = np.lexsort((rk, k))
    k, rk = k[o], rk[o]
    first = np.r_[True, k[1:] != k[:-1]]
    uk = k[first]
    starts = np.flatnonzero(first)
    lo = rk[starts]
    hi = rk[np.r_[starts[1:] - 1, k.size - 1]]
    return AddressResolver(tables, uk, np.where(lo == hi, lo, -1))


def _same_layout(lns: list[Launch]) -> list[list[Launch]]:
    groups: dict[tuple, list[Launch]] = {}
    for ln in lns:
        groups.setdefault((math.prod(ln.grid), ln.capacity, (ln.split_sizes() or (None,))[0]), []).append(ln)
    return list(groups.values())


def make_batches(refs: list, workers: int = 1) -> list[list[int]]:
    """Launches of one rank and one buffer layout (programs x slots, dense or packed), in launch
    order, about the same raw size each: what one task decodes (and writes) together."""
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


def record_slots(ln: Launch) -> int:
    """Record slots of a launch's buffer (its layout's): an upper bound on its events."""
    sizes = ln.split_sizes()
    return sizes[1] if sizes else math.prod(ln.grid) * ln.capacity


@dataclass
class Batch:
    """Some launches of one rank, decoded together: plain columns, one row per event."""

    rank: int
    #: the launches (indices into :func:`launch_refs`) and where each one's rows start (one more
    #: entry: the end)
    launches: list[int]
    offsets: np.ndarray
    #: column name -> array (see :data:`COLUMNS`)
    cols: dict
    #: each launch's buffer header (``written`` and ``dropped`` filled in)
    headers: list = field(default_factory=list)
    #: the launches' record slots, stacked (what an ``index`` column points into), when asked for
    records: np.ndarray | None = None
    #: where its rows start in a larger table that holds it (``ktrace.export.plan.EventStore``)
    first_row: int = 0

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def per_row(self, values) -> np.ndarray:
        """A per-launch value repeated over each launch's rows."""
        return np.repeat(np.asarray(values), np.diff(self.offsets))


def _damaged(rank: int, ln: Launch, msg) -> CaptureError:
    where = f"{ln.source}: " if ln.source and ln.source not in str(msg) else ""
    return CaptureError(f"{where}rank {rank}, launch {ln.index} ({printable(ln.kernel)}): {msg}")


def read_batch(refs: list, batch: list[int], model: ClockModel, columns=COLUMNS, *, verify: bool = True,
               records: bool = False, mixed: bool = False) -> Batch:
    """Decode launches ``batch`` (indices into ``refs``; one rank, one buffer layout) into one
    :class:`Batch` with the ``columns`` asked for (``kind``, ``flags``, ``start`` and ``end`` always
    come; ``start_ns``/``end_ns`` are the times on ``model``'s clock; ``index``: each row's record
    among the stacked records).

    ``verify=False`` skips the CRC-32 of buffers read from their file (for a reader that does
    not trust the contents yet: a buffer that does not decode is still checked, so that damage
    is reported as such). With ``mixed``, the launches may differ in layout (consecutive
    launches of one rank, :func:`iter_chunks`); each buffer's header must then agree with its
    launch record.

    Raises:
        CaptureError: a buffer is damaged or disagrees with its launch record (the message
            names the rank and the launch).
    """
    mine = [refs[li] for li in batch]
    rank = mine[0][0]
    want = [c for c in columns if c not in _TIMES]
    try:
        bufs = read_buffers([ln for _, ln in mine], verify=verify)
        headers, counts, cols, recs = decode_columns(bufs, want, records=True, mixed=mixed)
    except BufferDecodeError as e:
        ln = mine[e.index][1]
        if not verify:
            ln.load_raw()  # (damaged: raises saying so)
        raise _damaged(rank, ln, e) from None
    except ValueError:  # headers that disagree with their launches' grid and capacity
        for _, ln in mine:
            try:
                h = decode_columns([ln.load_raw()], ())[0][0]
            except BufferDecodeError as e:
                raise _damaged(rank, ln, e) from None
            if (h.grid, h.capacity) != (tuple(ln.grid), ln.capacity):
                raise _damaged(rank, ln, f"its buffer's header says grid {h.grid} and {h.capacity} slots, its launch record "
                                         f"grid {tuple(ln.grid)} and {ln.capacity} slots") from None
        raise
    if mixed:
        for h, (_, ln) in zip(headers, mine):
            if (h.grid, h.capacity) != (tuple(ln.grid), ln.capacity):
                raise _damaged(rank, ln, f"its buffer's header says grid {h.grid} and {h.capacity} slots, its launch record "
                                         f"grid {tuple(ln.grid)} and {ln.capacity} slots")
    offsets = np.r_[0, np.cumsum(counts)]
    resolver = getattr(refs, "resolver", None)
    if resolver is not None and any(is_raw(ln) for _, ln in mine) and "arg2" in cols and "arg0" in cols:
        raw_rows = np.repeat(np.array([is_raw(ln) for _, ln in mine]), np.diff(offsets))
        resolver.apply(rank, cols, raw_rows)
    if any(c in columns for c in _TIMES):
        clk = model.rank(rank)
        hz = [h.tick_hz for h in headers]
        if len(set(hz)) <= 1:
            cols["start_ns"] = clk.to_common(cols["start"], hz[0] if hz else None)
            cols["end_ns"] = clk.to_common(cols["end"], hz[0] if hz else None)
        else:  # launches timed at different rates: each converted on its own
            s_ns, e_ns = np.empty(offsets[-1], np.int64), np.empty(offsets[-1], np.int64)
            for k, h in enumerate(hz):
                a, b = offsets[k], offsets[k + 1]
                s_ns[a:b] = clk.to_common(cols["start"][a:b], h)
                e_ns[a:b] = clk.to_common(cols["end"][a:b], h)
            cols["start_ns"], cols["end_ns"] = s_ns, e_ns
    return Batch(rank=rank, launches=list(batch), offsets=offsets, cols=cols, headers=headers, records=recs if records else None)


def iter_batches(capture, model: ClockModel | None = None, columns=COLUMNS, *, verify: bool = True):
    """``(refs, batch)`` for every batch of a capture, ranks in order, each rank's launches in
    order (batches of whole runs of one layout; a launch of another layout starts a new one)."""
    model = model or clock_model_of(capture)
    refs = launch_refs(capture)
    batches: list[tuple[tuple, list[int]]] = []
    for li, (r, ln) in enumerate(refs):  # consecutive launches of one rank and layout, in order
        key = (r, math.prod(ln.grid), ln.capacity, (ln.split_sizes() or (None,))[0])
        if batches and batches[-1][0] == key and _batch_bytes(refs, batches[-1][1]) + ln.nbytes <= BATCH_BYTES:
            batches[-1][1].append(li)
        else:
            batches.append((key, [li]))
    for _, b in batches:
        yield refs, read_batch(refs, b, model, columns, verify=verify)


def iter_chunks(capture, model: ClockModel | None = None, columns=COLUMNS, *, limit: int | None = None):
    """``(refs, batch)`` for runs of consecutive launches of one rank of about ``limit`` raw bytes
    (default :data:`BATCH_BYTES`), whatever their layouts (a dispatch and a combine launch after
    another decode together): ranks in order, each rank's launches in order."""
    model = model or clock_model_of(capture)
    refs = launch_refs(capture)
    for b in _chunks(refs, BATCH_BYTES if limit is None else limit):
        yield refs, read_batch(refs, b, model, columns, mixed=True)


def impossible_launches(capture) -> dict[tuple[int, int], str]:
    """``(rank, launch index) -> why`` for every launch whose events cannot be real
    (``ktrace.decode.impossible_times``: times all 0, spanning more than an hour, peers outside
    the world size). A launch that does not decode at all is not listed: decoding it says why.

    One read of every buffer (their tags, times and first arguments; no CRC: decoding checks it).
    """
    refs = launch_refs(capture)
    out: dict[tuple[int, int], str] = {}
    for batch in make_batches(refs):
        for li, buf in zip(batch, read_buffers([refs[li][1] for li in batch], verify=False)):
            try:
                why = impossible_times(buf, int(capture.world_size), raw=is_raw(refs[li][1]))
            except DecodeError:
                continue
            if why:
                r, ln = refs[li]
                out[(r, ln.index)] = why
    return out


def without_launches(capture, drop) -> object:
    """A shallow copy of ``capture`` without the launches ``drop`` names (``(rank, index)`` pairs);
    ranks left with no launch stay, empty."""
    import copy

    drop = set(drop)
    out = copy.copy(capture)
    out.ranks = {}
    for r, rc in capture.ranks.items():
        rc2 = copy.copy(rc)
        rc2.launches = [ln for ln in rc.launches if (r, ln.index) not in drop]
        out.ranks[r] = rc2
    return out


def _batch_bytes(refs: list, batch: list[int]) -> int:
    return sum(refs[li][1].nbytes for li in batch)


def aligned_events(capture, model: ClockModel | None = None) -> np.ndarray:
    """Every event of a capture on the common clock, as one structured table: THE table the
    analyses' reference paths and the tests start from.

    Columns are ``schema.ALIGNED_DTYPE``: ``schema.EVENT_DTYPE`` (raw ``start``/``end`` ticks kept)
    plus ``start_ns`` and ``end_ns`` (int64 nanoseconds on the common clock: host wall-clock time,
    ``time.time_ns``, when the capture has a host anchor; see ``model.anchor``). Rows are ordered
    by rank, then each rank's launches in order, then program, then slot.

    Args:
        capture: a ``ktrace.captures.Capture``.
        model: the clock model (default: the capture's stored one, else fitted from its samples;
            ranks without samples stay on their own clock, with a warning).

    Raises:
        CaptureError: a buffer is damaged.
    """
    model = model or clock_model_of(capture)
    parts = []
    for refs, b in iter_batches(capture, model):
        for k, li in enumerate(b.launches):
            a, e = int(b.offsets[k]), int(b.offsets[k + 1])
            t = np.zeros(e - a, schema.ALIGNED_DTYPE)
            t["rank"] = b.rank
            t["launch"] = refs[li][1].index
            for c in COLUMNS:
                t[c] = b.cols[c][a:e]
            parts.append(t)
    return np.concatenate(parts) if parts else schema.empty_aligned()


# ---------------------------------------------------------------------------------------------
# a whole capture into columns (what the analyses hold)
# ---------------------------------------------------------------------------------------------

#: Raw bytes of the consecutive launches :func:`capture_columns` decodes at a time: small enough
#: that a chunk's records stay in the processor's cache through the passes over them.
CHUNK_BYTES = 4 << 20


class NotDecoded(Exception):
    """:func:`capture_columns` met something it leaves to the checked path (``read_batch``): a
    buffer that is damaged, disagrees with its launch record or does not decode."""


@dataclass
class CaptureColumns:
    """A capture's events as columns (see :func:`capture_columns`)."""

    #: events (rows)
    n: int
    #: column name -> array of ``n``
    cols: dict
    #: (kind, argument column) -> that argument at the rows of that kind, in row order
    at: dict
    #: ``(rank, launch index) -> why`` for launches whose times cannot be real (``decode.launch_verdict``)
    impossible: dict


def _chunks(refs: list, limit: int) -> list[list[int]]:
    """Runs of consecutive launches of one rank of about ``limit`` raw bytes (in launch order)."""
    out: list[list[int]] = []
    size, rank = 0, None
    for li, (r, ln) in enumerate(refs):
        if not out or r != rank or size + ln.nbytes > limit:
            out.append([])
            size, rank = 0, r
        out[-1].append(li)
        size += ln.nbytes
    return out


def capture_columns(capture, model: ClockModel, columns, kinds=(EventKind.WAIT, EventKind.NOTIFY), args=schema.ARG_COLUMNS, *,
                    threads: int = 2) -> CaptureColumns:
    """Every event of a capture as plain columns, in one pass over its buffers: rows by rank,
    launch (each rank's in order), program and slot, as :func:`aligned_events` orders them.

    The launches are decoded a few MB of consecutive ones at a time (one read of the file into a
    buffer each thread reuses; one stack of their records; :func:`ktrace.decode.scan` checks them
    all), by ``threads`` threads (numpy works without the interpreter lock), each chunk's rows
    written straight into the columns at their final place: a chunk learns where its rows go
    from the chunk before it once it has counted its own events. The columns are allocated once
    for as many rows as the buffers have record slots (an upper bound: the pages past the rows
    are never touched).

    Args:
        capture: a ``ktrace.captures.Capture`` whose ranks list their launches in order.
        model: the clock model (``start_ns``/``end_ns`` on its common clock).
        columns: names among ``rank``, ``launch``, ``program``, ``lane``, ``kind``, ``flags``,
            ``region``, ``hw``, ``start_ns``, ``end_ns`` (``schema.ALIGNED_DTYPE``'s types).
        kinds, args: the argument columns ``args`` are kept at the rows of these kinds only, at
            the widths they are recorded with (``schema.arg_dtype``).

    Raises:
        NotDecoded: a buffer is damaged, disagrees with its launch record or does not decode
            (``read_batch`` says what is wrong, in its words).
    """
    job = _Job(capture, model, columns, kinds, args)
    if threads > 1 and len(job.chunks) > 1:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(job.run, range(len(job.chunks))))
    else:
        for i in range(len(job.chunks)):
            job.run(i)
    if job.failed:
        raise job.failed[0]
    n = int(job.starts[-1][0])
    cols = {c: v[:n] for c, v in job.cols.items()}
    at = {key: v[: int(job.starts[-1][1 + job.kinds.index(key[0])])] for key, v in job.at.items()}
    return CaptureColumns(n=n, cols=cols, at=at, impossible=job.impossible)


class _Job:
    """What the threads of one :func:`capture_columns` share: the chunks, the columns, where
    each chunk's rows start (chunk i's, known once chunk i - 1 has counted its own)."""

    def __init__(self, capture, model: ClockModel, columns, kinds, args):
        self.refs = refs = launch_refs(capture)
        self.chunks = _chunks(refs, CHUNK_BYTES)
        self.model = model
        self.world = int(capture.world_size)
        upper = sum(record_slots(ln) for _, ln in refs)
        dt = schema.ALIGNED_DTYPE
        self.cols = {c: (np.zeros if c == "lane" else np.empty)(upper, dt[c]) for c in columns}  # (lanes: 0 unless written)
        self.at = {(int(k), a): np.empty(upper, schema.arg_dtype(k, a)) for k in kinds for a in args}
        self.kinds = [int(k) for k in kinds]
        # per chunk, its first row and first row of each kind (one more: the end)
        self.starts = np.zeros((len(self.chunks) + 1, 1 + len(self.kinds)), np.int64)
        self.known = [threading.Event() for _ in range(len(self.chunks) + 1)]
        self.known[0].set()
        self.failed: list = []
        self.impossible: dict = {}
        self.local = threading.local()

    def run(self, i: int) -> None:
        try:
            _decode_chunk(self, i)
        except BaseException as e:  # (the next chunks must not wait for it)
            self.failed.append(e)
            self.known[i + 1].set()

    def read(self, lns: list) -> list:
        got = read_adjacent(lns, getattr(self.local, "buf", None))
        if got is not None:
            bufs, self.local.buf = got
            return bufs
        try:
            return read_buffers(lns)
        except CaptureError:
            raise NotDecoded() from None


def _decode_chunk(job: _Job, i: int) -> None:
    """Decode chunk ``i`` of ``job`` into its columns."""
    lis = job.chunks[i]
    rank = job.refs[lis[0]][0]
    lns = [job.refs[li][1] for li in lis]
    bufs = job.read(lns)
    try:
        st = stack_buffers([np.frombuffer(memoryview(b).cast("B"), np.uint8) for b in bufs], mixed=True)
    except (DecodeError, ValueError):
        raise NotDecoded() from None
    hdr = st.hdr
    if any(tuple(g) != tuple(ln.grid) or c != ln.capacity for g, c, ln in zip(hdr["grid"].tolist(), st.C.tolist(), lns)):
        raise NotDecoded()
    sl = scan(st)
    if sl is None:
        raise NotDecoded()
    main = sl.main
    ev = gather_records(st.rec, main)
    t0, t1 = ev["t0"].view(np.int64), ev["t1"].view(np.int64)
    if not times_ok(t0, t1):
        raise NotDecoded()
    tag = ev["tag"]
    kind = (tag & 0xF).astype(np.uint8)
    kinds = job.kinds
    of_kind = [np.flatnonzero(kind == k) for k in kinds]
    n = main.size
    # where this chunk's rows go: after the previous chunk's
    job.known[i].wait()
    if job.failed:
        job.known[i + 1].set()
        return
    a = job.starts[i]
    job.starts[i + 1] = a + [n, *(x.size for x in of_kind)]
    job.known[i + 1].set()
    cols, at = job.cols, job.at
    r0, r1 = int(a[0]), int(a[0]) + n
    counts = sl.counts
    if "rank" in cols:
        cols["rank"][r0:r1] = rank
    if "launch" in cols:
        cols["launch"][r0:r1] = np.repeat(np.array([ln.index for ln in lns], np.int32), counts)
    if "kind" in cols:
        cols["kind"][r0:r1] = kind
    if "flags" in cols:
        f = cols["flags"][r0:r1]
        np.right_shift(tag, schema.KIND_BITS, out=f, casting="unsafe")
        f &= 0xF
    if "region" in cols:
        np.right_shift(tag, schema.REGION_SHIFT, out=cols["region"][r0:r1])
    if "hw" in cols:
        cols["hw"][r0:r1] = ev["hw"]
    if "program" in cols or "lane" in cols:
        many_lanes = bool((st.lanes > 1).any())
        prog, lane = program_columns(st, sl.per_program, lanes=many_lanes and "lane" in cols, dtype=np.int32)
        if "program" in cols:
            cols["program"][r0:r1] = prog
        if lane is not None and many_lanes:
            cols["lane"][r0:r1] = lane
    hz = hdr["tick_hz"].tolist()
    clk = job.model.rank(rank)
    for name, t in (("start_ns", t0), ("end_ns", t1)):
        if name in cols:
            dest = cols[name][r0:r1]
            if len(set(hz)) == 1:
                clk.to_common(t, hz[0], out=dest)
            else:  # launches timed at different rates: each converted on its own
                o = np.r_[0, np.cumsum(counts)]
                for k, h in enumerate(hz):
                    clk.to_common(t[o[k] : o[k + 1]], h, out=dest[o[k] : o[k + 1]])
    bad_peer = np.full(len(lns), -1, np.int64)
    raw = np.array([is_raw(ln) for ln in lns])
    for j, (k, rows) in enumerate(zip(kinds, of_kind)):
        if rows.size:
            _kind_args(job, st, sl, ev, k, rows, int(a[1 + j]), counts, bad_peer, raw, rank)
    # launches whose times cannot be real (``decode.launch_verdict``): the caller leaves them out
    has = np.flatnonzero(counts)
    if has.size:
        o = (np.cumsum(counts) - counts)[has]
        lo, hi = np.minimum.reduceat(t0, o), np.maximum.reduceat(t1, o)
        for q, f, l in zip(has.tolist(), lo.tolist(), hi.tolist()):
            p = int(ev["arg0"][bad_peer[q]]) if bad_peer[q] >= 0 else None
            why = launch_verdict(int(counts[q]), f, l, hz[q], p, job.world)
            if why:
                job.impossible[(rank, lns[q].index)] = why


def _kind_args(job: _Job, st, sl, ev: np.ndarray, k: int, rows: np.ndarray, w0: int, counts: np.ndarray, bad_peer: np.ndarray,
               raw: np.ndarray, rank: int) -> None:
    """The argument columns of a chunk's events of kind ``k`` (``rows`` among the chunk's events),
    written from row ``w0`` of that kind's; notes in ``bad_peer`` (per launch, the first event
    naming a peer outside the world) where it finds one sooner. The waits and notifies of raw
    launches (``raw``, per launch: addresses recorded, peer -1 allowed) get their flags' location
    keys and peers (:class:`AddressResolver`)."""
    at = job.at
    slots = sl.main[rows]
    sel = gather_records(st.rec, slots)
    end = w0 + rows.size
    if (k, "arg0") in at:
        at[(k, "arg0")][w0:end] = sel["arg0"]
    if (k, "arg1") in at:
        at[(k, "arg1")][w0:end] = sel["arg1"]
    has = sl.detailed[slots]
    every = bool(has.all())
    d = gather_records(st.rec, slots + 1 if every else slots[has] + 1).view(schema.DETAIL_DTYPE)
    for c, f in (("arg2", "x0"), ("arg3", "x1"), ("arg4", "x2"), ("arg5", "x3")):
        if (k, c) in at:
            dest = at[(k, c)][w0:end]
            if every:
                dest[:] = d[f]
            else:
                dest[:] = 0
                dest[has] = d[f]
    if k in _PEER_KINDS:  # a wait or notify naming a peer outside the world (a hand-off inside a program names none)
        peer = sel["arg0"]
        launch_of = np.searchsorted(np.cumsum(counts), rows, side="right")
        lowest = -raw[launch_of].astype(np.int64) if raw.any() else 0  # (a raw launch's peer may be -1: unknown)
        bad = np.flatnonzero(~is_local(sel["tag"] >> schema.KIND_BITS) & ((peer < lowest) | (peer >= job.world)))
        if bad.size:
            which = np.searchsorted(np.cumsum(counts), rows[bad], side="right")
            first = np.full(counts.size, np.iinfo(np.int64).max)
            np.minimum.at(first, which, rows[bad])
            for q in np.flatnonzero(first < np.iinfo(np.int64).max).tolist():
                if bad_peer[q] < 0 or first[q] < bad_peer[q]:
                    bad_peer[q] = first[q]
        resolver = job.refs.resolver
        if resolver is not None and raw.any() and (k, "arg0") in at and (k, "arg2") in at:
            mine = np.flatnonzero(raw[launch_of])
            if mine.size:
                f, p = at[(k, "arg2")][w0:end], at[(k, "arg0")][w0:end]
                fs, ps = f[mine].astype(np.int64), p[mine].astype(np.int64)
                resolver.apply_kind(rank, k, fs, ps)
                f[mine], p[mine] = fs, ps


#: Kinds whose first argument names a peer rank (waits and notifies).
_PEER_KINDS = tuple(int(k) for k, names in schema.ARG_NAMES.items() if names[0] == "peer")
