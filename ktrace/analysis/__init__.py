"""Analyses of a capture: spin-lock stalls and their cause, workgroup load, overlap, critical
path, hangs, diffs, and the causal model that names root causes and what each would save. Each is a plain function from a :class:`Trace` (``prepare(capture)``) to a
table with unit-suffixed columns (a numpy structured array, or for the per-wait, per-workgroup
and per-notify tables a ``ColumnTable`` read the same way); nothing here plots or prints.

Needs numpy only (and ``ktrace.captures`` / ``ktrace.clock`` to read and align a capture): no torch,
no triton. ``ktrace report`` and ``ktrace diff`` (``ktrace.cli``) print what
:func:`build_report` finds; ``viewers/report.py`` renders it as one HTML file.
"""

from .causes import CauseConfig, causes_table, replay, replay_model, root_causes, wait_cause_totals, wait_causes
from .compare import diff, diff_ranks, diff_regions, diff_workgroups
from .hangs import missing_notifies, silent_programs, timeouts, wait_for_cycles
from .load import LoadConfig, imbalance, per_sm, workgroups
from .names import OUTSIDE, flag_names, region_source
from .timeline import RegionClasses, critical_path, critical_path_summary, launch_timing, overlap
from .report import (
    DiffReport,
    Finding,
    Report,
    ReportConfig,
    build_diff,
    build_report,
    diff_json,
    findings_json,
    perfetto_link,
    render_diff_text,
    render_text,
    report_json,
)
from .stalls import kernel_time, notify_lateness, release_pairs, stall_totals, stragglers, waits
from .trace import AnalysisError, Trace, prepare

__all__ = [
    "AnalysisError", "CauseConfig", "DiffReport", "Finding", "LoadConfig", "OUTSIDE", "RegionClasses", "Report",
    "ReportConfig", "Trace", "causes_table", "flag_names", "region_source", "replay", "replay_model", "root_causes",
    "wait_cause_totals", "wait_causes",
    "build_diff", "build_report", "critical_path", "critical_path_summary", "diff", "diff_json", "diff_ranks",
    "diff_regions", "diff_workgroups", "findings_json", "imbalance", "kernel_time", "launch_timing", "missing_notifies",
    "notify_lateness", "overlap", "per_sm", "perfetto_link", "prepare", "release_pairs", "render_diff_text",
    "render_text", "report_json", "silent_programs", "stall_totals", "stragglers", "timeouts", "wait_for_cycles",
    "waits", "workgroups",
]
