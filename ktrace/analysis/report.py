"""Run every analysis on a capture and state the findings in plain words, most costly first.

:func:`build_report` returns a :class:`Report`: findings (each with its cost, the ranks
involved and the time range to look at in Perfetto), a short summary and every analysis table.
:func:`render_text` turns it into the terminal summary, :func:`report_json` into JSON-ready
data; ``viewers/report.py`` renders the HTML file. Nothing here prints.

Times in findings are relative to the capture's first event (``Report.origin_ns``), which is
also time 0 of the Chrome and Perfetto traces ktrace writes (both formats count ns from it; the
absolute time is in the traces' metadata), so a finding's range is the range to open in the
trace (:func:`perfetto_link`).
"""

from __future__ import annotations

import json
import math
import urllib.parse
from dataclasses import dataclass, field

import numpy as np

from . import compare as _diff
from . import hangs, load, stalls
from . import timeline as overlap
from ..text import fmt_ns, programs_text, ranks_text
from .trace import Progress, Trace, prepare, table_to_records

PERFETTO_UI = "https://ui.perfetto.dev"
_SEVERITY = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class ReportConfig:
    """What the report looks for.

    Attributes:
        load: workgroup-load settings (work region, outlier thresholds).
        classes: how regions are classified as communication or compute.
        min_late_ns: a producer is named a straggler when its median lateness is at least
            this and beyond the other producers' by at least this.
        max_rows: rows of each table kept in the JSON/HTML output (the biggest first).
        trace_url: where the trace of this capture is served, for Perfetto links (optional).
        workers: threads that compute independent analyses at once (1: one after another;
            the results are the same).
    """

    load: load.LoadConfig = field(default_factory=load.LoadConfig)
    classes: overlap.RegionClasses = field(default_factory=overlap.RegionClasses)
    min_late_ns: float = 1_000.0
    max_rows: int = 200
    trace_url: str | None = None
    workers: int = 2

    def __post_init__(self):
        if self.workers not in (1, 2):
            raise ValueError(f"ReportConfig.workers must be 1 or 2, got {self.workers}")
        if not self.min_late_ns >= 0:
            raise ValueError(f"ReportConfig.min_late_ns must be >= 0, got {self.min_late_ns}")
        if self.max_rows < 1:
            raise ValueError(f"ReportConfig.max_rows must be >= 1, got {self.max_rows}")


@dataclass
class Finding:
    """One thing the report wants the reader to know.

    Attributes:
        kind: ``hang``, ``straggler``, ``load``, ``imbalance``, ``overlap``, ``skew``,
            ``critical_path``, ``capture``.
        severity: ``error`` (a hang), ``warning`` (costs time) or ``info``.
        cost_ns: the waiting or time it accounts for (how findings are ranked).
        text: the finding in plain words.
        ranks: the ranks involved.
        start_ns, end_ns: the time range to look at, relative to ``Report.origin_ns``.
        data: the numbers behind the text.
    """

    kind: str
    severity: str
    cost_ns: float
    text: str
    ranks: tuple[int, ...] = ()
    start_ns: int | None = None
    end_ns: int | None = None
    data: dict = field(default_factory=dict)

    def perfetto_url(self, trace_url: str | None = None, trace_end_ns: int | None = None, ranks=None) -> str:
        return perfetto_link(self.start_ns, self.end_ns, trace_url, trace_end_ns, ranks)

    def to_dict(self, trace_url: str | None = None, trace_end_ns: int | None = None, ranks=None) -> dict:
        return {"kind": self.kind, "severity": self.severity, "cost_ns": self.cost_ns, "text": self.text,
                "ranks": list(self.ranks), "start_ns": self.start_ns, "end_ns": self.end_ns,
                "perfetto": self.perfetto_url(trace_url, trace_end_ns, ranks) if self.start_ns is not None else None,
                "data": _jsonable(self.data)}


