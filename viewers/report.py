"""The HTML report: one self-contained file (inline CSS and SVG, no network), readable offline.

:func:`render_html` lays out a report from its document alone (``ktrace.analysis.document``: the
JSON ``ktrace report --json`` writes, or a Report's ``document()``; nothing here reads a trace or
the causal model): the verdict, the findings (root causes
first, each with the time a fix would save, its time range and a link to that range in
ui.perfetto.dev), the summary, plots and tables. :func:`render_diff_html` does the same for a
diff.

Plots are drawn with matplotlib (imported only here, when an HTML report is written) and
embedded as SVG with their text kept as text, so the page needs nothing but itself:

* what each root cause would save (per launch, ranked);
* why the waits waited, per rank (producer not started, itself waiting, working, outside any
  region; the signal's calibrated trip; what nobody explains);
* one launch in detail (the first finding's, else the longest): per rank, how many workgroups
  ran and how many waited over the launch's own time, and for small grids every workgroup's
  lane (work, waits, notifies);
* per rank and program, mean busy and wait time (heat maps with their colour scales);
* the distribution of wait times per rank (log scale).
"""

from __future__ import annotations

import html
import io
import os
import re
from pathlib import Path

import numpy as np

from ktrace.analysis.document import dump as dump_document
from ktrace.text import MEASURES as M, diff_headline, fmt_ns, kernel_time_value
from ktrace.probe_cost import measured_lines

