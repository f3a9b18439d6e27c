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

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from . import causes, hangs, lanes, load, stalls, warmup
from . import compare as _diff
from . import timeline as overlap
from . import timeline as _path
from .. import pairing
from ..keys import group_index
from ..schema import is_local
from ..text import MEASURES, count_text, diff_headline, fmt_ns, kernel_time_text, printable
from .causes.words import share_text
from .finding_view import finding_views
from .names import OUTSIDE
from .document import MIN_LINK_NS, PERFETTO_UI, Finding, link_range, perfetto_link
from .document import jsonable as _jsonable
from .trace import Progress, Trace, drop_launches, has_lanes, prepare, table_to_records

_SEVERITY = {"error": 0, "warning": 1, "info": 2}


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


class Tables(Mapping):
    """A report's tables by name: those the findings needed are computed, the others on first
    use (``report_json``, the HTML report and the tests ask for them all; the terminal report
    does not wait for tables it does not show).

    ``heads`` (name -> ``fn(n)``: the table's size and its first ``n`` rows) make the first rows
    of a large table without the rest (:meth:`head`: what the JSON document holds)."""

    def __init__(self, computed: dict, makers: dict, heads: dict | None = None):
        self._done = dict(computed)
        self._makers = {k: v for k, v in makers.items() if k not in self._done}
        self._heads = dict(heads or {})
        self._order = list(computed) + [k for k in makers if k not in computed]

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._done:
            if name not in self._makers:
                raise KeyError(name)
            self._done[name] = self._makers.pop(name)()
        return self._done[name]

    def __iter__(self):
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def computed(self) -> list[str]:
        """Names of the tables computed so far."""
        return [k for k in self._order if k in self._done]

    def head(self, name: str, n: int) -> tuple[int, object]:
        """``(rows, first n rows)`` of a table: the same as ``t.size, t[:n]`` of the whole table,
        made without the rest where the table has a head maker and is not made yet."""
        if name not in self._done and name in self._heads:
            return self._heads[name](n)
        t = self[name]
        return int(t.size), t[:n]


@dataclass
class Report:
    """Findings, summary and tables of one capture (see :func:`build_report`)."""

    source: str
    origin_ns: int
    summary: dict
    findings: list[Finding]
    tables: Mapping
    config: ReportConfig
    trace: Trace | None = field(default=None, repr=False)
    views: Mapping = field(default_factory=dict, repr=False)

    def document(self) -> dict:
        """The report as its closed JSON document (:func:`report_json`): what renderers read."""
        return report_json(self)


def _rel(trace: Trace, t) -> int:
    return int(t) - trace.origin_ns


# ---------------------------------------------------------------------------------------------
# findings
# ---------------------------------------------------------------------------------------------


def _severity(c: causes.Cause, total: float, cfg: ReportConfig) -> str:
    if c.kind == "hang":
        return "error"
    return "warning" if total > 0 and c.saving_ns >= cfg.causes.min_share * total and c.saving_ns > 0 else "info"


