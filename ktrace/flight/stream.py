"""Streaming a ring-mode launch (``ktrace.flight``): drain its rings continuously while it runs.

A :class:`RingDrain` takes, at each call, the records every lane wrote since the last call from a
ring buffer the device keeps writing (pinned host memory): it reads the heads, copies the
records, reads the heads again, and keeps each lane's records whose slots cannot have been
reused during the copy. Records a lane wrote faster than the drain came back (more than the
ring's N since the last call) are lost, and counted exactly per lane. The rows (:data:`SPILL_DTYPE`:
lane, sequence number, record) go to a spill file as they come, so host memory holds one copy of
the rings at a time however long the kernel runs. :func:`assemble` turns the spilled rows of a
launch back into a dense buffer (its memory is then proportional to the records kept).

Numpy only; nothing loops per record.
"""

from __future__ import annotations

import numpy as np

from .. import schema
from ..schema import EventFlag, EventKind

#: One drained record: its lane, its sequence number in the lane (from 0), the record.
SPILL_DTYPE = np.dtype([("program", "<u4"), ("pad", "<u4"), ("seq", "<u8"), ("rec", schema.RECORD_DTYPE)])


#: The header of a spilled segment: a lane's records from sequence number ``seq`` on, ``count``
#: of them, follow it (``count`` x 32 bytes).
SEGMENT_DTYPE = np.dtype([("program", "<u4"), ("count", "<u4"), ("seq", "<u8")])


class RingDrain:
    """What has been taken from one launch's rings so far (per lane: next sequence number, lost)."""

    def __init__(self, n_programs: int, slots: int):
        self.P, self.N = int(n_programs), int(slots)
        self.next = np.zeros(self.P, np.int64)  # each lane's next sequence number to take
        self.lost = np.zeros(self.P, np.int64)
        self.taken = 0

    def _unwrap(self, heads_u32) -> np.ndarray:
        """Heads as int64 counts: the device keeps them mod 2**32 (exact while fewer than 2**32
        records are written between two drains)."""
        h = np.asarray(heads_u32).astype(np.int64)
        return self.next + ((h - self.next) % (1 << 32))

    def drain(self, heads, records) -> list[tuple[int, int, np.ndarray]]:
        """The new records of every lane, as segments ``(lane, first sequence number, records)``.

        Args:
            heads: the live heads (uint32, one per lane), read before and after the copy.
            records: the live records ``(P, N)``: each lane's new slots are copied (at most two
                slices, where its range wraps), not the whole ring.
        """
        N = self.N
        h1 = self._unwrap(np.array(heads))
        lo = np.maximum(self.next, h1 - N)
        n = h1 - lo
        segs = []
        for p in np.flatnonzero(n).tolist():  # (per lane, not per record: a copy of a slice each)
            a, k = int(lo[p] % N), int(n[p])
            r = records[p, a : a + k].copy() if a + k <= N else np.concatenate((records[p, a:], records[p, : a + k - N]))
            segs.append((p, int(lo[p]), r))
        h2 = self._unwrap(np.array(heads))
        # a slot copied may have been reused for a newer record by the time the copy ended: keep
        # only sequence numbers the ring still held after it (exactly those >= h2 - N)
        lo2 = np.maximum(lo, h2 - N)
        out = []
        for p, s0, r in segs:
            cut = int(lo2[p]) - s0
            if cut < len(r):
                out.append((p, s0 + cut, r[cut:] if cut > 0 else r))
        self.lost += lo2 - self.next
        self.next = np.maximum(h1, lo2)
        self.taken += sum(len(r) for _, _, r in out)
        return out


def segments_bytes(segs) -> bytes:
    """The spill file's bytes of some segments (a header each, then its records)."""
    parts = []
    for p, s0, r in segs:
        h = np.zeros((), SEGMENT_DTYPE)
        h["program"], h["count"], h["seq"] = p, len(r), s0
        parts += [h.tobytes(), np.ascontiguousarray(r, schema.RECORD_DTYPE).tobytes()]
    return b"".join(parts)


