"""What a delay injected at a finding's culprit should do: the replay's prediction, to check on the GPU.

A report prices each root cause by replaying the capture without it (``causes.model.replay``).
The same replay answers the opposite question: how much longer would each launch be with *more*
of it? That is what a GPU can check for real (``ktrace.verify``): the probes inject a set delay
at the same place (``ktrace.inject``) and the kernel is timed with and without it.

:func:`plan` turns the report's first root cause into the delays to inject, at its culprit:

=================  ===========================================================================
cause              injected
=================  ===========================================================================
``late_notifies``  before each of its held-back notifies (their call site, its programs)
``straggler``      in the region of its slow rounds' work (``kl.begin``), else before its notifies
``uneven_work``    in its heavy region, else at its programs' start
``uneven_ranks``   in its heavy region on the heavy rank, else at the rank's start
``late_launch``    at the late rank's start (every program)
``late_start``     at its late programs' start
=================  ===========================================================================

(a hang or a slow link has no delay to add at one agent: not planned). A delay named for more
programs than a launch's table holds rows (``schema.INJECT_ROWS``) is set for every program of
the rank, and predicted so.

:func:`predict` replays the capture with the delay: before a notify, it is added right before it
(``Changes.hold``, negative); at a program's start, the program starts that much later
(``Changes.shift``, negative); after a span starts, it lengthens the stretch up to the
program's next notify or wait (``Changes.hold`` of that notify, or ``Changes.added_gap`` of that
wait, or its tail). The prediction is what the delay adds per launch as a GPU measures it: a
step's added time over the step's launches (each step runs the capture's kernels, some of them
untouched). So each kernel's launches count by that kernel's share of the capture's launches,
those left out as warm-up too (:func:`launch_weights`); a plain mean over the launches analysed
would be short whenever warm-up left a kernel out once: a capture of 4 steps of (dispatch,
combine) whose first dispatch is warm-up holds 3 dispatches in 7 launches, where a step holds 1
in 2 (3/7 of a delay in the dispatch against 1/2: 11-14 % short of an H200's measurement). A kernel none
of whose launches is analysed counts as untouched.

Accuracy, on GENERATED captures where the answer is known by construction
(``tests/analysis/test_verify_prediction.py``): when the capture holds the cause (its waits on the
culprit already late) the prediction is the simulated one; a delay that makes waits late that
were not is priced with the pair of ranks' typical signal latency, which a capture of a healthy
kernel may not measure well. The replay keeps each program's SM free for it (no contention): a
delay at the start of every program of a launch that runs in several waves delays each wave on
the GPU, once in the replay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..inject import LAUNCH, Delay, Injection
from ..schema import INJECT_ROWS, EventKind
from .causes.model import Changes, replay, replay_model
from .trace import Trace

#: The cause kinds a delay can be injected for.
PLANNED = ("late_notifies", "straggler", "uneven_work", "uneven_ranks", "late_launch", "late_start")


@dataclass(frozen=True)
class Plan:
    """Where to inject for one finding, and what the replay predicts.

    Attributes:
        finding: the finding's label.
        kind: its cause's kind.
        site: ``"launch"``, a region name (in its span) or a notify's name (before it).
        where: ``"notify"``, ``"region"`` or ``"launch"``.
        rank: the rank injected into.
        programs: the programs injected into (() for every program of the rank).
        sizes_ns: the delays planned.
        predicted_ns: per size, the predicted increase of each launch's duration (ns).
    """

    finding: str
    kind: str
    site: str
    where: str
    rank: int
    programs: tuple
    sizes_ns: tuple
    predicted_ns: tuple

    def injection(self, ns: int) -> Injection:
        """The delays of one size (``ktrace.inject``)."""
        progs = self.programs or (-1,)
        return Injection(tuple(Delay(rank=self.rank, site=self.site, ns=int(ns), program=int(p)) for p in progs))

    def to_dict(self) -> dict:
        return {"finding": self.finding, "kind": self.kind, "site": self.site, "where": self.where, "rank": self.rank,
                "programs": list(self.programs), "sizes_ns": list(self.sizes_ns), "predicted_ns": list(self.predicted_ns)}

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        return cls(d["finding"], d["kind"], d["site"], d["where"], int(d["rank"]), tuple(d["programs"]),
                   tuple(d["sizes_ns"]), tuple(d["predicted_ns"]))


def _programs(progs) -> tuple:
    progs = tuple(sorted({int(p) for p in progs or ()}))
    return progs if 0 < len(progs) <= INJECT_ROWS else ()


def target(data: dict, trace: Trace) -> tuple[str, str, int, tuple] | None:
    """``(where, site, rank, programs)`` to inject for a root cause's finding data (a finding's
    ``data``: its kind, rank and detail), or None when its kind has none."""
    kind, rank = data.get("kind"), int(data.get("rank", -1))
    if kind not in PLANNED:
        return None
    if rank < 0:
        heavy = data.get("heavy") or data.get("ranks") or ()
        if not heavy:
            return None
        rank = int(heavy[0])
    if kind in ("late_notifies", "straggler"):
        progs = _programs(data.get("programs"))
        if kind == "straggler" and data.get("work_region"):
            return "region", str(data["work_region"]), rank, progs
        return "notify", trace.region_name(int(data["region_id"])), rank, progs
    if kind == "uneven_work":
        by_rank = data.get("programs") or {}
        progs = _programs(by_rank.get(rank, by_rank.get(str(rank), ())) if isinstance(by_rank, dict) else by_rank)
        return ("region", str(data["region"]), rank, progs) if data.get("region") else ("launch", LAUNCH, rank, progs)
    if kind == "uneven_ranks":
        return ("region", str(data["region"]), rank, ()) if data.get("region") else ("launch", LAUNCH, rank, ())
    if kind == "late_start":
        return "launch", LAUNCH, rank, _programs(data.get("programs"))
    return "launch", LAUNCH, rank, ()  # late_launch


def _next_event(g_sorted, t_sorted, g, t) -> np.ndarray:
    """Per query ``(g, t)``: the index into the sorted ``(g_sorted, t_sorted)`` of the first
    entry of workgroup ``g`` at or after ``t``, else -1."""
    if g_sorted.size == 0 or g.size == 0:
        return np.full(g.size, -1, np.int64)
    shift = max(int(max(t_sorted.max(), t.max())) + 1, 1).bit_length()
    if shift + int(max(g_sorted.max(), g.max()) + 1).bit_length() > 62:
        raise ValueError("the capture spans too long a time to place injected delays")
    k = np.searchsorted((g_sorted.astype(np.int64) << shift) | t_sorted, (g.astype(np.int64) << shift) | t)
    kc = np.minimum(k, g_sorted.size - 1)
    return np.where((k < g_sorted.size) & (g_sorted[kc] == g), kc, -1)


def changes(trace: Trace, m, where: str, site: str, rank: int, programs: tuple, ns: float) -> Changes:
    """The replay's changes for a delay of ``ns`` at ``site`` of ``rank``'s ``programs`` (all when
    empty), on the model ``m`` of the trace's launches."""
    keys = trace.wg_keys[m.wg_id]  # (rank, launch, program) per model workgroup
    sel = keys[:, 0] == rank
    if programs:
        sel &= np.isin(keys[:, 2], np.asarray(programs, np.int64))
    nwg, nn, nw = m.wg_base.size, m.n_wg.size, m.n_waits
    if where == "launch":
        return Changes(shift=np.where(sel, -float(ns), 0.0))
    rid = _region_id(trace, site)
    hold = np.zeros(nn)
    if where == "notify":
        if nn and rid is not None:
            hit = sel[m.n_wg] & (trace.column("region")[m.n_row] == rid)
            hold[hit] = -float(ns)
        return Changes(hold=hold)
    # in a region: each span of it starts a delay, which lengthens the stretch up to its program's
    # next notify or wait (or its end)
    origin = trace.origin_ns
    inv = np.full(trace.n_workgroups, -1, np.int64)
    inv[m.wg_id] = np.arange(nwg)
    spans = trace.rows_of(EventKind.SPAN)
    spans = spans[trace.column("region")[spans] == rid] if rid is not None else spans[:0]
    sg = inv[trace.wg[spans]]
    keep = sg >= 0
    keep[keep] = sel[sg[keep]]
    sg, st = sg[keep], trace.column("start_ns")[spans[keep]] - origin
    w_at = _next_event(m.w_wg, m.w_start, sg, st)
    n_t = trace.column("start_ns")[m.n_row] - origin if nn else np.zeros(0, np.int64)
    n_ord = np.lexsort((n_t, m.n_wg)) if nn else np.zeros(0, np.int64)
    n_at = _next_event(m.n_wg[n_ord], n_t[n_ord], sg, st)
    if nn:  # (a launch with no notify, or no wait, has nothing to index: each is then never used)
        n_at = np.where(n_at >= 0, n_ord[np.maximum(n_at, 0)], -1)
    n_first = n_t[np.maximum(n_at, 0)] if nn else np.zeros(n_at.size, np.int64)
    w_first = m.w_start[np.maximum(w_at, 0)] if nw else np.zeros(w_at.size, np.int64)
    use_n = (n_at >= 0) & ((w_at < 0) | (n_first <= w_first))
    use_w = ~use_n & (w_at >= 0)
    tail = ~use_n & ~use_w
    np.add.at(hold, n_at[use_n], -float(ns))
    gap = np.zeros(nw)
    np.add.at(gap, w_at[use_w], float(ns))
    tl_ = np.zeros(nwg)
    np.add.at(tl_, sg[tail], float(ns))
    return Changes(hold=hold, added_gap=gap, added_tail=tl_)


