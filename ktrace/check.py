"""``ktrace.verify``: the report's first prediction checked on the GPU, for user code and ``ktrace run --verify``.

::

    with ktrace.capture(heap=heap) as cap:
        for _ in range(20):
            step()
    rows = ktrace.verify(step, cap.to_capture())      # one rank: the capture as it is
    for r in rows:
        print(r["text"])     # "... predicted +4.1 µs, measured +4.0 µs per launch [...]"

The capture is analysed (``ktrace.analysis.report.build_report``); its first root cause that a
delay can be injected for gives the plan (``ktrace.analysis.verify.plan``: where, which sizes,
the replay's predictions); the step is then timed with each delay injected and without
(``ktrace.cost.measure_delays``), and each size gives one row (``ktrace.probe_cost.check_verify``:
what a capture keeps as ``meta["verify"]``). Over several ranks every rank calls it with the same
plan (:func:`plan_of` on the rank holding the merged capture, shared), and ``reduce`` takes the
slowest rank's time per call (``ktrace.cost.max_over_ranks``).
"""

from __future__ import annotations

from typing import Callable

from .analysis.verify import Plan, plan
from .cost import measure_delays
from .probe_cost import check_verify, verify_text, within_spread


def plan_of(source, sizes_ns=None) -> Plan | None:
    """The injection plan of a capture (anything ``build_report`` reads), or None when its report
    names no cause a delay can be injected for."""
    from .analysis.report import build_report

    return plan(build_report(source), sizes_ns)


def rows(p: Plan, measured: dict, device: str) -> list[dict]:
    """The ``verify`` rows of a plan and what :func:`ktrace.cost.measure_delays` measured (per
    launch: a step's time over its launches), each with whether the prediction holds."""
    per = max(int(measured.get("launches_per_step", 1)), 1)
    out = []
    for size, predicted in zip(p.sizes_ns, p.predicted_ns):
        added, lo, hi = measured[int(size)]
        out.append({"finding": p.finding[:200], "kind": p.kind, "site": p.site[:200], "where": p.where, "rank": int(p.rank),
                    "program": int(p.programs[0]) if len(p.programs) == 1 else -1, "programs": [int(x) for x in p.programs],
                    "delay_ns": int(size), "steps": int(measured["steps"]), "predicted_ns": float(predicted),
                    "measured_ns": added / per, "lo_ns": lo / per, "hi_ns": hi / per, "device": str(device)[:200]})
    return check_verify(out)


def verify(step: Callable[[], object], source, *, sizes_ns=None, n: int = 20, warmup: int = 2, around=None, after=None,
           reduce=None, device_name: str | None = None) -> list[dict]:
    """Check the report's first prediction on the GPU (see the module docstring).

    Args:
        step: launches one step of the traced kernels (the same work as in the capture).
        source: the capture (a ``Capture``, a path) or a ``Plan`` (several ranks: the same on each).
        sizes_ns: the delays (default: ``analysis.verify.default_sizes``).
        n, warmup, around, after, reduce: as ``ktrace.cost.timed_rounds``.

    Returns:
        One row per delay (``[]`` when the report names no cause a delay can be injected for),
        each with ``within`` (the prediction inside the measured interval, or within 10 %) and
        ``text`` (its sentence).
    """
    from .traced import require_torch

    p = source if isinstance(source, Plan) else plan_of(source, sizes_ns)
    if p is None:
        return []
    got = measure_delays(step, p.injection, p.sizes_ns, n, warmup=warmup, around=around, after=after, reduce=reduce)
    name = device_name or require_torch().cuda.get_device_name()
    return [dict(r, within=within_spread(r), text=verify_text(r)) for r in rows(p, got, name)]


__all__ = ["plan_of", "rows", "verify"]
