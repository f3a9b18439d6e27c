"""Probe densities: what a report says of waits whose releases a density does not record.

The capture: the healthy two-rank tile pipeline of the diagnosis scenarios
(``tests/fixtures/scenarios/healthy.ktrace``, real, 2 x H200: 768 flag waits, every one released
by a notify of the other rank), and the same capture with every NOTIFY record taken out of its buffers (CONSTRUCTED here, with
``ktrace.captures.synth.encode_buffer``: what a density that records only the waits, as the
all-reduce's ``probes="waits"``, keeps of those launches). The report must not call such waits'
time unexplained, must say whose releases are not recorded, and its claims must hold.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "scenarios" / "healthy.ktrace"


def _waits_only(path: Path, out: Path) -> Path:
    """``path`` with its NOTIFY records removed (constructed; see the module docstring)."""
    from ktrace import write_capture
    from ktrace.captures import read_capture
    from ktrace.captures.synth import encode_buffer
    from ktrace.schema import EventKind

    cap = read_capture(path)
    for r, rc in cap.ranks.items():
        for ln in rc.launches:
            d = ln.decode(r, cache=False)
            ev = d.events[d.events["kind"] != EventKind.NOTIFY]
            ln.raw = encode_buffer(ev, grid=tuple(ln.grid), capacity=ln.capacity, timer=d.header.timer, tick_hz=d.header.tick_hz)
    cap.meta["constructed"] = "tests/test_densities.py: the NOTIFY records of a real capture removed"
    return Path(write_capture(out, cap))


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    from ktrace.analysis import build_report

    waits_only = _waits_only(REAL, tmp_path_factory.mktemp("dens") / "waits_only.ktrace")
    return {"real": (REAL, build_report(str(REAL))), "waits_only": (waits_only, build_report(str(waits_only)))}


def test_waits_without_recorded_releases_are_the_densitys_not_unexplained(reports):
    from viewers.text import render_text

    _, real = reports["real"]
    _, wo = reports["waits_only"]
    s, r = wo.summary, real.summary
    assert s["waits"] == r["waits"] > 0
    # every wait of the constructed capture: its sender recorded no notify in that launch
    assert s["waits_notify_untraced"] == s["waits"] and s["waits_unreleased"] == 0
    assert s["release_untraced_ns"] == pytest.approx(s["wait_ns"]) and s["unexplained_ns"] == 0.0
    assert s["notify_untraced_kernels"] == ["tile_pipeline"]
    text = render_text(wo)
    assert (f"({s['waits_notify_untraced']} more on flags whose senders recorded no notify in that launch "
            "(tile_pipeline): a probe density that records the waits only)") in text
    assert "in waits whose releases this probe density does not record" in text
    # the real capture records both ends: nothing is put down to the density
    assert "waits_notify_untraced" not in r and "release_untraced_ns" not in r and r["waits_unreleased"] == 0
    assert "probe density" not in render_text(real).split("Waits:")[1].split("\n")[0]


def test_the_summarys_claims_hold_in_the_raw_events(reports):
    from ktrace.analysis import report_json
    from tests.analysis.claims import Raw, check

    path, rep = reports["waits_only"]
    doc = report_json(rep)
    kinds = [c["kind"] for c in doc["summary"]["claims"]]
    assert "notify_untraced" in kinds
    raw = Raw(path)
    false = [msg for c in doc["summary"]["claims"] for msg in check(raw, c)]
    assert not false, false
    # every wait is named (few enough to list), and the check can fail: the same claim against
    # the real capture, whose senders did notify
    c = next(c for c in doc["summary"]["claims"] if c["kind"] == "notify_untraced")
    assert len(c["values"]["events"]) == rep.summary["waits"]
    assert check(Raw(REAL), c)


def test_every_kernels_default_density_records_both_ends():
    """The all-reduce's default density records its notifies (it recorded only waits before:
    3,072 waits and no notify at 4 ranks); "waits" still records only the waits."""
    from instrumented_kernels.all_reduce import kernel as K

    assert K.AllReduceConfig(n=1).probes == "lean"
    for method, slots in (("one_shot", K._one_shot_slots), ("one_shot_push", K._push_slots), ("two_shot", K._two_shot_slots)):
        meta = {"WORLD": 4, "nprog": 8, "n": 8 * 1024, "BLOCK": 1024}
        phases = 2 if method == "two_shot" else 1
        lean, waits = slots(meta), slots(dict(meta, WAITS_ONLY=True))
        # one chunk per program: its span; per phase and peer a wait, and at lean a notify too (2 slots each)
        assert waits == phases * 3 * 2 + 1, method
        assert lean == 1 + phases * 3 * 4 + 1, method
