"""The findings of a report, in plain words: each root cause in its kind's words
(``causes.registry``), deadlocks, partitions that held the others up, the critical path, exposed
communication and the capture's own limits. Each finding carries the claims its text makes
(``document.Claim``: ``tests/analysis/test_claims.py`` checks them against the raw events).

These functions compute from the trace and the analyses' tables; ``report.build_report`` calls
them and sorts what they find; ``ktrace.analysis.assemble`` writes the rest of the document.
Their ``cfg`` is a ``report.ReportConfig``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import causes, lanes, stalls
from . import timeline as _path
from ..keys import group_index
from ..text import fmt_ns
from .document import Claim, Finding
from .trace import Trace, has_lanes


def _rel(trace: Trace, t) -> int:
    return int(t) - trace.origin_ns



def _severity(c: causes.Cause, total: float, cfg) -> str:
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


def cause_findings(ctx: causes.Context, found: list, cfg) -> list[Finding]:
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
                           label=desc.label, claims=list(desc.claims)))
    return out


def deadlock_findings(cycles: list[list[int]]) -> list[Finding]:
    out = []
    for c in cycles:
        if len(c) > 1:
            chain = " -> ".join(f"rank {r}" for r in c + [c[0]])
            out.append(Finding("hang", "error", 0.0, f"DEADLOCK: {chain}: each waited for a notify the next never sent.",
                               tuple(c), data={"cycle": c}))
    return out


def overlap_findings(trace: Trace, ov: np.ndarray, sampled: int, n_launches: int) -> list[Finding]:
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
    claims = [Claim("exposed_communication", [[int(r), -1, -1, 0]],
                    {"launches": launches, "exposed_ns": float(e), "extent_ns": float(k)})
              for r, e, k, s_ in zip(keys.tolist(), exp.tolist(), kern.tolist(), sig.tolist()) if s_]
    return [Finding("overlap", "info", float(exp[sig].sum()),
                    f"communication exposed (no compute running on the rank to hide it; the share is of the rank's extent, "
                    f"its first event to its last): {parts}{on}.",
                    tuple(int(r) for r in keys[sig]), data={"exposed_ns": exp[sig].tolist(), "ranks": keys[sig].tolist()},
                    label="exposed communication", claims=claims)]


#: Run segments a critical-path claim lists (beyond this the claim keeps its totals only).
MAX_CLAIM_SEGMENTS = 2000


def event_key(trace: Trace, rows: np.ndarray) -> list[list[int]]:
    """Events named the way a reader of the raw capture finds them: (rank, launch, program, k), the
    k-th event its program recorded (in slot order; the trace's own columns, not the full table)."""
    from .spans import workgroup_starts

    rows = np.asarray(rows, np.int64)
    k = rows - workgroup_starts(trace)[trace.wg[rows]]
    return [[int(a), int(b), int(c), int(d)] for a, b, c, d in zip(
        trace.column("rank")[rows].tolist(), trace.column("launch")[rows].tolist(),
        trace.column("program")[rows].tolist(), k.tolist())]


def path_findings(trace: Trace, path: np.ndarray, w) -> list[Finding]:
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
                claims.append(Claim(kinds[what], [],
                                    {"launches": ls.size, "of": L,
                                     "handoffs": [[wk, nk] for wk, nk in zip(event_key(trace, wrow[first]),
                                                                              event_key(trace, nrow[first]))]}))
    if not parts:
        # (the walk follows only waits whose notify came after they began: the program that ended
        # each launch last had none; it may have waited, on notifies already sent)
        ends = path[path["kind"] == "run"]
        ends = ends[np.unique(ends["launch"], return_index=True)[1]] if ends.size else ends
        parts.append(f"no hand-off on it in {'any of the' if L != 1 else 'the'} {L:,} launch{'es' if L != 1 else ''}: "
                     f"the program that ended {'each' if L != 1 else 'it'} last waited on no notify sent after its wait began")
        claims.append(Claim("no_late_handoff", [[int(r), int(l), int(p), int(ln)] for r, l, p, ln in zip(
            ends["rank"].tolist(), ends["launch"].tolist(), ends["program"].tolist(), ends["lane"].tolist())][:MAX_CLAIM_SEGMENTS],
            {"launches": L}))
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
    claims.append(Claim("holds_path", [[top_r, -1, top_a, top_lane]], {"rank_share": r_share, "program_share": a_share}))
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
        claims.append(Claim("region_share", [[top_r, -1, -1, 0]],
                            {"region": reg, "share": share, "run_ns": float(ns.sum()), "segments": seg}))
    text += "."
    return [Finding("critical_path", "info", 0.0, text, tuple(int(r) for r in rk),
                    data={"launches_crossing": int(sum(c.values["launches"] for c in claims if c.kind == "crosses_ranks")),
                          "share": {int(k): v / max(tot, 1) for k, v in zip(rk.tolist(), per_rank.tolist())},
                          "top_rank": top_r, "top_program": top_a, "top_region": reg},
                    label="critical path", claims=claims)]


def capture_findings(trace: Trace, silent: np.ndarray, hang_launches: set) -> list[Finding]:
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
        claims = [Claim("silent_programs", [[int(r), int(l), -1, 0]], {"n_programs": int(n), "n_silent": int(k)})
                  for r, l, n, k in zip(silent["rank"].tolist(), silent["launch"].tolist(), silent["n_programs"].tolist(),
                                        silent["n_silent"].tolist())][:MAX_CLAIM_SEGMENTS]
        out.append(Finding("capture", "info", 0.0, text, tuple(sorted(set(silent["rank"].tolist()))),
                           data={"n": int(silent.size), "in_hang": int(in_hang.sum())}, label="programs that recorded nothing",
                           claims=claims))
    return out


def lane_findings(trace: Trace, held: np.ndarray, cfg) -> list[Finding]:
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
        claims = [Claim("lane_holdup", [[r, ln, int(row["worst_program"]), lane]],
                        {"worst_ns": float(row["worst_ns"]), "waiter_lane": int(row["waiter_lane"]),
                         "waiter_ns": float(row["waiter_ns"]), "barrier": int(row["barrier"]),
                         "waiter_work_ns": worked, "idle": bool(idle)})]
        out.append(Finding("lane_holdup", "warning" if warn else "info", float(row["worst_ns"]), text, (r,), lo, hi,
                           data={"lane": lane, "partition": name, "launch": ln, "program": int(row["worst_program"]),
                                 "held_ns": float(row["held_ns"]), "worst_ns": float(row["worst_ns"]),
                                 "waiter": waiter, "waiter_ns": float(row["waiter_ns"]), "waiter_work_ns": worked},
                           label=f"{name} held up the others", claims=claims))
    return out

