"""Ring-mode buffers (``ktrace.schema``'s ring layout) read by the host: numpy only.

A ring-mode launch leaves, per lane (program), its last N records in slots ``s % N``, its head
(records written in all) and its NOW slot. :func:`split_ring` views those parts of a buffer's
bytes; :func:`unroll` turns them into an ordinary dense buffer that every reader of captures
decodes: each lane's records oldest first, the records it overwrote counted as its dropped
records (exactly: ``head - kept``), and, for a lane that is spinning at the moment of the copy,
one more WAIT event from the wait's start to the dump with the OPEN and TIMEOUT flags.

Every step is vectorised over lanes and slots; nothing loops per record.

What a copy taken while the kernel runs can see: the device stores a record and then its head,
from one thread, into host memory, and nothing orders the two for the host. A lane's newest
record may therefore still be in flight (an old lap's record where the head already counts the
new one). For a lane that has stopped (a hang) every store has landed long before a dump reads
it. A record pair cut by the copy (an event whose DETAIL is not there, or a DETAIL whose event
was overwritten) is left out and counted with the overwritten records.
"""

from __future__ import annotations

import numpy as np

from .. import schema
from ..schema import EventFlag, EventKind

#: One open wait per row, as :func:`open_waits` reads the NOW slots.
OPEN_WAIT_DTYPE = np.dtype(
    [
        ("program", "<i4"),
        ("since", "<u8"),  # raw ticks when the wait began
        ("flag", "<i8"),  # heap offset (bytes)
        ("expected", "<i4"),
        ("cmp", "<i4"),  # schema.Cmp code
        ("region", "<u4"),  # the wait's region id
        ("peer", "<i4"),
        ("seen", "<i4"),  # the last value the lane read from the flag
    ]
)


class RingError(ValueError):
    """The bytes are not a ring-mode buffer of the size the launch says."""


