"""The clock model: per-rank offset and drift against a reference rank, anchored to host time.

Calibration samples (written by ``ktrace.clock.calibrate`` into ``RankCapture.clock_samples``)
have this shape, per rank::

    {
      "pingpong": [                      # absent on the reference rank
        {"ref_rank": 0, "peer": 1, "phase": "before",
         "t1": [...],   # reference sends ping   (reference ticks)
         "t2": [...],   # peer sees the ping     (peer ticks)
         "t3": [...],   # peer sends pong        (peer ticks)
         "t4": [...],   # reference sees pong    (reference ticks)
         "ref_tick_hz": 1000000000},     # optional; else the reference rank's device rate
        {... "phase": "after" ...},
      ],
      "host_anchor": {                   # host wall clock around one device timer read
        "host_before_ns": [...], "dev_ticks": [...], "host_after_ns": [...]},
    }

The fit (:func:`fit_clock`):

1. Ticks become nanoseconds of each device's own clock with its tick rate (AMD: the device's
   wall-clock rate, else the architecture's known rate; see :func:`resolve_tick_hz`).
2. Per phase, each round trip gives the NTP estimate of the peer's offset
   ``theta = ((t2 - t1) + (t3 - t4)) / 2`` and its round trip ``delta = (t4 - t1) - (t3 - t2)``;
   ``theta`` is off by at most ``delta / 2`` (the unknown asymmetry of the two one-way trips).
   Only the samples with the smallest round trips are kept (``keep_fraction``, default 5 %).
3. The median offset of the kept samples of each phase, at the phase's median time on the
   reference clock, gives one point per phase; a line through the points (least squares when
   there are more than two) is the offset + drift. With one phase the drift is taken as 0.
4. The reference rank's device clock is mapped to host wall-clock time (``time.time_ns``)
   with its host anchor: the best-bracketed reads give ``host - device`` (and its rate when
   the anchors span at least 100 ms).

Between nodes (``ktrace.clock.paths``) a rank is reached by a chain of such fits, each a
:class:`Leg` (one clock against another, offset + drift + bound): the reference GPU against its
host (``gpu_host``: a flag exchange through pinned host memory, NTP-style, else the per-phase
host anchors), the reference host against this node's host (``host_exchange``: timestamps
exchanged over ``torch.distributed``, NTP-style), this node's host against its GPU, and, for the
other ranks of that node, the ping-pong against the node's reference rank. Legs compose exactly
(:meth:`Leg.then`, :meth:`Leg.inverse`); the chain's bound is the sum of its legs' bounds::

    "gpu_host": [{"phase": "before", "t1": [host ns], "t2": [dev ticks], "t3": [dev ticks], "t4": [host ns]}, ...],
    "host_anchors": [{"phase": "before", "host_before_ns": [...], "dev_ticks": [...], "host_after_ns": [...]}, ...],
    "host_exchange": [{"ref_rank": 0, "peer": 4, "phase": "before", "t1".."t4": [host ns], "transport": "gloo"}, ...],
    "reference_rank": 0, "node": "nodeB", "host_clock": {...}, "host_skew": {...}   # (simulation only)

Everything is stored per rank as one affine map from device nanoseconds to the common clock
(:class:`RankClock`): ``common_ns = pivot_ns + (device_ns - pivot_dev_ns) * scale``. Pivots are
exact integers and only the small difference goes through floating point, so nanoseconds
survive even on clocks that count from 1970 (NVIDIA ``%globaltimer`` readings are ~1.7e18).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .. import schema
from ..device import resolve_tick_hz
from ..text import fmt_ns, ranges_text

log = logging.getLogger("ktrace")

#: ``schema.EVENT_DTYPE`` plus the event's start and end on the common clock (ns, host-anchored).
ALIGNED_DTYPE = schema.ALIGNED_DTYPE

#: Phases of a calibration, in the order they run.
PHASES = ("before", "after")
#: Anchors spanning less than this are fitted as an offset only (no host-rate estimate).
_MIN_HOST_RATE_SPAN_NS = 100_000_000


# ---------------------------------------------------------------------------------------------
# ticks
# ---------------------------------------------------------------------------------------------


def ticks_to_ns(ticks, tick_hz: int):
    """Device ticks to nanoseconds of the same device clock, exactly (integer arithmetic).

    Args:
        ticks: an int or an integer numpy array of raw timer ticks.
        tick_hz: the timer's rate in Hz (1e9 for NVIDIA ``%globaltimer``).

    Returns:
        int64 nanoseconds (same shape), rounded down to a whole nanosecond.
    """
    hz = int(tick_hz)
    if hz <= 0:
        raise ValueError(f"tick rate must be positive, got {tick_hz}")
    scalar = np.isscalar(ticks) or isinstance(ticks, int)
    t = np.asarray(ticks, dtype=np.int64)
    if hz == 1_000_000_000:
        out = t
    elif 1_000_000_000 % hz == 0:
        out = t * (1_000_000_000 // hz)
    else:
        q, r = np.divmod(t, hz)
        out = q * 1_000_000_000 + (r * 1_000_000_000) // hz
    return int(out) if scalar else out


# ---------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankClock:
    """How one rank's device clock maps onto the common clock.

    ``common_ns = pivot_ns + (device_ns - pivot_dev_ns) * scale``, with ``device_ns`` the
    rank's timer in nanoseconds (:func:`ticks_to_ns`).

    Attributes:
        rank: the rank.
        tick_hz: its timer's rate.
        pivot_dev_ns: an instant on the rank's device clock (ns).
        pivot_ns: the same instant on the common clock (ns, host wall clock when anchored).
        scale: common nanoseconds per device nanosecond.
        offset_ns: device clock minus the reference's at the pivot (0 on the reference).
        drift_ppm: rate of this clock relative to the reference's, parts per million.
        rtt_ns: the largest round trip among the kept calibration samples (its half bounds
            each kept offset estimate); for a host anchor, the width of the host interval; 0 on
            the reference; NaN when not aligned.
        rtt_min_ns: the smallest round trip seen.
        residual_ns: RMS of the kept samples' offsets about the fitted line.
        n_kept: calibration samples kept.
        n_samples: calibration samples seen.
        method: ``reference``, ``pingpong+drift``, ``pingpong``, ``host-chain``,
            ``pingpong+host-chain``, ``host-anchor`` or ``unaligned``. For a chain, ``rtt_ns``,
            ``rtt_min_ns`` and ``residual_ns`` are sums over its legs, so that
            :attr:`error_bound_ns` is the sum of the legs' bounds.
        node: the node the rank ran on ("" when not recorded).
        legs: ``(leg, bound_ns)`` of each measured step from the reference to this rank, in
            order (empty for a single ping-pong or an old capture).
        host_offset_ns: this rank's host clock minus the reference's host clock at ``pivot_ns``,
            as the host exchange measured it (NaN when no host exchange is on its path).
        host_drift_ppm: the rate of this rank's host clock against the reference host's (NaN
            when not measured).
    """

    rank: int
    tick_hz: int
    pivot_dev_ns: int
    pivot_ns: int
    scale: float = 1.0
    offset_ns: int = 0
    drift_ppm: float = 0.0
    rtt_ns: float = 0.0
    rtt_min_ns: float = 0.0
    residual_ns: float = 0.0
    n_kept: int = 0
    n_samples: int = 0
    method: str = "reference"
    node: str = ""
    legs: tuple = ()
    host_offset_ns: float = math.nan
    host_drift_ppm: float = math.nan

    def __post_init__(self):
        if self.tick_hz <= 0:
            raise ValueError(f"rank {self.rank}: tick rate must be positive, got {self.tick_hz}")
        if not (self.scale > 0 and math.isfinite(self.scale)):
            raise ValueError(f"rank {self.rank}: clock scale must be positive and finite, got {self.scale}")

    @property
    def error_bound_ns(self) -> float:
        """How far this rank's aligned times may be from the reference's (ns); NaN if unknown.

        Half the round-trip bound of the kept samples plus the fit's residual (for a chain: the
        sum of its legs' bounds).
        """
        if self.method == "reference":
            return 0.0
        return self.rtt_ns / 2.0 + self.residual_ns

    def to_common(self, ticks, tick_hz: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Raw ticks of this rank's timer to common-clock nanoseconds (int64); written into
        ``out`` (an int64 array of their shape) when given, with no temporary but the scaled
        times (the same arithmetic, the same values)."""
        dev = ticks_to_ns(np.asarray(ticks, dtype=np.int64), tick_hz or self.tick_hz)
        if out is None:
            d = dev - np.int64(self.pivot_dev_ns)
            if self.scale == 1.0:
                return d + np.int64(self.pivot_ns)
            return np.rint(d * self.scale).astype(np.int64) + np.int64(self.pivot_ns)
        np.subtract(dev, np.int64(self.pivot_dev_ns), out=out)
        if self.scale != 1.0:
            scaled = np.multiply(out, self.scale)
            np.copyto(out, np.rint(scaled, out=scaled), casting="unsafe")
        out += np.int64(self.pivot_ns)
        return out

    def to_dict(self) -> dict:
        """The stored form; ``bound_ns`` (:attr:`error_bound_ns`) is written for readers of the
        file and ignored when read back."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["legs"] = [list(x) for x in self.legs]
        d["bound_ns"] = self.error_bound_ns
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "RankClock":
        """Rebuild a stored map; fields an older capture lacks take their defaults."""
        kw = {}
        for k, f in cls.__dataclass_fields__.items():
            if k not in d:
                continue
            v = d[k]
            if f.type in ("float",) and v is None:
                v = math.nan
            if k == "legs":
                v = tuple((str(name), math.nan if b is None else float(b)) for name, b in (v or ()))
            kw[k] = v
        return cls(**kw)


@dataclass(frozen=True)
class ClockModel:
    """How the ranks of a capture were put on one clock; stored in ``Capture.clock`` as a dict.

    Attributes:
        method: how the ranks were aligned (the non-reference ranks' methods, joined).
        reference_rank: the rank every other is measured against.
        anchor: ``host`` when the common clock is host wall-clock time (``time.time_ns``),
            ``device`` when it is the reference device's clock (no host anchor recorded).
        ranks: the map of each rank.
        host_drift_ppm: host clock rate relative to the reference device's (0 if not fitted).
        host_bound_ns: half-width of the best host anchor interval (how well the common clock
            sits on host time; NaN when not anchored).
        notes: what a reader should know (fallbacks taken, samples dropped).
    """

    method: str
    reference_rank: int
    anchor: str
    ranks: Mapping[int, RankClock]
    host_drift_ppm: float = 0.0
    host_bound_ns: float = math.nan
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        if self.anchor not in ("host", "device"):
            raise ValueError(f"clock anchor must be 'host' or 'device', got {self.anchor!r}")

    def rank(self, r: int) -> RankClock:
        try:
            return self.ranks[int(r)]
        except KeyError:
            raise KeyError(f"the clock model has no rank {r} (it has {sorted(self.ranks)})") from None

    @property
    def max_residual_ns(self) -> float:
        vals = [rc.residual_ns for rc in self.ranks.values() if rc.method != "reference"]
        return max(vals) if vals else 0.0

    @property
    def max_rtt_ns(self) -> float:
        vals = [rc.rtt_ns for rc in self.ranks.values() if rc.method != "reference"]
        return max(vals) if vals else 0.0

    @property
    def aligned(self) -> bool:
        """True when every rank has a measured map (none left ``unaligned``)."""
        return all(rc.method != "unaligned" for rc in self.ranks.values())

    def error_bounds_ns(self, n_ranks: int | None = None) -> np.ndarray:
        """Per-rank error bound (ns) indexed by rank; NaN for ranks without a measured map."""
        n = max(max(self.ranks, default=-1) + 1, n_ranks or 0)
        out = np.full(n, np.nan)
        for r, rc in self.ranks.items():
            out[r] = rc.error_bound_ns
        return out

    @property
    def max_error_bound_ns(self) -> float:
        """The largest bound of any aligned rank (0 with only the reference; NaN if none known)."""
        vals = [rc.error_bound_ns for rc in self.ranks.values() if rc.method not in ("reference", "unaligned")]
        return max(vals) if vals else (0.0 if self.ranks else math.nan)

    def bounds_text(self) -> str:
        """Which ranks are aligned to what bound, in one line: "rank 0 reference; ranks 1-3
        pingpong+drift within 57 ns; ranks 4-7 host-chain within 38.2 µs"."""
        groups: dict[str, list[int]] = {}
        for r, rc in sorted(self.ranks.items()):
            groups.setdefault(rc.method, []).append(r)
        parts = []
        for method, rs in groups.items():
            who = f"rank {rs[0]}" if len(rs) == 1 else f"ranks {ranges_text(rs)}"
            if method == "reference":
                parts.append(f"{who} reference")
            elif method == "unaligned":
                parts.append(f"{who} NOT aligned")
            else:
                worst = max(self.ranks[r].error_bound_ns for r in rs)
                parts.append(f"{who} {method} within {fmt_ns(worst)}")
        return "; ".join(parts)

    def tolerance_ns(self, a: int, b: int) -> float:
        """How far apart two events of ranks ``a`` and ``b`` may be misplaced by alignment."""
        return self.rank(a).error_bound_ns + self.rank(b).error_bound_ns

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "reference_rank": self.reference_rank,
            "anchor": self.anchor,
            "host_drift_ppm": self.host_drift_ppm,
            "host_bound_ns": None if math.isnan(self.host_bound_ns) else self.host_bound_ns,
            "notes": list(self.notes),
            "summary": self.bounds_text(),  # (for readers of the file; not read back)
            "ranks": [rc.to_dict() for _, rc in sorted(self.ranks.items())],
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "ClockModel":
        """Rebuild a model stored by :meth:`to_dict`.

        Raises:
            ValueError: the dict is not a stored clock model.
        """
        try:
            ranks = {int(x["rank"]): RankClock.from_dict(x) for x in d["ranks"]}
            hb = d.get("host_bound_ns")
            return cls(
                method=str(d["method"]),
                reference_rank=int(d["reference_rank"]),
                anchor=str(d.get("anchor", "device")),
                ranks=ranks,
                host_drift_ppm=float(d.get("host_drift_ppm") or 0.0),
                host_bound_ns=math.nan if hb is None else float(hb),
                notes=tuple(d.get("notes") or ()),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a stored clock model ({type(e).__name__}: {e})") from None


# ---------------------------------------------------------------------------------------------
# fitting
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PingPongFit:
    """The offset + drift of a peer clock against the reference clock (both in device ns).

    ``peer_ns - ref_ns = offset_ns + drift * (ref_ns - t0_ns)`` where ``offset_ns`` is split into
    an exact integer and a fraction so that large clock differences keep nanoseconds.
    """

    t0_ns: int  # pivot on the reference clock
    offset_int_ns: int
    offset_frac_ns: float
    drift: float  # dimensionless (ppm * 1e-6)
    rtt_ns: float  # largest round trip kept
    rtt_min_ns: float
    residual_ns: float
    n_kept: int
    n_samples: int
    phases: tuple[str, ...]
    phase_offsets_ns: tuple[float, ...] = field(default=())  # per phase, relative to offset_int_ns

    @property
    def offset_ns(self) -> float:
        return self.offset_int_ns + self.offset_frac_ns


def _keep_best(score: np.ndarray, keep_fraction: float, min_keep: int) -> np.ndarray:
    """The ``k`` samples of smallest score; among tied scores the earliest samples, so that the
    fit is the same on every machine (``np.argpartition`` breaks ties differently where numpy
    uses a SIMD selection, e.g. on AVX-512 CPUs)."""
    n = score.size
    k = min(n, max(int(min_keep), int(math.ceil(keep_fraction * n))))
    if k >= n:
        return np.arange(n)
    return np.sort(np.argsort(score, kind="stable")[:k])


def _int_array(sample: Mapping, key: str, where: str) -> np.ndarray:
    try:
        a = np.asarray(sample[key], dtype=np.int64)
    except KeyError:
        raise ValueError(f"{where}: calibration sample has no {key!r}") from None
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"{where}: calibration field {key!r} is not a list of integers ({e})") from None
    if a.ndim != 1:
        raise ValueError(f"{where}: calibration field {key!r} must be one-dimensional")
    return a


def fit_pingpong(
    samples: list[Mapping],
    ref_tick_hz: int,
    peer_tick_hz: int,
    *,
    keep_fraction: float = 0.05,
    min_keep: int = 5,
) -> PingPongFit:
    """Fit one peer's offset and drift from its ping-pong samples against the reference.

    Args:
        samples: the peer's sample dicts (``t1``..``t4`` lists and ``phase``), one per phase.
        ref_tick_hz: the reference timer's rate (for ``t1``, ``t4``).
        peer_tick_hz: the peer timer's rate (for ``t2``, ``t3``).
        keep_fraction: the fraction of round trips kept per phase, smallest first.
        min_keep: keep at least this many per phase (all when fewer).

    Returns:
        The fit; its ``residual_ns`` is the RMS of the kept samples about the line.

    Raises:
        ValueError: no usable samples, mismatched lengths, or time running backwards.
    """
    if not 0 < keep_fraction <= 1:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction}")
    phase_data = []
    coarse = None
    n_total = 0
    for i, s in enumerate(samples):
        where = f"ping-pong sample set {i} ({s.get('phase', '?')})"
        t1, t2, t3, t4 = (_int_array(s, k, where) for k in ("t1", "t2", "t3", "t4"))
        if not (t1.size == t2.size == t3.size == t4.size):
            raise ValueError(f"{where}: t1..t4 have different lengths {t1.size}, {t2.size}, {t3.size}, {t4.size}")
        if t1.size == 0:
            continue
        r1, r4 = ticks_to_ns(t1, ref_tick_hz), ticks_to_ns(t4, ref_tick_hz)
        p2, p3 = ticks_to_ns(t2, peer_tick_hz), ticks_to_ns(t3, peer_tick_hz)
        good = (r4 >= r1) & (p3 >= p2)
        if not good.all():
            log.warning("%s: %d of %d round trips run backwards (t4 < t1 or t3 < t2); dropped", where, int((~good).sum()), good.size)
            r1, r4, p2, p3 = r1[good], r4[good], p2[good], p3[good]
        if r1.size == 0:
            continue
        n_total += r1.size
        if coarse is None:
            coarse = int(np.median(p2 - r1))
        theta = ((p2 - r1 - coarse).astype(np.float64) + (p3 - r4 - coarse).astype(np.float64)) / 2.0
        delta = ((r4 - r1) - (p3 - p2)).astype(np.float64)
        t_mid = r1 + (r4 - r1) // 2
        keep = _keep_best(delta, keep_fraction, min_keep)
        phase_data.append((str(s.get("phase", f"set{i}")), t_mid[keep], theta[keep], delta[keep]))
    if not phase_data:
        raise ValueError("no usable ping-pong samples")
    t_all = np.concatenate([p[1] for p in phase_data])
    th_all = np.concatenate([p[2] for p in phase_data])
    d_all = np.concatenate([p[3] for p in phase_data])
    t0 = int(np.median(t_all))
    # One point per phase: the median offset of its kept samples at their median time.
    px = np.array([float(np.median(p[1] - t0)) for p in phase_data])
    py = np.array([float(np.median(p[2])) for p in phase_data])
    drift = 0.0
    if len(phase_data) >= 2 and np.ptp(px) > 0:
        drift, a = np.polyfit(px, py, 1)
        drift, a = float(drift), float(a)
    else:
        a = float(np.median(th_all))
    resid = th_all - (a + drift * (t_all - t0).astype(np.float64))
    a_int = int(round(a))
    return PingPongFit(
        t0_ns=t0,
        offset_int_ns=coarse + a_int,
        offset_frac_ns=a - a_int,
        drift=drift,
        rtt_ns=float(d_all.max()),
        rtt_min_ns=float(d_all.min()),
        residual_ns=float(np.sqrt(np.mean(resid**2))),
        n_kept=int(th_all.size),
        n_samples=n_total,
        phases=tuple(p[0] for p in phase_data),
        phase_offsets_ns=tuple(float(y) + coarse for y in py),
    )


