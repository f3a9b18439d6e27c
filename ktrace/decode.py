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
    n_slots = P * C
    rec = np.frombuffer(mv, schema.RECORD_DTYPE, count=n_slots, offset=schema.HEADER_BYTES)
    dropped = np.frombuffer(mv, "<u4", count=P, offset=schema.dropped_offset(P, C)).copy()

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
    mi = np.flatnonzero(~is_detail)  # positions of the events among the used slots
    main = used[mi]
    # Every DETAIL record continues the event in the slot before it, in the same program.
    if mi.size != used.size:
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
    mflags = uflags[mi]
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
    ev = np.zeros(n, schema.EVENT_DTYPE)  # (zero-filling is cheaper than writing the detail columns)
    ev["rank"] = rank
    ev["launch"] = launch
    prog = main // C
    ev["program"] = prog
    ev["slot"] = main - prog * C
    mkind = ukind[mi]
    ev["kind"] = mkind
    ev["flags"] = mflags
    ev["region"] = utag[mi] >> schema.REGION_SHIFT
    ev["hw"] = rec["hw"][main]
    ev["start"] = t0
    ev["end"] = t1
    a0 = rec["arg0"][main]
    a1 = rec["arg1"][main]
    is_counter = mkind == EventKind.COUNTER
    if is_counter.any():
        # Counters carry one 64-bit value split over arg0 (low half) and arg1 (high half).
        a0 = a0.astype(np.int64)
        a1 = a1.astype(np.int64)
        ev["arg0"] = np.where(is_counter, (a0 & 0xFFFFFFFF) | (a1 << 32), a0)
        ev["arg1"] = np.where(is_counter, 0, a1)
    else:
        ev["arg0"] = a0
        ev["arg1"] = a1
    if wants.size:
        drec = rec.view(schema.DETAIL_DTYPE)  # field by field, as above
        at = wants + 1
        ev["arg2"][wi] = drec["x0"][at]
        ev["arg3"][wi] = drec["x1"][at]
        ev["arg4"][wi] = drec["x2"][at]
        ev["arg5"][wi] = drec["x3"][at]

    header = schema.Header(
        timer=header.timer,
        tick_hz=header.tick_hz,
        capacity=C,
        n_programs=P,
        grid=header.grid,
        written=int(n),
        dropped=int(dropped.sum(dtype=np.int64)),
        version=header.version,
    )
    return DecodedBuffer(header=header, events=ev, dropped_per_program=dropped)


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
