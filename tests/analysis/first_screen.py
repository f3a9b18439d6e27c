"""Measuring a report's first screen: the HTML one in headless Chromium at 1400 x 900, the
terminal one as text (what ``test_first_screen.py`` calls).

``python -m tests.analysis.first_screen OUT_DIR CAPTURE...`` writes each capture's first-screen
screenshot (``first_screen_<capture>.png``, 64 colours) and terminal text into OUT_DIR and prints
its measures (what ``docs/images/first_screen_*.png`` were made with; a synthetic capture from
``ktrace.captures.generate`` is named ``synthetic_<kind>`` there).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from ktrace.testing.perfetto.cdp import find_chromium

CHROMIUM = find_chromium() or "chromium"  # ($KTRACE_CHROMIUM, else the first on the PATH)
WIDTH, HEIGHT = 1400, 900

#: Appended to a copy of the page: after it has laid out, the boxes of the first screen's parts,
#: every text's box inside the picture, and the words of text visible in the viewport, written
#: into the page as JSON (what --dump-dom gives back).
_MEASURE = """<script>
window.addEventListener('load', function(){
  var vh = window.innerHeight;
  function box(el){var r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];}
  var pic = document.querySelector('#picture svg');
  var out = {vw: window.innerWidth, vh: vh, verdict: null, headlines: [], picture: pic ? box(pic) : null};
  var v = document.getElementById('verdict'); if (v) out.verdict = box(v);
  document.querySelectorAll('#headlines li').forEach(function(li){ out.headlines.push(box(li)); });
  var parts = [document.querySelector('header h1'), document.querySelector('header .sub'),
               document.querySelector('header .guide'), v, document.querySelector('#picture figcaption'), pic];
  document.querySelectorAll('#headlines li').forEach(function(li){ parts.push(li); });
  out.boxes = parts.filter(Boolean).map(box);
  out.svg_text = pic ? Array.prototype.map.call(pic.querySelectorAll('text'), function(t){
      return box(t).concat([t.textContent]); }) : [];
  var words = [], walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT), n;
  while ((n = walker.nextNode())) {
    var t = n.textContent.trim();
    if (!t || n.parentElement.closest('script,style')) continue;
    var range = document.createRange(); range.selectNodeContents(n);
    var rects = range.getClientRects();
    if (!rects.length || rects[0].width === 0) continue;
    if (rects[0].top < vh && rects[0].bottom > 0) words = words.concat(t.split(/\\s+/));
  }
  out.words = words;
  var pre = document.createElement('pre'); pre.id = 'ktrace-measure'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


#: Headless Chromium keeps this much of its window's height for itself when it dumps the DOM (a
#: screenshot's page fills the whole window): the window is made this much taller for measuring,
#: so that the page's viewport is 1400 x 900 in both (``measure`` checks it).
DUMP_CHROME_PX = 87


def chromium(*args: str, height: int = HEIGHT, timeout: float = 120.0) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           "--hide-scrollbars", f"--window-size={WIDTH},{height}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def measure(page: Path) -> dict:
    """The first screen of an HTML report, as laid out by Chromium at 1400 x 900."""
    probe = page.with_name(page.stem + ".measure.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    res = chromium("--dump-dom", probe.resolve().as_uri(), height=HEIGHT + DUMP_CHROME_PX)
    probe.unlink()
    m = re.search(r'<pre id="ktrace-measure">(.*?)</pre>', res.stdout, re.S)
    if not m:
        raise AssertionError(f"no measures from Chromium: {res.stderr[-1500:]}")
    import html as html_mod

    return json.loads(html_mod.unescape(m.group(1)))


def screenshot(page: Path, png: Path) -> None:
    if png.exists():
        png.unlink()
    res = chromium(f"--screenshot={png}", page.resolve().as_uri())
    if not png.exists():
        raise AssertionError(f"no screenshot: {res.stderr[-1500:]}")


def words(m: dict) -> list[str]:
    """The words visible in the viewport (tokens with a letter or a digit)."""
    return [w for w in m["words"] if re.search(r"[\w]", w)]


def inside(b, vw: float, vh: float) -> bool:
    return b is not None and b[0] >= 0 and b[1] >= 0 and b[2] <= vw + 0.5 and b[3] <= vh + 0.5


def overlaps(boxes: list, tol: float = 0.5) -> list[tuple[int, int]]:
    """Pairs of boxes (left, top, right, bottom) that overlap by more than ``tol`` px both ways."""
    out = []
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            a, b = boxes[i], boxes[j]
            if min(a[2], b[2]) - max(a[0], b[0]) > tol and min(a[3], b[3]) - max(a[1], b[1]) > tol:
                out.append((i, j))
    return out


def legend_mismatches(svg: str) -> list[str]:
    """What a swimlane picture's legend gets wrong: a colour drawn under a key the legend lacks or
    shows in another colour, or a legend entry drawn nowhere."""
    drawn: dict[str, set] = {}
    for key, fill in re.findall(r"<rect data-key='([^']*)'[^>]*? fill='(#[0-9a-f]{6})'", svg):
        drawn.setdefault(key, set()).add(fill)
    for key, stroke in re.findall(r"<path data-key='(arrow|missing)'[^>]*? stroke='(#[0-9a-f]{6})'", svg):
        drawn.setdefault(key, set()).add(stroke)
    legend = dict(re.findall(r"<rect data-legend='([^']*)'[^>]*? fill='(#[0-9a-f]{6})'", svg))
    legend.update(re.findall(r"<line data-legend='(arrow|missing)'[^>]*? stroke='(#[0-9a-f]{6})'", svg))
    bad = [f"{k}: drawn {sorted(v)}, legend {legend.get(k)}" for k, v in drawn.items() if v != {legend.get(k)}]
    bad += [f"{k}: in the legend, drawn nowhere" for k in legend if k not in drawn]
    return bad


def terminal_lines(text: str, rows: int = 40) -> list[str]:
    return text.splitlines()[:rows]


def main(argv: list[str]) -> int:
    from ktrace.analysis import build_report
    from viewers.report import write_html
    from viewers.terminal import render

    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for cap in argv[1:]:
        rep = build_report(cap)
        name = Path(cap).stem
        page = write_html(rep, out / f"{name}.html")
        m = measure(page)
        png = out / f"first_screen_{name}.png"
        screenshot(page, png)
        from PIL import Image  # (matplotlib's own dependency)

        Image.open(png).convert("RGB").quantize(colors=64).save(png, optimize=True)
        (out / f"first_screen_{name}.txt").write_text(render(rep) + "\n", encoding="utf-8")
        page.unlink()
        print(f"{name}: {len(words(m))} words above the fold; picture {m['picture']}; headlines {len(m['headlines'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
