"""Diff of two captures of the same kernel (before / after a change): the biggest movers first.

:func:`diff` makes the tables; :func:`build_diff` a :class:`DiffReport` (findings in words, the
tables, a summary under the report's keys); :func:`diff_json` its JSON (``ktrace diff --json``).
The text and HTML are made in ``viewers/``.

Every figure is a mean per launch (the captures may hold different numbers of launches), and
captures are matched by region name, rank and program, never by region id or row. A key present
in only one capture has 0 on the other side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import causes
from ..captures import launch_count
from ..schema import EventKind
from .load import workgroups
from .stalls import kernel_time, waits
from ..keys import group_index, group_sum
from ..text import fmt_ns
from .document import Finding, SEVERITIES, jsonable
from .trace import Progress, Trace, prepare, table_to_records

DIFF_FIELDS = [("a_ns", "<f8"), ("b_ns", "<f8"), ("delta_ns", "<f8"), ("rel_change", "<f8")]


def _launches_per_rank(trace: Trace) -> dict[int, int]:
    """Per rank, the launches it ran (counted as the summary's launches: ``launch_count``)."""
    k = trace.wg_keys
    pairs = list(trace.kernels) or [tuple(x) for x in np.unique(k[:, :2], axis=0).tolist()]
    return {r: launch_count(p for p in pairs if p[0] == r) for r in {int(p[0]) for p in pairs}}


def _region_totals(trace: Trace) -> dict[tuple[str, int], tuple[float, float]]:
    """(region name, rank) -> (time per launch ns, events per launch) of spans and waits."""
    kind = trace.column("kind")
    rows = np.flatnonzero((kind == int(EventKind.SPAN)) | (kind == int(EventKind.WAIT)))
    if rows.size == 0:
        return {}
    d = trace.column("end_ns")[rows] - trace.column("start_ns")[rows]
    inv, keys = group_index(trace.column("region")[rows], trace.column("rank")[rows])
    G = keys.shape[0]
    tot = group_sum(inv, d, G)
    cnt = np.bincount(inv, minlength=G)
    nl = _launches_per_rank(trace)
    out: dict[tuple[str, int], tuple[float, float]] = {}
    for (rid, r), t, c in zip(keys.tolist(), tot.tolist(), cnt.tolist()):
        k = (trace.region_name(rid), r)
        n = max(nl.get(r, 1), 1)
        pt, pc = out.get(k, (0.0, 0.0))
        out[k] = (pt + t / n, pc + c / n)
    return out


def _table(keys_dt, a: dict, b: dict, extra=()) -> np.ndarray:
    keys = sorted(set(a) | set(b))
    dt = keys_dt + DIFF_FIELDS + list(extra)
    out = np.zeros(len(keys), dt)
    for i, k in enumerate(keys):
        av, bv = a.get(k, 0.0), b.get(k, 0.0)
        a0 = av[0] if isinstance(av, tuple) else av
        b0 = bv[0] if isinstance(bv, tuple) else bv
        row = list(k) + [a0, b0, b0 - a0, (b0 - a0) / a0 if a0 else (np.inf if b0 else 0.0)]
        if extra:
            row += [av[1] if isinstance(av, tuple) else 0.0, bv[1] if isinstance(bv, tuple) else 0.0]
        out[i] = tuple(row)
    return out[np.argsort(-np.abs(out["delta_ns"]), kind="stable")]


def diff_regions(a: Trace, b: Trace) -> np.ndarray:
    """Per (region, rank): time per launch in A and B, sorted by the absolute change."""
    return _table([("region", "O"), ("rank", "<i4")], _region_totals(a), _region_totals(b),
                  extra=[("a_count", "<f8"), ("b_count", "<f8")])



def diff_ranks(a: Trace, b: Trace) -> np.ndarray:
    """Per (rank, measure of ``ktrace.text.RANK_MEASURES``): per launch in A and B."""

    def per_rank(t: Trace) -> dict:
        kt = kernel_time(t)
        wg = workgroups(t)
        w = waits(t)
        nl = _launches_per_rank(t)
        out = {}
        for r in np.unique(kt["rank"]).tolist():
            n = max(nl.get(r, 1), 1)
            out[(r, "extent")] = float(kt["extent_ns"][kt["rank"] == r].sum()) / n
            out[(r, "wait time")] = float(w["wait_ns"][w["rank"] == r].sum()) / n
            out[(r, "busy")] = float(wg["busy_ns"][wg["rank"] == r].sum()) / n
        return out

    return _table([("rank", "<i4"), ("measure", "O")], per_rank(a), per_rank(b))


def diff_workgroups(a: Trace, b: Trace) -> np.ndarray:
    """Per (rank, program): lifetime per launch in A and B (with busy and wait), biggest change first."""

    def per_wg(t: Trace) -> dict:
        wg = workgroups(t)
        inv, keys = group_index(wg["rank"], wg["program"])
        G = keys.shape[0]
        n = np.bincount(inv, minlength=G)
        life = group_sum(inv, wg["lifetime_ns"], G) / np.maximum(n, 1)
        busy = group_sum(inv, wg["busy_ns"], G) / np.maximum(n, 1)
        return {(int(r), int(p)): (float(x), float(y)) for (r, p), x, y in zip(keys.tolist(), life.tolist(), busy.tolist())}

    return _table([("rank", "<i4"), ("program", "<i4")], per_wg(a), per_wg(b), extra=[("a_busy_ns", "<f8"), ("b_busy_ns", "<f8")])


def diff(a: Trace, b: Trace) -> dict[str, np.ndarray]:
    """All three diff tables: ``regions``, ``ranks``, ``workgroups``."""
    return {"regions": diff_regions(a, b), "ranks": diff_ranks(a, b), "workgroups": diff_workgroups(a, b)}


@dataclass
class DiffReport:
    """Two captures compared (see :func:`build_diff`)."""

    a: str
    b: str
    findings: list[Finding]
    tables: dict[str, np.ndarray]
    summary: dict


def build_diff(a, b, *, progress: Progress | None = None, top: int = 10) -> DiffReport:
    """Compare two captures of the same kernel: per region, rank and workgroup, biggest movers first."""
    if progress:
        progress("align A", 0, 3)
    ta = prepare(a)
    if progress:
        progress("align B", 1, 3)
    tb = prepare(b)
    if progress:
        progress("diff", 2, 3)
    tables = diff(ta, tb)
    findings: list[Finding] = []
    ka, kb = sorted(set(ta.kernels.values())), sorted(set(tb.kernels.values()))
    if ka and kb and ka != kb:
        findings.append(Finding("capture", "warning", 0.0, f"the captures hold different kernels: A {ka}, B {kb}."))
    for row in tables["regions"][:top]:
        if row["delta_ns"] == 0:
            break
        word = "more" if row["delta_ns"] > 0 else "less"
        rel = f" ({100 * row['rel_change']:+.0f}%)" if np.isfinite(row["rel_change"]) else " (new in B)"
        findings.append(Finding("diff", "info", abs(float(row["delta_ns"])),
                                f"'{row['region']}' on rank {row['rank']}: {fmt_ns(abs(row['delta_ns']))} {word} per launch "
                                f"({fmt_ns(row['a_ns'])} -> {fmt_ns(row['b_ns'])}{rel}; events {row['a_count']:.0f} -> {row['b_count']:.0f}).",
                                (int(row["rank"]),), data={k: row[k] for k in ("a_ns", "b_ns", "delta_ns")}))
    for row in tables["workgroups"][:3]:
        if abs(row["delta_ns"]) <= 0:
            break
        findings.append(Finding("diff", "info", abs(float(row["delta_ns"])),
                                f"workgroup rank {row['rank']} program {row['program']}: lifetime {fmt_ns(row['a_ns'])} -> "
                                f"{fmt_ns(row['b_ns'])} per launch (busy {fmt_ns(row['a_busy_ns'])} -> {fmt_ns(row['b_busy_ns'])}).",
                                (int(row["rank"]),)))
    findings.sort(key=lambda f: (SEVERITIES.index(f.severity), -f.cost_ns))
    # the report's quantities under the report's keys, [A, B]: one definition (ktrace.text.MEASURES)
    summary = {"a": ta.source, "b": tb.source, "launches": [causes.launch_total(t) for t in (ta, tb)],
               "events": [t.n_events for t in (ta, tb)],
               "kernel_time_ns": [causes.kernel_time_total(t) for t in (ta, tb)],
               "waits": [int(waits(t).size) for t in (ta, tb)],
               "wait_ns": [float(waits(t)["wait_ns"].sum()) for t in (ta, tb)]}
    if progress:
        progress("done", 3, 3)
    return DiffReport(a=ta.source, b=tb.source, findings=findings, tables=tables, summary=summary)


def diff_json(d: DiffReport, max_rows: int = 200) -> dict:
    return {"format": "ktrace-diff", "version": 1, "a": d.a, "b": d.b, "summary": jsonable(d.summary),
            "findings": [f.to_dict() for f in d.findings],
            "tables": {k: {"rows_total": int(t.size), "columns": list(t.dtype.names or ()),
                           "rows": jsonable(table_to_records(t, max_rows))} for k, t in d.tables.items()}}


__all__ = ["DIFF_FIELDS", "DiffReport", "build_diff", "diff", "diff_json", "diff_ranks", "diff_regions", "diff_workgroups"]