@dataclass(frozen=True)
class Leg:
    """One clock against another: ``dst_ns - src_ns = offset + drift * (src_ns - t0_ns)``.

    Fitted from an exchange between two clocks (:meth:`from_fit`, :func:`fit_anchor_leg`), or
    composed from such legs (:meth:`then`, :meth:`inverse`). The offset is an exact integer plus
    a fraction, so clocks that count from 1970 keep their nanoseconds. Between the calibration
    phases the leg is off by at most :attr:`bound_ns` (half the largest kept round trip plus
    the residual of the kept samples about the fit; for a composed leg, the sum over its parts).

    Attributes:
        name: what was measured (composed legs join their parts' names with " > ").
        t0_ns: the pivot, on the source clock.
        offset_int_ns, offset_frac_ns: ``dst - src`` at the pivot.
        drift: the destination clock's rate against the source's, minus 1.
        rtt_ns: largest kept round trip (bracket width for host anchors); summed when composed.
        rtt_min_ns: smallest round trip seen; summed when composed.
        residual_ns: RMS of the kept samples about the fit; summed when composed.
        n_kept, n_samples: samples kept and seen; summed when composed.
        parts: ``(name, bound_ns)`` of each measured leg, in order.
        phases: the calibration phases that went into it (drift needs two).
    """

    name: str
    t0_ns: int
    offset_int_ns: int
    offset_frac_ns: float = 0.0
    drift: float = 0.0
    rtt_ns: float = 0.0
    rtt_min_ns: float = 0.0
    residual_ns: float = 0.0
    n_kept: int = 0
    n_samples: int = 0
    parts: tuple = ()
    phases: tuple = ()

    @property
    def offset_ns(self) -> float:
        return self.offset_int_ns + self.offset_frac_ns

    @property
    def bound_ns(self) -> float:
        return self.rtt_ns / 2.0 + self.residual_ns

    def offset_at(self, src_ns: int) -> float:
        """``dst - src`` at source time ``src_ns`` (ns)."""
        return self.offset_int_ns + self.offset_frac_ns + self.drift * float(int(src_ns) - self.t0_ns)

    @classmethod
    def identity(cls, name: str, t0_ns: int = 0) -> "Leg":
        """A clock against itself (two ranks of one host share its clock)."""
        return cls(name=name, t0_ns=int(t0_ns), offset_int_ns=0, parts=((name, 0.0),))

    @classmethod
    def from_fit(cls, name: str, f: "PingPongFit") -> "Leg":
        """The leg of an NTP-style fit (source: the side that sent first)."""
        leg = cls(name=name, t0_ns=f.t0_ns, offset_int_ns=f.offset_int_ns, offset_frac_ns=f.offset_frac_ns, drift=f.drift,
                  rtt_ns=f.rtt_ns, rtt_min_ns=f.rtt_min_ns, residual_ns=f.residual_ns, n_kept=f.n_kept,
                  n_samples=f.n_samples, phases=tuple(f.phases))
        return _with_parts(leg, ((name, leg.bound_ns),))

    def inverse(self) -> "Leg":
        """The source clock against the destination clock (same bound)."""
        # at dst = t0 + offset_int, the source reads t0 - frac / (1 + drift)
        frac = -self.offset_frac_ns / (1.0 + self.drift)
        return Leg(name=self.name, t0_ns=self.t0_ns + self.offset_int_ns, offset_int_ns=-self.offset_int_ns,
                   offset_frac_ns=frac, drift=1.0 / (1.0 + self.drift) - 1.0, rtt_ns=self.rtt_ns,
                   rtt_min_ns=self.rtt_min_ns, residual_ns=self.residual_ns, n_kept=self.n_kept,
                   n_samples=self.n_samples, parts=self.parts, phases=self.phases)

    def then(self, other: "Leg") -> "Leg":
        """This leg (a -> b) followed by ``other`` (b -> c): the leg a -> c, its bounds summed."""
        gap = (self.t0_ns + self.offset_int_ns - other.t0_ns) + self.offset_frac_ns  # b at our pivot, from other's
        frac = self.offset_frac_ns + other.offset_frac_ns + other.drift * gap
        k = int(round(frac))
        return Leg(
            name=f"{self.name} > {other.name}", t0_ns=self.t0_ns,
            offset_int_ns=self.offset_int_ns + other.offset_int_ns + k, offset_frac_ns=frac - k,
            drift=(1.0 + self.drift) * (1.0 + other.drift) - 1.0,
            rtt_ns=self.rtt_ns + other.rtt_ns, rtt_min_ns=self.rtt_min_ns + other.rtt_min_ns,
            residual_ns=self.residual_ns + other.residual_ns, n_kept=self.n_kept + other.n_kept,
            n_samples=self.n_samples + other.n_samples, parts=self.parts + other.parts,
            phases=tuple(p for p in self.phases if p in other.phases) if self.phases and other.phases else self.phases or other.phases,
        )


