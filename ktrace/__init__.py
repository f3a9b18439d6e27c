"""ktrace: intra-kernel tracing and profiling for multi-GPU Triton kernels.

Host API (importing ``ktrace`` has no side effects and does not import torch or triton; the
names below that need them import them on first use):

- :func:`trace` — decorator around a ``@triton.jit`` kernel.
- :func:`capture` — context manager that switches tracing on and collects launches.
- :func:`read_capture`, :func:`write_capture` — capture files (``ktrace.io``).

Device API: ``import ktrace.language as kl`` inside kernels.
"""

__version__ = "0.1.0"

from ._lazy import lazy_attributes

_LAZY = {
    "trace": ("ktrace.session", "trace"),
    "capture": ("ktrace.session", "capture"),
    "Session": ("ktrace.session", "Session"),
    "TracedKernel": ("ktrace.session", "TracedKernel"),
    "read_capture": ("ktrace.io.capture_file", "read_capture"),
    "write_capture": ("ktrace.io.capture_file", "write_capture"),
    "merge_captures": ("ktrace.io.capture_file", "merge_captures"),
    "Capture": ("ktrace.io.capture_file", "Capture"),
    "CaptureError": ("ktrace.io.capture_file", "CaptureError"),
    "DecodeError": ("ktrace.decode", "DecodeError"),
    "decode_buffer": ("ktrace.decode", "decode_buffer"),
}

__all__ = ["__version__", *_LAZY]


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
