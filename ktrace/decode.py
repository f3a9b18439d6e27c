"""Decode a raw event buffer (bytes copied from the device once) into a numpy table.

No Python loop runs per event: every step is a vectorised numpy operation over the whole
buffer. Any input that is not a well-formed buffer raises :class:`DecodeError` with a message
saying what is wrong and where; nothing else escapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import schema
from .schema import EventFlag, EventKind, is_local

_VALID_KINDS = np.zeros(16, dtype=bool)
_VALID_KINDS[[int(k) for k in EventKind if k != EventKind.EMPTY]] = True


#: The tick rates a header may state: a GPU timer's (AMD MI200's 25 MHz up to a cycle counter's few
#: GHz). Outside them every time would be off by orders of magnitude (a header of 1 Hz makes a
#: microsecond a week), so such a header is refused.
MIN_TICK_HZ, MAX_TICK_HZ = 1_000_000, 100_000_000_000


class DecodeError(ValueError):
    """The bytes are not a well-formed ktrace event buffer."""


@dataclass(frozen=True)
class DecodedBuffer:
    """One launch's events and what its header says."""

    header: schema.Header
    #: One row per event (EVENT_DTYPE), in program order: by program, then by slot.
    events: np.ndarray
    #: Events each program could not record because its slots were full (uint32 per program).
    dropped_per_program: np.ndarray

    @property
    def written(self) -> int:
        return int(self.events.shape[0])

    @property
    def dropped(self) -> int:
        return int(self.dropped_per_program.sum(dtype=np.int64))


def read_header(buf) -> schema.Header:
    """Parse and validate the header at the start of ``buf`` (bytes-like)."""
    mv = memoryview(buf).cast("B")
    if mv.nbytes < schema.HEADER_BYTES:
        raise DecodeError(
            f"buffer is {mv.nbytes} bytes, shorter than the {schema.HEADER_BYTES}-byte header: truncated or not a ktrace buffer"
        )
    h = schema.unpack_header(mv)
    if h["magic"] != schema.MAGIC:
        raise DecodeError(
            f"bad magic 0x{h['magic']:08x} (expected 0x{schema.MAGIC:08x}, b'KTRC'): not a ktrace event buffer"
        )
    version = h["version"]
    if version > schema.FORMAT_VERSION:
        raise DecodeError(
            f"buffer format version {version} is newer than this ktrace understands ({schema.FORMAT_VERSION}): upgrade ktrace"
        )
    if version < 1:
        raise DecodeError(f"buffer format version {version} is not valid")
    if h["header_bytes"] != schema.HEADER_BYTES or h["record_bytes"] != schema.RECORD_BYTES:
        raise DecodeError(
            f"header says {h['header_bytes']}-byte header and {h['record_bytes']}-byte records; "
            f"version {version} uses {schema.HEADER_BYTES} and {schema.RECORD_BYTES}: corrupt header"
        )
    layout = h["layout"]
    if layout not in (schema.LAYOUT_DENSE, schema.LAYOUT_PACKED) or (version < 2 and layout != schema.LAYOUT_DENSE):
        raise DecodeError(f"unknown buffer layout {layout} in a version-{version} header: corrupt header")
    try:
        timer = schema.TimerKind(h["timer"])
    except ValueError:
        raise DecodeError(f"unknown timer kind {h['timer']} in header") from None
    grid = h["grid"]
    capacity, n_programs = h["capacity"], h["n_programs"]
    if capacity <= 0 or n_programs <= 0:
        raise DecodeError(f"header has capacity {capacity} and {n_programs} programs: corrupt header")
    if grid[0] * grid[1] * grid[2] != n_programs:
        raise DecodeError(f"header grid {grid} does not hold its {n_programs} programs: corrupt header")
    if h["tick_hz"] <= 0:
        raise DecodeError("header tick rate is 0: corrupt header")
    lanes = schema.header_lanes(h["lanes"])
    if lanes > schema.MAX_LANES or grid[0] % lanes:
        raise DecodeError(f"header says {lanes} lanes per program, which does not divide its grid's x extent {grid[0]}: corrupt header")
    if not MIN_TICK_HZ <= h["tick_hz"] <= MAX_TICK_HZ:
        raise DecodeError(f"header tick rate {h['tick_hz']} Hz is not a GPU timer's ({MIN_TICK_HZ / 1e6:g} MHz to "
                          f"{MAX_TICK_HZ / 1e9:g} GHz): corrupt header")
    return schema.Header(
        timer=timer,
        tick_hz=h["tick_hz"],
        capacity=capacity,
        n_programs=n_programs,
        grid=grid,  # type: ignore[arg-type]
        written=h["written"],
        dropped=h["dropped"],
        version=version,
        layout=layout,
        lanes=lanes,
    )


def head_bytes(header: schema.Header) -> int:
    """Bytes before a buffer's records: the header, and a packed buffer's kept-slot counts."""
    return schema.HEADER_BYTES + (schema.packed_counts_bytes(header.n_programs) if header.packed else 0)


def _kept_counts(mv: memoryview, header: schema.Header) -> np.ndarray:
    """A packed buffer's kept slots per program (checked against its capacity)."""
    counts = np.frombuffer(mv, "<u4", count=header.n_programs, offset=schema.HEADER_BYTES)
    if counts.size and int(counts.max()) > header.capacity:
        p = int(np.argmax(counts > header.capacity))
        raise DecodeError(f"packed buffer keeps {int(counts[p])} slots of program {p}, more than its {header.capacity}: corrupt buffer")
    return counts