def _with_parts(leg: Leg, parts: tuple) -> Leg:
    return Leg(**{**{k: getattr(leg, k) for k in leg.__dataclass_fields__}, "parts": parts})


def _tightest_anchors(anchor: Mapping, tick_hz: int, keep_fraction: float, min_keep: int):
    """The tightest-bracketed reads of one host anchor: ``(device ns, host middle ns, bracket
    width, reads seen)`` of the kept reads.

    Raises:
        ValueError: empty, mismatched or backwards anchors.
    """
    hb = _int_array(anchor, "host_before_ns", "host anchor")
    dt = _int_array(anchor, "dev_ticks", "host anchor")
    ha = _int_array(anchor, "host_after_ns", "host anchor")
    if not (hb.size == dt.size == ha.size) or hb.size == 0:
        raise ValueError(f"host anchor: need equal, non-zero numbers of reads (got {hb.size}, {dt.size}, {ha.size})")
    if (ha < hb).any():
        raise ValueError("host anchor: a host_after_ns is earlier than its host_before_ns")
    dev = ticks_to_ns(dt, tick_hz)
    width = (ha - hb).astype(np.float64)
    keep = _keep_best(width, keep_fraction, min_keep)
    return dev[keep], hb[keep] + (ha[keep] - hb[keep]) // 2, width[keep], int(hb.size)


