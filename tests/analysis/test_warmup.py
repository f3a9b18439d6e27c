"""Warm-up apart: a kernel's first launch that ran cold is left out of the findings in one line
(``ktrace.analysis.warmup``), launches a capture marks as warm-up too, and ``--skip-warmup N``
chooses. The captures are GENERATED (``ktrace.captures.generate``): a healthy ring of 3 ranks
whose first launch ran cold (its work 1.55x) with rank 2 starting it 81 µs late."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ktrace.analysis import ReportConfig, build_report, report_json
from ktrace.captures import read_capture, write_capture
from ktrace.captures.generate import draw

from .claims import Raw, check

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cold(tmp_path_factory) -> Path:
    case = draw(30, "healthy")
    assert case.shape.cold > 1.5 and case.shape.cold_late[0] == 2 and case.shape.launches == 3
    return write_capture(tmp_path_factory.mktemp("warm") / "cold.ktrace", case.capture)


def _claims_hold(path, doc):
    raw = Raw(path, leave_out=doc["summary"]["warmup_launches"])
    return [m for f in doc["findings"] for c in f["claims"] for m in check(raw, c)]


def test_a_cold_first_launch_is_warm_up_in_one_line_not_a_cause(cold):
    rep = build_report(str(cold))
    doc = report_json(rep)
    assert doc["summary"]["warmup_launches"] == [0] and doc["summary"]["launches"] == 2
    assert doc["summary"]["healthy"] and doc["summary"]["verdict"].startswith("Nothing is wrong")
    warm = [f for f in doc["findings"] if f["kind"] == "warmup"]
    assert len(warm) == 1 and warm[0]["severity"] == "info"
    assert warm[0]["text"].startswith("warm-up: launch 0 of generated_ring lasted ") and "--skip-warmup 0" in warm[0]["text"]
    assert [c["kind"] for c in warm[0]["claims"]] == ["warmup_slower"]
    assert not _claims_hold(cold, doc)
    # the report's time 0 is still the capture's first event (launch 0's): its ranges open in the trace
    from ktrace.events import aligned_events

    assert rep.origin_ns < int(rep.trace.column("start_ns").min())  # (the analysed events start after launch 0)
    assert rep.origin_ns == int(aligned_events(read_capture(cold))["start_ns"].min())


def test_kept_with_skip_warmup_0_the_cold_launch_shows_its_causes(cold):
    """Without the rule the cold launch's late rank and slow work would be reported as causes:
    what the rule keeps out is there to keep out."""
    doc = report_json(build_report(str(cold), ReportConfig(skip_warmup=0)))
    assert doc["summary"]["warmup_launches"] == [] and doc["summary"]["launches"] == 3
    causes = [f for f in doc["findings"] if f["severity"] == "warning"]
    assert causes and causes[0]["kind"] == "late_launch" and causes[0]["data"]["rank"] == 2
    assert causes[0]["data"]["n_launches"] == 1 and "in 1 of 3 launches" in causes[0]["text"]
    assert not [f for f in doc["findings"] if f["kind"] == "warmup"]
    assert not _claims_hold(cold, doc)


def test_skip_warmup_n_leaves_each_kernels_first_n_launches_out(cold):
    doc = report_json(build_report(str(cold), ReportConfig(skip_warmup=2)))
    assert doc["summary"]["warmup_launches"] == [0, 1] and doc["summary"]["launches"] == 1
    warm = next(f for f in doc["findings"] if f["kind"] == "warmup")
    assert warm["text"] == ("warm-up: launches 0-1 left out of the findings (--skip-warmup 2: the first 2 launches "
                            "of each kernel).")
    with pytest.raises(ValueError):
        ReportConfig(skip_warmup=-1)
    with pytest.raises(ValueError):  # (nothing left to analyse: one clear error, no empty report)
        build_report(str(cold), ReportConfig(skip_warmup=3))


def test_launches_the_capture_marks_are_left_out(cold, tmp_path):
    cap = read_capture(cold)
    for rc in cap.ranks.values():
        for ln in rc.launches:
            ln.meta = {**(ln.meta or {}), "warmup": ln.index == 1}  # (marked: launch 1, not the cold 0)
    path = write_capture(tmp_path / "marked.ktrace", cap)
    doc = report_json(build_report(str(path)))
    assert doc["summary"]["warmup_launches"] == [1]
    warm = next(f for f in doc["findings"] if f["kind"] == "warmup")
    assert warm["text"] == "warm-up: launch 1 left out of the findings (the capture marks it as warm-up)."
    # (--skip-warmup 0 keeps every launch, marked or not)
    assert report_json(build_report(str(path), ReportConfig(skip_warmup=0)))["summary"]["warmup_launches"] == []


def test_the_session_marks_each_kernels_first_launches():
    from ktrace.session import Session

    s = Session(rank=0, world_size=1, warmup=2)
    s.launches = [SimpleNamespace(kernel=k) for k in ("a", "b", "a", "a", "b", "b", "c")]
    assert s._warmup_launches() == {0, 1, 2, 4, 6}
    assert Session(rank=0, world_size=1)._warmup_launches() == set()
    with pytest.raises(ValueError):
        Session(rank=0, world_size=1, warmup=-1)


def test_cli_skip_warmup(cold):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "ktrace.cli", "report", str(cold), "-q", *args], capture_output=True,
                              text=True, timeout=300, cwd=ROOT)

    r = run("--skip-warmup", "1", "-v")  # (-v: every finding in full; the first screen names causes only)
    assert r.returncode == 0, r.stderr
    assert "warm-up: launch 0 left out of the findings (--skip-warmup 1" in r.stdout
    assert "2 launches of generated_ring (and 1 warm-up launch left out)" in r.stdout
    bad = run("--skip-warmup", "-1")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) <= 2 and "Traceback" not in bad.stderr
