"""Addresses a kernel signalled through, mapped to (owner rank, allocation, offset).

A kernel traced without edits (``ktrace.auto``) records the address each wait polled and each
notify wrote, as its program saw it: a pointer into this rank's memory, or into a peer's memory
mapped into this process (a torch symmetric-memory peer buffer, an Iris-style heap base plus an
offset). The same flag has a different address on every rank, so pairing needs each rank's
*table of mappings*: for each known allocation ("space"), where every rank's copy of it is
mapped in this process.

Recording side (:func:`register_space`): a space is registered once per process, in the same
order on every rank (allocations are collective), so its number is the same everywhere:
``ktrace.auto.record`` registers every ``torch.distributed._symmetric_memory.rendezvous``
(its buffers and signal pads) and :func:`ktrace.auto.map_heap` an Iris-style heap. A rank's
capture stores its table (``RankCapture.mappings``).

Reading side (:func:`resolve`): an address becomes a *location key*, the same int64 on every
rank for the same flag::

    bit 62         set (a location key; ktrace heap offsets and private addresses never have it)
    bits 56..61    the space
    bits 40..55    the owner rank
    bits 0..39     the offset in the space (bytes)

An address in no mapping is this rank's private memory (a flag in an ordinary tensor): its key is
the address itself, owned by the rank. A recorded word may carry an owner given by the call
(bits 48 and up: ``ktrace.auto.probes.OWNER_SHIFT``) when the address is this rank's symmetric
address of a location on another rank (Iris's ``to_rank``, NVSHMEM's ``pe``).

Pure Python and numpy.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass

import numpy as np

#: Bits of a recorded address word (``ktrace.auto.probes``): the address, and above it the owner
#: given by the call, plus one (0: none).
ADDRESS_BITS = 48
LOCATION_BIT = 1 << 62
SPACE_SHIFT, SPACE_BITS = 56, 6
OWNER_SHIFT, OWNER_BITS = 40, 16
OFFSET_BITS = 40
#: The space of an address a call named the owner of but no mapping holds (NVSHMEM's symmetric
#: addresses are the same on every rank: the address itself is the offset).
UNMAPPED_SPACE = (1 << SPACE_BITS) - 1
MAX_SPACES = UNMAPPED_SPACE
#: Most mappings a rank's table may hold (a capture claiming more is refused).
MAX_MAPPINGS = 4096
MAX_NAME = 200


@dataclass(frozen=True)
class Mapping:
    """One rank's copy of one space, as mapped in the recording process."""

    base: int  # address in this process
    size: int  # bytes
    owner: int  # the rank whose memory it is
    space: int  # which allocation (the same number on every rank)
    offset: int = 0  # where ``base`` lies in the space, in bytes
    name: str = ""

    def to_json(self) -> dict:
        return asdict(self)


class MappingError(ValueError):
    """A table of mappings that cannot be used (one line: what is wrong)."""


def check_table(entries, world_size: int) -> list[Mapping]:
    """A rank's table of mappings read from a file, checked field by field.

    Raises:
        MappingError: a value of the wrong type or outside its range, or more than
            :data:`MAX_MAPPINGS` entries.
    """
    if not isinstance(entries, list):
        raise MappingError(f"mappings is a {type(entries).__name__}, not a list")
    if len(entries) > MAX_MAPPINGS:
        raise MappingError(f"{len(entries)} mappings (at most {MAX_MAPPINGS})")
    out = []
    limits = {"base": (0, (1 << ADDRESS_BITS) - 1), "size": (1, 1 << OFFSET_BITS), "owner": (0, world_size - 1),
              "space": (0, MAX_SPACES - 1), "offset": (0, (1 << OFFSET_BITS) - 1)}
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise MappingError(f"mapping {i} is a {type(e).__name__}, not an object")
        vals = {}
        for k, (lo, hi) in limits.items():
            v = e.get(k, 0 if k == "offset" else None)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise MappingError(f"mapping {i}: {k} must be an integer in [{lo}, {hi}], got {v!r:.40}")
            vals[k] = v
        if vals["offset"] + vals["size"] > 1 << OFFSET_BITS:
            raise MappingError(f"mapping {i}: offset + size past {1 << OFFSET_BITS} bytes")
        name = e.get("name", "")
        if not isinstance(name, str) or len(name) > MAX_NAME:
            raise MappingError(f"mapping {i}: name must be a string of at most {MAX_NAME} characters")
        out.append(Mapping(name=name, **vals))
    return out


# ---------------------------------------------------------------------------------------------
# recording: this process's spaces
# ---------------------------------------------------------------------------------------------

_lock = threading.Lock()
_spaces: list[tuple[tuple[int, ...], int, str]] = []  # (bases per owner, size, name), by space number
_suppressed = threading.local()