def _lists(x):
    """Tuples as lists, all the way down (the data reads as its JSON does)."""
    if isinstance(x, dict):
        return {k: _lists(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_lists(v) for v in x]
    return x


def _cause_data(c: causes.Cause, total: float, n_launches_all: int) -> dict:
    # (rows and workgroup ids are what the replay needed, not for readers)
    det = c.detail
    d = _lists({f.name: getattr(det, f.name) for f in dataclasses.fields(det) if f.name not in ("rows", "workgroups")}
               if dataclasses.is_dataclass(det) else dict(det or {}))
    d.update(kind=c.kind, rank=c.rank, ranks=list(c.ranks), saving_ns=c.saving_ns,
             saving_per_launch_ns=c.saving_ns / max(c.launches.size, 1),
             share=c.saving_ns / total if total > 0 else None, n_launches=int(c.launches.size),
             launches_total=n_launches_all, saving_launches=c.saving_launches, sampled_launches=c.sampled,
             waiting_removed_ns=c.waiting_removed_ns, waits_affected=c.waits_affected, excess_ns=c.excess_ns)
    return d


def _cause_findings(ctx: causes.Context, found: list, cfg: ReportConfig) -> list[Finding]:
    """One finding per cause, in the words of its kind's module (``causes.registry``)."""
    total = ctx.kernel_time_ns
    L = ctx.n_launches
    out = []
    for c in found:
        if c.launches.size == 0:
            continue
        desc = causes.BY_KIND[c.kind].describe(c, ctx)
        out.append(Finding(c.kind, _severity(c, total, cfg), float(c.saving_ns), desc.text,
                           tuple(int(x) for x in c.ranks), desc.start_ns, desc.end_ns, _cause_data(c, total, L),
                           label=desc.label, claims=[cl.to_dict() for cl in desc.claims]))
    return out


def _deadlock_findings(cycles: list[list[int]]) -> list[Finding]:
    out = []
    for c in cycles:
        if len(c) > 1:
            chain = " -> ".join(f"rank {r}" for r in c + [c[0]])
            out.append(Finding("hang", "error", 0.0, f"DEADLOCK: {chain}: each waited for a notify the next never sent.",
                               tuple(c), data={"cycle": c}))
    return out


def _overlap_findings(trace: Trace, ov: np.ndarray, sampled: int, n_launches: int) -> list[Finding]:
    """One line: how much communication was exposed (no compute running on the rank to hide it),
    measured on ``sampled`` of the ``n_launches`` launches."""
    if ov.size == 0:
        return []
    keys, inv = np.unique(ov["rank"], return_inverse=True)
    inv = inv.reshape(-1)
    comm = np.bincount(inv, weights=ov["comm_ns"].astype(float), minlength=keys.size)
    exp = np.bincount(inv, weights=ov["exposed_ns"].astype(float), minlength=keys.size)
    kern = np.bincount(inv, weights=ov["extent_ns"].astype(float), minlength=keys.size)
    sig = (comm > 0) & (kern > 0) & (exp >= 0.1 * np.maximum(kern, 1))
    if not sig.any():
        return []
    # a share of the rank's extent (its first event to its last), not of the kernel time (every rank)
    parts = ", ".join(f"rank {r} {fmt_ns(e)} ({100 * e / k:.0f}%)" for r, e, k, s_ in
                      zip(keys.tolist(), exp.tolist(), kern.tolist(), sig.tolist()) if s_)
    on = f" (measured on {sampled:,} of {n_launches:,} launches)" if sampled < n_launches else ""
    launches = np.unique(ov["launch"]).tolist()
    claims = [{"kind": "exposed_communication", "agents": [[int(r), -1, -1, 0]],
               "values": {"launches": launches, "exposed_ns": float(e), "extent_ns": float(k)}}
              for r, e, k, s_ in zip(keys.tolist(), exp.tolist(), kern.tolist(), sig.tolist()) if s_]
    return [Finding("overlap", "info", float(exp[sig].sum()),
                    f"communication exposed (no compute running on the rank to hide it; the share is of the rank's extent, "
                    f"its first event to its last): {parts}{on}.",
                    tuple(int(r) for r in keys[sig]), data={"exposed_ns": exp[sig].tolist(), "ranks": keys[sig].tolist()},
                    label="exposed communication", claims=claims)]


#: Run segments a critical-path claim lists (beyond this the claim keeps its totals only).
MAX_CLAIM_SEGMENTS = 2000


def _barrier_released(trace: Trace, w, pos: np.ndarray) -> np.ndarray:
    """Per mbarrier wait (positions in ``w``), whether its program recorded any mbarrier release
    (a LOCAL notify) on its barrier in its launch."""
    from ..schema import EventKind, arg_column

    if pos.size == 0:
        return np.zeros(0, bool)
    Nk = EventKind.NOTIFY
    loc = is_local(trace.at(Nk, "flags"))
    if not loc.any():
        return np.zeros(pos.size, bool)
    cols = ("rank", "launch", "program")
    nk = [trace.at(Nk, c)[loc].astype(np.int64) for c in cols] + [trace.at(Nk, arg_column(Nk, "flag"))[loc].astype(np.int64)]
    wk = [np.asarray(w[c])[pos].astype(np.int64) for c in cols] + [np.asarray(w["flag"])[pos].astype(np.int64)]
    inv, _ = group_index(*(np.concatenate([a, b]) for a, b in zip(nk, wk)))
    return np.isin(inv[nk[0].size:], inv[: nk[0].size])


def _sender_recorded(trace: Trace, w, pos: np.ndarray) -> np.ndarray:
    """Per flag wait (positions in ``w``), whether its peer's launch of the same index recorded any
    flag notify, or is not in the capture (then nothing is known of what it recorded)."""
    from ..schema import EventKind

    if pos.size == 0:
        return np.zeros(0, bool)
    Nk = EventKind.NOTIFY
    flag = ~is_local(trace.at(Nk, "flags"))
    peer = np.asarray(w["peer"])[pos].astype(np.int64)
    launch = np.asarray(w["launch"])[pos].astype(np.int64)
    nk = [trace.at(Nk, "rank")[flag].astype(np.int64), trace.at(Nk, "launch")[flag].astype(np.int64)]
    kt = stalls.kernel_time(trace)  # (every (rank, launch) with an event)
    inv, _ = group_index(*(np.concatenate(x) for x in zip(nk, [kt["rank"].astype(np.int64), kt["launch"].astype(np.int64)],
                                                               [peer, launch])))
    a, b = nk[0].size, nk[0].size + kt.size
    return np.isin(inv[b:], inv[:a]) | ~np.isin(inv[b:], inv[a:b])


def _event_key(trace: Trace, rows: np.ndarray) -> list[list[int]]:
    """Events named the way a reader of the raw capture finds them: (rank, launch, program, k), the
    k-th event its program recorded (in slot order; the trace's own columns, not the full table)."""
    from .spans import workgroup_starts

    rows = np.asarray(rows, np.int64)
    k = rows - workgroup_starts(trace)[trace.wg[rows]]
    return [[int(a), int(b), int(c), int(d)] for a, b, c, d in zip(
        trace.column("rank")[rows].tolist(), trace.column("launch")[rows].tolist(),
        trace.column("program")[rows].tolist(), k.tolist())]


def _path_findings(trace: Trace, path: np.ndarray, w) -> list[Finding]:
    """One finding for all launches: the hand-offs on the critical path (between ranks, between
    programs of one rank), who holds it, and where its holder's time went (waits included)."""
    if path.size == 0:
        return []
    launches = np.unique(path["launch"])
    L = launches.size
    sig = path[path["kind"] == "signal"]
    claims: list = []
    parts = []
    if sig.size:
        wrow = sig["wait_row"].astype(np.int64)
        k = np.clip(np.searchsorted(w["row"], wrow), 0, max(w.size - 1, 0))
        nrow = np.where(w["row"][k] == wrow, w["notify_row"][k], -1)
        ok = nrow >= 0
        wrow, nrow, sl = wrow[ok], nrow[ok], sig["launch"][ok]
        cross_rank = trace.column("rank")[nrow] != trace.column("rank")[wrow]
        cross_prog = ~cross_rank & (trace.wg[nrow] != trace.wg[wrow])
        lane = trace.column("lane")
        cross_lane = ~cross_rank & ~cross_prog & (lane[nrow] != lane[wrow])  # (mbarrier hand-offs between partitions)
        kinds = {"ranks": "crosses_ranks", "programs of one rank": "crosses_programs", "lanes of one program": "crosses_lanes"}
        for sel, what in ((cross_rank, "ranks"), (cross_prog, "programs of one rank"), (cross_lane, "lanes of one program")):
            ls = np.unique(sl[sel])
            if ls.size:
                first = np.flatnonzero(sel)[np.unique(sl[sel], return_index=True)[1]]  # one per launch
                parts.append(f"it crosses {what} in {ls.size:,} of {L:,} launch{'es' if L != 1 else ''}")
                claims.append({"kind": kinds[what], "agents": [],
                               "values": {"launches": ls.size, "of": L,
                                          "handoffs": [[wk, nk] for wk, nk in zip(_event_key(trace, wrow[first]),
                                                                                   _event_key(trace, nrow[first]))]}})
    if not parts:
        # (the walk follows only waits whose notify came after they began: the program that ended
        # each launch last had none; it may have waited, on notifies already sent)
        ends = path[path["kind"] == "run"]
        ends = ends[np.unique(ends["launch"], return_index=True)[1]] if ends.size else ends
        parts.append(f"no hand-off on it in {'any of the' if L != 1 else 'the'} {L:,} launch{'es' if L != 1 else ''}: "
                     f"the program that ended {'each' if L != 1 else 'it'} last waited on no notify sent after its wait began")
        claims.append({"kind": "no_late_handoff", "agents": [[int(r), int(l), int(p), int(ln)] for r, l, p, ln in zip(
            ends["rank"].tolist(), ends["launch"].tolist(), ends["program"].tolist(), ends["lane"].tolist())][:MAX_CLAIM_SEGMENTS],
            "values": {"launches": L}})
    # (a signal step whose notify starts after its wait ended, within the clocks' bound, is no time)
    dur = np.maximum(path["dur_ns"], 0).astype(float)
    tot = float(dur.sum())
    # the agent holding it: a program, or a lane of one (its partition) when programs have several
    ainv, ak = group_index(path["rank"], path["program"], path["lane"])
    per_agent = np.bincount(ainv, weights=dur, minlength=ak.shape[0])
    rk, rinv = np.unique(path["rank"], return_inverse=True)
    per_rank = np.bincount(rinv.reshape(-1), weights=dur, minlength=rk.size)
    top_r = int(rk[np.argmax(per_rank)])
    mine = path[path["rank"] == top_r]
    top = int(np.argmax(np.where(ak[:, 0] == top_r, per_agent, -1)))
    top_a, top_lane = int(ak[top, 1]), int(ak[top, 2])
    a_share = float(per_agent[top]) / max(tot, 1)
    r_share = float(per_rank.max()) / max(tot, 1)
    who = f"program {top_a}"
    if has_lanes(trace):
        launch_of = int(mine["launch"][(mine["program"] == top_a) & (mine["lane"] == top_lane)][0])
        who += f" lane {top_lane} ({lanes.lane_name(trace, top_r, launch_of, top_lane)})"
    holder = (f"rank {top_r} {who} holds {100 * a_share:.0f}% of its time" if a_share >= 0.995 * r_share
              else f"rank {top_r} holds {100 * r_share:.0f}% of its time ({who} {100 * a_share:.0f}%)")
    claims.append({"kind": "holds_path", "agents": [[top_r, -1, top_a, top_lane]],
                   "values": {"rank_share": r_share, "program_share": a_share}})
    names, ns = _path.path_region_time(trace, mine)
    reg = ""
    text = "critical path: " + "; ".join(parts) + "; " + holder
    if names.size and ns.sum() > 0:
        reg = str(names[0])
        share = float(ns[0]) / float(ns.sum())
        text += f", {100 * share:.0f}% of that " + (reg if reg.startswith(("(", "waiting")) else f"in '{reg}'")
        runs = mine[mine["kind"] == "run"]
        # (program, launch, start, end, lane): the lane names whose events the segment walked
        seg = ([[int(p), int(l), int(a_) - trace.origin_ns, int(b_) - trace.origin_ns, int(ln_)] for p, l, a_, b_, ln_ in zip(
            runs["program"].tolist(), runs["launch"].tolist(), runs["start_ns"].tolist(), runs["end_ns"].tolist(),
            runs["lane"].tolist())] if runs.size <= MAX_CLAIM_SEGMENTS else None)
        claims.append({"kind": "region_share", "agents": [[top_r, -1, -1, 0]],
                       "values": {"region": reg, "share": share, "run_ns": float(ns.sum()), "segments": seg}})
    text += "."
    return [Finding("critical_path", "info", 0.0, text, tuple(int(r) for r in rk),
                    data={"launches_crossing": int(sum(c["values"]["launches"] for c in claims if c["kind"] == "crosses_ranks")),
                          "share": {int(k): v / max(tot, 1) for k, v in zip(rk.tolist(), per_rank.tolist())},
                          "top_rank": top_r, "top_program": top_a, "top_region": reg},
                    label="critical path", claims=claims)]


def _capture_findings(trace: Trace, silent: np.ndarray, hang_launches: set) -> list[Finding]:
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
                           "timings (lateness, skew, critical path, savings) involving them are not meaningful."))
    if silent.size:
        # programs of the grid that recorded nothing: persistent kernels leave programs without
        # work; only in a launch that hung do they say something (they may never have finished)
        in_hang = np.isin(silent["launch"], list(hang_launches)) if hang_launches else np.zeros(silent.size, bool)
        # the same count on the same rank in several launches is said once, with how many
        same: dict = {}
        for key in zip(silent["rank"].tolist(), silent["n_silent"].tolist(), silent["n_programs"].tolist()):
            same[key] = same.get(key, 0) + 1
        items = sorted(same.items(), key=lambda kv: (-kv[1], kv[0]))
        parts = ", ".join(f"rank {r} {s} of {n}" + (f" in {c:,} launches" if c > 1 else "") for (r, s, n), c in items[:6])
        more = f" and {len(items) - 6} more" if len(items) > 6 else ""
        text = (f"programs that recorded nothing (no work, never started, or never finished): {parts}{more} "
                f"({silent.size} (rank, launch) pairs"
                + (f"; {int(in_hang.sum())} of them in launches that hung" if in_hang.any() else "") + ").")
        claims = [{"kind": "silent_programs", "agents": [[int(r), int(l), -1, 0]],
                   "values": {"n_programs": int(n), "n_silent": int(k)}}
                  for r, l, n, k in zip(silent["rank"].tolist(), silent["launch"].tolist(), silent["n_programs"].tolist(),
                                        silent["n_silent"].tolist())][:MAX_CLAIM_SEGMENTS]
        out.append(Finding("capture", "info", 0.0, text, tuple(sorted(set(silent["rank"].tolist()))),
                           data={"n": int(silent.size), "in_hang": int(in_hang.sum())}, label="programs that recorded nothing",
                           claims=claims))
    return out


