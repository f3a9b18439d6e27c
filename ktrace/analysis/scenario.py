"""Constructed event tables of a small all-to-all-like kernel, for tests and benchmarks.

Everything built here is CONSTRUCTED data (no GPU recorded it). It follows the kernel shape
the analyses are made for, with known faults injected, so that each analysis can be checked
against what was put in: a rank whose notifies are late by D, workgroups given more work,
a notify that never comes.

The kernel: on each of ``world`` ranks, ``programs`` workgroups run ``iters`` tiles. A tile is
a ``tile`` span holding ``work`` spans ``gemm`` (compute), then one notify to every peer (flag of
(sender, program), value = tile number), then a ``recv`` span holding one wait per peer for
that peer's notify of the same tile. A wait ends ``latency_ns`` after the notify it waited for
began, or when it began if the notify was earlier.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import schema
from ..schema import EventFlag, EventKind
from ..schema import Cmp

#: Region names used by the constructed kernel.
NAMES = ("tile", "gemm", "recv", "notify", "wait")
REGIONS = {schema.region_id(n): n for n in NAMES}
_RID = {n: schema.region_id(n) for n in NAMES}


def flag_of(src: int, program: int, programs: int) -> int:
    """Heap offset (bytes) of the flag that rank ``src``'s program sets on its peers."""
    return 4096 + 8 * (src * programs + program)


@dataclass(frozen=True)
class Scenario:
    """What to construct.

    Attributes:
        world, programs, iters: ranks, workgroups per rank, tiles per workgroup.
        gemm_ns: duration of one unit of work.
        work: (rank, program) -> units of work per tile (default 1): more makes a slow workgroup.
        late_rank, late_ns: that rank's ``gemm`` takes ``late_ns`` longer before every notify.
        skip: (sender, receiver, program, tile) notifies that are never sent: the receiver's
            wait times out after ``timeout_ns`` and the rank's other waits give up at once.
        latency_ns: notify start to the wait seeing it.
        start_skew_ns: rank r starts at r * start_skew_ns.
        program_stagger_ns: program p starts p * program_stagger_ns after its rank.
        t0_ns: common-clock time of the first start.
    """

    world: int = 4
    programs: int = 8
    iters: int = 3
    gemm_ns: int = 10_000
    work: dict = field(default_factory=dict)
    late_rank: int | None = None
    late_ns: int = 0
    skip: tuple = ()
    latency_ns: int = 1_500
    timeout_ns: int = 2_000_000
    start_skew_ns: int = 300
    program_stagger_ns: int = 100
    t0_ns: int = 1_000_000_000

    def __post_init__(self):
        if self.world < 2 or self.programs < 1 or self.iters < 1:
            raise ValueError(f"scenario needs world >= 2, programs >= 1, iters >= 1: {self}")
        if self.late_rank is not None and not 0 <= self.late_rank < self.world:
            raise ValueError(f"late_rank {self.late_rank} outside world {self.world}")


