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
    h = schema.Header(timer=header.timer, tick_hz=header.tick_hz, capacity=C, n_programs=P, grid=header.grid, lanes=header.lanes,
                      dropped=int(lost.sum()))
    raw = np.zeros(schema.buffer_bytes(P, C), np.uint8)
    raw[: schema.HEADER_BYTES] = np.frombuffer(h.to_bytes(), np.uint8)
    raw[schema.HEADER_BYTES : schema.dropped_offset(P, C)] = out.reshape(-1).view(np.uint8)
    lost32 = np.minimum(lost, np.iinfo(np.uint32).max).astype("<u4")
    raw[schema.dropped_offset(P, C):] = lost32.view(np.uint8)
    return raw, lost


# ---------------------------------------------------------------------------------------------
# a dump's launch metadata, read back
# ---------------------------------------------------------------------------------------------

_I32 = (-(1 << 31), (1 << 31) - 1)


def _int(v, what: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{what} is {str(v)[:40]!r}, not an integer")
    if not lo <= v <= hi:
        raise ValueError(f"{what} {v} is outside {lo}..{hi}")
    return v


def _int_list(v, what: str, n: int, lo: int, hi: int) -> np.ndarray:
    if not isinstance(v, list) or len(v) != n:
        raise ValueError(f"{what} is not a list of {n} integers (one per lane)")
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ValueError(f"{what} holds something that is not an integer")
    a = np.array(v, dtype=object)
    if n and not ((a >= lo) & (a <= hi)).all():
        bad = next(x for x in v if not lo <= x <= hi)
        raise ValueError(f"{what} holds {bad}, outside {lo}..{hi}")
    return a.astype(np.int64)


def check_live(live, n_programs: int, capacity: int, world_size: int) -> dict:
    """A live dump's launch metadata (``meta["live"]``, as :meth:`Recorder._dump` writes it),
    checked against the launch it describes: ``dump_ticks`` a time, ``ring_slots`` a power of
    two with ``capacity == ring_slots + 2``, ``heads``/``lost``/``started`` one integer per lane
    (heads and lost below 2^32, ``max(heads - slots, 0) <= lost <= heads``, started 0 or 1), at
    most one open wait per lane, each naming a lane of the launch, a peer of the world, a
    comparison ``schema.Cmp`` knows, a region id, and a start no later than the dump.

    Returns:
        ``live`` itself.

    Raises:
        ValueError: what is wrong, in words (the caller names the file, rank and launch).
    """
    P = int(n_programs)
    if not isinstance(live, dict):
        raise ValueError("is not an object")
    ticks = _int(live.get("dump_ticks"), "dump_ticks", 1, (1 << 63) - 1)
    if live.get("dump_ns") is not None:  # (the host time of the dump: dumps since it was recorded)
        _int(live.get("dump_ns"), "dump_ns", 0, (1 << 63) - 1)
    slots = _int(live.get("ring_slots"), "ring_slots", 2, 1 << 30)
    if slots & (slots - 1) or slots + 2 != capacity:
        raise ValueError(f"ring_slots {slots} is not a power of two whose ring the launch's {capacity} slots hold (slots + 2)")
    heads = _int_list(live.get("heads"), "heads", P, 0, (1 << 32) - 1)
    lost = _int_list(live.get("lost"), "lost", P, 0, (1 << 32) - 1)
    _int_list(live.get("started"), "started", P, 0, 1)
    if ((lost < np.maximum(heads - slots, 0)) | (lost > heads)).any():
        p = int(np.flatnonzero((lost < np.maximum(heads - slots, 0)) | (lost > heads))[0])
        raise ValueError(f"lane {p} lost {int(lost[p])} records of the {int(heads[p])} it wrote into a ring of {slots}: impossible")
    waits = live.get("open_waits")
    if not isinstance(waits, list) or len(waits) > P:
        raise ValueError(f"open_waits is not a list of at most {P} waits (one per lane)")
    seen = set()
    cmps = {int(c) for c in schema.Cmp}
    for k, w in enumerate(waits):
        if not isinstance(w, dict):
            raise ValueError(f"open wait {k} is not an object")
        p = _int(w.get("program"), f"open wait {k}: program", 0, P - 1)
        if p in seen:
            raise ValueError(f"open wait {k}: lane {p} waits twice")
        seen.add(p)
        _int(w.get("since"), f"open wait {k}: since", 1, ticks)
        _int(w.get("flag"), f"open wait {k}: flag", 0, (1 << 63) - 1)
        _int(w.get("peer"), f"open wait {k}: peer", 0, world_size - 1)
        _int(w.get("region"), f"open wait {k}: region", 0, schema.REGION_MASK)
        for f in ("expected", "seen"):
            _int(w.get(f), f"open wait {k}: {f}", *_I32)
        if _int(w.get("cmp"), f"open wait {k}: cmp", 0, 255) not in cmps:
            raise ValueError(f"open wait {k}: cmp {w.get('cmp')} is not a comparison")
        if w.get("heap_value") is not None:
            _int(w.get("heap_value"), f"open wait {k}: heap_value", *_I32)
    return live


#: A wait may outlast its launch's host-clock age by this much (the clocks' reads, the launch's lag).
HOST_SLACK_NS = 10**9
#: Longest wait a dump may show, whatever its times say: a week (no one dumps a process left hung
#: longer; a figure beyond it comes from a damaged file).
MAX_WAIT_NS = 7 * 86_400 * 10**9


def check_dump(live: dict, decoded, host_ns: int, dump_ns: int | None) -> None:
    """A live dump's launch held against its own buffer (``decoded``: ``decode.decode_buffer``'s):
    each open wait :func:`check_live` accepted must be the open wait the buffer holds for that
    lane (start, end at the dump, flag, values, comparison, region), the records lost per lane
    must be the buffer's dropped counts, and no wait may have lasted longer than the launch had
    run when the dump was taken: ``dump_ns - host_ns`` (host clock, within 0.1 % +
    :data:`HOST_SLACK_NS`) when both are known, else ``decode.MAX_LAUNCH_NS``; never more than
    :data:`MAX_WAIT_NS`.

    Raises:
        ValueError: what is wrong, in words (the caller names the file, rank and launch).
    """
    from ..decode import MAX_LAUNCH_NS

    ev = decoded.events
    lanes = decoded.header.lanes
    prog = ev["program"].astype(np.int64) * lanes + ev["lane"] if lanes > 1 else ev["program"].astype(np.int64)
    col = {n: schema.arg_column(EventKind.WAIT, n) for n in ("peer", "flag", "value", "expected", "cmp")}
    op = np.flatnonzero(((ev["flags"] & int(EventFlag.OPEN)) != 0) & (ev["kind"] == EventKind.WAIT))
    held = {int(prog[i]): (int(ev["start"][i]), int(ev["end"][i]), int(ev[col["flag"]][i]), int(ev[col["expected"]][i]),
                           int(ev[col["peer"]][i]), int(ev[col["value"]][i]), int(ev[col["cmp"]][i]), int(ev["region"][i]))
            for i in op.tolist()}
    ticks = int(live["dump_ticks"])
    said = {int(w["program"]): (int(w["since"]), ticks, int(w["flag"]), int(w["expected"]), int(w["peer"]), int(w["seen"]),
                                int(w["cmp"]), int(w["region"])) for w in live["open_waits"]}
    if held != said:
        p = sorted(set(held) ^ set(said)) or sorted(k for k in said if held.get(k) != said[k])
        raise ValueError(f"the dump lists {len(said)} open wait(s) but its buffer holds {len(held)}, and they differ (lane {p[0]})")
    lost = np.asarray(live["lost"], np.int64)
    dropped = decoded.dropped_per_program.astype(np.int64)
    if lost.shape != dropped.shape or (lost != dropped).any():
        raise ValueError(f"the dump says {int(lost.sum())} records were overwritten but its buffer counts {int(dropped.sum())}")
    if not said:
        return
    longest = max(ticks - v[0] for v in said.values()) * 1e9 / decoded.header.tick_hz
    if dump_ns is not None and host_ns > 0:
        if dump_ns < host_ns:
            raise ValueError(f"dumped (host time {dump_ns} ns) before it was launched ({host_ns} ns)")
        limit, why = min((dump_ns - host_ns) * 1.001 + HOST_SLACK_NS, MAX_WAIT_NS), "the launch had run for"
    else:
        limit, why = float(MAX_LAUNCH_NS), "a launch runs for at most"
    if longest > limit:
        raise ValueError(f"a wait of {longest / 1e9:.6g} s at the dump, longer than {why} {limit / 1e9:.6g} s")
