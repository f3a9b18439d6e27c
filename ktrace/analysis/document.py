"""The report as a closed document: what every renderer of a report needs, and nothing else.

A report (``ktrace.analysis.report.build_report``) is written out as JSON (``report_json``):
summary, findings (each with its text, short label, time range, Perfetto link, the data behind it
and its claims), the tables (their first rows) and the views (the few arrays the HTML plots draw:
one launch's workgroups, waits and notifies, the busy and wait heat maps, the wait-time
histogram). The text, the HTML page (``viewers.report``), the Perfetto links and ``ktrace open
--finding`` are all made from that document: renderers import this module and nothing else of
``ktrace.analysis``, and never see the trace or the causal model.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from dataclasses import dataclass, field

import numpy as np

PERFETTO_UI = "https://ui.perfetto.dev"
#: The document's format name and version (``report_json``).
FORMAT, VERSION = "ktrace-report", 2


@dataclass
class Finding:
    """One thing the report wants the reader to know.

    Attributes:
        kind: a root cause (``hang``, ``late_launch``, ``late_notifies``, ``uneven_work``,
            ``uneven_ranks``, ``slow_link``: ``ktrace.analysis.causes``), ``lane_holdup`` (the partition
            of a kernel traced per lane that kept the others waiting), or ``critical_path``,
            ``overlap``, ``capture`` (information).
        severity: ``error`` (a hang), ``warning`` (a cause that would save at least
            ``CauseConfig.min_share`` of the capture's kernel time) or ``info``.
        cost_ns: for a cause, the time a replay of the capture without it saves (launch
            durations summed; how findings are ranked); else what it accounts for.
        text: the finding in plain words.
        ranks: the ranks involved.
        start_ns, end_ns: the time range to look at, relative to ``Report.origin_ns``.
        data: the numbers behind the text.
        label: a few words naming it (lists, plots).
        claims: every statement of ``text`` as data (``causes.Claim.to_dict``: kind, the agents it
            names, its numbers); a test checks each against the capture's raw events.
    """

    kind: str
    severity: str
    cost_ns: float
    text: str
    ranks: tuple[int, ...] = ()
    start_ns: int | None = None
    end_ns: int | None = None
    data: dict = field(default_factory=dict)
    label: str = ""
    claims: list = field(default_factory=list)

    def perfetto_url(self, trace_url: str | None = None, trace_end_ns: int | None = None, ranks=None) -> str:
        return perfetto_link(self.start_ns, self.end_ns, trace_url, trace_end_ns, ranks)

    def to_dict(self, trace_url: str | None = None, trace_end_ns: int | None = None, ranks=None) -> dict:
        return {"kind": self.kind, "severity": self.severity, "cost_ns": self.cost_ns, "text": self.text,
                "label": self.label or self.kind, "ranks": list(self.ranks), "start_ns": self.start_ns,
                "end_ns": self.end_ns,
                "perfetto": self.perfetto_url(trace_url, trace_end_ns, ranks) if self.start_ns is not None else None,
                "claims": jsonable(self.claims), "data": jsonable(self.data)}


#: A finding's range shorter than this is widened to it (around its middle) in a link: the UI
#: opens only a window of positive length.
MIN_LINK_NS = 1_000


def link_range(start_ns: int, end_ns: int, trace_end_ns: int | None = None) -> tuple[int, int]:
    """The window a link opens for a finding's range (ns since the capture's first event, the
    traces' time 0): the range itself, clamped to the trace ``[0, trace_end_ns]`` (the Perfetto
    UI ignores a window that reaches outside the trace); a range shorter than
    :data:`MIN_LINK_NS` is widened to it around its middle, within the trace."""
    end = None if trace_end_ns is None else max(int(trace_end_ns), 1)
    lo, hi = max(int(start_ns), 0), int(end_ns)
    if end is not None:
        lo, hi = min(lo, end), min(hi, end)
    if hi - lo < MIN_LINK_NS:
        mid = (lo + hi) // 2
        lo, hi = mid - MIN_LINK_NS // 2, mid + MIN_LINK_NS // 2
        if lo < 0:
            lo, hi = 0, hi - lo
        if end is not None and hi > end:
            lo, hi = max(lo - (hi - end), 0), end
    return lo, max(hi, lo + 1)


def perfetto_link(start_ns: int | None, end_ns: int | None, trace_url: str | None = None, trace_end_ns: int | None = None,
                  ranks=None, ui: str = PERFETTO_UI) -> str:
    """A Perfetto UI link that opens ``trace_url`` (when given) showing [start, end].

    The range is in ns since the capture's first event, which is the time base of both trace
    formats ktrace writes, so the UI's ``visStart``/``visEnd`` take it as it is
    (:func:`link_range` clamps it to the trace). With ``ranks``, the link also lists them in
    rank order (``ktrace.export.layout.ui_startup_commands``). Without ``trace_url`` the link
    opens the UI only; ``ktrace open TRACE --finding N`` serves the trace and opens the
    finding's range.
    """
    from ..export.layout import ui_startup_commands  # (the rank order a link lists)

    args = {}
    if trace_url:
        args["url"] = trace_url
    if start_ns is not None and end_ns is not None:
        lo, hi = link_range(start_ns, end_ns, trace_end_ns)
        args["visStart"], args["visEnd"] = str(lo), str(hi)
    if trace_url and ranks:
        args["startupCommands"] = json.dumps(ui_startup_commands(ranks), separators=(",", ":"), ensure_ascii=False)
    return f"{ui}/#!/" + (("?" + urllib.parse.urlencode(args, safe=":/")) if args else "")


def jsonable(x):
    """``x`` with numpy values as Python ones, tuples as lists and non-finite floats as None."""
    t = type(x)
    if t is list or t is tuple:
        # (a finding's claims hold lists of 100,000s of plain numbers: those are copied, not walked)
        if all(type(v) in _PLAIN for v in x):
            return list(x)
        return [jsonable(v) for v in x]
    if t in _PLAIN:
        return x
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


#: Types :func:`jsonable` returns as they are (floats are not: a non-finite one becomes None).
_PLAIN = frozenset((int, str, bool, type(None)))


def load(doc) -> dict:
    """A report document: a parsed one, a Report (its ``document()``), or a JSON file's text."""
    if hasattr(doc, "document"):
        doc = doc.document()
    if isinstance(doc, (str, bytes)):
        doc = json.loads(doc)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError("not a ktrace report document (ktrace report --json FILE)")
    return doc


__all__ = ["FORMAT", "MIN_LINK_NS", "PERFETTO_UI", "VERSION", "Finding", "jsonable", "link_range", "load", "perfetto_link"]
