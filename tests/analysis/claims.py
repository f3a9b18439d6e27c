"""Every claim a report makes, re-checked against the capture's RAW events.

The events are read with ``ktrace.events.aligned_events`` (the one decode, on the common clock)
and nothing of ``ktrace.analysis`` is used: each check recomputes what the claim states from the
events of the agents it names (rank, launch, program, lane), with its own code. A claim kind
with no check here fails the test, so a new kind of sentence cannot go unchecked.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ktrace import schema
from ktrace.captures import read_capture
from ktrace.events import aligned_events
from ktrace.schema import EventKind, arg_column

W, N, S = int(EventKind.WAIT), int(EventKind.NOTIFY), int(EventKind.SPAN)
#: A stated number agrees with the events when within this share of it, or this many ns.
REL, ABS_NS = 0.10, 300.0
OUTSIDE = "(outside any region)"


def close(a: float, b: float, rel: float = REL, abs_ns: float = ABS_NS) -> bool:
    return abs(float(a) - float(b)) <= max(rel * max(abs(float(a)), abs(float(b))), abs_ns)


class Raw:
    """A capture's events, decoded on their own, and the sums the checks need.

    ``leave_out``: launches a report left out as warm-up (its summary's ``warmup_launches``): the
    claims are about the other launches' events (times stay relative to the whole capture's first
    event, and the launches left out are kept whole for the claims about them).
    """

    def __init__(self, path, leave_out=()):
        self.capture = read_capture(path)
        e = aligned_events(self.capture)
        self.origin = int(e["start_ns"].min()) if e.size else 0
        self.whole = {}
        if len(leave_out):
            # (each launch's extent and median busy agent, as the warm-up claims compare them, before any is left out)
            for l in np.unique(e["launch"]).tolist():
                m = e["launch"] == l
                self.whole[l] = (int(e["end_ns"][m].max() - e["start_ns"][m].min()), _busy_of(e[m]))
            e = e[~np.isin(e["launch"], list(leave_out))]
        self.e = e
        self.s = (e["start_ns"] - self.origin).astype(np.int64)
        self.t = (e["end_ns"] - self.origin).astype(np.int64)
        self.kind = e["kind"].astype(np.int64)
        self.rank, self.launch, self.program = (e[c].astype(np.int64) for c in ("rank", "launch", "program"))
        # the lane of the program that recorded each event (0 in a capture of one lane per program)
        self.lane = e["lane"].astype(np.int64) if "lane" in (e.dtype.names or ()) else np.zeros(e.size, np.int64)
        self.region = e["region"].astype(np.int64)
        self.timeout = schema.is_timeout(e["flags"])
        # events named (rank, launch, program, k): the k-th its program recorded, in (lane, slot) order
        o = np.lexsort((e["slot"], self.lane, e["program"], e["launch"], e["rank"]))
        k, last = np.zeros(e.size, np.int64), None
        for n, i in enumerate(o.tolist()):
            a = (int(e["rank"][i]), int(e["launch"][i]), int(e["program"][i]))
            k[i] = 0 if a != last else k[o[n - 1]] + 1
            last = a
        self.key = {(int(a), int(b), int(c), int(d)): i for i, (a, b, c, d) in
                    enumerate(zip(e["rank"].tolist(), e["launch"].tolist(), e["program"].tolist(), k.tolist()))}
        # per agent (rank, launch, program): first start, last end, leaf span time per region
        self.agents = sorted(set(zip(self.rank.tolist(), self.launch.tolist(), self.program.tolist())))
        self._leaf = None
        self._holds = None
        self._parts = None
        self._work = None

    def arg(self, kind: int, name: str) -> np.ndarray:
        return self.e[arg_column(EventKind(kind), name)].astype(np.int64)

    def sel(self, rank=-1, launch=-1, program=-1, kind=None, lane=-1) -> np.ndarray:
        m = np.ones(self.e.size, bool)
        for col, v in ((self.rank, rank), (self.launch, launch), (self.program, program), (self.lane, lane)):
            if v is not None and v >= 0:
                m &= col == v
        if kind is not None:
            m &= self.kind == kind
        return m

    def extent(self, a) -> tuple[int, int]:
        m = self.sel(a[0], a[1], a[2])
        return int(self.s[m].min()), int(self.t[m].max())

    def leaf(self) -> np.ndarray:
        """Per event, whether it is a span no other event of its program's lane starts inside (the
        lanes of a program run at once)."""
        if self._leaf is None:
            self._leaf = _leaf_mask((self.rank, self.launch, self.program, self.lane), self.kind, self.s, self.t)
        return self._leaf

    def region_time(self, a, rid: int, waits: bool = False) -> float:
        m = self.sel(a[0], a[1], a[2]) & (self.region == rid) & ((self.kind == W) if waits else self.leaf())
        return float((self.t[m] - self.s[m]).sum())


def _leaf_mask(keys, kind, s0, t0) -> np.ndarray:
    """Per event, whether it is a span no other event of its (rank, launch, program, lane) ``keys``
    starts inside."""
    out = np.zeros(kind.size, bool)
    grp = defaultdict(list)
    for i, a in enumerate(zip(*(k.tolist() for k in keys))):
        grp[a].append(i)
    for rows in grp.values():
        rows = np.array(rows)
        s, t = s0[rows], t0[rows]
        mine = np.isin(kind[rows], (S, W, N))
        for j in rows[kind[rows] == S]:
            # (a shorter event starting at the same tick is inside it too, the timer steps 32 ns;
            # so is one over the same interval recorded before it: a span is recorded when it ends)
            d, dj = t - s, t0[j] - s0[j]
            same = (s == s0[j]) & ((d < dj) | ((d == dj) & (rows < j)))
            inside = mine & (s < t0[j]) & ((s > s0[j]) | same)
            out[j] = not inside.any()
    return out


def _agents(claim) -> list[tuple]:
    return [tuple(int(x) for x in a) for a in claim["agents"]]


# ---------------------------------------------------------------------------------------------
# the checks: each returns a list of what is false (empty: the claim holds)
# ---------------------------------------------------------------------------------------------


def raw_holds(raw: Raw, rid: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per notify (of call site ``rid``, or of each call site): ``(rows, round, held beyond its
    baseline)``: the time from the program's previous event's end to the notify, less the smaller
    of the program's median there and the median over the programs notifying there in the launch."""
    nm = (raw.kind == N) if rid is None else (raw.kind == N) & (raw.region == rid)
    idx = np.flatnonzero(nm)
    # a notify's round: its place among its program's notifies there (counted before dropping the
    # ones with no earlier record to measure from: a program whose first record is a notify)
    every = defaultdict(int)
    rnd_all = np.zeros(idx.size, int)
    for i, a in enumerate(zip(raw.rank[idx].tolist(), raw.launch[idx].tolist(), raw.program[idx].tolist(),
                              raw.lane[idx].tolist(), raw.region[idx].tolist())):
        rnd_all[i] = every[a]
        every[a] += 1
    prev = idx - 1
    ok = (prev >= 0) & (raw.rank[prev] == raw.rank[idx]) & (raw.launch[prev] == raw.launch[idx]) & \
        (raw.program[prev] == raw.program[idx]) & (raw.lane[prev] == raw.lane[idx])
    idx, prev, rnd_all = idx[ok], prev[ok], rnd_all[ok]
    held = np.maximum(raw.s[idx] - raw.t[prev], 0).astype(float)
    agent = list(zip(raw.rank[idx].tolist(), raw.launch[idx].tolist(), raw.program[idx].tolist(), raw.region[idx].tolist(),
                     raw.lane[idx].tolist()))
    by_agent = defaultdict(list)
    for i, a in enumerate(agent):
        by_agent[a].append(i)
    own = {a: float(np.median(held[ix])) for a, ix in by_agent.items()}
    by_role = defaultdict(list)
    for a, m in own.items():
        by_role[(a[1], a[3])].append(m)
    role = {k: float(np.median(ms)) for k, ms in by_role.items()}
    rnd = rnd_all
    excess = np.array([held[i] - min(own[a], role[(a[1], a[3])]) for i, a in enumerate(agent)])
    return idx, rnd, excess