@dataclass
class Report:
    """Findings, summary and tables of one capture (see :func:`build_report`)."""

    source: str
    origin_ns: int
    summary: dict
    findings: list[Finding]
    tables: dict[str, np.ndarray]
    config: ReportConfig
    trace: Trace | None = field(default=None, repr=False)


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
    from ..export.layout import ui_startup_commands

    args = {}
    if trace_url:
        args["url"] = trace_url
    if start_ns is not None and end_ns is not None:
        lo, hi = link_range(start_ns, end_ns, trace_end_ns)
        args["visStart"], args["visEnd"] = str(lo), str(hi)
    if trace_url and ranks:
        args["startupCommands"] = json.dumps(ui_startup_commands(ranks), separators=(",", ":"), ensure_ascii=False)
    return f"{ui}/#!/" + (("?" + urllib.parse.urlencode(args, safe=":/")) if args else "")


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _rel(trace: Trace, t) -> int:
    return int(t) - trace.origin_ns


# ---------------------------------------------------------------------------------------------
# findings
# ---------------------------------------------------------------------------------------------


def _hang_findings(trace: Trace, to: np.ndarray, missing: np.ndarray, cycles: list[list[int]]) -> list[Finding]:
    out: list[Finding] = []
    if to.size == 0:
        return out
    for m in missing:
        sel = to[(to["rank"] == m["consumer"]) & (to["peer"] == m["producer"]) & (to["flag"] == m["flag"]) &
                 (to["expected"] == m["expected"]) & (to["launch"] == m["launch"]) & (to["status"] == "never signalled")]
        first = sel[np.argmin(sel["since_ns"])]
        sent = (f"its last notify on that flag wrote {m['last_value_sent']}" if m["last_value_sent"] >= 0
                else "it sent no notify on that flag")
        stuck = (f"; rank {m['producer']} was itself stuck waiting" if m["producer_stuck"]
                 else f"; rank {m['producer']} was not waiting on anything (its last event ended at "
                      f"+{fmt_ns(_rel(trace, m['producer_last_event_ns']))})" if m["producer_last_event_ns"] >= 0 else "")
        text = (f"HANG: rank {m['consumer']} {programs_text(m['programs'])} (SM {first['sm']}, launch {m['launch']}) waited on "
                f"flag +{m['flag']:#x} for value {m['cmp']} {m['expected']} from rank {m['producer']} since "
                f"+{fmt_ns(_rel(trace, m['since_ns']))} and gave up after {fmt_ns(first['waited_ns'])}: "
                f"rank {m['producer']} never sent it ({sent}){stuck}.")
        out.append(Finding("hang", "error", float(sel["waited_ns"].sum()), text, (int(m["consumer"]), int(m["producer"])),
                           _rel(trace, m["since_ns"]), _rel(trace, sel["gave_up_ns"].max()),
                           {"producer": m["producer"], "consumer": m["consumer"], "flag": m["flag"], "expected": m["expected"],
                            "programs": list(m["programs"]), "launch": m["launch"], "waited_ns": first["waited_ns"],
                            "sm": first["sm"]}))
    cut = to[to["status"] != "never signalled"]
    if cut.size:
        text = (f"{cut.size} more waits on {ranks_text(cut['rank'])} gave up with them (their notify "
                f"{'came later' if (cut['status'] == 'signalled late').all() else 'came, or came later'}): cut short by the "
                f"first timeout on their rank, not missing signals themselves.")
        out.append(Finding("hang", "warning", float(cut["waited_ns"].sum()), text, tuple(sorted(set(cut["rank"].tolist()))),
                           _rel(trace, cut["since_ns"].min()), _rel(trace, cut["gave_up_ns"].max()), {"n": int(cut.size)}))
    for c in cycles:
        if len(c) > 1:
            chain = " -> ".join(f"rank {r}" for r in c + [c[0]])
            out.append(Finding("hang", "error", 0.0, f"DEADLOCK: {chain}: each waited for a notify the next never sent.",
                               tuple(c), data={"cycle": c}))
    return out


