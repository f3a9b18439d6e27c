"""Run every analysis on a capture and find what is wrong, most costly first.

:func:`build_report` computes: it runs the analyses, finds the root causes and prices them
(``ktrace.analysis.causes``), states the findings (``ktrace.analysis.findings``) and sorts them;
``ktrace.analysis.assemble`` writes the summary. It returns a :class:`Report`: the findings, the
summary, every analysis table and the trace. ``Report.document()`` is the report assembled into
its typed document (``ktrace.analysis.document``), which every renderer reads (``viewers/``: the
terminal text, the HTML page, the Perfetto links) and ``document.dump`` writes as JSON. Nothing
here prints.

Times in findings are relative to the capture's first event (``Report.origin_ns``), which is
also time 0 of the Chrome and Perfetto traces ktrace writes (both formats count ns from it; the
absolute time is in the traces' metadata), so a finding's range is the range to open in the
trace (``ktrace.links.perfetto_link``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from . import accounting, assemble, causes, findings, hangs, lanes, load, stalls, warmup
from . import timeline as overlap
from . import views as _views
from .finding_view import finding_views
from .document import SEVERITIES, Finding, Lazy, ReportDocument, Summary, dump
from .document import load as load_document
from .trace import Progress, Trace, drop_launches, prepare

@dataclass(frozen=True)
class ReportConfig:
    """What the report looks for.

    Attributes:
        load: workgroup-load settings (work region, outlier thresholds).
        classes: how regions are classified as communication or compute.
        causes: what counts as a root cause and how causes are priced (``CauseConfig``).
        min_late_ns: a notify held at least this long beyond the other ranks' is late (it
            overrides ``causes.min_late_ns``).
        max_rows: rows of each table kept in the JSON/HTML output (the biggest first).
        trace_url: where the trace of this capture is served, for Perfetto links (optional).
        workers: threads that compute independent analyses at once (1: one after another;
            the results are the same).
        skip_warmup: launches left out as warm-up (``ktrace.analysis.warmup``): None, the
            launches the capture marks as warm-up, else a kernel's first launch when it ran
            slow; N: the first N launches of each kernel (0: none).
    """

    load: load.LoadConfig = field(default_factory=load.LoadConfig)
    classes: overlap.RegionClasses = field(default_factory=overlap.RegionClasses)
    causes: causes.CauseConfig = field(default_factory=causes.CauseConfig)
    min_late_ns: float = 1_000.0
    max_rows: int = 200
    trace_url: str | None = None
    workers: int = 2
    skip_warmup: int | None = None

    def __post_init__(self):
        if self.skip_warmup is not None and not (isinstance(self.skip_warmup, int) and self.skip_warmup >= 0):
            raise ValueError(f"ReportConfig.skip_warmup must be None or a count >= 0, got {self.skip_warmup!r}")
        if self.workers not in (1, 2):
            raise ValueError(f"ReportConfig.workers must be 1 or 2, got {self.workers}")
        if not self.min_late_ns >= 0:
            raise ValueError(f"ReportConfig.min_late_ns must be >= 0, got {self.min_late_ns}")
        if self.max_rows < 1:
            raise ValueError(f"ReportConfig.max_rows must be >= 1, got {self.max_rows}")


@dataclass
class Report:
    """What the analyses of one capture found (see :func:`build_report`): the findings, sorted; the
    summary; every analysis table (those the findings did not need are made on first use); the
    views the plots draw; the trace they were computed from."""

    source: str
    origin_ns: int
    summary: Summary
    findings: list[Finding]
    tables: Mapping
    config: ReportConfig
    trace: Trace | None = field(default=None, repr=False)
    views: Mapping = field(default_factory=dict, repr=False)

    def document(self) -> ReportDocument:
        """The report assembled into its document (``ktrace.analysis.assemble``): what renderers
        read, and what ``document.dump`` writes as JSON (assembled once; its tables made when
        first read)."""
        doc = self.__dict__.get("_document")
        if doc is None:
            doc = self.__dict__["_document"] = assemble.document(self)
        return doc




def build_report(source, config: ReportConfig = ReportConfig(), *, progress: Progress | None = None) -> Report:
    """Run every analysis on a capture, find the root causes and what each would save.

    Findings are the root causes (``ktrace.analysis.causes``): hangs first, then the others by
    the time a replay without them saves; each cause's consequences (waits it held up, waits
    cut short by a timeout, workgroups that only waited) are folded into its finding. Then
    information: the critical path, exposed communication, the capture's own limits.

    Args:
        source: anything :func:`ktrace.analysis.prepare` takes (a capture, a path, a table).
        config: what to look for.
        progress: called as each step starts (name, steps done, steps in all).

    Raises:
        AnalysisError: the capture cannot be analysed.
    """
    steps = ["align", "waits", "stragglers", "load", "overlap", "critical path", "hangs", "causes", "findings"]
    done = [0]

    def step(name):
        if progress:
            progress(name, done[0], len(steps))
        done[0] += 1

    step("align")
    trace = prepare(source)
    # the warm-up launches are left out of everything below: they would skew what later launches
    # are judged against (the role medians, the baselines of holds), and say nothing of the kernel
    warm = warmup.warmup_launches(trace, config.skip_warmup)
    trace = drop_launches(trace, warm.launches)
    step("waits")
    w = stalls.waits(trace)
    ccfg = dataclasses.replace(config.causes, min_late_ns=config.min_late_ns)
    sample = causes.sample_launches(trace, ccfg.max_replay_launches)

    def stall_part():
        # the producer-side holds (late notifies) and the span before each notify, shared with
        # the load side (computed once: the other thread waits for them)
        stalls.hold_columns(trace)
        return (stalls.stall_totals(trace, "rank", w), overlap.overlap(trace, config.classes, launches=sample))

    def load_part():
        # the time per region first: the workgroups table needs it and the other thread's holds,
        # and it needs neither (made while the holds are)
        load.region_time(trace)
        wg = load.workgroups(trace, config.load)
        path = overlap.critical_path(trace)
        return wg, path

    # the two halves do not depend on each other: with two workers they run at once (numpy
    # releases the GIL in its loops)
    if config.workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:
            f_stall = pool.submit(stall_part)
            step("stragglers")
            wg, path = load_part()
            step("load")
            tot_rank, ov_sample = f_stall.result()
    else:
        tot_rank, ov_sample = stall_part()
        step("stragglers")
        wg, path = load_part()
        step("load")
    step("overlap")
    lt = overlap.launch_timing(trace)
    step("critical path")
    step("hangs")
    to = hangs.timeouts(trace)
    missing = hangs.missing_notifies(trace, to)
    cycles = hangs.wait_for_cycles(missing)
    silent = hangs.silent_programs(trace)
    step("causes")
    ctx = causes.context(trace, ccfg, workgroups=wg, timeouts=to, missing=missing, min_excess=config.load.min_excess)
    causes_found = causes.find(ctx)
    cause_table = causes.causes_table(trace, causes_found)
    wc_totals = causes.wait_cause_totals(trace, sample)
    step("findings")
    n_launches = int(causes.launch_makespans(trace)[0].size)
    held = lanes.holdups(trace)
    found = (findings.deadlock_findings(cycles) + findings.cause_findings(ctx, causes_found, config)
             + findings.lane_findings(trace, held, config) + findings.path_findings(trace, path, w)
             + findings.overlap_findings(trace, ov_sample, sample.size, n_launches)
             + findings.capture_findings(trace, silent, set(missing["launch"].tolist()) if missing.size else set())
             + warmup.warmup_finding(warm))
    found.sort(key=lambda f: (SEVERITIES.index(f.severity), f.kind not in causes.KINDS, -f.cost_ns,
                              -float(f.data.get("excess_ns", 0.0) or 0.0) if f.kind in causes.KINDS else 0.0))
    # the summary: assembled from what was computed (the waits no notify was matched to, by why)
    summary = assemble.summary(trace, w, wc_totals, ctx, sample.size, n_launches, warm.launches, found,
                               accounting.account_waits(trace, w), config.causes.min_share)
    tables = Lazy(
        done={"causes": cause_table, "wait_causes_by_rank": wc_totals, "waits": w, "stalls_by_rank": tot_rank,
         "workgroups": wg, "launch_timing": lt, "critical_path": path, "timeouts": to, "missing_notifies": missing,
         "silent_programs": silent, **({"lane_holdups": held} if trace.lanes else {})},
        makers={"stalls_by_peer": lambda: stalls.stall_totals(trace, "peer", w),
         "stalls_by_workgroup": lambda: stalls.stall_totals(trace, "workgroup", w),
         "stragglers": lambda: stalls.straggler_table(trace, "rank", w),
         "straggler_workgroups": lambda: stalls.straggler_table(trace, "workgroup", w),
         "notify_lateness": lambda: stalls.notify_lateness(trace, w),
         "imbalance": lambda: load.imbalance(trace, wg), "per_sm": lambda: load.per_sm(trace, wg),
         "overlap": (lambda: ov_sample) if sample.size == n_launches else (lambda: overlap.overlap(trace, config.classes)),
         "critical_path_summary": lambda: overlap.critical_path_summary(path),
         "outlier_workgroups": lambda: _outliers(wg)},
        # (the whole overlap table sweeps every launch: the document shows its first rows)
        heads={"overlap": lambda n: (int(lt.size), overlap.overlap(trace, config.classes, rows=n)),
               "stragglers": lambda n: _head_of(stalls.straggler_table(trace, "rank", w), n),
               "straggler_workgroups": lambda n: (_producers(trace, w),
                                                  stalls.straggler_table(trace, "workgroup", w, head=n))})
    views = Lazy({"launch": lambda: _views.launch(trace, wg, w, found), "heat": lambda: _views.heat(wg),
                  "wait_hist": lambda: _views.wait_hist(w), "findings": lambda: finding_views(trace, w, wg, found)})
    if progress:
        progress("done", len(steps), len(steps))
    return Report(source=trace.source, origin_ns=trace.origin_ns, summary=summary, findings=found, tables=tables,
                  config=config, trace=trace, views=views)


def _outliers(wg):
    """The outlier workgroups, most work first."""
    over = wg[wg["outlier"]]
    return over[np.argsort(-over["work_ns"], kind="stable")]


def _head_of(t, n: int) -> tuple[int, object]:
    return int(t.size), t[:n]


def _producers(trace: Trace, w) -> int:
    """Rows of the straggler table by workgroup: the workgroups whose notifies released a wait."""
    nr = w["notify_row"]
    nr = nr[nr >= 0]
    if nr.size == 0:
        return 0
    return int(np.count_nonzero(np.bincount(trace.wg[nr], minlength=trace.n_workgroups)))


def report_json(rep) -> dict:
    """A report (a :class:`Report`, its document, or anything ``document.load`` takes) as the
    JSON-ready data ``ktrace report --json`` writes (``document.dump``)."""
    return dump(rep)


def findings_json(rep) -> list[dict]:
    """A report's findings as its JSON document holds them (:func:`report_json`'s ``findings``)."""
    return [f.to_dict() for f in load_document(rep).findings]


__all__ = ["Report", "ReportConfig", "build_report", "findings_json", "report_json"]
