"""What the probes cost a capture, and what injected delays did: the figures, checked and in words.

Two measurements are made on the GPU beside a capture (``ktrace.cost``) and kept in its
metadata:

``probe_cost``
    the user's step timed traced and untraced, alternately, after warm-up (``ktrace.measure_cost``,
    ``ktrace run`` by default): the ratio of the medians (traced / untraced) and its 95 %
    interval by a paired bootstrap (:func:`ratio_interval`: the pairs of one round resampled
    together, 2,000 times, with a fixed seed), the steps timed of each, the launches per step and
    the device.
``verify``
    per delay injected at the report's first finding (``ktrace.verify``): the time per launch it
    added, measured (difference of the medians with injection and without, its 95 % paired-bootstrap
    interval) against what the replay of the capture predicted for the same injection
    (``ktrace.analysis.verify``).

A capture is data from elsewhere: :func:`check_probe_cost` and :func:`check_verify` refuse a
value of the wrong type or out of range in one line (``captures.file`` calls them on reading).
The words (:func:`cost_text`, :func:`measured_lines`) are made here, once, for the terminal, the
HTML page and ``ktrace info``, from the report's summary alone (its ``measured`` part).
"""

from __future__ import annotations

import math

import numpy as np

from .text import fmt_ns, printable

#: What the interval is, in the capture and the report.
INTERVAL = "95 % paired bootstrap"
#: Resamples of the bootstrap.
BOOTSTRAP = 2000
#: Most steps a measurement keeps (what a capture may claim).
MAX_STEPS = 1_000_000
#: Most rows of ``verify`` a capture may hold.
MAX_VERIFY_ROWS = 64
#: Longest device name or label kept.
MAX_NAME = 200


def _boot_index(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(BOOTSTRAP, n))


def ratio_interval(traced, untraced, seed: int = 0) -> tuple[float, float, float]:
    """``(ratio, lo, hi)``: the ratio of the medians of two paired samples (round i of each
    timed side by side) and its 95 % interval by a paired bootstrap."""
    a, b = np.asarray(traced, np.float64), np.asarray(untraced, np.float64)
    if a.size != b.size or a.size < 2:
        raise ValueError("a ratio needs two paired samples of at least 2 values each")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(b > 0) and np.all(a > 0)):
        raise ValueError("timings must be positive and finite")
    idx = _boot_index(a.size, seed)
    r = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)
    lo, hi = np.percentile(r, [2.5, 97.5])
    est = float(np.median(a) / np.median(b))
    # (a percentile interval of a median need not hold the estimate on a lumpy sample: widened to it)
    return est, min(float(lo), est), max(float(hi), est)


def difference_interval(with_delay, without, seed: int = 0) -> tuple[float, float, float]:
    """``(difference, lo, hi)``: the medians' difference of two paired samples and its 95 %
    interval by a paired bootstrap."""
    a, b = np.asarray(with_delay, np.float64), np.asarray(without, np.float64)
    if a.size != b.size or a.size < 2:
        raise ValueError("a difference needs two paired samples of at least 2 values each")
    idx = _boot_index(a.size, seed)
    d = np.median(a[idx], axis=1) - np.median(b[idx], axis=1)
    lo, hi = np.percentile(d, [2.5, 97.5])
    est = float(np.median(a) - np.median(b))
    return est, min(float(lo), est), max(float(hi), est)


def cost_figures(traced_ns, untraced_ns, *, device: str, launches_per_step: int = 1, seed: int = 0) -> dict:
    """The ``probe_cost`` metadata of paired step times (ns): see the module docstring."""
    ratio, lo, hi = ratio_interval(traced_ns, untraced_ns, seed)
    return check_probe_cost({
        "ratio": ratio, "lo": lo, "hi": hi, "steps": int(np.asarray(traced_ns).size),
        "traced_ns": float(np.median(traced_ns)), "untraced_ns": float(np.median(untraced_ns)),
        "launches_per_step": int(launches_per_step), "device": str(device)[:MAX_NAME], "interval": INTERVAL,
    })