def split_ring(raw, n_programs: int, slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views of a ring buffer's parts: records ``(P, N)`` (RECORD_DTYPE), heads ``(P,)`` (uint32)
    and NOW slots ``(P,)`` (NOW_DTYPE).

    Raises:
        RingError: ``raw`` is shorter than ``schema.ring_buffer_bytes(n_programs, slots)``.
    """
    raw = np.asarray(raw).reshape(-1).view(np.uint8)
    need = schema.ring_buffer_bytes(n_programs, slots)
    if raw.nbytes < need:
        raise RingError(f"ring buffer of {n_programs} lanes x {slots} slots needs {need} bytes, got {raw.nbytes}")
    rec = raw[schema.HEADER_BYTES : schema.heads_offset(n_programs, slots)].view(schema.RECORD_DTYPE).reshape(n_programs, slots)
    h0 = schema.heads_offset(n_programs, slots)
    heads = raw[h0 : h0 + n_programs * schema.DROPPED_BYTES].view("<u4")
    n0 = schema.now_offset(n_programs, slots)
    now = raw[n0 : n0 + n_programs * schema.NOW_BYTES].view(schema.NOW_DTYPE)
    return rec, heads, now


def open_waits(now: np.ndarray) -> np.ndarray:
    """The lanes that are in a wait (``since != 0``), one row each (:data:`OPEN_WAIT_DTYPE`)."""
    now = np.asarray(now, schema.NOW_DTYPE)
    p = np.flatnonzero(now["since"] != 0)
    out = np.zeros(p.size, OPEN_WAIT_DTYPE)
    w = now[p]
    out["program"] = p
    for f in ("since", "flag", "expected", "peer", "seen"):
        out[f] = w[f]
    out["cmp"] = w["cmp_region"] & 0xFF
    out["region"] = w["cmp_region"] >> 8
    return out


def _kinds(tag) -> tuple[np.ndarray, np.ndarray]:
    tag = np.asarray(tag, np.uint32)
    return (tag & 0xF).astype(np.uint8), ((tag >> schema.KIND_BITS) & 0xF).astype(np.uint8)


def ordered(records: np.ndarray, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each lane's kept records oldest first, with the pairs the ring cut left out.

    Returns:
        ``(rows, kept, lost)``: ``rows`` ``(P, N)`` RECORD_DTYPE, lane p's records in
        ``rows[p, :kept[p]]`` (the rest zero); ``lost[p]`` the records written but not kept:
        overwritten, or left out as half a pair (int64, exact).
    """
    records = np.asarray(records, schema.RECORD_DTYPE)
    P, N = records.shape
    heads = np.asarray(heads, np.int64).reshape(P)
    kept = np.minimum(heads, N)
    first = heads - kept  # sequence number of the oldest kept record
    j = np.arange(N)
    take = (first[:, None] + j[None, :]) % N
    valid = j[None, :] < kept[:, None]
    rows = np.take_along_axis(records, take, axis=1)
    rows[~valid] = np.zeros((), schema.RECORD_DTYPE)
    kind, flags = _kinds(rows["tag"])
    # a DETAIL first: its event was overwritten
    lead_detail = (kind[:, 0] == EventKind.DETAIL) & valid[:, 0]
    # an event that says a DETAIL follows, last: its DETAIL is not there (yet)
    last = np.maximum(kept - 1, 0)
    lk = kind[np.arange(P), last]
    lf = flags[np.arange(P), last]
    tail_cut = (kept > 0) & (lk != EventKind.DETAIL) & ((lf & EventFlag.DETAIL) != 0)
    drop_first = lead_detail.astype(np.int64)
    kept = kept - drop_first - tail_cut.astype(np.int64)
    if drop_first.any():
        shift = (j[None, :] + drop_first[:, None]) % N
        rows = np.take_along_axis(rows, shift, axis=1)
    rows[j[None, :] >= kept[:, None]] = np.zeros((), schema.RECORD_DTYPE)
    kept = np.maximum(kept, 0)
    return rows, kept, heads - kept


def unroll(records: np.ndarray, heads: np.ndarray, header: schema.Header, *, now: np.ndarray | None = None,
           dump_ticks: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A dense buffer (``schema``'s dense layout) holding a ring buffer's records in order.

    Args:
        records, heads: :func:`split_ring`'s records and heads.
        header: the launch's header (timer, tick rate, grid); its capacity is replaced by the
            ring's slots plus two (room for an open wait) and its dropped count by the lost
            records.
        now: the NOW slots; with ``dump_ticks`` (the device timer at the dump, raw ticks), each
            lane in a wait gets one more WAIT event ending at ``dump_ticks`` (flags OPEN and
            TIMEOUT: it had not seen its flag by then).

    Returns:
        ``(raw, lost)``: the dense buffer (uint8) and the records each lane lost (int64, exact).
    """
    rows, kept, lost = ordered(records, heads)
    P, N = rows.shape
    C = N + 2
    out = np.zeros((P, C), schema.RECORD_DTYPE)
    out[:, :N] = rows
    if now is not None and dump_ticks is not None:
        w = open_waits(now)
        if w.size:
            p = w["program"].astype(np.int64)
            at = kept[p]
            last_hw = rows["hw"][p, np.maximum(at - 1, 0)]  # where the lane ran (its last record's SM)
            flags = int(EventFlag.DETAIL | EventFlag.TIMEOUT | EventFlag.OPEN)
            ev = np.zeros(w.size, schema.RECORD_DTYPE)
            ev["t0"] = w["since"]
            ev["t1"] = np.maximum(np.uint64(dump_ticks), w["since"])
            ev["tag"] = (int(EventKind.WAIT) | (flags << schema.KIND_BITS) | (w["region"].astype(np.uint32) << schema.REGION_SHIFT))
            ev["hw"] = last_hw
            ev["arg0"] = w["peer"]
            ev["arg1"] = 0  # spins: not counted while spinning
            det = np.zeros(w.size, schema.DETAIL_DTYPE)
            det["x0"] = w["flag"]
            det["x1"] = w["seen"]
            det["tag"] = int(EventKind.DETAIL)
            det["hw"] = last_hw
            det["x2"] = w["expected"]
            det["x3"] = w["cmp"]
            out[p, at] = ev
            out[p, at + 1] = det.view(schema.RECORD_DTYPE)
    h = schema.Header(timer=header.timer, tick_hz=header.tick_hz, capacity=C, n_programs=P, grid=header.grid,
                      dropped=int(lost.sum()))
    raw = np.zeros(schema.buffer_bytes(P, C), np.uint8)
    raw[: schema.HEADER_BYTES] = np.frombuffer(h.to_bytes(), np.uint8)
    raw[schema.HEADER_BYTES : schema.dropped_offset(P, C)] = out.reshape(-1).view(np.uint8)
    lost32 = np.minimum(lost, np.iinfo(np.uint32).max).astype("<u4")
    raw[schema.dropped_offset(P, C):] = lost32.view(np.uint8)
    return raw, lost