def split_head(head) -> tuple[schema.Header, np.ndarray | None]:
    """The header of a buffer's first bytes (``head_bytes`` of them), and a packed buffer's
    kept-slot counts (None for a dense one)."""
    mv = memoryview(head).cast("B")
    header = read_header(mv)
    if not header.packed:
        return header, None
    if mv.nbytes < head_bytes(header):
        raise DecodeError(f"packed buffer is {mv.nbytes} bytes, shorter than its header and slot counts: truncated")
    return header, _kept_counts(mv, header)


def _records(buf) -> tuple[np.ndarray, np.ndarray, schema.Header, np.ndarray | None]:
    """The header, the record slots, the per-program dropped counts and (packed) kept-slot
    counts of one buffer (checked)."""
    if isinstance(buf, np.ndarray):
        buf = np.ascontiguousarray(buf).view(np.uint8).reshape(-1)
    mv = memoryview(buf).cast("B")
    header, counts = split_head(mv)
    P, C = header.n_programs, header.capacity
    if counts is None:
        need, n_rec = header.nbytes, P * C
        what = f"its header ({P} programs x {C} slots)"
    else:
        n_rec = int(counts.sum(dtype=np.int64))
        need = schema.packed_bytes(P, n_rec)
        what = f"its header and slot counts ({P} programs, {n_rec} slots kept)"
    if mv.nbytes < need:
        raise DecodeError(f"buffer is {mv.nbytes} bytes but {what} need {need}: truncated")
    at = head_bytes(header)
    rec = np.frombuffer(mv, schema.RECORD_DTYPE, count=n_rec, offset=at)
    dropped = np.frombuffer(mv, "<u4", count=P, offset=at + n_rec * schema.RECORD_BYTES)
    return rec, dropped, header, counts


def pack_buffer(buf) -> np.ndarray:
    """The packed form of an event buffer (see ``ktrace.schema``): each program's slots up to its
    last non-empty one. Decodes to exactly the events of the dense buffer. A packed buffer is
    returned as it is (a view of ``buf``).

    Raises:
        DecodeError: the buffer is truncated, foreign or of a newer version.
    """
    rec, dropped, header, counts = _records(buf)
    if counts is not None:
        return np.frombuffer(memoryview(buf).cast("B"), np.uint8, count=schema.packed_bytes(header.n_programs, rec.shape[0]))
    P, C = header.n_programs, header.capacity
    grid = rec.reshape(P, C)
    used = (grid["tag"] & 0xF) != 0
    # one past each program's last non-empty slot (0 for a program that wrote nothing)
    kept = np.where(used.any(axis=1), C - np.argmax(used[:, ::-1], axis=1), 0).astype(np.uint32)
    n_rec = int(kept.sum(dtype=np.int64))
    out = np.zeros(schema.packed_bytes(P, n_rec), np.uint8)
    h = np.frombuffer(memoryview(buf).cast("B"), schema.HEADER_DTYPE, count=1).copy()
    h["version"] = schema.FORMAT_VERSION
    h["layout"] = schema.LAYOUT_PACKED
    out[: schema.HEADER_BYTES] = h.view(np.uint8)
    at = schema.HEADER_BYTES
    out[at : at + 4 * P] = kept.view(np.uint8)
    at += schema.packed_counts_bytes(P)
    out[at : at + n_rec * schema.RECORD_BYTES] = grid[np.arange(C)[None, :] < kept[:, None]].view(np.uint8).reshape(-1)
    at += n_rec * schema.RECORD_BYTES
    out[at:] = dropped.view(np.uint8)
    return out


