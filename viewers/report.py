"""The HTML report: one self-contained file (inline CSS and SVG, no network), readable offline.

:func:`render_html` lays out a ``ktrace.analysis.Report``: the verdict, the findings (root causes
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

from ktrace.text import fmt_ns

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
"""

_RUN, _WAIT, _LATE = "#2f6fb3", "#d0453b", "#e8a33d"
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


def _short(f) -> str:
    d = f.data
    if f.kind == "hang":
        return f"hang: rank {d.get('consumer')} waits on rank {d.get('producer')}"
    if f.kind == "late_launch":
        return f"rank {f.data.get('rank')} launched late"
    if f.kind == "late_notifies":
        return f"rank {d.get('rank')} late notifies"
    if f.kind == "uneven_work":
        progs = d.get("programs") or {}
        n = sum(len(p) for p in progs.values())
        if n == 1:
            r, ps = next(iter(progs.items()))
            return f"heavy workgroup r{r} p{ps[0]}"
        return f"uneven work: {n} workgroups"
    if f.kind == "uneven_ranks":
        return f"uneven work across ranks ({d.get('role', '')})"
    if f.kind == "slow_link":
        return f"slow link {d.get('rank')}->{d.get('consumer')}"
    return f.kind


def _savings_plot(rep) -> str:
    causes = [f for f in rep.findings if "saving_per_launch_ns" in f.data][:10]
    if not causes:
        return ""
    plt = _plt()
    vals = np.array([f.data["saving_per_launch_ns"] for f in causes]) / 1e3
    labels = [_short(f) for f in causes]
    fig, ax = plt.subplots(figsize=(8.2, 0.42 * len(causes) + 0.9))
    y = np.arange(len(causes))[::-1]
    ax.barh(y, vals, color=[_SEV_COLOR[f.severity] for f in causes], height=0.62)
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


def _why_plot(rep) -> str:
    t = rep.tables.get("wait_causes_by_rank") if hasattr(rep.tables, "get") else None
    if t is None or t.size == 0:
        return ""
    t = t[t["rank"] >= 0]
    if t.size == 0 or float(t["wait_ns"].sum()) <= 0:
        return ""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.2, 0.5 * t.size + 1.3))
    y = np.arange(t.size)[::-1]
    left = np.zeros(t.size)
    scale = 1e3 if float(t["wait_ns"].max()) < 2e6 else 1e6
    unit = "µs" if scale == 1e3 else "ms"
    for col, label, color in _SPLIT:
        v = t[col].astype(np.float64) / scale
        ax.barh(y, v, left=left, color=color, height=0.6, label=label)
        left += v
    ax.set_yticks(y, [f"rank {r}" for r in t["rank"].tolist()])
    ax.set_xlabel(f"wait time ({unit}), summed over the rank's waits")
    s = rep.summary.get("sampled_launches", [0, 0])
    on = f" (launches sampled: {s[0]:,} of {s[1]:,})" if s and s[0] < s[1] else ""
    ax.set_title("Why the waits waited" + on)
    ax.set_xlim(0, max(float(left.max()), 1e-9) * 1.05)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28 if t.size < 3 else -0.2), ncol=3, frameon=False, fontsize=8)
    ax.grid(axis="x", color="#e5e7ee", linewidth=0.6)
    ax.set_axisbelow(True)
    return _svg(fig, "why")


def _focus_launch(rep) -> int | None:
    wg = rep.tables["workgroups"]
    if wg.size == 0:
        return None
    for f in rep.findings:
        if f.start_ns is not None:
            t = f.start_ns + rep.origin_ns
            hit = wg[(wg["start_ns"] <= t + 1) & (wg["end_ns"] >= t)]
            if hit.size:
                return int(np.bincount(hit["launch"]).argmax())
    from ktrace.analysis.causes import launch_makespans

    lids, spans = launch_makespans(rep.trace)
    return int(lids[np.argmax(spans)]) if lids.size else None