def raw_work(raw: Raw) -> dict:
    """Per notify with events of its agent before it since its agent's previous wait or notify
    (row -> values): the work of its round, from the end of that wait or notify to the end of the
    event before it; its round (its place among its agent's
    notifies at its call site, those right after another hand-off counted); its excess over the
    agent's median there; and the region of the longest span in between."""
    if raw._work is None:
        rec = {}
        last = None
        count = defaultdict(int)
        for i in range(raw.e.size):
            a = (int(raw.rank[i]), int(raw.launch[i]), int(raw.program[i]), int(raw.lane[i]))
            if a != last:  # (the work before an agent's first wait or notify is not judged: its setup)
                begin, prev_end, longest, last = None, None, (-1, None), a
            k = int(raw.kind[i])
            if k == N:
                rnd = count[(a, int(raw.region[i]))]
                count[(a, int(raw.region[i]))] += 1
                if begin is not None and prev_end is not None and int(raw.kind[i - 1]) not in (N, W):  # (work of its own)
                    rec[i] = (a, int(raw.region[i]), max(prev_end - begin, 0), longest[1], rnd)
            if k in (N, W):
                begin, longest = int(raw.t[i]), (-1, None)
            elif k == S and begin is not None and raw.s[i] >= begin and raw.t[i] - raw.s[i] > longest[0]:
                # (a span of the round's own: one that began before it, around the last hand-off, is not)
                longest = (int(raw.t[i] - raw.s[i]), int(raw.region[i]))
            prev_end = int(raw.t[i])
        groups = defaultdict(list)
        for i, (a, rid, *_) in rec.items():
            groups[(a, rid)].append(i)
        out = {}
        for g, ix in groups.items():
            med = float(np.median([rec[i][2] for i in ix]))
            for i in ix:  # (an agent of fewer than 3 rounds there has no usual pace: none is slow)
                x = rec[i][2] - med
                out[i] = {"agent": g[0], "region": g[1], "round": rec[i][4], "work": rec[i][2], "usual": med, "excess": x,
                          "slow": len(ix) >= 3 and x >= max(1000.0, 0.25 * med), "longest": rec[i][3],
                          "first": i == min(ix), "warming": False}
        # the first rounds of 75 % of a call site's agents (of one lane, in a launch; two at least) slow
        # at once: the launch warming up, no straggler's
        firsts = defaultdict(list)
        for i, x in out.items():
            if x["first"]:
                firsts[(x["agent"][1], x["region"], x["agent"][3])].append(i)
        for ix in firsts.values():
            if len(ix) >= 2 and sum(out[i]["slow"] for i in ix) >= 0.75 * len(ix):
                for i in ix:
                    out[i]["warming"] = out[i]["slow"]
        raw._work = out
    return raw._work


def _slow_rounds(raw: Raw, c) -> list[str]:
    v = c["values"]
    named = _agents(c)
    r, lanes = named[0][0], {a[3] for a in named}
    mine = [x for x in raw_work(raw).values() if x["slow"] and not x["warming"] and x["agent"][0] == r
            and x["agent"][3] in lanes and x["region"] == v["region_id"]]
    bad = []
    if len(mine) != v["n_late"]:
        bad.append(f"{len(mine)} slow rounds in the events, the claim says {v['n_late']}")
    progs = sorted({x["agent"][2] for x in mine})
    if progs != sorted(a[2] for a in named):
        bad.append(f"programs slow {progs}, the claim names {[a[2] for a in named]}")
    rounds = sorted({x["round"] for x in mine})
    if rounds != sorted(v["rounds"]):
        bad.append(f"slow rounds {rounds}, the claim says {v['rounds']}")
    if mine:
        ex = np.array([x["excess"] for x in mine])
        if not close(np.median(ex), v["magnitude_ns"]):
            bad.append(f"slower by {np.median(ex):.0f} ns (median), the claim says {v['magnitude_ns']:.0f}")
        if not close(ex.max(), v["max_ns"]):
            bad.append(f"slower by up to {ex.max():.0f} ns, the claim says {v['max_ns']:.0f}")
        if not close(np.median([x["usual"] for x in mine]), v["baseline_ns"]):
            bad.append(f"usual work {np.median([x['usual'] for x in mine]):.0f} ns, the claim says {v['baseline_ns']:.0f}")
        if v["work_region"]:
            regs = [x["longest"] for x in mine]
            top = max(set(regs), key=regs.count)
            if top != schema.region_id(v["work_region"]):
                bad.append(f"the longest span of most slow rounds is region {top}, not '{v['work_region']}'")
    n = int(((raw.kind == N) & (raw.rank == r) & (raw.region == v["region_id"]) & np.isin(raw.lane, list(lanes))).sum())
    if n != v["n_notifies"]:
        bad.append(f"rank {r} has {n} notifies there, the claim says {v['n_notifies']}")
    return bad


