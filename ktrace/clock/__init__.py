"""One clock for all ranks: the clock model, aligned event tables and the causality check.

GPU timers of one host disagree by tens of microseconds to over a millisecond and drift apart
by up to ~11 ppm. ``ktrace.clock.calibrate`` (device side, needs torch) measures each rank
against a reference rank with a flag ping-pong, before and after the traced work, and reads a
host anchor; :func:`fit_clock` turns those samples into a :class:`ClockModel`, and
:func:`aligned_events` puts every event on one nanosecond clock anchored to host wall-clock
time. :func:`check_causality` pairs each notify with the wait it released and counts waits
that appear to end before their notify began.

This package (except ``calibrate``) needs only numpy: a saved capture can be aligned anywhere.
"""

from .causality import CausalityReport, check_causality, pair_notify_wait
from .model import (
    ALIGNED_DTYPE,
    ClockModel,
    RankClock,
    aligned_events,
    clock_model_of,
    fit_clock,
    fit_host_anchor,
    fit_pingpong,
    iter_aligned,
    resolve_tick_hz,
    ticks_to_ns,
)

__all__ = [
    "ALIGNED_DTYPE",
    "CausalityReport",
    "ClockModel",
    "RankClock",
    "aligned_events",
    "check_causality",
    "clock_model_of",
    "fit_clock",
    "fit_host_anchor",
    "fit_pingpong",
    "iter_aligned",
    "pair_notify_wait",
    "resolve_tick_hz",
    "ticks_to_ns",
]
