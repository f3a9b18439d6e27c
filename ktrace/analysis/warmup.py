"""Warm-up launches: a capture's first launch of a kernel that ran cold, kept apart from the causes.

The first launch of a kernel in a capture runs with cold caches and first-touched memory (and,
at several ranks, often leaves its hosts at different times): on GPUs its producers took 1.7-2x
their later time. Everything such a launch shows is true and of no use to a kernel engineer, so
the report leaves it out of its findings and says so in one line; a cause that later launches
show too is still found in them.

Which launches (:func:`warmup_launches`):

- ``skip`` = N (``ktrace report --skip-warmup N``): the first N launches of each kernel; 0: none.
- ``skip`` = None (the default): the launches the capture marks as warm-up
  (``ktrace.capture(warmup=N)``); when it marks none, a kernel's first launch when no wait of it
  gave up (a hang is reported, never put aside) and it was slow: it lasted at least
  :data:`SLOWER` times the median of the kernel's later launches in which no wait gave up, or its
  median program (or lane) was busy that many times as long as the later launches' (the time it
  did not wait: what a launch after it that hung still shows; not those still running at a live
  dump, cut short).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schema import EventFlag, EventKind, is_timeout
from ..text import fmt_ns, ranges_text
from .causes.model import launch_makespans
from .document import Finding
from .trace import Trace

#: A kernel's first launch is warm-up when it lasted at least this many times its later launches' median.
SLOWER = 1.2


@dataclass(frozen=True)
class Warmup:
    """The launches a report leaves out as warm-up.

    Attributes:
        launches: their indices.
        how: ``"auto"`` (found slow), ``"marked"`` (the capture marks them) or ``"skip"``
            (``--skip-warmup N``).
        skip: N of ``--skip-warmup N`` (how == "skip").
        detail: per launch left out: ``(launch, kernel, measure, its value, the median of the
            kernel's later launches', those later launches)``; the measure is ``"duration"`` (ns)
            or ``"busy"`` (its median program's time not waiting, ns).
    """

    launches: tuple = ()
    how: str = "auto"
    skip: int = 0
    detail: tuple = ()


def _by_kernel(trace: Trace) -> dict[str, list[int]]:
    """Per kernel name, its launch indices in order (a launch's kernel: its lowest rank's name)."""
    first: dict[int, str] = {}
    for (r, ln), k in sorted(trace.kernels.items()):
        first.setdefault(int(ln), k)
    out: dict[str, list[int]] = {}
    for ln, k in sorted(first.items()):
        out.setdefault(k, []).append(ln)
    return out


def warmup_launches(trace: Trace, skip: int | None = None) -> Warmup:
    """The launches of ``trace`` to leave out as warm-up (see the module's docstring)."""
    kernels = _by_kernel(trace)
    lids, spans = launch_makespans(trace)
    span = dict(zip(lids.tolist(), spans.tolist()))
    if skip is not None:
        if skip < 0:
            raise ValueError(f"skip_warmup must be >= 0, got {skip}")
        drop = sorted(ln for ls in kernels.values() for ln in ls[:skip])
        return Warmup(tuple(drop), "skip", int(skip), tuple((ln, _kernel_of(kernels, ln), "duration", span.get(ln, 0),
                                                           float("nan"), ()) for ln in drop))
    if trace.warmup_marked:
        drop = sorted(trace.warmup_marked & set(span))
        return Warmup(tuple(drop), "marked", 0, tuple((ln, _kernel_of(kernels, ln), "duration", span.get(ln, 0),
                                                        float("nan"), ()) for ln in drop))
    wl, wf = trace.at(EventKind.WAIT, "launch"), trace.at(EventKind.WAIT, "flags")
    hung = set(np.unique(wl[is_timeout(wf)]).tolist())
    # (a launch still running at a live dump, its work cut short where the dump found it, is no
    # measure of a launch's work)
    open_ = set(np.unique(wl[(np.asarray(wf) & int(EventFlag.OPEN)) != 0]).tolist())
    busy = _busy_medians(trace)
    detail = []
    for k, ls in kernels.items():
        if len(ls) < 2 or ls[0] in hung or ls[0] not in span:
            continue
        later = [ln for ln in ls[1:] if ln not in hung and ln in span]
        med = float(np.median([span[ln] for ln in later])) if later else 0.0
        if med > 0 and span[ls[0]] >= SLOWER * med:
            detail.append((ls[0], k, "duration", float(span[ls[0]]), med, tuple(later)))
            continue
        later = [ln for ln in ls[1:] if ln in busy and ln not in open_]
        med = float(np.median([busy[ln] for ln in later])) if later else 0.0
        if med > 0 and busy.get(ls[0], 0.0) >= SLOWER * med:
            detail.append((ls[0], k, "busy", float(busy[ls[0]]), med, tuple(later)))
    return Warmup(tuple(sorted(d[0] for d in detail)), "auto", 0, tuple(detail))


def _busy_medians(trace: Trace) -> dict[int, float]:
    """Per launch, the median over its agents (programs, or lanes of them) of their time not
    waiting: their first event to their last, less their waits (what a hang elsewhere leaves alone)."""
    from ..keys import group_median
    from .stalls import workgroup_extent
    from .trace import lane_view

    v = lane_view(trace)
    if v.n_workgroups == 0:
        return {}
    ws, we = workgroup_extent(v)
    W = EventKind.WAIT
    waited = np.bincount(v.wg[trace.rows_of(W)], weights=(trace.at(W, "end_ns") - trace.at(W, "start_ns")).astype(np.float64),
                         minlength=v.n_workgroups)
    busy = np.maximum((we - ws) - waited, 0.0)
    lids, inv = np.unique(v.wg_keys[:, 1], return_inverse=True)
    med = group_median(inv.reshape(-1), busy, lids.size)
    return {int(l): float(m) for l, m in zip(lids.tolist(), med.tolist())}


def _kernel_of(kernels: dict, ln: int) -> str:
    return next((k for k, ls in kernels.items() if ln in ls), "?")


def warmup_finding(w: Warmup) -> list[Finding]:
    """The one line that says which launches were left out as warm-up, and why (none: nothing)."""
    if not w.launches:
        return []
    n = len(w.launches)
    which = f"launch{'es' if n != 1 else ''} {ranges_text(list(w.launches))}"
    if w.how == "skip":
        text = (f"warm-up: {which} left out of the findings (--skip-warmup {w.skip}: the first {w.skip} launch"
                f"{'es' if w.skip != 1 else ''} of each kernel).")
        claims = []
    elif w.how == "marked":
        text = f"warm-up: {which} left out of the findings (the capture marks {'them' if n != 1 else 'it'} as warm-up)."
        claims = []
    else:
        def part(ln, k, measure, v, med, later):
            one = len(later) == 1
            if measure == "duration":
                ref = "its later launch" if one else f"the median of its {len(later)} later launches"
                return f"launch {ln} of {k} lasted {fmt_ns(v)}, {v / med:.2f}x {ref} ({fmt_ns(med)})"
            ref = "that of its later launch" if one else f"the median of its {len(later)} later launches'"
            return f"the median program of launch {ln} of {k} was busy (not waiting) {fmt_ns(v)}, {v / med:.2f}x {ref} ({fmt_ns(med)})"

        parts = [part(*d) for d in w.detail]
        text = (f"warm-up: {'; '.join(parts)} (the first launch of a kernel runs with cold caches and first-touched "
                f"memory): left out of the findings; what later launches show is still found in them "
                f"(--skip-warmup 0 keeps {'it' if n == 1 else 'them'}).")
        claims = [{"kind": "warmup_slower", "agents": [],
                   "values": {"launch": int(ln), "measure": measure, "value_ns": float(v), "median_ns": float(med),
                              "later": [int(x) for x in later], "factor": SLOWER}}
                  for ln, k, measure, v, med, later in w.detail]
    return [Finding("warmup", "info", 0.0, text, (), data={"launches": list(w.launches), "how": w.how},
                    label="warm-up launches left out", claims=claims)]


__all__ = ["SLOWER", "Warmup", "warmup_finding", "warmup_launches"]
