"""Warp-specialized programs (lanes, mbarrier hand-offs) of another shape than the project's own:
the report does not crash, names the slowed partition first, and every Gluon capture shipped
reports without error.

The crash of #36: a feeder partition arriving on an mbarrier per tile, an accumulator partition
waiting, the feeder slowed 25 µs on tiles 2..4, made ``ktrace report`` exit 2 ("shape mismatch:
value array of shape (384,) could not be broadcast to indexing result of shape (72,)",
``late_notifies.notify_rounds`` with lanes). Here the same program is GENERATED
(``ktrace.captures.generate.build``: 4 programs of 2 lanes, 8 tiles, 2 stages, 2 launches, one rank)
with the feeder held back (its arrives late: ``held``) or slowed in its copies (``straggler``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ktrace
from ktrace.analysis import build_report, report_json
from ktrace.captures import write_capture
from ktrace.captures.generate import Injected, Shape, build

from .claims import Raw, check

ROOT = Path(__file__).resolve().parents[2]
GLUON = sorted((ROOT / "tests" / "fixtures" / "gluon").glob("*.ktrace")) + sorted(
    (Path(ktrace.__file__).parent / "data" / "gluon").glob("*.ktrace"))
SHAPE = Shape("gluon", world=1, programs=4, lanes=2, rounds=8, launches=2, work_ns=10_000, stages=2)


@pytest.mark.parametrize("kind,finding", [("held", "late_notifies"), ("straggler", "straggler")])
def test_a_slowed_feeder_partition_is_named_first(kind, finding, tmp_path):
    inj = Injected(kind, rank=0, programs=(0, 1, 2, 3), lane=1, rounds=(2, 3, 4), launches=(0, 1), magnitude_ns=25_000,
                   region="ready")
    path = write_capture(tmp_path / f"{kind}.ktrace", build(SHAPE, inj, seed=7).capture)
    doc = report_json(build_report(str(path)))
    f = doc["findings"][0]
    assert f["kind"] == finding and f["severity"] == "warning", f["text"]
    d = f["data"]
    assert (d["rank"], d["programs"], d["lanes"], d["rounds"]) == (0, [0, 1, 2, 3], [1], [2, 3, 4]), f["text"]
    assert abs(d["magnitude_ns"] - 25_000) <= 2_500 and "rank 0 programs 0-3 lane 1 (load)" in f["text"]
    raw = Raw(path, leave_out=doc["summary"]["warmup_launches"])
    assert not [m for g in doc["findings"] for c in g["claims"] for m in check(raw, c)]


@pytest.mark.parametrize("path", GLUON, ids=lambda p: p.name)
def test_every_gluon_capture_shipped_reports(path):
    r = subprocess.run([sys.executable, "-m", "ktrace.cli", "report", str(path), "-q"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.startswith("ktrace report: "), r.stderr[-2000:]


def test_the_slowed_loader_is_named_first():
    for path in (p for p in GLUON if "slow_loader" in p.name):
        f = build_report(path).findings[0]
        assert f.kind == "lane_holdup" and f.data["partition"] == "load_partition" and f.severity == "warning", f.text
