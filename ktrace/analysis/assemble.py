"""The step after the analyses: a computed report (``report.Report``) assembled into its document
(``document.ReportDocument``): the summary's headline numbers and verdict, each finding's
Perfetto link, the tables' first rows as records, the views.

Nothing here looks at events: it reads the analyses' tables and what ``report.build_report``
found, and writes words and links.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from . import causes
from ..links import perfetto_link
from ..probe_cost import measured
from ..text import fmt_ns
from .causes.words import share_text
from .document import Lazy, ReportDocument, Summary, Table, Views, jsonable
from .trace import Trace, table_to_records


def verdict(worst: list, top_info, total: float, min_share: float) -> str:
    """The report's first line: what is wrong (``worst``: the findings worth fixing, hangs first),
    or plainly that nothing is (``top_info``: the costliest cause below ``min_share`` of the
    kernel time ``total``, or None)."""
    if worst:
        f = worst[0]
        if f.severity == "error":
            return f"{len(worst)} problem{'s' if len(worst) != 1 else ''}, the first a hang (below)."
        return (f"{len(worst)} cause{'s' if len(worst) != 1 else ''} worth fixing; the first would save "
                f"{fmt_ns(f.cost_ns)} ({share_text(f.cost_ns, total)}).")
    limit = f"{100 * min_share:.0f}%"
    if top_info is None:
        kinds = ", ".join(m.TITLE for m in causes.MODULES if m.KIND != "hang")
        return f"Nothing is wrong: no hang, and no root cause ({kinds}) found."
    return (f"Nothing is wrong: no hang, and no root cause would shorten the capture by {limit} or more of its kernel "
            f"time (the largest would save {fmt_ns(top_info.cost_ns)}, {share_text(top_info.cost_ns, total)}).")


def summary(trace: Trace, w, wait_totals, ctx: causes.Context, sampled: int, n_launches: int, warmup: list, findings: list,
            accounting, min_share: float) -> Summary:
    """A report's summary.

    Args:
        trace: the trace analysed (warm-up launches left out).
        w: its waits (``stalls.waits``).
        wait_totals: why the waits waited, per rank (``causes.wait_cause_totals``; rank -1: all).
        ctx: the causal model's context (launches, kernel time).
        sampled, n_launches: the launches the replay sampled, of all.
        warmup: the launches left out as warm-up.
        findings: the findings, sorted.
        accounting: the waits no notify was matched to (``accounting.WaitAccounting``).
        min_share: the share of the kernel time a cause must save to be worth fixing.
    """
    worst = [f for f in findings if f.severity in ("error", "warning") and f.kind != "capture"]
    top_info = next((f for f in findings if f.kind in causes.KINDS), None)
    allw = wait_totals[wait_totals["rank"] == -1]
    clock = trace.clock
    s = Summary(
        source=trace.source,
        world_size=trace.world_size,
        ranks=sorted(set(trace.wg_keys[:, 0].tolist())),
        launches=ctx.n_launches,
        kernels=sorted(set(trace.kernels.values())),
        events=trace.n_events,
        workgroups=trace.n_workgroups,
        kernel_time_ns=causes.kernel_time_total(trace),
        waits=int(w.size),
        wait_ns=float(w["wait_ns"].sum()),
        producer_late_ns=float(np.nansum(w["producer_late_ns"])),
        signal_latency_ns=float(np.nansum(w["signal_latency_ns"])),
        link_ns=float(allw["link_ns"][0]) if allw.size else 0.0,
        unexplained_ns=float(allw["unexplained_ns"][0]) if allw.size else 0.0,
        waits_released=int((w["notify_row"] >= 0).sum()),
        timeouts=int(w["timed_out"].sum()),
        clock=getattr(clock, "method", None) if clock is not None else "given table",
        # (to the picosecond: the fit's last bits depend on the machine's BLAS, through np.polyfit)
        clock_bound_ns=round(float(clock.max_rtt_ns / 2 + clock.max_residual_ns), 3) if clock is not None else None,
        clock_bounds=clock.bounds_text() if hasattr(clock, "bounds_text") else None,
        partial=trace.partial,
        # the traces' time 0 is origin_ns; they end here (what links are clamped to)
        trace_end_ns=int(trace.column("end_ns").max()) - trace.origin_ns if trace.n_events else 0,
        sampled_launches=[int(sampled), n_launches],
        # left out as warm-up (not counted in ``launches``)
        warmup_launches=[int(x) for x in warmup],
        healthy=not worst,
        verdict=verdict(worst, top_info, ctx.kernel_time_ns, min_share),
        waits_unreleased=int(accounting.unreleased.size),
        waits_release_untraced=int(accounting.release_untraced.size),
        waits_unmatched=int(accounting.unmatched.size))
    if accounting.release_untraced.size or accounting.notify_untraced.size:
        # their time is the density's, not unexplained (the wait table's rows keep it as theirs)
        s.release_untraced_ns = accounting.untraced_ns
        s.unexplained_ns = max(0.0, s.unexplained_ns - accounting.untraced_ns)
    if accounting.notify_untraced.size:
        s.waits_notify_untraced = int(accounting.notify_untraced.size)
        s.notify_untraced_kernels = accounting.notify_untraced_kernels
    s.measured = measured(trace.meta, [{"data": f.data} for f in findings])
    s.claims = accounting.claims(trace, w)
    return s


def table(t: np.ndarray, max_rows: int, rows_total: int | None = None) -> Table:
    """A table of the document: an analysis' table, its first ``max_rows`` rows as records
    (``rows_total``: the whole table's rows, when ``t`` is its first rows only)."""
    return Table(int(t.size) if rows_total is None else int(rows_total), list(t.dtype.names or ()),
                 jsonable(table_to_records(t, max_rows)))


def _head(tables: Mapping, name: str, n: int) -> Table:
    """The document's table ``name``: its first ``n`` rows, made without the rest where the
    analysis can (``Lazy.head``)."""
    if isinstance(tables, Lazy):
        size, t = tables.head(name, n)
        return table(t, n, size)
    return table(tables[name], n)


def document(rep) -> ReportDocument:
    """The document of a computed report (``report.Report``): its summary as JSON has it, a
    Perfetto link per finding with a range, its tables' first ``config.max_rows`` rows (made
    when first read, or all at once by ``config.workers`` threads when the document is dumped)
    and its views."""
    s = Summary.from_dict(rep.summary.to_dict())
    url = rep.config.trace_url
    findings = [dataclasses.replace(f, perfetto=perfetto_link(f.start_ns, f.end_ns, url, s.trace_end_ns, s.ranks)
                                    if f.start_ns is not None else None) for f in rep.findings]
    n = rep.config.max_rows
    tables = Lazy({k: (lambda k=k: _head(rep.tables, k, n)) for k in rep.tables}, workers=rep.config.workers)
    return ReportDocument(source=rep.source, origin_ns=rep.origin_ns, summary=s, findings=findings, tables=tables,
                          views=Views({k: (lambda k=k: rep.views[k]) for k in rep.views}), trace_url=url)


__all__ = ["document", "summary", "table", "verdict"]