def _region_id(trace: Trace, name: str) -> int | None:
    for rid, n in trace.regions.items():
        if n == name:
            return int(rid)
    return None


def _kernel_by_launch(kernels: dict) -> dict:
    """Launch index -> its kernel's name (its lowest rank's) of a ``(rank, launch) -> name`` map."""
    out: dict = {}
    for (_, ln), k in sorted(kernels.items()):
        out.setdefault(int(ln), k)
    return out


def launch_weights(trace: Trace, launch_ids) -> np.ndarray:
    """Per launch of ``launch_ids`` (launches of the trace), its weight in the added time per
    launch of a step: its kernel's share of the capture's launches (those the trace left out,
    ``Trace.left_out``, too), shared evenly by that kernel's launches in ``launch_ids``. The
    weights sum to the share of the capture's launches whose kernel is among them (1 when every
    kernel is); with one kernel, or equal counts, each launch weighs alike (a mean)."""
    ids = np.asarray(launch_ids, np.int64)
    if ids.size == 0:
        return np.zeros(0)
    kept = _kernel_by_launch(trace.kernels)
    names = np.array([kept.get(int(ln), "") for ln in ids.tolist()], dtype=object)
    uniq, inv, n_here = np.unique(names, return_inverse=True, return_counts=True)
    n_all: dict = {}
    for k in {**_kernel_by_launch(trace.left_out), **kept}.values():
        n_all[k] = n_all.get(k, 0) + 1
    # (a launch of no known kernel counts as its own; a kernel only left out, as untouched)
    mine = np.array([max(n_all.get(k, 0), int(c)) for k, c in zip(uniq.tolist(), n_here.tolist())], np.float64)
    total = mine.sum() + sum(c for k, c in n_all.items() if k not in set(uniq.tolist()))
    return (mine / n_here / total)[inv.reshape(-1)]


