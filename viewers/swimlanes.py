"""The picture of a finding: its launch as swimlanes, drawn as SVG from the report document alone.

The data is the document's ``views["findings"][i]`` (``ktrace.analysis.finding_view``): rows (ranks,
or workgroups for small grids) with time across, each row's life in the launch, its waits (coloured
by why they waited when the culprit caused them, grey otherwise), the culprit marked (outlined in
black over a yellow fill, with what it did), and arrows from the culprit's notifies to the ends of
the waits they released. Every colour drawn is keyed (``data-key``) and the legend shows exactly
the keys drawn, with the same colours (the CPU tier checks both).

Hand-written SVG rather than matplotlib: the picture needs arrows between rows, marks with their
own labels and a legend that lists only what is drawn; a few rectangles and paths do that exactly
and render in a few milliseconds.
"""

from __future__ import annotations

import html
import math

from ktrace.text import fmt_ns, printable

#: Fill of each reason a caused wait waited (``finding_view.WHY``'s names).
WHY_COLOR = {"producer not started": "#8e44ad", "producer itself waiting": "#d0453b", "producer working": "#2f6fb3",
             "producer outside any region": "#e8a33d", "missing signal (gave up)": "#5b2c2c",
             "signal trip": "#16a085", "unexplained": "#8d6e00"}
LIFE, OTHER, CULPRIT, INK = "#dde8f5", "#c9ccd4", "#ffd966", "#1d2330"
HUNG = "#f4b6ad"  # a wait that gave up: what a hang's culprit caused, not the culprit