def register_space(bases, size: int, name: str = "", *, offset: int = 0) -> int | None:
    """Register an allocation every rank holds a copy of: ``bases[r]`` is where rank ``r``'s
    copy is mapped in this process (0: not mapped here), ``size`` bytes each.

    Returns:
        Its space number, the same on every rank that registers its spaces in the same order;
        the earlier number when the same bases and size were registered before; None when
        :data:`MAX_SPACES` are taken (the allocation is then treated as unknown memory).
    """
    key = (tuple(int(b) for b in bases), int(size), str(name)[:MAX_NAME])
    if getattr(_suppressed, "on", False) or size <= 0 or not key[0]:
        return None
    with _lock:
        for i, (b, s, _) in enumerate(_spaces):
            if b == key[0] and s == key[1]:
                return i
        if len(_spaces) >= MAX_SPACES:
            return None
        _spaces.append(key)
        return len(_spaces) - 1


class suppressed:
    """``with suppressed():`` allocations made inside are not registered (ktrace's own buffers)."""

    def __enter__(self):
        self._was = getattr(_suppressed, "on", False)
        _suppressed.on = True

    def __exit__(self, *exc):
        _suppressed.on = self._was


def table() -> list[dict]:
    """This process's table of mappings, as a capture stores it."""
    with _lock:
        spaces = list(_spaces)
    out = []
    for space, (bases, size, name) in enumerate(spaces):
        for owner, base in enumerate(bases):
            if base:
                out.append(Mapping(base=base, size=size, owner=owner, space=space, name=name).to_json())
    return out[:MAX_MAPPINGS]


def _reset_for_tests() -> None:
    with _lock:
        _spaces.clear()


# ---------------------------------------------------------------------------------------------
# reading: addresses -> location keys
# ---------------------------------------------------------------------------------------------


def location_key(owner, space, offset) -> np.ndarray:
    """The location key of (owner, space, offset) arrays (see the module docstring)."""
    owner, space, offset = (np.asarray(x, np.int64) for x in (owner, space, offset))
    return (np.int64(LOCATION_BIT) | (space << SPACE_SHIFT) | (owner << OWNER_SHIFT)
            | (offset & np.int64((1 << OFFSET_BITS) - 1)))


def is_location(flag) -> np.ndarray:
    return (np.asarray(flag, np.int64) & np.int64(LOCATION_BIT)) != 0


def owner_of(flag, rank) -> np.ndarray:
    """The rank whose memory a flag is: a location key's owner; else ``rank`` (a heap offset or a
    private address names memory of the rank that recorded it)."""
    flag = np.asarray(flag, np.int64)
    return np.where(is_location(flag), (flag >> OWNER_SHIFT) & ((1 << OWNER_BITS) - 1), np.asarray(rank, np.int64))


def split_key(flag) -> tuple[int, int, int] | None:
    """``(owner, space, offset)`` of one location key; None for any other flag."""
    f = int(flag)
    if not f & LOCATION_BIT:
        return None
    return ((f >> OWNER_SHIFT) & ((1 << OWNER_BITS) - 1), (f >> SPACE_SHIFT) & ((1 << SPACE_BITS) - 1),
            f & ((1 << OFFSET_BITS) - 1))


def resolve(words, rank: int, mappings: list[Mapping]) -> tuple[np.ndarray, np.ndarray]:
    """Recorded address words of one rank -> ``(location keys, owner ranks)``.

    An address inside a mapping is (its owner, or the owner the call gave; the space; the
    offset); the smallest mapping that holds it wins. Outside every mapping: with an owner given
    by the call, (that owner, :data:`UNMAPPED_SPACE`, the address's low 40 bits); else the
    address itself, owned by ``rank``.
    """
    w = np.asarray(words, np.int64)
    addr = w & np.int64((1 << ADDRESS_BITS) - 1)
    given = (w >> ADDRESS_BITS) & np.int64((1 << (62 - ADDRESS_BITS)) - 1)  # owner + 1, or 0
    keys = addr.copy()
    owners = np.full(w.shape, rank, np.int64)
    found = np.zeros(w.shape, bool)
    # largest first, so that a smaller mapping inside a larger one (a heap inside a buffer) wins
    for m in sorted(mappings, key=lambda m: -m.size):
        inside = (addr >= m.base) & (addr < m.base + m.size)
        if not inside.any():
            continue
        off = addr[inside] - m.base + m.offset
        own = np.where(given[inside] > 0, given[inside] - 1, m.owner)
        keys[inside] = location_key(own, m.space, off)
        owners[inside] = own
        found |= inside
    orphan = ~found & (given > 0)
    if orphan.any():
        own = given[orphan] - 1
        keys[orphan] = location_key(own, UNMAPPED_SPACE, addr[orphan])
        owners[orphan] = own
    return keys, owners