def _held_back(raw: Raw, c) -> list[str]:
    v = c["values"]
    rid = int(v["region_id"])
    nm = (raw.kind == N) & (raw.region == rid)
    idx, rnd, excess = raw_holds(raw, rid)
    r = _agents(c)[0][0]
    # (of the lane of its programs the claim names)
    # (held by at least the least hold the claim names: a share of the longest there, at least 1 µs)
    late = (excess >= max(1000.0, float(v.get("floor_ns", 0.0)))) & (raw.rank[idx] == r) & \
        np.isin(raw.lane[idx], list({a[3] for a in _agents(c)}))
    bad = []
    if int(late.sum()) != int(v["n_late"]):
        bad.append(f"{int(late.sum())} notifies held back in the events, the claim says {v['n_late']}")
    progs = sorted(set(raw.program[idx][late].tolist()))
    if progs != sorted(a[2] for a in _agents(c)):
        bad.append(f"programs holding back {progs}, the claim names {[a[2] for a in _agents(c)]}")
    rounds = sorted(set(rnd[late].tolist()))
    if rounds != sorted(v["rounds"]):
        bad.append(f"rounds held back {rounds}, the claim says {v['rounds']}")
    if late.any():
        if not close(np.median(excess[late]), v["magnitude_ns"]):
            bad.append(f"held back {np.median(excess[late]):.0f} ns (median), the claim says {v['magnitude_ns']:.0f}")
        if not close(excess[late].max(), v["max_ns"]):
            bad.append(f"held back up to {excess[late].max():.0f} ns, the claim says {v['max_ns']:.0f}")
    if int((raw.rank[idx] == r).sum()) + int(((raw.rank == r) & nm).sum() - (raw.rank[idx] == r).sum()) != v["n_notifies"]:
        bad.append(f"rank {r} has {int(((raw.rank == r) & nm).sum())} notifies there, the claim says {v['n_notifies']}")
    return bad


def _first_starts(raw: Raw, launch: int) -> dict:
    out = {}
    for r in np.unique(raw.rank[raw.launch == launch]).tolist():
        out[r] = int(raw.s[(raw.rank == r) & (raw.launch == launch)].min())
    return out


def _started_late(raw: Raw, c) -> list[str]:
    v = c["values"]
    r = _agents(c)[0][0]
    skews = []
    for l in v["launches"]:
        fs = _first_starts(raw, l)
        skews.append(fs[r] - min(fs.values()))
    med = float(np.median(skews))
    # the late start counts only the GPU's idle time: it is at most the skew, and equal unless queued
    if not (v["magnitude_ns"] <= med + ABS_NS and (close(med, v["magnitude_ns"]) or v.get("queued_ns", 0) > 0)):
        return [f"rank {r} started {med:.0f} ns after the first rank (median), the claim says {v['magnitude_ns']:.0f}"]
    if v["first_rank"] >= 0:
        fs = _first_starts(raw, v["launches"][0])
        if fs.get(v["first_rank"]) != min(fs.values()) and len(v["launches"]) == 1:
            return [f"rank {v['first_rank']} did not start first in launch {v['launches'][0]}"]
    return []


def _waited_for(raw: Raw, c) -> list[str]:
    v = c["values"]
    r = _agents(c)[0][0]
    n = 0
    for l in v["launches"]:
        start = _first_starts(raw, l)[r]
        m = raw.sel(-1, l, -1, W) & (raw.rank != r) & (raw.arg(W, "peer") == r) & (raw.s < start)
        n += int(m.sum())
    return [] if n == v["waits"] else [f"{n} waits on rank {r} began before it started, the claim says {v['waits']}"]


def _program_started_late(raw: Raw, c) -> list[str]:
    v = c["values"]
    lates = []
    for a in _agents(c):
        r, l, p = a[0], a[1], a[2]
        launches = [l] if l >= 0 else v["launches"]
        for ll in launches:
            progs = [x for x in raw.agents if x[0] == r and x[1] == ll]
            starts = {x[2]: raw.extent(x)[0] for x in progs}
            if p not in starts:
                continue
            # after the rank's first program started, beyond the median program
            offs = np.array([s - min(starts.values()) for s in starts.values()])
            lates.append(starts[p] - min(starts.values()) - float(np.median(offs)))
    lates = np.array(lates)
    late = lates[lates >= 1000]
    bad = []
    if late.size == 0:
        return [f"no named program started >= 1 µs after its rank's median program ({lates.tolist()})"]
    if not close(np.median(late), v["magnitude_ns"]):
        bad.append(f"named programs started {np.median(late):.0f} ns late (median), the claim says {v['magnitude_ns']:.0f}")
    return bad


def _work(raw: Raw, a) -> float:
    """A workgroup's work: its life less its waits, the time it held notifies back and the time
    its slow rounds took beyond its usual (a straggler's)."""
    if raw._holds is None:
        idx, _, excess = raw_holds(raw)
        raw._holds = defaultdict(float)
        for i, x in zip(idx.tolist(), excess.tolist()):
            raw._holds[(int(raw.rank[i]), int(raw.launch[i]), int(raw.program[i]))] += max(x, 0.0)
        for x in raw_work(raw).values():
            if x["slow"]:
                raw._holds[x["agent"][:3]] += x["excess"]
    m = raw.sel(a[0], a[1], a[2])
    # (a program of several lanes is busy as long as its busiest lane: its lanes wait and work at once)
    busy = 0.0
    for lane in np.unique(raw.lane[m]).tolist():
        ml = m & (raw.lane == lane)
        w = ml & (raw.kind == W)
        life = float(raw.t[ml].max() - raw.s[ml].min())
        busy = max(busy, life - min(float((raw.t[w] - raw.s[w]).sum()), life))
    return busy - min(raw._holds[tuple(a[:3])], busy)