def _launch_plots(rep) -> tuple[str, str]:
    """One launch: per-rank counts of workgroups running and waiting over its own time, and, for
    grids of at most 64 workgroups in all, every workgroup's lane."""
    wg_all = rep.tables["workgroups"]
    ln = _focus_launch(rep)
    if ln is None:
        return "", ""
    plt = _plt()
    wg = wg_all[wg_all["launch"] == ln]
    w = rep.tables["waits"]
    w = w[w["launch"] == ln]
    t0 = int(wg["start_ns"].min())
    t1 = int(wg["end_ns"].max())
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
    f0 = next((f for f in rep.findings if f.start_ns is not None), None)
    fig, axes = plt.subplots(len(ranks), 1, figsize=(9.2, 1.25 * len(ranks) + 0.9), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], ranks):
        sel = wg["rank"] == r
        alive = count(wg["start_ns"][sel], wg["end_ns"][sel])
        ws = w["rank"] == r
        waiting = count(w["start_ns"][ws], w["end_ns"][ws]) if ws.any() else np.zeros(bins)
        waiting = np.minimum(waiting, alive)
        running = alive - waiting
        ax.stairs(running + waiting, x, fill=True, color=_WAIT, label="waiting")
        ax.stairs(running, x, fill=True, color=_RUN, label="running (not waiting)")
        ax.set_ylim(0, max(float(alive.max()), 1) * 1.1)
        ax.set_ylabel(f"rank {r}\nworkgroups", rotation=0, ha="right", va="center", labelpad=6)
        if f0 is not None and f0.end_ns is not None:
            a, b = _us(f0.start_ns + rep.origin_ns - t0), _us(f0.end_ns + rep.origin_ns - t0)
            if b > 0 and a < _us(span):
                ax.axvspan(max(a, 0), min(b, _us(span)), color="#f1c40f", alpha=0.25, lw=0)
    axes[0, 0].set_title(f"Launch {ln} ({wg['role'][0] if wg.size else ''}): workgroups running and waiting, per rank"
                         + (" (shaded: the first finding's range)" if f0 is not None else ""))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    axes[-1, 0].set_xlabel(f"time since the launch's first event (µs); the launch starts at +{fmt_ns(t0 - rep.origin_ns)}")
    # below the axes: a legend inside would cover the counts
    axes[-1, 0].legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.55), fontsize=8, frameon=False, ncol=2)
    axes[-1, 0].set_xlim(0, _us(span))
    counts_svg = _svg(fig, "launch")
    lanes_svg = ""
    if 0 < wg.size <= 64 and rep.trace is not None:
        lanes_svg = _lanes_plot(rep, wg, w, ln, t0, span)
    return counts_svg, lanes_svg


def _lanes_plot(rep, wg, w, ln, t0, span) -> str:
    """Every workgroup of one launch on its own lane: its life (light), its waits (red, darker
    when its producer was late) and its notifies (ticks)."""
    from ktrace.schema import EventKind

    plt = _plt()
    tr = rep.trace
    order = np.lexsort((wg["program"], wg["rank"]))
    wg = wg[order]
    lanes = {(int(r), int(p)): i for i, (r, p) in enumerate(zip(wg["rank"].tolist(), wg["program"].tolist()))}
    n = len(lanes)
    fig, ax = plt.subplots(figsize=(9.2, 0.2 * n + 1.2))
    for r, p, s, e in zip(wg["rank"].tolist(), wg["program"].tolist(), wg["start_ns"].tolist(), wg["end_ns"].tolist()):
        ax.broken_barh([(_us(s - t0), _us(e - s))], (lanes[(r, p)] - 0.4, 0.8), color="#cfe0f3", lw=0)
    late = np.nan_to_num(w["producer_late_ns"]) > 0
    for sel, color in ((~late, "#f1a9a0"), (late, _WAIT)):
        for r, p, s, e in zip(w["rank"][sel].tolist(), w["program"][sel].tolist(), w["start_ns"][sel].tolist(),
                              w["end_ns"][sel].tolist()):
            if (r, p) in lanes:
                ax.broken_barh([(_us(s - t0), max(_us(e - s), 1e-3))], (lanes[(r, p)] - 0.4, 0.8), color=color, lw=0)
    nr = tr.rows_of(EventKind.NOTIFY)
    nl = tr.at(EventKind.NOTIFY, "launch")
    sel = nl == ln
    xs = _us(tr.at(EventKind.NOTIFY, "start_ns")[sel] - t0)
    ys = [lanes.get((int(r), int(p)), -10) for r, p in zip(tr.at(EventKind.NOTIFY, "rank")[sel].tolist(),
                                                         tr.at(EventKind.NOTIFY, "program")[sel].tolist())]
    del nr
    ax.scatter(xs, ys, marker="|", s=30, color="#1d2330", linewidths=0.8, label="notify")
    ax.set_yticks(range(n), [f"r{r} p{p}" for (r, p) in lanes])
    ax.tick_params(axis="y", labelsize=7)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0, _us(span))
    ax.set_xlabel("time since the launch's first event (µs)")
    ax.set_title(f"Launch {ln}, every workgroup: alive (light blue), waiting (red; dark: its producer was late), notifies (ticks)")
    return _svg(fig, "lanes")