def iter_spill(data):
    """``(lane, first sequence number, records)`` of each segment of a spill file's bytes (or a
    memory map of it): views, so that a large file is read piece by piece."""
    data = np.asarray(data).reshape(-1).view(np.uint8)
    at, H, R = 0, SEGMENT_DTYPE.itemsize, schema.RECORD_BYTES
    while at + H <= data.size:
        h = data[at : at + H].view(SEGMENT_DTYPE)[0]
        k = int(h["count"])
        yield int(h["program"]), int(h["seq"]), data[at + H : at + H + k * R].view(schema.RECORD_DTYPE)
        at += H + k * R


def rows(segs) -> np.ndarray:
    """Segments as one table of :data:`SPILL_DTYPE` rows."""
    segs = list(segs)
    n = np.array([len(r) for _, _, r in segs], np.int64)
    out = np.zeros(int(n.sum()), SPILL_DTYPE)
    if out.size:
        out["program"] = np.repeat([p for p, _, _ in segs], n)
        out["seq"] = np.repeat([s for _, s, _ in segs], n) + (np.arange(out.size) - np.repeat(np.cumsum(n) - n, n))
        out["rec"] = np.concatenate([r for _, _, r in segs])
    return out


def assemble(rows: np.ndarray, n_programs: int, lost: np.ndarray, header: schema.Header) -> tuple[np.ndarray, np.ndarray]:
    """A dense buffer of a streamed launch's records, each lane's in order.

    Args:
        rows: the drained rows (:data:`SPILL_DTYPE`, any order).
        lost: the records each lane lost in the drain.
        header: the launch's header (its capacity and dropped count are replaced).

    Returns:
        ``(raw, lost)``: the dense buffer and the records each lane lost, the drain's plus those
        left out because the drain cut their pair (an event whose DETAIL was lost, or the reverse).
    """
    rows = np.asarray(rows, SPILL_DTYPE)
    P = int(n_programs)
    lost = np.asarray(lost, np.int64).copy()
    rows = rows[np.lexsort((rows["seq"], rows["program"]))]
    tag = rows["rec"]["tag"]
    kind = tag & 0xF
    has = ((tag >> schema.KIND_BITS) & int(EventFlag.DETAIL)) != 0
    is_det = kind == EventKind.DETAIL
    prog, seq = rows["program"].astype(np.int64), rows["seq"].astype(np.int64)
    follows = np.zeros(rows.size, bool)  # row i directly follows row i - 1 of its lane
    follows[1:] = (prog[1:] == prog[:-1]) & (seq[1:] == seq[:-1] + 1)
    prev_ok = np.zeros(rows.size, bool)
    prev_ok[1:] = follows[1:] & has[:-1] & ~is_det[:-1]
    next_ok = np.zeros(rows.size, bool)
    next_ok[:-1] = follows[1:] & is_det[1:]
    bad = (is_det & ~prev_ok) | (has & ~is_det & ~next_ok)
    if bad.any():
        lost += np.bincount(prog[bad], minlength=P)
        rows, prog = rows[~bad], prog[~bad]
    counts = np.bincount(prog, minlength=P)
    C = max(int(counts.max()) if counts.size else 0, 1)
    dense = np.zeros((P, C), schema.RECORD_DTYPE)
    pos = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
    dense[prog, pos] = rows["rec"]
    h = schema.Header(timer=header.timer, tick_hz=header.tick_hz, capacity=C, n_programs=P, grid=header.grid, lanes=header.lanes,
                      dropped=int(lost.sum()))
    raw = np.zeros(schema.buffer_bytes(P, C), np.uint8)
    raw[: schema.HEADER_BYTES] = np.frombuffer(h.to_bytes(), np.uint8)
    raw[schema.HEADER_BYTES : schema.dropped_offset(P, C)] = dense.reshape(-1).view(np.uint8)
    raw[schema.dropped_offset(P, C):] = np.minimum(lost, np.iinfo(np.uint32).max).astype("<u4").view(np.uint8)
    return raw, lost