class _Slots:
    """Where record slots sit: ``locate`` gives each one's program (counted over all the buffers
    decoded together) and its slot within the program.

    Dense buffers: ``C`` slots per program. Packed: ``kept[p]`` slots of program p, one program
    after another.
    """

    def __init__(self, C: int, kept: np.ndarray | None = None):
        self.C = C
        self.kept = kept
        if kept is not None:
            self.starts = np.r_[0, np.cumsum(kept, dtype=np.int64)]
            self.prog_of = np.repeat(np.arange(kept.size, dtype=np.int64), kept)

    def locate(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.kept is None:
            prog = i // self.C
            return prog, i - prog * self.C
        prog = self.prog_of[i]
        return prog, i - self.starts[prog]

    def first(self, i: np.ndarray, n_slots: int) -> np.ndarray:
        """Whether slot ``i`` starts a program (or is past the last slot)."""
        if self.kept is None:
            return i % self.C == 0
        past = i >= n_slots
        prog = self.prog_of[np.minimum(i, n_slots - 1)]
        return past | (i == self.starts[prog])

    def where(self, i: int) -> str:
        p, s = self.locate(np.array([i], np.int64))
        return f"program {int(p[0])}, slot {int(s[0])}"


#: The columns :func:`decode_columns` can return (names and meanings of ``schema.EVENT_DTYPE``:
#: ``program`` the program of the launch grid, ``lane`` its lane (0 but in lane buffers, see
#: ``ktrace.schema``), ``slot`` the place in that lane's slots;
#: ``index``: the slot of the event's record among all the slots decoded together, for reading
#: further fields of a few rows straight from the records).
COLUMNS = ("program", "lane", "slot", "kind", "flags", "region", "hw", "start", "end", "arg0", "arg1", "arg2", "arg3", "arg4", "arg5")


def _events(rec: np.ndarray, slots: _Slots, want) -> dict[str, np.ndarray]:
    """The events of ``rec`` (the slots of programs one after another, as ``slots`` says), as
    the columns ``want`` names.

    Validates every record it reads; raises :class:`DecodeError` naming program and slot.
    """
    n_slots = rec.shape[0]
    # Only the tag is read for every slot; every other field is gathered at the used slots
    # (field by field: gathering whole structured records is several times slower).
    tag = rec["tag"]
    kind = (tag & 0xF).astype(np.uint8)
    used = np.flatnonzero(kind)  # EventKind.EMPTY == 0
    utag = tag[used]
    ukind = kind[used]
    uflags = ((utag >> schema.KIND_BITS) & 0xF).astype(np.uint8)
    if not _VALID_KINDS[ukind].all():
        bad = used[~_VALID_KINDS[ukind]][0]
        raise DecodeError(f"record of {slots.where(bad)} has unknown kind {int(kind[bad])}: corrupt buffer")

    is_detail = ukind == EventKind.DETAIL
    has_detail = used.size != 0 and bool(is_detail.any())
    mi = np.flatnonzero(~is_detail) if has_detail else None  # positions of the events among the used slots
    main = used[mi] if has_detail else used
    # Every DETAIL record continues the event in the slot before it, in the same program.
    if has_detail:
        di = np.flatnonzero(is_detail)
        det = used[di]
        prev = np.maximum(di - 1, 0)  # the used slot before it: it must be the slot det - 1
        orphan = slots.first(det, n_slots) | (di == 0) | (used[prev] != det - 1)
        orphan |= ((uflags[prev] & EventFlag.DETAIL) == 0) | is_detail[prev]
        if orphan.any():
            bad = det[orphan][0]
            raise DecodeError(f"DETAIL record at {slots.where(bad)} does not follow an event that has one: corrupt buffer")
    mflags = uflags[mi] if has_detail else uflags
    wi = np.flatnonzero(mflags & EventFlag.DETAIL)  # positions among the events
    wants = main[wi]
    if wants.size:
        nxt = wants + 1
        missing = slots.first(nxt, n_slots) | (kind[np.minimum(nxt, n_slots - 1)] != EventKind.DETAIL)
        if missing.any():
            bad = wants[missing][0]
            raise DecodeError(f"event at {slots.where(bad)} says a DETAIL record follows, but none does: corrupt buffer")
    t0, t1 = rec["t0"][main], rec["t1"][main]
    # times are signed from here on (start_ns, durations): one test, on the signed values, so that
    # a time of 2^63 or more (a sentinel, all ones) cannot pass as a negative one
    s0, s1 = t0.view(np.int64), t1.view(np.int64)
    impossible = (s1 < s0) | (s0 < 0)
    if impossible.any():
        bad = int(np.flatnonzero(impossible)[0])
        what = "has a time of 2^63 ticks or more" if s0[bad] < 0 or s1[bad] < 0 else "ends before it starts"
        raise DecodeError(f"event at {slots.where(main[bad])} {what} (start {int(t0[bad])}, end {int(t1[bad])}): corrupt buffer")

    n = main.size
    mkind = ukind[mi] if has_detail else ukind
    out: dict[str, np.ndarray] = {}
    if "program" in want or "slot" in want:
        out["program"], out["slot"] = slots.locate(main)
    out["kind"] = mkind
    out["flags"] = mflags
    if "region" in want:
        out["region"] = (utag[mi] if has_detail else utag) >> schema.REGION_SHIFT
    if "hw" in want:
        out["hw"] = rec["hw"][main]
    out["start"] = t0.view(np.int64)
    out["end"] = t1.view(np.int64)
    if "arg0" in want or "arg1" in want:
        out["arg0"], out["arg1"] = _counter_values(mkind, rec["arg0"][main], rec["arg1"][main])
    detail = [c for c in ("arg2", "arg3", "arg4", "arg5") if c in want]
    if detail:
        drec = rec.view(schema.DETAIL_DTYPE)  # field by field, as above
        at = wants + 1
        for c, f in (("arg2", "x0"), ("arg3", "x1"), ("arg4", "x2"), ("arg5", "x3")):
            if c in detail:
                col = out[c] = np.zeros(n, np.int64)
                if wants.size:
                    col[wi] = drec[f][at]
    out["_detail_rows"] = wi
    if "index" in want:
        out["index"] = main
    return out


def _counter_values(kind: np.ndarray, a0: np.ndarray, a1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Events' ``arg0`` and ``arg1``: counters carry one 64-bit value split over the two 32-bit
    fields (low half in arg0, high half in arg1), joined into arg0 (int64) with arg1 0."""
    is_counter = kind == EventKind.COUNTER
    if not is_counter.any():
        return a0, a1
    a0 = a0.astype(np.int64)
    a1 = a1.astype(np.int64)
    return np.where(is_counter, (a0 & 0xFFFFFFFF) | (a1 << 32), a0), np.where(is_counter, 0, a1)


def decode_buffer(buf, *, rank: int = 0, launch: int = 0) -> DecodedBuffer:
    """Decode one launch's event buffer.

    Args:
        buf: the whole buffer as bytes-like (bytes, memoryview, numpy uint8 array).
        rank: value for the ``rank`` column.
        launch: value for the ``launch`` column.

    Returns:
        The header and the events in program order.

    Raises:
        DecodeError: the buffer is truncated, foreign, of a newer version, or its records are
            inconsistent (unknown kinds, a DETAIL record with no event before it, ...).
    """
    rec, dropped, header, kept = _records(buf)
    cols = _events(rec, _Slots(header.capacity, kept), ("program", "region", "hw", "arg0", "arg1", "index"))
    n = cols["kind"].size
    ev = np.zeros(n, schema.EVENT_DTYPE)  # (zero-filling is cheaper than writing the detail columns)
    ev["rank"] = rank
    ev["launch"] = launch
    if header.lanes > 1:
        cols["program"], ev["lane"] = np.divmod(cols["program"], header.lanes)
    for c in ("program", "slot", "kind", "flags", "region", "hw", "start", "end", "arg0", "arg1"):
        ev[c] = cols[c]
    wi = cols["_detail_rows"]
    if wi.size:
        drec = rec.view(schema.DETAIL_DTYPE)  # field by field, as above
        at = cols["index"][wi] + 1
        ev["arg2"][wi] = drec["x0"][at]
        ev["arg3"][wi] = drec["x1"][at]
        ev["arg4"][wi] = drec["x2"][at]
        ev["arg5"][wi] = drec["x3"][at]
    dropped = dropped.copy()
    header = schema.Header(
        timer=header.timer,
        tick_hz=header.tick_hz,
        capacity=header.capacity,
        n_programs=header.n_programs,
        grid=header.grid,
        written=int(n),
        dropped=int(dropped.sum(dtype=np.int64)),
        version=header.version,
        layout=header.layout,
        lanes=header.lanes,
    )
    return DecodedBuffer(header=header, events=ev, dropped_per_program=dropped)


class BufferDecodeError(DecodeError):
    """A :class:`DecodeError` in one of several buffers decoded together; ``index`` says which."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


def _check_events(buf) -> None:
    """Decode one buffer's records, for the error it raises."""
    rec, _, h, kept = _records(buf)
    _events(rec, _Slots(h.capacity, kept), ())


def _buffer_bytes(buf) -> np.ndarray:
    """A buffer's bytes as a uint8 array (no copy where it is contiguous)."""
    if isinstance(buf, np.ndarray):
        return np.ascontiguousarray(buf).view(np.uint8).reshape(-1)
    return np.frombuffer(memoryview(buf).cast("B"), np.uint8)


@dataclass
class _Stacked:
    """Several buffers' record slots stacked into one array, their headers checked together."""

    #: the headers (``HEADER_DTYPE``, one a buffer)
    hdr: np.ndarray
    #: per buffer: its (virtual) programs, slots per program, lanes per program, record slots held
    P: np.ndarray
    C: np.ndarray
    lanes: np.ndarray
    n_rec: np.ndarray
    #: per program of every buffer, one buffer after another: the slots it holds (a packed
    #: buffer's kept-slot counts; a dense buffer's capacity); None when every buffer is dense and
    #: of one layout (``C`` slots each)
    kept: np.ndarray | None
    #: the record slots (``RECORD_DTYPE``), stacked
    rec: np.ndarray
    #: the dropped counts (uint32 per program), stacked
    dropped: np.ndarray
    #: ``blame(check)`` raises :class:`BufferDecodeError` for the first buffer ``check`` refuses
    blame: Callable

    @property
    def layout(self) -> int:
        return int(self.hdr["layout"][0])

    def kept_slots(self) -> np.ndarray:
        """Slots per program of every buffer (``kept``, made for dense buffers of one layout)."""
        if self.kept is None:
            return np.full(int(self.P.sum()), int(self.C[0]) if self.C.size else 0, np.int64)
        return self.kept


def stack_buffers(mvs: list, *, mixed: bool = False) -> _Stacked:
    """Several buffers' headers checked together and their record slots stacked.

    Args:
        mvs: the buffers, as uint8 arrays.
        mixed: buffers may differ in programs, slots and layout (dense or packed); else they
            must share one.

    Raises:
        BufferDecodeError: a buffer is bad (the message :func:`decode_buffer` gives for it alone).
        ValueError: the buffers do not share one layout (and ``mixed`` is False).
    """
    K = len(mvs)
    sizes = np.array([m.size for m in mvs], np.int64)

    def blame(check) -> None:
        for i, m in enumerate(mvs):  # the first buffer that fails ``check``, with its own message
            try:
                check(m)
            except DecodeError as e:
                raise BufferDecodeError(str(e), i) from None

    if (sizes < schema.HEADER_BYTES).any():
        blame(read_header)
    hdr = np.frombuffer(b"".join([m[: schema.HEADER_BYTES].tobytes() for m in mvs]), schema.HEADER_DTYPE)
    version, layout, P_, C_ = hdr["version"], hdr["layout"], hdr["n_programs"].astype(np.int64), hdr["capacity"].astype(np.int64)
    ok = ((hdr["magic"] == schema.MAGIC) & (version >= 1) & (version <= schema.FORMAT_VERSION) & (hdr["header_bytes"] == schema.HEADER_BYTES)
          & (hdr["record_bytes"] == schema.RECORD_BYTES) & ((layout == schema.LAYOUT_DENSE) | ((layout == schema.LAYOUT_PACKED) & (version >= 2)))
          & np.isin(hdr["timer"], [int(t) for t in schema.TimerKind]) & (C_ > 0) & (P_ > 0) & (hdr["tick_hz"] >= MIN_TICK_HZ) & (hdr["tick_hz"] <= MAX_TICK_HZ)
          & (hdr["grid"].astype(np.int64).prod(axis=1) == P_) & (hdr["lanes"] <= schema.MAX_LANES)
          & (hdr["grid"][:, 0].astype(np.int64) % np.maximum(hdr["lanes"], 1) == 0))
    if not ok.all():
        blame(read_header)
    one = bool((P_ == P_[0]).all() and (C_ == C_[0]).all() and (layout == layout[0]).all())
    if not one and not mixed:
        raise ValueError("buffers of different layouts cannot be decoded together")
    packed = layout == schema.LAYOUT_PACKED
    # (a packed buffer's slot counts are padded to 8 bytes: ``schema.packed_counts_bytes``)
    hb = np.where(packed, schema.HEADER_BYTES + (P_ * 4 + 7) // 8 * 8, schema.HEADER_BYTES)
    if packed.any():
        if (sizes < hb).any():
            blame(split_head)
        counts = [m[schema.HEADER_BYTES : schema.HEADER_BYTES + 4 * p] if k else None
                  for m, p, k in zip(mvs, P_.tolist(), packed.tolist())]
        if one:
            kept = np.concatenate(counts).view("<u4")
            if int(kept.max()) > int(C_[0]):
                blame(split_head)
            n_rec = kept.reshape(K, -1).sum(axis=1, dtype=np.int64)
        else:
            per = [c.view("<u4") if c is not None else np.full(p, cap, np.uint32) for c, p, cap in zip(counts, P_.tolist(), C_.tolist())]
            kept = np.concatenate(per)
            if (kept > np.repeat(C_, P_)).any():
                blame(split_head)
            n_rec = np.array([c.sum(dtype=np.int64) for c in per], np.int64)
    else:
        kept = None if one else np.repeat(C_, P_).astype(np.uint32)
        n_rec = P_ * C_
    if (sizes < hb + n_rec * schema.RECORD_BYTES + P_ * schema.DROPPED_BYTES).any():
        blame(_records)
    rb = schema.RECORD_BYTES
    hb_, n_ = hb.tolist(), n_rec.tolist()
    if K == 1:
        rec = np.frombuffer(mvs[0], schema.RECORD_DTYPE, count=n_[0], offset=hb_[0])
    else:
        rec = np.concatenate([m[h : h + n * rb] for m, h, n in zip(mvs, hb_, n_)]).view(schema.RECORD_DTYPE)
    dropped = np.concatenate([m[h + n * rb : h + n * rb + 4 * p] for m, h, n, p in zip(mvs, hb_, n_, P_.tolist())]).view("<u4")
    return _Stacked(hdr=hdr, P=P_, C=C_, lanes=np.maximum(hdr["lanes"].astype(np.int64), 1), n_rec=n_rec, kept=kept, rec=rec,
                    dropped=dropped, blame=blame)


#: A record's tag, low byte: its kind (bits 0-3) and flags (bits 4-7).
_TAG_BYTE = 16
assert schema.RECORD_DTYPE.fields["tag"][1] == _TAG_BYTE
_DETAIL_BIT = int(EventFlag.DETAIL) << schema.KIND_BITS
#: Kinds of events (not EMPTY, not DETAIL): 1 .. _LAST_KIND.
_LAST_KIND = max(int(k) for k in EventKind if k != EventKind.DETAIL)
assert all(_VALID_KINDS[1 : _LAST_KIND + 1]) and not _VALID_KINDS[_LAST_KIND + 1 : int(EventKind.DETAIL)].any()


@dataclass
class Slots:
    """Where the events of stacked buffers are (:func:`scan`): no record read twice."""

    #: per event, its slot among the stacked slots (int64, ascending)
    main: np.ndarray
    #: per program of every buffer, the events it holds
    per_program: np.ndarray
    #: per buffer, the events it holds (int64)
    counts: np.ndarray
    #: per stacked slot, whether it holds an event with a DETAIL record after it
    detailed: np.ndarray


def scan(st: _Stacked) -> Slots | None:
    """The events among stacked record slots, every rule of a well-formed buffer checked on all
    slots in a few passes: known kinds; every DETAIL record right after an event of the same
    program whose flags say one follows, and every such event followed by one. None when a rule
    is broken (:func:`_check_events` on each buffer then says where, in :func:`decode_buffer`'s words).

    Times are checked where they are read (:func:`times_ok`).
    """
    rec = st.rec
    R = rec.shape[0]
    kept = st.kept_slots()
    if R == 0:
        z = np.zeros(0, np.int64)
        return Slots(z, np.zeros(kept.size, np.int64), np.zeros(st.P.size, np.int64), np.zeros(0, bool))
    tb = rec.view(np.uint8).reshape(R, schema.RECORD_BYTES)[:, _TAG_BYTE]
    kind = tb & 0xF
    # (unsigned arithmetic wraps: a kind of 6 .. 14 minus 6 is below 9; 0 and 15 minus 1 are 255 and 14)
    if (np.subtract(kind, _LAST_KIND + 1, dtype=np.uint8) < int(EventKind.DETAIL) - _LAST_KIND - 1).any():
        return None
    is_event = np.subtract(kind, 1, dtype=np.uint8) < _LAST_KIND
    # events whose flags say a DETAIL record follows: tag bits 0-4 are a kind 1..5 and the flag
    detailed = np.subtract(tb & (0xF | _DETAIL_BIT), _DETAIL_BIT | 1, dtype=np.uint8) < _LAST_KIND
    is_detail = kind == int(EventKind.DETAIL)
    ends = np.cumsum(kept, dtype=np.int64)
    starts = ends - kept
    full = kept > 0
    if is_detail[0] or detailed[-1] or not np.array_equal(is_detail[1:], detailed[:-1]):
        return None
    # (and not across programs: no DETAIL record opens a program, no detailed event closes one)
    if is_detail[starts[full]].any() or detailed[ends[full] - 1].any():
        return None
    main = np.flatnonzero(is_event)
    upto = np.searchsorted(main, ends)
    per_program = np.diff(upto, prepend=0)
    counts = np.diff(upto[np.cumsum(st.P) - 1], prepend=0) if st.P.size else np.zeros(0, np.int64)
    return Slots(main=main, per_program=per_program, counts=counts, detailed=detailed)


def times_ok(t0: np.ndarray, t1: np.ndarray) -> bool:
    """Whether events' start and end ticks (int64 views of the records' unsigned fields) are times
    at all: below 2^63 ticks, the end not before the start (else :func:`decode_buffer` refuses the buffer)."""
    return not (t0.size and (int(t0.min()) < 0 or bool(np.less(t1, t0).any())))


def gather_records(rec: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Whole 32-byte records at slots ``at`` (ascending), as one contiguous array of records:
    one copy per record, which reading any field of them afterwards runs through in order (a
    structured array's fields gathered one by one read every record once per field)."""
    R = rec.shape[0]
    return np.take(rec.view(np.uint64).reshape(R, 4), at, axis=0).view(schema.RECORD_DTYPE).reshape(-1)


def program_columns(st: _Stacked, per_program: np.ndarray, *, lanes: bool, dtype=np.int64) -> tuple[np.ndarray, np.ndarray | None]:
    """Per event (in slot order), its program within its launch and, with ``lanes``, its lane
    (``ktrace.schema``: virtual program v of a buffer of L lanes is lane v % L of program v // L;
    int32 zeros where every buffer has one lane). Made per program, then repeated over its events."""
    P, L = st.P, st.lanes
    v = np.arange(int(P.sum()), dtype=dtype) - np.repeat((np.cumsum(P) - P).astype(dtype), P)
    if (L == 1).all():
        return np.repeat(v, per_program), (np.zeros(int(per_program.sum()), np.int32) if lanes else None)
    Lp = np.repeat(L.astype(dtype), P)
    return np.repeat(v // Lp, per_program), (np.repeat(v % Lp, per_program) if lanes else None)


def decode_columns(bufs, columns=COLUMNS, *, records: bool = False, mixed: bool = False):
    """Decode several launches' buffers into plain columns, in one pass.

    What the trace writers use: only the columns asked for are gathered (``kind``, ``flags``,
    ``start`` and ``end`` always are), each a plain array (no structured table), and the
    buffers are stacked and decoded as one, their headers checked together, so a batch of
    small launches costs about what one large launch does. Rows come buffer by buffer, each in program order, exactly as
    :func:`decode_buffer` gives them; ``arg2``..``arg5`` are 0 for events without a DETAIL
    record, and counters' ``arg0`` holds their 64-bit value.

    Args:
        bufs: whole buffers (bytes-like).
        columns: names from :data:`COLUMNS` (and ``index``: each row's record among the stacked
            records). ``program`` is the program within its own launch.
        records: also return the stacked record slots (``RECORD_DTYPE``), what ``index`` points into.
        mixed: the buffers may differ in grid, slots and layout (else they must share one).

    Returns:
        ``(headers, counts, cols)``, or ``(headers, counts, cols, records)``: each buffer's header
        (``written``/``dropped`` filled in), the number of events of each (int64), the columns.

    Raises:
        BufferDecodeError: a buffer is bad (``index`` names it; the message is the one
            :func:`decode_buffer` gives for that buffer alone).
        ValueError: the buffers do not share one layout (and ``mixed`` is False).
    """
    mvs = [np.frombuffer(memoryview(b).cast("B"), np.uint8) for b in bufs]
    K = len(mvs)
    if not K:
        cols = {c: np.zeros(0, np.int64) for c in set(columns) | {"kind", "flags", "start", "end"}}
        return ([], np.zeros(0, np.int64), cols, np.zeros(0, schema.RECORD_DTYPE)) if records else ([], np.zeros(0, np.int64), cols)
    st = stack_buffers(mvs, mixed=mixed)
    sl = scan(st)
    if sl is None:
        st.blame(_check_events)
        raise DecodeError("records inconsistent across the buffers decoded together: corrupt buffer")
    main, rec = sl.main, st.rec
    ev = gather_records(rec, main)
    t0, t1 = np.ascontiguousarray(ev["t0"]).view(np.int64), np.ascontiguousarray(ev["t1"]).view(np.int64)
    if not times_ok(t0, t1):
        st.blame(_check_events)
        raise DecodeError("an event's times are impossible: corrupt buffer")
    n = main.size
    tag = ev["tag"]
    kind = (tag & 0xF).astype(np.uint8)
    cols: dict[str, np.ndarray] = {"kind": kind, "flags": ((tag >> schema.KIND_BITS) & 0xF).astype(np.uint8), "start": t0, "end": t1}
    want = set(columns)
    if want & {"program", "lane", "slot"}:
        prog, lane = program_columns(st, sl.per_program, lanes="lane" in want)
        if "program" in want:
            cols["program"] = prog
        if lane is not None:
            cols["lane"] = lane
        if "slot" in want:
            starts = np.cumsum(st.kept_slots(), dtype=np.int64)
            starts -= st.kept_slots()
            cols["slot"] = main - np.repeat(starts, sl.per_program)
    if "region" in want:
        cols["region"] = tag >> schema.REGION_SHIFT
    if "hw" in want:
        cols["hw"] = np.ascontiguousarray(ev["hw"])
    if "arg0" in want or "arg1" in want:
        cols["arg0"], cols["arg1"] = _counter_values(kind, np.ascontiguousarray(ev["arg0"]), np.ascontiguousarray(ev["arg1"]))
    detail = [c for c in ("arg2", "arg3", "arg4", "arg5") if c in want]
    if detail:
        wi = np.flatnonzero(sl.detailed[main])  # the events with a DETAIL record: the slot after each
        d = gather_records(rec, main[wi] + 1).view(schema.DETAIL_DTYPE)
        for c, f in (("arg2", "x0"), ("arg3", "x1"), ("arg4", "x2"), ("arg5", "x3")):
            if c in detail:
                col = cols[c] = np.zeros(n, np.int64)
                col[wi] = d[f]
    if "index" in want:
        cols["index"] = main
    hdr, counts, P = st.hdr, sl.counts, st.P
    drops = np.add.reduceat(st.dropped.astype(np.int64), np.cumsum(P) - P).tolist() if st.dropped.size else [0] * K
    timer = [schema.TimerKind(int(t)) for t in hdr["timer"].tolist()]
    out_headers = [
        schema.Header(timer=t, tick_hz=hz, capacity=c, n_programs=p, grid=tuple(g), written=k, dropped=d, version=v, layout=lay,
                      lanes=ln)
        for t, hz, c, p, g, k, d, v, lay, ln in zip(timer, hdr["tick_hz"].tolist(), st.C.tolist(), P.tolist(), hdr["grid"].tolist(),
                                                    counts.tolist(), drops, hdr["version"].tolist(), hdr["layout"].tolist(),
                                                    st.lanes.tolist())
    ]
    return (out_headers, counts, cols, rec) if records else (out_headers, counts, cols)


def count_kinds(buf) -> np.ndarray:
    """How many records of each kind a launch's buffer holds (without decoding it).

    Reads the header (validated as :func:`decode_buffer` does) and the tag of every slot: about
    a twentieth of the cost of decoding. Analyses use it to size their columns before decoding
    the launches into them.

    Args:
        buf: the whole buffer as bytes-like (bytes, memoryview, numpy uint8 array).

    Returns:
        int64 array of 16 counts indexed by ``EventKind`` over the launch's programs x slots
        (``[EMPTY]``: unused slots, those a packed buffer leaves out included; ``[DETAIL]``:
        DETAIL records; the events :func:`decode_buffer` returns are the rest).

    Raises:
        DecodeError: the header is bad or the buffer shorter than it says.
    """
    rec, _, header, _ = _records(buf)
    out = np.bincount(rec["tag"] & 0xF, minlength=16).astype(np.int64)
    out[EventKind.EMPTY] += header.n_programs * header.capacity - rec.shape[0]
    return out


def count_kinds_of(bufs) -> np.ndarray:
    """The records of each kind over several buffers of one layout (:func:`count_kinds` summed,
    but ``[EMPTY]``: the slots held only), counted together.

    Raises:
        DecodeError: a buffer is bad; ValueError: they do not share one layout.
    """
    st = stack_buffers([_buffer_bytes(b) for b in bufs])
    return np.bincount(st.rec["tag"] & 0xF, minlength=16).astype(np.int64)


def empty_events() -> np.ndarray:
    return np.zeros(0, schema.EVENT_DTYPE)


#: Longest a launch's events may span: no kernel runs for an hour (a hang ends at its waits'
#: bounds, seconds). Events spanning more cannot be real times (a zeroed or stale record among real ones).
MAX_LAUNCH_NS = 3600 * 10**9

_PEER_KINDS = tuple(int(k) for k, names in schema.ARG_NAMES.items() if names[0] == "peer")  # WAIT, NOTIFY
assert len(_PEER_KINDS) == 2, _PEER_KINDS


def impossible_times(buf, world_size: int, *, raw: bool = False) -> str | None:
    """Why a launch's events cannot be real, or None (see :func:`screen_counts`)."""
    return screen_counts(buf, world_size, raw=raw)[1]


def screen_counts(buf, world_size: int, *, raw: bool = False) -> tuple[np.ndarray, str | None]:
    """:func:`count_kinds` of a launch's buffer, and why its events cannot be real, in words (None
    when they can): one pass over the tags for both, what an analysis reads before decoding.

    A buffer that decodes can still hold events no probe records: every time 0 (a launch whose
    records were zeroed, or never written but marked), events spanning more than
    :data:`MAX_LAUNCH_NS`, or a wait or notify naming a peer outside the world size. Analyses
    leave such a launch out (``ktrace.events.impossible_launches``) rather than turn it into
    figures. Reads the tags, times and first argument of the used slots only. ``raw``: the launch
    recorded raw addresses (``ktrace.auto``), whose waits and notifies may name peer -1 (not
    known on the device; the collector finds it from the address).

    Raises:
        DecodeError: the buffer does not decode (as :func:`decode_buffer` says).
    """
    return screen_batch([buf], world_size, raw=[raw])[0]


def screen_batch(bufs, world_size: int, *, raw=None) -> list[tuple[np.ndarray, str | None]]:
    """:func:`screen_counts` of several launches' buffers at once: the reductions run over the
    batch's record slots together (segment by segment), so that a report over thousands of small
    launches does not pay numpy's per-call cost a dozen times per launch.

    Raises:
        DecodeError: a buffer does not decode (as :func:`decode_buffer` says).
    """
    nb = len(bufs)
    if not nb:
        return []
    try:  # a batch of one layout (what ``ktrace.events.make_batches`` gives): headers read together
        st = stack_buffers([_buffer_bytes(b) for b in bufs])
        hdr, sizes, rec = st.hdr, st.n_rec, st.rec
        slots = st.P * st.C
        tick_hz = hdr["tick_hz"].tolist()
    except (DecodeError, ValueError):  # (one at a time: the first bad buffer raises its own error)
        parts = [_records(b) for b in bufs]
        sizes = np.array([p[0].shape[0] for p in parts], np.int64)
        # (stacked as raw bytes: a buffer's records sit at any byte offset, and numpy copies
        # unaligned structured records field by field, several times slower than the bytes)
        rec = np.concatenate([p[0].view(np.uint8) for p in parts]).view(schema.RECORD_DTYPE)
        slots = np.array([p[2].n_programs * p[2].capacity for p in parts], np.int64)
        tick_hz = [p[2].tick_hz for p in parts]
    tag = rec["tag"]
    kind = (tag & 0xF).astype(np.uint8)
    # each slot's (launch, kind) as one index: launch * 16 + kind
    counts = np.bincount(np.repeat(np.arange(0, 16 * nb, 16, dtype=np.int64), sizes) + kind, minlength=nb * 16).reshape(nb, 16)
    counts[:, EventKind.EMPTY] += slots - sizes
    n_main = counts.sum(axis=1) - counts[:, EventKind.EMPTY] - counts[:, EventKind.DETAIL]
    main = (kind != EventKind.EMPTY) & (kind != EventKind.DETAIL)
    s0, s1 = rec["t0"].view(np.int64), rec["t1"].view(np.int64)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    # per launch (segments in order; a launch without slots gets the reductions' identities)
    at = np.cumsum(sizes) - sizes
    has = sizes > 0

    def per(ufunc, x, empty):
        out = np.full(nb, empty, x.dtype)
        if has.any():
            out[has] = ufunc.reduceat(x, at[has])
        return out

    first = per(np.minimum, np.where(main, s0, big), big)
    last = per(np.maximum, np.where(main, s1, small), small)
    backwards = per(np.add, (main & (s1 < s0)).astype(np.int64), 0)
    peer = rec["arg0"]
    # (an mbarrier hand-off, LOCAL, names no peer: it stays inside its program; judged at the
    # waits and notifies only)
    hand = np.flatnonzero((kind == _PEER_KINDS[0]) | (kind == _PEER_KINDS[1]))
    p_hand = peer[hand]
    lowest = 0
    if raw is not None and any(raw):  # (raw launches may name peer -1: not known on the device)
        lowest = -np.asarray(raw, np.int64)[np.searchsorted(at, hand, side="right") - 1]
    bad_hand = ~is_local((tag[hand] >> schema.KIND_BITS) & 0xF) & ((p_hand < lowest) | (p_hand >= world_size))
    bad_at = hand[bad_hand]  # the slots naming a peer outside the world, in order
    n_bad_peer = np.bincount(np.searchsorted(at, bad_at, side="right") - 1, minlength=nb) if bad_at.size else np.zeros(nb, np.int64)
    out = []
    for i, hz in enumerate(tick_hz):
        f, l, n = int(first[i]), int(last[i]), int(n_main[i])
        if backwards[i]:
            why = None  # (decoding refuses it, saying where)
        else:
            bad = int(peer[bad_at[np.searchsorted(bad_at, at[i])]]) if n_bad_peer[i] else None
            why = launch_verdict(n, f, l, hz, bad, world_size)
        out.append((counts[i], why))
    return out


def launch_verdict(n: int, first: int, last: int, tick_hz: int, bad_peer: int | None, world_size: int) -> str | None:
    """Why a launch's events cannot be real (:func:`screen_counts`), in words, or None.

    Args:
        n: its events; first, last: its first start and last end (ticks; a time of 2^63 ticks
            or more is negative here, and decoding refuses it, saying where: not judged here).
        tick_hz: its timer's rate.
        bad_peer: the first peer outside the world size that a (non-local) wait or notify names.
        world_size: the capture's.
    """
    if not n or first < 0 or last < 0:
        return None  # (nothing to judge, or decoding refuses it)
    if last == 0:
        return f"every one of its {n} events has time 0"
    if (last - first) * 1e9 / tick_hz > MAX_LAUNCH_NS:
        return f"its events span {(last - first) / tick_hz:.3g} s (times 0 or stale among real ones)"
    if bad_peer is not None:
        return f"a wait or notify names peer {bad_peer}, outside world size {world_size}"
    return None
