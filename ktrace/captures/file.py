"""Capture files: what a traced run leaves behind, readable anywhere without torch or triton.

A capture file (``*.ktrace``) is a zip archive (stored, or deflated on request) holding:

``ktrace.json``
    ``{"format": "ktrace-capture", "version": 1, "ktrace_version": ..., "created_ns": ...,
    "world_size": W, "ranks": [...], "regions": {"<id>": "<name>"}, "clock": {...} | null,
    "partial": false, "meta": {...}}``. Each rank entry holds its device (name, vendor, arch,
    timer kind, tick rate, SM count), its launches (index, kernel, grid, capacity, host time,
    the name of its raw buffer in the archive and that buffer's size and CRC-32) and its clock
    calibration samples, if any.
``r<rank>/l<launch>.bin``
    The raw event buffer of one launch in the packed layout of ``ktrace.schema`` (its header
    says how to read it): the device buffer without the slots its programs never reached,
    which for real launches is most of it (buffers are sized for the worst case). Version-1
    files hold dense buffers, byte for byte as they were on the device; both are read.

Each rank may write its own file and ``ktrace merge`` (or :func:`merge_captures`) combines them;
or the ranks gather to one through ``torch.distributed`` and one file is written.

Reading a truncated, corrupt, foreign or newer-version file raises :class:`CaptureError` with a
one-line message naming the file and what is wrong, whatever the damage: a byte flipped in the
zip directory, in a member's header or in its (stored, deflated, LZMA or bzip2) data. Every
buffer is checked against the CRC-32 the metadata records before it is decoded, so damage is
reported, never decoded into other events. Buffers stored uncompressed are read from the file
on first use of :attr:`Launch.raw` (positional reads of the file opened by
:func:`read_capture`, so forked workers can read them too), and CRC-checked then: a damaged
buffer raises :class:`CaptureError` where it is first read, not in :func:`read_capture`.

Every capture names its run (``run_id``, the same on every rank of a run: see
``ktrace.captures.identity``); :func:`merge_captures` refuses parts of different runs unless
told otherwise, and a merge with ranks missing warns and marks the result partial.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import lzma
import math
import os
import struct
import time
import weakref
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import orjson

from .. import __version__, schema
from ..decode import MAX_TICK_HZ, MIN_TICK_HZ, DecodeError, DecodedBuffer, decode_buffer, head_bytes, pack_buffer, split_head
from ..text import printable, ranges_text

log = logging.getLogger("ktrace")

CAPTURE_FORMAT = "ktrace-capture"
#: Version 2: buffers are stored packed, and each launch entry says its buffer's ``layout`` and
#: ``records`` (the record slots it holds).
CAPTURE_VERSION = 2
_META = "ktrace.json"


class CaptureError(ValueError):
    """A capture file cannot be read or merged."""


#: Largest world size a capture may declare (a file's claim is checked before anything is sized by it; analyses
#: list the missing ranks of a partial capture, so a claim costs up to a few MB at this size).
MAX_WORLD_SIZE = 1 << 16
#: Largest capture metadata (``ktrace.json``) read: ~250,000 launches' entries.
MAX_META_BYTES = 64 << 20
#: Largest ratio of a compressed member's size to its stored size that is inflated: ktrace's own
#: files stay under 80x (LZMA, the bundled captures); deflate cannot pass 1032x; a member that
#: claims more is refused before a byte is inflated (a zip bomb: 8 MB claiming 6 GiB).
MAX_INFLATION = 256
#: Largest launch index, grid size (programs), slots per program, and other counts in metadata.
_MAX_INDEX = (1 << 31) - 1
#: Chunk in which members are inflated (never more than the metadata allows, plus one chunk).
_CHUNK = 1 << 20


def _checked_int(v, what: str, lo: int = 0, hi: int = (1 << 63) - 1) -> int:
    """``v`` as an int in ``[lo, hi]``; TypeError/ValueError (a corrupt-metadata message) otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise TypeError(f"{what} is {v!r:.40}, not an integer")
    v = int(v)
    if not lo <= v <= hi:
        raise ValueError(f"{what} {v} is outside {lo}..{hi}")
    return v


def _int(v, lo: int, hi: int, what: str, *args) -> int:
    """:func:`_checked_int`, its message (``what % args``) made only for a value it refuses: a
    capture of 100,000 launches checks a million numbers."""
    if type(v) is int and lo <= v <= hi:
        return v
    return _checked_int(v, what % args if args else what, lo, hi)


#: What reading a damaged zip archive can raise besides :class:`zipfile.BadZipFile`: a flipped
#: byte in the zip directory or a member's header reaches parsing code that raises almost any
#: of these (an unsupported "version" or compression method, an "encrypted" flag, a bad field
#: size), and each decompressor has its own error (bzip2's is an OSError).
_ZIP_DAMAGE = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, RuntimeError, OSError, ValueError, struct.error,
               IndexError, OverflowError)


def _damage_text(e: BaseException) -> str:
    """What a damaged archive's exception says, as a short phrase on one line."""
    if isinstance(e, lzma.LZMAError):
        text = f"LZMA: {e}"
    elif isinstance(e, zlib.error):
        text = f"deflate: {e}"
    elif isinstance(e, EOFError):
        text = "its compressed data ends early"
    elif isinstance(e, NotImplementedError):
        text = f"unsupported zip entry: {e}"
    elif isinstance(e, zipfile.BadZipFile):
        text = str(e) or "bad zip data"
    else:
        text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return " ".join(text.split())


