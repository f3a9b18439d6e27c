"""Capture files and trace writers. Needs numpy, orjson and perfetto; never torch or triton."""

from .capture_file import (
    Capture,
    CaptureError,
    Launch,
    RankCapture,
    capture_from_bytes,
    capture_to_bytes,
    merge_captures,
    read_capture,
    write_capture,
)


def write_chrome_json(capture, path, **kw):
    """Chrome JSON trace (see :func:`ktrace.io.chrome.write_chrome_json`)."""
    from .chrome import write_chrome_json as _w

    return _w(capture, path, **kw)


def write_perfetto(capture, path, **kw):
    """Perfetto protobuf trace (see :func:`ktrace.io.perfetto_trace.write_perfetto`)."""
    from .perfetto_trace import write_perfetto as _w

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
        return write_capture(path, capture)
    if fmt == "perfetto":
        return write_perfetto(capture, path, **kw)
    if fmt == "chrome":
        return write_chrome_json(capture, path, **kw)
    raise ValueError(f"unknown format {fmt!r} (ktrace, perfetto, chrome)")


__all__ = [
    "Capture", "CaptureError", "FORMATS", "Launch", "RankCapture", "capture_from_bytes", "capture_to_bytes", "format_of",
    "merge_captures", "read_capture", "write_capture", "write_chrome_json", "write_perfetto", "write_trace",
]
