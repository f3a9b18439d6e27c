"""One clock for all ranks: the clock model, aligned event tables and the causality check.

GPU timers of one host disagree by tens of microseconds to over a millisecond and drift apart
by up to ~11 ppm. ``ktrace.clock.calibrate`` (device side, needs torch) measures each rank
against a reference rank with a flag ping-pong, before and after the traced work, and reads a
host anchor; :func:`fit_clock` turns those samples into a :class:`ClockModel` whose per-rank maps
(:meth:`RankClock.to_common`) put every event on one nanosecond clock anchored to host
wall-clock time (``ktrace.events`` applies them). Between nodes, ranks are reached by a chain of
:class:`Leg` fits through their host clocks (``ktrace.clock.paths`` says who takes which path).
:func:`check_causality` counts the waits that appear to end before the notify that released them
(``ktrace.pairing``) began, beyond the two ranks' bounds.

This package (except ``calibrate``) needs only numpy: a saved capture can be aligned anywhere.
"""

from .causality import CausalityReport, check_causality
from .model import (
    ALIGNED_DTYPE,
    ClockModel,
    Leg,
    RankClock,
    attach_clock,
    clock_model_of,
    fit_anchor_leg,
    fit_clock,
    fit_host_anchor,
    fit_pingpong,
    ticks_to_ns,
)

__all__ = [
    "ALIGNED_DTYPE",
    "CausalityReport",
    "ClockModel",
    "Leg",
    "RankClock",
    "attach_clock",
    "check_causality",
    "clock_model_of",
    "fit_anchor_leg",
    "fit_clock",
    "fit_host_anchor",
    "fit_pingpong",
    "ticks_to_ns",
]
