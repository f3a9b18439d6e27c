"""Analyses of a capture: spin-lock stalls and their cause, workgroup load, overlap, critical
path, hangs, diffs, and the causal model that names root causes and what each would save.

This package is the analyses' one facade. Each analysis is a plain function from a
:class:`Trace` (``prepare(capture)``) to a table with unit-suffixed columns (a numpy structured
array, or for the per-wait, per-workgroup and per-notify tables a ``ColumnTable`` read the same
way), in a module of its own (``stalls``, ``load``, ``timeline``, ``hangs``, ``causes``,
``compare``); the report runs them all:

- :func:`build_report` computes (a :class:`Report`: the findings, the summary, the tables);
- ``Report.document()`` assembles it into its typed, versioned document (:class:`ReportDocument`:
  ``ktrace.analysis.document``), which :func:`dump_document` (or :func:`report_json`) writes as JSON
  and :func:`load_document` reads back (``document.dump``, ``document.load``);
- :func:`build_diff` compares two captures (:func:`diff_json`: its JSON).

Nothing here plots or prints: the terminal text, the HTML page and the Perfetto links are made
from the document in ``viewers/`` (``viewers.text.render_text``, ``viewers.report.render_html``).
Needs numpy only (and ``ktrace.captures`` / ``ktrace.clock`` to read and align a capture): no
torch, no triton.
"""

from ..links import perfetto_link
from .causes import CauseConfig, causes_table, replay, replay_model, root_causes, wait_cause_totals, wait_causes
from .compare import DiffReport, build_diff, diff, diff_json, diff_ranks, diff_regions, diff_workgroups
from .document import Claim, Finding, ReportDocument, Summary, Table
from .document import dump as dump_document
from .document import load as load_document
from .hangs import missing_notifies, silent_programs, timeouts, wait_for_cycles
from .load import LoadConfig, imbalance, per_sm, workgroups
from .names import OUTSIDE, flag_names, region_source
from .report import Report, ReportConfig, build_report, findings_json, report_json
from .stalls import kernel_time, notify_lateness, release_pairs, stall_totals, stragglers, waits
from .timeline import RegionClasses, critical_path, critical_path_summary, launch_timing, overlap
from .trace import AnalysisError, Trace, prepare

__all__ = [
    # the report and its document
    "Claim", "Finding", "Report", "ReportConfig", "ReportDocument", "Summary", "Table", "build_report", "dump_document",
    "findings_json", "load_document", "perfetto_link", "report_json",
    # two captures compared
    "DiffReport", "build_diff", "diff", "diff_json", "diff_ranks", "diff_regions", "diff_workgroups",
    # a capture's trace, and the analyses
    "AnalysisError", "CauseConfig", "LoadConfig", "OUTSIDE", "RegionClasses", "Trace", "causes_table",
    "critical_path", "critical_path_summary", "flag_names", "imbalance", "kernel_time", "launch_timing",
    "missing_notifies", "notify_lateness", "overlap", "per_sm", "prepare", "region_source", "release_pairs", "replay",
    "replay_model", "root_causes", "silent_programs", "stall_totals", "stragglers", "timeouts", "wait_cause_totals",
    "wait_causes", "wait_for_cycles", "waits", "workgroups",
]