@dataclass
class Launch:
    """One kernel launch on one rank: what was launched and its raw event buffer."""

    index: int  # launch order on its rank, from 0
    kernel: str
    grid: tuple[int, int, int]
    capacity: int  # event slots per program
    raw: np.ndarray  # uint8: the whole device buffer
    host_ns: int = 0  # host wall clock (time.time_ns) when it was launched
    stream: int = 0
    meta: dict = field(default_factory=dict)
    _decoded: dict = field(default_factory=dict, repr=False, compare=False)
    #: The capture file it was read from (for messages; "" when made in memory).
    source: str = field(default="", repr=False, compare=False)

    @property
    def nbytes(self) -> int:
        """Size of the raw buffer in bytes (without reading a buffer not read yet)."""
        r = self.__dict__["_raw"]
        return r.nbytes if isinstance(r, _LazyBuffer) else int(np.asarray(r).nbytes)

    def load_raw(self) -> np.ndarray:
        """The raw buffer for one use: a buffer not read from its file yet is read (and
        CRC-checked) for this call only, not kept on the launch."""
        r = self.__dict__["_raw"]
        return r.load() if isinstance(r, _LazyBuffer) else self.raw

    def split_sizes(self) -> tuple[int, int, int] | None:
        """``(head bytes, record slots, dropped-counter bytes)`` of the buffer, from its header (or,
        for a buffer not read yet, from the capture file's metadata); None when the buffer is
        too damaged to say (reading it whole reports what is wrong)."""
        r = self.__dict__["_raw"]
        P = math.prod(self.grid)
        if isinstance(r, _LazyBuffer):
            if r.layout == "packed":
                return schema.HEADER_BYTES + schema.packed_counts_bytes(P), r.records, P * schema.DROPPED_BYTES
            return schema.HEADER_BYTES, P * self.capacity, P * schema.DROPPED_BYTES
        try:
            h, kept = split_head(np.asarray(r).reshape(-1).view(np.uint8))
        except DecodeError:
            return None
        n_rec = h.n_programs * h.capacity if kept is None else int(kept.sum(dtype=np.int64))
        return head_bytes(h), n_rec, h.n_programs * schema.DROPPED_BYTES

    def decode(self, rank: int, *, cache: bool = True) -> DecodedBuffer:
        """Decode the raw buffer.

        Args:
            rank: the rank column's value.
            cache: keep the result on the launch (decode once). Writers streaming a large
                capture pass False so that decoded tables never pile up in memory; then a
                buffer not read from its file yet is read for this call only, not kept.

        Raises:
            CaptureError: the buffer does not decode (the message names rank and launch).
        """
        hit = self._decoded.get(rank)
        if hit is not None:
            return hit
        try:
            d = decode_buffer(self.raw if cache else self.load_raw(), rank=rank, launch=self.index)
        except DecodeError as e:
            where = f"{self.source}: " if self.source and self.source not in str(e) else ""
            raise CaptureError(f"{where}rank {rank}, launch {self.index} ({printable(self.kernel)}): {e}") from None
        if cache:
            self._decoded[rank] = d
        return d


def _get_raw(self: Launch) -> np.ndarray:
    r = self.__dict__["_raw"]
    if isinstance(r, _LazyBuffer):
        r = self.__dict__["_raw"] = r.load()
    return r


def _set_raw(self: Launch, value) -> None:
    self.__dict__["_raw"] = value


# set after the dataclass is made (a property in the class body would become the field's default)
Launch.raw = property(_get_raw, _set_raw, doc="The raw event buffer (uint8); read from its capture file on first use.")  # type: ignore[assignment]


class _FileSource:
    """A capture file held open for reading buffers later (the open file stays valid even if the
    path is replaced). Positional reads only: a forked worker may read through the same
    descriptor at the same time. Closed when no buffer needs it any more."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        self._close = weakref.finalize(self, os.close, self.fd)
        self.size = os.fstat(self.fd).st_size

    def read(self, offset: int, n: int) -> bytes:
        parts, got = [], 0
        while got < n:
            b = os.pread(self.fd, n - got, offset + got)
            if not b:
                break
            parts.append(b)
            got += len(b)
        return parts[0] if len(parts) == 1 else b"".join(parts)


#: A zip local file header: signature, ..., name length (at 26) and extra length (at 28).
_LOCAL_HEADER = struct.Struct("<4s22xHH")


@dataclass(slots=True)
class _LazyBuffer:
    """Where an uncompressed buffer lies in its capture file, and its expected size and CRC-32.
    (Made once per launch when a capture is read: kept light.)"""

    source: _FileSource
    header_offset: int
    nbytes: int
    crc32: int
    path: str
    rank: int
    launch: int
    layout: str = "dense"  # as the capture file's metadata says
    records: int = 0  # record slots of a packed buffer (metadata)

    @property
    def where(self) -> str:
        return f"{self.path}: rank {self.rank} launch {self.launch}"

    def _data_offset(self) -> int:
        head = self.source.read(self.header_offset, _LOCAL_HEADER.size)
        if len(head) != _LOCAL_HEADER.size or _LOCAL_HEADER.unpack(head)[0] != b"PK\x03\x04":
            raise CaptureError(f"{self.where}: buffer unreadable: bad zip local header")
        _, n_name, n_extra = _LOCAL_HEADER.unpack(head)
        return self.header_offset + _LOCAL_HEADER.size + n_name + n_extra

    def head(self) -> bytes:
        """The buffer's first bytes (its header), read alone and not checked (:meth:`load` checks)."""
        return self.source.read(self._data_offset(), min(self.nbytes, schema.HEADER_BYTES))

    def load(self, verify: bool = True) -> np.ndarray:
        data = self.source.read(self._data_offset(), self.nbytes)
        if len(data) != self.nbytes or (verify and zlib.crc32(data) != self.crc32):
            raise CaptureError(f"{self.where}: buffer is damaged (size or CRC-32 mismatch)")
        return np.frombuffer(data, np.uint8)

    def __reduce__(self):
        # pickled (or deep-copied) as the bytes themselves: a descriptor means nothing elsewhere
        return np.frombuffer, (self.load().tobytes(), np.uint8)


