"""A report read in ten seconds: the first screen of every bundled capture and of one capture per
cause kind, in HTML (headless Chromium at 1400 x 900) and in the terminal (100 x 40).

Captures: every bundled one (``ktrace/data``), the real scenario captures of a hang, a late launch,
late notifies, a heavy workgroup and uneven ranks (2 x H200, ``tests/fixtures/scenarios``), a
healthy one, and SYNTHETIC generated ones (``ktrace.captures.generate``, labelled so in the ids)
for the kinds no real capture holds first: a straggler and a slow link. The lane hold-up is the
bundled Gluon capture's. A late program start has no capture whose first finding it is.

Checked: the verdict, at most three headlines and the first finding's picture lie inside the
viewport; at most 120 words are visible above the fold (every text, the picture's labels too);
the first screen's parts and the picture's texts do not overlap; every colour a picture draws is
in its legend with that colour (and nothing else is); the culprit is marked and every arrow ends
on a wait the culprit caused, at that wait's end. In the terminal: the verdict and the headlines in
the first 40 lines, every line at most 100 columns, colour only on a terminal without NO_COLOR.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ktrace.analysis import build_report, report_json
from ktrace.captures import write_capture
from ktrace.captures.generate import draw

from . import first_screen as fs

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "ktrace" / "data"
SCEN = ROOT / "tests" / "fixtures" / "scenarios"
BUNDLED = sorted(DATA.glob("*.ktrace")) + sorted((DATA / "gluon").glob("*.ktrace"))
REAL = {"hang": SCEN / "hang.ktrace", "late_launch": SCEN / "late_launch.ktrace",
        "late_notifies": SCEN / "late_notifies.ktrace", "uneven_work": SCEN / "heavy_workgroup.ktrace",
        "uneven_ranks": SCEN / "moe_skewed.ktrace", "healthy": SCEN / "healthy.ktrace"}
#: (kind, seed) of the generated cases: the first finding of each is of that kind
SYNTHETIC = {"straggler": 1, "slow_link": 1}
CASES = ([f"bundled:{p.relative_to(DATA)}" for p in BUNDLED] + [f"real:{k}" for k in REAL]
         + [f"synthetic:{k}" for k in SYNTHETIC])
WHY_KEYS = ("producer not started", "producer itself waiting", "producer working", "producer outside any region",
            "missing signal (gave up)", "signal trip", "unexplained")


def _capture(case: str, tmp: Path) -> Path:
    src, name = case.split(":", 1)
    if src == "bundled":
        return DATA / name
    if src == "real":
        return REAL[name]
    path = tmp / f"synthetic_{name}.ktrace"
    if not path.exists():
        write_capture(path, draw(SYNTHETIC[name], name).capture)
    return path


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Per case: its document and its HTML page (made once)."""
    from viewers.report import write_html

    tmp = tmp_path_factory.mktemp("first_screen")
    out = {}
    for case in CASES:
        rep = build_report(_capture(case, tmp))
        doc = json.loads(json.dumps(report_json(rep)))  # (what a page is made from: the JSON)
        page = write_html(doc, tmp / (re.sub(r"\W", "_", case) + ".html"))
        out[case] = (doc, page)
    return out


def _first_svg(page: Path) -> str:
    m = re.search(r"<figure class='picture' id='picture'>.*?(<svg.*?</svg>)", page.read_text(encoding="utf-8"), re.S)
    return m.group(1) if m else ""


def _nums(attr: str, tag: str) -> float:
    return float(re.search(rf"{attr}='([-\d.]+)'", tag).group(1))


def test_the_cases_cover_every_kind_they_name(pages):
    """Each case of a kind has a first finding of that kind (the synthetic ones are drawn so)."""
    for case, (doc, _page) in pages.items():
        src, name = case.split(":", 1)
        first = doc["findings"][0]["kind"] if doc["findings"] else None
        if src in ("real", "synthetic") and name != "healthy":
            assert first == name, (case, first)
    kinds = {d["findings"][0]["kind"] for d, _ in pages.values() if d["findings"] and not d["summary"]["healthy"]}
    assert {"hang", "late_launch", "late_notifies", "uneven_work", "straggler", "slow_link", "lane_holdup"} <= kinds


