"""Traces of a capture for the Perfetto UI: Perfetto protobuf (``.pftrace``) and Chrome JSON.

- :mod:`ktrace.export.plan` — one decode of every buffer, the time base, launch groups, and the
  notify -> wait flows (``ktrace.pairing``).
- :mod:`ktrace.export.layout` — tracks, lanes, names and flows as pure functions.
- :mod:`ktrace.export.writer` — the writer protocol and the one driver every format runs on.
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


#: Output formats by name, and the file suffixes that select them.
FORMATS = {"ktrace": (".ktrace",), "perfetto": (".pftrace", ".perfetto-trace", ".pb"), "chrome": (".json", ".json.gz")}


def format_of(path) -> str:
    """The output format a file name asks for; ValueError when its suffix says none."""
    name = str(path).lower()
    for fmt, suffixes in FORMATS.items():
        if name.endswith(suffixes):
            return fmt
    raise ValueError(f"cannot tell the format of {path}: use a suffix among "
                     f"{', '.join(s for v in FORMATS.values() for s in v)} or pass a format")


def write_trace(capture, path, fmt: str | None = None, **kw):
    """Write ``capture`` as ``fmt`` (``ktrace``, ``perfetto`` or ``chrome``; default: by suffix)."""
    fmt = fmt or format_of(path)
    if fmt == "ktrace":
        from ..captures import write_capture

        return write_capture(path, capture)
    if fmt == "perfetto":
        return write_perfetto(capture, path, **kw)
    if fmt == "chrome":
        return write_chrome_json(capture, path, **kw)
    raise ValueError(f"unknown format {fmt!r} (ktrace, perfetto, chrome)")


__all__ = ["FORMATS", "format_of", "write_chrome_json", "write_perfetto", "write_trace"]