def fit_anchor_leg(anchors: list[Mapping], tick_hz: int, *, name: str = "host anchor", keep_fraction: float = 0.25,
                   min_keep: int = 3) -> Leg:
    """A device clock against its host clock from launch-bracketed timer reads, phase by phase.

    Each read lies between the two host reads around it, so the middle of each bracket is off by
    at most half its width. Per phase the tightest brackets are kept; their median (host - device)
    at their median device time gives one point, and the line through the phases' points is the
    offset + drift (an offset alone with one phase).

    Args:
        anchors: one ``{"phase", "host_before_ns", "dev_ticks", "host_after_ns"}`` dict per phase.
        tick_hz: the device timer's rate.
        name: the leg's name.
        keep_fraction, min_keep: keep the reads with the tightest brackets, per phase.

    Returns:
        A :class:`Leg` from the device clock (ns) to the host clock; ``rtt_ns`` is the widest kept
        bracket, so :attr:`Leg.bound_ns` is half of it plus the residual.

    Raises:
        ValueError: no anchors, or malformed ones.
    """
    pts = []
    for a in anchors:
        dev, mid, width, _ = _tightest_anchors(a, tick_hz, keep_fraction, min_keep)
        pts.append((str(a.get("phase", f"set{len(pts)}")), dev, mid - dev, width))
    if not pts:
        raise ValueError("no host anchors")
    coarse = int(np.median(pts[0][2]))
    d_all = np.concatenate([p[1] for p in pts])
    phi_all = np.concatenate([(p[2] - coarse).astype(np.float64) for p in pts])
    w_all = np.concatenate([p[3] for p in pts])
    t0 = int(np.median(d_all))
    px = np.array([float(np.median(p[1] - t0)) for p in pts])
    py = np.array([float(np.median((p[2] - coarse).astype(np.float64))) for p in pts])
    drift = 0.0
    if len(pts) >= 2 and np.ptp(px) > 0:
        drift, a0 = (float(v) for v in np.polyfit(px, py, 1))
    else:
        a0 = float(np.median(phi_all))
    resid = phi_all - (a0 + drift * (d_all - t0).astype(np.float64))
    k = int(round(a0))
    leg = Leg(name=name, t0_ns=t0, offset_int_ns=coarse + k, offset_frac_ns=a0 - k, drift=drift, rtt_ns=float(w_all.max()),
              rtt_min_ns=float(w_all.min()), residual_ns=float(np.sqrt(np.mean(resid**2))), n_kept=int(d_all.size),
              n_samples=int(sum(np.asarray(a["dev_ticks"]).size for a in anchors)), phases=tuple(p[0] for p in pts))
    return _with_parts(leg, ((name, leg.bound_ns),))


