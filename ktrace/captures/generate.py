"""Hand-off programs drawn at random, simulated on the CPU and written as real-format captures,
each with the one cause put into it known: the ground truth the report is tested against.

Everything made here is GENERATED data (no GPU recorded it; ``Capture.meta["generated"]`` says
so and holds what was drawn). What is generated is what a GPU writes: per rank, per launch, the
event buffer the probes fill (``synth.encode_buffer``: the same layout, lanes included), on each
rank's own device clock (an offset, a drift and the 32 ns step of ``%globaltimer``), with the
clock-calibration samples a capture with a heap stores (flag round trips before and after the
traced work, host anchors), so that a report of it aligns the ranks as it aligns real ones.

:func:`draw` picks a program from a seed:

- a *pattern* of hand-offs: ``ring`` (program p of each rank sends each tile to program p of the
  next rank and waits for the previous rank's), ``pairs`` (producer programs feed consumer
  programs of the next rank, with credits flowing back), ``a2a`` (every program notifies every
  peer each tile, then waits for every peer), ``counter`` (several producer programs add to one
  flag a consumer waits on) and ``gluon`` (warp-specialized programs of 2 or 3 lanes handing
  tiles over mbarriers, the LOCAL hand-offs of ``ktrace.gluon``; with 3 lanes and several ranks the
  third lane also hands tiles to the next rank);
- 1 to 8 ranks, programs, rounds (tiles), 1 to 4 launches of which the first may be cold (its
  work slower, one rank's start later: what a first launch shows on a GPU), the ranks' start
  skew within a launch, each rank's clock offset and drift;
- one injected cause, or none (:data:`KINDS`): a ``straggler`` (an agent — a whole rank, a
  program or a lane — whose work takes longer on some rounds), ``held`` (notifies held back after
  the work was done), ``heavy`` (programs with more work every round), ``late_launch`` (a rank
  that starts every launch late), ``slow_link`` (signals from one rank to another slower than the
  calibration measured), ``hang`` (a notify never sent: its wait gives up at its bound).

:func:`simulate` runs the program: every agent (rank, program, lane) runs its operations in
order, a wait ends when the flag it spins on holds what it waits for (a notify's write seen a
link latency after it started), or gives up at its bound (and the other waits of its rank with
it, as ``ktrace.shmem``'s error word makes them). The same draw run without its cause gives the
time the cause put in (:attr:`Case.injected_ns`).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace

import numpy as np

from .. import schema
from ..schema import Cmp, EventFlag, EventKind
from .file import Capture, Launch, RankCapture
from .synth import encode_buffer, host_anchor_samples, pingpong_samples

#: The causes a case may hold ("healthy": none).
KINDS = ("healthy", "straggler", "held", "heavy", "late_launch", "slow_link", "hang")
#: The shapes of hand-off programs.
PATTERNS = ("ring", "pairs", "a2a", "counter", "gluon")
#: Lane names of the ``gluon`` pattern's programs, in lane order.
GLUON_LANES = ("mma", "load", "epilogue")

_BASE_NS = 1_750_000_000_000_000_000  # true time of the first calibration (ns since the epoch)
_QUANTUM_NS = 32  # %globaltimer's step
_ONE_WAY_NS = 600  # a flag's trip between GPUs of one host (what the calibration samples measure)
_FLAG_BASE = 0x1000


@dataclass(frozen=True)
class Injected:
    """The cause put into a case, as the report should name it.

    Attributes:
        kind: one of :data:`KINDS`.
        rank: the rank at fault: the straggler's, the late notifier's, the heavy programs', the
            late rank, the slow link's producer, the producer whose notify never came.
        programs: its programs (every program of the rank that takes that part, for a rank
            straggler).
        lane: its lane, for an agent that is one lane of its programs (-1: whole programs).
        rounds: the rounds (the k-th notify of each of its programs at that call site).
        launches: the launches it is in.
        magnitude_ns: its size: extra work per round (straggler), hold per notify (held), extra
            work per workgroup and launch (heavy), late start (late_launch), the link's signal
            latency (slow_link), the wait's bound (hang).
        region: the call site (the notify's region) or the region of the extra work.
        consumer: slow link: the consumer rank; hang: the rank that waited.
        consumer_programs: hang: the programs that waited.
        consumer_round: hang: the wait's round at its call site.
    """

    kind: str = "healthy"
    rank: int = -1
    programs: tuple = ()
    lane: int = -1
    rounds: tuple = ()
    launches: tuple = ()
    magnitude_ns: float = 0.0
    region: str = ""
    consumer: int = -1
    consumer_programs: tuple = ()
    consumer_round: int = -1
    factor: float = 1.0  # heavy: the factor on the programs' main work


@dataclass(frozen=True)
class Shape:
    """What was drawn besides the cause (see :func:`draw`)."""

    pattern: str
    world: int
    programs: int
    lanes: int
    rounds: int
    launches: int
    work_ns: int  # the main work of a round
    stages: int  # gluon: mbarrier stages; pairs: credits (tiles a producer may run ahead)
    cold: float = 1.0  # launch 0's work factor (1: not cold)
    cold_late: tuple = (-1, 0)  # (rank, ns): a rank whose launch 0 started that much later
    skew_ns: int = 400  # ranks start within this of each other
    timeout_ns: int = 10_000_000


@dataclass
class Case:
    """One drawn case: its shape, its cause, the capture and what the cause cost.

    Attributes:
        seed: what :func:`draw` was given.
        shape, injected: what was drawn.
        capture: the generated capture (write it with ``ktrace.captures.write_capture``).
        injected_ns: the kernel time (launch durations summed over launches) the cause added:
            the same draw simulated without it is that much shorter (over the launches after a
            cold first one, which a report leaves out as warm-up).
        kernel_ns: the capture's kernel time (over the same launches).
    """

    seed: int
    shape: Shape
    injected: Injected
    capture: Capture = field(repr=False, default=None)
    injected_ns: float = 0.0
    kernel_ns: float = 0.0

    def describe(self) -> str:
        s, i = self.shape, self.injected
        what = (f"{i.kind} rank {i.rank} programs {list(i.programs)}" + (f" lane {i.lane}" if i.lane >= 0 else "")
                + (f" rounds {list(i.rounds)}" if i.rounds else "") + f" launches {list(i.launches)}"
                + f" {i.magnitude_ns:.0f} ns" + (f" consumer {i.consumer}" if i.consumer >= 0 else "")
                if i.kind != "healthy" else "healthy")
        return (f"seed {self.seed}: {s.pattern} W={s.world} G={s.programs} L={s.lanes} T={s.rounds} launches={s.launches}"
                f" cold={s.cold:.2f}{f' late{s.cold_late}' if s.cold_late[0] >= 0 else ''}: {what}; "
                f"costs {self.injected_ns / 1e3:.1f} µs of {self.kernel_ns / 1e3:.1f} µs")


# ---------------------------------------------------------------------------------------------
# the programs: per agent, its operations
# ---------------------------------------------------------------------------------------------
# ops (lists, one per operation, in program order):
#   ["w", region, dur, round, main]          a leaf span of work (main: the round's main work)
#   ["o", region] / ["c", region]            an enclosing span opens / closes
#   ["n", region, key, value, add, local, peer, lat, round]   a notify
#   ["a", region, key, expected, cmp, local, peer, read, round]  a wait
#   ["i", dur]                               time in no region (a held-back notify)


def _flag(src: int, program: int, programs: int, tile: int = 0, slot: int = 0) -> int:
    """A flag's heap offset: one per (kind of flag, sending rank, program, tile), as kernels keep
    one flag per tile set to the launch's epoch (a notify never sent is then never made up for)."""
    return _FLAG_BASE + 8 * (((slot * 64 + src) * programs + program) * 64 + tile)


class _Prog:
    """The operations of every agent of one launch."""

    def __init__(self, shape: Shape, rng: np.random.Generator, launch: int):
        self.s, self.rng, self.launch = shape, rng, launch
        self.ops: dict[tuple[int, int, int], list] = {}
        self.counters: set = set()  # flags that notifies add to (reset to 0 before each launch)
        self.work_factor = shape.cold if launch == 0 else 1.0

    def dur(self, base: float) -> int:
        f = self.work_factor * (1.0 + 0.02 * self.rng.standard_normal())
        return max(64, int(base * f))

    def lat(self, src: int, dst: int) -> int:
        if src == dst:
            return int(300 + self.rng.exponential(60))
        return int(_ONE_WAY_NS + 20 * ((src * 7 + dst * 3) % 5) + self.rng.exponential(40))

    def read(self) -> int:
        return int(80 + self.rng.exponential(60))

    def add(self, agent, op):
        self.ops.setdefault(agent, []).append(op)


def _build(shape: Shape, rng: np.random.Generator, launch: int) -> _Prog:
    s = shape
    W, G, T, C = s.world, s.programs, s.rounds, s.work_ns
    P = _Prog(shape, rng, launch)
    ep = launch + 1  # the launch's epoch: what its set flags are set to
    pf = {(r, p): 1.0 + 0.01 * rng.standard_normal() for r in range(W) for p in range(G)}  # per-program speed
    R, GE, EQ = _Regions, int(Cmp.GE), int(Cmp.EQ)
    if s.pattern == "ring":
        for r in range(W):
            nxt, prv = (r + 1) % W, (r - 1) % W
            for p in range(G):
                a = (r, p, 0)
                for t in range(T):
                    P.add(a, ["o", R.tile])
                    P.add(a, ["w", R.compute, P.dur(C * pf[r, p]), t, True])
                    P.add(a, ["w", R.send, P.dur(0.08 * C), t, False])
                    P.add(a, ["n", R.tile_ready, (nxt, _flag(r, p, G, t)), ep, False, False, nxt, P.lat(r, nxt), t])
                    P.add(a, ["a", R.tile_wait, (r, _flag(prv, p, G, t)), ep, GE, False, prv, P.read(), t])
                    P.add(a, ["w", R.consume, P.dur(0.15 * C), t, False])
                    P.add(a, ["c", R.tile])
    elif s.pattern == "pairs":
        half = G // 2
        for r in range(W):
            nxt, prv = (r + 1) % W, (r - 1) % W
            for p in range(half):
                a, b = (r, p, 0), (r, half + p, 0)
                for t in range(T):
                    if t >= s.stages:  # a credit: the consumer freed the slot of tile t - stages
                        P.add(a, ["a", R.free_wait, (r, _flag(nxt, p, G, t - s.stages, 1)), ep, GE, False, nxt, P.read(), t])
                    P.add(a, ["w", R.produce, P.dur(C * pf[r, p]), t, True])
                    P.add(a, ["n", R.ready, (nxt, _flag(r, p, G, t)), ep, False, False, nxt, P.lat(r, nxt), t])
                for t in range(T):
                    P.add(b, ["a", R.ready_wait, (r, _flag(prv, p, G, t)), ep, GE, False, prv, P.read(), t])
                    P.add(b, ["w", R.consume, P.dur(0.4 * C * pf[r, half + p]), t, True])
                    P.add(b, ["n", R.free, (prv, _flag(r, p, G, t, 1)), ep, False, False, prv, P.lat(r, prv), t])
    elif s.pattern == "a2a":
        for r in range(W):
            for p in range(G):
                a = (r, p, 0)
                for t in range(T):
                    P.add(a, ["w", R.compute, P.dur(C * pf[r, p]), t, True])
                    for q in range(1, W):
                        d = (r + q) % W
                        P.add(a, ["n", R.send_flag, (d, _flag(r, p, G, t)), ep, False, False, d, P.lat(r, d), t])
                    P.add(a, ["o", R.recv])
                    for q in range(1, W):
                        src = (r - q) % W
                        P.add(a, ["a", R.recv_wait, (r, _flag(src, p, G, t)), ep, GE, False, src, P.read(), t])
                    P.add(a, ["c", R.recv])
    elif s.pattern == "counter":
        F = G - 1  # producers per rank; the last program of each rank sums
        for r in range(W):
            nxt, prv = (r + 1) % W, (r - 1) % W
            for p in range(F):
                a = (r, p, 0)
                for t in range(T):
                    P.add(a, ["w", R.partial, P.dur(C * pf[r, p]), t, True])
                    P.add(a, ["n", R.add, (nxt, _flag(0, 0, G, 0, 2)), 1, True, False, nxt, P.lat(r, nxt), t])
            b = (r, F, 0)
            P.counters.add((r, _flag(0, 0, G, 0, 2)))
            for t in range(T):
                P.add(b, ["a", R.sum_wait, (r, _flag(0, 0, G, 0, 2)), (t + 1) * F, GE, False, prv, P.read(), t])
                P.add(b, ["w", R.reduce, P.dur(0.3 * C * pf[r, F]), t, True])
    elif s.pattern == "gluon":
        S = s.stages
        for r in range(W):
            nxt, prv = (r + 1) % W, (r - 1) % W
            for p in range(G):
                mma, load, epi = (r, p, 0), (r, p, 1), (r, p, 2)
                for t in range(T):
                    k, ph = t % S, t // S
                    # the loader: a free stage (phase -1: the barrier's free pass), the copies, arrive
                    P.add(load, ["a", R.empty, (r, p, schema.barrier_key(R.empty_id, k)), ph - 1, EQ, True, -1, P.read() // 4, t])
                    P.add(load, ["w", R.load, P.dur(0.7 * C * pf[r, p]), t, True])
                    P.add(load, ["n", R.ready, (r, p, schema.barrier_key(R.ready_id, k)), ph, False, True, -1, P.lat(r, r) // 4, t])
                    # the MMA partition: wait for the stage, compute, free it (and hand the tile on)
                    P.add(mma, ["a", R.ready, (r, p, schema.barrier_key(R.ready_id, k)), ph, EQ, True, -1, P.read() // 4, t])
                    P.add(mma, ["w", R.mma, P.dur(C * pf[r, p]), t, True])
                    P.add(mma, ["n", R.empty, (r, p, schema.barrier_key(R.empty_id, k)), ph, False, True, -1, P.lat(r, r) // 4, t])
                    if s.lanes > 2:
                        P.add(mma, ["n", R.acc_ready, (r, p, schema.barrier_key(R.acc_id, 0)), t, False, True, -1,
                                    P.lat(r, r) // 4, t])
                        P.add(epi, ["a", R.acc_ready, (r, p, schema.barrier_key(R.acc_id, 0)), t, EQ, True, -1, P.read() // 4, t])
                        P.add(epi, ["w", R.store, P.dur(0.5 * C * pf[r, p]), t, True])
                        if W > 1:
                            P.add(epi, ["n", R.tile_ready, (nxt, _flag(r, p, G, t)), ep, False, False, nxt, P.lat(r, nxt), t])
                            P.add(epi, ["a", R.tile_wait, (r, _flag(prv, p, G, t)), ep, GE, False, prv, P.read(), t])
    else:
        raise ValueError(f"unknown pattern {s.pattern!r}")
    return P


class _Regions:
    """Region names (the ids are ``schema.region_id`` of the names)."""

    tile, compute, send, consume, tile_ready, tile_wait = "tile", "compute", "send", "consume", "tile_ready", "tile_wait"
    produce, ready, ready_wait, free, free_wait = "produce", "ready", "ready_wait", "free", "free_wait"
    send_flag, recv, recv_wait = "send_flag", "recv", "recv_wait"
    partial, add, sum_wait, reduce = "partial", "add", "sum_wait", "reduce"
    empty, load, mma, acc_ready, store = "empty", "load tile", "mma tile", "acc_ready", "store tile"
    empty_id, ready_id, acc_id = schema.region_id("empty"), schema.region_id("ready"), schema.region_id("acc_ready")


# ---------------------------------------------------------------------------------------------
# injecting a cause
# ---------------------------------------------------------------------------------------------


def _inject(prog: _Prog, inj: Injected, launch: int) -> set:
    """Change one launch's operations by the cause (late_launch and slow_link act in :func:`_run`);
    the ranks of the waits on a notify that is no longer sent."""
    skipped: set = set()
    if inj.kind not in ("straggler", "held", "heavy", "hang") or launch not in inj.launches:
        return skipped
    for (r, p, lane), ops in prog.ops.items():
        if r != inj.rank or p not in inj.programs or (inj.lane >= 0 and lane != inj.lane):
            continue
        k = 0  # the k-th notify at the call site: the round
        out = []
        for op in ops:
            if op[0] == "w" and op[4] and inj.kind == "heavy":
                op = op[:2] + [int(op[2] * inj.factor)] + op[3:]
            if op[0] == "n" and op[1] == inj.region:
                if k in inj.rounds:
                    if inj.kind == "held":
                        out.append(["i", int(inj.magnitude_ns)])
                    elif inj.kind == "straggler":
                        j = max(i for i, o in enumerate(out) if o[0] == "w" and o[4])  # the work before it
                        out[j] = out[j][:2] + [out[j][2] + int(inj.magnitude_ns)] + out[j][3:]
                    elif inj.kind == "hang":
                        skipped.add(r if op[5] else op[6])
                        k += 1
                        continue
                k += 1
            out.append(op)
        prog.ops[(r, p, lane)] = out
    return skipped


# ---------------------------------------------------------------------------------------------
# the simulation
# ---------------------------------------------------------------------------------------------

_VIS, _WAIT, _TIMEOUT, _RUN = 0, 1, 2, 3
_SEEN_WAIT_NS = 150  # a wait that gives up because another wait of its rank did: its next read of the error word


def _satisfied(state: int, expected: int, cmp: int, local: bool) -> bool:
    # (an mbarrier wait for phase k returns once the barrier has passed it: phases only grow)
    return state >= expected if local or cmp != int(Cmp.EQ) else state == expected


def _run(prog: _Prog, starts: dict, extra_lat: dict, timeout_ns: dict) -> dict:
    """Run one launch: per agent, its events as rows ``(kind, flags, region, start, end, a0..a5)``
    in recording order (a span is recorded when it ends)."""
    rows = {a: [] for a in prog.ops}
    pc = dict.fromkeys(prog.ops, 0)
    stack = {a: [] for a in prog.ops}
    state: dict = {}  # flag key -> value (a set flag: the last write; a counter: the sum; an mbarrier: the last phase)
    blocked: dict = {}  # flag key -> [(agent, wait start, op)]
    err: dict = {}  # rank -> time its first wait gave up
    heap: list = []
    seq = [0]

    def push(t, kind, item):
        seq[0] += 1
        heapq.heappush(heap, (int(t), kind, seq[0], item))

    def value(key, local):
        # a set flag holds the previous launch's epoch until set; a counter starts from 0
        return state.get(key, -1 if local else 0 if key in prog.counters else prog.launch)

    def finish_wait(a, op, t0, t1, timed_out):
        region, key, expected, cmp, local, peer = op[1], op[2], op[3], op[4], op[5], op[6]
        v = value(key, local)
        flags = int(EventFlag.TIMEOUT) if timed_out else 0
        if local:
            flags |= int(EventFlag.LOCAL)
            args = (-1, -1, key[2], v, expected, cmp)
        else:
            args = (peer, max(1, (t1 - t0) // 200), key[1], v, expected, cmp)
        rows[a].append((int(EventKind.WAIT), flags, region, t0, t1, *args))
        run(a, t1)

    def run(a, t):
        ops = prog.ops[a]
        while pc[a] < len(ops):
            op = ops[pc[a]]
            pc[a] += 1
            kind = op[0]
            if kind == "w":
                rows[a].append((int(EventKind.SPAN), 0, op[1], t, t + op[2], op[3], 0, 0, 0, 0, 0))
                t += op[2]
            elif kind == "i":
                t += op[1]
            elif kind == "o":
                stack[a].append((op[1], t))
            elif kind == "c":
                region, t0 = stack[a].pop()
                rows[a].append((int(EventKind.SPAN), 0, region, t0, t, 0, 0, 0, 0, 0, 0))
            elif kind == "n":
                region, key, value, add, local, peer, lat = op[1:8]
                lat += extra_lat.get((a[0], peer), 0)
                flags = int(EventFlag.LOCAL) if local else 0
                args = (-1, value, key[2], 0, 0, 0) if local else (peer, value, key[1], 0, 0, 0)
                rows[a].append((int(EventKind.NOTIFY), flags, region, t, t + 40, *args))
                push(t + lat, _VIS, (key, value, add))
                t += 40
            elif kind == "a":
                push(t, _WAIT, (a, op))
                return
        return

    for a in prog.ops:
        push(starts[a], _RUN, a)
    while heap:
        t, kind, _, item = heapq.heappop(heap)
        if kind == _RUN:
            run(item, t)
        elif kind == _VIS:
            key, v_new, add = item
            state[key] = value(key, False) + v_new if add else v_new
            still = []
            for a, t0, op in blocked.pop(key, []):
                if _satisfied(state[key], op[3], op[4], op[5]):
                    finish_wait(a, op, t0, t + op[7], False)
                else:
                    still.append((a, t0, op))
            if still:
                blocked[key] = still
        elif kind == _WAIT:
            a, op = item
            key, expected, cmp, local = op[2], op[3], op[4], op[5]
            if (local and expected < 0) or _satisfied(value(key, local), expected, cmp, local):
                finish_wait(a, op, t, t + op[7], False)
            elif a[0] in err:  # the rank's error word is set: it gives up at its next read of it
                finish_wait(a, op, t, t + _SEEN_WAIT_NS, True)
            else:
                blocked.setdefault(key, []).append((a, t, op))
                push(t + timeout_ns[a[0]], _TIMEOUT, (a, t, op))
        elif kind == _TIMEOUT:
            a, t0, op = item
            lst = blocked.get(op[2], [])
            if not any(x[0] == a and x[1] == t0 for x in lst):
                continue  # released before its bound
            err.setdefault(a[0], t)
            # this wait gives up, and every other wait of its rank still spinning with it
            for key in list(blocked):
                keep = []
                for b, s0, o in blocked[key]:
                    if b[0] == a[0]:
                        finish_wait(b, o, s0, t if (b == a and s0 == t0) else t + _SEEN_WAIT_NS, True)
                    else:
                        keep.append((b, s0, o))
                if keep:
                    blocked[key] = keep
                else:
                    del blocked[key]
    stuck = [a for a in prog.ops if pc[a] < len(prog.ops[a]) or stack[a]]
    if stuck:
        raise RuntimeError(f"generated program did not finish: agents {stuck[:4]} stopped")  # (a bug of the generator)
    return rows


def _simulate(shape: Shape, inj: Injected, seed: int, *, with_cause: bool = True):
    """Every launch's rows per agent, and each launch's true start and duration."""
    rng = np.random.default_rng([seed, 1])
    out = []
    t = _BASE_NS + 5_000_000
    extra_lat = {(inj.rank, inj.consumer): int(inj.magnitude_ns) - _ONE_WAY_NS} if with_cause and inj.kind == "slow_link" else {}
    for ln in range(shape.launches):
        prog = _build(shape, rng, ln)
        skipped = _inject(prog, inj, ln) if with_cause else set()
        rank_start = {r: t + int(rng.uniform(0, shape.skew_ns)) for r in range(shape.world)}
        if ln == 0 and shape.cold_late[0] >= 0:
            rank_start[shape.cold_late[0]] += shape.cold_late[1]
        if with_cause and inj.kind == "late_launch" and ln in inj.launches:
            rank_start[inj.rank] += int(inj.magnitude_ns)
        starts = {a: rank_start[a[0]] + int(rng.uniform(0, 200)) + 32 * a[2] for a in prog.ops}
        # the rank waiting for a notify never sent gives up first (the others' bounds are longer,
        # as a kernel's own waits on a peer it serves would be): one hang, not one per rank
        bound = {r: shape.timeout_ns * (1 if r in skipped or inj.kind != "hang" else 4) for r in range(shape.world)}
        rows = _run(prog, starts, extra_lat, bound)
        lo = min(r[3] for v in rows.values() for r in v)
        hi = max(r[4] for v in rows.values() for r in v)
        out.append((rows, lo, hi - lo))
        t = hi + 30_000 + int(rng.uniform(0, 20_000))  # the host's gap to the next launch
    return out


# ---------------------------------------------------------------------------------------------
# the capture
# ---------------------------------------------------------------------------------------------

_COLS = ("kind", "flags", "region", "start", "end", "arg0", "arg1", "arg2", "arg3", "arg4", "arg5")


def _capture(shape: Shape, launches: list, seed: int, meta: dict) -> Capture:
    rng = np.random.default_rng([seed, 2])
    W = shape.world
    offsets = [0] + [int(x) for x in rng.integers(-1_200_000, 1_200_000, W - 1)]
    drifts = [0.0] + [float(x) for x in rng.uniform(-11, 11, W - 1)]

    def dev(rank, t):
        t = np.asarray(t, dtype=np.int64)
        d = t + offsets[rank] + np.rint((t - _BASE_NS).astype(np.float64) * drifts[rank] * 1e-6).astype(np.int64)
        return (d // _QUANTUM_NS) * _QUANTUM_NS

    names = {v for k, v in vars(_Regions).items() if not k.startswith("_") and isinstance(v, str)}
    regions = {schema.region_id(n): n for n in names}
    t_first = launches[0][1]
    t_last = launches[-1][1] + launches[-1][2]
    host_offset = int(rng.integers(1_000_000, 9_000_000))
    lane_names = list(GLUON_LANES[: shape.lanes]) if shape.lanes > 1 else []
    ranks = {}
    for r in range(W):
        ls = []
        for ln, (rows, lo, _) in enumerate(launches):
            mine = [(a, v) for a, v in rows.items() if a[0] == r]
            n = sum(len(v) for _, v in mine)
            ev = np.zeros(n, schema.EVENT_DTYPE)
            i = 0
            for (rr, p, lane), v in sorted(mine):
                if not v:
                    continue
                arr = np.array([(x[0], x[1], schema.region_id(x[2]), *x[3:]) for x in v], np.int64)
                sl = slice(i, i + len(v))
                ev["program"][sl], ev["lane"][sl] = p, lane
                for j, c in enumerate(_COLS):
                    ev[c][sl] = arr[:, j]
                i += len(v)
            ev["start"], ev["end"] = dev(r, ev["start"]), dev(r, ev["end"])
            ev["hw"] = (ev["program"] * 2 + 7 * r) % 132
            width = 1 + np.isin(ev["kind"], (int(EventKind.WAIT), int(EventKind.NOTIFY)))
            virt = ev["program"].astype(np.int64) * max(shape.lanes, 1) + ev["lane"]
            cap = int(np.bincount(virt, weights=width).max()) + 2
            raw = encode_buffer(ev, grid=(shape.programs, 1, 1), capacity=cap, lanes=max(shape.lanes, 1))
            grid = schema.virtual_grid((shape.programs, 1, 1), max(shape.lanes, 1))
            ls.append(Launch(index=ln, kernel=f"generated_{shape.pattern}", grid=grid, capacity=cap, raw=raw,
                             host_ns=int(lo) + host_offset + 2_000, meta={"lanes": lane_names} if lane_names else {}))
        samples = {"host_anchor": host_anchor_samples(rng, lambda t, r=r: dev(r, t), t_first - 4_000_000, host_offset)}
        if r != 0:
            samples["pingpong"] = [pingpong_samples(rng, lambda t: dev(0, t), lambda t, r=r: dev(r, t), t0, 256, r, phase)
                                   for phase, t0 in (("before", t_first - 3_000_000), ("after", t_last + 2_000_000))]
        device = {"index": r, "name": "GENERATED GPU", "vendor": "nvidia", "arch": "sm_90", "timer": "NV_GLOBALTIMER",
                  "tick_hz": 1_000_000_000}
        ranks[r] = RankCapture(rank=r, device=device, launches=ls, clock_samples=samples)
    return Capture(world_size=W, ranks=ranks, regions=regions, meta={"constructed": True, "generated": meta})


# ---------------------------------------------------------------------------------------------
# drawing a case
# ---------------------------------------------------------------------------------------------


def _producers(shape: Shape) -> list[tuple[int, int, str]]:
    """``(program, lane, notify region)`` of the agents whose notifies others wait on, per rank;
    lane -1: the program's only lane."""
    s = shape
    R = _Regions
    if s.pattern == "ring":
        return [(p, -1, R.tile_ready) for p in range(s.programs)]
    if s.pattern == "pairs":
        return [(p, -1, R.ready) for p in range(s.programs // 2)]
    if s.pattern == "a2a":
        return [(p, -1, R.send_flag) for p in range(s.programs)]
    if s.pattern == "counter":
        return [(p, -1, R.add) for p in range(s.programs - 1)]
    out = [(p, 1, R.ready) for p in range(s.programs)] + [(p, 0, R.empty) for p in range(s.programs)]
    return out


def _draw_shape(rng: np.random.Generator) -> Shape:
    pattern = str(rng.choice(PATTERNS, p=[0.25, 0.2, 0.15, 0.15, 0.25]))
    multi = pattern in ("ring", "a2a")
    world = int(rng.choice([2, 3, 4, 8], p=[0.35, 0.2, 0.3, 0.15]) if multi else rng.choice([1, 2, 3, 4, 8], p=[0.3, 0.25, 0.1, 0.25, 0.1]))
    lanes = int(rng.choice([2, 3])) if pattern == "gluon" else 1
    if pattern == "pairs":
        programs = int(rng.choice([2, 4, 6]))
    elif pattern == "counter":
        programs = int(rng.integers(3, 6))
    elif pattern == "a2a":
        programs = int(rng.integers(1, 4 if world <= 4 else 3))
    else:
        programs = int(rng.integers(1, 7 if world <= 4 else 4))
    if world * programs == 1 and pattern != "gluon":
        programs = 2
    rounds = int(rng.integers(4, 11 if world * programs * lanes <= 24 else 7))
    launches = int(rng.choice([1, 2, 3, 4], p=[0.15, 0.25, 0.3, 0.3]))
    work = int(rng.uniform(4_000, 30_000))
    stages = int(rng.integers(1, 3)) if pattern == "gluon" else int(rng.integers(1, 4))
    cold, cold_late = 1.0, (-1, 0)
    if launches >= 2 and rng.random() < 0.5:
        cold = float(rng.uniform(1.5, 2.0))
        if world > 1 and rng.random() < 0.5:
            cold_late = (int(rng.integers(0, world)), int(rng.uniform(10_000, 130_000)))
    return Shape(pattern=pattern, world=world, programs=programs, lanes=lanes, rounds=rounds, launches=launches, work_ns=work,
                 stages=stages, cold=cold, cold_late=cold_late)


def _draw_cause(rng: np.random.Generator, s: Shape, kind: str, launch_ns: float) -> Injected:
    later = tuple(range(1 if s.cold > 1 else 0, s.launches)) or (0,)
    all_l = tuple(range(s.launches))
    if kind == "healthy":
        return Injected()
    if kind in ("straggler", "held", "hang"):
        prods = _producers(s)
        r = int(rng.integers(0, s.world))
        p, lane, region = prods[int(rng.integers(0, len(prods)))]
        programs = (p,)
        same = sorted({q for q, ln, reg in prods if ln == lane and reg == region})
        if kind == "straggler" and s.world > 1 and rng.random() < 0.3:  # a whole rank
            programs = tuple(same)
        elif kind != "hang" and rng.random() < 0.3:
            programs = tuple(sorted(rng.choice(same, size=min(len(same), int(rng.integers(1, 3))), replace=False).tolist()))
        # the rounds are the k-th notifies of each program at the call site: one per tile, or
        # (all-to-all) one per peer and tile; a straggler's extra work is before a tile's first
        per = s.world - 1 if s.pattern == "a2a" else 1
        q = 0 if kind == "straggler" else int(rng.integers(0, per))
        if kind == "hang":
            # (a counter's later adds make up for a missing one: only the last round's hangs)
            rnd = (s.rounds - 1 if s.pattern == "counter" else int(rng.integers(0, s.rounds))) * per + q
            launches = (int(rng.choice(later)),) if rng.random() < 0.6 else later
            return Injected(kind, r, programs, lane, (rnd,), launches, float(s.timeout_ns), region)
        # (a straggler's first round is after a hand-off of its own: the work before an agent's
        # first hand-off holds its setup too, and the report does not judge it)
        lo = judged = 1 if kind == "straggler" and s.pattern != "gluon" else 0
        if kind == "straggler" and s.world == 1 and len(programs) == len(same) > 1:
            lo += 1  # (every program's first judged round slow at once is the launch warming up)
        # (fewer than half the rounds judged: a round is slow against the agent's median round)
        n = int(rng.integers(1, max(2, (s.rounds - judged - 1) // 2 + 1)))
        first = int(rng.integers(lo, s.rounds - n + 1))
        tiles = (range(first, first + n) if rng.random() < 0.7
                 else sorted((lo + rng.choice(s.rounds - lo, n, replace=False)).tolist()))
        rounds = tuple(t * per + q for t in tiles)
        mag = max(2_500.0, float(rng.uniform(0.6, 2.0)) * s.work_ns, 0.12 * launch_ns / n)
        return Injected(kind, r, programs, lane, rounds, later, float(int(mag)), region)
    if kind == "heavy":
        r = int(rng.integers(0, s.world))
        prods = sorted({p for p, _, _ in _producers(s)})
        # (fewer than a third of the programs they are compared with: the role's median is normal)
        k = int(rng.integers(1, 3)) if len(prods) * s.world >= 7 else 1
        programs = tuple(sorted(rng.choice(prods, size=k, replace=False).tolist()))
        return Injected(kind, r, programs, -1, (), all_l, 0.0, "", factor=float(rng.uniform(1.8, 3.0)))
    if kind == "late_launch":
        r = int(rng.integers(0, s.world))
        return Injected(kind, r, (), -1, (), all_l, float(int(max(5_000.0, rng.uniform(0.15, 0.5) * launch_ns))))
    if kind == "slow_link":
        p = int(rng.integers(0, s.world))
        return Injected(kind, p, (), -1, (), all_l, float(int(_ONE_WAY_NS + rng.uniform(3_000, 15_000))), "",
                        consumer=(p + 1) % s.world)
    raise ValueError(kind)


_ENCLOSING = (_Regions.tile, _Regions.recv)


def _heavy_magnitude(inj: Injected, runs: list, base: list, launches) -> float:
    """The heavy programs' extra work per workgroup and launch (their work spans, with the cause
    less without it), over the launches given."""
    extra = []
    for ln in launches:
        for p in inj.programs:
            a = (inj.rank, p, 0)
            # (the leaf work spans only: an enclosing span holds them)
            spans = [sum(x[4] - x[3] for x in rows[a] if x[0] == int(EventKind.SPAN) and x[2] not in _ENCLOSING)
                     for rows in (runs[ln][0], base[ln][0])]
            extra.append(spans[0] - spans[1])
    return float(np.mean(extra)) if extra else 0.0


def _kinds_for(s: Shape) -> list[str]:
    kinds = ["healthy", "straggler", "held", "hang"]
    if s.pattern != "gluon" and len({p for p, _, _ in _producers(s)}) * s.world >= 3:
        kinds.append("heavy")
    if s.world > 1:
        kinds.append("late_launch")
        if s.pattern != "gluon" or (s.lanes > 2):
            kinds.append("slow_link")
    return kinds


def draw(seed: int, kind: str | None = None) -> Case:
    """A case drawn from ``seed`` (its cause of ``kind`` when given), simulated, with its capture.

    A drawn cause that would cost less than a tenth of the kernel time (its slack absorbs it) is
    drawn again larger: every case with a cause is one whose cause matters.
    """
    rng = np.random.default_rng(seed)
    shape = _draw_shape(rng)
    kinds = _kinds_for(shape)
    if kind is None:
        kind = str(rng.choice(kinds))
    elif kind not in kinds:
        raise ValueError(f"seed {seed}: a {shape.pattern} case of {shape.world} ranks cannot hold {kind!r} (it can: {kinds})")
    base = _simulate(shape, Injected(), seed)
    launch_ns = float(np.median([d for _, _, d in base]))
    if kind == "hang":
        shape = replace(shape, timeout_ns=int(launch_ns * float(rng.uniform(1.2, 3.0))))
        base = _simulate(shape, Injected(), seed)
    inj = _draw_cause(rng, shape, kind, launch_ns)
    if kind == "hang":
        # a notify nobody waits for (the last 'empty' of a ring of stages) hangs nothing: draw again
        for _ in range(16):
            inj = replace(inj, magnitude_ns=float(shape.timeout_ns))
            if _hang_consumer(shape, inj, _simulate(shape, inj, seed)).consumer >= 0:
                break
            inj = _draw_cause(rng, shape, kind, launch_ns)
    for attempt in range(4):
        if attempt:
            inj = (replace(inj, factor=1 + (inj.factor - 1) * 1.6) if kind == "heavy"
                   else replace(inj, magnitude_ns=float(int(inj.magnitude_ns * 2.0))))
        runs = _simulate(shape, inj, seed)
        # (over the launches after a cold first one: what a report judges)
        judged = slice(1 if shape.cold > 1 else 0, None)
        cost = sum(d for _, _, d in runs[judged]) - sum(d for _, _, d in base[judged])
        total = sum(d for _, _, d in runs[judged])
        if kind in ("healthy", "hang") or cost >= 0.1 * total:
            break
    return _case(shape, inj, seed, runs, base)


def build(shape: Shape, injected: Injected, seed: int = 0) -> Case:
    """The case of a shape and a cause given (not drawn: what a test sets up by hand), simulated
    with the noise of ``seed``, with its capture. ``injected.magnitude_ns`` is taken as given
    (``factor`` for heavy work), the hang's consumer found by the simulation."""
    return _case(shape, injected, seed, _simulate(shape, injected, seed), _simulate(shape, Injected(), seed))


def _case(shape: Shape, inj: Injected, seed: int, runs: list, base: list) -> Case:
    judged = slice(1 if shape.cold > 1 else 0, None)  # (the launches after a cold first one: what a report judges)
    cost = sum(d for _, _, d in runs[judged]) - sum(d for _, _, d in base[judged])
    total = sum(d for _, _, d in runs[judged])
    if inj.kind == "hang":
        inj = _hang_consumer(shape, inj, runs)
    if inj.kind == "heavy":
        later = [ln for ln in inj.launches if not (ln == 0 and shape.cold > 1)] or list(inj.launches)
        inj = replace(inj, magnitude_ns=_heavy_magnitude(inj, runs, base, later))
    meta = {"seed": seed, "shape": vars(shape) | {"cold_late": list(shape.cold_late)},
            "injected": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(inj).items()}}
    return Case(seed, shape, inj, _capture(shape, runs, seed, meta), float(cost), float(total))


def _hang_consumer(shape: Shape, inj: Injected, runs: list) -> Injected:
    """Who waited for the notify that never came: the first wait that gave up, its program and round."""
    first = None
    for ln, (rows, _, _) in enumerate(runs):
        if ln not in inj.launches:
            continue
        for (r, p, lane), v in rows.items():
            k = {}
            for x in v:
                if x[0] != int(EventKind.WAIT):
                    continue
                rnd = k.get(x[2], 0)
                k[x[2]] = rnd + 1
                if x[1] & int(EventFlag.TIMEOUT) and (first is None or x[3] < first[0] or (x[3] == first[0] and x[4] > first[1])):
                    first = (x[3], x[4], r, p, rnd, x[4] - x[3])
        if first is not None:
            break
    if first is None:
        return inj
    return replace(inj, consumer=first[2], consumer_programs=(first[3],), consumer_round=first[4])


def simulate(shape: Shape, inj: Injected, seed: int, *, with_cause: bool = True) -> list:
    """The draw's launches as run: per launch ``(rows per agent, true start ns, duration ns)``."""
    return _simulate(shape, inj, seed, with_cause=with_cause)


__all__ = ["GLUON_LANES", "KINDS", "PATTERNS", "Case", "Injected", "Shape", "build", "draw", "simulate"]