def _role(raw: Raw, v) -> list[tuple]:
    """The agents a workgroup is compared with: those of the same kernel's launches, and of the same
    part in hand-offs (2 x notifies + waits) when the claim says the kernel's programs differ in it."""
    agents = [x for x in raw.agents if x[1] in set(v["role_launches"])]
    if v.get("role_notify") is not None:  # (programs notifying at call sites of their own: those)
        want = {schema.region_id(x) for x in v["role_notify"]}
        agents = [a for a in agents if set(raw.region[raw.sel(a[0], a[1], a[2], N)].tolist()) == want]
    if v.get("role_part", -1) < 0:
        return agents
    if raw._parts is None:
        raw._parts = defaultdict(int)
        for k, bit in ((N, 2), (W, 1)):
            for a in set(zip(raw.rank[raw.kind == k].tolist(), raw.launch[raw.kind == k].tolist(),
                             raw.program[raw.kind == k].tolist())):
                raw._parts[a] |= bit
    return [a for a in agents if raw._parts[a] == v["role_part"]]


def _worked_longer(raw: Raw, c) -> list[str]:
    v = c["values"]
    named = [a[:3] for a in _agents(c)]
    role = _role(raw, v)
    mine = np.mean([_work(raw, a) for a in named])
    med = np.median([_work(raw, a) for a in role])
    claimed = v["work_ns"] / max(v["median_work_ns"], 1)
    got = mine / max(med, 1)
    life = np.mean([np.subtract(*raw.extent(a)[::-1]) for a in named])
    bad = []
    if not (got > 1.0 and close(got, claimed, rel=0.25, abs_ns=0.1)):
        bad.append(f"the named workgroups' time not waiting is {got:.2f}x the median, the claim says {claimed:.2f}x")
    if life < 0.9 * v["work_ns"]:
        bad.append(f"the named workgroups lived {life:.0f} ns, less than the {v['work_ns']:.0f} ns of work claimed")
    return bad


def _extra_in_region(raw: Raw, c) -> list[str]:
    v = c["values"]
    rid = schema.region_id(v["region"])
    named = [a[:3] for a in _agents(c)]
    role = _role(raw, v)
    ex = np.mean([raw.region_time(a, rid) for a in named]) - np.median([raw.region_time(a, rid) for a in role])
    bad = []
    if not (ex > 0 and close(ex, v["excess_ns"])):
        bad.append(f"the named workgroups spent {ex:.0f} ns more in '{v['region']}' than the median, the claim says "
                   f"{v['excess_ns']:.0f}")
    if v["most"] and ex < 0.45 * v["extra_ns"]:
        bad.append(f"'most of the extra' ({v['extra_ns']:.0f} ns) in '{v['region']}', but only {ex:.0f} ns")
    return bad


def _ranks_worked_longer(raw: Raw, c) -> list[str]:
    v = c["values"]
    role = _role(raw, v)
    med = {r: float(np.median([_work(raw, a) for a in role if a[0] == r])) for r in {a[0] for a in role}}
    heavy = [a[0] for a in _agents(c)]
    light = v["light_rank"]
    bad = []
    for h in heavy:
        if not med[h] > med[light]:
            bad.append(f"rank {h}'s median workgroup ({med[h]:.0f} ns) did not work longer than rank {light}'s ({med[light]:.0f})")
    return bad


def _difference_in_region(raw: Raw, c) -> list[str]:
    v = c["values"]
    role = _role(raw, v)
    heavy = {a[0] for a in _agents(c)}
    rids = np.unique(raw.region[(raw.kind == S) | (raw.kind == W)])

    def t(a, rid):
        return raw.region_time(a, rid) + raw.region_time(a, rid, waits=True)

    diff = {int(rid): np.mean([t(a, rid) for a in role if a[0] in heavy]) - np.mean([t(a, rid) for a in role if a[0] not in heavy])
            for rid in rids.tolist()}
    best = max(diff, key=diff.get)
    want = schema.region_id(v["region"])
    if best != want and not close(diff[best], diff.get(want, -1e18), rel=0.02, abs_ns=50):
        return [f"the heavy ranks differ most in region {best}, not '{v['region']}' ({diff.get(want):.0f} vs {diff[best]:.0f} ns)"]
    return []


def _never_sent(raw: Raw, c) -> list[str]:
    v = c["values"]
    a = _agents(c)[0]
    if v.get("local"):  # an mbarrier of one program: its lanes' arrives on it (LOCAL notifies)
        m = raw.sel(a[0], a[1], v["program"], N) & schema.is_local(raw.e["flags"]) & (raw.arg(N, "flag") == v["flag"])
    else:
        m = raw.sel(a[0], a[1], -1, N) & (raw.arg(N, "peer") == v["consumer"]) & (raw.arg(N, "flag") == v["flag"])
    vals = raw.arg(N, "value")[m][np.argsort(raw.s[m], kind="stable")]
    if _reaches(vals, int(v["expected"]), v["cmp"]):
        return [f"rank {a[0]} sent notifies on flag {v['flag']} reaching {v['cmp']} {v['expected']}: {vals.tolist()}"]
    last = int(vals.max()) if vals.size else -1
    return [] if last == v["last_value_sent"] else [f"its largest value sent is {last}, the claim says {v['last_value_sent']}"]


_CMP = {"==": np.equal, "!=": np.not_equal, ">=": np.greater_equal, ">": np.greater, "<=": np.less_equal, "<": np.less}


def _reaches(vals: np.ndarray, expected: int, cmp: str) -> bool:
    """Whether notifies writing ``vals`` (in time order) bring a flag to ``cmp expected``. A notify's
    record says the value, not whether it was set or added: as the capture format documents it
    (``ktrace.pairing``), notifies that all write one value (more than one) are increments added to
    a counter, others values set (a flag set to the round 9, 10, .. 13 has not reached 14, though
    9 + 10 would)."""
    if vals.size == 0:
        return False
    counter = vals.size > 1 and bool((vals == vals[0]).all())
    return bool(_CMP[cmp](np.cumsum(vals) if counter else vals, expected).any())