@dataclass(frozen=True)
class HostAnchorFit:
    """``host_ns - device_ns = offset_ns + rate * (device_ns - dev0_ns)`` for one device."""

    dev0_ns: int
    offset_ns: int
    rate: float  # dimensionless host-minus-device rate
    bound_ns: float  # half-width of the best bracketing interval
    n_kept: int
    n_samples: int

    def host_at(self, dev_ns: int) -> int:
        return int(dev_ns) + self.offset_ns + int(round(self.rate * (int(dev_ns) - self.dev0_ns)))


def fit_host_anchor(anchor: Mapping, tick_hz: int, *, keep_fraction: float = 0.25, min_keep: int = 3) -> HostAnchorFit:
    """Fit host wall-clock time against one device's clock from bracketed timer reads.

    Args:
        anchor: ``{"host_before_ns": [...], "dev_ticks": [...], "host_after_ns": [...]}``: each
            device read happened between the two host reads around it.
        tick_hz: the device timer's rate.
        keep_fraction, min_keep: keep the reads with the tightest brackets.

    Raises:
        ValueError: empty, mismatched or backwards anchors.
    """
    dk, hm, width_kept, n = _tightest_anchors(anchor, tick_hz, keep_fraction, min_keep)
    phi = hm - dk  # int64, may be large
    coarse = int(np.median(phi))
    fine = (phi - coarse).astype(np.float64)
    dev0 = int(np.median(dk))
    x = (dk - dev0).astype(np.float64)
    rate = 0.0
    if np.ptp(x) >= _MIN_HOST_RATE_SPAN_NS:
        rate, a = np.polyfit(x, fine, 1)
        rate, a = float(rate), float(a)
    else:
        a = float(np.median(fine))
    return HostAnchorFit(
        dev0_ns=dev0,
        offset_ns=coarse + int(round(a)),
        rate=rate,
        bound_ns=float(np.median(width_kept)) / 2.0,
        n_kept=int(dk.size),
        n_samples=n,
    )