_FONT = "font-family='system-ui,-apple-system,Segoe UI,Roboto,sans-serif'"


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _ticks(span_ns: float, n: int = 6) -> tuple[list[float], str, float]:
    """Tick positions (ns) for a span, the unit they are written in and its size in ns."""
    unit, size = next(((u, f) for u, f in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)) if span_ns >= 2 * f), ("ns", 1.0))
    if span_ns <= 0:
        return [0.0], unit, size
    raw = span_ns / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [k * step for k in range(int(span_ns // step) + 1)], unit, size


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 1e-6 else f"{x:.3g}"


def _pack(starts, ends, lanes: int) -> list[int]:
    """A sub-lane per interval (in the order given, sorted by start): the first free, else the
    one that frees first."""
    free = [-math.inf] * lanes
    out = []
    for s, e in zip(starts, ends):
        k = next((i for i, f in enumerate(free) if f <= s), None)
        if k is None:
            k = min(range(lanes), key=free.__getitem__)
        free[k] = e
        out.append(k)
    return out


def render(view: dict, *, ident: str, width: int = 1180, plot_height: int = 380, legend: bool = True,
           labels: bool = True) -> str:
    """One finding's picture as an ``<svg>`` element.

    Args:
        view: the finding's entry of the document's ``views["findings"]``.
        ident: a name unique in the page (the arrowhead marker's id).
        width: the picture's width in px.
        plot_height: the height of its rows together (each row 12 to 56 px).
        legend: draw the legend under the time axis.
        labels: write what the culprit did beside its first mark.
    """
    rows = view["rows"]
    n = len(rows["rank"])
    if n == 0:
        return ""
    t0, t1 = int(view["start_ns"]), int(view["end_ns"])
    span = max(t1 - t0, 1)
    left, right, top = 64, 14, 6
    if rows.get("label"):  # room for the lanes' names
        left = int(min(220, max(left, 14 + 6.6 * max(len(printable(x)) for x in rows["label"]))))
    rowh = max(12.0, min(56.0, plot_height / n))
    ph = rowh * n
    pw = width - left - right

    def X(t):
        return left + (float(t) - t0) / span * pw

    def Y(r):
        return top + r * rowh

    parts, used = [], {}

    def rect(key, color, x0, x1, y, h, extra=""):
        used.setdefault(key, color)
        parts.append(f"<rect data-key='{_e(key)}' x='{x0:.1f}' y='{y:.1f}' width='{max(x1 - x0, 1.0):.1f}' "
                     f"height='{h:.1f}' fill='{color}'{extra}/>")

    for r in range(n):  # row labels and bands
        y = Y(r)
        if r % 2:
            parts.append(f"<rect x='{left}' y='{y:.1f}' width='{pw}' height='{rowh:.1f}' fill='#f7f8fb'/>")
        rk, pg = int(rows["rank"][r]), int(rows["program"][r])
        first = r == 0 or int(rows["rank"][r - 1]) != rk
        label = f"rank {rk}" if pg < 0 else (f"r{rk} p{pg}" if first else f"p{pg}")
        if rows.get("label"):  # lanes of one program: their names (escaped where drawn)
            label = printable(rows["label"][r])
            first = False
        parts.append(f"<text x='{left - 6}' y='{y + rowh / 2 + 4:.1f}' text-anchor='end' font-size='11' fill='{INK}'>"
                     f"{_e(label)}</text>")
        if pg >= 0 and first and r:  # a line between ranks
            parts.append(f"<line x1='{left - 40}' y1='{y:.1f}' x2='{left + pw}' y2='{y:.1f}' stroke='#99a' stroke-width='1'/>")
    for r in range(n):  # each row's life in the launch
        rect("running", LIFE, X(rows["start_ns"][r]), X(rows["end_ns"][r]), Y(r) + 1, rowh - 2)
    c = view["culprit"]
    for r, s, e, what in zip(c["row"], c["start_ns"], c["end_ns"], c["what"]):  # the culprit, under the waits
        if what == "no signal came":  # (a hang's waits that gave up: marked, in the colour of what was caused)
            rect("hung wait: no signal came", HUNG, X(s), X(e), Y(r) + 1, rowh - 2)
        else:
            rect(f"culprit: {what}", CULPRIT, X(s), X(e), Y(r) + 1, rowh - 2)
    # the waits, in sub-lanes of their row
    w = view["waits"]
    names = view["why_names"]
    lanes = max(1, min(10, int((rowh - 4) // 4)))
    by_row: dict[int, list[int]] = {}
    for k, r in enumerate(w["row"]):
        by_row.setdefault(int(r), []).append(k)
    wait_y = {}
    for r, ks in by_row.items():
        ks.sort(key=lambda k: w["start_ns"][k])
        sub = _pack([w["start_ns"][k] for k in ks], [w["end_ns"][k] for k in ks], lanes)
        lh = (rowh - 4) / lanes
        for k, j in zip(ks, sub):
            wait_y[k] = (Y(r) + 2 + j * lh, lh)
    hang = view.get("kind") == "hang"
    for caused in (False, True):  # the others first, the culprit's on top
        for k in range(len(w["row"])):
            if bool(w["caused"][k]) != caused or (caused and hang):  # (a hang's waits are its culprit)
                continue
            y, lh = wait_y[k]
            key = names[int(w["why"][k])] if caused else "other waits"
            rect(key, WHY_COLOR.get(key, OTHER) if caused else OTHER, X(w["start_ns"][k]), X(w["end_ns"][k]), y + 0.3,
                 max(lh - 0.6, 1.0))
    for r, s, e in zip(c["row"], c["start_ns"], c["end_ns"]):  # the culprit's outline, over everything
        parts.append(f"<rect data-mark='culprit' x='{X(s):.1f}' y='{Y(r) + 1:.1f}' width='{max(X(e) - X(s), 2.0):.1f}' "
                     f"height='{rowh - 2:.1f}' fill='none' stroke='{INK}' stroke-width='2'/>")
    firsts = [c["what"].index(x) for x in dict.fromkeys(c["what"])] if labels else []
    for i in firsts:  # each kind of mark labelled once, at its first
        r0, s0, e0 = c["row"][i], c["start_ns"][i], c["end_ns"][i]
        txt = f"{c['what'][i]} ({fmt_ns(e0 - s0)})" if c["what"][i] in ("started late", "no signal came") else c["what"][i]
        need = 7 * len(txt) + 10
        if X(e0) - X(s0) >= need:  # inside the mark
            xt, anchor = (X(s0) + X(e0)) / 2, "middle"
        elif X(e0) + need < left + pw:  # after it
            xt, anchor = X(e0) + 5, "start"
        else:  # before it
            xt, anchor = max(X(s0) - 5, left + need), "end"
        parts.append(f"<text data-mark='culprit-label' x='{xt:.1f}' y='{Y(r0) + rowh / 2 + 4:.1f}' text-anchor='{anchor}' "
                     f"font-size='11' font-weight='600' fill='{INK}' stroke='#fff' stroke-width='3' paint-order='stroke'>"
                     f"{_e(txt)}</text>")
    ms = view.get("missing") or {"from_row": [], "from_ns": [], "to_row": [], "to_ns": []}
    if ms["from_row"]:
        used.setdefault("missing", INK)
    for fr, ft, tr, tt in zip(ms["from_row"], ms["from_ns"], ms["to_row"], ms["to_ns"]):  # notifies never sent
        x1, y1, x2, y2 = X(ft), Y(fr) + rowh / 2, X(tt), Y(tr) + rowh / 2
        mid = (y1 + y2) / 2
        parts.append(f"<path data-key='missing' d='M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}' "
                     f"fill='none' stroke='{INK}' stroke-width='1.4' stroke-dasharray='5,4' marker-end='url(#{ident}-head)'/>")
    a = view["arrows"]
    if a["from_row"]:
        used.setdefault("arrow", INK)
    for fr, ft, tr, tt in zip(a["from_row"], a["from_ns"], a["to_row"], a["to_ns"]):
        x1, y1 = X(ft), Y(fr) + rowh / 2
        ks = sorted((k for k in by_row.get(int(tr), []) if int(w["end_ns"][k]) == int(tt)), key=lambda k: not w["caused"][k])
        y2 = (wait_y[ks[0]][0] + wait_y[ks[0]][1] / 2) if ks else Y(tr) + rowh / 2
        x2 = X(tt)
        mid = (y1 + y2) / 2
        parts.append(f"<path data-key='arrow' d='M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}' "
                     f"fill='none' stroke='{INK}' stroke-width='1.1' marker-end='url(#{ident}-head)'/>")
        parts.append(f"<circle cx='{x1:.1f}' cy='{y1:.1f}' r='2.2' fill='{INK}'/>")
    # the time axis
    ay = top + ph + 2
    parts.append(f"<line x1='{left}' y1='{ay}' x2='{left + pw}' y2='{ay}' stroke='#889' stroke-width='1'/>")
    ticks, unit, size = _ticks(span)
    for tk in ticks:
        x = X(t0 + tk)
        parts.append(f"<line x1='{x:.1f}' y1='{ay}' x2='{x:.1f}' y2='{ay + 4}' stroke='#889'/>"
                     f"<text x='{x:.1f}' y='{ay + 15}' text-anchor='middle' font-size='10' fill='#445'>{_num(tk / size)}</text>")
    parts.append(f"<text x='{left - 6}' y='{ay + 15}' text-anchor='end' font-size='10' fill='#445'>{unit}</text>")
    height = ay + 22
    if legend:
        order = ["running"] + [k for k in used if k.startswith(("culprit", "hung wait"))] + [k for k in names if k in used] \
            + [k for k in ("other waits", "arrow", "missing") if k in used]
        x, y = left, height + 4
        for key in order:
            label = {"arrow": "notify → wait released", "missing": "notify never sent", "running": "alive"}.get(key, key)
            wdt = 22 + 6.6 * len(label) + 16
            if x + wdt > width:
                x, y = left, y + 18
            if key in ("arrow", "missing"):
                dash = " stroke-dasharray='5,4'" if key == "missing" else ""
                parts.append(f"<line data-legend='{key}' x1='{x}' y1='{y + 6}' x2='{x + 16}' y2='{y + 6}' stroke='{used[key]}' "
                             f"stroke-width='1.4'{dash} marker-end='url(#{ident}-head)'/>")
            else:
                extra = f" stroke='{INK}' stroke-width='1.5'" if key.startswith(("culprit", "hung wait")) else ""
                parts.append(f"<rect data-legend='{_e(key)}' x='{x}' y='{y}' width='16' height='12' fill='{used[key]}'{extra}/>")
            parts.append(f"<text x='{x + 21}' y='{y + 10}' font-size='11' fill='{INK}'>{_e(label)}</text>")
            x += wdt
        height = y + 18
    head = (f"<defs><marker id='{ident}-head' viewBox='0 0 8 8' refX='7' refY='4' markerWidth='7' markerHeight='7' "
            f"orient='auto-start-reverse'><path d='M0,0 L8,4 L0,8 z' fill='{INK}'/></marker></defs>")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' class='swimlanes' viewBox='0 0 {width} {height:.0f}' width='{width}' "
            f"height='{height:.0f}' {_FONT} role='img' aria-label='{_e(view.get('finding', ''))}'>{head}{''.join(parts)}</svg>")


def caption(view: dict) -> str:
    """What the picture shows and what it leaves out, in a few words."""
    rows = ("ranks" if all(p < 0 for p in view["rows"]["program"]) else "workgroups") if not view["rows"].get("label") \
        else f"lanes of rank {view['rows']['rank'][0]} program {view['rows']['program'][0]}"
    left = []
    shown = len(view["waits"]["row"])
    if view["waits_total"] > shown:
        left.append(f"{shown:,} of {view['waits_total']:,} waits")
    arrows = len(view["arrows"]["from_row"])
    if view["arrows_total"] > arrows:
        left.append(f"{arrows} of {view['arrows_total']:,} arrows")
    return f"launch {view['launch']}, {rows} as rows" + (f" ({', '.join(left)})" if left else "")


__all__ = ["CULPRIT", "INK", "LIFE", "OTHER", "WHY_COLOR", "caption", "render"]
