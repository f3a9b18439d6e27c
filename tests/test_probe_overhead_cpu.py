"""benchmarks/probe_overhead.py's phase sweep bookkeeping (CPU: no kernel runs here)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_overhead as po  # noqa: E402


def _rows(times: dict, handoffs: int = 1000) -> list[dict]:
    return [{"case": "ping-pong x500, phase sweep", "variant": v, "median_us": t, "handoffs": handoffs} for v, t in times.items()]


def test_phase_variants_cover_every_kind_and_delay():
    v = po._phase_variants([0, 50])
    assert v["untraced"] == {"DELAY": 0} and v["untraced @50"] == {"DELAY": 50}
    assert v["signals @0"] == {"WAITS": True, "NOTIFIES": True, "DELAY": 0}
    assert len(v) == 2 * 5


def test_phase_rows_average_over_delays():
    """A probe that moves the hand-off by +60 ns at one delay and -20 ns at the other costs +20 ns
    on average; the ratio is of the summed times."""
    delays = [0, 50]
    times = {"untraced": 1000.0, "untraced @50": 1100.0}
    for k in ("waits", "notifies", "signals", "all"):
        times[f"{k} @0"] = 1060.0  # +60 ns per hand-off (1000 hand-offs)
        times[f"{k} @50"] = 1080.0  # -20 ns
    out = {r["variant"]: r for r in po._phase_rows(_rows(times), delays)}
    assert set(out) == {"waits", "notifies", "signals", "all"}
    s = out["signals"]
    assert s["extra_ns_per_handoff"] == pytest.approx(20.0)
    assert s["ratio"] == pytest.approx((1060 + 1080) / (1000 + 1100))
    assert (s["extra_ns_min"], s["extra_ns_max"]) == (pytest.approx(-20.0), pytest.approx(60.0))  # the range over delays
    assert s["case"].endswith("mean over delays")


def test_phase_rows_refuse_a_missing_delay():
    times = {"untraced": 1000.0, "signals @0": 1010.0}
    with pytest.raises(KeyError):
        po._phase_rows(_rows(times), [0, 50])
