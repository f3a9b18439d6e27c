"""The guide "Reading a ktrace report" (``docs/reading-a-report.md``) as a section of the HTML report.

The HTML report links its first screen to this section (``#guide``), so the guide travels with the
page. The guide's Markdown uses headings, paragraphs, lists, fenced blocks and inline code; this
renders that subset (anything else shows as text; its pictures are left out). Where the guide is not beside the package (an install
without the source tree), the section names it instead.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

#: The guide, in the source tree beside the ``viewers`` package.
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "reading-a-report.md"


def _inline(text: str) -> str:
    out = html.escape(text, quote=True)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def to_html(md: str) -> str:
    """The guide's Markdown subset (``#`` headings, paragraphs, ``-`` lists, fenced blocks, `code`,
    **bold**) as HTML; pictures (``![..](..)``) are left out: the page draws its own."""
    out, para, items = [], [], []

    def flush():
        if para:
            out.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    fence = None
    for line in md.splitlines():
        st = line.strip()
        if fence is not None:  # inside a ``` block: as it is
            if st.startswith("```"):
                out.append(f"<pre>{html.escape(chr(10).join(fence))}</pre>")
                fence = None
            else:
                fence.append(line)
            continue
        if st.startswith("```"):
            flush()
            fence = []
            continue
        if st.startswith("!["):  # a picture of the docs: the page has its own
            continue
        m = re.match(r"(#{1,4})\s+(.*)", st)
        if not st:
            flush()
        elif m:
            flush()
            level = min(len(m.group(1)) + 1, 4)
            out.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
        elif st.startswith("- "):
            if para:
                flush()
            items.append(st[2:])
        elif items and line.startswith("  "):
            items[-1] += " " + st
        else:
            if items:
                flush()
            para.append(st)
    flush()
    return "".join(out)


def section() -> str:
    """The guide as ``<section id='guide'>``."""
    try:
        body = to_html(GUIDE.read_text(encoding="utf-8"))
    except OSError:
        body = "<p>The guide to this report is <code>docs/reading-a-report.md</code> in ktrace's source.</p>"
    return f"<section id='guide'><h2>Reading a ktrace report</h2>{body}</section>"


__all__ = ["GUIDE", "section", "to_html"]