def _lane_findings(trace: Trace, held: np.ndarray, cfg: ReportConfig) -> list[Finding]:
    """Per (rank, lane) of a kernel traced per lane (``ktrace.gluon``), the partition whose own
    work kept the others of its programs waiting (``lanes.holdups``), in its worst program of its
    worst launch.

    Every pipeline has a lane that sets its pace; that alone is no fault. A warning only when
    that is ``min_share`` of the launch or more, the partition does no compute by its name
    (``ReportConfig.classes``: a compute partition setting the pace is a compute-bound kernel
    doing what it should), and the lane it held up most waited on it longer than it worked itself
    (it spent more of the program idle on this partition than busy); information otherwise."""
    out: list[Finding] = []
    if not held.size:
        return out
    lids, spans = causes.launch_makespans(trace)
    span_of = dict(zip(lids.tolist(), spans.tolist()))
    seen: set = set()
    kt = stalls.kernel_time(trace)
    for row in held:  # (most first: the first of each (rank, lane name) is its worst launch)
        r, ln, lane = int(row["rank"]), int(row["launch"]), int(row["lane"])
        name = lanes.lane_name(trace, r, ln, lane)
        if (r, name) in seen or row["worst_ns"] <= 0:
            continue
        seen.add((r, name))
        total = float(span_of.get(ln, 0))
        kernel = trace.kernels.get((r, ln), "the kernel")
        waiter = lanes.lane_name(trace, r, ln, int(row["waiter_lane"]))
        worked = float(row["waiter_work_ns"])
        idle = float(row["waiter_ns"]) > worked
        computes = cfg.classes.classify(name) == "compute"
        share = f" ({100 * float(row['worst_ns']) / total:.0f}% of that launch's {fmt_ns(total)})" if total > 0 else ""
        why = ("; its partition computes: the pace of a compute-bound kernel" if computes else
               "" if idle else f"; {waiter} worked longer itself ({fmt_ns(worked)}): the partition kept up")
        text = (f"partition {name} (lane {lane}) held up the other partitions of {kernel} on rank {r}: in its worst program "
                f"(p{int(row['worst_program'])}, launch {ln}) they waited {fmt_ns(row['worst_ns'])} on its releases while it "
                f"was not waiting itself{share}, {waiter} {fmt_ns(row['waiter_ns'])} of it on barrier "
                f"'{trace.regions.get(int(row['barrier']), row['barrier'])}'"
                + (f" (it worked {fmt_ns(worked)} itself)" if idle else "")
                + f"; {int(row['programs'])} programs, {fmt_ns(row['held_ns'])} in all{why}.")
        warn = total > 0 and row["worst_ns"] >= cfg.causes.min_share * total and idle and not computes
        mine = kt[(kt["launch"] == ln) & (kt["rank"] == r)]
        lo = _rel(trace, mine["start_ns"][0]) if mine.size else None
        hi = _rel(trace, mine["end_ns"][0]) if mine.size else None
        claims = [{"kind": "lane_holdup", "agents": [[r, ln, int(row["worst_program"]), lane]],
                   "values": {"worst_ns": float(row["worst_ns"]), "waiter_lane": int(row["waiter_lane"]),
                              "waiter_ns": float(row["waiter_ns"]), "barrier": int(row["barrier"]),
                              "waiter_work_ns": worked, "idle": bool(idle)}}]
        out.append(Finding("lane_holdup", "warning" if warn else "info", float(row["worst_ns"]), text, (r,), lo, hi,
                           data={"lane": lane, "partition": name, "launch": ln, "program": int(row["worst_program"]),
                                 "held_ns": float(row["held_ns"]), "worst_ns": float(row["worst_ns"]),
                                 "waiter": waiter, "waiter_ns": float(row["waiter_ns"]), "waiter_work_ns": worked},
                           label=f"{name} held up the others", claims=claims))
    return out


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------


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
        stalls._holds(trace)
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
    found = causes.find(ctx)
    cause_table = causes.causes_table(trace, found)
    wc_totals = causes.wait_cause_totals(trace, sample)
    step("findings")
    total_wait = float(w["wait_ns"].sum())
    hang_launches = set(missing["launch"].tolist()) if missing.size else set()
    n_launches = int(causes.launch_makespans(trace)[0].size)
    held = lanes.holdups(trace)
    findings = (_deadlock_findings(cycles) + _cause_findings(ctx, found, config) + _lane_findings(trace, held, config)
                + _path_findings(trace, path, w) + _overlap_findings(trace, ov_sample, sample.size, n_launches)
                + _capture_findings(trace, silent, hang_launches) + warmup.warmup_finding(warm))
    findings.sort(key=lambda f: (_SEVERITY[f.severity], f.kind not in causes.KINDS, -f.cost_ns,
                                 -float(f.data.get("excess_ns", 0.0) or 0.0) if f.kind in causes.KINDS else 0.0))
    paired = w["notify_row"] >= 0
    worst = [f for f in findings if f.severity in ("error", "warning") and f.kind != "capture"]
    top_info = next((f for f in findings if f.kind in causes.KINDS), None)
    allw = wc_totals[wc_totals["rank"] == -1]
    summary = {
        "source": trace.source,
        "world_size": trace.world_size,
        "ranks": sorted(set(trace.wg_keys[:, 0].tolist())),
        "launches": ctx.n_launches,
        "kernels": sorted(set(trace.kernels.values())),
        "events": trace.n_events,
        "workgroups": trace.n_workgroups,
        "kernel_time_ns": causes.kernel_time_total(trace),
        "waits": int(w.size),
        "wait_ns": total_wait,
        "producer_late_ns": float(np.nansum(w["producer_late_ns"])),
        "signal_latency_ns": float(np.nansum(w["signal_latency_ns"])),
        "link_ns": float(allw["link_ns"][0]) if allw.size else 0.0,
        "unexplained_ns": float(allw["unexplained_ns"][0]) if allw.size else 0.0,
        "waits_released": int(paired.sum()),
        "timeouts": int(w["timed_out"].sum()),
        "clock": (getattr(trace.clock, "method", None) if trace.clock is not None else "given table"),
        # (to the picosecond: the fit's last bits depend on the machine's BLAS, through np.polyfit)
        "clock_bound_ns": (round(float(trace.clock.max_rtt_ns / 2 + trace.clock.max_residual_ns), 3) if trace.clock is not None else None),
        "clock_bounds": trace.clock.bounds_text() if hasattr(trace.clock, "bounds_text") else None,
        "partial": trace.partial,
        # the traces' time 0 is origin_ns; they end here (what links are clamped to)
        "trace_end_ns": int(trace.column("end_ns").max()) - trace.origin_ns if trace.n_events else 0,
        "sampled_launches": [int(sample.size), n_launches],
        # left out as warm-up (not counted in ``launches``)
        "warmup_launches": [int(x) for x in warm.launches],
        "healthy": not worst,
        "verdict": _verdict(worst, top_info, ctx.kernel_time_ns, config),
    }
    # completed waits the pairing matched to no notify: those whose flag got no notify at all
    # before they ended, and those whose flag did (a counter fed by several notifies)
    # (an mbarrier's free pass, phase -1, is released by the barrier's initialisation: not one)
    local = is_local(trace.column("flags")[w["row"]])
    free = pairing.free_pass(local, w["expected"])
    unreleased = np.flatnonzero(~paired & ~w["timed_out"] & ~free)
    on_flag = stalls.latest_flag_notify(trace, unreleased) >= 0
    none, unmatched = unreleased[~on_flag], unreleased[on_flag]
    # mbarrier waits on a barrier none of whose releases the program recorded: the probe density
    # left that side out (a kernel's default density), not a release gone missing
    untraced = local[none]  # (only mbarrier waits are asked: most captures have none unreleased)
    untraced[untraced] = ~_barrier_released(trace, w, none[untraced])
    # flag waits whose sender's launch recorded no flag notify at all: a density that records
    # only the waits (the sender ran: its launch is in the capture), not a notify gone missing
    flag_untraced = ~local[none]
    flag_untraced[flag_untraced] = ~_sender_recorded(trace, w, none[flag_untraced])
    untraced_flags = none[flag_untraced]
    none, untraced = none[~untraced & ~flag_untraced], none[untraced]
    summary["waits_unreleased"] = int(none.size)
    summary["waits_release_untraced"] = int(untraced.size)
    summary["waits_unmatched"] = int(unmatched.size)
    if untraced.size or untraced_flags.size:
        # their time is the density's, not unexplained (the wait table's rows keep it as theirs)
        off = float(w["wait_ns"][np.r_[untraced, untraced_flags]].sum())
        summary["release_untraced_ns"] = off
        summary["unexplained_ns"] = max(0.0, summary["unexplained_ns"] - off)
    if untraced_flags.size:
        summary["waits_notify_untraced"] = int(untraced_flags.size)
        summary["notify_untraced_kernels"] = sorted({trace.kernels.get((int(r), int(ln)), "?") for r, ln in
                                                    zip(w["peer"][untraced_flags].tolist(), w["launch"][untraced_flags].tolist())})
    summary["claims"] = [{"kind": "without_notify", "agents": [], "values": {
        "waits": int(none.size),
        "events": _event_key(trace, w["row"][none]) if none.size <= MAX_CLAIM_SEGMENTS else None}}]
    if untraced.size:
        summary["claims"].append({"kind": "release_untraced", "agents": [], "values": {
            "waits": int(untraced.size),
            "events": _event_key(trace, w["row"][untraced]) if untraced.size <= MAX_CLAIM_SEGMENTS else None}})
    if untraced_flags.size:
        summary["claims"].append({"kind": "notify_untraced", "agents": [], "values": {
            "waits": int(untraced_flags.size),
            "events": _event_key(trace, w["row"][untraced_flags]) if untraced_flags.size <= MAX_CLAIM_SEGMENTS else None}})
    if unmatched.size:
        summary["claims"].append({"kind": "notify_on_flag", "agents": [], "values": {
            "waits": int(unmatched.size),
            "events": _event_key(trace, w["row"][unmatched]) if unmatched.size <= MAX_CLAIM_SEGMENTS else None}})
    tables = Tables(
        {"causes": cause_table, "wait_causes_by_rank": wc_totals, "waits": w, "stalls_by_rank": tot_rank,
         "workgroups": wg, "launch_timing": lt, "critical_path": path, "timeouts": to, "missing_notifies": missing,
         "silent_programs": silent, **({"lane_holdups": held} if trace.lanes else {})},
        {"stalls_by_peer": lambda: stalls.stall_totals(trace, "peer", w),
         "stalls_by_workgroup": lambda: stalls.stall_totals(trace, "workgroup", w),
         "stragglers": lambda: stalls.straggler_table(trace, "rank", w),
         "straggler_workgroups": lambda: stalls.straggler_table(trace, "workgroup", w),
         "notify_lateness": lambda: stalls.notify_lateness(trace, w),
         "imbalance": lambda: load.imbalance(trace, wg), "per_sm": lambda: load.per_sm(trace, wg),
         "overlap": (lambda: ov_sample) if sample.size == n_launches else (lambda: overlap.overlap(trace, config.classes)),
         "critical_path_summary": lambda: overlap.critical_path_summary(path),
         "outlier_workgroups": lambda: _outliers(wg)},
        # (the whole overlap table sweeps every launch: the document shows its first rows)
        {"overlap": lambda n: (int(lt.size), overlap.overlap(trace, config.classes, rows=n)),
         "stragglers": lambda n: _head_of(stalls.straggler_table(trace, "rank", w), n),
         "straggler_workgroups": lambda n: (_producers(trace, w), stalls.straggler_table(trace, "workgroup", w, head=n))})
    views = Tables({}, {"launch": lambda: _launch_view(trace, wg, w, findings), "heat": lambda: _heat_view(wg),
                        "wait_hist": lambda: _hist_view(w), "findings": lambda: finding_views(trace, w, wg, findings)})
    if progress:
        progress("done", len(steps), len(steps))
    return Report(source=trace.source, origin_ns=trace.origin_ns, summary=summary, findings=findings, tables=tables,
                  config=config, trace=trace, views=views)


