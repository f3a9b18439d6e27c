"""Decode a raw event buffer (bytes copied from the device once) into a numpy table.

No Python loop runs per event: every step is a vectorised numpy operation over the whole
buffer. Any input that is not a well-formed buffer raises :class:`DecodeError` with a message
saying what is wrong and where; nothing else escapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import schema
from .schema import EventFlag, EventKind

_VALID_KINDS = np.zeros(16, dtype=bool)
_VALID_KINDS[[int(k) for k in EventKind if k != EventKind.EMPTY]] = True


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
    h = np.frombuffer(mv, schema.HEADER_DTYPE, count=1)[0]
    if int(h["magic"]) != schema.MAGIC:
        raise DecodeError(
            f"bad magic 0x{int(h['magic']):08x} (expected 0x{schema.MAGIC:08x}, b'KTRC'): not a ktrace event buffer"
        )
    version = int(h["version"])
    if version > schema.FORMAT_VERSION:
        raise DecodeError(
            f"buffer format version {version} is newer than this ktrace understands ({schema.FORMAT_VERSION}): upgrade ktrace"
        )
    if version < 1:
        raise DecodeError(f"buffer format version {version} is not valid")
    if int(h["header_bytes"]) != schema.HEADER_BYTES or int(h["record_bytes"]) != schema.RECORD_BYTES:
        raise DecodeError(
            f"header says {int(h['header_bytes'])}-byte header and {int(h['record_bytes'])}-byte records; "
            f"version {version} uses {schema.HEADER_BYTES} and {schema.RECORD_BYTES}: corrupt header"
        )
    try:
        timer = schema.TimerKind(int(h["timer"]))
    except ValueError:
        raise DecodeError(f"unknown timer kind {int(h['timer'])} in header") from None
    grid = tuple(int(g) for g in h["grid"])
    capacity, n_programs = int(h["capacity"]), int(h["n_programs"])
    if capacity <= 0 or n_programs <= 0:
        raise DecodeError(f"header has capacity {capacity} and {n_programs} programs: corrupt header")
    if grid[0] * grid[1] * grid[2] != n_programs:
        raise DecodeError(f"header grid {grid} does not hold its {n_programs} programs: corrupt header")
    if int(h["tick_hz"]) <= 0:
        raise DecodeError("header tick rate is 0: corrupt header")
    return schema.Header(
        timer=timer,
        tick_hz=int(h["tick_hz"]),
        capacity=capacity,
        n_programs=n_programs,
        grid=grid,  # type: ignore[arg-type]
        written=int(h["written"]),
        dropped=int(h["dropped"]),
        version=version,
    )


def _records(buf) -> tuple[np.ndarray, np.ndarray, schema.Header]:
    """The header, the record slots and the per-program dropped counts of one buffer (checked)."""
    if isinstance(buf, np.ndarray):
        buf = np.ascontiguousarray(buf).view(np.uint8).reshape(-1)
    mv = memoryview(buf).cast("B")
    header = read_header(mv)
    P, C = header.n_programs, header.capacity
    need = header.nbytes
    if mv.nbytes < need:
        raise DecodeError(
            f"buffer is {mv.nbytes} bytes but its header ({P} programs x {C} slots) needs {need}: truncated"
        )
    rec = np.frombuffer(mv, schema.RECORD_DTYPE, count=P * C, offset=schema.HEADER_BYTES)
    dropped = np.frombuffer(mv, "<u4", count=P, offset=schema.dropped_offset(P, C))
    return rec, dropped, header


#: The columns :func:`decode_columns` can return (names and meanings of ``schema.EVENT_DTYPE``;
#: ``index``: the slot of the event's record among all the slots decoded together, for reading
#: further fields of a few rows straight from the records).
COLUMNS = ("program", "slot", "kind", "flags", "region", "hw", "start", "end", "arg0", "arg1", "arg2", "arg3", "arg4", "arg5")


def _events(rec: np.ndarray, C: int, want) -> dict[str, np.ndarray]:
    """The events of ``rec`` (programs of ``C`` slots each, in order), as the columns ``want`` names.

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
        raise DecodeError(
            f"record of program {bad // C}, slot {bad % C} has unknown kind {int(kind[bad])}: corrupt buffer"
        )

    is_detail = ukind == EventKind.DETAIL
    has_detail = used.size != 0 and bool(is_detail.any())
    mi = np.flatnonzero(~is_detail) if has_detail else None  # positions of the events among the used slots
    main = used[mi] if has_detail else used
    # Every DETAIL record continues the event in the slot before it, in the same program.
    if has_detail:
        di = np.flatnonzero(is_detail)
        det = used[di]
        prev = np.maximum(di - 1, 0)  # the used slot before it: it must be the slot det - 1
        orphan = (det % C == 0) | (di == 0) | (used[prev] != det - 1)
        orphan |= ((uflags[prev] & EventFlag.DETAIL) == 0) | is_detail[prev]
        if orphan.any():
            bad = det[orphan][0]
            raise DecodeError(
                f"DETAIL record at program {bad // C}, slot {bad % C} does not follow an event that has one: corrupt buffer"
            )
    mflags = uflags[mi] if has_detail else uflags
    wi = np.flatnonzero(mflags & EventFlag.DETAIL)  # positions among the events
    wants = main[wi]
    if wants.size:
        nxt = wants + 1
        missing = (nxt % C == 0) | (kind[np.minimum(nxt, n_slots - 1)] != EventKind.DETAIL)
        if missing.any():
            bad = wants[missing][0]
            raise DecodeError(
                f"event at program {bad // C}, slot {bad % C} says a DETAIL record follows, but none does: corrupt buffer"
            )
    t0, t1 = rec["t0"][main], rec["t1"][main]
    starts_after_end = t1 < t0
    if starts_after_end.any():
        bad = main[starts_after_end][0]
        raise DecodeError(f"event at program {bad // C}, slot {bad % C} ends before it starts: corrupt buffer")

    n = main.size
    mkind = ukind[mi] if has_detail else ukind
    out: dict[str, np.ndarray] = {}
    if "program" in want or "slot" in want:
        prog = main // C
        out["program"] = prog
        out["slot"] = main - prog * C
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
    rec, dropped, header = _records(buf)
    cols = _events(rec, header.capacity, ("program", "region", "hw", "arg0", "arg1"))
    n = cols["kind"].size
    ev = np.zeros(n, schema.EVENT_DTYPE)  # (zero-filling is cheaper than writing the detail columns)
    ev["rank"] = rank
    ev["launch"] = launch
    for c in ("program", "slot", "kind", "flags", "region", "hw", "start", "end", "arg0", "arg1"):
        ev[c] = cols[c]
    wi = cols["_detail_rows"]
    if wi.size:
        drec = rec.view(schema.DETAIL_DTYPE)  # field by field, as above
        at = cols["program"][wi] * header.capacity + cols["slot"][wi] + 1
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
    )
    return DecodedBuffer(header=header, events=ev, dropped_per_program=dropped)


