"""ktrace's traces in the real Perfetto UI (a local build, offline) in headless Chromium.

The UI opens a trace the way a user's link does, and the test reads the UI's own state: the
visible time window, the trace's bounds, the track tree. Links made by ``ktrace open --report
--finding`` must land on the finding's range in both formats. Screenshots of the collapsed and
the expanded trace are kept in ``tests/artifacts/perfetto/`` (gitignored) to look at.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ktrace
from ktrace.cli import main
from ktrace.testing.perfetto import ui_unavailable_reason
from viewers.perfetto_open import finding_range, finding_windows

DATA = Path(ktrace.__file__).parent / "data"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts" / "perfetto"
REASON = ui_unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"the Perfetto UI cannot run here: {REASON}")


@pytest.fixture(scope="module")
def ui():
    from ktrace.testing.perfetto import PerfettoUI

    with PerfettoUI(width=1600, height=1000) as u:
        yield u


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    """The skewed all-to-all capture's traces (both formats) and its report JSON."""
    d = tmp_path_factory.mktemp("perfetto_ui")
    cap = str(DATA / "a2a_skewed_4xh200.ktrace")
    out = {}
    for suffix in (".pftrace", ".json"):
        out[suffix] = d / f"skewed{suffix}"
        assert main(["merge", cap, "-o", str(out[suffix])]) == 0
    out["report"] = d / "skewed.report.json"
    assert main(["report", cap, "--json", str(out["report"]), "-q"]) == 0
    return out


def _png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_ui_loads_the_trace_and_shows_it_whole(ui, skewed):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    state = ui.open(skewed[".pftrace"])
    assert state.trace_type == "proto" and state.loading_errors == () and state.import_errors == 0
    assert state.bounds[0] < state.bounds[1] and state.visible == state.bounds
    ranks = [t.name.split(" ·")[0] for t in state.tracks]
    assert sorted(ranks) == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert all(not t.expanded and len(t.children) > 100 for t in state.tracks)
    ui.show_sidebar(False)
    assert _png(ui.screenshot(ARTIFACTS / "skewed_pftrace_collapsed.png"))
    state = ui.expand()
    assert all(t.expanded for t in state.tracks)
    assert _png(ui.screenshot(ARTIFACTS / "skewed_pftrace_expanded.png"))
    first = state.tracks[0]
    assert ui.pin([first.name, first.children[1].name])
    assert ui.state().pinned == (first.children[1].name,)
    # the UI's own trace processor answers SQL; selecting a notify draws its arrows
    fan = ui.sql("select s.id, s.ts, count(*) n from slice s join flow f on f.slice_out = s.id group by s.id order by n desc limit 1")[0]
    assert fan["ts"] >= state.bounds[0]  # 64-bit timestamps come back exact
    state = ui.select_slice(fan["id"])
    assert state.selection["kind"] == "track_event" and state.selection["event"] == fan["id"]
    assert len(state.flows) == fan["n"] and all(f["begin"]["slice"] == fan["id"] for f in state.flows)
    assert _png(ui.screenshot(ARTIFACTS / "skewed_pftrace_notify_selected.png"))
    print(f"screenshots: {ARTIFACTS}")


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_finding_link_lands_on_its_range(ui, skewed, suffix):
    """``ktrace open --report R --finding N``'s window is what the UI then shows."""
    report = json.loads(skewed["report"].read_text())
    windows = finding_windows(report)
    assert windows  # the skewed capture's findings have time ranges
    n = max(windows, key=lambda k: windows[k][0])  # the latest one: furthest from the trace's start
    state = ui.open(skewed[suffix], window=windows[n])
    assert state.visible == windows[n]
    start, end = finding_range(report, n)
    assert state.visible[1] - state.visible[0] == end - start
    assert state.bounds[0] <= state.visible[0] < state.visible[1] <= state.bounds[1]
    if suffix == ".json":
        ui.show_sidebar(False)
        ui.screenshot(ARTIFACTS / "skewed_json_finding.png")


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_every_report_link_lands_on_its_finding(ui, tmp_path, suffix):
    """Each finding's own link in the report (made with the served trace's URL) opens the real UI
    at exactly the finding's range, clamped to the trace, with the ranks in rank order. The skip
    capture: its most findings, and a default rank order (by activity) of 3, 1, 2, 0. Every
    finding in the .pftrace, the first three in Chrome JSON (each opening reloads the UI: seconds)."""
    import re
    import urllib.parse

    from ktrace.analysis import ReportConfig, build_report, report_json
    from ktrace.links import link_range

    cap = str(DATA / "a2a_skip_4xh200.ktrace")
    trace = tmp_path / f"skip{suffix}"
    assert main(["merge", cap, "-o", str(trace)]) == 0
    ui.link(trace)  # (served from now on)
    trace_url = ui.server.trace_url(trace)
    rep = report_json(build_report(cap, ReportConfig(trace_url=trace_url)))
    end = rep["summary"]["trace_end_ns"]
    links = [(f, f["perfetto"]) for f in rep["findings"] if f["start_ns"] is not None]
    assert len(links) >= 5
    if suffix == ".json":
        links = links[:3]
    for f, link in links:
        assert link.startswith("https://ui.perfetto.dev/#!/?url=") and "startupCommands=" in link
        vis = tuple(int(x) for x in re.search(r"visStart=(\d+)&visEnd=(\d+)", link).groups())
        assert vis == link_range(f["start_ns"], f["end_ns"], end)
        state = ui.open_link(link.replace("https://ui.perfetto.dev", ui.server.ui_root), trace_url)
        assert state.visible == vis, (f["text"][:80], urllib.parse.unquote(link)[-200:])
        assert [t.name.split(" ·")[0] for t in state.tracks] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    if suffix == ".pftrace":
        ui.show_sidebar(False)
        ui.screenshot(ARTIFACTS / "skip_pftrace_first_finding.png")
