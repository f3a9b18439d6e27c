"""The views of a report: the few arrays its plots draw, computed from the trace and the analyses'
tables (``document.Views`` says what each holds). Times are ns since the capture's first event.
"""

from __future__ import annotations

import numpy as np

from . import causes
from .document import jsonable
from .trace import Trace


def focus_launch(trace: Trace, wg, findings: list) -> int | None:
    """The launch a report shows in detail: the first finding's (the launch alive at its start),
    else the longest."""
    if wg.size == 0:
        return None
    for f in findings:
        if f.start_ns is not None:
            t = f.start_ns + trace.origin_ns
            hit = (wg["start_ns"] <= t + 1) & (wg["end_ns"] >= t)
            if hit.any():
                return int(np.bincount(wg["launch"][hit]).argmax())
    lids, spans = causes.launch_makespans(trace)
    return int(lids[np.argmax(spans)]) if lids.size else None


#: A launch whose grid has at most this many workgroups in all is drawn one lane per workgroup.
MAX_LANES = 64


def launch(trace: Trace, wg, w, findings: list) -> dict:
    """One launch for the HTML plots: its workgroups, waits and (small grids) notifies, times in
    ns since the capture's first event."""
    ln = focus_launch(trace, wg, findings)
    if ln is None:
        return {}
    o = trace.origin_ns
    sel = np.flatnonzero(wg["launch"] == ln)
    ws = w[w["launch"] == ln]
    out = {"launch": ln, "role": str(wg["role"][sel[0]]) if sel.size else "",
           "workgroups": {"rank": wg["rank"][sel], "program": wg["program"][sel], "start_ns": wg["start_ns"][sel] - o,
                          "end_ns": wg["end_ns"][sel] - o},
           "waits": {"rank": ws["rank"], "program": ws["program"], "start_ns": ws["start_ns"] - o,
                     "end_ns": ws["end_ns"] - o, "late": np.nan_to_num(ws["producer_late_ns"]) > 0}}
    if 0 < sel.size <= MAX_LANES:
        from ..schema import EventKind

        n = trace.at(EventKind.NOTIFY, "launch") == ln
        out["notifies"] = {"rank": trace.at(EventKind.NOTIFY, "rank")[n], "program": trace.at(EventKind.NOTIFY, "program")[n],
                           "start_ns": trace.at(EventKind.NOTIFY, "start_ns")[n] - o}
    return jsonable(out)


def heat(wg) -> dict:
    """Mean busy and wait time per workgroup (µs) per rank and program (binned to 256 columns)."""
    if wg.size == 0:
        return {}
    ranks = np.unique(wg["rank"])
    n_prog = int(wg["program"].max()) + 1
    bins = min(n_prog, 256)
    key = np.searchsorted(ranks, wg["rank"]) * bins + (wg["program"].astype(np.int64) * bins) // n_prog
    cnt = np.bincount(key, minlength=ranks.size * bins)
    out = {"ranks": ranks, "n_programs": n_prog, "bins": bins}
    for col in ("busy_ns", "wait_ns"):
        tot = np.bincount(key, weights=wg[col].astype(float), minlength=ranks.size * bins)
        out[col.replace("_ns", "_us")] = (np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan) / 1e3).reshape(ranks.size, bins)
    return jsonable(out)


def wait_hist(w) -> dict:
    """Wait times per rank on 40 log-spaced bins (waits of 0 ns apart)."""
    d = w["wait_ns"].astype(float)
    pos = d > 0
    if not pos.any():
        return {}
    edges = np.logspace(np.log10(max(d[pos].min(), 1.0)), np.log10(d[pos].max()) + 1e-9, 41)
    ranks = {}
    for r in np.unique(w["rank"]).tolist():
        mine = w["rank"] == r
        ranks[int(r)] = {"counts": np.histogram(d[mine & pos], bins=edges)[0], "positive": int((mine & pos).sum()),
                         "waits": int(mine.sum())}
    return jsonable({"edges": edges, "ranks": ranks})