def _outliers(wg):
    """The outlier workgroups, most work first."""
    over = wg[wg["outlier"]]
    return over[np.argsort(-over["work_ns"], kind="stable")]


def _focus_launch(trace: Trace, wg, findings: list) -> int | None:
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


def _launch_view(trace: Trace, wg, w, findings: list) -> dict:
    """One launch for the HTML plots: its workgroups, waits and (small grids) notifies, times in
    ns since the capture's first event."""
    ln = _focus_launch(trace, wg, findings)
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
    return _jsonable(out)


def _heat_view(wg) -> dict:
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
    return _jsonable(out)


def _hist_view(w) -> dict:
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
    return _jsonable({"edges": edges, "ranks": ranks})


def _verdict(worst: list, top_info, total: float, cfg: ReportConfig) -> str:
    """The report's first line: what is wrong, or plainly that nothing is."""
    if worst:
        f = worst[0]
        if f.severity == "error":
            return f"{len(worst)} problem{'s' if len(worst) != 1 else ''}, the first a hang (below)."
        return (f"{len(worst)} cause{'s' if len(worst) != 1 else ''} worth fixing; the first would save "
                f"{fmt_ns(f.cost_ns)} ({share_text(f.cost_ns, total)}).")
    limit = f"{100 * cfg.causes.min_share:.0f}%"
    if top_info is None:
        kinds = ", ".join(m.TITLE for m in causes.MODULES if m.KIND != "hang")
        return f"Nothing is wrong: no hang, and no root cause ({kinds}) found."
    return (f"Nothing is wrong: no hang, and no root cause would shorten the capture by {limit} or more of its kernel "
            f"time (the largest would save {fmt_ns(top_info.cost_ns)}, {share_text(top_info.cost_ns, total)}).")


