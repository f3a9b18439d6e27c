"""Viewers for ktrace traces: open a trace in the Perfetto UI (ui.perfetto.dev, or a UI build
served from this machine), the HTML report. No torch, no triton."""

from .perfetto_open import PERFETTO_UI, find_ui_build, open_trace, serve_trace

__all__ = ["PERFETTO_UI", "find_ui_build", "open_trace", "serve_trace"]
