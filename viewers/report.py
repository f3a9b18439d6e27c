"""The HTML report: one self-contained file (inline CSS and SVG, no network), readable offline.

:func:`render_html` lays out a ``ktrace.analysis.Report``: the summary, the ranked findings (each
with its time range and a link to that range in ui.perfetto.dev), and plots drawn as SVG here
(no plotting library): a rank x workgroup heatmap of busy and of wait time, the wait-time
distribution per rank, and per-rank timelines of how many workgroups were busy and waiting.
Tooltips are SVG ``<title>`` elements. :func:`render_diff_html` does the same for a diff.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import numpy as np

from ktrace.text import fmt_ns

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2330;background:#fff;max-width:1280px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde;padding-bottom:4px}
.sub{color:#667;font-size:13px} table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
td,th{border:1px solid #dde;padding:3px 7px;text-align:right} th{background:#f3f4f8} td.l,th.l{text-align:left}
ol.findings li{margin:7px 0;line-height:1.4} .sev{display:inline-block;font-size:11px;padding:1px 6px;border-radius:8px;
margin-right:6px;color:#fff} .error{background:#c0392b} .warning{background:#d68910} .info{background:#5d6d7e}
.range{color:#667;font-size:12px} svg{display:block;margin:6px 0} .plots{display:flex;flex-wrap:wrap;gap:18px}
.note{font-size:12.5px;color:#445;background:#f6f7fb;padding:8px 10px;border-radius:6px}
"""

# a perceptual ramp (dark blue -> teal -> yellow), interpolated
_RAMP = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], float)


def _color(x: float) -> str:
    if not np.isfinite(x):
        return "#eee"
    x = min(max(x, 0.0), 1.0) * (len(_RAMP) - 1)
    i = min(int(x), len(_RAMP) - 2)
    c = _RAMP[i] + (_RAMP[i + 1] - _RAMP[i]) * (x - i)
    return "#%02x%02x%02x" % tuple(int(round(v)) for v in c)


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _heatmap(wg: np.ndarray, col: str, title: str, max_cols: int = 256) -> str:
    """Rank x program heatmap of a workgroup column (mean over launches)."""
    if wg.size == 0:
        return ""
    ranks = np.unique(wg["rank"])
    n_prog = int(wg["program"].max()) + 1
    bins = min(n_prog, max_cols)
    pb = (wg["program"].astype(np.int64) * bins) // n_prog
    ri = np.searchsorted(ranks, wg["rank"])
    key = ri * bins + pb
    tot = np.bincount(key, weights=wg[col].astype(float), minlength=ranks.size * bins)
    cnt = np.bincount(key, minlength=ranks.size * bins)
    m = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan).reshape(ranks.size, bins)
    vmax = np.nanmax(m) if np.isfinite(m).any() else 1.0
    cw = max(2, min(16, 900 // bins))
    ch = 18
    left, top = 54, 22
    w, h = left + bins * cw + 10, top + ranks.size * ch + 30
    out = [f'<svg width="{w}" height="{h}" role="img" aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<text x="{left}" y="14" font-size="12" font-weight="600">{_e(title)} (max {_e(fmt_ns(vmax))})</text>']
    for i, r in enumerate(ranks.tolist()):
        y = top + i * ch
        out.append(f'<text x="{left - 6}" y="{y + 13}" font-size="11" text-anchor="end">rank {r}</text>')
        for j in range(bins):
            v = m[i, j]
            if not np.isfinite(v):
                continue
            p0, p1 = (j * n_prog) // bins, ((j + 1) * n_prog) // bins - 1
            label = f"rank {r} program{'s' if p1 > p0 else ''} {p0}{'-' + str(p1) if p1 > p0 else ''}: {fmt_ns(v)}"
            out.append(f'<rect x="{left + j * cw}" y="{y}" width="{cw}" height="{ch - 2}" fill="{_color(v / vmax if vmax else 0)}">'
                       f'<title>{_e(label)}</title></rect>')
    out.append(f'<text x="{left}" y="{h - 8}" font-size="11">program 0</text>')
    out.append(f'<text x="{left + bins * cw}" y="{h - 8}" font-size="11" text-anchor="end">program {n_prog - 1}</text>')
    out.append("</svg>")
    return "".join(out)


_PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]


def _wait_hist(w: np.ndarray) -> str:
    """Wait-time distribution per rank: counts over log-spaced bins, one line per rank."""
    d = w["wait_ns"].astype(float)
    d = d[d > 0]
    if d.size == 0:
        return "<p class='sub'>No waits longer than 0 ns.</p>"
    lo, hi = np.log10(max(d.min(), 1.0)), np.log10(d.max()) + 1e-9
    edges = np.logspace(lo, hi, 41)
    W, H, left, top, bottom = 640, 240, 50, 20, 36
    ranks = np.unique(w["rank"]).tolist()
    curves = []
    for r in ranks:
        x = w["wait_ns"][(w["rank"] == r) & (w["wait_ns"] > 0)].astype(float)
        curves.append(np.histogram(x, bins=edges)[0])
    ymax = max(int(max(c.max() for c in curves)), 1)
    pw, ph = W - left - 10, H - top - bottom
    out = [f'<svg width="{W}" height="{H}" role="img" aria-label="wait-time distribution" xmlns="http://www.w3.org/2000/svg">',
           f'<text x="{left}" y="13" font-size="12" font-weight="600">Wait time distribution per rank (log scale; waits per bin)</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#888"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#888"/>',
           f'<text x="{left - 4}" y="{top + 8}" font-size="10" text-anchor="end">{ymax}</text>']
    for k in range(int(np.floor(lo)), int(np.ceil(hi)) + 1):
        fx = (k - lo) / (hi - lo) if hi > lo else 0
        if 0 <= fx <= 1:
            x = left + fx * pw
            out.append(f'<line x1="{x:.1f}" y1="{top + ph}" x2="{x:.1f}" y2="{top + ph + 4}" stroke="#888"/>'
                       f'<text x="{x:.1f}" y="{top + ph + 16}" font-size="10" text-anchor="middle">{_e(fmt_ns(10.0 ** k))}</text>')
    for i, (r, c) in enumerate(zip(ranks, curves)):
        xs = left + (np.arange(c.size) + 0.5) / c.size * pw
        ys = top + ph - c / ymax * ph
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))
        col = _PALETTE[i % len(_PALETTE)]
        out.append(f'<polyline points="{pts}" fill="none" stroke="{col}" stroke-width="1.6"><title>rank {r}: {int(c.sum())} waits</title></polyline>')
        out.append(f'<text x="{left + pw - 4}" y="{top + 12 + 13 * i}" font-size="11" text-anchor="end" fill="{col}">rank {r}</text>')
    out.append("</svg>")
    return "".join(out)