@pytest.mark.skipif(fs.find_chromium() is None, reason="Chromium is not installed (apt-get install chromium, or set KTRACE_CHROMIUM)")
@pytest.mark.parametrize("case", CASES)
def test_html_first_screen(pages, case):
    doc, page = pages[case]
    m = fs.measure(page)
    vw, vh = m["vw"], m["vh"]
    assert (vw, vh) == (fs.WIDTH, fs.HEIGHT)
    assert fs.inside(m["verdict"], vw, vh), m["verdict"]
    from viewers.headlines import first

    want = first(doc)
    assert len(m["headlines"]) == len(want) <= 3
    assert all(fs.inside(b, vw, vh) for b in m["headlines"]), m["headlines"]
    words = fs.words(m)
    assert len(words) <= 120, (len(words), " ".join(words))
    assert fs.overlaps(m["boxes"]) == [], m["boxes"]
    texts = [t[:4] for t in m["svg_text"] if t[2] > t[0]]
    assert fs.overlaps(texts) == [], [m["svg_text"][i][4] + " / " + m["svg_text"][j][4] for i, j in fs.overlaps(texts)]
    if not want:  # nothing to fix: no picture of a culprit
        assert doc["summary"]["healthy"] and m["picture"] is None
        return
    assert m["picture"] is not None and fs.inside(m["picture"], vw, vh), m["picture"]
    print(f"{case}: {len(words)} words above the fold")


@pytest.mark.parametrize("case", CASES)
def test_pictures_mark_the_culprit_and_arrows_reach_its_waits(pages, case):
    doc, page = pages[case]
    text = page.read_text(encoding="utf-8")
    views = doc["views"].get("findings") or {}
    svgs = re.findall(r"<svg xmlns='http://www.w3.org/2000/svg' class='swimlanes'.*?</svg>", text, re.S)
    assert len(svgs) == len(views) + (1 if _first_svg(page) else 0)
    for svg in svgs:
        assert fs.legend_mismatches(svg) == [], fs.legend_mismatches(svg)
    svg = _first_svg(page)
    if not svg:
        assert doc["summary"]["healthy"]
        return
    from viewers.headlines import first

    view = views[str(doc["findings"].index(first(doc)[0]))]
    assert "data-mark='culprit'" in svg and len(re.findall(r"data-mark='culprit'", svg)) == len(view["culprit"]["row"]) > 0
    caused = [t for t in re.findall(r"<rect data-key='([^']*)'([^>]*)>", svg) if t[0] in WHY_KEYS]
    arrows = re.findall(r"<path data-key='arrow' d='M[-\d.]+,[-\d.]+ C[-\d.]+,[-\d.]+ [-\d.]+,[-\d.]+ ([-\d.]+),([-\d.]+)'", svg)
    assert len(arrows) == len(view["arrows"]["from_row"])
    for x, y in arrows:  # each ends at the right end of a caused wait, inside its bar
        x, y = float(x), float(y)
        hit = [a for _k, a in caused if abs(_nums("x", a) + _nums("width", a) - x) <= 1.0
               and _nums("y", a) - 0.5 <= y <= _nums("y", a) + _nums("height", a) + 0.5]
        assert hit, (case, x, y)
    # a hang's dashed arrows (the notify never sent) end where a wait that gave up ended
    gave_up = [a for k, a in re.findall(r"<rect data-key='([^']*)'([^>]*)>", svg) if k == "hung wait: no signal came"]
    missing = re.findall(r"<path data-key='missing' d='M[-\d.]+,[-\d.]+ C[-\d.]+,[-\d.]+ [-\d.]+,[-\d.]+ ([-\d.]+),([-\d.]+)'", svg)
    assert len(missing) == len(view.get("missing", {}).get("from_row", []))
    assert bool(missing) == (doc["findings"][0]["kind"] == "hang")
    for x, y in missing:
        x, y = float(x), float(y)
        assert [a for a in gave_up if abs(_nums("x", a) + _nums("width", a) - x) <= 1.0
                and _nums("y", a) <= y <= _nums("y", a) + _nums("height", a)], (case, x, y)


@pytest.mark.parametrize("case", CASES)
def test_terminal_first_screen(pages, case):
    from viewers.headlines import first, headline
    from viewers.terminal import COLUMNS, render

    doc, _page = pages[case]
    text = render(doc)
    lines = fs.terminal_lines(text)
    assert all(len(ln) <= COLUMNS for ln in text.splitlines()), max(text.splitlines(), key=len)
    assert "\x1b" not in text
    screen = "\n".join(lines)
    assert doc["summary"]["verdict"].split(";")[0][:60] in " ".join(ln.strip() for ln in lines)
    top = first(doc)
    assert len(top) <= 3
    for f in top:
        h = headline(f)
        assert len(h) <= 100
        assert h.split(" · ")[0] in screen
    assert len(text.splitlines()) <= 40


