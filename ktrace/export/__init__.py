"""Traces of a capture for the Perfetto UI: Perfetto protobuf (``.pftrace``) and Chrome JSON.

- :mod:`ktrace.export.plan` — one decode of every buffer, the time base, launch groups, and the
  notify -> wait flows (``ktrace.pairing``).
- :mod:`ktrace.export.layout` — tracks, lanes, names and flows as pure functions.
- :mod:`ktrace.export.writer` — the writer protocol and the one driver every format runs on.
- :mod:`ktrace.export.formats` — the one registry of output formats: each a writer module declaring
  its name, extensions, bytes per event and how it splits (``capture_file``, ``perfetto``, ``chrome``).
- :mod:`ktrace.export.pool` — the worker processes and the run's shared state.
- :mod:`ktrace.export.chrome`, :mod:`ktrace.export.perfetto` — the two formats.
- :mod:`ktrace.export.profile` — a PyTorch profiler trace of the same run merged in (``ktrace merge
  --with-profile``): each traced launch aligned to its CUPTI kernel record.
- :mod:`ktrace.export.parquet` — the capture's tables as Parquet files (``ktrace export``; pyarrow).

Needs numpy, orjson and perfetto; never torch or triton.
"""

from __future__ import annotations


def write_chrome_json(capture, path, **kw):
    """Chrome JSON trace (see :func:`ktrace.export.chrome.write_chrome_json`)."""
    from .chrome import write_chrome_json as _w

    return _w(capture, path, **kw)


def write_perfetto(capture, path, **kw):
    """Perfetto protobuf trace (see :func:`ktrace.export.perfetto.write_perfetto`)."""
    from .perfetto import write_perfetto as _w

    return _w(capture, path, **kw)


def format_of(path) -> str:
    """The output format a file name asks for (``ktrace.export.formats``); ValueError when its
    suffix says none."""
    from .formats import format_of as _of

    return _of(path)


def write_trace(capture, path, fmt: str | None = None, **kw):
    """Write ``capture`` as ``fmt`` (a registered format, ``ktrace.export.formats``: ``ktrace``,
    ``perfetto``, ``chrome``; default: by suffix)."""
    from .formats import get

    return get(fmt or format_of(path)).write(capture, path, **kw)


__all__ = ["format_of", "write_chrome_json", "write_perfetto", "write_trace"]