def _timelines(rep, bins: int = 300) -> str:
    """Per rank, workgroups busy (blue) and waiting (red) over time, binned."""
    trace = rep.trace
    wg, w = rep.tables["workgroups"], rep.tables["waits"]
    if trace is None or wg.size == 0:
        return ""
    t0 = float(wg["start_ns"].min())
    t1 = float(wg["end_ns"].max())
    span = max(t1 - t0, 1.0)

    def coverage(s, e):
        # intervals counted in every bin they overlap (a difference array over bins)
        a = np.clip(((s - t0) / span * bins).astype(np.int64), 0, bins - 1)
        b = np.clip(((e - t0) / span * bins).astype(np.int64), 0, bins - 1)
        d = np.zeros(bins + 1)
        np.add.at(d, a, 1)
        np.add.at(d, b + 1, -1)
        return np.cumsum(d)[:bins]

    ranks = np.unique(wg["rank"]).tolist()
    W, row_h, left = 900, 46, 54
    H = 24 + row_h * len(ranks) + 24
    pw = W - left - 10
    out = [f'<svg width="{W}" height="{H}" role="img" aria-label="per-rank timelines" xmlns="http://www.w3.org/2000/svg">',
           '<text x="54" y="14" font-size="12" font-weight="600">Per-rank timelines: workgroups running (blue) and waiting (red)</text>']
    for i, r in enumerate(ranks):
        y0 = 24 + i * row_h
        sel = wg["rank"] == r
        alive = coverage(wg["start_ns"][sel].astype(float), wg["end_ns"][sel].astype(float))
        ws = w["rank"] == r
        waiting = coverage(w["start_ns"][ws].astype(float), w["end_ns"][ws].astype(float)) if ws.any() else np.zeros(bins)
        busy = np.maximum(alive - waiting, 0)
        top = max(alive.max(), 1)
        h = row_h - 8
        xs = left + np.arange(bins + 1) / bins * pw

        def area(vals, base, color, name):
            ys_top = y0 + h - (base + vals) / top * h
            ys_bot = y0 + h - base / top * h
            up = " ".join(f"{xs[k]:.1f},{ys_top[k]:.1f} {xs[k + 1]:.1f},{ys_top[k]:.1f}" for k in range(bins))
            dn = " ".join(f"{xs[k + 1]:.1f},{ys_bot[k]:.1f} {xs[k]:.1f},{ys_bot[k]:.1f}" for k in range(bins - 1, -1, -1))
            return f'<polygon points="{up} {dn}" fill="{color}" opacity="0.85"><title>rank {r}: {name}</title></polygon>'

        out.append(f'<text x="{left - 6}" y="{y0 + h / 2 + 4}" font-size="11" text-anchor="end">rank {r}</text>')
        out.append(f'<rect x="{left}" y="{y0}" width="{pw}" height="{h}" fill="#f7f7fa"/>')
        out.append(area(busy, np.zeros(bins), "#2f6fb3", "workgroups running (not waiting)"))
        out.append(area(waiting, busy, "#d0453b", "workgroups waiting"))
    out.append(f'<text x="{left}" y="{H - 6}" font-size="10">+{_e(fmt_ns(t0 - rep.origin_ns))}</text>')
    out.append(f'<text x="{left + pw}" y="{H - 6}" font-size="10" text-anchor="end">+{_e(fmt_ns(t1 - rep.origin_ns))}</text>')
    out.append("</svg>")
    return "".join(out)