class BufferDecodeError(DecodeError):
    """A :class:`DecodeError` in one of several buffers decoded together; ``index`` says which."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


def decode_columns(bufs, columns=COLUMNS) -> tuple[list[schema.Header], np.ndarray, dict[str, np.ndarray]]:
    """Decode several launches' buffers into plain columns, in one pass where they share a layout.

    What the trace writers use: only the columns asked for are gathered (``kind``, ``flags``,
    ``start`` and ``end`` always are), each a plain array (no structured table), and buffers
    of one layout (programs x slots) are stacked and decoded as one, so a batch of small
    launches costs about what one large launch does. Rows come buffer by buffer, each in
    program order, exactly as :func:`decode_buffer` gives them; ``arg2``..``arg5`` are 0 for
    events without a DETAIL record, and counters' ``arg0`` holds their 64-bit value.

    Args:
        bufs: whole buffers (bytes-like), all with the same number of programs and slots.
        columns: names from :data:`COLUMNS`. ``program`` is the program within its own launch.

    Returns:
        ``(headers, counts, cols)``: each buffer's header (``written``/``dropped`` filled in),
        the number of events of each (int64), and the columns.

    Raises:
        BufferDecodeError: a buffer is bad (``index`` names it; the message is the one
            :func:`decode_buffer` gives for that buffer alone).
        ValueError: the buffers do not share one layout.
    """
    parts, heads, drops = [], [], []
    for i, b in enumerate(bufs):
        try:
            rec, dropped, h = _records(b)
        except DecodeError as e:
            raise BufferDecodeError(str(e), i) from None
        if heads and (h.n_programs, h.capacity) != (heads[0].n_programs, heads[0].capacity):
            raise ValueError("decode_columns: buffers of different layouts cannot be decoded together")
        parts.append(rec)
        heads.append(h)
        drops.append(dropped)
    if not parts:
        return [], np.zeros(0, np.int64), {c: np.zeros(0, np.int64) for c in set(columns) | {"kind", "flags", "start", "end"}}
    return _decode_stack(heads, drops, parts, columns)


def decode_split(heads, records: np.ndarray, tails, columns=COLUMNS) -> tuple[list[schema.Header], np.ndarray, dict[str, np.ndarray]]:
    """:func:`decode_columns` for buffers already split in three: what lets a reader put the
    records of many launches straight into one array (no copy to stack them).

    Args:
        heads: each buffer's first ``HEADER_BYTES`` bytes.
        records: every buffer's record slots, one after another (``RECORD_DTYPE``); each
            header's programs x slots of them.
        tails: each buffer's dropped-event counters (the bytes after its records).
        columns: as for :func:`decode_columns`.

    Raises:
        BufferDecodeError: as for :func:`decode_columns`.
        ValueError: the parts do not fit together (different layouts, wrong sizes).
    """
    hs, drops = [], []
    for i, (hb, tb) in enumerate(zip(heads, tails)):
        try:
            h = read_header(hb)
        except DecodeError as e:
            raise BufferDecodeError(str(e), i) from None
        if hs and (h.n_programs, h.capacity) != (hs[0].n_programs, hs[0].capacity):
            raise ValueError("decode_split: buffers of different layouts cannot be decoded together")
        if memoryview(tb).nbytes != h.n_programs * schema.DROPPED_BYTES:
            raise ValueError("decode_split: a buffer's dropped counters do not fit its header")
        hs.append(h)
        drops.append(np.frombuffer(tb, "<u4"))
    if not hs:
        return [], np.zeros(0, np.int64), {c: np.zeros(0, np.int64) for c in set(columns) | {"kind", "flags", "start", "end"}}
    if records.shape[0] != len(hs) * hs[0].n_programs * hs[0].capacity:
        raise ValueError("decode_split: the records do not fit the headers")
    return _decode_stack(hs, drops, records, columns)


def _decode_stack(heads: list, drops: list, recs, columns) -> tuple[list[schema.Header], np.ndarray, dict[str, np.ndarray]]:
    """Decode buffers of one layout as one: ``recs`` is their records stacked (or a list to stack)."""
    P, C = heads[0].n_programs, heads[0].capacity
    K = len(heads)
    rec = recs if isinstance(recs, np.ndarray) else recs[0] if len(recs) == 1 else np.concatenate(recs)
    want = set(columns) | {"program"}  # the launch of each row comes from its stacked program
    try:
        cols = _events(rec, C, want)
    except DecodeError:
        for i in range(K):  # say which buffer, with its own message
            try:
                _events(rec[i * P * C : (i + 1) * P * C], C, ())
            except DecodeError as e:
                raise BufferDecodeError(str(e), i) from None
        raise
    stacked = cols["program"]
    counts = np.bincount(stacked // P, minlength=K).astype(np.int64) if K > 1 else np.array([stacked.size], np.int64)
    if K > 1 and ("program" in columns or "slot" in columns):
        cols["program"] = stacked % P
    del cols["_detail_rows"]
    if "program" not in columns:
        del cols["program"]
    if "slot" not in columns:
        cols.pop("slot", None)
    out_headers = [
        schema.Header(timer=h.timer, tick_hz=h.tick_hz, capacity=C, n_programs=P, grid=h.grid, written=int(k),
                      dropped=int(d.sum(dtype=np.int64)), version=h.version)
        for h, d, k in zip(heads, drops, counts.tolist())
    ]
    return out_headers, counts, cols


def count_kinds(buf) -> np.ndarray:
    """How many records of each kind a launch's buffer holds (without decoding it).

    Reads the header (validated as :func:`decode_buffer` does) and the tag of every slot: about
    a twentieth of the cost of decoding. Analyses use it to size their columns before decoding
    the launches into them.

    Args:
        buf: the whole buffer as bytes-like (bytes, memoryview, numpy uint8 array).

    Returns:
        int64 array of 16 counts indexed by ``EventKind`` (``[EMPTY]``: unused slots,
        ``[DETAIL]``: DETAIL records; the events :func:`decode_buffer` returns are the rest).

    Raises:
        DecodeError: the header is bad or the buffer shorter than it says.
    """
    if isinstance(buf, np.ndarray):
        buf = np.ascontiguousarray(buf).view(np.uint8).reshape(-1)
    mv = memoryview(buf).cast("B")
    header = read_header(mv)
    if mv.nbytes < header.nbytes:
        raise DecodeError(
            f"buffer is {mv.nbytes} bytes but its header ({header.n_programs} programs x {header.capacity} slots) "
            f"needs {header.nbytes}: truncated"
        )
    rec = np.frombuffer(mv, schema.RECORD_DTYPE, count=header.n_programs * header.capacity, offset=schema.HEADER_BYTES)
    return np.bincount(rec["tag"] & 0xF, minlength=16).astype(np.int64)


def empty_events() -> np.ndarray:
    return np.zeros(0, schema.EVENT_DTYPE)
