"""The comparison behind the host-chain simulation, shared by its GPU test and its CPU rehearsal.

A capture calibrated with every rank on a "node" of its own (``CalibrationConfig(node="sim{rank}")``)
aligns the ranks through the host chain; the heap ping-pong recorded beside it as a check
(``crosscheck=True``) is the ground truth; one rank's host timestamps carry an injected offset and
drift (``HostClockSkew``). :func:`compare` fits both models from the one capture and measures,
per chained rank: how far the chain places the rank from where the ping-pong does (over the
window between the two calibrations), against the bound the chain states; how well the host
exchange recovered the injected host offset and drift; and how far a fit that ignores host
clocks (host anchors only) lands, which shows the comparison can fail.
"""

from __future__ import annotations

import math

import numpy as np

from ktrace.clock import fit_clock
from ktrace.text import fmt_ns

#: Points of the window the error is evaluated at.
GRID = 201


def _window_ticks(cs: dict) -> tuple[int, int]:
    """Rank's device ticks between the end of the opening calibration and the start of the closing
    one (the traced work lies in between; every leg is interpolated there): the edges the
    calibration recorded, else the rank's own device samples' (a little wider)."""
    edges = cs.get("edges") or {}
    if "before" in edges and "after" in edges:
        return int(edges["before"]), int(edges["after"])
    before, after = [], []
    for s in cs.get("pingpong") or []:
        (before if s["phase"] == "before" else after).append((min(s["t2"]), max(s["t3"])))
    for s in cs.get("gpu_host") or []:
        (before if s["phase"] == "before" else after).append((min(s["t2"]), max(s["t3"])))
    for a in cs.get("host_anchors") or []:
        (before if a["phase"] == "before" else after).append((min(a["dev_ticks"]), max(a["dev_ticks"])))
    if not before or not after:
        raise AssertionError("the capture lacks an opening or a closing calibration on this rank")
    return max(hi for _, hi in before), min(lo for lo, _ in after)


def _host_gap_ns(cs: dict) -> float:
    """Reference-host nanoseconds between the two phases of a rank's host exchange (at least)."""
    hx = cs.get("host_exchange") or []
    b = [s for s in hx if s["phase"] == "before"]
    a = [s for s in hx if s["phase"] == "after"]
    if not a or not b:
        return math.nan
    return float(min(min(s["t1"]) for s in a) - max(max(s["t4"]) for s in b))


def compare(merged, skew) -> list[dict]:
    """Per chained rank, the chain against the ping-pong ground truth on capture ``merged``.

    Args:
        merged: the gathered capture (all ranks, both calibrations).
        skew: the ``HostClockSkew`` the run injected (None: host clocks untouched).

    Returns:
        One dict per rank aligned by ``host-chain``: ``rank``, ``method``, ``truth_method``,
        ``err_max_ns`` / ``err_mean_ns`` (chain minus ping-pong over the window), ``window_ns``,
        ``bound_ns`` (the chain's), ``truth_bound_ns``, ``legs``, ``host_offset_ns`` /
        ``host_offset_true_ns`` / ``host_bound_ns``, ``host_drift_ppm`` / ``host_drift_true_ppm`` /
        ``host_drift_bound_ppm``, ``anchor_err_ns`` (the host-anchor-only fit's error).
    """
    chain = fit_clock(merged, prefer="host-chain")
    truth = fit_clock(merged, prefer="pingpong")
    anchors = fit_clock(merged, prefer="host-anchor")
    ref = chain.reference_rank
    cr, tr = chain.rank(ref), truth.rank(ref)
    assert (cr.pivot_dev_ns, cr.pivot_ns, cr.scale) == (tr.pivot_dev_ns, tr.pivot_ns, tr.scale), "the models differ on the reference"
    out = []
    for r, rc in sorted(chain.ranks.items()):
        if rc.method != "host-chain":
            continue
        cs = merged.ranks[r].clock_samples
        lo, hi = _window_ticks(cs)
        ticks = np.linspace(lo, hi, GRID).astype(np.int64)
        err = (rc.to_common(ticks) - truth.rank(r).to_common(ticks)).astype(np.float64)
        a_err = (anchors.rank(r).to_common(ticks) - truth.rank(r).to_common(ticks)).astype(np.float64)
        host_leg = [b for name, b in rc.legs if name.startswith("host ")]
        host_bound = float(host_leg[0]) if host_leg else math.nan
        gap = _host_gap_ns(cs)
        row = {
            "rank": r, "method": rc.method, "truth_method": truth.rank(r).method,
            "err_max_ns": float(np.abs(err).max()), "err_mean_ns": float(err.mean()),
            "window_ns": float(hi - lo) * 1e9 / rc.tick_hz, "bound_ns": rc.error_bound_ns,
            "truth_bound_ns": truth.rank(r).error_bound_ns, "legs": rc.legs,
            "host_offset_ns": rc.host_offset_ns, "host_bound_ns": host_bound,
            "host_drift_ppm": rc.host_drift_ppm, "host_drift_bound_ppm": 2 * host_bound / gap * 1e6 if gap > 0 else math.nan,
            "host_offset_true_ns": skew.skew_at(rc.pivot_ns) if skew is not None and skew.rank == r else 0.0,
            "host_drift_true_ppm": skew.drift_ppm if skew is not None and skew.rank == r else 0.0,
            "anchor_method": anchors.rank(r).method, "anchor_err_ns": float(np.abs(a_err).max()),
        }
        out.append(row)
    return out