def _straggler_findings(trace: Trace, by_rank: np.ndarray, by_wg: np.ndarray, nl: np.ndarray, cfg: ReportConfig,
                        total_wait: float) -> list[Finding]:
    """Producers whose notifies came late and cost the others waiting.

    A producer is named when its notifies cost more than an equal share of the waiting they
    released (``cost_ns``) and it was late by at least ``cfg.min_late_ns`` in either sense of
    ``stalls.stragglers``: it held its notifies back after being ready (``held_excess_ns``,
    the producer-side lateness, reported as "notified X late"), or its waiters had been
    spinning when its notifies began (``late_median_ns`` beyond the other producers', e.g.
    slow work before the notify, reported with what it ran before notifying).
    """
    out: list[Finding] = []
    if by_rank.size == 0:
        return out
    n = by_rank.size
    for row in by_rank:
        share = row["cost_ns"] / max(float(by_rank["cost_ns"].sum()), 1.0)
        excess = row["excess_late_ns"] if np.isfinite(row["excess_late_ns"]) else row["late_median_ns"]
        held = float(row["held_excess_ns"]) if np.isfinite(row["held_excess_ns"]) else 0.0
        held_late = held >= cfg.min_late_ns
        wait_late = row["late_median_ns"] >= cfg.min_late_ns and excess >= cfg.min_late_ns
        if not ((held_late or wait_late) and (n == 1 or share > 1.0 / n)):
            continue
        r = int(row["rank"])
        mine = nl[nl["rank"] == r]
        ranks_w = ranks_text(row["waiter_ranks"])
        cost_text = (f"{row['n_waits']} waits by {row['waiter_workgroups']} workgroups on {ranks_w} waited "
                     f"{fmt_ns(row['cost_ns'])} in total for it ({100 * row['cost_ns'] / max(total_wait, 1):.0f}% of all waiting).")
        if held_late:
            hx = np.where(np.isfinite(mine["held_excess_ns"]), mine["held_excess_ns"], -np.inf)
            worst = mine[np.argmax(hx)]
            text = (f"rank {r} is the top straggler: it notified {fmt_ns(held)} late (producer lateness: per notify, the "
                    f"time from being ready, when its previous event on that program ended, to the notify's start, "
                    f"beyond the other ranks' {fmt_ns(row['held_median_ns'] - held)}; median over its {row['n_notifies']} "
                    f"notifies; {fmt_ns(row['held_excess_total_ns'])} held back in all); worst: program {worst['program']} "
                    f"seq {worst['seq']} (flag +{worst['flag']:#x}) {fmt_ns(worst['held_excess_ns'])} late. " + cost_text)
        else:
            worst = mine[np.argmax(mine["late_ns"])]
            text = (f"rank {r} notified {fmt_ns(row['late_median_ns'])} after its waiters arrived (median over its "
                    f"{row['n_notifies']} notifies; {fmt_ns(excess)} later than the other ranks'), though it notified as soon "
                    f"as it was ready: its work before notifying was slow; worst: program {worst['program']} seq "
                    f"{worst['seq']} (flag +{worst['flag']:#x}) {fmt_ns(worst['late_ns'])} late. " + cost_text)
        if row["before_region"]:
            text += f" Before notifying it ran '{row['before_region']}' ({fmt_ns(row['before_ns'])} on average"
            if np.isfinite(row["before_others_ns"]):
                text += f" vs {fmt_ns(row['before_others_ns'])} on other ranks"
            text += ")."
        out.append(Finding("straggler", "warning", float(row["cost_ns"]), text, (r,) + tuple(int(x) for x in row["waiter_ranks"]),
                           _rel(trace, row["worst_start_ns"]), _rel(trace, row["worst_end_ns"]),
                           {"rank": r, "producer_late_ns": held if held_late else float(excess),
                            "held_excess_ns": row["held_excess_ns"], "held_median_ns": row["held_median_ns"],
                            "held_excess_total_ns": row["held_excess_total_ns"],
                            "late_median_ns": row["late_median_ns"], "excess_late_ns": excess,
                            "cost_ns": row["cost_ns"], "n_waits": row["n_waits"], "waiter_ranks": list(row["waiter_ranks"]),
                            "before_region": row["before_region"], "before_ns": row["before_ns"],
                            "before_others_ns": row["before_others_ns"]}))
    # the single workgroup whose late notifies cost most, if it stands out among its rank's
    if by_wg.size and out:
        top = by_wg[0]
        if top["late_median_ns"] >= cfg.min_late_ns or (np.isfinite(top["held_excess_ns"]) and top["held_excess_ns"] >= cfg.min_late_ns):
            out.append(Finding(
                "straggler", "info", float(top["cost_ns"]),
                f"the costliest producer workgroup: rank {top['rank']} program {top['program']} (launch {top['launch']}): "
                f"its {top['n_notifies']} notifies kept {top['n_waits']} waits on {ranks_text(top['waiter_ranks'])} "
                f"waiting {fmt_ns(top['cost_ns'])}.",
                (int(top["rank"]),), _rel(trace, top["worst_start_ns"]), _rel(trace, top["worst_end_ns"]),
                {"rank": top["rank"], "program": top["program"], "cost_ns": top["cost_ns"]}))
    return out