def _rank_tick_hz(rc) -> int:
    header_hz = None
    for ln in rc.launches:
        raw = np.asarray(ln.raw, dtype=np.uint8)
        if raw.nbytes >= schema.HEADER_BYTES:
            header_hz = int(np.frombuffer(raw[: schema.HEADER_BYTES].tobytes(), schema.HEADER_DTYPE)[0]["tick_hz"]) or None
            break
    return resolve_tick_hz(rc.device, header_hz)


def _samples(rc) -> dict:
    cs = rc.clock_samples
    if cs is None:
        return {}
    if not isinstance(cs, Mapping):
        raise ValueError(f"rank {rc.rank}: clock_samples must be a dict, got {type(cs).__name__}")
    return cs


#: What :func:`fit_clock` may be asked to prefer, per rank, where several paths were measured.
PREFER = ("auto", "pingpong", "host-chain", "host-anchor")


class _Chains:
    """The legs of a capture's chains, fitted once each (see :func:`fit_clock`)."""

    def __init__(self, samples: dict, hz: dict, ref: int, keep_fraction: float, min_keep: int, notes: list):
        self.samples, self.hz, self.ref, self.notes = samples, hz, ref, notes
        self.kw = {"keep_fraction": keep_fraction, "min_keep": min_keep}
        self.nodes = {r: str(cs["node"]) for r, cs in samples.items() if cs.get("node") is not None}
        self._gh: dict[int, Leg | None] = {}
        self._hx: dict[str, Leg | None] = {}

    def gpu_host(self, r: int) -> Leg | None:
        """Rank ``r``'s host clock -> its device clock: the pinned-memory exchange, else its anchors."""
        if r in self._gh:
            return self._gh[r]
        cs, leg = self.samples.get(r, {}), None
        gh = [g for g in (cs.get("gpu_host") or []) if g]
        if gh:
            try:
                leg = Leg.from_fit(f"gpu-host r{r} (pinned)", fit_pingpong(gh, 1_000_000_000, self.hz[r], **self.kw))
            except ValueError as e:
                self.notes.append(f"rank {r}: GPU<->host exchange not usable ({e}); its host anchors used instead")
        anchors = [a for a in (cs.get("host_anchors") or []) if a]
        if leg is None and anchors:
            try:
                leg = fit_anchor_leg(anchors, self.hz[r], name=f"gpu-host r{r} (launch)").inverse()
            except ValueError as e:
                raise ValueError(f"rank {r}: {e}") from None
        self._gh[r] = leg
        return leg

    def host(self, node: str) -> Leg | None:
        """The reference host's clock -> ``node``'s host clock (identity on the reference's node)."""
        if node in self._hx:
            return self._hx[node]
        leg = None
        if node == self.nodes.get(self.ref):
            leg = Leg.identity(f"host {node} (same host)")
        else:
            hx = [h for r, n in self.nodes.items() if n == node for h in (self.samples[r].get("host_exchange") or [])
                  if int(h.get("ref_rank", self.ref)) == self.ref]
            if hx:
                transport = hx[0].get("transport", "torch.distributed")
                name = f"host {node} vs {self.nodes.get(self.ref, '?')} ({transport})"
                try:
                    leg = Leg.from_fit(name, fit_pingpong(hx, 1_000_000_000, 1_000_000_000, **self.kw))
                except ValueError as e:
                    raise ValueError(f"host exchange of node {node}: {e}") from None
        self._hx[node] = leg
        return leg

    def chain(self, r: int) -> tuple[Leg, Leg | None] | None:
        """The reference device -> rank ``r``'s device through both hosts, and the host leg (None
        on the reference's host); None when a leg is missing."""
        node = self.nodes.get(r)
        if node is None or self.nodes.get(self.ref) is None:
            return None
        g_ref, hx, g_r = self.gpu_host(self.ref), self.host(node), self.gpu_host(r)
        if g_ref is None or hx is None or g_r is None:
            return None
        same = node == self.nodes[self.ref]
        leg = g_ref.inverse().then(g_r) if same else g_ref.inverse().then(hx).then(g_r)
        return leg, (None if same else hx)


def _pp_sets(cs: Mapping, ref_rank: int, *, checks: bool) -> list:
    return [s for s in (cs.get("pingpong") or []) if int(s.get("ref_rank", ref_rank)) == ref_rank and (checks or not s.get("check"))]