def _heatmaps(rep) -> str:
    wg = rep.tables["workgroups"]
    if wg.size == 0:
        return ""
    plt = _plt()
    ranks = np.unique(wg["rank"])
    n_prog = int(wg["program"].max()) + 1
    bins = min(n_prog, 256)
    pb = (wg["program"].astype(np.int64) * bins) // n_prog
    ri = np.searchsorted(ranks, wg["rank"])
    key = ri * bins + pb
    cnt = np.bincount(key, minlength=ranks.size * bins)
    fig, axes = plt.subplots(2, 1, figsize=(9.2, 0.42 * ranks.size * 2 + 2.0), squeeze=False)
    for ax, (col, title) in zip(axes[:, 0], (("busy_ns", "busy time (not waiting)"), ("wait_ns", "wait time"))):
        tot = np.bincount(key, weights=wg[col].astype(float), minlength=ranks.size * bins)
        m = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan).reshape(ranks.size, bins) / 1e3
        im = ax.imshow(np.ma.masked_invalid(m), aspect="auto", cmap="viridis", interpolation="nearest",
                       extent=(-0.5, n_prog - 0.5, ranks.size - 0.5, -0.5))
        ax.set_yticks(range(ranks.size), [f"rank {r}" for r in ranks.tolist()])
        ax.set_xlabel("program" + (f" ({n_prog // bins} per cell)" if bins < n_prog else ""))
        ax.set_title(f"Mean {title} per workgroup, over launches")
        cb = fig.colorbar(im, ax=ax, pad=0.01, fraction=0.04)
        cb.set_label("µs")
        ax.spines[["top", "right"]].set_visible(True)
    fig.tight_layout()
    return _svg(fig, "heat")


def _wait_hist(rep) -> str:
    w = rep.tables["waits"]
    d = w["wait_ns"].astype(float)
    pos = d > 0
    if not pos.any():
        return ""
    plt = _plt()
    lo, hi = np.log10(max(d[pos].min(), 1.0)), np.log10(d[pos].max()) + 1e-9
    edges = np.logspace(lo, hi, 41)
    fig, ax = plt.subplots(figsize=(8.2, 3.0))
    for r in np.unique(w["rank"]).tolist():
        mine = w["rank"] == r
        x = d[mine & pos]
        c, _ = np.histogram(x, bins=edges)
        ax.stairs(c, edges, label=f"rank {r}: {x.size:,} of its {int(mine.sum()):,} waits last > 0 ns", linewidth=1.4)
    ax.set_xscale("log")
    ax.set_xlabel("wait time (ns, log scale)")
    ax.set_ylabel("waits per bin")
    ax.set_title("Distribution of wait times per rank (waits of 0 ns, their flag already set, not shown)")
    ax.legend(fontsize=8, frameon=False)
    ax.grid(color="#e5e7ee", linewidth=0.6)
    ax.set_axisbelow(True)
    return _svg(fig, "hist")


# ---------------------------------------------------------------------------------------------
# the page
# ---------------------------------------------------------------------------------------------


