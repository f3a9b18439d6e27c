"""Remake the README's pictures from the bundled capture (no GPU needed; needs headless Chromium).

    python docs/images/make_images.py            # writes docs/images/trace.png and report.png

``report.png``: the HTML report of ``ktrace demo``, rendered by headless Chromium.
``trace.png``: one dispatch launch of the merged trace, drawn from the aligned events the
Perfetto trace is written from (every rank on one clock): one row per workgroup for the first
programs of each rank, spans coloured by region, waits in red.
"""

from __future__ import annotations

import html
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
COLORS = {"route": "#4e79a7", "send": "#59a14f", "expert": "#f28e2b", "reduce": "#b07aa1", "wait": "#e15759",
          "notify": "#333333"}
WIDTH, ROW, LEFT = 1200, 14, 120


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    sys.exit("needs headless Chromium (apt-get install -y chromium)")


def _shot(url: str, png: Path, size: str) -> None:
    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={size}",
                    f"--screenshot={png}", url], check=True, capture_output=True, timeout=120)


def trace_svg(capture: Path, launch: int, programs: int = 10) -> str:
    """An SVG timeline of one launch: ``programs`` rows per rank, spans by region, waits red."""
    from ktrace.analysis import prepare
    from ktrace.schema import EventKind

    t = prepare(str(capture))
    e = t.events[(t.events["launch"] == launch) & (t.events["program"] < programs)]
    e = e[np.isin(e["kind"], [int(EventKind.SPAN), int(EventKind.WAIT), int(EventKind.NOTIFY)])]
    t0, t1 = int(e["start_ns"].min()), int(e["end_ns"].max())
    scale = (WIDTH - LEFT - 10) / max(t1 - t0, 1)
    ranks = sorted(set(e["rank"].tolist()))
    kernel = t.kernels.get((ranks[0], launch), "?")
    y, rows, parts = 40, {}, []
    for r in ranks:
        parts.append(f"<text x='4' y='{y + 11}' font-weight='bold'>rank {r}</text>")
        y += ROW + 2
        for p in range(programs):
            rows[(r, p)] = y
            parts.append(f"<text x='14' y='{y + 10}' fill='#555'>program {p}</text>")
            y += ROW
        y += 6
    for ev in np.sort(e, order=["kind", "start_ns"]):
        key = (int(ev["rank"]), int(ev["program"]))
        name = t.regions.get(int(ev["region"]), "?")
        kind = int(ev["kind"])
        color = COLORS["wait"] if kind == EventKind.WAIT else COLORS.get(name, "#9c9c9c")
        x = LEFT + (int(ev["start_ns"]) - t0) * scale
        w = max((int(ev["end_ns"]) - int(ev["start_ns"])) * scale, 1.0)
        h = ROW - 3 if kind != EventKind.NOTIFY else 4
        parts.append(f"<rect x='{x:.1f}' y='{rows[key] + 1}' width='{w:.1f}' height='{h}' fill='{color}'>"
                     f"<title>{html.escape(name)}</title></rect>")
    ticks = []
    span_us = (t1 - t0) / 1e3
    step = max(1, round(span_us / 10))
    for k in range(0, int(span_us) + 1, step):
        x = LEFT + k * 1e3 * scale
        ticks.append(f"<line x1='{x:.1f}' y1='28' x2='{x:.1f}' y2='{y}' stroke='#ddd'/><text x='{x + 2:.1f}' y='26' fill='#555'>{k} µs</text>")
    legend = "".join(f"<rect x='{LEFT + 90 * i}' y='{y + 8}' width='12' height='10' fill='{c}'/>"
                     f"<text x='{LEFT + 90 * i + 16}' y='{y + 17}'>{n}</text>" for i, (n, c) in enumerate(COLORS.items()))
    title = (f"{kernel} (launch {launch}) on {len(ranks)} ranks, one clock: first {programs} workgroups per rank "
             f"(ktrace demo's bundled capture)")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{y + 30}' font-family='sans-serif' font-size='10'>"
            f"<rect width='100%' height='100%' fill='white'/><text x='4' y='12' font-size='12'>{html.escape(title)}</text>"
            + "".join(ticks) + "".join(parts) + legend + "</svg>")


def main() -> int:
    import os

    from ktrace.demo import BUNDLED_CAPTURE, analyse

    os.chdir(BUNDLED_CAPTURE.parent)  # the report names the capture by its file name only
    with tempfile.TemporaryDirectory() as tmp:
        o = analyse(Path(BUNDLED_CAPTURE.name), tmp)
        _shot(o.html.as_uri(), HERE / "report.png", "1100,880")
        svg = Path(tmp) / "trace.svg"
        svg.write_text(trace_svg(BUNDLED_CAPTURE, launch=2), encoding="utf-8")
        height = int(svg.read_text().split("height='", 1)[1].split("'", 1)[0])
        _shot(svg.as_uri(), HERE / "trace.png", f"{WIDTH},{height}")
    for p in ("trace.png", "report.png"):
        print(f"{HERE / p}: {(HERE / p).stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