def _table(t: np.ndarray, cols: list[str], n: int = 12, title: str = "") -> str:
    if t is None or t.size == 0:
        return ""
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
    more = f"<p class='sub'>{t.size - n} more rows in the JSON report.</p>" if t.size > n else ""
    return (f"<h3 style='font-size:14px'>{_e(title)}</h3>" if title else "") + f"<table><tr>{head}</tr>{''.join(rows)}</table>{more}"


_SCRIPT = """<script>
window.ktraceErrors=[];window.addEventListener('error',function(e){window.ktraceErrors.push(String(e.message));});
document.addEventListener('DOMContentLoaded',function(){
  var n=document.querySelectorAll('svg').length;
  document.body.setAttribute('data-rendered', window.ktraceErrors.length? 'errors' : 'ok');
  document.body.setAttribute('data-plots', String(n));
});
</script>"""


def _findings_html(findings, trace_url, trace_end_ns=None, ranks=None) -> str:
    if not findings:
        return "<p>No findings: no late producers, overloaded workgroups, exposed communication or hangs stood out.</p>"
    items = []
    for f in findings:
        rng = ""
        if f.start_ns is not None:
            rng = (f" <span class='range'>[+{_e(fmt_ns(f.start_ns))} .. +{_e(fmt_ns(f.end_ns))}] "
                   f"<a href='{_e(f.perfetto_url(trace_url, trace_end_ns, ranks))}' target='_blank' rel='noopener'>view in Perfetto</a></span>")
        items.append(f"<li><span class='sev {f.severity}'>{_e(f.kind)}</span>{_e(f.text)}{rng}</li>")
    return "<ol class='findings'>" + "".join(items) + "</ol>"


