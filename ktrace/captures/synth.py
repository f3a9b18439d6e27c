"""Encode event tables into raw event buffers: the decoder's inverse, for tests and benchmarks.

Real buffers come from the device probes. This module writes the same layout on the host so
that writer and clock tests, and the merge benchmark, can build captures of a chosen shape
without a GPU. Anything built with it is *constructed* data and must be labelled so.
"""

from __future__ import annotations

import numpy as np

from .. import schema
from ..schema import EventFlag, EventKind

_WITH_DETAIL = (EventKind.WAIT, EventKind.NOTIFY)


def encode_buffer(
    events: np.ndarray,
    *,
    grid: tuple[int, int, int],
    capacity: int,
    timer: schema.TimerKind = schema.TimerKind.NV_GLOBALTIMER,
    tick_hz: int = 1_000_000_000,
    dropped: np.ndarray | None = None,
    lanes: int = 1,
) -> np.ndarray:
    """Lay events out in an event buffer exactly as the device probes would.

    Args:
        events: rows with at least ``program``, ``kind``, ``region``, ``start``, ``end`` (and
            optionally ``lane``, ``flags``, ``hw``, ``arg0``..``arg5``), e.g. ``schema.EVENT_DTYPE``.
            Each program's (lane's) events take its slots in the order given; waits and notifies
            take two (their DETAIL record carries ``arg2``..``arg5``).
        grid: the launch grid.
        capacity: slots per program (per lane, with lanes).
        timer, tick_hz: what the header says about the timer.
        dropped: optional per-program (per-lane) dropped-event counts.
        lanes: lanes per program (``ktrace.gluon``): lane l of program g is stored as virtual
            program ``g * lanes + l`` and the header holds the virtual grid (``schema``'s Lanes).

    Returns:
        The buffer as a uint8 array.

    Raises:
        ValueError: a program's events do not fit its slots, or a program is outside the grid.
    """
    grid = schema.virtual_grid(grid, lanes) if lanes > 1 else tuple(grid)
    n_prog = int(grid[0] * grid[1] * grid[2])
    names = events.dtype.names
    n = events.shape[0]

    def col(name, dtype=np.int64):
        return events[name].astype(dtype) if name in names else np.zeros(n, dtype)

    prog = col("program") * lanes + col("lane") if lanes > 1 else col("program")
    if n and (prog.min() < 0 or prog.max() >= n_prog):
        raise ValueError(f"event programs must be in [0, {n_prog})")
    kind = col("kind")
    flags = col("flags")
    need_detail = np.isin(kind, [int(k) for k in _WITH_DETAIL])
    flags = np.where(need_detail, flags | EventFlag.DETAIL, flags)
    width = 1 + need_detail.astype(np.int64)
    order = np.argsort(prog, kind="stable")
    p_sorted, w_sorted = prog[order], width[order]
    csum = np.cumsum(w_sorted)
    starts = np.flatnonzero(np.r_[True, p_sorted[1:] != p_sorted[:-1]]) if n else np.zeros(0, np.int64)
    base = np.repeat(csum[starts] - w_sorted[starts], np.diff(np.r_[starts, n]))
    slot_sorted = csum - w_sorted - base
    if n and (slot_sorted + w_sorted).max() > capacity:
        raise ValueError(f"events do not fit {capacity} slots per program")
    slot = np.empty(n, np.int64)
    slot[order] = slot_sorted
    idx = prog * capacity + slot

    header = schema.Header(timer=timer, tick_hz=tick_hz, capacity=capacity, n_programs=n_prog, grid=tuple(grid), lanes=lanes)
    buf = np.zeros(header.nbytes, np.uint8)
    buf[: schema.HEADER_BYTES] = np.frombuffer(header.to_bytes(), np.uint8)
    rec = buf[schema.HEADER_BYTES : schema.dropped_offset(n_prog, capacity)].view(schema.RECORD_DTYPE)
    region = col("region")
    rec["t0"][idx] = col("start").astype(np.uint64)
    rec["t1"][idx] = col("end").astype(np.uint64)
    rec["tag"][idx] = ((kind & 0xF) | ((flags & 0xF) << schema.KIND_BITS) | ((region & schema.REGION_MASK) << schema.REGION_SHIFT)).astype(np.uint32)
    rec["hw"][idx] = col("hw", np.uint32)
    a0, a1 = col("arg0"), col("arg1")
    is_counter = kind == EventKind.COUNTER
    rec["arg0"][idx] = np.where(is_counter, a0 & 0xFFFFFFFF, a0).astype(np.uint32).view(np.int32)
    rec["arg1"][idx] = np.where(is_counter, (a0 >> 32) & 0xFFFFFFFF, a1).astype(np.uint32).view(np.int32)
    det = idx[need_detail] + 1
    if det.size:
        drec = rec.view(schema.DETAIL_DTYPE)
        drec["x0"][det] = col("arg2")[need_detail]
        drec["x1"][det] = col("arg3")[need_detail]
        drec["tag"][det] = int(EventKind.DETAIL)
        drec["x2"][det] = col("arg4")[need_detail].astype(np.int32)
        drec["x3"][det] = col("arg5")[need_detail].astype(np.int32)
    if dropped is not None:
        d = buf[schema.dropped_offset(n_prog, capacity) :].view("<u4")
        d[:] = np.asarray(dropped, dtype=np.uint32)
    return buf


