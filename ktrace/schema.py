"""The one definition of ktrace's event buffer: header, record, event kinds, units.

Everything that reads or writes an event buffer takes its layout from here: the device
probes (``ktrace.language``), the host-side buffers (``ktrace.session``), the decoder
(``ktrace.decode``), the capture files (``ktrace.captures``), the trace writers (``ktrace.export``) and the tests. Pure Python and numpy;
importing it never pulls in torch or triton.

Buffer layout (little-endian, byte offsets)::

    [0, 64)                               header (HEADER_DTYPE)
    [64, 64 + P*C*32)                     records: program p owns slots [p*C, (p+1)*C)
    [64 + P*C*32, 64 + P*C*32 + P*4)      dropped events per program (uint32)

with P programs in the launch grid and C slots per program (the ``KTRACE`` constexpr). This is
the *dense* layout, the one the device writes. Capture files store the *packed* layout
(``layout`` byte 1 in the header), which keeps only the slots each program used::

    [0, 64)                               header (HEADER_DTYPE, layout = LAYOUT_PACKED)
    [64, 64 + U)                          slots kept per program (uint32 x P, padded to U = 8k bytes)
    [64 + U, 64 + U + N*32)               records: program 0's kept slots, then program 1's, ...
    [64 + U + N*32, ... + P*4)            dropped events per program (uint32)

where program p keeps its slots [0, n_p): n_p is one past its last non-empty slot (the probes
fill slots in order, so what is cut is slots never written) and N is the sum of the n_p.
Device buffers are sized for the worst case, so a real launch's packed buffer is often a
quarter of its dense one or less.

Lanes. A program of a warp-specialized kernel (``ktrace.gluon``) records per *lane*, a warp
group or ``gl.warp_specialize`` partition, each with its own slots and dropped counter. A
launch of G programs and L lanes is stored as P = G*L *virtual programs*: lane l of program g
is virtual program ``g*L + l``, and the header's ``grid`` is the launch grid with its x extent
multiplied by L (so ``grid``'s product is P, and every layout above holds unchanged). The
header's ``lanes`` field says L; 0 (what every buffer before lanes holds in those bytes) and 1
mean one lane, the program itself. The decoder gives ``program = v // L`` and ``lane = v % L``
for virtual program v. The format version is unchanged: a reader that predates lanes reads a
lane buffer as one of L times more programs, each lane one of them.

A record is 32 bytes (RECORD_DTYPE)::

    t0   u64   start timestamp, raw timer ticks
    t1   u64   end timestamp (== t0 for instants and counters)
    tag  u32   kind (bits 0-3) | flags (bits 4-7) | region id (bits 8-31)
    hw   u32   where it ran: SM id on NVIDIA; on AMD (xcc << 16) | (se << 5) | (sh << 4) | cu
    arg0 i32   first integer argument  (counters: low 32 bits of the value)
    arg1 i32   second integer argument (counters: high 32 bits of the value)

An event with more arguments than two (a wait, a notify) takes two consecutive slots: the
event's own record with FLAG_DETAIL set, then a DETAIL record whose t0/t1 fields carry two
64-bit arguments and whose arg0/arg1 carry two 32-bit ones. The decoder folds the pair into
one row with six arguments (``arg0`` .. ``arg5``).
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass

import numpy as np

#: First four bytes of every event buffer: b"KTRC".
MAGIC = int.from_bytes(b"KTRC", "little")
#: Layout version of the buffer described here. Bump on any change to the layouts below.
#: Version 2 added the packed layout and the header's ``layout`` byte (0 in version 1, where
#: every buffer is dense).
FORMAT_VERSION = 2

#: Values of the header's ``layout`` byte.
LAYOUT_DENSE = 0
LAYOUT_PACKED = 1

HEADER_BYTES = 64
RECORD_BYTES = 32
#: Bytes per program of the dropped-event counters after the records.
DROPPED_BYTES = 4

KIND_BITS = 4
FLAG_BITS = 4
REGION_SHIFT = KIND_BITS + FLAG_BITS  # 8
REGION_BITS = 24
REGION_MASK = (1 << REGION_BITS) - 1


class EventKind(enum.IntEnum):
    """What a record describes. 0 marks a slot never written."""

    EMPTY = 0
    #: A region with a start and an end (``kl.begin`` / ``kl.end``).
    SPAN = 1
    #: A point in time (``kl.mark``).
    INSTANT = 2
    #: A named 64-bit integer value at a point in time (``kl.counter``).
    COUNTER = 3
    #: A spin-wait on a flag: t0 when the wait began, t1 when the flag was seen (or given up).
    WAIT = 4
    #: A signal sent to a peer (the flag write that may release someone's wait).
    NOTIFY = 5
    #: The continuation of the previous slot's event (two more 64-bit and two 32-bit arguments).
    DETAIL = 15


class EventFlag(enum.IntFlag):
    """Bits 4-7 of a record's tag."""

    NONE = 0
    #: The next slot of the same program holds this event's DETAIL record.
    DETAIL = 1
    #: A wait that gave up at its bound instead of seeing the value it waited for.
    TIMEOUT = 2
    #: A hand-off inside one program (``ktrace.gluon``): an mbarrier wait (WAIT) or what
    #: completes a phase of an mbarrier (NOTIFY: an arrive, or an expect-tx whose TMA copies
    #: complete it). Its ``flag`` is the barrier (:func:`barrier_key`), ``value``/``expected`` the
    #: phase; ``peer`` is -1. Paired by (rank, launch, program, barrier, phase), never across programs.
    LOCAL = 4
    #: A wait still spinning when a live dump (``ktrace.flight``) was taken: its end is the
    #: dump's time, not a read that saw the flag. Set together with TIMEOUT, so that analyses
    #: of hangs read it as a wait that did not get its signal by then.
    OPEN = 8