def _run_tty(args: list[str], env: dict) -> str:
    """``ktrace`` with its stdout a terminal (a pty), its output as read."""
    import pty

    main, sub = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "ktrace.cli", *args], stdout=sub, stderr=subprocess.DEVNULL, cwd=ROOT,
                         env=env)
    os.close(sub)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=300)
    os.close(main)
    return out.decode("utf-8", "replace")


def test_terminal_colour_only_on_a_tty_without_no_color():
    cap = str(DATA / "a2a_skewed_4xh200.ktrace")
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    piped = subprocess.run([sys.executable, "-m", "ktrace.cli", "report", "-q", cap], capture_output=True, text=True,
                           cwd=ROOT, env=env, timeout=300)
    assert piped.returncode == 0 and "\x1b" not in piped.stdout
    assert "How to read this report: docs/reading-a-report.md" in piped.stdout
    tty = _run_tty(["report", "-q", cap], env)
    assert "\x1b[" in tty and "rank 0 launched 11.8 µs late" in tty
    plain = _run_tty(["report", "-q", cap], env | {"NO_COLOR": "1"})
    assert "\x1b" not in plain and "rank 0 launched 11.8 µs late" in plain
    # -v: every finding's paragraph (the full text)
    full = subprocess.run([sys.executable, "-m", "ktrace.cli", "report", "-q", "-v", cap], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert "rank 0 launched late: it started 11.8 µs after rank 3" in full.stdout and "Findings (" in full.stdout


def test_the_guide_is_in_the_page(pages):
    _doc, page = pages["bundled:a2a_skewed_4xh200.ktrace"]
    text = page.read_text(encoding="utf-8")
    assert "href='#guide'" in text and "<section id='guide'>" in text
    assert "How a saving is priced" in text and "What summed wait time is" in text


def test_the_guide_shows_the_terminal_first_screen_as_it_is(pages):
    """docs/reading-a-report.md quotes the bundled capture's terminal first screen: word for word."""
    from viewers.terminal import render

    doc, _page = pages["bundled:a2a_skewed_4xh200.ktrace"]
    guide = (ROOT / "docs" / "reading-a-report.md").read_text(encoding="utf-8")
    quoted = re.search(r"```\n(ktrace report: .*?)\n```", guide, re.S).group(1)
    assert quoted == render(doc).replace(str(DATA / "a2a_skewed_4xh200.ktrace"), "ktrace/data/a2a_skewed_4xh200.ktrace")


def test_diff_first_screen_in_the_terminal():
    a, b = str(SCEN / "healthy.ktrace"), str(SCEN / "late_notifies.ktrace")
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    short = subprocess.run([sys.executable, "-m", "ktrace.cli", "diff", "-q", a, b], capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=300)
    assert short.returncode == 0 and "\x1b" not in short.stdout
    lines = short.stdout.splitlines()
    assert all(len(ln) <= 100 for ln in lines) and len(lines) <= 40
    assert "1. 'tile_wait' on rank 0: 794.0 µs more per launch" in short.stdout
    full = subprocess.run([sys.executable, "-m", "ktrace.cli", "diff", "-q", "-v", a, b], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert "Biggest movers:" in full.stdout and "Per rank (per launch;" in full.stdout


def test_a_healthy_capture_with_causes_priced_at_nothing_shows_its_verdict_alone():
    """A healthy ring (tests/fixtures/byok, 4 x H100) whose report lists held-back notifies the
    replay prices at 0 ns per launch: no headline, no picture, the findings pointed to below."""
    from viewers.headlines import first
    from viewers.report import render_html
    from viewers.terminal import render

    rep = build_report(Path(__file__).resolve().parents[1] / "fixtures" / "byok" / "asm_none_w4.ktrace")
    doc = json.loads(json.dumps(report_json(rep)))
    zero = [f for f in doc["findings"] if (f.get("data") or {}).get("saving_per_launch_ns") == 0]
    assert doc["summary"]["healthy"] and zero, "the fixture no longer has causes priced at nothing"
    assert first(doc) == []
    page = render_html(doc)
    assert "id='headlines'" not in page and "id='picture'" not in page and "id='below'" in page
    text = render(doc)
    assert "Nothing is wrong" in text and f"{len(doc['findings'])} findings of information" in text
