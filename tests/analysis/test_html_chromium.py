"""The HTML report opened in headless Chromium: it renders, runs with no console errors, and a
screenshot is kept as a test artifact (tests/analysis/artifacts/, gitignored; the path is printed).

The report is of a CONSTRUCTED capture (``ktrace.analysis.scenario``: one late rank, one
overloaded workgroup, one skipped notify), so every section of the page has content, and of a REAL
one (``tests/fixtures/scenarios/late_notifies.ktrace``, 2 x H200).
"""

from __future__ import annotations

import html as html_mod
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ktrace.analysis import Trace, build_diff, build_report
from ktrace.analysis import scenario
from ktrace.testing.perfetto.cdp import find_chromium

CHROMIUM = find_chromium()  # ($KTRACE_CHROMIUM, else the first on the PATH; None: not installed)
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def _chromium(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _console_errors(stderr: str) -> list[str]:
    # Chromium logs page console messages as 'CONSOLE(line)] "message"' / 'Uncaught ...'
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    from viewers.report import write_diff_html, write_html

    sc = scenario.Scenario(iters=3, late_rank=2, late_ns=30_000, work={(0, 4): 3}, skip=((3, 0, 6, 2),))
    tr = Trace(events=scenario.build(sc), regions=scenario.REGIONS, world_size=sc.world,
               kernels={(r, 0): "a2a_constructed" for r in range(sc.world)}, source="constructed capture")
    rep = build_report(tr)
    d = tmp_path_factory.mktemp("html")
    base = Trace(events=scenario.build(scenario.Scenario(iters=3)), regions=scenario.REGIONS, source="constructed base")
    real = build_report(Path(__file__).resolve().parents[1] / "fixtures" / "scenarios" / "late_notifies.ktrace")
    return (write_html(rep, d / "report.html"), write_diff_html(build_diff(base, tr), d / "diff.html"), rep,
            write_html(real, d / "real.html"))


def test_html_is_self_contained(pages):
    html, diff_html, rep, real = pages
    for page in (html, diff_html, real):
        text = page.read_text(encoding="utf-8")
        # nothing is fetched: no external scripts, styles, images or fonts (a heat map's pixels are an
        # inline data: image); the only links are the Perfetto links of the findings
        assert not re.search(r"<(script|link|img|image|use)[^>]+(src|href)=[\"'](?!#|data:)", text)
        assert not re.search(r"url\((?!#)", text) and "@import" not in text
        assert set(re.findall(r"https?://[^\"'<> ]+", text)) <= {u for u in re.findall(r"https?://[^\"'<> ]+", text)
                                                                if u.startswith("https://ui.perfetto.dev/")} | {
            "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink", "http://purl.org/dc/elements/1.1/",
            "http://creativecommons.org/ns#", "http://www.w3.org/1999/02/22-rdf-syntax-ns#"}
        # every plot is an SVG with its own coordinate system (drawn inside its box)
        plots = re.findall(r"<div class='plot'><svg[^>]*>", text)
        assert plots and all("viewBox=" in p for p in plots)
    text = html.read_text(encoding="utf-8")
    assert len(re.findall(r"<div class='plot'><svg", text)) >= 4  # causes, wait split, launch, heat maps, histogram
    for f in rep.findings:
        assert html_mod.escape(f.text, quote=True).split(".")[0] in text
    assert "view in Perfetto" in text and "ui.perfetto.dev" in text
    # the real capture: its first finding, its verdict and the launch plots are there
    rtext = real.read_text(encoding="utf-8")
    assert "rank 1 programs 2-5 notified late" in rtext and "1 cause worth fixing" in rtext
    assert len(re.findall(r"<div class='plot'><svg", rtext)) >= 6
    assert "<svg" in diff_html.read_text(encoding="utf-8")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed: install it (apt-get install -y chromium, or set KTRACE_CHROMIUM) to run the browser test")
@pytest.mark.parametrize("which", ["report", "diff", "real"])
def test_html_renders_in_headless_chromium(pages, which):
    html = {"report": pages[0], "diff": pages[1], "real": pages[3]}[which]
    url = html.resolve().as_uri()
    dom = _chromium("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-rendered="ok"' in dom.stdout, "the page's script reported errors or did not run"
    assert int(re.search(r'data-plots="(\d+)"', dom.stdout).group(1)) >= (4 if which == "report" else 1)
    assert _console_errors(dom.stderr) == []
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"{which}.png"
    if shot.exists():
        shot.unlink()
    res = _chromium(f"--screenshot={shot}", "--window-size=1300,5200", "--hide-scrollbars", url)
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 10_000
    assert _console_errors(res.stderr) == []
    shutil.copy(html, ARTIFACTS / html.name)
    print(f"screenshot: {shot}")
