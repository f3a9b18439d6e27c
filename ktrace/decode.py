"""Decode a raw event buffer (bytes copied from the device once) into a numpy table.

No Python loop runs per event: every step is a vectorised numpy operation over the whole
buffer. Any input that is not a well-formed buffer raises :class:`DecodeError` with a message
saying what is wrong and where; nothing else escapes.
"""

from __future__ import annotations

from dataclasses import dataclass

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
        a0 = rec["arg0"][main]
        a1 = rec["arg1"][main]
        is_counter = mkind == EventKind.COUNTER
        if is_counter.any():
            # Counters carry one 64-bit value split over arg0 (low half) and arg1 (high half).
            a0 = a0.astype(np.int64)
            a1 = a1.astype(np.int64)
            a0, a1 = np.where(is_counter, (a0 & 0xFFFFFFFF) | (a1 << 32), a0), np.where(is_counter, 0, a1)
        out["arg0"], out["arg1"] = a0, a1
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


def _stack(mvs: list):
    """The headers (``HEADER_DTYPE``, one a buffer), packed kept-slot counts (None: dense), record
    slots per buffer, the record slots stacked (``RECORD_DTYPE``), the dropped counts stacked,
    and ``blame(check)`` (raises :class:`BufferDecodeError` for the first buffer ``check``
    refuses) of several buffers of one layout, their headers checked together.

    Raises:
        BufferDecodeError: a buffer is bad (the message :func:`decode_buffer` gives for it alone).
        ValueError: the buffers do not share one layout.
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
    P, C, lay = int(P_[0]), int(C_[0]), int(layout[0])
    if (P_ != P).any() or (C_ != C).any() or (layout != lay).any():
        raise ValueError("buffers of different layouts cannot be decoded together")
    packed = lay == schema.LAYOUT_PACKED
    if packed:
        hb = schema.HEADER_BYTES + schema.packed_counts_bytes(P)
        if (sizes < hb).any():
            blame(split_head)
        kept = np.concatenate([m[schema.HEADER_BYTES : schema.HEADER_BYTES + 4 * P] for m in mvs]).view("<u4")
        if int(kept.max()) > C:
            blame(split_head)
        n_rec = kept.reshape(K, P).sum(axis=1, dtype=np.int64)
    else:
        hb, kept = schema.HEADER_BYTES, None
        n_rec = np.full(K, P * C, np.int64)
    if (sizes < hb + n_rec * schema.RECORD_BYTES + P * schema.DROPPED_BYTES).any():
        blame(_records)
    rb = schema.RECORD_BYTES
    if K == 1:
        rec = np.frombuffer(mvs[0], schema.RECORD_DTYPE, count=int(n_rec[0]), offset=hb)
    else:
        rec = np.concatenate([m[hb : hb + n * rb] for m, n in zip(mvs, n_rec.tolist())]).view(schema.RECORD_DTYPE)
    dropped = np.concatenate([m[hb + n * rb : hb + n * rb + 4 * P] for m, n in zip(mvs, n_rec.tolist())]).view("<u4")
    return hdr, kept, n_rec, rec, dropped, blame


def decode_columns(bufs, columns=COLUMNS, *, records: bool = False):
    """Decode several launches' buffers into plain columns, in one pass.

    What the trace writers use: only the columns asked for are gathered (``kind``, ``flags``,
    ``start`` and ``end`` always are), each a plain array (no structured table), and the
    buffers are stacked and decoded as one, their headers checked together, so a batch of
    small launches costs about what one large launch does. Rows come buffer by buffer, each in
    program order, exactly as :func:`decode_buffer` gives them; ``arg2``..``arg5`` are 0 for
    events without a DETAIL record, and counters' ``arg0`` holds their 64-bit value.

    Args:
        bufs: whole buffers (bytes-like), all with the same number of programs and slots, all
            dense or all packed.
        columns: names from :data:`COLUMNS` (and ``index``: each row's record among the stacked
            records). ``program`` is the program within its own launch.
        records: also return the stacked record slots (``RECORD_DTYPE``), what ``index`` points into.

    Returns:
        ``(headers, counts, cols)``, or ``(headers, counts, cols, records)``: each buffer's header
        (``written``/``dropped`` filled in), the number of events of each (int64), the columns.

    Raises:
        BufferDecodeError: a buffer is bad (``index`` names it; the message is the one
            :func:`decode_buffer` gives for that buffer alone).
        ValueError: the buffers do not share one layout.
    """
    mvs = [np.frombuffer(memoryview(b).cast("B"), np.uint8) for b in bufs]
    K = len(mvs)
    if not K:
        cols = {c: np.zeros(0, np.int64) for c in set(columns) | {"kind", "flags", "start", "end"}}
        return ([], np.zeros(0, np.int64), cols, np.zeros(0, schema.RECORD_DTYPE)) if records else ([], np.zeros(0, np.int64), cols)
    hdr, kept, n_rec, rec, dropped, blame = _stack(mvs)
    P, C, lay, version = int(hdr["n_programs"][0]), int(hdr["capacity"][0]), int(hdr["layout"][0]), hdr["version"]
    want = set(columns) | {"program"}  # the launch of each row comes from its stacked program
    try:
        cols = _events(rec, _Slots(C, kept), want)
    except DecodeError:
        blame(_check_events)
        raise
    stacked = cols["program"]
    counts = np.bincount(stacked // P, minlength=K).astype(np.int64) if K > 1 else np.array([stacked.size], np.int64)
    if K > 1 and ("program" in columns or "slot" in columns or "lane" in columns):
        cols["program"] = stacked % P
    lanes = np.maximum(hdr["lanes"].astype(np.int64), 1)
    if (lanes == 1).all():  # (one lane a program: the program is as stored, every lane 0)
        if "lane" in columns:
            cols["lane"] = np.zeros(cols["program"].size, np.int32)
    elif "lane" in columns or "program" in columns:
        # lane buffers: virtual program v is lane v % L of program v // L (``ktrace.schema``)
        per_row = lanes[0] if (lanes == lanes[0]).all() else np.repeat(lanes, counts)
        cols["program"], lane = np.divmod(cols["program"], per_row)
        if "lane" in columns:
            cols["lane"] = lane
    del cols["_detail_rows"]
    if "program" not in columns:
        del cols["program"]
    if "slot" not in columns:
        cols.pop("slot", None)
    drops = dropped.reshape(K, P).sum(axis=1, dtype=np.int64).tolist()
    timer = [schema.TimerKind(int(t)) for t in hdr["timer"].tolist()]
    out_headers = [
        schema.Header(timer=t, tick_hz=hz, capacity=C, n_programs=P, grid=tuple(g), written=k, dropped=d, version=v, layout=lay,
                      lanes=ln)
        for t, hz, g, k, d, v, ln in zip(timer, hdr["tick_hz"].tolist(), hdr["grid"].tolist(), counts.tolist(), drops, version.tolist(),
                                         lanes.tolist())
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
        hdr, _, sizes, rec, _, _ = _stack([_buffer_bytes(b) for b in bufs])
        slots = hdr["n_programs"].astype(np.int64) * hdr["capacity"].astype(np.int64)
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
        why = None
        f, l, n = int(first[i]), int(last[i]), int(n_main[i])
        if not n or f < 0 or l < 0 or backwards[i]:
            pass  # (nothing to judge, or decoding refuses it, saying where)
        elif l == 0:
            why = f"every one of its {n} events has time 0"
        elif (l - f) * 1e9 / hz > MAX_LAUNCH_NS:
            why = f"its events span {(l - f) / hz:.3g} s (times 0 or stale among real ones)"
        elif n_bad_peer[i]:
            j = int(bad_at[np.searchsorted(bad_at, at[i])])
            why = f"a wait or notify names peer {int(peer[j])}, outside world size {world_size}"
        out.append((counts[i], why))
    return out
    main = (kind != EventKind.EMPTY) & (kind != EventKind.DETAIL)
    # masked reductions over the record slots (no gathers: this runs on every launch a report reads)
    s0, s1 = rec["t0"].view(np.int64), rec["t1"].view(np.int64)
    first = int(np.min(s0, where=main, initial=np.iinfo(np.int64).max))
    last = int(np.max(s1, where=main, initial=np.iinfo(np.int64).min))
    if first < 0 or last < 0 or np.any(main & (s1 < s0)):
        return None  # (decoding refuses it, saying where)
    if last == 0:
        return f"every one of its {n} events has time 0"
    span_ns = (last - first) * 1e9 / header.tick_hz
    if span_ns > MAX_LAUNCH_NS:
        return f"its events span {span_ns / 1e9:.3g} s (times 0 or stale among real ones)"
    peer = rec["arg0"]
    # (an mbarrier hand-off, LOCAL, names no peer: it stays inside its program)
    local = is_local((rec["tag"] >> schema.KIND_BITS) & 0xF)
    bad = ((kind == _PEER_KINDS[0]) | (kind == _PEER_KINDS[1])) & ~local & ((peer < 0) | (peer >= world_size))
    if bad.any():
        return f"a wait or notify names peer {int(peer[np.argmax(bad)])}, outside world size {world_size}"
    return None