def _gave_up(raw: Raw, c) -> list[str]:
    v = c["values"]
    durs = []
    for a in _agents(c):
        peer = raw.arg(W, "peer")
        m = raw.sel(a[0], a[1], a[2], W) & raw.timeout & (raw.arg(W, "flag") == v["flag"])
        unknown = m & (peer == -1) & ~schema.is_local(raw.e["flags"])  # (an mbarrier's wait names no peer)
        if v["peer"] >= 0 and unknown.any() and not _feeds(raw, a, v["region_id"], v["peer"]):
            return [f"rank {v['peer']} is named the producer of a wait that did not know its producer, but it did not "
                    f"release rank {a[0]} program {a[2]}'s other waits there (alone)"]
        m &= (peer == v["peer"]) | (peer == -1)
        if not m.any():
            return [f"rank {a[0]} program {a[2]} has no wait on flag {v['flag']} that gave up in launch {a[1]}"]
        durs.append(float((raw.t[m] - raw.s[m]).max()))
        if v.get("round", -1) >= 0:  # the wait that gave up is that program's round-th wait at its call site
            at_site = np.flatnonzero(raw.sel(a[0], a[1], a[2], W) & (raw.region == v["region_id"]))
            first = np.flatnonzero(m)[0]
            if int(np.count_nonzero(at_site < first)) != v["round"]:
                return [f"the wait that gave up is wait {int(np.count_nonzero(at_site < first))} there, the claim says round {v['round']}"]
    return [] if close(np.median(durs), v["waited_ns"]) else [f"gave up after {np.median(durs):.0f} ns, the claim says {v['waited_ns']:.0f}"]


def _feeds(raw: Raw, a, rid: int, producer: int) -> bool:
    """Whether ``producer`` alone notified the flags of the other waits of ``a``'s program (any
    launch) at call site ``rid``: how a wait that did not know its producer is given one."""
    waits = raw.sel(a[0], -1, a[2], W) & (raw.region == rid) & ~raw.timeout
    flags = set(raw.arg(W, "flag")[waits].tolist())
    nm = (raw.kind == N) & np.isin(raw.arg(N, "flag"), list(flags))
    return set(raw.rank[nm].tolist()) == {producer}


def _waiting_during(raw: Raw, a, since: int, until: int) -> bool:
    m = raw.sel(a[0], a[1], a[2], W, lane=a[3])
    ov = np.minimum(raw.t[m], until) - np.maximum(raw.s[m], since)
    return bool((ov >= 0.5 * max(until - since, 1)).any())


def _stuck_waiting(raw: Raw, c) -> list[str]:
    v = c["values"]
    return [f"rank {a[0]} program {a[2]} was not waiting while the consumer waited" for a in _agents(c)
            if not _waiting_during(raw, a, v["since_ns"], v["gave_up_ns"])]


def _not_waiting(raw: Raw, c) -> list[str]:
    v = c["values"]
    bad = [f"rank {a[0]} program {a[2]} was waiting while the consumer waited" for a in _agents(c)
           if _waiting_during(raw, a, v["since_ns"], v["gave_up_ns"])]
    last = max(int(raw.t[raw.sel(a[0], a[1], a[2], lane=a[3])].max()) for a in _agents(c)
               if raw.sel(a[0], a[1], a[2], lane=a[3]).any())
    if abs(last - v["last_event_ns"]) > 64:
        bad.append(f"their last event ended at {last}, the claim says {v['last_event_ns']}")
    return bad


def _launch_span(raw: Raw, l: int) -> int:
    if l in raw.whole:
        return raw.whole[l][0]
    m = raw.launch == l
    return int(raw.t[m].max() - raw.s[m].min())


def _saving(raw: Raw, c) -> list[str]:
    v = c["values"]
    longest = max(_launch_span(raw, l) for l in v["launches"])
    if not 0 < v["saving_per_launch_ns"] <= longest:
        return [f"a saving of {v['saving_per_launch_ns']:.0f} ns per launch, launches last at most {longest} ns"]
    return []


def _not_shorter(raw: Raw, c) -> list[str]:
    """Without the cause the launch ends no earlier: some agent it does not name ends within the
    cause's own size of the named ones' end."""
    v = c["values"]
    for l in v["launches"]:
        named = [a for a in raw.agents if a[1] == l and any(
            (n[0] in (-1, a[0])) and (n[2] in (-1, a[2])) and (n[1] in (-1, l)) for n in _agents(c))]
        others = [a for a in raw.agents if a[1] == l and a not in named]
        if not named:  # the named agents recorded nothing there: other work ends the launch
            return []
        if not others:
            continue
        if max(raw.extent(a)[1] for a in others) >= max(raw.extent(a)[1] for a in named) - v["magnitude_ns"] - ABS_NS:
            return []
    return ["in every launch of the cause, the named agents end last by more than the cause's size"]


def _not_shorter_balanced(raw: Raw, c) -> list[str]:
    """Spreading the work evenly would make the light rank work longer: the mean workgroup's work
    is above the light rank's median."""
    v = c["values"]
    role = _role(raw, v)
    mean = np.mean([_work(raw, a) for a in role])
    light = np.median([_work(raw, a) for a in role if a[0] == v["light_rank"]])
    return [] if mean > light else [f"the mean workgroup works {mean:.0f} ns, not more than rank {v['light_rank']}'s {light:.0f}"]


def _waiting_removed(raw: Raw, c) -> list[str]:
    v = c["values"]
    m = (raw.kind == W) & np.isin(raw.rank, v["ranks"])
    total = float((raw.t[m] - raw.s[m]).sum())
    return [] if 0 < v["waiting_ns"] <= 1.01 * total + ABS_NS else [f"{v['waiting_ns']:.0f} ns of waiting removed, ranks "
                                                                      f"{v['ranks']} waited {total:.0f} ns in all"]


def _each_handoff(raw: Raw, c, judge) -> list[str]:
    """The checks every hand-off claim shares: each (wait, notify) pair it lists is a wait and a
    notify of the capture, the notify started before the wait ended, and the pairs span as many
    launches as the claim says; ``judge(i, j, wk, nk)`` gives what is false of a pair by the claim's
    kind, and whether the pair is of that kind at all (if not, nothing else is judged of it)."""
    v = c["values"]
    bad = []
    launches = set()
    for wk, nk in v["handoffs"]:
        i, j = raw.key.get(tuple(wk)), raw.key.get(tuple(nk))
        why, of_kind = judge(i, j, wk, nk)
        bad += why
        if not of_kind:
            continue
        if raw.s[j] > raw.t[i] + 1000:
            bad.append(f"notify {nk} starts after wait {wk} ended")
        launches.add(int(raw.launch[i]))
    if len(launches) != v["launches"]:
        bad.append(f"hand-offs in {len(launches)} launches, the claim says {v['launches']}")
    return bad