def _load_findings(trace: Trace, wg: np.ndarray, imb: np.ndarray) -> list[Finding]:
    out: list[Finding] = []
    o = wg[wg["outlier"]]
    if o.size:
        label = np.array([f"{a}\x00{b}\x00{c}" for a, b, c in zip(o["cause"].tolist(), o["top_region"].tolist(), o["role"].tolist())], dtype=object)
        ulab, linv = np.unique(label, return_inverse=True)
        linv = linv.reshape(-1)
        role_codes, role_inv = np.unique(wg["role"], return_inverse=True)
        role_inv = role_inv.reshape(-1)
        for gi, lab in enumerate(ulab.tolist()):  # one per (cause, region, role): a handful
            cause, region, role = lab.split("\x00")
            sel = o[linv == gi]
            role_wg = wg[role_inv == int(np.searchsorted(role_codes, role))]
            med_busy = float(np.median(role_wg["work_ns"]))
            med_wait = float(np.median(role_wg["wait_ns"]))
            med_items = float(np.median(role_wg["work_items"]))
            by_rank: dict = {}
            for r, p in zip(sel["rank"].tolist(), sel["program"].tolist()):
                by_rank.setdefault(r, []).append(p)
            where = "; ".join(f"rank {r} {programs_text(ps)}" for r, ps in sorted(by_rank.items()))
            n = sel.size
            role_name = role.split(":", 1)[-1]
            extra = float(np.nanmean(sel["top_region_excess_ns"])) if np.isfinite(sel["top_region_excess_ns"]).any() else np.nan
            if cause == "work":
                items = float(np.mean(sel["work_items"]))
                items_text = (f"{items:.1f} work items vs {med_items:.0f}: uneven work distribution" if items > med_items * 1.05
                              else f"the same number of work items ({med_items:.0f}) as the others: its work went slower")
                text = (f"{n} overloaded workgroup{'s' if n > 1 else ''} ({role_name}): {where}; busy "
                        f"{fmt_ns(float(np.mean(sel['work_ns'])))} on average vs a median of {fmt_ns(med_busy)} "
                        f"({float(np.mean(sel['work_ns'])) / max(med_busy, 1):.1f}x), {items_text}")
                cost = float((sel["work_ns"] - med_busy).clip(0).sum())
                sev = "warning"
            else:
                text = (f"{n} workgroup{'s' if n > 1 else ''} slowed by waiting, not by work ({role_name}): {where}; waited "
                        f"{fmt_ns(float(np.mean(sel['wait_ns'])))} on average vs a median of {fmt_ns(med_wait)}")
                cost = float((sel["wait_ns"] - med_wait).clip(0).sum())
                sev = "info"
            if region:
                text += f"; most extra time in '{region}' (+{fmt_ns(extra)})"
            out.append(Finding("load", sev, cost, text + ".", tuple(sorted(by_rank)), _rel(trace, sel["start_ns"].min()),
                               _rel(trace, sel["end_ns"].max()),
                               {"cause": cause, "region": region,
                                "workgroups": [[int(r), int(p)] for r, p in zip(sel["rank"], sel["program"])]}))
    per = imb[(imb["rank"] >= 0) & (imb["n_workgroups"] >= 2) & (imb["max_over_mean"] >= 1.3) & (imb["tail_ns"] > 0)]
    per = per[np.argsort(-per["tail_ns"], kind="stable")]
    if per.size > 3:
        out.append(Finding("imbalance", "info", 0.0,
                           f"{per.size} (rank, launch) pairs have busy time max/mean >= 1.3; the 3 with the longest tails follow.",
                           tuple(sorted(set(per["rank"].tolist())))))
    for row in per[:3]:
        if True:
            text = (f"rank {row['rank']} launch {row['launch']}: busy time max/mean {row['max_over_mean']:.2f} "
                    f"(CV {row['cv']:.2f}); the last workgroup (program {row['tail_program']}) finished "
                    f"{fmt_ns(row['tail_ns'])} after the median one, from {row['cause']}.")
            out.append(Finding("imbalance", "info", float(row["tail_ns"]), text, (int(row["rank"]),),
                               _rel(trace, row["finish_median_ns"]), _rel(trace, row["finish_last_ns"]),
                               {k: row[k] for k in ("max_over_mean", "cv", "tail_ns", "cause")}))
    return out