def predict(trace: Trace, where: str, site: str, rank: int, programs: tuple, sizes_ns) -> tuple[float, ...]:
    """Per size, how much longer the replay makes a launch with that delay injected (ns): per
    launch, the replayed duration with it less that without, weighed by :func:`launch_weights`
    (the added time of a step of the capture's kernels over its launches)."""
    m = replay_model(trace)
    base = replay(m).makespan
    w = launch_weights(trace, m.launch_ids)
    out = []
    for ns in sizes_ns:
        got = replay(m, changes(trace, m, where, site, rank, programs, ns)).makespan
        out.append(float(np.dot(w, got - base)) if base.size else 0.0)
    return tuple(out)


def default_sizes(report) -> tuple[int, ...]:
    """Delays to inject: a tenth, a fifth and two fifths of a launch's mean duration (at least 2,
    4 and 8 µs: well above the timer's step and a timing's jitter), to 100 ns."""
    s = report.summary
    per = float(s.get("kernel_time_ns") or 0) / max(int(s.get("launches") or 1), 1)
    return tuple(int(round(max(k * 2_000, 0.1 * k * per) / 100) * 100) for k in (1, 2, 4))


def plan(report, sizes_ns=None) -> Plan | None:
    """The injection plan of a report's first root cause that a delay can be injected for, with
    the replay's predictions (None when it has none); ``sizes_ns`` default: :func:`default_sizes`."""
    if sizes_ns is None:
        sizes_ns = default_sizes(report)
    f = next((f for f in report.findings if f.kind in PLANNED), None)
    if f is None:
        return None
    t = target(f.data, report.trace)
    if t is None:
        return None
    where, site, rank, progs = t
    sizes = tuple(int(s) for s in sizes_ns)
    return Plan(f.label or f.kind, f.kind, site, where, rank, progs, sizes,
                predict(report.trace, where, site, rank, progs, sizes))


__all__ = ["PLANNED", "Plan", "changes", "default_sizes", "launch_weights", "plan", "predict", "target"]