def fit_clock(capture, *, reference_rank: int | None = None, keep_fraction: float = 0.05, min_keep: int = 5,
              prefer: str = "auto") -> ClockModel:
    """Fit the clock model of a capture from its ranks' calibration samples.

    This is the entry point the collector uses; store the result with
    ``capture.clock = model.to_dict()``.

    Each rank takes the first path its samples allow, in this order (``prefer="auto"``): the
    ping-pong against the reference rank (``pingpong+drift``); the ping-pong against its node's
    reference rank, then that rank's map (``pingpong+host-chain``); the host chain
    (``host-chain``: its GPU against its host, its host against the reference host, the reference
    host against the reference GPU, see ``ktrace.clock.paths``); its own host anchor against the
    reference's, assuming one host clock (``host-anchor``, microsecond-level); else its raw device
    clock (``unaligned``, with a warning). The path is recorded per rank in ``RankClock.method``
    with its legs and bound.

    Args:
        capture: a ``ktrace.captures.Capture``.
        reference_rank: the rank others were measured against (default: the one the samples
            name, else the lowest rank).
        keep_fraction, min_keep: see :func:`fit_pingpong`.
        prefer: ``"auto"``; ``"pingpong"`` also uses ping-pongs recorded as checks (a simulation's
            ground truth); ``"host-chain"`` takes the host chain where a rank has one;
            ``"host-anchor"`` takes the host anchors where a rank has them (a comparison that
            ignores host-clock differences). Ranks without the preferred path take the usual order.

    Raises:
        ValueError: malformed samples (the message names the rank), or an unknown ``prefer``.
    """
    if prefer not in PREFER:
        raise ValueError(f"prefer must be one of {PREFER}, got {prefer!r}")
    ranks = dict(capture.ranks)
    samples = {r: _samples(rc) for r, rc in ranks.items()}
    named = {int(cs["reference_rank"]) for cs in samples.values() if cs.get("reference_rank") is not None}
    if not named:  # (captures before the host chain name it only in their ping-pong samples)
        named = {int(s["ref_rank"]) for cs in samples.values() for s in (cs.get("pingpong") or []) if "ref_rank" in s}
    if reference_rank is None:
        if len(named) > 1:
            raise ValueError(f"calibration samples name several reference ranks {sorted(named)}; pass reference_rank")
        reference_rank = named.pop() if named else (min(ranks) if ranks else 0)
    ref = int(reference_rank)
    hz = {r: _rank_tick_hz(rc) for r, rc in ranks.items()}
    notes: list[str] = []

    # reference -> host
    host = None
    ref_anchor = samples.get(ref, {}).get("host_anchor")
    if ref in ranks and ref_anchor:
        try:
            host = fit_host_anchor(ref_anchor, hz[ref])
        except ValueError as e:
            raise ValueError(f"rank {ref}: {e}") from None
    if host is None:
        notes.append(f"no host anchor on reference rank {ref}: the common clock is rank {ref}'s device clock")

    def ref_to_common(t_ref_ns: int) -> int:
        return host.host_at(t_ref_ns) if host else int(t_ref_ns)

    host_rate = host.rate if host else 0.0
    chains = _Chains(samples, hz, ref, keep_fraction, min_keep, notes)
    legs: dict[int, tuple[Leg, str, Leg | None]] = {}  # rank -> (reference device -> rank device, method, host leg)
    visiting: set[int] = set()

    def pingpong_leg(r: int, q: int, checks: bool) -> Leg | None:
        pp = _pp_sets(samples[r], q, checks=checks)
        if not pp:
            return None
        q_hz = int(pp[0].get("ref_tick_hz") or hz.get(q) or hz[r])
        try:
            f = fit_pingpong(pp, q_hz, hz[r], keep_fraction=keep_fraction, min_keep=min_keep)
        except ValueError as e:
            raise ValueError(f"rank {r}: {e}") from None
        if len(f.phases) < 2:
            notes.append(f"rank {r}: one calibration phase ({f.phases[0]}): offset only, drift not measured")
        return Leg.from_fit(f"pingpong r{q}-r{r}", f)

    def solve(r: int):
        """Rank r's leg from the reference device, its method and host leg; None if none."""
        if r in legs:
            return legs[r]
        if r == ref or r in visiting:
            return None
        visiting.add(r)
        via_q = sorted({int(s["ref_rank"]) for s in (samples[r].get("pingpong") or [])
                        if "ref_rank" in s and int(s["ref_rank"]) != ref and not s.get("check")})

        def direct_pp():
            leg = pingpong_leg(r, ref, checks=prefer == "pingpong")
            return (leg, "pingpong+drift" if len(leg.phases) >= 2 and leg.drift != 0.0 else "pingpong", None) if leg else None

        def via():
            for q in via_q:
                got = solve(q)
                leg = pingpong_leg(r, q, checks=False) if got else None
                if leg is not None:
                    return got[0].then(leg), "pingpong+host-chain" if "host-chain" in got[1] else got[1], got[2]
            return None

        def chain():
            got = chains.chain(r)
            return (got[0], "host-chain", got[1]) if got else None

        order = {"auto": (direct_pp, via, chain), "pingpong": (direct_pp, via, chain),
                 "host-chain": (chain, via, direct_pp), "host-anchor": (direct_pp, via, chain)}[prefer]
        found = None
        for step in order:
            found = step()
            if found is not None:
                break
        visiting.discard(r)
        if found is not None:
            legs[r] = found
        return found

    out: dict[int, RankClock] = {}
    ref_node = str(samples.get(ref, {}).get("node") or "")
    for r, rc in sorted(ranks.items()):
        cs = samples[r]
        node = str(cs.get("node") or "")
        if r == ref:
            pivot_dev = host.dev0_ns if host else 0
            out[r] = RankClock(rank=r, tick_hz=hz[r], pivot_dev_ns=pivot_dev, pivot_ns=ref_to_common(pivot_dev), scale=1.0 + host_rate,
                               method="reference", node=node)
            continue
        anchor = cs.get("host_anchor")
        if prefer == "host-anchor" and anchor and host is not None:
            out[r] = _anchor_clock(r, hz[r], anchor, host, host_rate, node, ref_node, notes)
            continue
        found = solve(r)
        if found is not None:
            leg, method, hx = found
            # peer_ns = ref_ns + offset + drift (ref_ns - t0)  =>  ref_ns = t0 + (peer_ns - (t0 + offset)) / (1 + drift)
            pivot_dev = leg.t0_ns + leg.offset_int_ns
            # the fraction of the offset left out of the integer pivot, moved to the common side
            pivot_common = ref_to_common(leg.t0_ns) - int(round(leg.offset_frac_ns))
            single = len(leg.parts) == 1  # (one ping-pong: stored as before the chain existed)
            out[r] = RankClock(
                rank=r, tick_hz=hz[r], pivot_dev_ns=pivot_dev, pivot_ns=pivot_common, scale=(1.0 + host_rate) / (1.0 + leg.drift),
                offset_ns=int(round(leg.offset_ns)), drift_ppm=leg.drift * 1e6, rtt_ns=leg.rtt_ns, rtt_min_ns=leg.rtt_min_ns,
                residual_ns=leg.residual_ns, n_kept=leg.n_kept, n_samples=leg.n_samples, method=method, node=node,
                legs=() if single else tuple((n, float(b)) for n, b in leg.parts),
                host_offset_ns=hx.offset_at(pivot_common) if hx is not None else math.nan,
                host_drift_ppm=hx.drift * 1e6 if hx is not None else math.nan,
            )
            if "host-chain" in method and len(leg.phases) < 2:
                notes.append(f"rank {r}: its host chain was measured in one calibration phase: offset only, drift not measured")
            continue
        if anchor and host is not None:
            out[r] = _anchor_clock(r, hz[r], anchor, host, host_rate, node, ref_node, notes)
            continue
        out[r] = RankClock(rank=r, tick_hz=hz[r], pivot_dev_ns=0, pivot_ns=0, rtt_ns=math.nan, rtt_min_ns=math.nan, residual_ns=math.nan,
                           method="unaligned", node=node)
        notes.append(f"rank {r}: no calibration samples: left on its own device clock (NOT aligned)")
        log.warning("rank %d has no clock calibration samples: its events are not aligned to the other ranks", r)

    notes += _chain_notes(out, samples, ref)
    methods = sorted({rc.method for r, rc in out.items() if r != ref})
    method = "+".join(methods) if len(methods) == 1 else ("mixed:" + ",".join(methods) if methods else "single-rank")
    return ClockModel(
        method=method,
        reference_rank=ref,
        anchor="host" if host else "device",
        ranks=out,
        host_drift_ppm=host_rate * 1e6,
        host_bound_ns=host.bound_ns if host else math.nan,
        notes=tuple(notes),
    )


