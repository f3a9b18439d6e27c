"""The probes' measured cost and the checked predictions in a capture (``ktrace.probe_cost``):
figures, validation of hostile values, the report's sentence and the findings within the cost."""

import json
import subprocess
import sys

import numpy as np
import pytest

from ktrace import probe_cost as P
from ktrace.analysis.report import build_report
from viewers.text import render_text
from ktrace.captures import generate as G
from ktrace.captures.file import CaptureError, read_capture, write_capture


def _timings(ratio: float, n: int = 50, seed: int = 1):
    rng = np.random.default_rng(seed)
    base = 100_000 * (1 + 0.01 * rng.standard_normal(n))
    return base * ratio * (1 + 0.002 * rng.standard_normal(n)), base


def test_ratio_and_interval_hold_the_true_ratio():
    traced, untraced = _timings(1.03)
    r, lo, hi = P.ratio_interval(traced, untraced)
    assert lo < 1.03 < hi and abs(r - 1.03) < 0.005 and hi - lo < 0.01
    assert P.ratio_interval(traced, untraced) == (r, lo, hi)  # (a fixed seed: the same figures again)
    d, dlo, dhi = P.difference_interval(traced, untraced)
    assert dlo <= d <= dhi and abs(d - 3_000) < 600
    # a lumpy sample (two values): the interval still holds the estimate, as a capture's must
    for f in (P.ratio_interval, P.difference_interval):
        est, lo, hi = f([1.0, 1, 1, 5, 5, 5], [1.0] * 6)
        assert lo <= est <= hi
    with pytest.raises(ValueError):
        P.ratio_interval([1.0], [1.0])
    with pytest.raises(ValueError):
        P.ratio_interval([1.0, 2.0], [0.0, 1.0])


def test_cost_text_states_ratio_spread_count_and_device():
    pc = P.cost_figures(*_timings(1.013), device="NVIDIA H100 80GB HBM3")
    text = P.cost_text(pc)
    assert text.startswith("probes: +1.3 % ± ") and "50 launches each, NVIDIA H100 80GB HBM3" in text
    pc3 = P.cost_figures(*_timings(1.013), device="H100", launches_per_step=3)
    assert "50 steps of 3 launches each" in P.cost_text(pc3)


HOSTILE = [
    ("ratio", "1.5", "ratio is not a number"),
    ("ratio", float("nan"), "ratio is not a number"),
    ("lo", 5.0, "does not hold its ratio"),
    ("steps", 2 ** 40, "steps is not an integer"),
    ("steps", True, "steps is not an integer"),
    ("device", "x" * 10_000, "device is not a name"),
    ("launches_per_step", -1, "launches_per_step is not an integer"),
]


@pytest.mark.parametrize("key,value,words", HOSTILE, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(HOSTILE)])
def test_hostile_probe_cost_is_refused_in_one_line(tmp_path, key, value, words):
    cap = G.draw(4).capture
    cap.meta["probe_cost"] = dict(P.cost_figures(*_timings(1.02), device="H100"), **{key: value})
    path = write_capture(tmp_path / "c.ktrace", cap)
    with pytest.raises(CaptureError, match=words):
        read_capture(path)
    out = subprocess.run([sys.executable, "-m", "ktrace.cli", "info", str(path)], capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and words in out.stderr


def test_hostile_verify_rows_are_refused():
    good = {"finding": "f", "site": "notify", "device": "H100", "rank": 0, "program": -1, "delay_ns": 10_000,
            "steps": 20, "predicted_ns": 9_000.0, "measured_ns": 9_500.0, "lo_ns": 9_000.0, "hi_ns": 10_000.0}
    assert P.check_verify([good]) == [good]
    for bad in ([dict(good, measured_ns=20_000.0)], [dict(good, rank="0")], [dict(good, kind=5)], [good] * 100, "rows", [1]):
        with pytest.raises(ValueError):
            P.check_verify(bad)


def _report_with_cost(tmp_path, bound_per_launch_ns: float):
    """A generated capture (a held-back notify) with a probe cost whose bound is ``bound_per_launch_ns``."""
    case = G.build(*_held_case())
    untraced = np.full(40, 200_000.0)
    rel = bound_per_launch_ns / 200_000.0
    traced = untraced * (1 + rel)
    traced[::2] *= 1 + 1e-9  # (a spread of (almost) nothing: the bound is the ratio's own)
    case.capture.meta["probe_cost"] = P.cost_figures(traced, untraced, device="H100")
    path = write_capture(tmp_path / f"c{int(bound_per_launch_ns)}.ktrace", case.capture)
    return build_report(read_capture(path))


def _held_case():
    case = next(c for c in (G.draw(s, "held") for s in range(3, 40)) if c.shape.pattern in ("ring", "pairs"))
    return case.shape, case.injected, case.seed


def test_a_finding_smaller_than_the_probe_cost_is_marked_and_a_larger_one_is_not(tmp_path):
    rep0 = build_report(G.build(*_held_case()).capture)
    top = rep0.findings[0]
    assert top.kind in ("late_notifies", "straggler")
    saving = top.data["saving_per_launch_ns"]
    big = _report_with_cost(tmp_path, 2 * saving)  # the probes may have added more than the finding saves
    small = _report_with_cost(tmp_path, 0.5 * saving)
    assert 1 in big.summary["measured"]["within_cost"]
    assert 1 not in small.summary["measured"]["within_cost"]
    assert big.summary["measured"]["probe_cost"]["bound_ns"] > saving > small.summary["measured"]["probe_cost"]["bound_ns"]
    text = render_text(big)
    assert "Probe cost: probes: +" in text and "finding 1 would save no more than the probes may have added" in text
    assert "finding 1 would save" not in render_text(small)
    # the JSON document carries it under one key, and its text renders the same from it
    from ktrace.analysis.report import report_json

    doc = json.loads(json.dumps(report_json(big)))
    assert render_text(doc) == text
    from viewers.report import render_html

    assert "probes: +" in render_html(doc)


def test_a_capture_without_measurements_has_no_measured_key():
    rep = build_report(G.build(*_held_case()).capture)
    assert "measured" not in rep.summary and "Probe cost" not in render_text(rep)


def test_info_states_the_probe_cost_and_the_checked_predictions(tmp_path):
    cap = G.draw(4).capture
    cap.meta["probe_cost"] = P.cost_figures(*_timings(1.02), device="NVIDIA H100")
    cap.meta["verify"] = [{"finding": "rank 1 notified late", "kind": "late_notifies", "site": "notify", "device": "NVIDIA H100",
                           "rank": 1, "program": -1, "programs": [], "delay_ns": 10_000, "steps": 20, "predicted_ns": 13_000.0,
                           "measured_ns": 9_500.0, "lo_ns": 9_000.0, "hi_ns": 10_000.0}]
    path = write_capture(tmp_path / "c.ktrace", cap)
    out = subprocess.run([sys.executable, "-m", "ktrace.cli", "info", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "  probes: +2.0 % ± " in out.stdout and "50 launches each, NVIDIA H100" in out.stdout
    assert "predicted +13.0 µs, measured +9.5 µs per launch" in out.stdout and "the prediction MISSES by 3.5 µs" in out.stdout
