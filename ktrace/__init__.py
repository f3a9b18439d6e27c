"""ktrace: intra-kernel tracing and profiling for multi-GPU Triton kernels.

Host API (importing ``ktrace`` has no side effects and does not import torch or triton; the
names below that need them import them on first use):

- :func:`trace` — decorator around a ``@triton.jit`` kernel.
- :func:`capture` — context manager that switches tracing on and collects launches
  (``flight_recorder=True`` or a :class:`FlightConfig`: ring mode, live dumps; docs/flight.md).
- :func:`read_capture`, :func:`write_capture`, :func:`merge_captures` — capture files (``ktrace.captures``).
- :func:`write_trace` — a Perfetto or Chrome JSON trace of a capture (``ktrace.export``).
- :func:`decode_buffer`, :func:`pair_table` — one launch's buffer as events; which notify released
  which wait in a table of events (``ktrace.pairing``, the one rule).
- ``capture(auto=True)``, :func:`declare`, :func:`map_heap` — kernels traced without edits, their
  own signalling paired across ranks (``ktrace.auto``, docs/byok.md); ``ktrace record`` from outside.
- :func:`measure_cost` — a step timed traced and untraced, interleaved: the probes' cost, kept in
  a capture (``capture(probe_cost=...)``); :func:`verify` — the report's first prediction checked
  by delays the probes inject (:class:`Injection`, :class:`Delay`; docs/probes.md).

Device API: ``import ktrace.language as kl`` inside kernels.
"""

__version__ = "0.1.0"

from ._lazy import lazy_attributes

_LAZY = {
    "trace": ("ktrace.decorator", "trace"),
    "capture": ("ktrace.session", "capture"),
    "Session": ("ktrace.session", "Session"),
    "FlightConfig": ("ktrace.flight.recorder", "FlightConfig"),
    "TracedKernel": ("ktrace.decorator", "TracedKernel"),
    "read_capture": ("ktrace.captures.file", "read_capture"),
    "write_capture": ("ktrace.captures.file", "write_capture"),
    "merge_captures": ("ktrace.captures.file", "merge_captures"),
    "Capture": ("ktrace.captures.file", "Capture"),
    "CaptureError": ("ktrace.captures.file", "CaptureError"),
    "DecodeError": ("ktrace.decode", "DecodeError"),
    "write_trace": ("ktrace.export", "write_trace"),
    "decode_buffer": ("ktrace.decode", "decode_buffer"),
    "pair_table": ("ktrace.pairing", "pair_table"),
    "map_heap": ("ktrace.auto.hooks", "map_heap"),
    "declare": ("ktrace.auto.declarations", "declare"),
    "measure_cost": ("ktrace.cost", "measure_cost"),
    "verify": ("ktrace.check", "verify"),
    "Delay": ("ktrace.inject", "Delay"),
    "Injection": ("ktrace.inject", "Injection"),
}

__all__ = ["__version__", *_LAZY]


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
