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
from dataclasses import dataclass, field

import numpy as np

from . import schema
from .captures.file import CaptureError, Launch, read_buffers
from .clock.model import ClockModel, clock_model_of
from .decode import BufferDecodeError, DecodeError, decode_columns, impossible_times
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
        from .auto.addresses import resolve

        kind = cols["kind"]
        n = raw_rows & (kind == schema.EventKind.NOTIFY)
        w = raw_rows & (kind == schema.EventKind.WAIT)
        flag, peer = schema.arg_column(schema.EventKind.NOTIFY, "flag"), schema.arg_column(schema.EventKind.NOTIFY, "peer")
        assert flag == schema.arg_column(schema.EventKind.WAIT, "flag") and peer == schema.arg_column(schema.EventKind.WAIT, "peer")
        hw = n | w
        if not hw.any():
            return
        keys, owners = resolve(cols[flag][hw], rank, self.tables.get(rank, []))
        cols[flag][hw] = keys
        sel = np.flatnonzero(hw)
        is_n = n[sel]
        cols[peer][sel[is_n]] = owners[is_n]
        wait_rows, wait_keys = sel[~is_n], keys[~is_n]
        unknown = cols[peer][wait_rows] < 0
        if unknown.any() and self.keys.size:
            k = wait_keys[unknown]
            i = np.minimum(np.searchsorted(self.keys, k), self.keys.size - 1)
            hit = self.keys[i] == k
            cols[peer][wait_rows[unknown]] = np.where(hit, self.producer[i], -1)


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
               records: bool = False) -> Batch:
    """Decode launches ``batch`` (indices into ``refs``; one rank, one buffer layout) into one
    :class:`Batch` with the ``columns`` asked for (``kind``, ``flags``, ``start`` and ``end`` always
    come; ``start_ns``/``end_ns`` are the times on ``model``'s clock; ``index``: each row's record
    among the stacked records).

    ``verify=False`` skips the CRC-32 of buffers read from their file (for a reader that does
    not trust the contents yet: a buffer that does not decode is still checked, so that damage
    is reported as such).

    Raises:
        CaptureError: a buffer is damaged or disagrees with its launch record (the message
            names the rank and the launch).
    """
    mine = [refs[li] for li in batch]
    rank = mine[0][0]
    want = [c for c in columns if c not in _TIMES]
    try:
        bufs = read_buffers([ln for _, ln in mine], verify=verify)
        headers, counts, cols, recs = decode_columns(bufs, want, records=True)
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