def _overlap_findings(trace: Trace, ov: np.ndarray) -> list[Finding]:
    out: list[Finding] = []
    if ov.size == 0:
        return out
    keys, inv = np.unique(ov["rank"], return_inverse=True)
    for i, r in enumerate(keys.tolist()):
        sel = ov[inv.reshape(-1) == i]
        comm, exp, kern = float(sel["comm_ns"].sum()), float(sel["exposed_ns"].sum()), float(sel["kernel_ns"].sum())
        if comm <= 0 or kern <= 0:
            continue
        if exp / kern >= 0.1:
            out.append(Finding("overlap", "info", exp,
                               f"rank {r}: {fmt_ns(exp)} of its {fmt_ns(comm)} of communication ({100 * exp / comm:.0f}%) was "
                               f"exposed (no compute running on the rank): {100 * exp / kern:.0f}% of its kernel time.",
                               (r,), data={"comm_ns": comm, "exposed_ns": exp, "kernel_ns": kern}))
    return out


def _skew_findings(trace: Trace, lt: np.ndarray) -> list[Finding]:
    out: list[Finding] = []
    if lt.size == 0:
        return out
    li, inv = np.unique(lt["launch"], return_inverse=True)
    inv = inv.reshape(-1)
    dur = np.zeros(li.size)
    for i in range(li.size):  # per launch: a handful of ranks each
        dur[i] = np.median(lt["dur_ns"][inv == i])
    sig = (lt["start_skew_ns"] > np.maximum(0.05 * dur[inv], 5_000))
    if not sig.any():
        return out
    worst = lt[sig][np.argmax(lt["start_skew_ns"][sig])]
    sel = lt[lt["launch"] == worst["launch"]]
    first = sel[np.argmin(sel["start_ns"])]
    n_l = int(np.unique(lt["launch"][sig]).size)
    text = (f"launch {worst['launch']}: rank {worst['rank']} started {fmt_ns(worst['start_skew_ns'])} after rank {first['rank']} "
            f"({100 * worst['start_skew_ns'] / max(dur[inv][lt['launch'] == worst['launch']][0], 1):.0f}% of the kernel); "
            f"the last rank finished {fmt_ns(float(sel['end_skew_ns'].max()))} after the first.")
    if n_l > 1:
        text += f" {n_l} of {li.size} launches had a start skew above 5% of their duration."
    out.append(Finding("skew", "info", float(worst["start_skew_ns"]), text, (int(worst["rank"]), int(first["rank"])),
                       _rel(trace, first["start_ns"]), _rel(trace, worst["start_ns"]),
                       {"start_skew_ns": worst["start_skew_ns"], "end_skew_ns": sel["end_skew_ns"].max(), "launches": n_l}))
    return out


def _path_findings(trace: Trace, path: np.ndarray) -> list[Finding]:
    """One finding for all launches: who holds the critical path, and the longest path's route."""
    out: list[Finding] = []
    sig = path[path["kind"] == "signal"]
    if sig.size == 0:
        return out
    launches = np.unique(path["launch"])
    crossing = np.unique(sig["launch"])
    tot = float(path["dur_ns"].sum())
    ranks: dict[int, float] = {}
    for r in np.unique(path["rank"]).tolist():
        ranks[r] = float(path["dur_ns"][path["rank"] == r].sum())
    top_r = max(ranks, key=ranks.get)
    runs = path[(path["kind"] == "run") & (path["rank"] == top_r)]
    reg = ""
    if runs.size:
        u, inv = np.unique(runs["region"].astype(str), return_inverse=True)
        reg = str(u[np.argmax(np.bincount(inv.reshape(-1), weights=runs["dur_ns"].astype(float)))])
    # the launch with the most hops, as an example route
    li, cnt = np.unique(sig["launch"], return_counts=True)
    ex = int(li[np.argmax(cnt)])
    p = path[path["launch"] == ex]
    route = " -> ".join(f"r{r}p{q}" for r, q, k in zip(p["rank"].tolist(), p["program"].tolist(), p["kind"].tolist()) if k == "run")
    text = (f"the critical path crosses ranks in {crossing.size} of {launches.size} launch{'es' if launches.size > 1 else ''}; "
            f"rank {top_r} holds {100 * ranks[top_r] / max(tot, 1):.0f}% of critical-path time"
            + (f", mostly in '{reg}'" if reg else "") + f". Launch {ex}: {route}.")
    out.append(Finding("critical_path", "info", 0.0, text, tuple(sorted(ranks)), _rel(trace, p["start_ns"].min()),
                       _rel(trace, p["end_ns"].max()),
                       {"launches_crossing": int(crossing.size), "share": {int(k): v / max(tot, 1) for k, v in ranks.items()}}))
    return out