def _num(d: dict, key: str, lo: float, hi: float, where: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{where} {key} is not a number in [{lo:g}, {hi:g}] ({printable(repr(v))[:40]})")
    return float(v)


def _int(d: dict, key: str, lo: int, hi: int, where: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"{where} {key} is not an integer in [{lo}, {hi}] ({printable(repr(v))[:40]})")
    return v


def _name(d: dict, key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or len(v) > MAX_NAME:
        raise ValueError(f"{where} {key} is not a name of at most {MAX_NAME} characters")
    return v


def check_probe_cost(pc) -> dict:
    """A capture's ``probe_cost``, checked (ValueError naming the field otherwise)."""
    w = "probe_cost"
    if not isinstance(pc, dict):
        raise ValueError(f"{w} is a {type(pc).__name__}, not an object")
    ratio = _num(pc, "ratio", 0.01, 100.0, w)
    lo, hi = _num(pc, "lo", 0.01, 100.0, w), _num(pc, "hi", 0.01, 100.0, w)
    if not lo <= ratio <= hi:
        raise ValueError(f"{w}: its interval [{lo:g}, {hi:g}] does not hold its ratio {ratio:g}")
    _int(pc, "steps", 2, MAX_STEPS, w)
    _num(pc, "traced_ns", 0, 1e15, w)
    _num(pc, "untraced_ns", 1e-3, 1e15, w)
    _int(pc, "launches_per_step", 1, MAX_STEPS, w)
    _name(pc, "device", w)
    _name(pc, "interval", w)
    return pc


def check_verify(rows) -> list:
    """A capture's ``verify`` rows, checked (ValueError naming the field otherwise)."""
    if not isinstance(rows, list) or len(rows) > MAX_VERIFY_ROWS:
        raise ValueError(f"verify is not a list of at most {MAX_VERIFY_ROWS} rows")
    for i, r in enumerate(rows):
        w = f"verify row {i}"
        if not isinstance(r, dict):
            raise ValueError(f"{w} is a {type(r).__name__}, not an object")
        for k in ("finding", "site", "device"):
            _name(r, k, w)
        for k in ("kind", "where"):  # (optional)
            if k in r:
                _name(r, k, w)
        _int(r, "rank", 0, 1 << 16, w)
        _int(r, "program", -1, (1 << 31) - 1, w)
        progs = r.get("programs", [])
        if not isinstance(progs, list) or len(progs) > 64 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                    and 0 <= x < 1 << 31 for x in progs):
            raise ValueError(f"{w} programs is not a list of at most 64 program numbers")
        _int(r, "delay_ns", 0, 10 ** 9, w)
        _int(r, "steps", 2, MAX_STEPS, w)
        for k in ("predicted_ns", "measured_ns", "lo_ns", "hi_ns"):
            _num(r, k, -1e12, 1e12, w)
        if not r["lo_ns"] <= r["measured_ns"] <= r["hi_ns"]:
            raise ValueError(f"{w}: its interval does not hold its measurement")
    return rows


def within_spread(row: dict, rel: float = 0.10) -> bool:
    """Whether a prediction matches its measurement: inside the measured interval, or within
    ``rel`` of the measurement."""
    p, m = float(row["predicted_ns"]), float(row["measured_ns"])
    return row["lo_ns"] <= p <= row["hi_ns"] or abs(p - m) <= rel * abs(m)


def cost_bound_ns(pc: dict) -> float:
    """The most the probes may have added to each launch, by the interval: the interval's end
    farthest from 1, times the untraced time of a launch."""
    per_launch = pc["untraced_ns"] / max(int(pc["launches_per_step"]), 1)
    return max(abs(pc["hi"] - 1.0), abs(pc["lo"] - 1.0)) * per_launch


def cost_text(pc: dict) -> str:
    """``probes: +1.3 % ± 0.4 % on this kernel, 50 launches each, H100``."""
    pct, half = 100 * (pc["ratio"] - 1), 100 * (pc["hi"] - pc["lo"]) / 2
    unit = "launches" if int(pc["launches_per_step"]) == 1 else f"steps of {pc['launches_per_step']} launches"
    return (f"probes: {pct:+.1f} % ± {half:.1f} % on this kernel ({INTERVAL}), {pc['steps']} {unit} each, "
            f"{printable(pc['device'])}")


def verify_text(row: dict) -> str:
    """``predicted +X µs, measured +Y µs`` for one injected delay, and whether they agree."""
    ok = within_spread(row)
    miss = "" if ok else (f": the prediction MISSES by {fmt_ns(abs(row['predicted_ns'] - row['measured_ns']))}, beyond "
                          "the measurement's spread and 10 %")
    return (f"{printable(row['finding'])}: {fmt_ns(row['delay_ns'])} injected at rank {row['rank']} "
            f"{_programs_words(row)} ({printable(row['site'])}): "
            f"predicted {_signed(row['predicted_ns'])}, measured {_signed(row['measured_ns'])} per launch "
            f"[{_signed(row['lo_ns'])} .. {_signed(row['hi_ns'])}], {row['steps']} launches each{miss}")


def _programs_words(row: dict) -> str:
    progs = row.get("programs") or ([row["program"]] if row["program"] >= 0 else [])
    return "every program" if not progs else ("program " if len(progs) == 1 else "programs ") + ", ".join(map(str, progs))


def _signed(ns: float) -> str:
    return ("+" if ns >= 0 else "-") + fmt_ns(abs(ns))


def measured(meta: dict, findings: list) -> dict | None:
    """The report summary's ``measured`` part from a capture's metadata and the report's findings
    (each with ``kind`` and ``data.saving_per_launch_ns`` for a cause): the probe cost, which
    findings save no more than it (``within_cost``, 1-based positions), the checked predictions.
    None when the capture holds neither measurement."""
    pc, rows = (meta or {}).get("probe_cost"), (meta or {}).get("verify")
    if pc is None and not rows:
        return None
    out: dict = {}
    if pc is not None:
        bound = cost_bound_ns(pc)
        out["probe_cost"] = dict(pc, bound_ns=bound, text=cost_text(pc))
        out["within_cost"] = [i for i, f in enumerate(findings, 1)
                              if (f.get("data") or {}).get("saving_per_launch_ns") is not None
                              and float(f["data"]["saving_per_launch_ns"]) <= bound]
    if rows:
        out["verify"] = [dict(r, within=within_spread(r), text=verify_text(r)) for r in rows]
    return out


def capture_lines(meta: dict) -> list[str]:
    """What ``ktrace info`` prints of a capture's measurements (its metadata, checked on reading)."""
    meta = meta or {}
    out = [cost_text(meta["probe_cost"])] if meta.get("probe_cost") else []
    return out + [f"checked on the GPU: {verify_text(r)}" for r in meta.get("verify") or ()]


def measured_lines(summary: dict) -> list[str]:
    """The lines a report prints of its ``measured`` summary (none without one)."""
    m = (summary or {}).get("measured")
    if not m:
        return []
    lines = []
    if m.get("probe_cost"):
        pc = m["probe_cost"]
        lines.append(f"Probe cost: {pc['text']} (at most {fmt_ns(pc['bound_ns'])} per launch).")
        for i in m.get("within_cost") or ():
            lines.append(f"  finding {i} would save no more than the probes may have added (within the probes' own cost): "
                         "an effect of tracing as much as of the kernel")
    for r in m.get("verify") or ():
        lines.append(f"Checked on the GPU: {r['text']}")
    return lines


__all__ = ["INTERVAL", "capture_lines", "check_probe_cost", "check_verify", "cost_bound_ns", "cost_figures", "cost_text", "difference_interval",
           "measured", "measured_lines", "ratio_interval", "verify_text", "within_spread"]