def build(sc: Scenario) -> np.ndarray:
    """The constructed kernel's events on the common clock (``ALIGNED_DTYPE`` rows).

    Rows are sorted by rank, program and slot (program order = order of recording: a span is
    recorded when it ends). ``start``/``end`` (raw ticks) equal ``start_ns``/``end_ns``.
    """
    W, P = sc.world, sc.programs
    skip = set(tuple(x) for x in sc.skip)
    rows: list[tuple] = []  # (rank, program, kind, flags, region, start, end, a0..a5)

    def add(r, p, kind, region, s, e, args=(0, 0, 0, 0, 0, 0), flags=0):
        rows.append((r, p, int(kind), int(flags), _RID[region], int(s), int(e), *args))

    t = np.array([[sc.t0_ns + r * sc.start_skew_ns + p * sc.program_stagger_ns for p in range(P)] for r in range(W)], np.int64)
    alive = np.ones((W, P), bool)
    give_up_at = np.full(W, np.iinfo(np.int64).max)
    for it in range(sc.iters):
        tile_start = t.copy()
        notify_t = np.full((W, W, P), -1, np.int64)  # sender, receiver, program
        for r in range(W):
            for p in range(P):
                if not alive[r, p]:
                    continue
                now = t[r, p]
                units = int(sc.work.get((r, p), 1))
                for u in range(units):
                    d = sc.gemm_ns + (sc.late_ns if (r == sc.late_rank and u == units - 1) else 0)
                    add(r, p, EventKind.SPAN, "gemm", now, now + d, (it, u, 0, 0, 0, 0))
                    now += d
                for q in range(W):
                    if q == r:
                        continue
                    if (r, q, p, it) in skip:
                        continue
                    add(r, p, EventKind.NOTIFY, "notify", now, now + 40, (q, it + 1, flag_of(r, p, P), it, 0, 0))
                    notify_t[r, q, p] = now
                    now += 50
                t[r, p] = now
        # waits, in rank order; a timeout makes the rest of its rank give up
        for r in range(W):
            for p in range(P):
                if not alive[r, p]:
                    continue
                now = t[r, p]
                recv_start = now
                for q in range(W):
                    if q == r:
                        continue
                    nt = notify_t[q, r, p]
                    flags = 0
                    if nt < 0:
                        end = now + sc.timeout_ns
                        flags = EventFlag.TIMEOUT
                        seen = it
                    else:
                        end = max(now, nt + sc.latency_ns)
                        seen = it + 1
                    spins = max(1, (end - now) // 200)
                    add(r, p, EventKind.WAIT, "wait", now, end, (q, spins, flag_of(q, p, P), seen, it + 1, int(Cmp.GE)), flags)
                    now = end
                    if flags:
                        give_up_at[r] = min(give_up_at[r], end)
                        alive[r, p] = False
                        break
                add(r, p, EventKind.SPAN, "recv", recv_start, now)
                add(r, p, EventKind.SPAN, "tile", tile_start[r, p], now, (it, 0, 0, 0, 0, 0))
                t[r, p] = now + 200
        # cascade: waits of a rank still spinning when another of its waits gave up end then
        for r in range(W):
            if give_up_at[r] == np.iinfo(np.int64).max:
                continue
            for i, row in enumerate(rows):
                if row[0] == r and row[2] == EventKind.WAIT and not row[3] and row[6] > give_up_at[r] and row[5] < give_up_at[r]:
                    rows[i] = row[:3] + (int(EventFlag.TIMEOUT), row[4], row[5], int(give_up_at[r]) + 200) + row[7:]
            alive[r, :] = False
    dt = np.dtype(schema.EVENT_DTYPE.descr + [("start_ns", "<i8"), ("end_ns", "<i8")])
    out = np.zeros(len(rows), dt)
    if not rows:
        return out
    a = np.array(rows, dtype=np.int64)
    out["rank"], out["program"], out["kind"], out["flags"], out["region"] = a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4]
    out["start"], out["end"] = a[:, 5], a[:, 6]
    for i in range(6):
        out[f"arg{i}"] = a[:, 7 + i]
    out["start_ns"], out["end_ns"] = out["start"], out["end"]
    out["hw"] = (out["program"] * 7 + out["rank"]) % 132  # an SM id per workgroup
    # program order: a span is recorded when it ends (inner spans first at a tie)
    order = np.lexsort((out["end"] - out["start"], out["end"], out["program"], out["rank"]))
    out = out[order]
    new = np.r_[True, (np.diff(out["rank"]) != 0) | (np.diff(out["program"]) != 0)]
    grp = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    out["slot"] = np.arange(out.size) - first[grp]
    return out


def replicate(table: np.ndarray, copies: int) -> np.ndarray:
    """``copies`` of a table's launches, one copy after another (for benchmarks).

    Copy k is the table with its launches renumbered ``k * n + launch`` (``n`` launches per copy:
    a capture of several kernels keeps them apart) and its times moved past copy k-1's end.
    """
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    span = int(table["end_ns"].max() - table["start_ns"].min()) + 10_000
    n_l = int(table["launch"].max()) + 1 if table.size else 1
    out = np.tile(table, copies)
    k = np.repeat(np.arange(copies, dtype=np.int64), table.size)
    out["launch"] = k * n_l + out["launch"]
    for c in ("start", "end", "start_ns", "end_ns"):
        out[c] = out[c] + k * span
    # one launch after another within each rank, as a capture's table is ordered
    order = np.lexsort((out["slot"], out["program"], out["launch"], out["rank"]))
    return out[order]


def to_capture(table: np.ndarray, *, kernel: str = "a2a_constructed", regions: dict | None = None):
    """Encode a constructed table into a ``Capture`` of per-rank, per-launch event buffers.

    The buffers are what the device probes would have written (``ktrace.captures.synth``); the clock
    model maps every rank's ticks to the common clock unchanged (the table is already on it).
    """
    from ..clock.model import ClockModel, RankClock
    from ..captures.file import Capture, Launch, RankCapture
    from ..captures.synth import encode_buffer

    ranks: dict = {}
    r_col, l_col = table["rank"], table["launch"]
    bounds = np.flatnonzero(np.r_[True, (np.diff(r_col) != 0) | (np.diff(l_col) != 0), True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        part = table[a:b]
        r, ln = int(part["rank"][0]), int(part["launch"][0])
        n_prog = int(part["program"].max()) + 1
        per = np.bincount(part["program"], minlength=n_prog)
        cap = int(2 * per.max() + 2)
        raw = encode_buffer(part, grid=(n_prog, 1, 1), capacity=cap)
        ranks.setdefault(r, RankCapture(rank=r, device={"name": "constructed", "tick_hz": 1_000_000_000}))
        ranks[r].launches.append(Launch(index=ln, kernel=kernel, grid=(n_prog, 1, 1), capacity=cap, raw=raw))
    model = ClockModel(method="reference", reference_rank=0, anchor="device",
                       ranks={r: RankClock(rank=r, tick_hz=1_000_000_000, pivot_dev_ns=0, pivot_ns=0) for r in ranks})
    return Capture(world_size=len(ranks), ranks=ranks, regions=dict(REGIONS if regions is None else regions),
                   clock=model.to_dict(), meta={"constructed": True})
