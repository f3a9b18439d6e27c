"""What a newcomer found wrong on the bundled captures, each checked fixed: the wait-time
histogram's ticks, the launch plot's legend, a finding about uneven ranks that named none, a hang's
SMs, the critical path's words, a split trace of one part, example 07's files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ktrace
from ktrace.analysis import Trace, build_report, report_json
from ktrace.analysis import scenario
from ktrace.analysis.names import OUTSIDE
from ktrace.analysis.timeline import IN_CONTAINERS, critical_path, path_region_time

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(ktrace.__file__).parent / "data"
SCEN = ROOT / "tests" / "fixtures" / "scenarios"


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    pytest.importorskip("matplotlib")
    from viewers.report import write_html

    rep = build_report(SCEN / "late_notifies.ktrace")
    return write_html(rep, tmp_path_factory.mktemp("page") / "r.html").read_text(encoding="utf-8")


def test_wait_histogram_ticks_are_plain_text(page):
    hist = page[page.index("How long waits took"):]
    assert "mathdefault" not in page and "10^{" not in page
    # the log axis' decades written as times
    assert re.search(r">\s*(1\.0 µs|10\.0 µs|100 ns)\s*<", hist), "no plain-text tick labels on the histogram"


def test_launch_plot_legend_has_as_many_colours_as_the_plot(page):
    """The first finding's range is two dashed lines with their own legend entry: no translucent
    band over the fills (which showed the two legend colours as four)."""
    assert "#f1c40f" not in page  # (the band's colour)
    assert "the first finding&#39;s range" in page or "the first finding's range" in page
    assert "shaded" not in page


def test_uneven_ranks_always_names_its_heavy_ranks():
    """One rank of four working 1.3x as long (30 % more per tile) is uneven against the lightest
    (1 + min_excess) yet not a quarter above the mean of all four: it is named, never '(ranks )'."""
    sc = scenario.Scenario(world=4, programs=8, iters=4, late_rank=1, late_ns=3_000)
    tr = Trace(events=scenario.build(sc), regions=scenario.REGIONS, world_size=4,
               kernels={(r, 0): "a2a_constructed" for r in range(4)}, source="constructed capture")
    doc = report_json(build_report(tr))
    ur = [f for f in doc["findings"] if f["kind"] == "uneven_ranks"]
    assert ur and ur[0]["data"]["heavy"] == [1] and ur[0]["data"]["ranks"] == [1]
    assert "of rank 1 worked" in ur[0]["text"]
    assert not [f for f in doc["findings"] if "(ranks )" in f["text"] or "ranks )" in f.get("label", "")]


def test_a_hang_of_many_programs_says_on_how_many_sms():
    doc = report_json(build_report(DATA / "a2a_skip_4xh200.ktrace"))
    hang = doc["findings"][0]
    assert hang["kind"] == "hang" and "rank 0 programs 0-131 (on 132 SMs) waited" in hang["text"]
    one = report_json(build_report(SCEN / "hang.ktrace"))["findings"][0]
    assert re.search(r"rank 0 program 2 \(SM \d+\) waited", one["text"])


@pytest.mark.parametrize("name", ["late_notifies", "hang", "moe_skewed"])
def test_critical_path_segments_and_totals_speak_the_same_words(name):
    """Each run segment's region is one of the names the path's totals use (a leaf region,
    "waiting in '...'", (outside any region), (in notifies and enclosing spans))."""
    from ktrace.analysis import prepare

    tr = prepare(SCEN / f"{name}.ktrace")
    path = critical_path(tr)
    names, _ = path_region_time(tr, path)
    runs = path[path["kind"] == "run"]
    leaf = {tr.region_name(r) for r in tr.regions}
    for region in set(runs["region"].tolist()) - {""}:
        assert region in set(names.tolist()) | leaf | {OUTSIDE, IN_CONTAINERS} or region.startswith("waiting in '"), region


def test_no_hand_off_on_the_path_says_what_is_true():
    doc = report_json(build_report(ROOT / "tests" / "fixtures" / "flight_dump_h100.ktrace"))
    f = next(f for f in doc["findings"] if f["kind"] == "critical_path")
    assert "no hand-off on it in any of the 2 launches: the program that ended each last waited on no notify sent " \
           "after its wait began" in f["text"]
    assert "ran on its own" not in f["text"]
    assert [c["kind"] for c in f["claims"]][0] == "no_late_handoff"


def test_a_split_trace_of_one_part_says_one_part(tmp_path, capsys):
    from ktrace.captures import write_capture
    from ktrace.captures.synth import constructed_capture
    from ktrace.cli import main

    cap, _ = constructed_capture(world_size=2, programs=2, iters=1, seed=1, round_trips=64)
    src = write_capture(tmp_path / "c.ktrace", cap)
    assert main(["merge", str(src), "-o", str(tmp_path / "t.pftrace"), "--split"]) == 0
    out = capsys.readouterr().out
    assert "trace in 1 part (open the index" in out and "1 parts" not in out
    # an output named like an index is a trace, not read back as one
    assert main(["merge", str(src), "-o", str(tmp_path / "u.index.json")]) == 0


def test_example_07_reads_its_capture_from_the_package_and_writes_its_own_folder(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "07_trace_a_gluon_kernel.py"), "--from-capture"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ktrace-example-07" / "gluon_gemm.pftrace").is_file()
    assert not (tmp_path / "ktrace-example-06").exists()
    assert f"ktrace report {DATA / 'gluon' / 'gluon_gemm_slow_loader_1xh100.ktrace'}" in r.stdout
    assert "tests/fixtures" not in (ROOT / "examples" / "07_trace_a_gluon_kernel.py").read_text()