#: Bytes read past a buffer's zip header for its name and extra field (more are read if needed).
_NAME_SLACK = 512
#: Largest gap between two buffers that :func:`read_buffers` reads through rather than read twice.
_GAP = 256 << 10


def _read_run(run: list, out: list, verify: bool) -> None:
    """Read buffers that lie close together in one file with one read; ``run`` holds
    ``(header offset, index in out, _LazyBuffer)`` in file order."""
    start = run[0][0]
    end = run[-1][0] + _LOCAL_HEADER.size + _NAME_SLACK + run[-1][2].nbytes
    span = run[0][2].source.read(start, end - start)
    for off, i, lb in run:
        at = off - start
        head = span[at : at + _LOCAL_HEADER.size]
        if len(head) != _LOCAL_HEADER.size or _LOCAL_HEADER.unpack(head)[0] != b"PK\x03\x04":
            raise CaptureError(f"{lb.where}: buffer unreadable: bad zip local header")
        _, n_name, n_extra = _LOCAL_HEADER.unpack(head)
        at += _LOCAL_HEADER.size + n_name + n_extra
        if at + lb.nbytes > len(span):  # (a long name or extra field: read it alone)
            out[i] = lb.load(verify)
            continue
        data = np.frombuffer(span, np.uint8, count=lb.nbytes, offset=at)
        if verify and zlib.crc32(data) != lb.crc32:
            raise CaptureError(f"{lb.where}: buffer is damaged (size or CRC-32 mismatch)")
        out[i] = data


def read_adjacent(launches: list[Launch], into: np.ndarray | None = None) -> tuple[list[np.ndarray], np.ndarray] | None:
    """The raw buffers of launches that lie one after another in one capture file, uncompressed
    and not read yet, with one positional read into ``into`` (a uint8 array, reused when large
    enough: a reader that goes through a capture a few MB at a time touches no fresh memory),
    each CRC-checked. Returns the buffers (views of the array) and the array; None where the
    launches are not such (in memory, compressed, in another order or far apart) or a buffer
    does not check out: :func:`read_buffers` then reads them, and says what is wrong.
    """
    lbs = [ln.__dict__["_raw"] for ln in launches]
    if not lbs or not all(isinstance(x, _LazyBuffer) for x in lbs):
        return None
    src = lbs[0].source
    prev_end = lbs[0].header_offset
    for x in lbs:
        if x.source is not src or not 0 <= x.header_offset - prev_end <= _GAP:
            return None
        prev_end = x.header_offset + _LOCAL_HEADER.size + x.nbytes
    start = lbs[0].header_offset
    n = min(lbs[-1].header_offset + _LOCAL_HEADER.size + _NAME_SLACK + lbs[-1].nbytes, src.size) - start
    if n <= 0:
        return None
    if into is None or into.size < n:
        into = np.empty(max(n, 0 if into is None else 2 * into.size), np.uint8)
    got = 0
    while got < n:
        k = os.preadv(src.fd, [memoryview(into)[got:n]], start + got)
        if k <= 0:
            return None
        got += k
    out = []
    head = _LOCAL_HEADER
    for x in lbs:
        at = x.header_offset - start
        sig, n_name, n_extra = head.unpack_from(into, at)
        at += head.size + n_name + n_extra
        if sig != b"PK\x03\x04" or at + x.nbytes > n:
            return None
        data = into[at : at + x.nbytes]
        if zlib.crc32(data) != x.crc32:
            return None
        out.append(data)
    return out, into


def read_buffers(launches: list[Launch], *, verify: bool = True) -> list[np.ndarray]:
    """The raw buffers of several launches for one use, as :meth:`Launch.load_raw` gives each:
    buffers not read from their capture file yet are read for this call only, those that lie
    close together in one file with a single read (what a trace writer's batch of small
    launches costs is then about what one large launch does), and CRC-checked unless
    ``verify`` is False (for a reader that reads them again, checked, before trusting them).

    Raises:
        CaptureError: a buffer is damaged or unreadable.
    """
    out: list = [None] * len(launches)
    by_source: dict[int, list] = {}
    for i, ln in enumerate(launches):
        r = ln.__dict__["_raw"]
        if isinstance(r, _LazyBuffer):
            by_source.setdefault(id(r.source), []).append((r.header_offset, i, r))
        else:
            out[i] = ln.raw
    for group in by_source.values():
        group.sort(key=lambda x: x[0])
        # runs of buffers with gaps of at most _GAP between them: one read each (a batch's
        # launches are often interleaved with other kernels' launches; reading those too
        # costs less than a read call per buffer)
        run = [group[0]]
        for item in group[1:] + [None]:
            if item is not None and item[0] - (run[-1][0] + _LOCAL_HEADER.size + _NAME_SLACK + run[-1][2].nbytes) <= _GAP:
                run.append(item)
                continue
            _read_run(run, out, verify)
            run = [item]
    return out


@dataclass
class RankCapture:
    """Everything one rank recorded."""

    rank: int
    device: dict = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)
    #: Clock calibration samples against the reference rank (see ktrace.clock), or None.
    clock_samples: dict | None = None
    #: What went wrong around the traced work on this rank, in words (e.g. a clock calibration
    #: that could not run, and the alignment kept instead).
    notes: list[str] = field(default_factory=list)
    #: Waits that gave up at their bound while the capture was open, as the heap's error block
    #: recorded them: ``{"count": n, "waits": [{"program", "flag", "flag_offset", "peer",
    #: "expected", "seen", "cmp", "waited_ns", "spins"}, ...]}`` (at most the first few are
    #: described); None when the capture had no heap.
    timeouts: dict | None = None
    #: Where this rank's process mapped each rank's copy of the allocations its kernels signalled
    #: through (``ktrace.auto.addresses.Mapping``): what turns the addresses that raw launches
    #: (``meta["addresses"] == "raw"``) recorded into locations; empty for kernels on ktrace's heap.
    mappings: list = field(default_factory=list)