def _handoffs(raw: Raw, c, cross_rank: bool) -> list[str]:
    def judge(i, j, wk, nk):
        if i is None or j is None or raw.kind[i] != W or raw.kind[j] != N:
            return [f"hand-off {wk} <- {nk} is not a wait and a notify"], False
        why = []
        same_rank = raw.rank[i] == raw.rank[j]
        if cross_rank == bool(same_rank) or (not cross_rank and raw.program[i] == raw.program[j]):
            why.append(f"hand-off {wk} <- {nk} does not cross {'ranks' if cross_rank else 'programs'}")
        if raw.arg(N, "peer")[j] != raw.rank[i] or raw.arg(N, "flag")[j] != raw.arg(W, "flag")[i]:
            why.append(f"notify {nk} is not on wait {wk}'s flag")
        return why, True

    return _each_handoff(raw, c, judge)


def _lane_handoffs(raw: Raw, c) -> list[str]:
    """Hand-offs between lanes of one program: an mbarrier wait (LOCAL) and the LOCAL notify of
    another lane of its program on the same barrier and phase, or a flag wait and a notify of
    another lane on that flag of the waiting rank; the notify started before the wait ended."""
    local = (raw.e["flags"].astype(np.int64) & int(schema.EventFlag.LOCAL)) != 0

    def judge(i, j, wk, nk):
        if i is None or j is None or raw.kind[i] != W or raw.kind[j] != N or local[i] != local[j]:
            return [f"hand-off {wk} <- {nk} is not a wait and its kind of notify"], False
        why = []
        if (raw.rank[i], raw.launch[i], raw.program[i]) != (raw.rank[j], raw.launch[j], raw.program[j]) or raw.lane[i] == raw.lane[j]:
            why.append(f"hand-off {wk} <- {nk} does not cross lanes of one program")
        if raw.arg(N, "flag")[j] != raw.arg(W, "flag")[i]:
            why.append(f"notify {nk} is not on wait {wk}'s barrier or flag")
        elif local[i] and raw.arg(N, "value")[j] != raw.arg(W, "expected")[i]:
            why.append(f"notify {nk} completed another phase than wait {wk} waited for")
        elif not local[i] and raw.arg(N, "peer")[j] != raw.rank[i]:
            why.append(f"notify {nk} is not to wait {wk}'s rank")
        return why, True

    return _each_handoff(raw, c, judge)


def _no_late_handoff(raw: Raw, c) -> list[str]:
    """The agents (the program that ended each launch last) waited on no notify that came late:
    for each of their completed waits, the first notify (by start) that brought its flag to what it
    waited for (to its rank, in its launch; an mbarrier's: of its program, that phase) started
    before the wait began."""
    local = schema.is_local(raw.e["flags"])
    flag_n, peer_n, val_n = raw.arg(N, "flag"), raw.arg(N, "peer"), raw.arg(N, "value")
    cmp_names = {int(k): v for k, v in schema.CMP_SYMBOLS.items()}
    bad = []
    for a in _agents(c):
        for i in np.flatnonzero(raw.sel(a[0], a[1], a[2], W, lane=a[3]) & ~raw.timeout):
            m = (raw.kind == N) & (flag_n == raw.arg(W, "flag")[i]) & (raw.launch == raw.launch[i]) & (local == local[i])
            m &= ((raw.program == raw.program[i]) & (raw.rank == raw.rank[i])) if local[i] else (peer_n == raw.rank[i])
            idx = np.flatnonzero(m)
            idx = idx[np.argsort(raw.s[idx], kind="stable")]
            cmp = "==" if local[i] else cmp_names.get(int(raw.arg(W, "cmp")[i]), ">=")
            vals = val_n[idx]
            counter = vals.size > 1 and bool((vals == vals[0]).all()) and not local[i]
            ok = _CMP[cmp](np.cumsum(vals) if counter else vals, int(raw.arg(W, "expected")[i]))
            if ok.any() and raw.s[idx[np.argmax(ok)]] > raw.s[i]:
                bad.append(f"rank {a[0]} launch {a[1]} program {a[2]}: the notify that released its wait came after it began")
                break
    if len({a[1] for a in _agents(c)}) != c["values"]["launches"]:
        bad.append(f"the agents are of {len({a[1] for a in _agents(c)})} launches, the claim says {c['values']['launches']}")
    return bad


def _holds_path(raw: Raw, c) -> list[str]:
    v = c["values"]
    a = _agents(c)[0]
    ok = 0 < v["program_share"] <= v["rank_share"] + 1e-9 <= 1 + 1e-9 and raw.sel(a[0], -1, a[2], lane=a[3]).any()
    return [] if ok else [f"shares {v} of an agent {a} that has no events"]


def _region_share(raw: Raw, c) -> list[str]:
    v = c["values"]
    if v["segments"] is None:  # (a path too long to list: its totals only)
        return []
    r = _agents(c)[0][0]
    tot = defaultdict(float)
    run = covered = 0.0
    leaf = raw.leaf()
    for p, l, a, b, *lane in v["segments"]:  # (a segment walked one lane of its program when it names one)
        m = raw.sel(r, l, p, lane=lane[0] if lane else -1)
        run += b - a
        for kind_ok, label in ((leaf & m, None), (m & (raw.kind == W), "waiting")):
            ix = np.flatnonzero(kind_ok)
            d = np.clip(raw.t[ix], a, b) - np.clip(raw.s[ix], a, b)
            for rid, x in zip(raw.region[ix].tolist(), d.tolist()):
                if x > 0:
                    tot[(label, rid)] += x
        # the time any event of the program (or lane) covers (the union of its intervals)
        ix = np.flatnonzero(m & np.isin(raw.kind, (S, W, N)))
        iv = sorted(zip(np.clip(raw.s[ix], a, b).tolist(), np.clip(raw.t[ix], a, b).tolist()))
        end = a
        for x0, x1 in iv:
            if x1 > max(x0, end):
                covered += x1 - max(x0, end)
                end = x1
    named = v["region"]
    if named == OUTSIDE:
        got = run - covered
    elif named.startswith("(in "):
        got = covered - sum(tot.values())
    elif named.startswith("waiting in '"):
        got = tot[("waiting", schema.region_id(named[len("waiting in '"):-1]))]
    else:
        got = tot[(None, schema.region_id(named))]
    share = got / max(run, 1)
    return [] if abs(share - v["share"]) <= 0.03 else [f"{100 * share:.1f}% of the path's run time in {named}, the claim "
                                                         f"says {100 * v['share']:.1f}%"]