def lines(rows: list[dict]) -> list[str]:
    """What the tests print: one block per chained rank."""
    out = []
    for x in rows:
        legs = " + ".join(f"{name} {fmt_ns(b)}" for name, b in x["legs"])
        out += [
            f"rank {x['rank']}: host-chain vs ping-pong (ground truth, {x['truth_method']}, bound {fmt_ns(x['truth_bound_ns'])}): "
            f"error max {x['err_max_ns']:.0f} ns, mean {x['err_mean_ns']:.0f} ns over {x['window_ns'] / 1e9:.3f} s; "
            f"stated bound {x['bound_ns']:.0f} ns",
            f"rank {x['rank']}: chain legs: {legs}",
            f"rank {x['rank']}: host offset injected {x['host_offset_true_ns']:.0f} ns, recovered {x['host_offset_ns']:.0f} ns "
            f"(differ {x['host_offset_ns'] - x['host_offset_true_ns']:.0f} ns, host-leg bound {x['host_bound_ns']:.0f} ns); "
            f"drift injected {x['host_drift_true_ppm']:.3f} ppm, recovered {x['host_drift_ppm']:.3f} ppm "
            f"(bound {x['host_drift_bound_ppm']:.3f} ppm)",
            f"rank {x['rank']}: host anchors alone ({x['anchor_method']}, host clocks assumed equal): error max "
            f"{x['anchor_err_ns']:.0f} ns",
        ]
    return out


def check(rows: list[dict], *, injected: bool) -> list[str]:
    """The claims, as a list of failures (empty: all hold)."""
    bad = []
    if not rows:
        return ["no rank was aligned by the host chain"]
    for x in rows:
        r = x["rank"]
        if not x["truth_method"].startswith("pingpong"):
            bad.append(f"rank {r}: the ground truth is {x['truth_method']}, not a ping-pong")
        if not x["err_max_ns"] <= x["bound_ns"] + x["truth_bound_ns"]:
            bad.append(f"rank {r}: chain error {x['err_max_ns']:.0f} ns exceeds its bound {x['bound_ns']:.0f} ns "
                       f"(+ the ping-pong's {x['truth_bound_ns']:.0f} ns)")
        if not abs(x["host_offset_ns"] - x["host_offset_true_ns"]) <= x["host_bound_ns"]:
            bad.append(f"rank {r}: host offset recovered {x['host_offset_ns']:.0f} ns, injected {x['host_offset_true_ns']:.0f} ns, "
                       f"beyond the host leg's bound {x['host_bound_ns']:.0f} ns")
        if not abs(x["host_drift_ppm"] - x["host_drift_true_ppm"]) <= x["host_drift_bound_ppm"]:
            bad.append(f"rank {r}: host drift recovered {x['host_drift_ppm']:.3f} ppm, injected {x['host_drift_true_ppm']:.3f} ppm, "
                       f"beyond {x['host_drift_bound_ppm']:.3f} ppm")
        if injected and x["host_offset_true_ns"] and not x["anchor_err_ns"] > x["bound_ns"]:
            bad.append(f"rank {r}: ignoring the injected host offset gave an error of {x['anchor_err_ns']:.0f} ns, within the "
                       f"chain's bound {x['bound_ns']:.0f} ns: the comparison cannot tell a wrong chain from a right one")
    return bad