def _capture_findings(trace: Trace, silent: np.ndarray) -> list[Finding]:
    out: list[Finding] = []
    if trace.partial:
        missing = sorted(set(range(trace.world_size)) - set(np.unique(trace.wg_keys[:, 0]).tolist()))
        out.append(Finding("capture", "warning", 0.0,
                           f"the capture is partial (ranks {missing or '?'} missing): waits on those ranks' notifies have no "
                           f"release and are left out of the producer-late split.", tuple(missing)))
    model = trace.clock
    if model is not None and not getattr(model, "aligned", True):
        out.append(Finding("capture", "warning", 0.0,
                           "some ranks have no clock calibration: their events are on their own device clock and cross-rank "
                           "timings (lateness, skew, critical path) involving them are not meaningful."))
    if silent.size:
        for row in silent:
            out.append(Finding("capture", "warning", 0.0,
                               f"rank {row['rank']} launch {row['launch']}: {row['n_silent']} of {row['n_programs']} programs "
                               f"recorded nothing (never started, never finished, or not traced).", (int(row["rank"]),)))
    return out


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------


def build_report(source, config: ReportConfig = ReportConfig(), *, progress: Progress | None = None) -> Report:
    """Run every analysis on a capture and gather its findings.

    Args:
        source: anything :func:`ktrace.analysis.prepare` takes (a capture, a path, a table).
        config: what to look for.
        progress: called as each step starts (name, steps done, steps in all).

    Raises:
        AnalysisError: the capture cannot be analysed.
    """
    steps = ["align", "waits", "stragglers", "load", "overlap", "critical path", "hangs", "findings"]
    done = [0]

    def step(name):
        if progress:
            progress(name, done[0], len(steps))
        done[0] += 1

    step("align")
    trace = prepare(source)
    step("waits")
    w = stalls.waits(trace)

    def stall_part():
        tot = [stalls.stall_totals(trace, by, w) for by in ("rank", "peer", "workgroup")]
        nl = stalls.notify_lateness(trace, w)
        return (*tot, stalls.straggler_table(trace, "rank", w), nl)

    def load_part():
        # shared with the other thread's notify lateness (computed once: the other waits)
        stalls.preceding_notify_spans(trace)
        wg = load.workgroups(trace, config.load)
        path = overlap.critical_path(trace)
        res = (wg, load.imbalance(trace, wg), load.per_sm(trace, wg), overlap.overlap(trace, config.classes), path,
               overlap.critical_path_summary(path))
        return res + (stalls.straggler_table(trace, "workgroup", w),)

    # the stall tables and the load/overlap tables do not depend on each other: with two
    # workers they are computed at once (numpy releases the GIL in its loops)
    if config.workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:
            f_stall = pool.submit(stall_part)
            step("stragglers")
            load_res = load_part()
            step("load")
            stall_res = f_stall.result()
    else:
        stall_res = stall_part()
        step("stragglers")
        load_res = load_part()
        step("load")
    tot_rank, tot_peer, tot_wg, by_rank, nl = stall_res
    wg, imb, sm, ov, path, path_sum, by_wg = load_res
    step("overlap")
    lt = overlap.launch_timing(trace)
    step("critical path")
    step("hangs")
    to = hangs.timeouts(trace)
    missing = hangs.missing_notifies(trace, to)
    cycles = hangs.wait_for_cycles(missing)
    silent = hangs.silent_programs(trace)
    step("findings")
    total_wait = float(w["wait_ns"].sum())
    findings = (_hang_findings(trace, to, missing, cycles) + _straggler_findings(trace, by_rank, by_wg, nl, config, total_wait)
                + _load_findings(trace, wg, imb) + _overlap_findings(trace, ov) + _skew_findings(trace, lt)
                + _path_findings(trace, path) + _capture_findings(trace, silent))
    findings.sort(key=lambda f: (_SEVERITY[f.severity], -f.cost_ns))
    kt = stalls.kernel_time(trace)
    paired = w["notify_row"] >= 0
    summary = {
        "source": trace.source,
        "world_size": trace.world_size,
        "ranks": sorted(set(trace.wg_keys[:, 0].tolist())),
        "launches": int(np.unique(trace.wg_keys[:, 1]).size) if trace.n_workgroups else 0,
        "kernels": sorted(set(trace.kernels.values())),
        "events": trace.n_events,
        "workgroups": trace.n_workgroups,
        "kernel_ns": float(kt["kernel_ns"].sum()),
        "waits": int(w.size),
        "wait_ns": total_wait,
        "producer_late_ns": float(np.nansum(w["producer_late_ns"])),
        "signal_latency_ns": float(np.nansum(w["signal_latency_ns"])),
        "waits_released": int(paired.sum()),
        "waits_unreleased": int((~paired & ~w["timed_out"]).sum()),
        "timeouts": int(w["timed_out"].sum()),
        "clock": (getattr(trace.clock, "method", None) if trace.clock is not None else "given table"),
        "clock_bound_ns": (float(trace.clock.max_rtt_ns / 2 + trace.clock.max_residual_ns) if trace.clock is not None else None),
        "partial": trace.partial,
        # the traces' time 0 is origin_ns; they end here (what links are clamped to)
        "trace_end_ns": int(trace.column("end_ns").max()) - trace.origin_ns if trace.n_events else 0,
    }
    tables = {
        "waits": w, "stalls_by_rank": tot_rank, "stalls_by_peer": tot_peer, "stalls_by_workgroup": tot_wg,
        "stragglers": by_rank, "straggler_workgroups": by_wg, "notify_lateness": nl,
        "workgroups": wg, "imbalance": imb, "per_sm": sm, "overlap": ov, "launch_timing": lt,
        "critical_path": path, "critical_path_summary": path_sum, "timeouts": to, "missing_notifies": missing,
        "silent_programs": silent,
    }
    if progress:
        progress("done", len(steps), len(steps))
    return Report(source=trace.source, origin_ns=trace.origin_ns, summary=summary, findings=findings, tables=tables,
                  config=config, trace=trace)


