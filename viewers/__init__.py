"""Viewers for ktrace traces: open a trace in ui.perfetto.dev (no torch, no triton)."""

from .perfetto_open import PERFETTO_UI, open_trace, serve_trace

__all__ = ["PERFETTO_UI", "open_trace", "serve_trace"]
