"""Replay rings (``ktrace.graphs``) read by the host: which replays a ring holds, and their buffers.

A traced launch captured into a CUDA graph writes, at every replay, its buffer at one fixed
address (the *stage*); the commit kernel captured after it copies the stage into a slot of the
launch's *replay ring* and advances the replay count on the device. The ring is one int64
allocation (words), made while the graph is captured and never zeroed::

    [0, W)              stamps: slot s was last given replay stamps[s] - 1; W = stamp_words(R)
    [W, W + C)          control (C = control_words(G) for a commit kernel of G programs): G keys,
                        then G replay counts (one per program: each advances its own, so no
                        program races another and no atomic is needed), then one word the first
                        program sets to the count (the *mirror*)
    [W + C, ..)         slots: replay e is in slot e % R, a copy of the stage's first
                        ``nbytes`` bytes (S = slot_words(nbytes) words, 256-byte aligned)

Nothing there is zeroed before the first replay: a program's count is taken as 0 until the
program has stored its launch's *key* (a random 63-bit constant of the capture, passed to the
commit kernel) beside it, so memory that held anything before reads as no replay, unless it held
that key (one chance in 2**62). The stage holds
whatever layout the launch writes: ``schema``'s dense layout, or its ring layout for a launch of
the flight recorder (:func:`dense_from_ring_layout`).

After ``done`` replays, replay ``e`` is still in the ring if ``e >= done - R``: the host takes the
replays from ``max(taken, done - R)`` to ``done`` and counts the ``max(0, done - R - taken)``
before them as overwritten, exactly (:func:`kept`). A slot whose stamp is not its replay's (read
while a replay on another stream was writing it) is not taken and is counted with them.

Numpy only; nothing loops per record or per replay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import schema
from ..flight import ring as flight_ring

#: Every slot (and the stamps) starts 256-byte aligned: 32 int64 words.
ALIGN_WORDS = 32


def _align(words: int) -> int:
    return -(-int(words) // ALIGN_WORDS) * ALIGN_WORDS


def slot_words(nbytes: int) -> int:
    """Words of one ring slot for a launch buffer of ``nbytes`` bytes."""
    if nbytes <= 0:
        raise ValueError(f"a launch buffer has a positive size, got {nbytes}")
    return _align(-(-int(nbytes) // 8))


def stamp_words(ring_slots: int) -> int:
    """Words of the stamps: one per slot, 256-byte aligned."""
    return _align(ring_slots)


def control_words(programs: int) -> int:
    """Words of the control part for a commit kernel of ``programs`` programs (keys, counts, mirror)."""
    if programs < 1:
        raise ValueError(f"a commit kernel has at least one program, got {programs}")
    return _align(2 * programs + 1)


@dataclass(frozen=True)
class RingShape:
    """Where the parts of one replay ring are (int64 words from its start)."""

    ring_slots: int  # R
    programs: int  # G, programs of the commit kernel
    nbytes: int  # the launch buffer's bytes (dense or ring layout)

    def __post_init__(self):
        if self.ring_slots < 1:
            raise ValueError(f"a replay ring has at least one slot, got {self.ring_slots}")
        slot_words(self.nbytes), control_words(self.programs)  # (checked there)

    @property
    def keys_at(self) -> int:
        return stamp_words(self.ring_slots)

    @property
    def counts_at(self) -> int:
        return self.keys_at + self.programs

    @property
    def mirror_at(self) -> int:
        return self.counts_at + self.programs

    @property
    def slots_at(self) -> int:
        return self.keys_at + control_words(self.programs)

    @property
    def slot_words(self) -> int:
        return slot_words(self.nbytes)

    @property
    def words(self) -> int:
        return self.slots_at + self.ring_slots * self.slot_words


def replays_done(ring, shape: RingShape, key: int) -> tuple[int, bool]:
    """The replays every program of the commit kernel has committed, and whether they all agree.

    A program's count is its stored count when its key is there, else 0 (no commit yet: the
    memory held something else). Each program advances its own count once per replay, so once
    the device has finished they are equal; a smaller one is a replay whose commit has not
    completed on every program (left for a later read)."""
    words = _words(ring, shape)
    keys = words[shape.keys_at : shape.counts_at]
    counts = np.where(keys == np.int64(key), words[shape.counts_at : shape.mirror_at], 0)
    if (counts < 0).any():
        raise ValueError(f"negative replay count {int(counts.min())} beside the launch's key")
    return int(counts.min()), bool((counts == counts[0]).all())


def _words(ring, shape: RingShape) -> np.ndarray:
    words = np.asarray(ring).reshape(-1).view(np.int64)
    if words.size < shape.words:
        raise ValueError(f"a replay ring of {shape.ring_slots} slots of {shape.nbytes} bytes "
                         f"({shape.programs} commit programs) is {shape.words} words, got {words.size}")
    return words


def kept(done: int, taken: int, ring_slots: int) -> tuple[int, int]:
    """``(first, overwritten)``: after ``done`` replays, of which ``taken`` were taken before, the
    ring holds replays ``first .. done - 1``; ``overwritten`` replays before them were lost."""
    if done < taken:
        raise ValueError(f"the device counts {done} replays, fewer than the {taken} already taken")
    first = max(int(taken), int(done) - int(ring_slots))
    return first, first - int(taken)


@dataclass(frozen=True)
class Taken:
    """What one read of a ring gives."""

    #: the replay numbers taken, increasing (int64)
    replays: np.ndarray
    #: one row per replay taken: its launch buffer as the device left it (uint8, ``nbytes`` each)
    buffers: np.ndarray
    #: replays done since the last read that the ring no longer held (exact)
    overwritten: int
    #: replays whose slot held another replay when it was read (counted lost, not taken)
    torn: int

    @property
    def lost(self) -> int:
        return self.overwritten + self.torn


def take(ring, shape: RingShape, done: int, taken: int) -> Taken:
    """The replays ``max(taken, done - R) .. done - 1`` from a copy of the ring's words.

    Args:
        ring: the ring as int64 words (``shape.words`` of them).
        done: replays completed (:func:`replays_done`); taken: replays taken by earlier reads.
    """
    words = _words(ring, shape)
    R, S = shape.ring_slots, shape.slot_words
    first, overwritten = kept(done, taken, R)
    r = np.arange(first, done, dtype=np.int64)
    slot = r % R
    ok = words[slot] == r + 1
    body = words[shape.slots_at : shape.slots_at + R * S].reshape(R, S)
    bufs = body[slot[ok]].view(np.uint8)[:, : shape.nbytes].copy()
    return Taken(replays=r[ok], buffers=bufs, overwritten=overwritten, torn=int((~ok).sum()))


def with_header(buffers: np.ndarray, header: schema.Header) -> np.ndarray:
    """Dense launch buffers (rows) with ``header`` written over their first bytes (the device
    never writes a header: the host does, as for any launch)."""
    out = np.array(buffers, np.uint8, copy=True)
    if out.ndim != 2:
        out = out.reshape(len(buffers), -1) if len(buffers) else np.zeros((0, schema.HEADER_BYTES), np.uint8)
    out[:, : schema.HEADER_BYTES] = np.frombuffer(header.to_bytes(), np.uint8)
    return out


def dense_from_ring_layout(buffer, header: schema.Header, slots: int) -> np.ndarray:
    """The dense buffer of one replay of a flight-recorder launch (its stage in ring layout):
    records in order, those its lanes overwrote counted as dropped (``ktrace.flight.ring.unroll``)."""
    rec, heads, _ = flight_ring.split_ring(buffer, header.n_programs, slots)
    raw, _ = flight_ring.unroll(rec, heads, header)
    return raw


def first_ticks(dense: np.ndarray, n_programs: int, capacity: int) -> np.ndarray:
    """Per dense buffer (rows of one launch's shape), the earliest start of its events (raw
    ticks); -1 for a buffer with none. Orders replays of different captured launches."""
    if not len(dense):
        return np.zeros(0, np.int64)
    dense = np.asarray(dense, np.uint8).reshape(len(dense), -1)
    rec = np.ascontiguousarray(dense[:, schema.HEADER_BYTES : schema.dropped_offset(n_programs, capacity)])
    rec = rec.view(schema.RECORD_DTYPE).reshape(len(dense), -1)
    kind = rec["tag"] & 0xF
    event = (kind != schema.EventKind.EMPTY) & (kind != schema.EventKind.DETAIL)
    t0 = np.where(event, rec["t0"].astype(np.int64), np.iinfo(np.int64).max).min(axis=1)
    return np.where(event.any(axis=1), t0, -1)


def replay_order(keys: list) -> tuple[np.ndarray, np.ndarray]:
    """The order in which to number the replays taken from several rings together.

    Args:
        keys: per ring (in capture order), its replays' :func:`first_ticks`, in replay order.

    Returns:
        ``(ring, position)``: for the k-th launch to number, which ring and which of its replays.
        Replays are ordered by their first event's time on the device; a replay with no event
        takes the time of the replay before it in its ring (so each ring's replays stay in
        order), then by ring and replay number.
    """
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    filled = [np.maximum.accumulate(np.asarray(k, np.int64)) if len(k) else np.zeros(0, np.int64) for k in keys]
    ring = np.concatenate([np.full(len(k), i, np.int64) for i, k in enumerate(filled)])
    pos = np.concatenate([np.arange(len(k), dtype=np.int64) for k in filled])
    t = np.concatenate(filled)
    o = np.lexsort((pos, ring, t))
    return ring[o], pos[o]