def render_text(rep: Report, *, max_findings: int = 20) -> str:
    """The terminal summary: findings first, in plain words, then the headline numbers."""
    s = rep.summary
    lines = [f"ktrace report: {s['source']}", ""]
    if rep.findings:
        lines.append("Findings (most costly first):")
        for i, f in enumerate(rep.findings[:max_findings], 1):
            tag = {"error": "!!", "warning": " !", "info": "  "}[f.severity]
            where = f" [+{fmt_ns(f.start_ns)} .. +{fmt_ns(f.end_ns)}]" if f.start_ns is not None else ""
            lines.append(f"{tag} {i}. {f.text}{where}")
        if len(rep.findings) > max_findings:
            lines.append(f"   ... and {len(rep.findings) - max_findings} more (see --json / --html)")
    else:
        lines.append("No findings: no late producers, overloaded workgroups, exposed communication or hangs stood out.")
    lines += [
        "",
        f"Capture: {s['world_size']} ranks ({', '.join(map(str, s['ranks']))}), {s['launches']} launches of "
        f"{', '.join(s['kernels']) or '?'}, {s['events']:,} events, {s['workgroups']:,} workgroups"
        + (" (PARTIAL)" if s["partial"] else ""),
        f"Clock: {s['clock']}" + (f", ranks aligned within ~{fmt_ns(s['clock_bound_ns'])}" if s.get("clock_bound_ns") else "") + (f" ({rep.trace.clock.bounds_text()})" if rep.trace is not None and hasattr(rep.trace.clock, "bounds_text") else ""),
        f"Waits: {s['waits']:,} waited {fmt_ns(s['wait_ns'])} in total: producer late {fmt_ns(s['producer_late_ns'])}, "
        f"signal latency {fmt_ns(s['signal_latency_ns'])}; {s['waits_unreleased']} completed waits without a captured "
        f"notify; {s['timeouts']} timed out.",
    ]
    tr = rep.tables["stalls_by_rank"]
    if tr.size:
        lines.append("Waiting per rank: " + ", ".join(
            f"r{r['rank']} {fmt_ns(r['wait_ns'])} ({100 * r['wait_frac']:.0f}% of program time)" if np.isfinite(r["wait_frac"])
            else f"r{r['rank']} {fmt_ns(r['wait_ns'])}" for r in np.sort(tr, order="rank")))
    ov = rep.tables["overlap"]
    if ov.size:
        parts = []
        for r in np.unique(ov["rank"]).tolist():
            sel = ov[ov["rank"] == r]
            c = float(sel["comm_ns"].sum())
            parts.append(f"r{r} {100 * float(sel['hidden_ns'].sum()) / c:.0f}% hidden" if c else f"r{r} no comm")
        lines.append("Communication under compute: " + ", ".join(parts))
    imb = rep.tables["imbalance"]
    allr = imb[imb["rank"] < 0]
    if allr.size:
        lines.append("Workgroup busy time max/mean: " + ", ".join(
            f"launch {r['launch']} {r['max_over_mean']:.2f} (CV {r['cv']:.2f}, tail {fmt_ns(r['tail_ns'])})" for r in allr[:4]))
    lines.append("Times are relative to the capture's first event (time 0 of its Perfetto trace).")
    return "\n".join(lines)


