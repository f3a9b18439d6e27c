"""The ``ktrace`` output format: the merged capture itself (``.ktrace``, ``ktrace.captures.file``),
to analyse or convert later. Not a trace the Perfetto UI opens (``ktrace open`` converts it)."""

from __future__ import annotations

from ..captures import write_capture
from ..schema import RECORD_BYTES
from .formats import Format


def write_ktrace(capture, path, **_options):
    """Write ``capture`` as a capture file (``ktrace.captures.write_capture``); trace options do
    not apply."""
    return write_capture(path, capture)


#: Each event is one record of the buffers the capture stores (packed, compressed in the zip).
FORMAT = Format(name="ktrace", extensions=(".ktrace",), write=write_ktrace, bytes_per_event=RECORD_BYTES, ui=False)