def launch_count(rank_launches) -> int:
    """How many launches: the distinct launch indices of ``(rank, launch index)`` pairs (a launch is
    one kernel launch, on every rank that ran it: 4 ranks running 2 launches hold 2). The one
    count that ``info``, ``merge``, ``report``, ``diff`` and the Parquet manifest print."""
    return len({int(li) for _, li in rank_launches})


@dataclass
class Capture:
    """A whole capture: one or more ranks, the region names, the clock model."""

    world_size: int
    ranks: dict[int, RankCapture]
    regions: dict[int, str] = field(default_factory=dict)
    #: The fitted clock model (ktrace.clock), or None when ranks were not aligned.
    clock: dict | None = None
    partial: bool = False
    created_ns: int = field(default_factory=time.time_ns)
    ktrace_version: str = __version__
    meta: dict = field(default_factory=dict)
    #: The run this capture belongs to, the same on every rank of it (``ktrace.captures.identity``);
    #: None in files written before ktrace recorded it. Merging refuses parts of different runs.
    run_id: str | None = None
    #: What went wrong while the capture was made or merged, in words (e.g. ranks that did not
    #: arrive to be gathered, and why).
    notes: list[str] = field(default_factory=list)
    #: Where it was read from (a path, or the name given to :func:`capture_from_bytes`), for
    #: messages; not stored.
    source: str = field(default="", repr=False, compare=False)

    @property
    def missing_ranks(self) -> list[int]:
        """Ranks of the world size that the capture does not hold (sized by the ranks it holds and
        the world size, which readers check against :data:`MAX_WORLD_SIZE`)."""
        ws = int(self.world_size)
        if len(self.ranks) >= ws and all(0 <= r < ws for r in self.ranks):
            return []
        return [r for r in range(min(ws, MAX_WORLD_SIZE)) if r not in self.ranks]

    @property
    def n_launches(self) -> int:
        """The capture's launches (``ktrace.text.MEASURES``), counted by :func:`launch_count`."""
        return launch_count((r, ln.index) for r, rc in self.ranks.items() for ln in rc.launches)

    def events(self) -> np.ndarray:
        """Every event of every rank and launch, one table (``schema.EVENT_DTYPE``), raw ticks.

        Raises:
            CaptureError: a buffer is damaged (the message names the rank and the launch).
        """
        parts = [ln.decode(r).events for r, rc in sorted(self.ranks.items()) for ln in rc.launches]
        if not parts:
            return np.zeros(0, schema.EVENT_DTYPE)
        return np.concatenate(parts)

    def region_name(self, rid: int) -> str:
        return self.regions.get(int(rid), f"region#{int(rid):06x}")


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------


def _stored(ln: Launch) -> tuple[np.ndarray, str, int]:
    """The buffer as a capture file stores it, its layout and its record slots: packed, unless
    that saves nothing (a full buffer) or its header is unreadable (then as it is: reading it
    reports the damage)."""
    raw = np.ascontiguousarray(ln.raw, dtype=np.uint8).reshape(-1)
    try:
        packed = pack_buffer(raw)
    except DecodeError as e:
        log.warning("launch %d (%s): buffer stored as it is, not packed: %s", ln.index, ln.kernel, e)
        return raw, "dense", 0
    if packed.nbytes >= raw.nbytes and not split_head(raw)[0].packed:  # (full: the counts would only add bytes)
        return raw, "dense", 0
    return packed, "packed", (packed.nbytes - schema.packed_bytes(math.prod(ln.grid), 0)) // schema.RECORD_BYTES


def _launch_meta(rank: int, ln: Launch, raw: np.ndarray, layout: str, records: int) -> dict:
    return {
        "index": ln.index,
        "kernel": ln.kernel,
        "grid": list(ln.grid),
        "capacity": ln.capacity,
        "host_ns": ln.host_ns,
        "stream": ln.stream,
        "meta": ln.meta,
        "file": f"r{rank}/l{ln.index}.bin",
        "bytes": int(raw.nbytes),
        "crc32": zlib.crc32(raw.data),
        "layout": layout,
        "records": int(records),
    }


def write_capture(path: str | os.PathLike, cap: Capture, *, compress: bool | str = False) -> Path:
    """Write ``cap`` to ``path`` atomically (a temporary file renamed into place).

    Args:
        path: the ``.ktrace`` file to write.
        cap: the capture.
        compress: False (stored), True or ``"deflate"`` (fast; raw buffers of sparse launches
            compress well), or ``"lzma"`` (about half the size of deflate on real captures,
            slower: for captures that are kept or shipped). Readers need nothing special.
    """
    from ..fileio import atomic_output

    path = Path(path)
    for r, rc in cap.ranks.items():  # (one zip member per launch: two of one index would overwrite each other)
        seen = [ln.index for ln in rc.launches]
        if len(set(seen)) != len(seen):
            dup = next(i for i in seen if seen.count(i) > 1)
            raise CaptureError(f"{path}: not written: rank {r} has launch index {dup} twice")
    with atomic_output(path) as tmp:
        _write_zip(tmp, cap, compress)
    return path


def capture_to_bytes(cap: Capture, *, compress: bool | str = False) -> bytes:
    """The bytes of ``cap``'s capture file (what :func:`write_capture` would write)."""
    bio = io.BytesIO()
    _write_zip(bio, cap, compress)
    return bio.getvalue()