def _anchor_clock(r: int, hz: int, anchor: Mapping, host: HostAnchorFit, host_rate: float, node: str, ref_node: str,
                  notes: list) -> RankClock:
    """Rank ``r`` through its own host anchor against the reference's, assuming one host clock.
    Across two known nodes nothing measured the hosts against each other: the bound is unknown."""
    try:
        h = fit_host_anchor(anchor, hz)
    except ValueError as e:
        raise ValueError(f"rank {r}: {e}") from None
    bound = h.bound_ns + host.bound_ns
    if node and ref_node and node != ref_node:
        notes.append(f"rank {r}: aligned through host time only, taking node {node}'s host clock for node {ref_node}'s "
                     "(not measured): its bound is unknown")
        bound = math.nan
    else:
        notes.append(f"rank {r}: no ping-pong samples; aligned through host time only (bound {bound:.0f} ns)")
    return RankClock(
        rank=r, tick_hz=hz, pivot_dev_ns=h.dev0_ns, pivot_ns=h.host_at(h.dev0_ns), scale=1.0 + h.rate,
        # both map to host time: device(r) - device(ref) at one host instant
        offset_ns=int(host.offset_ns - h.offset_ns),
        drift_ppm=(h.rate - host_rate) * 1e6, rtt_ns=2.0 * bound, n_kept=h.n_kept,
        n_samples=h.n_samples, method="host-anchor", node=node,
    )


def _chain_notes(out: dict, samples: dict, ref: int) -> list[str]:
    """What a reader should know about the host clocks behind chained ranks, and simulations."""
    from .hostclock import describe_host_clock

    notes = []
    chained = [r for r, rc in out.items() if "host-chain" in rc.method]
    if chained:
        seen: dict[str, int] = {}
        for r in [ref] + sorted(chained):
            node = out[r].node if r in out else ""
            if node and node not in seen and samples.get(r, {}).get("host_clock") is not None:
                seen[node] = r
                notes.append(f"node {node}: host clock {describe_host_clock(samples[r]['host_clock'])}")
    for r, cs in sorted(samples.items()):
        sk = cs.get("host_skew")
        if sk:
            notes.append(f"SIMULATION: rank {r}'s host timestamps carry an injected offset of {sk.get('offset_ns')} ns and "
                         f"drift of {sk.get('drift_ppm')} ppm (from {sk.get('origin_ns')} ns)")
        for n in cs.get("notes") or ():
            notes.append(f"rank {r}: {n}")
    return notes


def attach_clock(capture) -> ClockModel | None:
    """Fit the clock model of a (merged) capture from its ranks' calibration samples and store it
    in ``capture.clock``; returns it. A capture without samples keeps what it has (None returned).

    Raises:
        ValueError: malformed samples (the message names the rank).
    """
    if not any(rc.clock_samples for rc in capture.ranks.values()):
        return None
    model = fit_clock(capture)
    capture.clock = model.to_dict()
    return model


def clock_model_of(capture, *, refit: bool = False) -> ClockModel:
    """The capture's stored clock model, or one fitted from its samples (not stored).

    Args:
        capture: a ``ktrace.captures.Capture``.
        refit: ignore a stored model and fit again.
    """
    if capture.clock and not refit:
        model = ClockModel.from_dict(capture.clock)
        missing = sorted(set(capture.ranks) - set(model.ranks))
        if not missing:
            return model
        log.warning("stored clock model lacks ranks %s; fitting again", missing)
    return fit_clock(capture)
