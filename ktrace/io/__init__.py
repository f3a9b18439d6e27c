"""Capture files and trace writers. Needs numpy, orjson and perfetto; never torch or triton."""

from .capture_file import Capture, CaptureError, Launch, RankCapture, merge_captures, read_capture, write_capture

__all__ = ["Capture", "CaptureError", "Launch", "RankCapture", "merge_captures", "read_capture", "write_capture"]