def report_json(rep: Report) -> dict:
    """The report as JSON-ready data: summary, findings (with Perfetto links) and the tables
    (the first ``config.max_rows`` rows of each, biggest first; ``rows_total`` gives the count)."""
    tables = {}
    for name, t in rep.tables.items():
        tables[name] = {"rows_total": int(t.size), "columns": list(t.dtype.names or ()),
                        "rows": _jsonable(table_to_records(t, rep.config.max_rows))}
    return {"format": "ktrace-report", "version": 1, "source": rep.source, "origin_ns": rep.origin_ns,
            "summary": _jsonable(rep.summary),
            "findings": [f.to_dict(rep.config.trace_url, rep.summary.get("trace_end_ns"), rep.summary.get("ranks")) for f in rep.findings],
            "tables": tables}


# ---------------------------------------------------------------------------------------------
# diff
# ---------------------------------------------------------------------------------------------


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
    tables = _diff.diff(ta, tb)
    findings: list[Finding] = []
    ranks = tables["ranks"]
    kern = ranks[ranks["measure"] == "kernel"]
    a_k, b_k = float(kern["a_ns"].sum()), float(kern["b_ns"].sum())
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
    findings.sort(key=lambda f: (_SEVERITY[f.severity], -f.cost_ns))
    summary = {"a": ta.source, "b": tb.source, "kernel_a_ns": a_k, "kernel_b_ns": b_k,
               "kernel_change": (b_k - a_k) / a_k if a_k else None}
    if progress:
        progress("done", 3, 3)
    return DiffReport(a=ta.source, b=tb.source, findings=findings, tables=tables, summary=summary)


def render_diff_text(d: DiffReport, *, rows: int = 10) -> str:
    s = d.summary
    ch = f" ({100 * s['kernel_change']:+.1f}%)" if s["kernel_change"] is not None else ""
    lines = [f"ktrace diff: A = {d.a}, B = {d.b}", "",
             f"Kernel time per launch, summed over ranks: {fmt_ns(s['kernel_a_ns'])} -> {fmt_ns(s['kernel_b_ns'])}{ch}", ""]
    lines.append("Biggest movers:" if d.findings else "No differences.")
    for i, f in enumerate(d.findings, 1):
        lines.append(f"  {i}. {f.text}")
    r = d.tables["ranks"]
    if r.size:
        lines += ["", "Per rank (per launch):"]
        for row in np.sort(r, order=["rank", "measure"]):
            lines.append(f"  rank {row['rank']} {row['measure']:>6}: {fmt_ns(row['a_ns']):>10} -> {fmt_ns(row['b_ns']):>10}")
    return "\n".join(lines)


def diff_json(d: DiffReport, max_rows: int = 200) -> dict:
    return {"format": "ktrace-diff", "version": 1, "a": d.a, "b": d.b, "summary": _jsonable(d.summary),
            "findings": [f.to_dict() for f in d.findings],
            "tables": {k: {"rows_total": int(t.size), "columns": list(t.dtype.names or ()),
                           "rows": _jsonable(table_to_records(t, max_rows))} for k, t in d.tables.items()}}