def render_text(rep, *, max_findings: int = 10) -> str:
    """The terminal summary: the verdict, the findings (at most ``max_findings``) in plain words,
    then the headline numbers. Made from the report's data alone: a :class:`Report`, or its JSON
    document (``report_json``, parsed) give the same text."""
    if isinstance(rep, dict):
        s, findings = rep["summary"], rep["findings"]

        def rows(name):
            return ((rep.get("tables") or {}).get(name) or {}).get("rows") or []
    else:
        s = rep.summary
        findings = [{"severity": f.severity, "text": f.text, "start_ns": f.start_ns, "end_ns": f.end_ns}
                    for f in rep.findings]

        def rows(name):
            t = rep.tables.get(name) if name in rep.tables else None
            return _jsonable(table_to_records(t)) if t is not None and t.size else []
    lines = [f"ktrace report: {s['source']}", "", s.get("verdict", "")]
    if findings:
        lines.append("")
        lines.append("Findings (hangs first, then by the time they would save):")
        for i, f in enumerate(findings[:max_findings], 1):
            tag = {"error": "!!", "warning": " !", "info": "  "}[f["severity"]]
            where = (f" [+{fmt_ns(f['start_ns'])} .. +{fmt_ns(f['end_ns'])}]"
                     if f.get("start_ns") is not None and f.get("end_ns") is not None else "")
            lines.append(f"{tag} {i}. {f['text']}{where}")
        if len(findings) > max_findings:
            lines.append(f"   ... and {len(findings) - max_findings} more (see --json / --html)")
    lines += [
        "",
        f"Capture: {s['world_size']} ranks ({', '.join(map(str, s['ranks']))}), {count_text('launches', s['launches'])} of "
        f"{', '.join(s['kernels']) or '?'}"
        + (f" (and {len(s['warmup_launches'])} warm-up launch{'es' if len(s['warmup_launches']) != 1 else ''} left out)"
           if s.get("warmup_launches") else "")
        + f", {count_text('events', s['events'])}, {s['workgroups']:,} workgroups; "
        f"{kernel_time_text(s.get('kernel_time_ns'), s['launches'])}"
        + (" (PARTIAL)" if s["partial"] else ""),
        f"Clock: {s['clock']}" + (f", ranks aligned within ~{fmt_ns(s['clock_bound_ns'])}" if s.get("clock_bound_ns") else "")
        + (f" ({s['clock_bounds']})" if s.get("clock_bounds") else ""),
        f"Waits: {count_text('waits', s['waits'])}, {MEASURES['wait_ns'][0]} {fmt_ns(s['wait_ns'])} in total: producer late {fmt_ns(s['producer_late_ns'])}, "
        f"signal latency {fmt_ns(s['signal_latency_ns'])} (of which {fmt_ns(s.get('unexplained_ns'))} beyond the "
        f"calibrated link latency or with no captured notify: unexplained"
        + (f"; {fmt_ns(s['release_untraced_ns'])} in waits whose releases this probe density does not record"
           if s.get("release_untraced_ns") else "")
        + f"); {s['waits_unreleased']} completed waits without a captured notify"
        + (f" ({s['waits_release_untraced']} more on mbarriers whose releases this probe density does not record)"
           if s.get("waits_release_untraced") else "")
        + (f" ({s['waits_notify_untraced']} more on flags whose senders recorded no notify in that launch "
           f"({', '.join(printable(k) for k in s.get('notify_untraced_kernels') or ())}): a probe density that records "
           f"the waits only)" if s.get("waits_notify_untraced") else "")
        + (f", {s['waits_unmatched']} more not matched to one notify (notifies on their flag were captured: "
           f"released in the replay by the last before their end)" if s.get("waits_unmatched") else "")
        + f"; {s['timeouts']} timed out.",
    ]
    allw = [r for r in rows("wait_causes_by_rank") if r["rank"] == -1]
    if allw and (allw[0]["producer_late_ns"] or 0) > 0:
        a = allw[0]
        lines.append(
            f"Producers were late: not started {fmt_ns(a['late_not_started_ns'])}, waiting themselves "
            f"{fmt_ns(a['late_waiting_ns'])}, working in a region {fmt_ns(a['late_in_region_ns'])}, outside any "
            f"region {fmt_ns(a['late_outside_ns'])}, never signalled (waits that gave up) "
            f"{fmt_ns(a['late_missing_ns'])}" + (f" (on {s['sampled_launches'][0]:,} of {s['sampled_launches'][1]:,} "
                                                 f"launches)." if s['sampled_launches'][0] < s['sampled_launches'][1] else "."))
    tr = sorted(rows("stalls_by_rank"), key=lambda r: r["rank"])
    if tr:
        lines.append(f"{MEASURES['wait_ns'][0].capitalize()} per rank: " + ", ".join(
            f"r{r['rank']} {fmt_ns(r['wait_ns'])} ({100 * r['wait_frac']:.0f}% of program time)" if r.get("wait_frac") is not None
            else f"r{r['rank']} {fmt_ns(r['wait_ns'])}" for r in tr))
    lines.append("Times are relative to the capture's first event (time 0 of its Perfetto trace).")
    return "\n".join(lines)


