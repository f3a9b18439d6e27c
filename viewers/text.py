"""The terminal text of a report and of a diff.

:func:`render_text` is made from the report's document alone (``ktrace.analysis.document``: a
computed report's ``document()``, or the JSON ``ktrace report --json`` wrote): one path, whatever
it is given. :func:`render_diff_text` prints a diff (``ktrace.analysis.compare.DiffReport``).
"""

from __future__ import annotations

import numpy as np

from ktrace.analysis.document import load as load_document
from ktrace.probe_cost import measured_lines
from ktrace.text import MEASURES, RANK_MEASURES, count_text, diff_headline, fmt_ns, kernel_time_text, printable

#: How a finding's severity is marked in the text.
_TAGS = {"error": "!!", "warning": " !", "info": "  "}


def render_text(report, *, max_findings: int = 10) -> str:
    """The terminal summary: the verdict, the findings (at most ``max_findings``) in plain words,
    then the headline numbers. Made from the report's document (anything
    ``ktrace.analysis.document.load`` takes: a computed report, its document, the JSON)."""
    doc = load_document(report)
    s, findings = doc.summary, doc.findings

    def rows(name):
        t = doc.tables.get(name)
        return t.rows if t is not None else []

    lines = [f"ktrace report: {s.source}", "", s.verdict]
    if findings:
        lines.append("")
        lines.append("Findings (hangs first, then by the time they would save):")
        for i, f in enumerate(findings[:max_findings], 1):
            where = f" [+{fmt_ns(f.start_ns)} .. +{fmt_ns(f.end_ns)}]" if f.start_ns is not None and f.end_ns is not None else ""
            lines.append(f"{_TAGS[f.severity]} {i}. {f.text}{where}")
        if len(findings) > max_findings:
            lines.append(f"   ... and {len(findings) - max_findings} more (see --json / --html)")
    lines += [
        "",
        f"Capture: {s.world_size} ranks ({', '.join(map(str, s.ranks))}), {count_text('launches', s.launches)} of "
        f"{', '.join(s.kernels) or '?'}"
        + (f" (and {len(s.warmup_launches)} warm-up launch{'es' if len(s.warmup_launches) != 1 else ''} left out)"
           if s.warmup_launches else "")
        + f", {count_text('events', s.events)}, {s.workgroups:,} workgroups; "
        f"{kernel_time_text(s.kernel_time_ns, s.launches)}"
        + (" (PARTIAL)" if s.partial else ""),
        f"Clock: {s.clock}" + (f", ranks aligned within ~{fmt_ns(s.clock_bound_ns)}" if s.clock_bound_ns else "")
        + (f" ({s.clock_bounds})" if s.clock_bounds else ""),
        f"Waits: {count_text('waits', s.waits)}, {MEASURES['wait_ns'][0]} {fmt_ns(s.wait_ns)} in total: producer late "
        f"{fmt_ns(s.producer_late_ns)}, signal latency {fmt_ns(s.signal_latency_ns)} (of which {fmt_ns(s.unexplained_ns)} beyond "
        f"the calibrated link latency or with no captured notify: unexplained"
        + (f"; {fmt_ns(s.release_untraced_ns)} in waits whose releases this probe density does not record"
           if s.release_untraced_ns else "")
        + f"); {s.waits_unreleased} completed waits without a captured notify"
        + (f" ({s.waits_release_untraced} more on mbarriers whose releases this probe density does not record)"
           if s.waits_release_untraced else "")
        + (f" ({s.waits_notify_untraced} more on flags whose senders recorded no notify in that launch "
           f"({', '.join(printable(k) for k in s.notify_untraced_kernels or ())}): a probe density that records "
           f"the waits only)" if s.waits_notify_untraced else "")
        + (f", {s.waits_unmatched} more not matched to one notify (notifies on their flag were captured: "
           f"released in the replay by the last before their end)" if s.waits_unmatched else "")
        + f"; {s.timeouts} timed out.",
    ]
    allw = [r for r in rows("wait_causes_by_rank") if r["rank"] == -1]
    if allw and (allw[0]["producer_late_ns"] or 0) > 0:
        a = allw[0]
        sampled, of = s.sampled_launches
        lines.append(
            f"Producers were late: not started {fmt_ns(a['late_not_started_ns'])}, waiting themselves "
            f"{fmt_ns(a['late_waiting_ns'])}, working in a region {fmt_ns(a['late_in_region_ns'])}, outside any "
            f"region {fmt_ns(a['late_outside_ns'])}, never signalled (waits that gave up) "
            f"{fmt_ns(a['late_missing_ns'])}" + (f" (on {sampled:,} of {of:,} launches)." if sampled < of else "."))
    tr = sorted(rows("stalls_by_rank"), key=lambda r: r["rank"])
    if tr:
        lines.append(f"{MEASURES['wait_ns'][0].capitalize()} per rank: " + ", ".join(
            f"r{r['rank']} {fmt_ns(r['wait_ns'])} ({100 * r['wait_frac']:.0f}% of program time)" if r.get("wait_frac") is not None
            else f"r{r['rank']} {fmt_ns(r['wait_ns'])}" for r in tr))
    lines += measured_lines(s)
    lines.append("Times are relative to the capture's first event (time 0 of its Perfetto trace).")
    return "\n".join(lines)


def render_diff_text(d, *, rows: int = 10) -> str:
    """A diff (``ktrace.analysis.compare.DiffReport``) for the terminal: the headline, the biggest
    movers, then per rank."""
    s = d.summary
    lines = [f"ktrace diff: A = {d.a}, B = {d.b}", "", diff_headline(s), ""]
    lines.append("Biggest movers:" if d.findings else "No differences.")
    for i, f in enumerate(d.findings, 1):
        lines.append(f"  {i}. {f.text}")
    r = d.tables["ranks"]
    if r.size:
        lines += ["", "Per rank (per launch; " + "; ".join(f"{k}: {v}" for k, v in RANK_MEASURES.items()) + "):"]
        for row in np.sort(r, order=["rank", "measure"]):
            lines.append(f"  rank {row['rank']} {row['measure']:>9}: {fmt_ns(row['a_ns']):>10} -> {fmt_ns(row['b_ns']):>10}")
    return "\n".join(lines)


__all__ = ["render_diff_text", "render_text"]
