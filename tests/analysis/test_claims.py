"""Every claim of every finding, on every capture the project ships or records, holds in the raw events.

The captures: the bundled examples (``ktrace/data``), the diagnosis scenarios and every other
recorded capture under ``tests/fixtures``. Each finding's ``claims`` (and the summary's) are
re-checked by ``claims.check`` from the events decoded on their own (``ktrace.events``), never
from the analysis that made them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ktrace.analysis import build_report, report_json

from .claims import CHECKS, Raw, check

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(ROOT.glob("ktrace/data/*.ktrace")) + sorted(ROOT.glob("tests/fixtures/**/*.ktrace"))


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_claim_holds_in_the_raw_events(path):
    doc = report_json(build_report(str(path)))
    raw = Raw(path, leave_out=doc["summary"].get("warmup_launches", []))
    claims = [(f"finding {i} ({f['kind']})", c) for i, f in enumerate(doc["findings"], 1) for c in f["claims"]]
    claims += [("summary", c) for c in doc["summary"]["claims"]]
    false = [f"{where}: {c['kind']} {c['agents']}: {msg}" for where, c in claims for msg in check(raw, c)]
    assert not false, "\n".join(false)
    # every finding says something checkable (the two capture warnings, a partial capture and
    # ranks without clock calibration, are about the file, not its events)
    for f in doc["findings"]:
        assert f["claims"] or f["severity"] == "warning" and f["kind"] == "capture", f["text"]


def test_a_false_claim_is_caught():
    """The checks can fail: a claim altered by 50 % (or naming another program) is false."""
    path = ROOT / "tests/fixtures/scenarios/late_notifies.ktrace"
    doc = report_json(build_report(str(path)))
    raw = Raw(path)
    c = next(c for f in doc["findings"] for c in f["claims"] if c["kind"] == "held_back")
    assert check(raw, c) == []
    bigger = {**c, "values": {**c["values"], "magnitude_ns": c["values"]["magnitude_ns"] * 1.5}}
    assert check(raw, bigger)
    other = {**c, "agents": [[a[0], a[1], a[2] + 1, a[3]] for a in c["agents"]]}
    assert check(raw, other)
    assert check(raw, {"kind": "no_such_claim", "agents": [], "values": {}})


def test_every_claim_kind_has_a_check():
    from ktrace.analysis.causes import registry

    assert {m.KIND for m in registry.MODULES} <= {"hang", "late_launch", "late_start", "late_notifies", "straggler", "uneven_work",
                                                  "uneven_ranks", "slow_link"} | set(CHECKS)


def test_a_false_lane_claim_is_caught():
    """A lane holdup claim naming another lane, or a time half again as large, is false; so is a
    critical-path share over a segment moved to another lane of its program."""
    path = ROOT / "tests/fixtures/gluon/gluon_gemm_slow_loader.ktrace"
    doc = report_json(build_report(str(path)))
    raw = Raw(path)
    c = next(c for f in doc["findings"] for c in f["claims"] if c["kind"] == "lane_holdup")
    assert check(raw, c) == []
    assert check(raw, {**c, "values": {**c["values"], "worst_ns": c["values"]["worst_ns"] * 1.5}})
    assert check(raw, {**c, "agents": [[a[0], a[1], a[2], (a[3] + 1) % 3] for a in c["agents"]]})
    share = next(c for f in doc["findings"] for c in f["claims"] if c["kind"] == "region_share")
    assert check(raw, share) == []
    moved = [[p, l, a, b, (ln + 1) % 3] for p, l, a, b, ln in share["values"]["segments"]]
    assert check(raw, {**share, "values": {**share["values"], "segments": moved}})