def render_html(rep) -> str:
    """The report as one self-contained HTML page."""
    s = rep.summary
    t = rep.tables
    trace_url = rep.config.trace_url
    summary_rows = [
        ("source", s["source"]), ("ranks", f"{s['world_size']} ({', '.join(map(str, s['ranks']))})" + (" PARTIAL" if s["partial"] else "")),
        ("launches", s["launches"]), ("kernels", ", ".join(s["kernels"]) or "?"), ("events", f"{s['events']:,}"),
        ("workgroups", f"{s['workgroups']:,}"), ("clock", s["clock"]),
        ("waits", f"{s['waits']:,}: {fmt_ns(s['wait_ns'])} (producer late {fmt_ns(s['producer_late_ns'])}, "
                  f"signal latency {fmt_ns(s['signal_latency_ns'])})"),
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
    wg = t["workgroups"]
    plots = (f"<div class='plots'>{_heatmap(wg, 'busy_ns', 'Busy time per workgroup (mean over launches)')}"
             f"{_heatmap(wg, 'wait_ns', 'Wait time per workgroup (mean over launches)')}</div>"
             f"<div class='plots'>{_wait_hist(t['waits'])}</div>{_timelines(rep)}")
    over = wg[wg["outlier"]]
    tables = (
        _table(t["stragglers"], ["rank", "n_notifies", "n_waits", "cost_ns", "held_excess_ns", "held_median_ns", "late_median_ns", "excess_late_ns", "late_max_ns",
                                 "waiter_ranks", "before_region", "before_ns", "before_others_ns"], title="Producers (stragglers first)")
        + _table(t["stalls_by_rank"], ["rank", "n_waits", "wait_ns", "producer_late_ns", "signal_latency_ns", "wait_frac", "timeouts"],
                 title="Waiting per rank")
        + _table(t["stalls_by_peer"], ["rank", "peer", "n_waits", "wait_ns", "producer_late_ns", "signal_latency_ns"],
                 title="Waiting per (rank, peer waited on)")
        + _table(over[np.argsort(-over["work_ns"], kind="stable")], ["rank", "launch", "program", "sm", "work_ns", "held_ns", "wait_ns", "work_items",
                                                                     "cause", "top_region", "top_region_excess_ns"], title="Outlier workgroups")
        + _table(t["imbalance"], ["rank", "launch", "n_workgroups", "max_over_mean", "cv", "tail_ns", "tail_program", "cause"],
                 title="Imbalance per rank and launch (rank -1: all ranks)")
        + _table(t["overlap"], ["rank", "launch", "kernel_ns", "comm_ns", "hidden_ns", "exposed_ns", "hidden_frac"],
                 title="Communication hidden under compute")
        + _table(t["launch_timing"], ["launch", "rank", "dur_ns", "start_skew_ns", "end_skew_ns"], title="Launch timing per rank")
        + _table(t["critical_path"], ["launch", "step", "kind", "rank", "program", "dur_ns", "region"], n=20, title="Critical path")
        + _table(t["timeouts"], ["rank", "launch", "program", "sm", "peer", "flag", "cmp", "expected", "value", "waited_ns", "status"],
                 title="Waits that gave up")
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>ktrace report: "
        + _e(rep.source) + f"</title><style>{_CSS}</style>{_SCRIPT}</head><body>"
        + f"<h1>ktrace report</h1><div class='sub'>{_e(rep.source)}</div>"
        + f"<h2>Findings</h2>{_findings_html(rep.findings, trace_url, rep.summary.get('trace_end_ns'), rep.summary.get('ranks'))}{perfetto_note}"
        + f"<h2>Summary</h2>{summ}<h2>Plots</h2>{plots}<h2>Tables</h2>{tables}</body></html>"
    )


def write_html(rep, path: str | os.PathLike) -> Path:
    """Write :func:`render_html` to ``path`` (UTF-8); returns the path."""
    p = Path(path)
    p.write_text(render_html(rep), encoding="utf-8")
    return p


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
        f"<h2>Biggest movers</h2>{_findings_html(d.findings, None)}{bars}"
        "<h2>Tables</h2>"
        + _table(d.tables["regions"], ["region", "rank", "a_ns", "b_ns", "delta_ns", "rel_change", "a_count", "b_count"], n=25, title="Per region and rank")
        + _table(d.tables["ranks"], ["rank", "measure", "a_ns", "b_ns", "delta_ns", "rel_change"], n=40, title="Per rank")
        + _table(d.tables["workgroups"], ["rank", "program", "a_ns", "b_ns", "delta_ns", "a_busy_ns", "b_busy_ns"], n=25, title="Per workgroup")
        + "</body></html>"
    )


def _diff_bars(t: np.ndarray, n: int = 15) -> str:
    if t.size == 0:
        return ""
    t = t[:n]
    m = max(float(np.abs(t["delta_ns"]).max()), 1.0)
    W, rh, mid = 820, 20, 520
    out = [f'<svg width="{W}" height="{rh * t.size + 10}" role="img" aria-label="biggest movers" xmlns="http://www.w3.org/2000/svg">']
    for i, row in enumerate(t):
        y = 4 + i * rh
        wlen = abs(float(row["delta_ns"])) / m * 280
        x = mid if row["delta_ns"] >= 0 else mid - wlen
        col = "#c0392b" if row["delta_ns"] > 0 else "#27ae60"
        out.append(f'<text x="{mid - 290}" y="{y + 13}" font-size="11" text-anchor="end">{_e(row["region"])} r{row["rank"]}</text>')
        out.append(f'<rect x="{x:.1f}" y="{y}" width="{max(wlen, 1):.1f}" height="{rh - 5}" fill="{col}"><title>'
                   f'{_e(fmt_ns(row["a_ns"]))} -> {_e(fmt_ns(row["b_ns"]))}</title></rect>')
        out.append(f'<text x="{mid + 290}" y="{y + 13}" font-size="11">{"+" if row["delta_ns"] >= 0 else "-"}{_e(fmt_ns(abs(row["delta_ns"])))}</text>')
    out.append(f'<line x1="{mid}" y1="0" x2="{mid}" y2="{rh * t.size + 6}" stroke="#666"/></svg>')
    return "".join(out)


def write_diff_html(d, path: str | os.PathLike) -> Path:
    p = Path(path)
    p.write_text(render_diff_html(d), encoding="utf-8")
    return p