def capture_from_bytes(data: bytes, *, name: str = "<bytes>") -> Capture:
    """Read a capture from the bytes of a capture file.

    Raises:
        CaptureError: as :func:`read_capture`; messages name the source ``name``.
    """
    data = bytes(data)
    if data[:2] != b"PK":
        raise CaptureError(f"{name}: not a ktrace capture file (it is not a zip archive)")
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except _ZIP_DAMAGE as e:
        raise CaptureError(f"{name}: truncated or corrupt capture file (its zip directory is unreadable: {_damage_text(e)})") from None
    return _read_zip(zf, name)


_COMPRESSION = {False: (zipfile.ZIP_STORED, None), True: (zipfile.ZIP_DEFLATED, 1), "deflate": (zipfile.ZIP_DEFLATED, 1),
                "lzma": (zipfile.ZIP_LZMA, None)}


def _write_zip(target, cap: Capture, compress: bool | str) -> None:
    try:
        comp, level = _COMPRESSION[compress]
    except (KeyError, TypeError):
        raise ValueError(f"compress must be False, True, 'deflate' or 'lzma', not {compress!r}") from None
    meta = {
        "format": CAPTURE_FORMAT,
        "version": CAPTURE_VERSION,
        "ktrace_version": cap.ktrace_version,
        "created_ns": cap.created_ns,
        "world_size": cap.world_size,
        "partial": bool(cap.partial or cap.missing_ranks),
        "regions": {str(k): v for k, v in sorted(cap.regions.items())},
        "clock": cap.clock,
        "meta": cap.meta,
        "run_id": cap.run_id,
        "notes": list(cap.notes),
        "ranks": [],
    }
    with zipfile.ZipFile(target, "w", compression=comp, compresslevel=level) as zf:
        for r, rc in sorted(cap.ranks.items()):
            entry = {"rank": r, "device": rc.device, "clock_samples": rc.clock_samples, "notes": list(rc.notes),
                     "timeouts": rc.timeouts, "launches": []}
            if rc.mappings:
                entry["mappings"] = [m.to_json() if hasattr(m, "to_json") else dict(m) for m in rc.mappings]
            for ln in rc.launches:
                raw, layout, records = _stored(ln)
                lm = _launch_meta(r, ln, raw, layout, records)
                zf.writestr(lm["file"], raw.data)
                entry["launches"].append(lm)
            meta["ranks"].append(entry)
        zf.writestr(_META, orjson.dumps(meta, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------


def read_capture(path: str | os.PathLike) -> Capture:
    """Read a capture file written by :func:`write_capture`.

    Raises:
        CaptureError: missing, unreadable, truncated, corrupt, foreign or newer-version file;
            the message is one line naming the file and what is wrong.
    """
    from ..fileio import InputError, regular_input

    path = Path(path)
    try:
        regular_input(path, "capture file")  # (a device or a FIFO would be read forever)
    except InputError as e:
        raise CaptureError(str(e)) from None
    try:
        with open(path, "rb") as f:
            head = f.read(4)
        with _no_collection():
            zf = zipfile.ZipFile(path)
    except (IsADirectoryError, PermissionError, FileNotFoundError) as e:
        raise CaptureError(f"{path}: cannot read: {e.strerror or e}") from None
    except _ZIP_DAMAGE as e:
        if head[:2] == b"PK":
            raise CaptureError(f"{path}: truncated or corrupt capture file (its zip directory is unreadable: "
                               f"{_damage_text(e)})") from None
        raise CaptureError(f"{path}: not a ktrace capture file (it is not a zip archive)") from None
    return _read_zip(zf, str(path), source=path)


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo | str, path: str, what: str, limit: int) -> bytes:
    """The bytes of one member, at most ``limit`` of them (inflated in chunks, stopped as soon as
    it would pass the limit or :data:`MAX_INFLATION` times its stored size), checked by the zip
    module against the CRC-32 its directory records; any damage is a :class:`CaptureError` naming
    ``what``."""
    if not isinstance(info, zipfile.ZipInfo):
        info = zf.getinfo(info)
    stored = max(int(info.compress_size), 0)
    if info.file_size > limit:
        raise CaptureError(f"{path}: {what} is damaged (its zip entry says {info.file_size} bytes, more than the "
                           f"{limit} it may hold)")
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_INFLATION * stored + _CHUNK:
        raise CaptureError(f"{path}: {what} would inflate {stored} bytes to {info.file_size}, more than "
                           f"{MAX_INFLATION}x: refused (not a file ktrace writes)")
    try:
        parts, got = [], 0
        with zf.open(info) as f:
            while True:
                b = f.read(min(_CHUNK, limit + 1 - got))
                if not b:
                    break
                parts.append(b)
                got += len(b)
                if got > limit:
                    raise CaptureError(f"{path}: {what} is damaged (it inflates to more than the {limit} bytes it may hold)")
        return b"".join(parts)
    except _ZIP_DAMAGE as e:
        raise CaptureError(f"{path}: {what} is damaged ({_damage_text(e)})") from None


def _read_zip(zf: zipfile.ZipFile, path: str, source: Path | None = None) -> Capture:
    """Read a capture from an open zip. With ``source`` (the zip's file), buffers stored
    uncompressed are read from it on first use (see :class:`_LazyBuffer`); others here."""
    with _no_collection():
        return _read_entries(zf, path, source)


@contextlib.contextmanager
def _no_collection():
    """The cyclic garbage collector held off: a capture's directory and metadata make the objects
    of 100,000 launches at once, which would set off collections that each go over all of them
    (none of them garbage)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _read_entries(zf: zipfile.ZipFile, path: str, source: Path | None) -> Capture:
    src = _FileSource(source) if source is not None else None  # (closed once no buffer needs it)
    with zf:
        try:
            zf.getinfo(_META)
        except KeyError:
            if any(n.endswith(".bin") and n.startswith("r") for n in zf.namelist()):  # ours, its directory damaged
                raise CaptureError(f"{path}: corrupt capture file (its zip directory lists no {_META})") from None
            raise CaptureError(f"{path}: not a ktrace capture file (no {_META} inside)") from None
        try:
            meta = orjson.loads(_read_member(zf, _META, path, f"capture metadata ({_META})", MAX_META_BYTES))
        except orjson.JSONDecodeError as e:
            raise CaptureError(f"{path}: corrupt capture metadata: {e}") from None
        if not isinstance(meta, dict) or meta.get("format") != CAPTURE_FORMAT:
            raise CaptureError(f"{path}: not a ktrace capture file (format is {meta.get('format') if isinstance(meta, dict) else type(meta).__name__!r})")
        version = meta.get("version")
        if not isinstance(version, int) or version < 1:
            raise CaptureError(f"{path}: capture format version {version!r} is not valid")
        if version > CAPTURE_VERSION:
            raise CaptureError(
                f"{path}: capture format version {version} is newer than this ktrace reads ({CAPTURE_VERSION}); "
                f"it was written by ktrace {meta.get('ktrace_version')}: upgrade ktrace"
            )
        try:
            ranks: dict[int, RankCapture] = {}
            world_size = _checked_int(meta["world_size"], "world_size", 1, MAX_WORLD_SIZE)
            file_size = src.size if src is not None else None
            for entry in meta["ranks"]:
                r = _checked_int(entry["rank"], "a rank", 0, world_size - 1)
                if r in ranks:
                    raise ValueError(f"rank {r} is listed twice")
                rc = RankCapture(rank=r, device=entry.get("device") or {}, clock_samples=entry.get("clock_samples"),
                                 notes=_str_list(entry.get("notes")), timeouts=entry.get("timeouts"))
                if rc.timeouts is not None and not isinstance(rc.timeouts, dict):
                    raise TypeError(f"rank {r}: timeouts is a {type(rc.timeouts).__name__}")
                if entry.get("mappings") is not None:
                    from ..auto.addresses import MappingError, check_table

                    try:
                        rc.mappings = check_table(entry["mappings"], world_size)
                    except MappingError as e:
                        raise ValueError(f"rank {r}: {e}") from None
                if not isinstance(rc.device, dict):
                    raise TypeError(f"rank {r}: device is a {type(rc.device).__name__}")
                if rc.device.get("tick_hz"):  # (what converts its calibration samples: a GPU timer's rate)
                    _checked_int(rc.device["tick_hz"], f"rank {r}: device tick_hz", MIN_TICK_HZ, MAX_TICK_HZ)
                for lm in entry["launches"]:
                    rc.launches.append(_read_launch(zf, path, src, r, lm, file_size, world_size))
                if len({ln.index for ln in rc.launches}) != len(rc.launches):
                    raise ValueError(f"rank {r} lists a launch index twice")
                ranks[r] = rc
            run_id = meta.get("run_id")
            if run_id is not None and not isinstance(run_id, str):
                raise TypeError(f"run_id is a {type(run_id).__name__}")
            cap = Capture(
                world_size=world_size,
                ranks=ranks,
                regions={_checked_int(int(k), "a region id", 0, schema.REGION_MASK): str(v)
                         for k, v in (meta.get("regions") or {}).items()},
                clock=meta.get("clock"),
                partial=bool(meta.get("partial", False)),
                created_ns=_checked_int(meta.get("created_ns", 0), "created_ns"),
                ktrace_version=str(meta.get("ktrace_version", "?")),
                meta=_capture_extras(meta.get("meta") or {}),
                run_id=run_id or None,
                notes=_str_list(meta.get("notes")),
                source=path,
            )
        except CaptureError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise CaptureError(f"{path}: corrupt capture metadata ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    if cap.missing_ranks:
        cap.partial = True
    _check_dumps(cap, path)
    return cap


def _check_dumps(cap: Capture, path: str) -> None:
    """Each launch of a live dump held against its own buffer (``ktrace.flight.ring.check_dump``):
    decoded here, once (a dump's ring buffers are small)."""
    from ..flight.ring import check_dump

    one = len(cap.ranks) == 1
    for r, rc in cap.ranks.items():
        for ln in rc.launches:
            live = ln.meta.get("live")
            if live is None:
                continue
            dump_ns = live.get("dump_ns")
            if dump_ns is None and one:  # (a dump of one rank: the capture's time of the dump is its own)
                dump_ns = (cap.meta.get("live") or {}).get("dump_ns")
            d = ln.decode(r, cache=False)  # (CaptureError naming the launch if its buffer does not decode)
            try:
                check_dump(live, d, int(ln.host_ns), dump_ns)
            except ValueError as e:
                raise CaptureError(f"{path}: rank {r} launch {ln.index}: {e}: a damaged dump, not read") from None


def _str_list(v) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise TypeError(f"notes must be a list of strings, not {v!r:.60}")
    return list(v)


_GRID = "rank %d launch %d: a grid size"
_MAX_I64 = (1 << 63) - 1


def _read_launch(zf: zipfile.ZipFile, path: str, src: "_FileSource | None", r: int, lm: dict,
                 file_size: int | None = None, world_size: int = MAX_WORLD_SIZE) -> Launch:
    """One launch entry of the metadata and its buffer: read and CRC-checked here when it is
    compressed; an uncompressed one is located here and read (and checked) on first use.

    Every number is checked before anything is sized by it: the buffer's size must be what its
    layout, grid and slots make, and lie within the file (stored) or within what its stored
    bytes may inflate to (compressed)."""
    index = _int(lm["index"], 0, _MAX_INDEX, "a launch index")
    where = f"{path}: rank {r} launch {index}"
    grid = lm["grid"]
    if not isinstance(grid, list) or len(grid) != 3:
        raise TypeError(f"rank {r} launch {index}: grid is {grid!r:.60}, not 3 numbers")
    grid = (_int(grid[0], 1, _MAX_INDEX, _GRID, r, index), _int(grid[1], 1, _MAX_INDEX, _GRID, r, index),
            _int(grid[2], 1, _MAX_INDEX, _GRID, r, index))
    P = math.prod(grid)
    capacity = _int(lm["capacity"], 1, _MAX_INDEX, "rank %d launch %d: capacity", r, index)
    nbytes = _int(lm["bytes"], 0, _MAX_I64, "rank %d launch %d: bytes", r, index)
    crc = _int(lm["crc32"], 0, (1 << 32) - 1, "rank %d launch %d: crc32", r, index)
    if P > _MAX_INDEX:
        raise ValueError(f"rank {r} launch {index}: grid {grid} has {P} programs, more than {_MAX_INDEX}")
    layout, n_rec = lm.get("layout", "dense"), _int(lm.get("records", 0), 0, _MAX_I64, "rank %d launch %d: records", r, index)
    if layout == "packed":
        if n_rec > P * capacity or nbytes != schema.packed_bytes(P, n_rec):
            raise CaptureError(f"{where}: corrupt capture metadata (layout {layout!r} with {n_rec} records in {nbytes} bytes)")
    elif layout != "dense":
        raise CaptureError(f"{where}: corrupt capture metadata (layout {layout!r:.40})")
    elif nbytes > schema.buffer_bytes(P, capacity):  # (a shorter one is reported as truncated when decoded)
        raise CaptureError(f"{where}: corrupt capture metadata ({nbytes} bytes for a dense buffer of {P} programs x "
                           f"{capacity} slots)")
    try:
        info = zf.getinfo(lm["file"])
    except (KeyError, TypeError):
        raise CaptureError(f"{where}: buffer {printable(lm['file'])[:80]} is missing") from None
    if src is not None and info.compress_type == zipfile.ZIP_STORED:
        if info.file_size != nbytes or info.compress_size != info.file_size:
            raise CaptureError(f"{where}: buffer is damaged (size or CRC-32 mismatch)")
        if file_size is not None and info.header_offset + nbytes > file_size:
            raise CaptureError(f"{where}: buffer is damaged (its {nbytes} bytes would end past the end of the file)")
        data = _LazyBuffer(src, info.header_offset, nbytes, crc, str(path), r, index, layout, n_rec)
        raw = data
    else:
        if info.file_size != nbytes:
            raise CaptureError(f"{where}: buffer is damaged (size or CRC-32 mismatch)")
        data = _read_member(zf, info, path, f"rank {r} launch {index}: buffer {printable(lm['file'])[:80]}", nbytes)
        # the zip module checked the member against its directory's CRC-32; the metadata's is
        # checked too (the directory itself may be what was damaged)
        if len(data) != lm["bytes"] or zlib.crc32(data) != lm["crc32"]:
            raise CaptureError(f"{where}: buffer is damaged (size or CRC-32 mismatch)")
        raw = np.frombuffer(data, np.uint8)
    meta = _launch_extras(lm.get("meta") or {}, where, grid, capacity, world_size,
                          lambda: raw.head() if isinstance(raw, _LazyBuffer) else raw[: schema.HEADER_BYTES].tobytes())
    return Launch(
        index=index,
        kernel=str(lm["kernel"]),
        grid=grid,  # type: ignore[arg-type]
        capacity=capacity,
        raw=raw,  # type: ignore[arg-type]
        host_ns=_int(lm.get("host_ns", 0), -(1 << 63), _MAX_I64, "rank %d launch %d: host_ns", r, index),
        stream=_int(lm.get("stream", 0), -(1 << 63), _MAX_I64, "rank %d launch %d: stream", r, index),
        source=str(path),
        meta=meta,
    )


def _capture_extras(meta) -> dict:
    """The capture's ``meta``: an object; a live dump's ``live`` part as the dump writes it (a
    ``reason`` in words, the host time of the dump)."""
    if not isinstance(meta, dict):
        raise TypeError(f"meta is a {type(meta).__name__}")
    live = meta.get("live")
    if live is not None:
        if not isinstance(live, dict):
            raise TypeError(f"meta live is a {type(live).__name__}")
        if not isinstance(live.get("reason", ""), str) or len(live.get("reason", "")) > 200:
            raise TypeError("meta live reason is not a word")
        if live.get("dump_ns") is not None:
            _checked_int(live["dump_ns"], "meta live dump_ns")
    if meta.get("probe_cost") is not None or meta.get("verify") is not None:  # (measured beside it: ``ktrace.cost``)
        from ..probe_cost import check_probe_cost, check_verify

        if meta.get("probe_cost") is not None:
            check_probe_cost(meta["probe_cost"])
        if meta.get("verify") is not None:
            check_verify(meta["verify"])
    return meta


#: Longest lane name read (a partition function's name).
_MAX_LANE_NAME = 256


def _launch_extras(meta, where: str, grid: tuple, capacity: int, world_size: int, head) -> dict:
    """A launch entry's ``meta``, its parts that analyses read checked before anything uses them:
    ``device`` (an integer), ``ring_slots``, the lane names of a launch traced per lane
    (``lanes``: strings, as many as its buffer's header says, ``head()`` giving the header's
    bytes) and a live dump's ``live`` (``ktrace.flight.ring.check_live``)."""
    from ..flight.ring import check_live

    if not isinstance(meta, dict):
        raise TypeError(f"{where.split(': ', 1)[-1]}: meta is a {type(meta).__name__}")
    try:
        if meta.get("device") is not None:
            _checked_int(meta["device"], "device", 0, (1 << 16) - 1)
        if meta.get("ring_slots") is not None:
            slots = _checked_int(meta["ring_slots"], "ring_slots", 2, capacity)
            if slots & (slots - 1):
                raise ValueError(f"ring_slots {slots} is not a power of two")
        lanes = meta.get("lanes")
        if lanes is not None:
            if (not isinstance(lanes, list) or not 1 <= len(lanes) <= schema.MAX_LANES
                    or not all(isinstance(x, str) and len(x) <= _MAX_LANE_NAME for x in lanes)):
                raise ValueError(f"lanes is not a list of 1..{schema.MAX_LANES} names (strings of at most {_MAX_LANE_NAME} characters)")
            h = head()
            said = schema.header_lanes(int(schema.unpack_header(memoryview(h))["lanes"])) if len(h) >= schema.HEADER_BYTES else None
            if said is not None and said != len(lanes):
                raise ValueError(f"names {len(lanes)} lanes ({printable(', '.join(lanes))[:120]}) but its buffer's header says "
                                 f"{said} lanes per program")
            if grid[0] % len(lanes):
                raise ValueError(f"names {len(lanes)} lanes, which do not divide its grid's x extent {grid[0]}")
        if "live" in meta:
            try:
                check_live(meta["live"], math.prod(grid), capacity, world_size)
            except ValueError as e:
                raise ValueError(f"live dump table: {e}") from None
    except (TypeError, ValueError) as e:
        raise CaptureError(f"{where}: corrupt launch metadata ({' '.join(str(e).split())[:240]})") from None
    return meta


def merge_captures(caps: Iterable[Capture], *, world_size: int | None = None, allow_mixed_runs: bool = False) -> Capture:
    """Combine per-rank captures into one, as they are: the clock is not fitted here.

    Each rank's file holds only its own calibration samples, so the merged capture's clock model
    is fitted from all of them by ``ktrace.clock.attach_clock`` (what ``ktrace merge`` and
    ``Session.gather`` do). A model stored in an input that covers every merged rank is kept.

    The parts must come from one run (their ``run_id``): events of two runs on one timeline
    would pair one run's waits with the other's notifies and report hangs that never happened.
    Parts written before ktrace recorded run ids merge as before, with a warning.

    Args:
        caps: the captures (typically one file per rank).
        world_size: the expected number of ranks (default: the largest the inputs declare).
        allow_mixed_runs: merge parts of different runs anyway (the result's ``run_id`` joins
            theirs with ``+``, and its notes say so).

    Raises:
        CaptureError: nothing to merge, parts of different runs, a rank present twice or outside
            the world size.
    """
    caps = list(caps)
    if not caps:
        raise CaptureError("nothing to merge")
    names = [c.source or f"capture {i + 1} (ranks {sorted(c.ranks)})" for i, c in enumerate(caps)]
    run_id, run_notes = _merged_run_id(caps, names, allow_mixed_runs)
    if world_size is not None and not 1 <= world_size <= MAX_WORLD_SIZE:
        raise CaptureError(f"world size {world_size} is outside 1..{MAX_WORLD_SIZE}")
    ws = world_size or max(c.world_size for c in caps)
    where = {}  # rank -> the name of the capture that holds it
    ranks: dict[int, RankCapture] = {}
    regions: dict[int, str] = {}
    meta: dict = {}
    notes: list[str] = []
    for c, name in zip(caps, names):
        for r, rc in c.ranks.items():
            if r in ranks:
                raise CaptureError(f"rank {r} is in both {where[r]} and {name}: it appears in more than one capture")
            if r >= ws:
                raise CaptureError(f"{name}: rank {r} is outside world size {ws}")
            ranks[r] = rc
            where[r] = name
        regions.update(c.regions)
        meta.update(c.meta)
        notes += [n for n in c.notes if n not in notes]
    out = Capture(world_size=ws, ranks=dict(sorted(ranks.items())), regions=regions, meta=meta,
                  created_ns=min(c.created_ns for c in caps), run_id=run_id, notes=notes + run_notes)
    for c in caps:
        if c.clock and {int(x["rank"]) for x in c.clock.get("ranks", [])} >= set(ranks):
            out.clock = c.clock
            break
    if out.missing_ranks:
        log.warning("capture is partial: ranks %s of %d are missing", ranges_text(out.missing_ranks), ws)
        out.partial = True
    return out


def _merged_run_id(caps: list[Capture], names: list[str], allow_mixed: bool) -> tuple[str | None, list[str]]:
    """The run id of merged parts, and notes about it; refuses parts of different runs."""
    known = [(c.run_id, n) for c, n in zip(caps, names) if c.run_id]
    ids = list(dict.fromkeys(rid for rid, _ in known))
    unknown = [n for c, n in zip(caps, names) if not c.run_id]
    if unknown and len(caps) > 1:
        log.warning("%s %s no run id (written by an older ktrace): merged without checking that %s from the same run",
                    ", ".join(unknown), "has" if len(unknown) == 1 else "have", "it is" if len(unknown) == 1 else "they are")
    if len(ids) <= 1:
        return (ids[0] if ids else None), []
    a_id, a_name = known[0]
    b_id, b_name = next((rid, n) for rid, n in known if rid != a_id)
    if not allow_mixed:
        raise CaptureError(f"{a_name} (run {a_id}) and {b_name} (run {b_id}) are parts of different runs: not merged "
                           "(--allow-mixed-runs, or allow_mixed_runs=True, merges them anyway)")
    note = f"parts of {len(ids)} different runs merged on request: {', '.join(ids)}; notify/wait pairs across them mean nothing"
    log.warning("%s", note)
    return "+".join(ids), [note]