def report_json(rep: Report) -> dict:
    """The report as JSON-ready data: summary, findings (with Perfetto links) and the tables
    (the first ``config.max_rows`` rows of each, biggest first; ``rows_total`` gives the count)."""
    heads = _table_heads(rep)
    tables = {}
    for name in rep.tables:
        size, t = heads[name]
        tables[name] = {"rows_total": size, "columns": list(t.dtype.names or ()), "rows": _jsonable(table_to_records(t))}
    return {"format": "ktrace-report", "version": 2, "source": rep.source, "origin_ns": rep.origin_ns,
            "trace_url": rep.config.trace_url, "summary": _jsonable(rep.summary),
            "views": {k: rep.views[k] for k in rep.views},
            "findings": findings_json(rep),
            "tables": tables}


def findings_json(rep: Report) -> list[dict]:
    """The report's findings as its JSON document holds them (:func:`report_json`'s ``findings``)."""
    return [f.to_dict(rep.config.trace_url, rep.summary.get("trace_end_ns"), rep.summary.get("ranks")) for f in rep.findings]


def _table_heads(rep: Report) -> dict:
    """Per table of a report, ``(rows, the first config.max_rows rows)``; the tables not made yet
    made by two threads at once (numpy works without the interpreter lock; they share what the
    trace has cached)."""
    n = rep.config.max_rows
    tables = rep.tables
    if not isinstance(tables, Tables) or rep.config.workers < 2:
        return {name: _head(tables, name, n) for name in tables}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        got = {name: pool.submit(_head, tables, name, n) for name in tables}
        return {name: f.result() for name, f in got.items()}


