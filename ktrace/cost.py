"""Measured on the GPU beside a capture: what the probes cost a step, and what injected delays do.

``ktrace.measure_cost(step, n=50)`` times the user's ``step`` (a function that launches the
kernels of one step) alternately traced and untraced: round ``i`` runs both, the first of them
alternating, after ``warmup`` rounds of each that are not timed. Tracing is toggled per call: the
traced calls run inside a capture of its own (its buffers allocated once and reused: nothing is
kept), the untraced ones with that capture suspended (``session.suspended``): the kernel as
written, exactly as with no capture open. Each call is timed by CUDA events around it on the
current stream, with the device held by a sleep kernel queued before it until the host has queued
the whole step (so host overhead is not timed) or by the caller's ``around`` (``ktrace run``: its
device-side launch barrier). The figures (``ktrace.probe_cost.cost_figures``: the ratio of the
medians and its 95 % paired-bootstrap interval) go into a capture as ``probe_cost``
(``ktrace.capture(probe_cost=...)``, or ``capture.meta["probe_cost"] = cost.to_meta()``).

:func:`measure_delays` does the same for delays injected by the probes (``ktrace.inject``): one
capture with injection compiled in, its table set per call (no recompilation), each size against
the zero delay in the same rounds. ``ktrace.check.verify`` compares them with the report's
prediction.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import session as _session
from .probe_cost import cost_figures, cost_text, difference_interval
from .traced import require_torch

log = logging.getLogger("ktrace")

#: Longest the device is held before a timed call (clock cycles of ``torch.cuda._sleep``).
MAX_HOLD_CYCLES = 400_000_000
#: Cycles per ns assumed when sizing the hold (a little above the fastest GPU clocks: longer is safe).
_CYCLES_PER_NS = 2.2


@dataclass(frozen=True)
class ProbeCost:
    """What :func:`measure_cost` measured: ``figures`` as a capture keeps them (``probe_cost``)."""

    figures: dict
    traced_ns: np.ndarray
    untraced_ns: np.ndarray

    @property
    def ratio(self) -> float:
        return float(self.figures["ratio"])

    def to_meta(self) -> dict:
        return dict(self.figures)

    def __str__(self) -> str:
        return cost_text(self.figures)


def _hold_for(host_ns: float):
    """A context that queues a sleep kernel long enough for the host to queue a step that took
    it ``host_ns`` to queue (twice that, and at least 50 µs)."""
    torch = require_torch()
    cycles = int(min(MAX_HOLD_CYCLES, max(50_000.0, 2.0 * host_ns) * _CYCLES_PER_NS))

    @contextlib.contextmanager
    def hold():
        torch.cuda._sleep(cycles)
        yield

    return hold


def timed_rounds(step: Callable[[], object], variants: list, n: int, *, warmup: int = 3, around=None,
                 after: Callable[[], object] | None = None, reduce: Callable[[np.ndarray], np.ndarray] | None = None,
                 each_round: Callable[[], object] | None = None) -> np.ndarray:
    """Time ``step`` under each of ``variants`` (context factories), interleaved.

    Args:
        step: launches one step's kernels on the current stream.
        variants: context factories; call ``k`` of round ``i`` runs variant ``(i + k) % len``.
        n: rounds timed (after ``warmup`` rounds that are not).
        around: a context factory entered around each timed call, its CUDA events inside (default:
            a sleep kernel that holds the device until the host has queued the call).
        after: called after each call, outside the timing (a barrier between steps).
        reduce: applied to the ``(n, len(variants))`` times of this process before they are
            returned (several ranks: the slowest rank's time per call, gathered).
        each_round: called after each round (and after the warm-up), the device done with it.

    Returns:
        ns per call, ``(n, len(variants))``, in the variants' order.
    """
    torch = require_torch()
    if n < 2 or not variants:
        raise ValueError(f"timing needs at least 2 rounds and one variant, got {n} and {len(variants)}")
    k = len(variants)
    host = []
    for _ in range(max(warmup, 1)):
        for v in variants:
            with v():
                t0 = time.perf_counter_ns()
                step()
                host.append(time.perf_counter_ns() - t0)
            if after is not None:
                after()
    torch.cuda.synchronize()
    if each_round is not None:
        each_round()
    hold = around if around is not None else _hold_for(float(np.max(host)))
    out = np.zeros((n, k))
    for i in range(n):
        ev = []
        for j in range(k):
            vi = (i + j) % k
            with variants[vi]():
                with hold():
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    step()
                    b.record()
            ev.append((vi, a, b))
            if after is not None:
                after()
        torch.cuda.synchronize()
        for vi, a, b in ev:
            out[i, vi] = a.elapsed_time(b) * 1e6
        if each_round is not None:
            each_round()
    return reduce(out) if reduce is not None else out


@contextlib.contextmanager
def _timing_capture(**kwargs):
    """A capture the traced calls run in: its buffers handed out again every round (nothing is
    kept), closed without copying anything home."""
    s = _session.Session(**kwargs)
    with s:
        try:
            yield s
        finally:
            s.reuse_buffers()


def _counted(s, launches: list, before: Callable[[], object] | None = None):
    """A variant for :func:`timed_rounds`: each call in it appends to ``launches`` how many
    launches the capture ``s`` recorded (after ``before()``, which sets the variant up)."""
    @contextlib.contextmanager
    def variant():
        if before is not None:
            before()
        n0 = len(s.launches)
        yield
        launches.append(len(s.launches) - n0)

    return variant


def _per_step(launches: list) -> int:
    """The traced launches one step makes: the median over the calls counted (at least 1)."""
    return max(1, int(np.median(launches))) if launches else 1


def measure_cost(step: Callable[[], object], n: int = 50, *, warmup: int = 3, around=None, after=None, reduce=None,
                 device_name: str | None = None) -> ProbeCost:
    """Time ``step`` traced and untraced, alternately (see the module docstring).

    Args:
        step: launches one step of the kernels to measure (the same work at every call).
        n: timed calls of each (after ``warmup`` of each).
        around, after, reduce: as :func:`timed_rounds`.
        device_name: the device named in the figures (default: the current CUDA device's name).

    Returns:
        A :class:`ProbeCost`; ``str()`` of it is the sentence reports print.
    """
    torch = require_torch()
    launches = []
    with _timing_capture() as s:
        t = timed_rounds(step, [_counted(s, launches), _session.suspended], n, warmup=warmup, around=around, after=after,
                         reduce=reduce, each_round=s.reuse_buffers)
    per_step = _per_step(launches)
    if not any(launches):
        log.warning("ktrace: measure_cost: the step launched no traced kernel (is it decorated with @ktrace.trace?)")
    name = device_name or torch.cuda.get_device_name()
    return ProbeCost(cost_figures(t[:, 0], t[:, 1], device=name, launches_per_step=per_step), t[:, 0], t[:, 1])


def measure_delays(step: Callable[[], object], injection_of: Callable[[int], object], sizes_ns, n: int = 20, *,
                   warmup: int = 2, around=None, after=None, reduce=None) -> dict:
    """Time ``step`` traced with each delay of ``sizes_ns`` injected and with none, interleaved.

    Args:
        injection_of: size (ns) -> the ``ktrace.inject.Injection`` of that size (0: the baseline,
            the same rows with no delay: the same binary).
        sizes_ns: the delays (ns).
        n, warmup, around, after, reduce: as :func:`timed_rounds`.

    Returns:
        ``{size: (added_ns, lo_ns, hi_ns)}``: the medians' difference with and without the delay,
        per step, and its 95 % paired-bootstrap interval; and ``"launches_per_step"``.
    """
    sizes = [0] + [int(x) for x in sizes_ns]
    launches = []
    with _timing_capture(inject=injection_of(0)) as s:
        def inject(size):
            return lambda: setattr(s, "inject", injection_of(size))

        t = timed_rounds(step, [_counted(s, launches, inject(x)) for x in sizes], n, warmup=warmup, around=around,
                         after=after, reduce=reduce, each_round=s.reuse_buffers)
    out: dict = {x: difference_interval(t[:, j], t[:, 0]) for j, x in enumerate(sizes) if j}
    out["launches_per_step"] = _per_step(launches)
    out["steps"] = int(n)
    return out


def max_over_ranks(gather: Callable[[object], list]) -> Callable[[np.ndarray], np.ndarray]:
    """A ``reduce`` for several ranks: each call's time is the slowest rank's (``gather``: an
    all-gather of a picklable object, such as ``SymmetricHeap.all_gather_object``)."""
    return lambda t: np.max(np.stack([np.asarray(x) for x in gather(t)]), axis=0)


__all__ = ["ProbeCost", "max_over_ranks", "measure_cost", "measure_delays", "timed_rounds"]