def _table(t: np.ndarray, cols: list[str], n: int = 12, title: str = "") -> str:
    if t is None or t.size == 0:
        return ""
    cols = [c for c in cols if c in (t.dtype.names or ())]
    head = "".join(f"<th class='l'>{_e(c)}</th>" if t.dtype[c].kind == "O" else f"<th>{_e(c)}</th>" for c in cols)
    rows = []
    for row in t[:n]:
        cells = []
        for c in cols:
            v = row[c]
            if c.endswith("_ns"):
                cells.append(f"<td>{_e(fmt_ns(float(v)))}</td>")
            elif isinstance(v, (float, np.floating)):
                cells.append(f"<td>{v:.3g}</td>")
            elif t.dtype[c].kind == "O":
                cells.append(f"<td class='l'>{_e(', '.join(map(str, v)) if isinstance(v, tuple) else v)}</td>")
            else:
                cells.append(f"<td>{_e(v)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p class='sub'>{t.size - n:,} more rows in the JSON report.</p>" if t.size > n else ""
    return (f"<h3>{_e(title)}</h3>" if title else "") + f"<table><tr>{head}</tr>{''.join(rows)}</table>{more}"


_SCRIPT = """<script>
window.ktraceErrors=[];window.addEventListener('error',function(e){window.ktraceErrors.push(String(e.message));});
document.addEventListener('DOMContentLoaded',function(){
  var n=document.querySelectorAll('div.plot > svg').length;
  document.body.setAttribute('data-rendered', window.ktraceErrors.length? 'errors' : 'ok');
  document.body.setAttribute('data-plots', String(n));
});
</script>"""


def _findings_html(findings, trace_url, trace_end_ns=None, ranks=None) -> str:
    if not findings:
        return "<p>No findings.</p>"
    items = []
    for f in findings:
        rng = ""
        if f.start_ns is not None:
            end = f" .. +{_e(fmt_ns(f.end_ns))}" if f.end_ns is not None else ""
            rng = (f" <span class='range'>[+{_e(fmt_ns(f.start_ns))}{end}] "
                   f"<a href='{_e(f.perfetto_url(trace_url, trace_end_ns, ranks))}' target='_blank' rel='noopener'>view in Perfetto</a></span>")
        items.append(f"<li><span class='sev {f.severity}'>{_e(f.kind)}</span>{_e(f.text)}{rng}</li>")
    return "<ol class='findings'>" + "".join(items) + "</ol>"


def _plot(svg: str, caption: str) -> str:
    return f"<div class='plot'>{svg}<div class='caption'>{_e(caption)}</div></div>" if svg else ""


def render_html(rep) -> str:
    """The report as one self-contained HTML page."""
    s = rep.summary
    t = rep.tables
    trace_url = rep.config.trace_url
    summary_rows = [
        ("source", s["source"]), ("ranks", f"{s['world_size']} ({', '.join(map(str, s['ranks']))})" + (" PARTIAL" if s["partial"] else "")),
        ("launches", f"{s['launches']:,}"), ("kernels", ", ".join(s["kernels"]) or "?"), ("events", f"{s['events']:,}"),
        ("workgroups", f"{s['workgroups']:,}"), ("kernel time (launch durations summed)", fmt_ns(s.get("kernel_time_ns"))),
        ("clock", s["clock"] + (f", ranks aligned within ~{fmt_ns(s['clock_bound_ns'])}" if s.get("clock_bound_ns") else "")),
        ("waits", f"{s['waits']:,}: {fmt_ns(s['wait_ns'])} (producer late {fmt_ns(s['producer_late_ns'])}, "
                  f"signal latency {fmt_ns(s['signal_latency_ns'])}, of which unexplained {fmt_ns(s.get('unexplained_ns'))})"),
        ("timeouts", s["timeouts"]), ("waits without a captured notify", s["waits_unreleased"]),
    ]
    summ = "<table>" + "".join(f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(v)}</td></tr>" for k, v in summary_rows) + "</table>"
    perfetto_note = (
        "<p class='note'>Times are relative to the capture's first event, which is time 0 of the trace that "
        "<code>ktrace merge</code> writes. Each finding's link opens ui.perfetto.dev at its time range"
        + (" with this capture's trace." if trace_url else
           "; load the trace there first (<code>ktrace open TRACE</code>, or pass <code>--trace-url</code> to "
           "<code>ktrace report</code> so that the links load it), then follow the link or zoom to the range shown.")
        + "</p>")
    counts_svg, lanes_svg = _launch_plots(rep)
    plots = (
        _plot(_savings_plot(rep), "Each root cause found, and how much shorter each launch would be without it: the "
                                  "capture's notify -> wait graph replayed with that producer on time, that rank launched "
                                  "on time, those workgroups at the median work. Red: a hang; amber: a warning.")
        + _plot(_why_plot(rep), "Every wait's time, split: while its producer had not started, was itself waiting, was "
                                "working in a region, or was outside any region; then the signal's trip (up to the one-way "
                                "latency the clock calibration measured) and what nobody explains.")
        + _plot(counts_svg, "One launch, on its own time axis: per rank, how many workgroups were running and how many "
                            "were waiting.")
        + _plot(lanes_svg, "The same launch, one lane per workgroup.")
        + _plot(_heatmaps(rep), "Per rank and program, the mean busy and wait time of its workgroups over the launches "
                                "(colour scale in µs).")
        + _plot(_wait_hist(rep), "How long waits took, per rank.")
    )
    over = t["workgroups"][t["workgroups"]["outlier"]]
    tables = (
        _table(t["causes"], ["kind", "rank", "n_launches", "saving_per_launch_ns", "share", "magnitude_ns", "programs",
                             "rounds", "region", "waiting_removed_ns"], title="Root causes")
        + _table(t["wait_causes_by_rank"], ["rank", "n_waits", "wait_ns", "producer_late_ns", "late_not_started_ns",
                                            "late_waiting_ns", "late_in_region_ns", "late_outside_ns", "late_missing_ns",
                                            "link_ns", "unexplained_ns"], title="Why the waits waited, per rank (rank -1: all)")
        + _table(t["stalls_by_rank"], ["rank", "n_waits", "wait_ns", "producer_late_ns", "signal_latency_ns", "wait_frac", "timeouts"],
                 title="Waiting per rank")
        + _table(t["stragglers"], ["rank", "n_notifies", "n_late", "cost_ns", "held_excess_ns", "late_median_ns",
                                   "late_max_ns", "waiter_ranks", "before_region", "before_ns"], title="Producers")
        + _table(over[np.argsort(-over["work_ns"], kind="stable")], ["rank", "launch", "program", "sm", "work_ns", "held_ns", "wait_ns",
                                                                     "work_items", "cause", "top_region", "top_region_excess_ns"],
                 title="Outlier workgroups")
        + _table(t["launch_timing"], ["launch", "rank", "kernel", "dur_ns", "start_skew_ns", "end_skew_ns"], title="Launch timing per rank")
        + _table(t["critical_path"], ["launch", "step", "kind", "rank", "program", "dur_ns", "region"], n=20, title="Critical path")
        + _table(t["timeouts"], ["rank", "launch", "program", "sm", "peer", "flag", "cmp", "expected", "value", "waited_ns", "status"],
                 title="Waits that gave up")
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>ktrace report: "
        + _e(rep.source) + f"</title><style>{_CSS}</style>{_SCRIPT}</head><body>"
        + f"<h1>ktrace report</h1><div class='sub'>{_e(rep.source)}</div>"
        + f"<p class='verdict'>{_e(s.get('verdict', ''))}</p>"
        + f"<h2>Findings</h2>{_findings_html(rep.findings, trace_url, rep.summary.get('trace_end_ns'), rep.summary.get('ranks'))}{perfetto_note}"
        + f"<h2>Summary</h2>{summ}<h2>Plots</h2>{plots}<h2>Tables</h2>{tables}</body></html>"
    )


def write_html(rep, path: str | os.PathLike) -> Path:
    """Write :func:`render_html` to ``path`` (UTF-8); returns the path."""
    from ktrace.fileio import write_bytes

    return write_bytes(path, render_html(rep).encode("utf-8"))


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
    s = d.summary
    ch = f" ({100 * s['kernel_change']:+.1f}%)" if s["kernel_change"] is not None else ""
    bars = _diff_bars(d.tables["regions"])
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>ktrace diff</title>"
        f"<style>{_CSS}</style>{_SCRIPT}</head><body><h1>ktrace diff</h1>"
        f"<div class='sub'>A = {_e(d.a)}<br>B = {_e(d.b)}</div>"
        f"<p>Kernel time per launch, summed over ranks: {_e(fmt_ns(s['kernel_a_ns']))} &rarr; {_e(fmt_ns(s['kernel_b_ns']))}{_e(ch)}</p>"
        f"<h2>Biggest movers</h2>{_findings_html(d.findings, None)}{_plot(bars, 'Per region and rank, how much time changed per launch.')}"
        "<h2>Tables</h2>"
        + _table(d.tables["regions"], ["region", "rank", "a_ns", "b_ns", "delta_ns", "rel_change", "a_count", "b_count"], n=25, title="Per region and rank")
        + _table(d.tables["ranks"], ["rank", "measure", "a_ns", "b_ns", "delta_ns", "rel_change"], n=40, title="Per rank")
        + _table(d.tables["workgroups"], ["rank", "program", "a_ns", "b_ns", "delta_ns", "a_busy_ns", "b_busy_ns"], n=25, title="Per workgroup")
        + "</body></html>"
    )


def write_diff_html(d, path: str | os.PathLike) -> Path:
    from ktrace.fileio import write_bytes

    return write_bytes(path, render_diff_html(d).encode("utf-8"))