def _head_of(t, n: int) -> tuple[int, object]:
    return int(t.size), t[:n]


def _producers(trace: Trace, w) -> int:
    """Rows of the straggler table by workgroup: the workgroups whose notifies released a wait."""
    nr = w["notify_row"]
    nr = nr[nr >= 0]
    if nr.size == 0:
        return 0
    return int(np.count_nonzero(np.bincount(trace.wg[nr], minlength=trace.n_workgroups)))


def _head(tables, name: str, n: int) -> tuple[int, object]:
    if isinstance(tables, Tables):
        return tables.head(name, n)
    t = tables[name]
    return int(t.size), t[:n]


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
    # the report's quantities under the report's keys, [A, B]: one definition (ktrace.text.MEASURES)
    summary = {"a": ta.source, "b": tb.source, "launches": [causes.launch_total(t) for t in (ta, tb)],
               "events": [t.n_events for t in (ta, tb)],
               "kernel_time_ns": [causes.kernel_time_total(t) for t in (ta, tb)],
               "waits": [int(stalls.waits(t).size) for t in (ta, tb)],
               "wait_ns": [float(stalls.waits(t)["wait_ns"].sum()) for t in (ta, tb)]}
    if progress:
        progress("done", 3, 3)
    return DiffReport(a=ta.source, b=tb.source, findings=findings, tables=tables, summary=summary)