def event_table(n: int) -> np.ndarray:
    """An empty ``schema.EVENT_DTYPE`` table of ``n`` rows to fill in."""
    return np.zeros(n, schema.EVENT_DTYPE)


def constructed_capture(
    world_size: int = 2,
    programs: int = 4,
    iters: int = 3,
    *,
    offsets_ns: list[int] | None = None,
    drift_ppm: list[float] | None = None,
    host_offset_ns: int = 5_000_000,
    base_ns: int = 1_700_000_000_000_000_000,
    quantum_ns: int = 32,
    calibration: bool = True,
    round_trips: int = 1000,
    phase_gap_ns: int = 4_000_000_000,
    seed: int = 0,
):
    """A CONSTRUCTED multi-rank capture with known clock errors, for tests and benchmarks.

    Every rank runs the same schedule per program and iteration (true time ``t``): a ``step``
    span with a nested ``compute`` span, a ``mark`` instant, a notify to the next rank and a wait
    on the previous one (released by that rank's notify 500 ns later), and a ``progress``
    counter; program 0 of iteration 0 also has two spans that overlap without nesting
    (``load``/``store``). Each rank's timer reads ``true + offset + drift * (true - base)``,
    quantised to ``quantum_ns`` (``%globaltimer`` steps every 32 ns on H200). With
    ``calibration`` the ranks carry ping-pong samples (one-way trips of 600 ns plus
    exponential noise) before and ``phase_gap_ns`` after, and host anchors.

    Returns:
        ``(capture, truth)``: ``truth`` holds the offsets, drifts (ppm), host offset and the
        true start time (ns) of every event in decode order per rank.
    """
    from .. import __version__  # noqa: F401  (kept for symmetry with real captures' metadata)
    from .file import Capture, Launch, RankCapture

    rng = np.random.default_rng(seed)
    offsets = list(offsets_ns) if offsets_ns is not None else [0] + [int(x) for x in rng.integers(-1_200_000, 1_200_000, world_size - 1)]
    drifts = list(drift_ppm) if drift_ppm is not None else [0.0] + [float(x) for x in rng.uniform(-11, 11, world_size - 1)]
    names = ["step", "compute", "mark", "progress", "load", "store"]
    rid = {n: schema.region_id(n) for n in names}

    def dev(rank, t):
        t = np.asarray(t, dtype=np.int64)
        d = t + offsets[rank] + np.rint((t - base_ns).astype(np.float64) * drifts[rank] * 1e-6).astype(np.int64)
        return (d // quantum_ns) * quantum_ns

    t_start = base_ns + 1_000_000
    ranks = {}
    truth = {"offsets_ns": offsets, "drift_ppm": drifts, "host_offset_ns": host_offset_ns, "true_start_ns": {}}
    for r in range(world_size):
        rows = []
        for p in range(programs):
            for i in range(iters):
                t = t_start + i * 2000 + p * 37
                peer_next, peer_prev = (r + 1) % world_size, (r - 1) % world_size
                rows += [
                    (p, EventKind.SPAN, 0, rid["step"], t, t + 1500, p, i, 0, 0, 0, 0),
                    (p, EventKind.INSTANT, 0, rid["mark"], t + 10, t + 10, i, 0, 0, 0, 0, 0),
                    (p, EventKind.SPAN, 0, rid["compute"], t + 100, t + 600, p, 4096, 0, 0, 0, 0),
                    (p, EventKind.WAIT, 0, 0, t + 620, t + 650 + 500, peer_prev, 17 + i, p * 8, i + 1, i + 1, 0),
                    (p, EventKind.NOTIFY, 0, 0, t + 650, t + 670, peer_next, i + 1, p * 8, i, 0, 0),
                    (p, EventKind.COUNTER, 0, rid["progress"], t + 1400, t + 1400, i + 1, 0, 0, 0, 0, 0),
                ]
                if p == 0 and i == 0:
                    rows += [
                        (p, EventKind.SPAN, 0, rid["load"], t + 50, t + 300, 0, 0, 0, 0, 0, 0),
                        (p, EventKind.SPAN, 0, rid["store"], t + 200, t + 450, 0, 0, 0, 0, 0, 0),
                    ]
        ev = event_table(len(rows))
        cols = ("program", "kind", "flags", "region", "start", "end", "arg0", "arg1", "arg2", "arg3", "arg4", "arg5")
        arr = np.array(rows, dtype=np.int64)
        for j, c in enumerate(cols):
            ev[c] = arr[:, j]
        truth["true_start_ns"][r] = ev["start"].copy()
        true_end = ev["end"].copy()
        ev["start"], ev["end"] = dev(r, ev["start"]), dev(r, true_end)
        ev["hw"] = ev["program"] % 132
        cap_slots = int(np.bincount(ev["program"], weights=1 + np.isin(ev["kind"], [4, 5])).max())
        raw = encode_buffer(ev, grid=(programs, 1, 1), capacity=cap_slots)
        device = {"index": r, "name": "CONSTRUCTED GPU", "vendor": "nvidia", "arch": "sm_90", "timer": "NV_GLOBALTIMER", "tick_hz": 1_000_000_000}
        samples = None
        if calibration:
            samples = {"host_anchor": host_anchor_samples(rng, lambda t, r=r: dev(r, t), t_start - 2_000_000, host_offset_ns)}
            if r != 0:
                samples["pingpong"] = [
                    pingpong_samples(rng, lambda t: dev(0, t), lambda t, r=r: dev(r, t), t0, round_trips, r, phase)
                    for phase, t0 in (("before", t_start - 3_000_000), ("after", t_start + phase_gap_ns))
                ]
        ranks[r] = RankCapture(rank=r, device=device, clock_samples=samples,
                               launches=[Launch(index=0, kernel="constructed_kernel", grid=(programs, 1, 1), capacity=cap_slots, raw=raw,
                                                host_ns=t_start + host_offset_ns)])
    cap = Capture(world_size=world_size, ranks=ranks, regions={v: k for k, v in rid.items()}, meta={"constructed": True})
    return cap, truth


def pingpong_samples(rng, dev_ref, dev_peer, t0: int, n: int, peer: int, phase: str) -> dict:
    """``n`` flag round trips between the reference rank and ``peer`` from true time ``t0`` on, as
    the heap calibration stores them (``t1``..``t4`` on the two device clocks ``dev_ref`` /
    ``dev_peer``: true ns -> ticks): one-way trips of 600 ns plus exponential noise (400 ns mean)."""
    tau = t0 + np.arange(n, dtype=np.int64) * 5000
    fwd = 600 + rng.exponential(400, n).astype(np.int64)
    back = 600 + rng.exponential(400, n).astype(np.int64)
    gap = 100 + rng.integers(0, 50, n)
    return {
        "ref_rank": 0, "peer": peer, "phase": phase,
        "t1": dev_ref(tau).tolist(), "t2": dev_peer(tau + fwd).tolist(),
        "t3": dev_peer(tau + fwd + gap).tolist(), "t4": dev_ref(tau + fwd + gap + back).tolist(),
    }


def host_anchor_samples(rng, dev, t0: int, host_offset_ns: int, n: int = 50) -> dict:
    """``n`` host-device anchor samples from true time ``t0`` on, as a capture stores them (host
    clock = true time + ``host_offset_ns``; the device read between two host reads)."""
    tau = t0 + np.arange(n, dtype=np.int64) * 20_000
    before = 1500 + rng.exponential(2000, n).astype(np.int64)
    after = 1500 + rng.exponential(2000, n).astype(np.int64)
    return {"host_before_ns": (tau - before + host_offset_ns).tolist(), "dev_ticks": dev(tau).tolist(),
            "host_after_ns": (tau + after + host_offset_ns).tolist()}


def replicated(capture, n_launches: int, gap_ns: int = 10_000):
    """A CONSTRUCTED capture of ``n_launches`` launches per rank: each rank's first launch,
    repeated with its times shifted by one launch period (its span plus ``gap_ns``) each time.

    The repeated launches' notify -> wait pairs stay within a copy (they pair by rounds, and
    every copy holds one round of each), so the copies' flows never cross.
    """
    from ..decode import decode_buffer
    from .file import Capture, Launch, RankCapture

    ranks = {}
    for r, rc in capture.ranks.items():
        ln0 = rc.launches[0]
        ev = decode_buffer(ln0.raw).events
        period = int(ev["end"].max() - ev["start"].min()) + int(gap_ns)
        launches = []
        for k in range(int(n_launches)):
            e = ev.copy()
            e["start"] += k * period
            e["end"] += k * period
            launches.append(Launch(index=k, kernel=ln0.kernel, grid=ln0.grid, capacity=ln0.capacity,
                                   raw=encode_buffer(e, grid=ln0.grid, capacity=ln0.capacity), host_ns=ln0.host_ns))
        ranks[r] = RankCapture(rank=r, device=rc.device, launches=launches, clock_samples=rc.clock_samples)
    return Capture(world_size=capture.world_size, ranks=ranks, regions=dict(capture.regions), clock=capture.clock,
                   meta={**capture.meta, "constructed": True})
