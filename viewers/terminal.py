"""The report's first screen in a terminal: the verdict, at most three headlines, one line of capture.

``ktrace report`` prints this by default (``-v``: every finding's full paragraph and the numbers,
``ktrace.analysis.render_text``). Every line fits :data:`COLUMNS` columns: headlines are cut to fit
(``viewers.headlines``), the verdict and the capture line are wrapped. Colour (severity tags and the
savings) only when the output is a terminal and ``NO_COLOR`` is unset (https://no-color.org):
:func:`use_color`.

Hand-written: a dozen aligned lines with two colours need ``textwrap`` and three escape codes; a
terminal library (rich, click) would add a dependency for that and its own markup to escape names
from a capture against.
"""

from __future__ import annotations

import os
import sys
import textwrap

from ktrace.analysis.document import load as load_document

from ktrace.text import MEASURES, count_text, fmt_ns, printable

from . import headlines

#: The width every line fits.
COLUMNS = 100
#: Where the guide to reading a report is.
GUIDE = "docs/reading-a-report.md"
_SEV = {"error": ("!!", "\x1b[1;31m"), "warning": (" !", "\x1b[1;33m"), "info": ("  ", "\x1b[2m")}
_SAVE, _BOLD, _RESET = "\x1b[32m", "\x1b[1m", "\x1b[0m"


def use_color(stream) -> bool:
    """Colour for ``stream``: a terminal, and ``NO_COLOR`` unset or empty."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")


def _doc(rep) -> dict:
    """The parts of a report this needs, as its JSON has them: the summary and the findings (from
    anything ``ktrace.analysis.document.load`` takes; its tables are not made)."""
    doc = load_document(rep)
    return {"summary": doc.summary.to_dict(), "findings": [f.to_dict() for f in doc.findings]}


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, COLUMNS, initial_indent=indent, subsequent_indent=indent or "  ",
                         break_long_words=True, break_on_hyphens=False) or [""]


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters (an ellipsis marks the cut)."""
    return text if len(text) <= width else text[: max(width - 1, 0)].rstrip() + "…"


def render(rep, *, color: bool = False) -> str:
    """The first screen of a report (a Report or its document), at most :data:`COLUMNS` wide."""
    doc = _doc(rep)
    s, fs = doc["summary"], doc.get("findings") or []

    def c(code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if color and text.strip() else text

    lines = _wrap(f"ktrace report: {printable(s['source'])}")
    lines += [c(_BOLD, ln) for ln in _wrap(s.get("verdict", ""))]
    top = headlines.first(doc)
    nw = 0
    if top:
        lines.append("")
        rows = [(f, *headlines.parts(f)) for f in top]
        num = [f"{fs.index(f) + 1}." for f, _, _ in rows]
        nw = max(len(n) for n in num)
        # the saving aligned in a column when every headline fits beside it, else after its text
        ww = max(len(w) for _, w, _ in rows)
        sw = max(len(sv) for _, _, sv in rows)
        aligned = 3 + nw + 1 + ww + 2 + sw <= COLUMNS
        for (f, what, saving), n in zip(rows, num):
            tag, code = _SEV.get(f["severity"], _SEV["info"])
            head = f"{c(code, tag)} {n:>{nw}} "
            what = _fit(what, COLUMNS - (3 + nw + 1))
            if aligned:
                lines.append(f"{head}{what:<{ww}}  {c(_SAVE, saving)}".rstrip())
            else:
                body = f"{what} · {c(_SAVE, saving)}" if saving else what
                if 3 + nw + 1 + len(what) + 3 + len(saving) > COLUMNS:  # two lines: the saving under it
                    lines.append(f"{head}{what}")
                    lines.append(" " * (3 + nw + 1) + c(_SAVE, saving))
                else:
                    lines.append(f"{head}{body}")
    more = len(fs) - len(top)
    if more > 0:
        pad = " " * (3 + nw + 1) if top else ""
        lines.append(("" if top else "\n") + pad + f"{more:,} {'more ' if top else ''}finding{'s' if more > 1 else ''}"
                     f"{'' if top else ' of information'}: -v prints every finding in full; --html draws each")
    lines.append("")
    kernels = ", ".join(printable(k) for k in s.get("kernels") or ()) or "?"
    lines += _wrap(f"{s['world_size']} rank{'s' if s['world_size'] != 1 else ''}, {count_text('launches', s['launches'])} of "
                   f"{kernels}; {MEASURES['kernel_time_ns'][0]} {fmt_ns(s.get('kernel_time_ns'))}"
                   + (f" ({fmt_ns(s['kernel_time_ns'] / s['launches'])} per launch)"
                      if s.get("kernel_time_ns") is not None and s["launches"] > 1 else "")
                   + (" (PARTIAL)" if s.get("partial") else ""))
    lines.append(f"How to read this report: {GUIDE}")
    return "\n".join(lines)


def render_diff(doc: dict, *, color: bool = False) -> str:
    """The first screen of a diff (``ktrace.analysis.diff_json``'s document): what changed in a
    line or two, the biggest movers as headlines, at most :data:`COLUMNS` wide."""
    from ktrace.text import diff_headline

    lines = _wrap(f"ktrace diff: A = {printable(doc['a'])}") + _wrap(f"             B = {printable(doc['b'])}")
    lines += [f"{_BOLD}{ln}{_RESET}" if color else ln for ln in _wrap(diff_headline(doc["summary"]))]
    fs = doc.get("findings") or []
    top = headlines.first(doc)
    if top:
        lines.append("")
        nw = len(f"{len(top)}.")
        for i, f in enumerate(top, 1):
            lines.append(f"   {f'{i}.':>{nw}} " + _fit(headlines.headline(f), COLUMNS - (3 + nw + 1)))
    more = len(fs) - len(top)
    if more > 0:
        lines.append(f"   {more:,} more finding{'s' if more > 1 else ''}: -v prints every one and the per-rank table; "
                     "--html draws them")
    return "\n".join(lines)


def report_text(rep, *, verbose: bool = False, max_findings: int = 10, stream=None) -> str:
    """What a command prints of a report (``ktrace report``, ``demo``, ``run``, ``record``): its
    first screen (coloured when ``stream``, standard output by default, is a terminal), or with
    ``verbose`` every finding's paragraph and the headline numbers (``viewers.text``)."""
    if verbose:
        from .text import render_text

        return render_text(rep, max_findings=max_findings)
    return render(rep, color=use_color(sys.stdout if stream is None else stream))


__all__ = ["report_text", "COLUMNS", "GUIDE", "render", "render_diff", "use_color"]
