"""Captures: what a traced run leaves behind, and how ranks' captures come together.

- :mod:`ktrace.captures.file` — capture files (``*.ktrace``): :func:`read_capture`,
  :func:`write_capture`, and :func:`merge_captures` (per-rank captures into one; the clock is
  fitted by ``ktrace.clock``, not here).
- :mod:`ktrace.captures.gather` — every rank's capture to one rank over ``torch.distributed``.
- :mod:`ktrace.captures.synth` — CONSTRUCTED captures (encoded event buffers with known
  contents) for tests and benchmarks.
- :mod:`ktrace.captures.generate` — GENERATED captures: hand-off programs drawn at random and
  simulated, each with one known cause (or none), for testing the report against the truth.

Needs numpy and orjson; never torch or triton (``gather`` imports torch when called).
"""

from .file import (
    Capture,
    CaptureError,
    Launch,
    RankCapture,
    capture_from_bytes,
    capture_to_bytes,
    launch_count,
    merge_captures,
    read_buffers,
    read_capture,
    write_capture,
)

__all__ = [
    "Capture", "CaptureError", "Launch", "RankCapture", "capture_from_bytes", "capture_to_bytes", "launch_count", "merge_captures",
    "read_buffers", "read_capture", "write_capture",
]