def _without_notify(raw: Raw, c) -> list[str]:
    v = c["values"]
    if v["events"] is None:
        return []
    bad = []
    peer, flag = raw.arg(N, "peer"), raw.arg(N, "flag")
    cmp_names = {int(k): s for k, s in schema.CMP_SYMBOLS.items()}
    for wk in v["events"]:
        i = raw.key[tuple(wk)]
        m = ((raw.kind == N) & (raw.rank == raw.arg(W, "peer")[i]) & (peer == raw.rank[i]) & (flag == raw.arg(W, "flag")[i])
             & (raw.launch == raw.launch[i]) & (raw.s <= raw.t[i]))
        vals = raw.arg(N, "value")[m][np.argsort(raw.s[m], kind="stable")]
        if _reaches(vals, int(raw.arg(W, "expected")[i]), cmp_names.get(int(raw.arg(W, "cmp")[i]), ">=")):
            bad.append(f"wait {wk} has notifies in the capture that satisfy it ({vals.tolist()[:8]})")
    return bad[:5] + ([f"... and {len(bad) - 5} more"] if len(bad) > 5 else [])


def _release_untraced(raw: Raw, c) -> list[str]:
    """mbarrier waits said to be on a barrier whose releases were not recorded: each is a LOCAL
    wait, and its program recorded no LOCAL notify on that barrier in that launch."""
    v = c["values"]
    if v["events"] is None:
        return []
    local = schema.is_local(raw.e["flags"])
    bad = []
    for wk in v["events"]:
        i = raw.key[tuple(wk)]
        m = ((raw.kind == N) & local & (raw.rank == raw.rank[i]) & (raw.launch == raw.launch[i])
             & (raw.program == raw.program[i]) & (raw.arg(N, "flag") == raw.arg(W, "flag")[i]))
        if not local[i] or m.any():
            bad.append(f"wait {wk}: local {bool(local[i])}, {int(m.sum())} releases of its barrier recorded")
    return bad[:5]


def _notify_untraced(raw: Raw, c) -> list[str]:
    """Flag waits said to have senders that recorded no notify in that launch: each is a flag
    wait, its peer ran the launch (recorded events in it) and recorded no flag notify there."""
    local = schema.is_local(raw.e["flags"])
    bad = []
    for wk in c["values"]["events"] or ():
        i = raw.key[tuple(wk)]
        peer = raw.arg(W, "peer")[i]
        ran = (raw.rank == peer) & (raw.launch == raw.launch[i])
        sent = int((ran & (raw.kind == N) & ~local).sum())
        if raw.kind[i] != W or local[i] or not ran.any() or sent:
            bad.append(f"wait {wk}: flag wait {raw.kind[i] == W and not local[i]}, peer {peer} ran the launch "
                       f"{bool(ran.any())}, {sent} flag notifies")
    return bad[:5]


def _notify_on_flag(raw: Raw, c) -> list[str]:
    """Waits said to have notifies on their flag (not matched to one): each has one before its end."""
    v = c["values"]
    if v["events"] is None:
        return []
    peer, flag = raw.arg(N, "peer"), raw.arg(N, "flag")
    bad = []
    for wk in v["events"]:
        i = raw.key[tuple(wk)]
        m = ((raw.kind == N) & (raw.rank == raw.arg(W, "peer")[i]) & (peer == raw.rank[i]) & (flag == raw.arg(W, "flag")[i])
             & (raw.launch == raw.launch[i]) & (raw.s <= raw.t[i]))
        if not m.any():
            bad.append(f"wait {wk} has no notify on its flag before it ended")
    return bad[:5]


def _exposed_communication(raw: Raw, c) -> list[str]:
    """The rank's extent (first event to last) over the launches measured is the one stated, and the
    exposed part is within it (and as large a share as the text says)."""
    v = c["values"]
    r = _agents(c)[0][0]
    kern = 0
    for l in v["launches"]:
        m = (raw.rank == r) & (raw.launch == l)
        if m.any():
            kern += int(raw.t[m].max() - raw.s[m].min())
    bad = []
    if not close(kern, v["extent_ns"], rel=0.01, abs_ns=64 * len(v["launches"])):
        bad.append(f"rank {r}'s extent over those launches is {kern} ns, the claim says {v['extent_ns']:.0f}")
    if not 0 < v["exposed_ns"] <= kern + 64:
        bad.append(f"{v['exposed_ns']:.0f} ns exposed of an extent of {kern} ns")
    return bad


def _silent_programs(raw: Raw, c) -> list[str]:
    """That many programs of the launch's grid recorded no event."""
    v = c["values"]
    r, l = _agents(c)[0][:2]
    ln = next(x for x in raw.capture.ranks[r].launches if x.index == l)
    grid = int(np.prod(ln.grid))
    recorded = np.unique(raw.program[(raw.rank == r) & (raw.launch == l)]).size
    if grid != v["n_programs"] or grid - recorded != v["n_silent"]:
        return [f"rank {r} launch {l}: {grid} programs, {grid - recorded} silent; the claim says {v['n_programs']}, "
                f"{v['n_silent']}"]
    return []


def _slow_signals(raw: Raw, c) -> list[str]:
    v = c["values"]
    m = (raw.kind == W) & (raw.rank == v["consumer"]) & (raw.arg(W, "peer") == v["producer"])
    return [] if int(m.sum()) >= v["n_waits"] and v["median_ns"] > v["calibrated_ns"] else [
        f"{int(m.sum())} waits of rank {v['consumer']} on rank {v['producer']}, the claim counts {v['n_waits']}"]


