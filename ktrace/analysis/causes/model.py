"""The causal model of a capture: why each wait waited, the root causes, and what each costs.

Two questions, two tools.

**Why did this wait wait?** (:func:`wait_causes`) A wait's time is split in three:

``producer_late_ns``
    the producer's notify had not started when the wait began (``stalls.waits``), split by what
    the producer's workgroup was doing meanwhile: not started yet (``late_not_started_ns``: its
    rank launched late), itself waiting (``late_waiting_ns``), working in a region
    (``late_in_region_ns``) or in no region at all (``late_outside_ns``: time between regions, a
    notify held back); a wait that gave up is a missing signal (``late_missing_ns``). When the producer was itself waiting, the chain is followed across ranks
    to the wait that was not (``root_rank``, ``root_program``, ``root``: what that producer
    was doing).
``link_ns``
    the signal's trip, up to the one-way latency the capture's calibration measured between the
    two ranks (half the smallest flag round trip, ``ClockModel.ranks[r].rtt_min_ns``; all of it for
    a pair the calibration does not cover, such as a rank signalling itself);
``unexplained_ns``
    what nobody explains: signal latency beyond that, and waits whose notify was not captured.

**What would it save?** (:func:`root_causes`) Root causes are found in the events — a notify
that never came (a hang), a rank that started late, notifies held back after their producer was
ready, workgroups with more work than their peers, a link slower than calibrated — and each is
priced by replaying the capture without it. The replay is the notify -> wait dependency graph of
each launch: every workgroup runs its events in order, keeping each stretch between two waits
as long as it was (less what the cause removes), and each wait ends when its notify arrives
(the notify's new time plus the signal latency seen) or, if that is earlier than the wait's
start, after the time a wait on a flag already set takes. A launch lasts from its first
workgroup's start to its last workgroup's end; the saving is the difference, summed over
launches. Consequences (waits that gave up after a hang, workgroups that only waited, the
waiting on other ranks) disappear with their cause in the replay, so they are reported under
it instead of on their own.

Replaying the capture as recorded reproduces every wait's end exactly (tested); the model
keeps what it cannot see fixed: programs start when they started (no SM contention), and
compute is not slowed or sped up by communication.

Everything is vectorised: the replay iterates the whole set of launches together, one pass per
cross-workgroup hop of the longest dependency chain (a segmented running maximum within each
workgroup), never per event or per launch. Causes present in many launches are priced on an
evenly spaced sample of them (``CauseConfig.max_replay_launches``) and scaled; the count of
launches with the cause is exact.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from ... import keys, pairing
from ...captures import launch_count
from ...keys import dense_codes, group_median, group_min, lexorder
from ...schema import EventKind, arg_column, is_local, is_timeout
from ...text import ranges_text
from ..document import Claim  # (a cause's claims are the report document's)
from ..intervals import last_at_or_before, segmented_cummax, segmented_cumsum
from ..names import OUTSIDE
from ..spans import coverage, covered, workgroup_starts
from ..stalls import kernel_time, latest_flag_notify, workgroup_extent
from ..stalls import waits as _waits
from ..trace import Sparse, Trace, fill_table, lane_view

log = logging.getLogger("ktrace")

#: Wait kinds in the replay model (_FREE: an mbarrier's free pass, released by nothing: its time
#: is its own).
_PAIRED, _EXTERNAL, _MISSING, _CUT, _FREE = 0, 1, 2, 3, 4
#: A release time that never binds (far below any time relative to the capture's start).
_NEVER = -(1 << 60)


@dataclass(frozen=True)
class CauseConfig:
    """What counts as a root cause, and how causes are priced.

    Attributes:
        min_late_ns: a notify held at least this long beyond the other ranks' holds is late.
        min_skew_ns: a rank that starts a launch at least this long after the first rank is a
            late-launch candidate.
        slow_link_factor: a producer -> consumer link is slow when its median signal latency is
            this many times the calibrated one-way latency (and ``min_late_ns`` more).
        min_share: a cause whose replay saves at least this share of the capture's kernel time
            (launch durations summed) is a warning; smaller ones are reported as information.
        max_replay_launches: a cause is priced on at most this many of its launches (evenly
            spaced), the saving scaled to all of them.
        max_iterations: cap on replay passes (one per hop of the longest dependency chain).
    """

    min_late_ns: float = 1_000.0
    min_skew_ns: float = 1_000.0
    slow_link_factor: float = 2.0
    min_share: float = 0.05
    max_replay_launches: int = 64
    max_iterations: int = 1024

    def __post_init__(self):
        if not (self.min_late_ns >= 0 and self.min_skew_ns >= 0):
            raise ValueError(f"CauseConfig thresholds must be >= 0: {self}")
        if not self.slow_link_factor >= 1:
            raise ValueError(f"CauseConfig.slow_link_factor must be >= 1, got {self.slow_link_factor}")
        if not 0 <= self.min_share < 1:
            raise ValueError(f"CauseConfig.min_share must be in [0, 1), got {self.min_share}")
        if self.max_replay_launches < 1 or self.max_iterations < 1:
            raise ValueError(f"CauseConfig.max_replay_launches and max_iterations must be >= 1: {self}")


# ---------------------------------------------------------------------------------------------
# small vectorised helpers
# ---------------------------------------------------------------------------------------------


def one_way_per_rank(trace: Trace) -> tuple[np.ndarray, int]:
    """Half the smallest calibrated round trip of each rank with the reference rank (NaN unknown),
    indexed by rank up to the largest calibrated one (never sized by a world size a file claims),
    and the reference rank."""
    model = trace.clock
    ranks = getattr(model, "ranks", None) or {}
    ref = int(getattr(model, "reference_rank", 0))
    known = [int(r) for r in ranks if 0 <= int(r) < max(int(trace.world_size), 1)]
    ow = np.full(max(known, default=0) + 1, np.nan)
    for r, rc in ranks.items():
        v = float(getattr(rc, "rtt_min_ns", math.nan))
        if int(r) in known and int(r) != ref and math.isfinite(v) and v > 0:
            ow[int(r)] = v / 2
    return ow, ref


def one_way_pairs(trace: Trace, producer, consumer) -> np.ndarray:
    """Calibrated one-way flag latency (ns, NaN unknown) of each (producer, consumer) pair given.

    The calibration measures round trips between the reference rank and each other rank; half
    the smallest is the one-way latency of that pair. Between two ranks neither of which is the
    reference, the mean of their two one-way latencies to the reference is used. Per pair, from
    one value per rank: nothing is sized by the number of ranks squared (a long column is looked
    up in a table of the combinations its ranges hold, at most :data:`_PAIR_TABLE`).
    """
    ow, ref = one_way_per_rank(trace)
    p = np.asarray(producer, np.int64)
    c = np.asarray(consumer, np.int64)
    if p.size >= keys.LARGE and p.size and p.ndim == 1 and p.shape == c.shape:
        # (a value per wait: looked up in a table of the few (producer, consumer) combinations
        # the columns' ranges hold; two temporaries of the waits' length instead of a dozen,
        # whose fresh pages cost more than the arithmetic)
        p0, c0 = int(p.min()), int(c.min())
        n_p, n_c = int(p.max()) - p0 + 1, int(c.max()) - c0 + 1
        if n_p * n_c <= _PAIR_TABLE:
            pp, cc = np.divmod(np.arange(n_p * n_c, dtype=np.int64), n_c)
            table = _one_way(ow, ref, pp + p0, cc + c0)
            key = p - p0
            key *= n_c
            key += c
            key -= c0
            return table[key]
    return _one_way(ow, ref, p, c)


#: Most (producer, consumer) combinations :func:`one_way_pairs` tabulates for a long column.
_PAIR_TABLE = 1 << 16


def _one_way(ow: np.ndarray, ref: int, p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """:func:`one_way_pairs` from the per-rank latencies ``ow`` and the reference rank ``ref``."""
    def at(r):
        inside = (r >= 0) & (r < ow.size)
        return np.where(inside, ow[np.clip(r, 0, ow.size - 1)], np.nan)

    op, oc = at(p), at(c)
    out = np.where(p == ref, oc, np.where(c == ref, op, 0.5 * (op + oc)))
    return np.where((p == c) | (p < 0) | (c < 0), np.nan, out)


def one_way_latency_ns(trace: Trace) -> np.ndarray:
    """Calibrated one-way flag latency between every pair of calibrated ranks (``(R, R)`` ns, NaN
    unknown; R: one more than the largest calibrated rank): :func:`one_way_pairs` as a table."""
    R = one_way_per_rank(trace)[0].size
    p, c = np.divmod(np.arange(R * R, dtype=np.int64), R)
    return one_way_pairs(trace, p, c).reshape(R, R)


# ---------------------------------------------------------------------------------------------
# the replay model
# ---------------------------------------------------------------------------------------------


@dataclass
class _Model:
    """The notify -> wait dependency graph of (some launches of) a capture, as flat arrays.

    Times are ns relative to the capture's first event. Waits are by workgroup, then time
    (``w_order`` maps them to the waits table's event order); notifies are in event order.
    """

    # per workgroup
    wg_base: np.ndarray  # start
    wg_tail: np.ndarray  # from the end of its last wait (or its start) to its end
    wg_launch: np.ndarray  # dense launch code
    wg_rank: np.ndarray
    wg_last_wait: np.ndarray  # index of its last wait, -1 if none
    wg_id: np.ndarray  # the id in the trace of its program's workgroup (what a cause changes: every lane of it)
    wg_agent: np.ndarray  # its own id: the program's workgroup id, or with lanes its lane's in ``lane_view``
    # per wait
    w_wg: np.ndarray  # index into the workgroup arrays
    w_gap: np.ndarray  # from the previous wait's end (or the workgroup's start) to this start
    w_dur: np.ndarray  # observed duration
    w_d0: np.ndarray  # duration when its flag is already set
    w_kind: np.ndarray
    w_pair: np.ndarray  # index of the releasing notify (-1)
    w_late_pair: np.ndarray  # timed-out waits: the notify that came after (-1)
    w_lat: np.ndarray  # release latency: from the notify's start to the wait's end
    w_lat_typ: np.ndarray  # the pair of ranks' typical latency
    w_start: np.ndarray
    w_end: np.ndarray
    w_peer: np.ndarray  # producer rank
    w_row: np.ndarray  # event row
    w_order: np.ndarray  # the wait's index in the waits table (event order)
    # per notify
    n_wg: np.ndarray
    n_prev: np.ndarray  # index of the wait before it in its workgroup (-1)
    n_off: np.ndarray  # from that wait's end (or the workgroup's start) to its start
    n_next: np.ndarray  # index of the wait after it in its workgroup (-1: none, its time goes to the tail)
    n_row: np.ndarray
    # per launch (dense code)
    launch_ids: np.ndarray  # launch index per code
    obs_makespan: np.ndarray

    @property
    def n_waits(self) -> int:
        return int(self.w_wg.size)

    def take(self, launch_codes: np.ndarray) -> "_Model":
        """The model of some launches only (a notify of another launch releasing one of their
        waits is kept as a fixed release)."""
        keep_l = np.zeros(self.launch_ids.size, bool)
        keep_l[launch_codes] = True
        kw = keep_l[self.wg_launch]
        if kw.all():
            return self
        wg_new = np.cumsum(kw) - 1
        ww = kw[self.w_wg]
        wn = kw[self.n_wg]
        w_new = np.cumsum(ww) - 1
        n_new = np.cumsum(wn) - 1

        def remap(idx, keep, new):
            if keep.size == 0:  # (nothing of that kind in the model: every index is -1)
                return np.full(idx.shape, -1, np.int64), idx < 0
            ok = (idx >= 0) & keep[np.maximum(idx, 0)]
            return np.where(ok, new[np.maximum(idx, 0)], -1), ok | (idx < 0)

        pair, pair_in = remap(self.w_pair[ww], wn, n_new)
        late, _ = remap(self.w_late_pair[ww], wn, n_new)
        kind = self.w_kind[ww].copy()
        kind[~pair_in & (kind == _PAIRED)] = _EXTERNAL  # released from outside the subset: fixed
        lc_new = np.cumsum(keep_l) - 1
        return _Model(
            wg_base=self.wg_base[kw], wg_tail=self.wg_tail[kw], wg_launch=lc_new[self.wg_launch[kw]],
            wg_rank=self.wg_rank[kw], wg_last_wait=remap(self.wg_last_wait[kw], ww, w_new)[0], wg_id=self.wg_id[kw],
            wg_agent=self.wg_agent[kw],
            w_wg=wg_new[self.w_wg[ww]], w_gap=self.w_gap[ww], w_dur=self.w_dur[ww], w_d0=self.w_d0[ww], w_kind=kind,
            w_pair=pair, w_late_pair=late, w_lat=self.w_lat[ww], w_lat_typ=self.w_lat_typ[ww],
            w_start=self.w_start[ww], w_end=self.w_end[ww], w_peer=self.w_peer[ww], w_row=self.w_row[ww],
            w_order=self.w_order[ww],
            n_wg=wg_new[self.n_wg[wn]], n_prev=remap(self.n_prev[wn], ww, w_new)[0], n_off=self.n_off[wn],
            n_next=remap(self.n_next[wn], ww, w_new)[0], n_row=self.n_row[wn],
            launch_ids=self.launch_ids[keep_l], obs_makespan=self.obs_makespan[keep_l],
        )


@dataclass
class Changes:
    """What a replay changes (all optional; arrays over the model's workgroups, waits, notifies).

    Attributes:
        shift: per workgroup, how much earlier it starts.
        scale: per workgroup, factor on its own time (gaps between waits, notify offsets, tail).
        hold: per notify, time removed right before it (it and everything after it in its
            workgroup move earlier by that much).
        latency: per wait, a new release latency (NaN: unchanged).
        release_timeouts: timed-out waits are released: never-signalled ones when they start,
            cut-short ones by the notify that came after (only waits where this is True).
        added_gap: per wait, time added right before it (a delay injected after the notify or
            wait before it: ``analysis.verify``); a negative ``hold`` adds time before a notify.
        added_tail: per workgroup, time added after its last wait and notify.
    """

    shift: np.ndarray | None = None
    scale: np.ndarray | None = None
    hold: np.ndarray | None = None
    latency: np.ndarray | None = None
    release_timeouts: np.ndarray | None = None
    added_gap: np.ndarray | None = None
    added_tail: np.ndarray | None = None


@dataclass
class ReplayResult:
    makespan: np.ndarray  # per launch code of the model
    wait_end: np.ndarray  # per wait
    wait_dur: np.ndarray  # per wait
    iterations: int
    converged: bool


def replay_model(trace: Trace, launches=None) -> _Model:
    """The replay model of the whole capture (cached), or of some launches (``launches``: launch
    indices; a notify of another launch that released one of their waits is a fixed release)."""
    if launches is None:
        return trace.cached(("replay_model",), lambda: _build_model(trace))
    return _build_model(trace, np.unique(np.asarray(launches, np.int64)))


def launch_makespans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """``(launch indices, durations)``: each launch from its first workgroup's start to its last
    workgroup's end over every rank (cached)."""
    def build():
        if trace.n_workgroups == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        # from each rank's extent of the launch (a few per launch: not a pass over every workgroup)
        kt = kernel_time(trace)
        lcode, lids = dense_codes(kt["launch"])
        lo = np.full(lids.size, np.iinfo(np.int64).max)
        hi = np.full(lids.size, np.iinfo(np.int64).min)
        np.minimum.at(lo, lcode, kt["start_ns"])
        np.maximum.at(hi, lcode, kt["end_ns"])
        return lids.astype(np.int64), (hi - lo).astype(np.int64)

    return trace.cached(("launch_makespans",), build)


def saw_signal(trace: Trace) -> np.ndarray:
    """Per wait (the waits table's order), whether it was spinning when its signal arrived, so
    that its end is its notify's start plus the signal's trip: its producer was late, or it spun
    at least the pair's calibrated round trip (twice the one-way latency: a read of a flag already
    set takes less; such a wait says nothing of the trip, however slow its read) and began while
    its signal could still be on its way (:func:`_signal_in_flight`). Cached."""
    def build():
        w = _waits(trace)
        if w.size == 0:
            return np.zeros(0, bool)
        late = np.nan_to_num(w["producer_late_ns"]) > 0
        paired = w["notify_row"] >= 0
        rank, peer = w["rank"].astype(np.int64), w["peer"].astype(np.int64)
        cal = one_way_pairs(trace, peer, rank)
        spun = paired & ~late & (w["wait_ns"] >= 2 * np.nan_to_num(cal, nan=np.inf))
        out = paired & late
        out[spun] = _signal_in_flight(w, np.flatnonzero(spun), rank, peer, cal)
        return out

    return trace.cached(("saw_signal",), build)


def _signal_in_flight(w, idx: np.ndarray, rank: np.ndarray, peer: np.ndarray, cal: np.ndarray) -> np.ndarray:
    """Of the waits ``idx`` whose notify started before they began, those that began less than
    their pair's longest possible trip after it: the signal may still have been on its way.

    Every completed wait of a (producer, consumer) pair found its signal arrived by its end, so
    the pair's trip takes at most the shortest notify-to-end of them (the clocks' offset between
    the two ranks cancels: it is in both times); never less than the calibrated round trip. A
    wait that began later than that after its notify found its flag set, however long its read
    then took: its notify-to-end is no signal's trip (a rank that started a launch 88 µs after
    its peer notified, its read taking 4 µs, would make a 92 µs link of a 1.4 µs one).
    """
    if idx.size == 0:
        return np.zeros(0, bool)
    done = np.flatnonzero((w["notify_row"] >= 0) & ~w["timed_out"] & (peer >= 0))  # (an mbarrier's waits name no peer)
    R = int(max(rank.max(initial=0), peer.max(initial=0))) + 1
    key = np.clip(peer, 0, R - 1) * R + np.clip(rank, 0, R - 1)  # (the pairs that occur, not a table of every pair)
    pairs, inv = np.unique(key[done], return_inverse=True)
    trip = (w["end_ns"][done] - w["notify_start_ns"][done]).astype(np.float64)
    longest = group_min(inv.reshape(-1), trip, pairs.size)
    at = np.clip(np.searchsorted(pairs, key[idx]), 0, max(pairs.size - 1, 0))
    seen = np.where(pairs[at] == key[idx], longest[at], np.nan) if pairs.size else np.full(idx.size, np.nan)
    bound = np.fmax(seen, 2 * cal[idx])  # (NaN: no bound from the pair)
    early = (w["start_ns"][idx] - w["notify_start_ns"][idx]).astype(np.float64)
    return ~(early >= bound)


#: A pair's typical latency is its waits' median when at least this many saw their signal arrive.
_MIN_SEEN = 3


def _typical_latency(trace: Trace, rank: np.ndarray, peer: np.ndarray, lat: np.ndarray, late: np.ndarray) -> np.ndarray:
    """Per wait, its (producer, consumer) pair's median observed signal latency over the waits that
    saw it arrive (``late``; the latency is only seen then), when at least :data:`_MIN_SEEN` did;
    else the calibrated one-way latency, or the median over all pairs. Per pair that occurs (no
    table of every pair)."""
    peer = np.where(peer < 0, rank, peer)  # (an mbarrier wait names no peer: its release is its own rank's)
    R = int(max(rank.max(initial=0), peer.max(initial=0))) + 1
    pairs, inv = np.unique(np.clip(peer, 0, R - 1).astype(np.int64) * R + np.clip(rank, 0, R - 1), return_inverse=True)
    inv = inv.reshape(-1)
    sel = late & np.isfinite(lat)
    med = np.full(pairs.size, np.nan)
    if sel.any():
        med = group_median(inv[sel], lat[sel], pairs.size)
        med[np.bincount(inv[sel], minlength=pairs.size) < _MIN_SEEN] = np.nan
    glob = float(np.median(lat[sel])) if sel.any() else math.nan
    cal = one_way_pairs(trace, pairs // R, pairs % R)
    fill = np.where(np.isfinite(med), med, np.where(np.isfinite(cal), cal, glob))
    fill = np.where(np.isfinite(fill), fill, 0.0)
    return fill[inv]


def _build_model(trace: Trace, launches: np.ndarray | None = None) -> _Model:
    W_, N_ = EventKind.WAIT, EventKind.NOTIFY
    origin = trace.origin_ns
    w = _waits(trace)
    wr_all = w["row"]
    nr_all = trace.rows_of(N_)
    # the replay's workgroups are agents: a program, or each lane of one (its lanes run at once,
    # each through its own waits)
    v = lane_view(trace)
    ws, we = workgroup_extent(v)
    if launches is None:
        wg_ids = np.arange(v.n_workgroups, dtype=np.int64)
        wg_of = v.wg
        wpos = np.arange(wr_all.size)
        npos = np.arange(nr_all.size)
    else:  # only these launches' workgroups, waits and notifies, renumbered
        keep = np.isin(v.wg_keys[:, 1], launches)
        wg_ids = np.flatnonzero(keep)
        new_id = np.cumsum(keep) - 1
        wpos = np.flatnonzero(keep[v.wg[wr_all]])
        npos = np.flatnonzero(keep[v.wg[nr_all]])
        wg_of = None
    wr, nr = wr_all[wpos], nr_all[npos]
    ws = ws[wg_ids] - origin
    we = we[wg_ids] - origin
    W = wg_ids.size
    nw = wr.size
    w_wg = v.wg[wr] if wg_of is not None else new_id[v.wg[wr]]
    n_wg = v.wg[nr] if wg_of is not None else new_id[v.wg[nr]]
    # the waits of a workgroup in time order (their record order in a real capture; a table may
    # order a zero-length wait before one that ends with it)
    w_s = trace.at(W_, "start_ns")[wpos] - origin
    w_e = trace.at(W_, "end_ns")[wpos] - origin
    wo = lexorder(w_wg, w_s, w_e) if nw else np.zeros(0, np.int64)
    w_wg, w_s, w_e = w_wg[wo], w_s[wo], w_e[wo]
    wo = wpos[wo]  # positions in the waits table
    n_s = trace.at(N_, "start_ns")[npos] - origin
    same_prev = np.r_[False, w_wg[1:] == w_wg[:-1]] if nw else np.zeros(0, bool)
    if nw:  # one program's waits follow each other (a table whose waits overlap is read that way)
        w_e = segmented_cummax(w_e, w_wg)
        w_s = np.maximum(w_s, np.where(same_prev, np.r_[w_s[0], w_e[:-1]], w_s))
    anchor = np.where(same_prev, np.r_[0, w_e[:-1]] if nw else w_e, ws[w_wg])
    gap = np.maximum(w_s - anchor, 0)
    dur = np.maximum(w_e - w_s, 0)
    # each notify between the wait that ended last before it and the next one of its workgroup
    n_prev = last_at_or_before(w_wg, w_e, n_wg, n_s)
    first_w = np.full(W, -1, np.int64)
    if nw:
        first_w[w_wg[::-1]] = np.arange(nw)[::-1]
    nxt = np.where(n_prev >= 0, n_prev + 1, first_w[n_wg] if nr.size else -1)
    nxtc = np.clip(nxt, 0, max(nw - 1, 0))
    n_next = np.where((nxt >= 0) & (nxt < nw) & (w_wg[nxtc] == n_wg) if nw else np.zeros(nr.size, bool), nxt, -1)
    n_anchor = np.where(n_prev >= 0, w_e[np.maximum(n_prev, 0)] if nw else 0, ws[n_wg])
    n_off = np.maximum(n_s - n_anchor, 0)
    last_wait = np.full(W, -1, np.int64)
    if nw:
        last_wait[w_wg] = np.arange(nw)  # the last assignment wins: the workgroup's last wait
    tail_anchor = np.where(last_wait >= 0, w_e[np.maximum(last_wait, 0)] if nw else 0, ws)
    tail = np.maximum(we - tail_anchor, 0)
    # releases (the waits table's columns, put in the model's order)
    n_row = w["notify_row"][wo]
    pair = np.searchsorted(nr, n_row) if nw else np.zeros(0, np.int64)
    pair = np.where((n_row >= 0) & (pair < nr.size) & (nr[np.minimum(pair, max(nr.size - 1, 0))] == n_row)
                    if nr.size else np.zeros(nw, bool), pair, -1)
    external = (n_row >= 0) & (pair < 0)  # released by a notify of a launch not in the model
    # a completed wait the pairing did not match is released by the last notify on its flag
    # that came before its end (a counter's last increment), when one was captured: held fixed,
    # it would make any delay of that producer look free
    to_ = w["timed_out"][wo]
    guess = np.flatnonzero((n_row < 0) & ~to_)
    if guess.size and nr.size:
        g_row = latest_flag_notify(trace, wo[guess])
        gp = np.searchsorted(nr, g_row)
        hit = (g_row >= 0) & (gp < nr.size) & (nr[np.minimum(gp, nr.size - 1)] == g_row)
        n_row = n_row.copy()
        n_row[guess[hit]] = g_row[hit]
        pair[guess[hit]] = gp[hit]
    to = w["timed_out"][wo]
    late_ns = np.nan_to_num(w["producer_late_ns"])[wo]
    # a notify that starts after the wait it released ended (the clocks disagree by more than
    # the pair's latency) cannot be replayed as its cause: that wait keeps its observed end. Every
    # other edge goes forward in time, so the graph has no cycle.
    if nw and nr.size:
        backwards = (pair >= 0) & (n_s[np.maximum(pair, 0)] > w_e)
        pair[backwards] = -1
        external |= backwards
    kind = np.full(nw, _EXTERNAL, np.int8)
    kind[pair >= 0] = _PAIRED
    # an mbarrier's free pass is released by the barrier's initialisation: not pinned where it was
    # seen (that would hold its lane in place), its time its own
    free = pairing.free_pass(is_local(trace.column("flags")[wr_all[wo]]), w["expected"][wo]) & (n_row < 0) & ~to_
    kind[free] = _FREE
    external &= ~free
    late_pair = np.full(nw, -1, np.int64)
    if to.any():
        lp = _late_pairs(trace)[wo]  # rows of the notify that came after
        late_pair = np.searchsorted(nr, lp)
        late_pair = np.where((lp >= 0) & (late_pair < nr.size) & (nr[np.minimum(late_pair, max(nr.size - 1, 0))] == lp)
                             if nr.size else np.zeros(nw, bool), late_pair, -1)
        kind[to & (lp >= 0)] = _CUT
        kind[to & (lp < 0)] = _MISSING
        late_pair[to & (lp >= 0) & (late_pair < 0)] = -1
    n_start_all = trace.at(N_, "start_ns")
    n_start_of = np.where(n_row >= 0, n_start_all[np.maximum(np.searchsorted(nr_all, n_row), 0)] - origin
                          if nr_all.size else 0, 0)
    if guess.size:  # (their producer's lateness, as the waits table has it for matched ones)
        late_ns = late_ns.copy()
        gl = guess[n_row[guess] >= 0]
        late_ns[gl] = np.maximum(n_start_of[gl] - w_s[gl], 0)
    lat_obs = (w_e - n_start_of).astype(np.float64)
    lat_obs[n_row < 0] = np.nan
    rank_w = w["rank"].astype(np.int64)[wo]
    peer_w = w["peer"].astype(np.int64)[wo] if nw else np.zeros(0, np.int64)
    # released by its notify's arrival: a wait whose producer was late, or one that saw the signal
    # arrive while it spun (:func:`saw_signal`)
    is_late = (n_row >= 0) & ((late_ns > 0) | saw_signal(trace)[wo])
    lat_typ = _typical_latency(trace, rank_w, peer_w, lat_obs, is_late)
    # the release latency keeps the capture as it was: late waits their own, others at most the
    # time from their notify to their end
    lat = np.where(is_late, lat_obs, np.minimum(lat_typ, np.nan_to_num(lat_obs, nan=np.inf)))
    lat = np.where(np.isfinite(lat), lat, 0.0)
    # a wait on a flag already set: the rank's median over waits whose producer was not late
    d0 = np.zeros(nw, np.int64)
    if nw:
        on_time = (n_row >= 0) & ~is_late
        R = int(rank_w.max()) + 1
        med = group_median(rank_w[on_time], dur[on_time], R) if on_time.any() else np.full(R, np.nan)
        g = float(np.median(dur[on_time])) if on_time.any() else 0.0
        med = np.where(np.isfinite(med), med, g)
        d0 = np.minimum(dur, med[rank_w].astype(np.int64))
    w_d0 = np.where(is_late | (kind == _MISSING) | (kind == _CUT), d0, dur)
    w_d0[external] = dur[external]
    # launches
    lcode, lids = dense_codes(v.wg_keys[wg_ids, 1]) if W else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    L = lids.size
    lo = np.full(L, np.iinfo(np.int64).max)
    hi = np.full(L, np.iinfo(np.int64).min)
    np.minimum.at(lo, lcode, ws)
    np.maximum.at(hi, lcode, we)
    return _Model(
        wg_base=ws.astype(np.int64), wg_tail=tail.astype(np.int64), wg_launch=lcode, wg_rank=v.wg_keys[wg_ids, 0],
        wg_last_wait=last_wait, wg_id=trace.wg[workgroup_starts(v)][wg_ids] if v is not trace else wg_ids, wg_agent=wg_ids,
        w_wg=w_wg, w_gap=gap.astype(np.int64), w_dur=dur.astype(np.int64), w_d0=w_d0.astype(np.int64), w_kind=kind,
        w_pair=pair.astype(np.int64), w_late_pair=late_pair, w_lat=np.round(lat).astype(np.int64),
        w_lat_typ=np.round(lat_typ).astype(np.int64), w_start=w_s.astype(np.int64), w_end=w_e.astype(np.int64),
        w_peer=peer_w, w_row=wr_all[wo], w_order=wo,
        n_wg=n_wg, n_prev=n_prev.astype(np.int64), n_off=n_off.astype(np.int64), n_next=n_next.astype(np.int64),
        n_row=nr, launch_ids=lids.astype(np.int64), obs_makespan=(hi - lo).astype(np.int64),
    )


def _late_pairs(trace: Trace) -> np.ndarray:
    """For each wait (in event order), the row of the notify that would have released it had it
    not timed out: the one ``ktrace.pairing`` pairs it with when every wait is taken as completed;
    -1 where none ever came, and for waits that did not time out. Asked for only when some wait
    timed out (cached)."""
    return trace.cached(("late_pairs",), lambda: _compute_late_pairs(trace))


def _compute_late_pairs(trace: Trace) -> np.ndarray:
    Wk, Nk = EventKind.WAIT, EventKind.NOTIFY
    notifies = {"rank": trace.at(Nk, "rank"), "launch": trace.at(Nk, "launch"), "start": trace.at(Nk, "start_ns"),
                "program": trace.at(Nk, "program"), "local": is_local(trace.at(Nk, "flags"))}
    notifies.update((a, trace.at(Nk, arg_column(Nk, a))) for a in ("peer", "value", "flag"))
    wi = trace.rows_of(Wk)
    waits = {"rank": trace.at(Wk, "rank"), "launch": trace.at(Wk, "launch"), "program": trace.at(Wk, "program"),
             "order": wi, "timed_out": np.zeros(wi.size, bool), "local": is_local(trace.at(Wk, "flags"))}
    waits.update((a, trace.at(Wk, arg_column(Wk, a))) for a in ("peer", "flag", "expected", "cmp"))
    p = pairing.pair(notifies, waits)
    out = np.full(wi.size, -1, np.int64)
    out[p.wait] = trace.rows_of(Nk)[p.notify]
    to = is_timeout(trace.at(Wk, "flags"))
    out[~to] = -1
    return out


def replay(model: _Model, changes: Changes | None = None, *, max_iterations: int = 1024) -> ReplayResult:
    """Replay the model's launches with ``changes`` (none: the capture as recorded).

    Each pass computes every notify's time from its workgroup's previous wait end, every wait's
    release from its notify, and every workgroup's chain of waits in one segmented running
    maximum: ``end_i = max(end_{i-1} + gap_i + d0_i, release_i)``. Passes repeat until nothing
    moves (one pass per cross-workgroup hop of the longest chain).
    """
    ch = changes or Changes()
    m = model
    nw, nn, nwg = m.n_waits, m.n_wg.size, m.wg_base.size
    base = m.wg_base - (np.round(ch.shift).astype(np.int64) if ch.shift is not None else 0)
    gap, off, tail = m.w_gap, m.n_off, m.wg_tail
    if ch.scale is not None:
        f = ch.scale
        gap = np.round(gap * f[m.w_wg]).astype(np.int64)
        off = np.round(off * f[m.n_wg]).astype(np.int64)
        tail = np.round(tail * f).astype(np.int64)
    if ch.hold is not None and nn:
        h = np.round(ch.hold).astype(np.int64)
        seg = m.n_wg * (nw + 1) + (m.n_prev + 1)  # (workgroup, previous wait): nondecreasing
        cum = segmented_cumsum(h, seg)
        off = np.maximum(off - cum, 0)
        to_next = np.zeros(nw, np.int64)
        has_next = m.n_next >= 0
        np.add.at(to_next, m.n_next[has_next], h[has_next])
        gap = np.maximum(gap - to_next, 0)
        to_tail = np.zeros(nwg, np.int64)
        np.add.at(to_tail, m.n_wg[~has_next], h[~has_next])
        tail = np.maximum(tail - to_tail, 0)
    if ch.added_gap is not None:
        gap = gap + np.round(ch.added_gap).astype(np.int64)
    if ch.added_tail is not None:
        tail = tail + np.round(ch.added_tail).astype(np.int64)
    lat = m.w_lat
    if ch.latency is not None:
        lat = np.where(np.isfinite(ch.latency), np.minimum(np.round(np.nan_to_num(ch.latency)).astype(np.int64), lat), lat)
    d = m.w_d0.copy()
    kind = m.w_kind
    rel_pair = m.w_pair.copy()
    rel_lat = lat.copy()
    timed = (kind == _MISSING) | (kind == _CUT)
    released = np.zeros(nw, bool)
    if ch.release_timeouts is not None:
        released = timed & ch.release_timeouts
    d[timed & ~released] = m.w_dur[timed & ~released]  # gives up after as long as it did
    cut = released & (kind == _CUT)
    rel_pair[cut] = m.w_late_pair[cut]
    rel_lat[cut] = m.w_lat_typ[cut]
    binds = (kind == _PAIRED) | cut
    fixed = kind == _EXTERNAL
    # an external release stays where it was seen (its producer is not in the replay)
    ext_release = np.where(fixed, m.w_end, _NEVER)
    d[fixed] = 0
    step = gap + d
    P = segmented_cumsum(step, m.w_wg)
    base_w = base[m.w_wg]
    pc = np.maximum(rel_pair, 0)
    E = m.w_end.copy()
    it, converged = 0, nw == 0
    while not converged and it < max_iterations:
        it += 1
        anchor_n = np.where(m.n_prev >= 0, E[np.maximum(m.n_prev, 0)], base[m.n_wg]) if nn else np.zeros(0, np.int64)
        n_time = anchor_n + off
        rel = np.where(binds, n_time[pc] + rel_lat if nn else _NEVER, ext_release)
        u = np.maximum(rel - P, base_w)
        E_new = P + segmented_cummax(u, m.w_wg)
        converged = bool(np.array_equal(E_new, E))
        E = E_new
    if not converged:
        log.warning("ktrace: the replay did not settle in %d passes (a dependency cycle?); its saving is approximate",
                    max_iterations)
    end = np.where(m.wg_last_wait >= 0, E[np.maximum(m.wg_last_wait, 0)] if nw else 0, base) + tail
    L = m.launch_ids.size
    lo = np.full(L, np.iinfo(np.int64).max)
    hi = np.full(L, np.iinfo(np.int64).min)
    np.minimum.at(lo, m.wg_launch, base)
    np.maximum.at(hi, m.wg_launch, end)
    prev_end = np.where(np.r_[False, m.w_wg[1:] == m.w_wg[:-1]] if nw else np.zeros(0, bool),
                        np.r_[0, E[:-1]] if nw else E, base_w)
    start = prev_end + gap
    return ReplayResult(makespan=hi - lo, wait_end=E, wait_dur=E - start, iterations=it, converged=converged)


# ---------------------------------------------------------------------------------------------
# why each wait waited
# ---------------------------------------------------------------------------------------------

#: One row per WAIT event (see the module docstring).
WAIT_CAUSE_DTYPE = np.dtype(
    [
        ("row", "<i8"), ("rank", "<i4"), ("launch", "<i4"), ("program", "<i4"), ("peer", "<i8"),
        ("wait_ns", "<i8"),
        ("producer_late_ns", "<f8"),
        ("late_not_started_ns", "<f8"),  # the producer's workgroup had not started
        ("late_waiting_ns", "<f8"),  # it was itself waiting
        ("late_in_region_ns", "<f8"),  # it was in a span
        ("late_outside_ns", "<f8"),  # it was in no span, wait or notify
        ("late_missing_ns", "<f8"),  # the wait gave up: its notify never came in time (a missing signal)
        ("signal_latency_ns", "<f8"),
        ("link_ns", "<f8"),  # up to the calibrated one-way latency
        ("unexplained_ns", "<f8"),  # latency beyond it; whole waits with no captured notify
        ("root_rank", "<i4"),  # following producers that were themselves waiting: the first that was not
        ("root_program", "<i4"),
        ("root", "O"),  # what that producer did: "not started", "working", OUTSIDE, "missing signal", ...
    ]
)

_ROOT_NAMES = np.array(["", "not started", "working", OUTSIDE, "missing signal", "no captured notify", "gave up"],
                       dtype=object)


def _wait_time_until(m: _Model, g: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time workgroup ``g`` (model index) spent in its waits up to time ``t``."""
    if m.n_waits == 0:
        return np.zeros(g.size, np.int64)
    k = last_at_or_before(m.w_wg, m.w_start, g, t)
    kc = np.maximum(k, 0)
    cum = segmented_cumsum(m.w_dur, m.w_wg) - m.w_dur
    return np.where(k >= 0, cum[kc] + np.clip(t - m.w_start[kc], 0, m.w_dur[kc]), 0)


def _wait_split(trace: Trace, launches=None) -> dict:
    """The columns of :func:`wait_causes`, for every wait (cached) or those of some launches."""
    if launches is None:
        return trace.cached(("wait_split",), lambda: _split_by_windows(trace))
    return _compute_wait_split(trace, replay_model(trace, launches))


#: Waits whose causes are made together (:func:`_split_by_windows`): a model of a few launches
#: at a time instead of one of the whole capture (several GB for 10 M events).
WINDOW_WAITS = 1 << 19


def _split_by_windows(trace: Trace) -> dict:
    """:func:`_compute_wait_split` of every wait, made from models of windows of whole launches
    of about :data:`WINDOW_WAITS` waits (each wait's split depends on its launch's workgroups and
    on the notify that released it only), the rows put in event order; one model of every
    launch where a wait was released by a notify of another launch."""
    w = _waits(trace)
    wl = np.asarray(w["launch"], np.int64)
    nr = w["notify_row"]
    paired = np.flatnonzero(nr >= 0)
    across = paired.size and bool((trace.column("launch")[nr[paired]] != wl[paired]).any())
    if not wl.size or across:
        return _compute_wait_split(trace, replay_model(trace))
    launches = np.unique(trace.wg_keys[:, 1])
    per = np.bincount(np.searchsorted(launches, wl), minlength=launches.size)
    cuts = [0]
    acc = 0
    for i, n in enumerate(per.tolist()):
        if acc and acc + n > WINDOW_WAITS:
            cuts.append(i)
            acc = 0
        acc += n
    cuts.append(launches.size)
    if len(cuts) == 2:
        return _compute_wait_split(trace, replay_model(trace))
    rows = w["row"]
    out: dict = {}
    filled = 0
    windows = [launches[a:b] for a, b in zip(cuts, cuts[1:])]
    for part in _two_at_a_time(lambda ls: _compute_wait_split(trace, replay_model(trace, ls)), windows):
        at = np.searchsorted(rows, part["row"])  # (each window's rows put at their place: no copy of all of them)
        filled += at.size
        for k, v in part.items():
            if k not in out:
                out[k] = np.empty(rows.size, v.dtype)
            out[k][at] = v
    if filled != rows.size:  # (every wait is in the launches of one window)
        return _compute_wait_split(trace, replay_model(trace))
    return out


def _compute_wait_split(trace: Trace, m: _Model) -> dict:
    w = _waits(trace)
    nw = m.n_waits
    wo = m.w_order  # the model's order of the waits (by workgroup and time); the table's is event order
    late = np.nan_to_num(w["producer_late_ns"])[wo]
    sig = w["signal_latency_ns"][wo]
    dur = m.w_dur.astype(np.float64)
    paired = m.w_pair >= 0
    pc = np.maximum(m.w_pair, 0)
    prod_wg = np.where(paired, m.n_wg[pc] if m.n_wg.size else 0, -1)
    a = m.w_start
    b = a + late.astype(np.int64)
    lw = np.flatnonzero(paired & (late > 0))
    not_started = np.zeros(nw)
    waiting = np.zeros(nw)
    in_region = np.zeros(nw)
    if lw.size:
        g = prod_wg[lw]
        aa, bb = a[lw], b[lw]
        gb = m.wg_base[g]
        ns = np.clip(np.minimum(gb, bb) - aa, 0, None)
        a2 = np.maximum(aa, gb)
        wt = np.clip(_wait_time_until(m, g, bb) - _wait_time_until(m, g, a2), 0, None)
        gid = m.wg_agent[g]  # (the producer's own lane: what it was doing)
        v = lane_view(trace)
        blocks = coverage(v, gid)
        cov = np.clip(covered(blocks, gid, bb) - covered(blocks, gid, a2), 0, None)
        not_started[lw] = ns
        waiting[lw] = np.minimum(wt, bb - aa - ns)
        in_region[lw] = np.clip(cov - wt, 0, None)
        in_region[lw] = np.minimum(in_region[lw], bb - aa - ns - waiting[lw])
    to = w["timed_out"][wo]
    # a wait that gave up: its notify never came (or came too late): a missing signal
    missing = np.where(to, late, 0.0)
    outside = np.where((late > 0) & ~to, late - not_started - waiting - in_region, 0.0)
    # the signal's trip: up to the calibrated one-way latency of the pair; the rest is unexplained
    cal = one_way_pairs(trace, m.w_peer, w["rank"].astype(np.int64)[wo]) if nw else np.zeros(0)
    sigv = np.nan_to_num(sig)
    # a pair the calibration does not cover (a rank signalling itself, an unaligned capture):
    # nothing to compare with, the whole latency is the signal's trip
    link = np.where(np.isfinite(cal), np.minimum(sigv, np.nan_to_num(cal)), sigv)
    unexplained = sigv - link
    unpaired = ~paired & ~to
    unexplained[unpaired] = dur[unpaired]
    # follow producers that were themselves waiting to the one that was not
    cur = np.arange(nw)
    for _ in range(32):
        hop = paired[cur] & (waiting[cur] > 0.5 * np.maximum(late[cur], 1))
        if not hop.any():
            break
        pw = np.where(hop, m.n_prev[pc[cur]] if m.n_prev.size else -1, -1)
        ok = hop & (pw >= 0)
        if not ok.any():
            break
        nxt = np.where(ok, pw, cur)
        if np.array_equal(nxt, cur):
            break
        cur = nxt
    root_wg = np.where(paired[cur], m.wg_id[np.maximum(prod_wg[cur], 0)] if m.wg_id.size else -1, -1)
    code = np.zeros(nw, np.int8)
    parts = np.stack([not_started[cur], in_region[cur], outside[cur]], axis=1) if nw else np.zeros((0, 3))
    has_late = late[cur] > 0
    code[has_late] = 1 + np.argmax(parts[has_late], axis=1) if has_late.any() else code[has_late]
    code[to[cur] & (m.w_kind[cur] == _MISSING)] = 4
    code[to[cur] & (m.w_kind[cur] == _CUT)] = 6
    code[unpaired[cur]] = 5
    keys = trace.wg_keys
    rwg = np.maximum(root_wg, 0)
    root_rank = np.where(root_wg >= 0, keys[rwg, 0] if keys.shape[0] else -1, np.where(code == 4, m.w_peer[cur], -1))
    root_prog = np.where(root_wg >= 0, keys[rwg, 2] if keys.shape[0] else -1, -1)
    back = np.argsort(wo, kind="stable")  # model order -> event order
    cols = {"row": m.w_row, "peer": m.w_peer, "wait_ns": m.w_dur, "producer_late_ns": late,
            "late_not_started_ns": not_started, "late_waiting_ns": waiting, "late_in_region_ns": in_region,
            "late_outside_ns": outside, "late_missing_ns": missing, "signal_latency_ns": sig, "link_ns": link,
            "unexplained_ns": unexplained, "root_rank": root_rank, "root_program": root_prog, "root_code": code}
    out = {k: v[back] for k, v in cols.items()}
    pos = wo[back]
    out.update(rank=w["rank"][pos], launch=w["launch"][pos],
               program=w["program"][pos])
    return out


def _two_at_a_time(fn, items: list):
    """``fn(item)`` of each item, in order, made by two threads (numpy works without the
    interpreter lock), at most two results ahead of the caller."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        pending: deque = deque()
        for x in items:
            pending.append(pool.submit(fn, x))
            if len(pending) > 2:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def wait_cause_columns(trace: Trace) -> dict:
    """:func:`wait_causes` as columns (name -> array of its ``WAIT_CAUSE_DTYPE`` type, every wait in
    event order), without the row table."""
    c = _wait_split(trace)
    cols = {k: np.asarray(v, WAIT_CAUSE_DTYPE[k]) for k, v in c.items() if k != "root_code"}
    cols["root"] = _ROOT_NAMES[c["root_code"]]
    return cols


def wait_causes(trace: Trace) -> np.ndarray:
    """Every wait's time split into producer lateness (and why the producer was late), signal
    latency (the calibrated link latency and what is beyond it) and time nobody explains.

    Returns:
        A table of ``WAIT_CAUSE_DTYPE``, one row per WAIT event, in event order. For each row,
        ``late_not_started_ns + late_waiting_ns + late_in_region_ns + late_outside_ns +
        late_missing_ns`` is ``producer_late_ns`` and ``link_ns + unexplained_ns`` is the signal latency (for a
        completed wait with no captured notify, ``unexplained_ns`` is the whole wait).
    """
    c = _wait_split(trace)
    cols = {k: v for k, v in c.items() if k != "root_code"}
    cols["root"] = _ROOT_NAMES[c["root_code"]]
    return fill_table(np.zeros(c["row"].size, WAIT_CAUSE_DTYPE), cols)


#: Per consumer rank (``-1``: all), the wait time split (see :func:`wait_cause_totals`).
WAIT_CAUSE_TOTALS_DTYPE = np.dtype(
    [("rank", "<i4"), ("n_waits", "<i8"), ("wait_ns", "<f8"), ("producer_late_ns", "<f8"),
     ("late_not_started_ns", "<f8"), ("late_waiting_ns", "<f8"), ("late_in_region_ns", "<f8"),
     ("late_outside_ns", "<f8"), ("late_missing_ns", "<f8"), ("link_ns", "<f8"), ("unexplained_ns", "<f8")]
)


def wait_cause_totals(trace: Trace, launches=None) -> np.ndarray:
    """:func:`wait_causes` summed per waiting rank, and over all ranks (``rank == -1``): of every
    launch, or of the launches given (a large capture's report sums a sample of them)."""
    c = _wait_split(trace, launches)
    rank = c["rank"].astype(np.int64)
    R = int(rank.max()) + 1 if rank.size else 0
    out = np.zeros(R + 1, WAIT_CAUSE_TOTALS_DTYPE)
    out["rank"] = np.r_[np.arange(R), -1]
    out["n_waits"][:R] = np.bincount(rank, minlength=R)
    for col in ("wait_ns", "producer_late_ns", "late_not_started_ns", "late_waiting_ns", "late_in_region_ns",
                "late_outside_ns", "late_missing_ns", "link_ns", "unexplained_ns"):
        out[col][:R] = np.bincount(rank, weights=np.nan_to_num(np.asarray(c[col], np.float64)), minlength=R)
    for col in out.dtype.names[1:]:
        out[col][R] = out[col][:R].sum()
    return out


# ---------------------------------------------------------------------------------------------
# root causes and what each would save
# ---------------------------------------------------------------------------------------------


@dataclass
class Cause:
    """One root cause and the replay that prices it.

    Attributes:
        kind: the name of the module of ``ktrace.analysis.causes`` that found it (its ``KIND``;
            the registry, ``causes.registry.KINDS``, lists them).
        rank: the rank at fault (the producer, the late rank, the overloaded workgroups' rank;
            -1 when several).
        ranks: every rank involved.
        launches: the launch indices where the cause is present.
        saving_ns: replayed without it, the capture's kernel time (launch durations summed)
            would be this much shorter (estimated from a sample of launches when there are many).
        saving_launches: launches in which the replay saved anything.
        sampled: launches replayed (the saving of the others is scaled from them).
        waiting_removed_ns: wait time that disappears with it (its consequences).
        excess_ns: the time the cause itself put into the capture, wherever it landed (holds,
            extra work, late starts, waits given up): how causes that save the same are ordered.
        waits_affected: waits that would end earlier.
        detail: what its kind found, typed by the kind's module (a frozen dataclass with at least
            ``magnitude_ns``: the cause's own size; the report's data and text come from it).
    """

    kind: str
    rank: int
    ranks: tuple
    launches: np.ndarray
    detail: object = None
    saving_ns: float = 0.0
    saving_launches: int = 0
    sampled: int = 0
    waiting_removed_ns: float = 0.0
    waits_affected: int = 0
    excess_ns: float = 0.0
    waiting_ranks: tuple = ()
    converged: bool = True
    changes: object = field(default=None, repr=False)  # model -> Changes


CAUSE_DTYPE = np.dtype(
    [("kind", "O"), ("rank", "<i4"), ("ranks", "O"), ("n_launches", "<i8"), ("launches_total", "<i8"),
     ("saving_ns", "<f8"), ("saving_per_launch_ns", "<f8"), ("share", "<f8"), ("saving_launches", "<i8"),
     ("sampled_launches", "<i8"), ("magnitude_ns", "<f8"), ("programs", "O"), ("rounds", "O"), ("region", "O"),
     ("waiting_removed_ns", "<f8"), ("waits_affected", "<i8")]
)


@dataclass(frozen=True)
class Context:
    """What a kind's ``detect`` and ``describe`` read: the capture and the tables the report
    computed once for every kind.

    Attributes:
        trace: the prepared capture.
        config: thresholds and replay limits.
        workgroups: ``load.workgroups(trace)``.
        timeouts, missing: ``hangs.timeouts`` and ``hangs.missing_notifies``.
        min_excess: ``LoadConfig.min_excess`` (how much more work counts as uneven).
    """

    trace: Trace
    config: CauseConfig
    workgroups: np.ndarray
    timeouts: np.ndarray
    missing: np.ndarray
    min_excess: float = 0.5

    @property
    def kernel_time_ns(self) -> float:
        return kernel_time_total(self.trace)

    @property
    def n_launches(self) -> int:
        return launch_total(self.trace)

    def rel(self, t) -> int:
        """An absolute time as ns since the capture's first event (the traces' time 0)."""
        return int(t) - self.trace.origin_ns


#: Who a claim is about: (rank, launch, program, lane); -1 in a field: every one (a whole rank,
#: every launch of the cause).
Agent = tuple


@dataclass
class Description:
    """What a kind's ``describe`` says about one cause.

    Attributes:
        text: the finding in plain words (every statement in it is one of ``claims``).
        label: a short name for lists and plots ("rank 1 program 0 notified late").
        start_ns, end_ns: the time range to look at (ns since the capture's first event), or None.
        claims: the statements of ``text``, as data.
    """

    text: str
    label: str
    start_ns: int | None = None
    end_ns: int | None = None
    claims: list = field(default_factory=list)


def sample_codes(codes: np.ndarray, k: int) -> np.ndarray:
    if codes.size <= k:
        return codes
    return codes[np.unique(np.linspace(0, codes.size - 1, k).round().astype(np.int64))]


def sample_launches(trace: Trace, k: int) -> np.ndarray:
    """At most ``k`` launch indices of the capture, evenly spaced (all of them when there are few)."""
    return sample_codes(launch_makespans(trace)[0], k)


def price_cause(m: _Model, cause: Cause, sample: np.ndarray, cfg: CauseConfig) -> None:
    """Replay the sampled launches of a cause (``m`` holds them) without it; the saving of all
    its launches is the sample's, scaled."""
    sub = m.take(_codes_of(m, sample))
    ch = cause.changes(sub)
    res = replay(sub, ch, max_iterations=cfg.max_iterations)
    saved = np.maximum(sub.obs_makespan - res.makespan, 0)
    scale = cause.launches.size / max(sample.size, 1)
    cause.saving_ns = float(saved.sum()) * scale
    cause.saving_launches = int(round(np.count_nonzero(saved > 0) * scale))
    cause.sampled = int(sample.size)
    fewer = np.maximum(sub.w_dur - res.wait_dur, 0)
    cause.waiting_removed_ns = float(fewer.sum()) * scale
    aff = fewer > 0
    cause.waits_affected = int(round(np.count_nonzero(aff) * scale))
    cause.waiting_ranks = tuple(sorted(set(sub.wg_rank[sub.w_wg[aff]].tolist())))
    cause.converged = res.converged


def _codes_of(m: _Model, launch_values) -> np.ndarray:
    v = np.asarray(launch_values, np.int64)
    k = np.searchsorted(m.launch_ids, v)
    k = np.clip(k, 0, max(m.launch_ids.size - 1, 0))
    return np.unique(k[m.launch_ids[k] == v]) if m.launch_ids.size else np.zeros(0, np.int64)


def roles_coded(wg) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, roles)`` of a workgroups table's ``role`` column (given by ``load.workgroups``'
    table; made from the column for another table)."""
    known = wg.codes("role") if hasattr(wg, "codes") else None
    return known if known is not None else objects_coded(wg["role"])


def objects_coded(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, uniques)`` of an object array of strings, ``uniques`` sorted: the distinct values
    are few (kernel and region names), so one dict lookup per distinct value, not a sort of all."""
    x = np.asarray(x, dtype=object)
    if x.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, object)
    # runs of equal neighbours are common (one kernel per launch): look each run up once
    new = np.r_[True, x[1:] != x[:-1]]
    heads = x[new]
    names = sorted(set(heads.tolist()))
    code_of = {n: i for i, n in enumerate(names)}
    head_codes = np.fromiter((code_of[h] for h in heads.tolist()), np.int64, heads.size)
    return head_codes[np.cumsum(new) - 1], np.array(names, dtype=object)


def launch_total(trace: Trace) -> int:
    """The capture's launches (``ktrace.text.MEASURES``), counted by ``ktrace.captures.launch_count``
    as ``info`` and ``merge`` count them (a trace made from bare events: its launches with events)."""
    return launch_count(trace.kernels) if trace.kernels else int(launch_makespans(trace)[0].size)


def kernel_time_total(trace: Trace) -> float:
    """The capture's kernel time (``ktrace.text.MEASURES``): every launch's duration (first start to
    last end over every rank), summed. The one function behind every kernel time ktrace prints."""
    return float(launch_makespans(trace)[1].sum())


__all__ = ["CAUSE_DTYPE", "Cause", "CauseConfig", "Changes", "Claim", "Context", "Description", "ReplayResult",
           "WAIT_CAUSE_DTYPE", "kernel_time_total", "launch_makespans", "launch_total", "one_way_latency_ns", "one_way_pairs", "replay", "replay_model",
           "sample_launches", "saw_signal", "wait_cause_totals", "wait_causes"]