class TimerKind(enum.IntEnum):
    """Which hardware counter produced the timestamps."""

    UNKNOWN = 0
    #: NVIDIA ``%globaltimer``: nanoseconds (updates every 32 ns on H100/H200).
    NV_GLOBALTIMER = 1
    #: AMD ``s_memrealtime``: a constant-rate counter (100 MHz on MI300, 25 MHz on MI200).
    AMD_MEMREALTIME = 2


#: Tick rate of each timer kind when the device does not say (Hz).
DEFAULT_TICK_HZ = {
    TimerKind.NV_GLOBALTIMER: 1_000_000_000,
    TimerKind.AMD_MEMREALTIME: 100_000_000,
}

#: ``s_memrealtime`` rate by AMD architecture, for when hipDeviceAttributeWallClockRate reads 0.
AMD_WALLCLOCK_HZ = {
    "gfx942": 100_000_000,
    "gfx941": 100_000_000,
    "gfx940": 100_000_000,
    "gfx950": 100_000_000,
    "gfx90a": 25_000_000,
    "gfx908": 25_000_000,
}

HEADER_DTYPE = np.dtype(
    [
        ("magic", "<u4"),
        ("version", "<u2"),
        ("header_bytes", "<u2"),
        ("record_bytes", "<u2"),
        ("timer", "u1"),
        ("layout", "u1"),  # LAYOUT_DENSE (as the device writes it) or LAYOUT_PACKED
        ("capacity", "<u4"),  # slots per program (C)
        ("tick_hz", "<u8"),
        ("n_programs", "<u4"),  # P
        ("grid", "<u4", (3,)),
        ("written", "<u8"),  # events decoded (filled by the host when it decodes)
        ("dropped", "<u8"),  # events that did not fit (filled by the host when it decodes)
        ("lanes", "<u2"),  # lanes per program (0 or 1: one; see Lanes above)
        ("reserved1", "<u2"),
        ("reserved2", "<u4"),
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_BYTES, HEADER_DTYPE.itemsize


def _struct_of(dt: np.dtype) -> tuple[struct.Struct, tuple[tuple[str, int, int], ...]]:
    """A ``struct`` reading the same bytes as a packed little-endian dtype, and each field's
    ``(name, first value, values)`` in its flat tuple (for parsing one header without numpy)."""
    codes = {"u1": "B", "u2": "H", "u4": "I", "u8": "Q", "i1": "b", "i2": "h", "i4": "i", "i8": "q"}
    fmt, where, i, off = "<", [], 0, 0
    for name in dt.names:
        f, at = dt.fields[name][:2]
        assert at == off, f"{name}: padding before it"
        base, shape = f.subdtype if f.subdtype else (f, ())
        n = int(np.prod(shape)) if shape else 1
        fmt += (str(n) if n > 1 else "") + codes[base.str[1:]]
        where.append((name, i, n))
        i, off = i + n, off + f.itemsize
    st = struct.Struct(fmt)
    assert st.size == dt.itemsize
    return st, tuple(where)


_HEADER_STRUCT, _HEADER_WHERE = _struct_of(HEADER_DTYPE)


def unpack_header(buf) -> dict:
    """The fields of a header (the first ``HEADER_BYTES`` of ``buf``) as Python ints (``grid``
    a tuple), unchecked: ``ktrace.decode.read_header`` validates them."""
    v = _HEADER_STRUCT.unpack_from(buf)
    return {name: v[i] if n == 1 else v[i:i + n] for name, i, n in _HEADER_WHERE}

RECORD_DTYPE = np.dtype(
    [
        ("t0", "<u8"),
        ("t1", "<u8"),
        ("tag", "<u4"),
        ("hw", "<u4"),
        ("arg0", "<i4"),
        ("arg1", "<i4"),
    ]
)
assert RECORD_DTYPE.itemsize == RECORD_BYTES, RECORD_DTYPE.itemsize

#: The same 32 bytes seen as a DETAIL record.
DETAIL_DTYPE = np.dtype(
    [
        ("x0", "<i8"),
        ("x1", "<i8"),
        ("tag", "<u4"),
        ("hw", "<u4"),
        ("x2", "<i4"),
        ("x3", "<i4"),
    ]
)
assert DETAIL_DTYPE.itemsize == RECORD_BYTES

#: One decoded event per row: what ``ktrace.decode`` yields for a launch.
#: ``start``/``end`` are raw ticks of the device timer; the collector converts them to ns on a
#: common clock. ``slot`` is the event's position in its program's slots (its program order).
EVENT_DTYPE = np.dtype(
    [
        ("rank", "<i4"),
        ("launch", "<i4"),
        ("program", "<i4"),
        ("lane", "<i4"),
        ("slot", "<i4"),
        ("kind", "u1"),
        ("flags", "u1"),
        ("region", "<u4"),
        ("hw", "<u4"),
        ("start", "<i8"),
        ("end", "<i8"),
        ("arg0", "<i8"),
        ("arg1", "<i8"),
        ("arg2", "<i8"),
        ("arg3", "<i8"),
        ("arg4", "<i8"),
        ("arg5", "<i8"),
    ]
)

class Cmp(enum.IntEnum):
    """How a wait compares the flag with the value it expects (``ktrace.shmem.language.wait``).

    The code is recorded in a WAIT event's ``cmp`` argument (``arg5``); 0 means no comparison
    was recorded (a wait written by hand with ``kl.record_wait``).
    """

    EQ = 1
    NE = 2
    GE = 3
    GT = 4
    LE = 5
    LT = 6


#: Comparison names accepted by ``wait(..., cmp=...)``, as written in traces: ``"ge"`` -> 3.
CMP_NAMES = {c.name.lower(): int(c) for c in Cmp}
#: The operator each comparison code stands for, as reports write it.
CMP_SYMBOLS = {int(Cmp.EQ): "==", int(Cmp.NE): "!=", int(Cmp.GE): ">=", int(Cmp.GT): ">", int(Cmp.LE): "<=",
               int(Cmp.LT): "<"}


def cmp_name(code: int) -> str:
    """The name of a comparison code (``3`` -> ``"ge"``); the number itself for an unknown code."""
    try:
        return Cmp(int(code)).name.lower()
    except ValueError:
        return str(int(code))


#: What each argument column means, per event kind: the name of ``arg0`` .. ``arg5`` (None: the
#: column carries nothing for that kind). Writers name a slice's arguments with these and
#: analyses read columns by them (:func:`arg_column`); nothing else names the arguments.
ARG_NAMES: dict[EventKind, tuple[str | None, ...]] = {
    EventKind.SPAN: ("arg0", "arg1", None, None, None, None),
    EventKind.INSTANT: ("arg0", "arg1", None, None, None, None),
    # a counter's 64-bit value (split over the record's two 32-bit fields, joined by the decoder)
    EventKind.COUNTER: ("value", None, None, None, None, None),
    # wait: the peer waited on, polls of the flag; detail: the flag's heap offset (bytes), the last
    # value read, the value expected, the comparison (Cmp)
    EventKind.WAIT: ("peer", "spins", "flag", "value", "expected", "cmp"),
    # notify: the peer signalled, the value written; detail: the flag's heap offset on the peer
    # (bytes), the sender's notify sequence number
    EventKind.NOTIFY: ("peer", "value", "flag", "seq", None, None),
}
#: Argument columns, in order.
ARG_COLUMNS = ("arg0", "arg1", "arg2", "arg3", "arg4", "arg5")
#: How wide each argument is where it is recorded: ``arg0``/``arg1`` in the event's own record
#: (32-bit), ``arg2``/``arg3`` in its DETAIL record's two 64-bit fields, ``arg4``/``arg5`` in its
#: two 32-bit ones. ``EVENT_DTYPE`` holds them all as int64; a column of one kind's arguments
#: held at these widths loses nothing (:func:`arg_dtype`).
_ARG_RECORD_DTYPES = {"arg0": np.dtype("<i4"), "arg1": np.dtype("<i4"), "arg2": np.dtype("<i8"), "arg3": np.dtype("<i8"),
                      "arg4": np.dtype("<i4"), "arg5": np.dtype("<i4")}


def arg_dtype(kind: EventKind, column: str) -> np.dtype:
    """The narrowest type that holds argument ``column`` of every event of ``kind``: its record
    field's (a COUNTER's ``arg0`` is its 64-bit value, joined from both 32-bit fields)."""
    if EventKind(kind) == EventKind.COUNTER and column == "arg0":
        return np.dtype("<i8")
    return _ARG_RECORD_DTYPES[column]


def arg_fields(kind: EventKind) -> tuple[tuple[str, str], ...]:
    """``(name, column)`` of each argument an event of ``kind`` carries, in column order."""
    return tuple((n, c) for n, c in zip(ARG_NAMES[EventKind(kind)], ARG_COLUMNS) if n is not None)


def arg_column(kind: EventKind, name: str) -> str:
    """The column (``arg0`` .. ``arg5``) holding argument ``name`` of an event of ``kind``."""
    for n, c in zip(ARG_NAMES[EventKind(kind)], ARG_COLUMNS):
        if n == name:
            return c
    raise KeyError(f"{EventKind(kind).name} events have no argument {name!r} (they have {[n for n, _ in arg_fields(kind)]})")


#: Arguments whose codes have names: written by name in traces (``cmp``: :func:`cmp_name`).
ARG_VALUE_NAMES = {(EventKind.WAIT, "cmp"): cmp_name}

#: ``EVENT_DTYPE`` plus the event's start and end on the common clock (int64 ns; host wall-clock
#: time when the capture has a host anchor): the aligned event, what the clock model's
#: ``aligned_events`` returns and analyses start from.
ALIGNED_DTYPE = np.dtype(EVENT_DTYPE.descr + [("start_ns", "<i8"), ("end_ns", "<i8")])

#: Units of the columns that have one (the unit-suffixed names analyses use).
UNITS = {"start": "ticks", "end": "ticks", "start_ns": "ns", "end_ns": "ns", "dur_ns": "ns"}


def is_timeout(flags) -> np.ndarray:
    """Per event, whether its wait gave up at its bound (the TIMEOUT flag) — the one test of it."""
    return (np.asarray(flags) & int(EventFlag.TIMEOUT)) != 0


def is_local(flags) -> np.ndarray:
    """Per event, whether it is a hand-off inside one program (the LOCAL flag: an mbarrier wait or
    release, ``ktrace.gluon``) — the one test of it."""
    return (np.asarray(flags) & int(EventFlag.LOCAL)) != 0


def wait_state(flags) -> np.ndarray:
    """Per WAIT event, 0 (it saw its flag), 1 (it gave up at its bound: TIMEOUT) or 2 (still
    spinning at a live dump: OPEN), as int64: how traces name it."""
    f = np.asarray(flags)
    return np.where((f & int(EventFlag.OPEN)) != 0, 2, is_timeout(f).astype(np.int64))


def empty_aligned(n: int = 0) -> np.ndarray:
    """An aligned table (``ALIGNED_DTYPE``) of ``n`` zero rows."""
    return np.zeros(n, ALIGNED_DTYPE)


#: Most lanes one program may have (the header's ``lanes`` is a u16; warp groups per program are far fewer).
MAX_LANES = 64


def header_lanes(value: int) -> int:
    """Lanes per program a header's ``lanes`` field means (0, in buffers made before lanes: 1)."""
    return max(1, int(value))


def virtual_grid(grid, lanes: int) -> tuple[int, int, int]:
    """The grid a buffer's header holds for a launch of ``grid`` with ``lanes`` lanes per program."""
    gx, gy, gz = (tuple(int(g) for g in grid) + (1, 1))[:3]
    return (gx * int(lanes), gy, gz)


def barrier_key(region: int, index: int) -> int:
    """The ``flag`` argument of a LOCAL hand-off: barrier ``index`` of the barrier array named by
    ``region`` (its region id), unique within a program."""
    return (int(region) << 32) | (int(index) & 0xFFFFFFFF)


def tag_of(kind: int, region: int, flags: int = 0) -> int:
    """The u32 tag of a record."""
    return (int(kind) & 0xF) | ((int(flags) & 0xF) << KIND_BITS) | ((int(region) & REGION_MASK) << REGION_SHIFT)


def region_id(name: str) -> int:
    """The 24-bit id of a region name: the same in every process, on every rank.

    Ids are a hash, so no table of names has to be kept in step by hand; 0 is never used
    (it would look like an empty slot's region).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a region name must be a non-empty string, got {name!r}")
    rid = zlib.crc32(name.encode("utf-8")) & REGION_MASK
    return rid or 1


def buffer_bytes(n_programs: int, capacity: int) -> int:
    """Size in bytes of an event buffer for ``n_programs`` programs of ``capacity`` slots."""
    if n_programs <= 0 or capacity <= 0:
        raise ValueError(f"n_programs and capacity must be positive, got {n_programs}, {capacity}")
    return HEADER_BYTES + n_programs * capacity * RECORD_BYTES + n_programs * DROPPED_BYTES


def records_offset() -> int:
    return HEADER_BYTES


def packed_counts_bytes(n_programs: int) -> int:
    """Bytes of a packed buffer's kept-slot counts (uint32 per program, padded to 8 bytes)."""
    return (n_programs * 4 + 7) // 8 * 8


def packed_bytes(n_programs: int, n_records: int) -> int:
    """Size in bytes of a packed buffer of ``n_programs`` programs keeping ``n_records`` slots in all."""
    return HEADER_BYTES + packed_counts_bytes(n_programs) + n_records * RECORD_BYTES + n_programs * DROPPED_BYTES


def dropped_offset(n_programs: int, capacity: int) -> int:
    return HEADER_BYTES + n_programs * capacity * RECORD_BYTES


# ---------------------------------------------------------------------------------------------
# Ring mode (the flight recorder, ``ktrace.flight``)
#
# A launch traced in ring mode gets ``KTRACE = RING_GATE | N`` (N a power of two): each program
# (lane) keeps its last N records, slot ``s % N`` for its s-th record, and the 4-byte word that
# counts dropped events in the dense layout holds the lane's HEAD instead: records written in all
# (mod 2**32), stored with every record. ``head - min(head, N)`` records were overwritten: exact.
# After the counters, 16-byte aligned, each lane has a NOW slot (NOW_DTYPE) that a wait fills
# once it has read its flag ``ks.NOW_AFTER_SPINS`` times and clears (``since = 0``) when it ends,
# and that ``kl.init`` stamps with the lane's start time. The device never writes the header; the host reads the rest while
# the kernel runs (the buffer lives in pinned host memory mapped into the device)::
#
#     [0, 64)                        header (written by the host)
#     [64, 64 + P*N*32)              records, lane p's ring at 64 + p*N*32
#     [.., .. + P*4)                 uint32 head per lane
#     [now_offset, .. + P*64)        NOW slot per lane
#
# Captures never hold this layout: ``ktrace.flight.ring.unroll`` turns a ring into the dense
# layout (records in order, the overwritten count as the lane's dropped count).
# ---------------------------------------------------------------------------------------------

#: Bit of the ``KTRACE`` gate that selects ring mode (``RING_GATE | N``, N slots per lane).
RING_GATE = 1 << 24
#: Bytes of a lane's NOW slot.
NOW_BYTES = 64

#: A lane's NOW slot: what it is waiting for at this moment (``since == 0``: not in a wait).
#: ``cmp_region`` holds the comparison code (``Cmp``) in its low 8 bits and the wait's region id
#: above them; ``seen`` is the last value the lane read from the flag (written when it changes).
NOW_DTYPE = np.dtype(
    [
        ("since", "<u8"),  # raw timer ticks when the wait began; 0 when the lane is not waiting
        ("flag", "<i8"),  # the flag's heap offset (bytes)
        ("expected", "<i4"),
        ("cmp_region", "<u4"),
        ("peer", "<i4"),  # the rank expected to set the flag
        ("seen", "<i4"),
        ("started", "<u8"),  # raw timer ticks when the lane opened its tracer (kl.init); 0: not yet
        ("reserved", "<u8", (3,)),
    ]
)
assert NOW_DTYPE.itemsize == NOW_BYTES


def is_ring_gate(ktrace: int) -> bool:
    """Whether a ``KTRACE`` gate value selects ring mode."""
    return int(ktrace) >= RING_GATE


def ring_gate(slots: int) -> int:
    """The ``KTRACE`` value of ring mode with ``slots`` records per lane (a power of two)."""
    if not 2 <= slots < RING_GATE or slots & (slots - 1):
        raise ValueError(f"ring slots per lane must be a power of two in [2, {RING_GATE}), got {slots}")
    return RING_GATE | slots


# ---------------------------------------------------------------------------------------------
# Delay injection (``ktrace.inject``: what-if checks of the report's predictions on the GPU)
#
# A launch traced with injection gets ``KTRACE = INJECT_GATE | N``: its probes then read a table
# of delays that the host writes in the INJECT_WORDS int64 words right before the launch's buffer
# (its header stays at the buffer's start)::
#
#     [0]                            rows in use (0..INJECT_ROWS)
#     [1 + 4*i .. 1 + 4*i + 4)       row i: program (-1: every one), lane (-1: every one), site, ns
#
# A site is a region id (``kl.region(name)``: a span's ``kl.begin`` delays after its start, a
# notify of that name delays before its release) or INJECT_LAUNCH (``kl.init``: the program's
# start). Without the bit every injection point compiles to nothing (the assembly is unchanged).
# ---------------------------------------------------------------------------------------------

#: Bit of the ``KTRACE`` gate that compiles the delay-injection points in.
INJECT_GATE = 1 << 23
#: Rows of a launch's delay table (the device checks every one at each injection point).
INJECT_ROWS = 4
#: int64 words per row: program, lane, site, delay (ns).
INJECT_ROW_WORDS = 4
#: int64 words the table takes before the buffer (a multiple of 32: buffers stay 256-byte aligned).
INJECT_WORDS = 32
#: The site of a delay at a program's start (``kl.init``).
INJECT_LAUNCH = -1
assert 1 + INJECT_ROWS * INJECT_ROW_WORDS <= INJECT_WORDS and INJECT_GATE < RING_GATE


def inject_gate(gate: int) -> int:
    """The ``KTRACE`` value of ``gate`` (dense N, or ring mode's) with delay injection compiled in."""
    if int(gate) <= 0 or int(gate) & INJECT_GATE:
        raise ValueError(f"delay injection needs a traced gate without the injection bit, got {gate}")
    return int(gate) | INJECT_GATE


def injects(gate: int) -> bool:
    """Whether a ``KTRACE`` gate compiles delay injection in."""
    return bool(int(gate) & INJECT_GATE)


def heads_offset(n_programs: int, slots: int) -> int:
    """Byte offset of a ring buffer's per-lane heads (where the dense layout counts drops)."""
    return dropped_offset(n_programs, slots)


def now_offset(n_programs: int, slots: int) -> int:
    """Byte offset of a ring buffer's NOW slots (16-byte aligned after the heads)."""
    return (heads_offset(n_programs, slots) + n_programs * DROPPED_BYTES + 15) // 16 * 16


def ring_buffer_bytes(n_programs: int, slots: int) -> int:
    """Size in bytes of a ring-mode buffer of ``n_programs`` lanes of ``slots`` records."""
    if n_programs <= 0 or slots <= 0:
        raise ValueError(f"n_programs and slots must be positive, got {n_programs}, {slots}")
    return now_offset(n_programs, slots) + n_programs * NOW_BYTES


@dataclass(frozen=True)
class Header:
    """A buffer header as Python values."""

    timer: TimerKind
    tick_hz: int
    capacity: int
    n_programs: int
    grid: tuple[int, int, int]
    written: int = 0
    dropped: int = 0
    version: int = FORMAT_VERSION
    layout: int = LAYOUT_DENSE
    #: lanes per program (1: the program is its one lane); ``grid`` is then the virtual grid
    lanes: int = 1

    def __post_init__(self):
        if self.capacity <= 0 or self.n_programs <= 0:
            raise ValueError(f"capacity and n_programs must be positive: {self}")
        gx, gy, gz = self.grid
        if gx * gy * gz != self.n_programs:
            raise ValueError(f"grid {self.grid} does not hold {self.n_programs} programs")
        if self.tick_hz <= 0:
            raise ValueError(f"tick_hz must be positive, got {self.tick_hz}")
        if not 1 <= self.lanes <= MAX_LANES or gx % self.lanes:
            raise ValueError(f"lanes must be 1..{MAX_LANES} and divide the grid's x extent {gx}, got {self.lanes}")

    def to_array(self) -> np.ndarray:
        h = np.zeros((), HEADER_DTYPE)
        h["magic"] = MAGIC
        h["version"] = self.version
        h["header_bytes"] = HEADER_BYTES
        h["record_bytes"] = RECORD_BYTES
        h["timer"] = int(self.timer)
        h["capacity"] = self.capacity
        h["tick_hz"] = self.tick_hz
        h["n_programs"] = self.n_programs
        h["grid"] = self.grid
        h["written"] = self.written
        h["dropped"] = self.dropped
        h["layout"] = self.layout
        h["lanes"] = self.lanes
        return h

    def to_bytes(self) -> bytes:
        return self.to_array().tobytes()

    @property
    def nbytes(self) -> int:
        """Size of the whole buffer this header describes in the dense layout."""
        return buffer_bytes(self.n_programs, self.capacity)

    @property
    def packed(self) -> bool:
        return self.layout == LAYOUT_PACKED