def render_diff_text(d: DiffReport, *, rows: int = 10) -> str:
    s = d.summary
    lines = [f"ktrace diff: A = {d.a}, B = {d.b}", "", diff_headline(s), ""]
    lines.append("Biggest movers:" if d.findings else "No differences.")
    for i, f in enumerate(d.findings, 1):
        lines.append(f"  {i}. {f.text}")
    r = d.tables["ranks"]
    if r.size:
        lines += ["", "Per rank (per launch; " + "; ".join(f"{k}: {v}" for k, v in _diff.RANK_MEASURES.items()) + "):"]
        for row in np.sort(r, order=["rank", "measure"]):
            lines.append(f"  rank {row['rank']} {row['measure']:>9}: {fmt_ns(row['a_ns']):>10} -> {fmt_ns(row['b_ns']):>10}")
    return "\n".join(lines)


def diff_json(d: DiffReport, max_rows: int = 200) -> dict:
    return {"format": "ktrace-diff", "version": 1, "a": d.a, "b": d.b, "summary": _jsonable(d.summary),
            "findings": [f.to_dict() for f in d.findings],
            "tables": {k: {"rows_total": int(t.size), "columns": list(t.dtype.names or ()),
                           "rows": _jsonable(table_to_records(t, max_rows))} for k, t in d.tables.items()}}