def _lane_holdup(raw: Raw, c) -> list[str]:
    """In the named program, the other lanes' mbarrier waits released by the named lane (rule 3,
    recomputed: the LOCAL notify of the same program, barrier and phase, the last to start), less
    the time the lane was waiting itself during each, sum to the stated time; so does the named
    waiter's part on the named barrier; and the waiter's own time not waiting is the one stated."""
    v = c["values"]
    r, l, p, h = _agents(c)[0]
    local = (raw.e["flags"].astype(np.int64) & int(schema.EventFlag.LOCAL)) != 0
    prog = raw.sel(r, l, p) & local
    flag_w, exp_w, flag_n, val_n = raw.arg(W, "flag"), raw.arg(W, "expected"), raw.arg(N, "flag"), raw.arg(N, "value")
    own = [(int(raw.s[i]), int(raw.t[i])) for i in np.flatnonzero(raw.sel(r, l, p, W, lane=h))]
    total = part = 0.0
    for i in np.flatnonzero(prog & (raw.kind == W) & ~raw.timeout):
        cand = np.flatnonzero(prog & (raw.kind == N) & (flag_n == flag_w[i]) & (val_n == exp_w[i]))
        if cand.size == 0 or exp_w[i] < 0:
            continue
        j = cand[np.argmax(raw.s[cand])]
        if raw.lane[j] != h:
            continue
        a, b = int(raw.s[i]), int(raw.t[i])
        x = max(0, (b - a) - sum(max(0, min(b, y1) - max(a, y0)) for y0, y1 in own))
        total += x
        if raw.lane[i] == v["waiter_lane"] and raw.region[i] == v["barrier"]:
            part += x
    bad = []
    if not close(total, v["worst_ns"]):
        bad.append(f"lane {h} of rank {r} program {p} held the others {total:.0f} ns, the claim says {v['worst_ns']:.0f}")
    if not close(part, v["waiter_ns"]):
        bad.append(f"lane {v['waiter_lane']} waited {part:.0f} ns of it on that barrier, the claim says {v['waiter_ns']:.0f}")
    m = raw.sel(r, l, p, lane=v["waiter_lane"])
    w = m & (raw.kind == W)
    work = float(raw.t[m].max() - raw.s[m].min() - (raw.t[w] - raw.s[w]).sum()) if m.any() else 0.0
    if not close(work, v["waiter_work_ns"]):
        bad.append(f"lane {v['waiter_lane']} worked {work:.0f} ns itself, the claim says {v['waiter_work_ns']:.0f}")
    if bool(v["idle"]) != (part > work):
        bad.append(f"the waiter waited {part:.0f} ns on it and worked {work:.0f} ns: 'idle' is not {v['idle']}")
    return bad


def _busy_median(raw: Raw, l: int) -> float:
    if l in raw.whole:
        return raw.whole[l][1]
    return _busy_of(raw.e[raw.launch == l])


def _busy_of(e: np.ndarray) -> float:
    """The median over a launch's agents (rank, program, lane) of their first event to their last
    less their waits."""
    lane = e["lane"] if "lane" in (e.dtype.names or ()) else np.zeros(e.size, np.int64)
    busy = []
    for a in set(zip(e["rank"].tolist(), e["program"].tolist(), lane.tolist())):
        m = (e["rank"] == a[0]) & (e["program"] == a[1]) & (lane == a[2])
        w = m & (e["kind"] == W)
        busy.append(max(float(e["end_ns"][m].max() - e["start_ns"][m].min() - (e["end_ns"][w] - e["start_ns"][w]).sum()), 0.0))
    return float(np.median(busy)) if busy else 0.0


def _warmup_slower(raw: Raw, c) -> list[str]:
    """A launch left out as warm-up: it lasted (first event to last, every rank), or its median
    program was busy (not waiting), the stated time, its kernel's later launches the stated median,
    and the first at least ``factor`` times that."""
    v = c["values"]
    of = _launch_span if v["measure"] == "duration" else _busy_median
    got = of(raw, v["launch"])
    med = float(np.median([of(raw, l) for l in v["later"]]))
    bad = []
    if not close(got, v["value_ns"], rel=0.01, abs_ns=64):
        bad.append(f"launch {v['launch']}: {v['measure']} {got:.0f} ns, the claim says {v['value_ns']:.0f}")
    if not close(med, v["median_ns"], rel=0.01, abs_ns=64):
        bad.append(f"its later launches: {v['measure']} {med:.0f} ns (median), the claim says {v['median_ns']:.0f}")
    if not got >= v["factor"] * med - 64:
        bad.append(f"launch {v['launch']} ({got:.0f} ns) is not {v['factor']}x its later launches' median ({med:.0f} ns)")
    if any(l <= v["launch"] for l in v["later"]):
        bad.append(f"launches {v['later']} are not all later than {v['launch']}")
    return bad


CHECKS = {
    "held_back": _held_back, "started_late": _started_late, "waited_for": _waited_for,
    "program_started_late": _program_started_late, "worked_longer": _worked_longer, "extra_in_region": _extra_in_region,
    "ranks_worked_longer": _ranks_worked_longer, "difference_in_region": _difference_in_region,
    "never_sent": _never_sent, "gave_up": _gave_up, "stuck_waiting": _stuck_waiting, "not_waiting": _not_waiting,
    "saving": _saving, "not_shorter": _not_shorter, "not_shorter_balanced": _not_shorter_balanced, "waiting_removed": _waiting_removed,
    "crosses_ranks": lambda raw, c: _handoffs(raw, c, True), "crosses_programs": lambda raw, c: _handoffs(raw, c, False),
    "crosses_lanes": _lane_handoffs,
    "holds_path": _holds_path, "region_share": _region_share, "without_notify": _without_notify,
    "slow_signals": _slow_signals, "notify_on_flag": _notify_on_flag, "release_untraced": _release_untraced,
    "notify_untraced": _notify_untraced,
    "exposed_communication": _exposed_communication, "silent_programs": _silent_programs,
    "lane_holdup": _lane_holdup, "warmup_slower": _warmup_slower, "slow_rounds": _slow_rounds,
    "no_late_handoff": _no_late_handoff,
}
#: Numbers a claim states as amounts: none of them may be zero (a claim with nothing behind it is not written).
AMOUNTS = ("magnitude_ns", "excess_ns", "saving_ns", "waiting_ns", "waited_ns", "worst_ns")


def check(raw: Raw, claim: dict) -> list[str]:
    """What is false in ``claim`` (a ``Claim.to_dict``) about the events of ``raw``."""
    if claim["values"].get("n_agents", len(claim["agents"])) != len(claim["agents"]):
        return [f"a claim about {claim['values']['n_agents']} agents lists {len(claim['agents'])}: this test's captures "
                f"are small enough to list them all"]
    fn = CHECKS.get(claim["kind"])
    if fn is None:
        return [f"no check for claims of kind {claim['kind']!r}"]
    bad = [f"{k} = {claim['values'][k]} states nothing" for k in AMOUNTS
           if k in claim["values"] and not claim["kind"].startswith("not_shorter") and not (claim["values"][k] or 0) > 0]
    return bad + fn(raw, claim)