from . import guide, headlines, swimlanes

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2330;background:#fff;max-width:1240px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde;padding-bottom:4px}
h3{font-size:14px;margin:14px 0 4px}
.sub{color:#667;font-size:13px} table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
td,th{border:1px solid #dde;padding:3px 7px;text-align:right} th{background:#f3f4f8} td.l,th.l{text-align:left}
ol.findings li{margin:8px 0;line-height:1.45} .sev{display:inline-block;font-size:11px;padding:1px 6px;border-radius:8px;
margin-right:6px;color:#fff} .error{background:#c0392b} .warning{background:#b9770e} .info{background:#5d6d7e}
.range{color:#667;font-size:12px} .verdict{font-size:15px;font-weight:600;margin:10px 0}
.plot{margin:10px 0 18px} .plot svg{max-width:100%;height:auto} .caption{font-size:12.5px;color:#445;max-width:1000px}
.note{font-size:12.5px;color:#445;background:#f6f7fb;padding:8px 10px;border-radius:6px}
section.first{min-height:calc(100vh - 40px)} header{display:flex;align-items:baseline;gap:14px} header .sub{flex:1} .guide{font-size:13px}
ol.headlines{margin:6px 0 8px;padding-left:22px} ol.headlines li{margin:3px 0;font-size:14px;line-height:1.35}
ol.headlines a,details summary a{color:inherit;text-decoration:none}
figure.picture{margin:6px 0 0} figure.picture figcaption{font-size:13px;color:#445;margin:0 0 2px}
details.finding{border:1px solid #e3e5ec;border-radius:6px;margin:6px 0;padding:4px 10px}
details.finding summary{cursor:pointer;font-size:14px} details.finding p{margin:6px 0;line-height:1.45;font-size:13.5px}
details.finding .next{font-size:13px;color:#2b4a2b} section#guide h1{font-size:18px} section#guide{font-size:13.5px;max-width:980px}
"""

_RUN, _WAIT, _LATE = "#2f6fb3", "#d0453b", "#e8a33d"
_RANGE = "#1d2330"  # a finding's range, drawn over the counts
_SPLIT = [("late_not_started_ns", "producer not started", "#8e44ad"),
          ("late_waiting_ns", "producer itself waiting", "#d0453b"),
          ("late_in_region_ns", "producer working (in a region)", "#2f6fb3"),
          ("late_outside_ns", "producer outside any region", "#e8a33d"),
          ("late_missing_ns", "missing signal (gave up)", "#5b2c2c"),
          ("link_ns", "signal trip (calibrated)", "#7f8c8d"),
          ("unexplained_ns", "unexplained", "#c8ccd4")]
_SEV_COLOR = {"error": "#c0392b", "warning": "#b9770e", "info": "#7f8c8d"}


def _e(s) -> str:
    return html.escape(str(s), quote=True)


# ---------------------------------------------------------------------------------------------
# matplotlib -> inline SVG
# ---------------------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    # text.parse_math off: names from a capture are drawn as they are ("$x$" is not TeX, and a
    # lone "$" is not an error)
    plt.rcParams.update({"text.parse_math": False, "svg.fonttype": "none", "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9,
                         "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100})
    return plt


def _svg(fig, name: str) -> str:
    """The figure as an ``<svg>`` element (no XML prolog), its ids unique to ``name``."""
    plt = _plt()
    buf = io.StringIO()
    with plt.rc_context({"svg.hashsalt": f"ktrace-{name}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", pad_inches=0.08)
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    return text


def _us(ns) -> np.ndarray:
    return np.asarray(ns, np.float64) / 1e3


def _savings_plot(doc: dict) -> str:
    causes = [f for f in doc["findings"] if "saving_per_launch_ns" in (f.get("data") or {})][:10]
    if not causes:
        return ""
    plt = _plt()
    vals = np.array([f["data"]["saving_per_launch_ns"] or 0.0 for f in causes]) / 1e3
    labels = [f.get("label") or f["kind"] for f in causes]
    fig, ax = plt.subplots(figsize=(8.2, 0.42 * len(causes) + 0.9))
    y = np.arange(len(causes))[::-1]
    ax.barh(y, vals, color=[_SEV_COLOR[f["severity"]] for f in causes], height=0.62)
    ax.set_yticks(y, labels)
    ax.set_xlabel("time a fix would save per launch (µs), from replaying the capture without the cause")
    ax.set_title("What each root cause costs")
    if float(vals.max()) <= 0:  # nothing would be shorter: say so instead of a scale of zeros
        top = 1.0
        ax.set_xticks([])
        ax.text(0.5, 0.5, "no cause would shorten the launches", transform=ax.transAxes, ha="center", va="center",
                color="#445")
    else:
        top = float(vals.max())
    ax.set_xlim(0, top * 1.25)
    for yy, v in zip(y, vals):
        ax.text(v + top * 0.01, yy, fmt_ns(v * 1e3), va="center", fontsize=8)
    ax.grid(axis="x", color="#e5e7ee", linewidth=0.6)
    ax.set_axisbelow(True)
    return _svg(fig, "savings")


def _rows(doc: dict, name: str) -> list[dict]:
    """A table of the document: its rows (the first ones, biggest first) as records."""
    return ((doc.get("tables") or {}).get(name) or {}).get("rows") or []


def _col(rows: list[dict], name: str) -> np.ndarray:
    return np.array([np.nan if r.get(name) is None else r[name] for r in rows], dtype=np.float64)


def _why_plot(doc: dict) -> str:
    t = [r for r in _rows(doc, "wait_causes_by_rank") if r["rank"] >= 0]
    if not t or float(np.nansum(_col(t, "wait_ns"))) <= 0:
        return ""
    t.sort(key=lambda r: r["rank"])
    plt = _plt()
    n = len(t)
    fig, ax = plt.subplots(figsize=(8.2, 0.5 * n + 1.3))
    y = np.arange(n)[::-1]
    left = np.zeros(n)
    scale = 1e3 if float(np.nanmax(_col(t, "wait_ns"))) < 2e6 else 1e6
    unit = "µs" if scale == 1e3 else "ms"
    for col, label, color in _SPLIT:
        v = np.nan_to_num(_col(t, col)) / scale
        ax.barh(y, v, left=left, color=color, height=0.6, label=label)
        left += v
    ax.set_yticks(y, [f"rank {r['rank']}" for r in t])
    ax.set_xlabel(f"wait time ({unit}), summed over the rank's waits")
    s = doc["summary"].get("sampled_launches", [0, 0])
    on = f" (launches sampled: {s[0]:,} of {s[1]:,})" if s and s[0] < s[1] else ""
    ax.set_title("Why the waits waited" + on)
    ax.set_xlim(0, max(float(left.max()), 1e-9) * 1.05)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28 if n < 3 else -0.2), ncol=3, frameon=False, fontsize=8)
    ax.grid(axis="x", color="#e5e7ee", linewidth=0.6)
    ax.set_axisbelow(True)
    return _svg(fig, "why")


def _launch_plots(doc: dict) -> tuple[str, str]:
    """One launch (the document's ``views.launch``): per-rank counts of workgroups running and
    waiting over its own time, and, for small grids, every workgroup's lane."""
    v = (doc.get("views") or {}).get("launch") or {}
    if not v or not v["workgroups"]["rank"]:
        return "", ""
    plt = _plt()
    wg = {k: np.asarray(x) for k, x in v["workgroups"].items()}
    w = {k: np.asarray(x) for k, x in v["waits"].items()}
    ln = v["launch"]
    t0, t1 = int(wg["start_ns"].min()), int(wg["end_ns"].max())
    span = max(t1 - t0, 1)
    ranks = np.unique(wg["rank"]).tolist()
    bins = 400
    edges = np.linspace(0, span, bins + 1)

    def count(s, e):
        a = np.clip(np.searchsorted(edges, s - t0, side="right") - 1, 0, bins - 1)
        b = np.clip(np.searchsorted(edges, e - t0, side="left"), 1, bins)
        d = np.zeros(bins + 1)
        np.add.at(d, a, 1)
        np.add.at(d, b, -1)
        return np.cumsum(d)[:bins]

    x = _us(edges)
    f0 = next((f for f in doc["findings"] if f.get("start_ns") is not None), None)
    fig, axes = plt.subplots(len(ranks), 1, figsize=(9.2, 1.25 * len(ranks) + 0.9), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], ranks):
        sel = wg["rank"] == r
        alive = count(wg["start_ns"][sel], wg["end_ns"][sel])
        ws = w["rank"] == r if w["rank"].size else np.zeros(0, bool)
        waiting = count(w["start_ns"][ws], w["end_ns"][ws]) if ws.any() else np.zeros(bins)
        waiting = np.minimum(waiting, alive)
        running = alive - waiting
        ax.stairs(running + waiting, x, fill=True, color=_WAIT, label="waiting")
        ax.stairs(running, x, fill=True, color=_RUN, label="running (not waiting)")
        ax.set_ylim(0, max(float(alive.max()), 1) * 1.1)
        ax.set_ylabel(f"rank {r}\nworkgroups", rotation=0, ha="right", va="center", labelpad=6)
        if f0 is not None and f0.get("end_ns") is not None:
            # (its range as two lines over the counts, not a shade: a translucent band over the two
            # fills would show them in four colours, two of them in no legend)
            a, b = _us(f0["start_ns"] - t0), _us(f0["end_ns"] - t0)
            if b > 0 and a < _us(span):
                for k, xk in enumerate((max(a, 0), min(b, _us(span)))):
                    ax.axvline(xk, color=_RANGE, lw=1.2, ls="--", label="the first finding's range" if k == 0 else None)
    axes[0, 0].set_title(f"Launch {ln} ({v.get('role', '')}): workgroups running and waiting, per rank")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    axes[-1, 0].set_xlabel(f"time since the launch's first event (µs); the launch starts at +{fmt_ns(t0)}")
    # below the axes: a legend inside would cover the counts
    axes[-1, 0].legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.55), fontsize=8, frameon=False, ncol=2)
    axes[-1, 0].set_xlim(0, _us(span))
    counts_svg = _svg(fig, "launch")
    lanes_svg = _lanes_plot(v, wg, w, ln, t0, span) if "notifies" in v else ""
    return counts_svg, lanes_svg


def _lanes_plot(v, wg, w, ln, t0, span) -> str:
    """Every workgroup of one launch on its own lane: its life (light), its waits (red, darker
    when its producer was late) and its notifies (ticks)."""
    plt = _plt()
    order = np.lexsort((wg["program"], wg["rank"]))
    lanes = {(int(wg["rank"][i]), int(wg["program"][i])): k for k, i in enumerate(order.tolist())}
    n = len(lanes)
    fig, ax = plt.subplots(figsize=(9.2, 0.2 * n + 1.2))
    for i in order.tolist():
        r, p, s, e = int(wg["rank"][i]), int(wg["program"][i]), int(wg["start_ns"][i]), int(wg["end_ns"][i])
        ax.broken_barh([(_us(s - t0), _us(e - s))], (lanes[(r, p)] - 0.4, 0.8), color="#cfe0f3", lw=0)
    late = w["late"].astype(bool) if w["late"].size else np.zeros(0, bool)
    for sel, color in ((~late, "#f1a9a0"), (late, _WAIT)):
        for r, p, s, e in zip(w["rank"][sel].tolist(), w["program"][sel].tolist(), w["start_ns"][sel].tolist(),
                              w["end_ns"][sel].tolist()):
            if (r, p) in lanes:
                ax.broken_barh([(_us(s - t0), max(_us(e - s), 1e-3))], (lanes[(r, p)] - 0.4, 0.8), color=color, lw=0)
    nt = v["notifies"]
    xs = _us(np.asarray(nt["start_ns"], np.float64) - t0)
    ys = [lanes.get((int(r), int(p)), -10) for r, p in zip(nt["rank"], nt["program"])]
    ax.scatter(xs, ys, marker="|", s=30, color="#1d2330", linewidths=0.8, label="notify")
    ax.set_yticks(range(n), [f"r{r} p{p}" for (r, p) in lanes])
    ax.tick_params(axis="y", labelsize=7)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0, _us(span))
    ax.set_xlabel("time since the launch's first event (µs)")
    ax.set_title(f"Launch {ln}, every workgroup: alive (light blue), waiting (red; dark: its producer was late), notifies (ticks)")
    return _svg(fig, "lanes")


def _heatmaps(doc: dict) -> str:
    v = (doc.get("views") or {}).get("heat") or {}
    if not v:
        return ""
    plt = _plt()
    ranks, n_prog, bins = v["ranks"], v["n_programs"], v["bins"]
    fig, axes = plt.subplots(2, 1, figsize=(9.2, 0.42 * len(ranks) * 2 + 2.0), squeeze=False)
    for ax, (col, title) in zip(axes[:, 0], (("busy_us", "busy time (not waiting)"), ("wait_us", "wait time"))):
        m = np.array([[np.nan if x is None else x for x in row] for row in v[col]], dtype=np.float64)
        im = ax.imshow(np.ma.masked_invalid(m), aspect="auto", cmap="viridis", interpolation="nearest",
                       extent=(-0.5, n_prog - 0.5, len(ranks) - 0.5, -0.5))
        ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
        ax.set_xlabel("program" + (f" ({n_prog // bins} per cell)" if bins < n_prog else ""))
        ax.set_title(f"Mean {title} per workgroup, over launches")
        cb = fig.colorbar(im, ax=ax, pad=0.01, fraction=0.04)
        cb.set_label("µs")
        ax.spines[["top", "right"]].set_visible(True)
    fig.tight_layout()
    return _svg(fig, "heat")


def _wait_hist(doc: dict) -> str:
    v = (doc.get("views") or {}).get("wait_hist") or {}
    if not v:
        return ""
    plt = _plt()
    edges = np.asarray(v["edges"], np.float64)
    fig, ax = plt.subplots(figsize=(8.2, 3.0))
    for r, h in v["ranks"].items():
        ax.stairs(np.asarray(h["counts"]), edges, label=f"rank {r}: {h['positive']:,} of its {h['waits']:,} waits last > 0 ns",
                  linewidth=1.4)
    ax.set_xscale("log")
    # plain-text ticks ("1 µs"): with mathtext off, the log axis' own labels would print as TeX
    # source ($\mathdefault{10^{3}}$)
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: fmt_ns(x) if x > 0 else ""))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("wait time (log scale)")
    ax.set_ylabel("waits per bin")
    ax.set_title("Distribution of wait times per rank (waits of 0 ns, their flag already set, not shown)")
    ax.legend(fontsize=8, frameon=False)
    ax.grid(color="#e5e7ee", linewidth=0.6)
    ax.set_axisbelow(True)
    return _svg(fig, "hist")


# ---------------------------------------------------------------------------------------------
# the page
# ---------------------------------------------------------------------------------------------


def _cell(c: str, v) -> str:
    if v is None:
        return "<td></td>"
    if c.endswith("_ns") and isinstance(v, (int, float)):
        return f"<td>{_e(fmt_ns(float(v)))}</td>"
    if isinstance(v, float):
        return f"<td>{v:.3g}</td>"
    if isinstance(v, (list, tuple)):
        return f"<td class='l'>{_e(', '.join(map(str, v)))}</td>"
    if isinstance(v, str):
        return f"<td class='l'>{_e(v)}</td>"
    return f"<td>{_e(v)}</td>"


def _doc_table(doc: dict, name: str, cols: list[str], n: int = 12, title: str = "") -> str:
    """A table of the document (its first ``n`` rows, biggest first)."""
    t = (doc.get("tables") or {}).get(name) or {}
    rows = t.get("rows") or []
    if not rows:
        return ""
    cols = [c for c in cols if c in (t.get("columns") or rows[0])]
    head = "".join(f"<th class='l'>{_e(c)}</th>" if isinstance(rows[0].get(c), (str, list)) else f"<th>{_e(c)}</th>"
                   for c in cols)
    body = "".join("<tr>" + "".join(_cell(c, r.get(c)) for c in cols) + "</tr>" for r in rows[:n])
    total = int(t.get("rows_total", len(rows)))
    more = f"<p class='sub'>{total - n:,} more rows in the JSON report.</p>" if total > n else ""
    return (f"<h3>{_e(title)}</h3>" if title else "") + f"<table><tr>{head}</tr>{body}</table>{more}"


def _table(t: np.ndarray, cols: list[str], n: int = 12, title: str = "") -> str:
    """A table given as a structured array (the diff report's)."""
    if t is None or t.size == 0:
        return ""
    rows = [{c: (t[c][i].item() if hasattr(t[c][i], "item") else t[c][i]) for c in cols if c in (t.dtype.names or ())}
            for i in range(min(n, t.size))]
    doc = {"tables": {"t": {"rows": rows, "columns": list(t.dtype.names or ()), "rows_total": int(t.size)}}}
    return _doc_table(doc, "t", cols, n, title)


_SCRIPT = """<script>
window.ktraceErrors=[];window.addEventListener('error',function(e){window.ktraceErrors.push(String(e.message));});
document.addEventListener('DOMContentLoaded',function(){
  var n=document.querySelectorAll('div.plot > svg').length;
  document.body.setAttribute('data-rendered', window.ktraceErrors.length? 'errors' : 'ok');
  document.body.setAttribute('data-plots', String(n));
});
</script>"""


#: A finding's data shown in its numbers table, less these: times on the capture's clock (not
#: durations), internal ids and the kind (its badge says it).
_NOT_NUMBERS = frozenset({"kind", "since_ns", "gave_up_ns", "stuck_since_ns", "stuck_until_ns", "last_event_ns",
                          "region_id"})


def _range(f: dict) -> str:
    if f.get("start_ns") is None:
        return ""
    end = f" .. +{_e(fmt_ns(f['end_ns']))}" if f.get("end_ns") is not None else ""
    link = (f" <a href='{_e(f['perfetto'])}' target='_blank' rel='noopener'>view in Perfetto</a>"
            if f.get("perfetto") else "")
    return f" <span class='range'>[+{_e(fmt_ns(f['start_ns']))}{end}]{link}</span>"


def _findings_html(findings: list, pictures: dict | None = None) -> str:
    """Findings as the document has them (dicts: kind, severity, text, range, Perfetto link): each
    a headline, folded over its full text, its range, what to do next and its own small picture."""
    if not findings:
        return "<p>No findings.</p>"
    items = []
    for i, f in enumerate(findings):
        pic = (pictures or {}).get(str(i))
        small = ""
        if pic:
            small = _plot(swimlanes.render(pic, ident=f"f{i}", width=900, plot_height=min(200, 22 * len(pic["rows"]["rank"]))),
                          "Where it costs most: " + swimlanes.caption(pic) + ".")
        nxt = headlines.NEXT.get(f["kind"])
        nums = [(k, v) for k, v in (f.get("data") or {}).items()
                if isinstance(v, (int, float, str)) and not isinstance(v, bool) and k not in _NOT_NUMBERS][:16]
        table = ("<table class='numbers'>" + "".join(f"<tr><th class='l'>{_e(k)}</th>{_cell(k, v)}</tr>" for k, v in nums)
                 + "</table>") if nums else ""
        items.append(
            f"<details class='finding' id='f{i + 1}'><summary><span class='sev {f['severity']}'>{_e(f['kind'])}</span>"
            f"{i + 1}. {_e(headlines.headline(f))}</summary><p>{_e(f['text'])}{_range(f)}</p>"
            + (f"<p class='next'>What to do next: {_e(nxt)} (<a href='#guide'>guide</a>)</p>" if nxt else "")
            + small + (f"<details><summary class='sub'>its numbers</summary>{table}</details>" if table else "")
            + "</details>")
    return "".join(items)


def _first_screen(doc: dict, verdict: str) -> str:
    """The verdict, at most three headlines and the first finding's picture."""
    fs = doc["findings"]
    top = headlines.first(doc)
    items = "".join(f"<li><a href='#f{fs.index(f) + 1}'><span class='sev {f['severity']}'>{_e(f['kind'])}</span>"
                    f"{_e(headlines.headline(f))}</a></li>" for f in top)
    out = f"<p class='verdict' id='verdict'>{_e(verdict)}</p>" + (f"<ol class='headlines' id='headlines'>{items}</ol>" if items else "")
    pics = (doc.get("views") or {}).get("findings") or {}
    if not top and fs:  # (nothing worth a headline: say what is below the fold, and where)
        out += (f"<p class='sub' id='below'>No finding worth a headline. <a href='#findings'>{len(fs)} "
                f"finding{'s' if len(fs) != 1 else ''} below</a>, for information.</p>")
    if top:
        k = str(fs.index(top[0]))
        if k in pics:
            rows = len(pics[k]["rows"]["rank"])
            svg = swimlanes.render(pics[k], ident="first", width=1180, plot_height=min(470, max(240, 30 * rows)))
            out += (f"<figure class='picture' id='picture'><figcaption>Finding {int(k) + 1}, "
                    f"{_e(swimlanes.caption(pics[k]))}:</figcaption><div class='plot'>{svg}</div></figure>")
    return out


def _plot(svg: str, caption: str) -> str:
    return f"<div class='plot'>{svg}<div class='caption'>{_e(caption)}</div></div>" if svg else ""


def render_html(report) -> str:
    """The report as one self-contained HTML page, made from its document alone (a Report, or the
    JSON ``ktrace report --json`` wrote, parsed): ``ktrace.analysis.document``, as its JSON has it."""
    doc = dump_document(report)
    s = doc["summary"]
    trace_url = doc.get("trace_url")
    unmatched = s.get("waits_unmatched") or 0
    summary_rows = [
        ("source", s["source"]), ("ranks", f"{s['world_size']} ({', '.join(map(str, s['ranks']))})" + (" PARTIAL" if s["partial"] else "")),
        (M["launches"][0], f"{s['launches']:,}"), ("kernels", ", ".join(s["kernels"]) or "?"), (M["events"][0], f"{s['events']:,}"),
        ("workgroups", f"{s['workgroups']:,}"), (M["kernel_time_ns"][0], kernel_time_value(s.get("kernel_time_ns"), s["launches"])),
        ("clock", str(s["clock"]) + (f", ranks aligned within ~{fmt_ns(s['clock_bound_ns'])}" if s.get("clock_bound_ns") else "")),
        (M["waits"][0], f"{s['waits']:,}"),
        (M["wait_ns"][0], f"{fmt_ns(s['wait_ns'])} (producer late {fmt_ns(s['producer_late_ns'])}, "
                  f"signal latency {fmt_ns(s['signal_latency_ns'])}, of which unexplained {fmt_ns(s.get('unexplained_ns'))})"),
        ("timeouts", s["timeouts"]), ("waits without a captured notify", s["waits_unreleased"]),
    ] + ([("waits not matched to one notify (their flag's notifies captured)", unmatched)] if unmatched else [])
    summ = "<table>" + "".join(f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(v)}</td></tr>" for k, v in summary_rows) + "</table>"
    summ += "".join(f"<p class='note'>{_e(x)}</p>" for x in measured_lines(s))  # (probe cost, checked predictions)
    perfetto_note = (
        "<p class='note'>Times are relative to the capture's first event, which is time 0 of the trace that "
        "<code>ktrace merge</code> writes. Each finding's link opens ui.perfetto.dev at its time range"
        + (" with this capture's trace." if trace_url else
           "; load the trace there first (<code>ktrace open TRACE</code>, or pass <code>--trace-url</code> to "
           "<code>ktrace report</code> so that the links load it), then follow the link or zoom to the range shown.")
        + "</p>")
    counts_svg, lanes_svg = _launch_plots(doc)
    plots = (
        _plot(_savings_plot(doc), "Each root cause found, and how much shorter each launch would be without it: the "
                                  "capture's notify -> wait graph replayed with that producer on time, that rank or program "
                                  "started on time, those workgroups at the median work. Red: a hang; amber: a warning.")
        + _plot(_why_plot(doc), "Every wait's time, split: while its producer had not started, was itself waiting, was "
                                "working in a region, or was outside any region; then the signal's trip (up to the one-way "
                                "latency the clock calibration measured) and what nobody explains.")
        + _plot(counts_svg, "One launch, on its own time axis: per rank, how many workgroups were running and how many "
                            "were waiting.")
        + _plot(lanes_svg, "The same launch, one lane per workgroup.")
        + _plot(_heatmaps(doc), "Per rank and program, the mean busy and wait time of its workgroups over the launches "
                                "(colour scale in µs).")
        + _plot(_wait_hist(doc), "How long waits took, per rank.")
    )
    tables = (
        _doc_table(doc, "causes", ["kind", "rank", "n_launches", "saving_per_launch_ns", "share", "magnitude_ns", "programs",
                                   "rounds", "region", "waiting_removed_ns"], title="Root causes")
        + _doc_table(doc, "wait_causes_by_rank", ["rank", "n_waits", "wait_ns", "producer_late_ns", "late_not_started_ns",
                                                  "late_waiting_ns", "late_in_region_ns", "late_outside_ns", "late_missing_ns",
                                                  "link_ns", "unexplained_ns"], title="Why the waits waited, per rank (rank -1: all)")
        + _doc_table(doc, "stalls_by_rank", ["rank", "n_waits", "wait_ns", "producer_late_ns", "signal_latency_ns", "wait_frac",
                                             "timeouts"], title=f"{M['wait_ns'][0].capitalize()} per rank")
        + _doc_table(doc, "stragglers", ["rank", "n_notifies", "n_late", "cost_ns", "held_excess_ns", "late_median_ns",
                                         "late_max_ns", "waiter_ranks", "before_region", "before_ns"], title="Producers")
        + _doc_table(doc, "outlier_workgroups", ["rank", "launch", "program", "sm", "work_ns", "held_ns", "wait_ns",
                                                 "work_items", "cause", "top_region", "top_region_excess_ns"],
                     title="Outlier workgroups")
        + _doc_table(doc, "launch_timing", ["launch", "rank", "kernel", "dur_ns", "start_skew_ns", "end_skew_ns"],
                     title="Launch timing per rank")
        + _doc_table(doc, "critical_path", ["launch", "step", "kind", "rank", "program", "dur_ns", "region"], n=20,
                     title="Critical path")
        + _doc_table(doc, "timeouts", ["rank", "launch", "program", "sm", "peer", "flag", "cmp", "expected", "value",
                                       "waited_ns", "status"], title="Waits that gave up")
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>ktrace report: "
        + _e(doc["source"]) + f"</title><style>{_CSS}</style>{_SCRIPT}</head><body>"
        + f"<section class='first'><header><h1>ktrace report</h1><div class='sub'>{_e(doc['source'])}</div>"
        + "<a class='guide' href='#guide'>How to read this report</a></header>"
        + _first_screen(doc, s.get("verdict", "")) + "</section>"
        + f"<h2 id='findings'>Findings</h2>{_findings_html(doc['findings'], (doc.get('views') or {}).get('findings'))}{perfetto_note}"
        + f"<h2>Summary</h2>{summ}<h2>Plots</h2>{plots}<h2>Tables</h2>{tables}{guide.section()}</body></html>"
    )


def write_html(report, path: str | os.PathLike) -> Path:
    """Write :func:`render_html` of a report (a Report or its JSON document) to ``path`` (UTF-8,
    renamed into place when complete); returns the path."""
    from ktrace.fileio import write_bytes

    return write_bytes(path, render_html(report).encode("utf-8"))


def _diff_bars(t: np.ndarray, n: int = 15) -> str:
    if t.size == 0:
        return ""
    plt = _plt()
    t = t[:n]
    d = t["delta_ns"].astype(float) / 1e3
    labels = [f"{reg} (rank {r})" for reg, r in zip(t["region"].tolist(), t["rank"].tolist())]
    fig, ax = plt.subplots(figsize=(8.2, 0.34 * t.size + 1.0))
    y = np.arange(t.size)[::-1]
    ax.barh(y, d, color=np.where(d > 0, "#c0392b", "#27ae60"), height=0.62)
    ax.set_yticks(y, labels)
    ax.axvline(0, color="#666", linewidth=0.8)
    m = max(float(np.abs(d).max()), 1e-3)
    ax.set_xlim(-1.3 * m if (d < 0).any() else -0.05 * m, 1.3 * m if (d > 0).any() else 0.05 * m)
    for yy, v in zip(y, d):
        ax.text(v + (0.02 * m if v >= 0 else -0.02 * m), yy, ("+" if v >= 0 else "-") + fmt_ns(abs(v) * 1e3),
                va="center", ha="left" if v >= 0 else "right", fontsize=8)
    ax.set_xlabel("change per launch, B - A (µs): red slower, green faster")
    ax.set_title("Biggest movers per region and rank")
    return _svg(fig, "diff")


def render_diff_html(d) -> str:
    """A diff report (``ktrace.analysis.build_diff``) as one self-contained HTML page."""
    bars = _diff_bars(d.tables["regions"])
    movers = [f.to_dict() for f in d.findings]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>ktrace diff</title>"
        f"<style>{_CSS}</style>{_SCRIPT}</head><body><h1>ktrace diff</h1>"
        f"<section class='first'><div class='sub'>A = {_e(d.a)}<br>B = {_e(d.b)}</div>"
        + _first_screen({"findings": movers, "views": {}}, diff_headline(d.summary))
        + _plot(bars, 'Per region and rank, how much time changed per launch.') + "</section>"
        + f"<h2>Biggest movers</h2>{_findings_html(movers)}"
        "<h2>Tables</h2>"
        + _table(d.tables["regions"], ["region", "rank", "a_ns", "b_ns", "delta_ns", "rel_change", "a_count", "b_count"], n=25, title="Per region and rank")
        + _table(d.tables["ranks"], ["rank", "measure", "a_ns", "b_ns", "delta_ns", "rel_change"], n=40, title="Per rank")
        + _table(d.tables["workgroups"], ["rank", "program", "a_ns", "b_ns", "delta_ns", "a_busy_ns", "b_busy_ns"], n=25, title="Per workgroup")
        + "</body></html>"
    )


def write_diff_html(d, path: str | os.PathLike) -> Path:
    from ktrace.fileio import write_bytes

    return write_bytes(path, render_diff_html(d).encode("utf-8"))
