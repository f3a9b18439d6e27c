"""The Perfetto UI in headless Chromium, offline: open traces, read the UI's own state, screenshots.

A :class:`viewers.perfetto_open.TraceServer` serves a Perfetto UI build found on this machine
and the traces on 127.0.0.1; headless Chromium (driven over the DevTools pipe, see :mod:`.cdp`)
opens a trace the way a user's link does (``/#!/?url=...&visStart=...&visEnd=...``), waits until
the UI is idle, and reads what the UI itself holds: the visible time window, the trace's bounds,
the track tree (names, expanded, pinned). Nothing leaves the machine.

The UI build exposes its application object as ``window.app`` (the Perfetto UI's debugging
global) and ``window.waitForPerfettoIdle()`` (its test hook); the state read here comes from
them, so it is what the UI would draw, not a re-derivation::

    with PerfettoUI() as ui:
        state = ui.open("trace.pftrace", window=(t0, t1))
        state.visible                      # (start_ns, end_ns) the UI shows
        ui.expand()                        # every process
        ui.screenshot("expanded.png")
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path

from .cdp import Browser, BrowserError, Page, find_chromium
from .trace_processor import PerfettoUnavailable

log = logging.getLogger("ktrace")

# Helpers installed in the page; they only read the UI's objects, or call their public methods.
_JS_HELPERS = r"""
(() => {
  const node = (n) => ({name: n.name, uri: n.uri ?? null, expanded: n.expanded, summary: !!n.isSummary,
                        pinned: n.isPinned, children: n.children.map(node)});
  const point = (p) => ({slice: p.sliceId, name: p.sliceName, thread: p.threadName ?? null, process: p.processName ?? null,
                         ts: String(p.sliceStartTs)});
  const redraw = () => { if (window.raf) window.raf.scheduleFullRedraw(); };
  // BigInt cells (64-bit integers) written as bare JSON numbers, so that Python reads them exactly.
  const json = (x) => JSON.stringify(x, (k, v) => (typeof v === 'bigint' ? '\u0000big' + v : v))
                          .replace(/"\\u0000big(-?[0-9]+)"/g, '$1');
  const top = (names) => app.trace.workspace.children.filter((n) => names === null || names.includes(n.name));
  window.__ktrace = {
    phase() {
      const a = window.app;
      if (!a) return 'starting';
      if (a.isLoadingTrace) return 'loading';
      return a.trace ? 'loaded' : 'idle';
    },
    state() {
      const t = app.trace, vw = t.timeline.visibleWindow, ti = t.traceInfo, sel = t.selection.selection;
      return {
        visible: [String(vw.start.integral), String(vw.end.integral)],
        bounds: [String(ti.start), String(ti.end)],
        title: ti.traceTitle, url: ti.traceUrl, type: ti.traceType ?? null, importErrors: ti.importErrors,
        loadingErrors: [...t.loadingErrors],
        tracks: t.workspace.children.map(node),
        pinned: t.workspace.pinnedTracks.map((n) => n.name),
        selection: sel.kind === 'track_event' ? {kind: sel.kind, event: sel.eventId, track: sel.trackUri} : {kind: sel.kind},
        flows: t.flows.connectedFlows.map((f) => ({id: f.id, begin: point(f.begin), end: point(f.end)})),
      };
    },
    async sql(query) {
      const res = await app.trace.engine.query(query);
      const cols = res.columns(), rows = [];
      for (const it = res.iter({}); it.valid(); it.next()) {
        const row = {};
        for (const c of cols) { const v = it.get(c); row[c] = v instanceof Uint8Array ? Array.from(v) : v; }
        rows.push(row);
      }
      return json(rows);
    },
    select(id) { app.trace.selection.selectSqlEvent('slice', id, {scrollToSelection: true}); redraw(); },
    expand(names) { top(names).forEach((n) => n.expand()); redraw(); },
    collapse(names) { top(names).forEach((n) => n.collapse()); redraw(); },
    sidebar(visible) {
      if (app.sidebar.visible !== visible) app.sidebar.toggleVisibility();
      redraw(); return app.sidebar.visible;
    },
    pin(path) {
      let nodes = app.trace.workspace.children, found = null;
      for (const name of path) { found = nodes.find((n) => n.name === name); if (!found) return false; nodes = found.children; }
      found.pin(); redraw(); return true;
    },
  };
  return true;
})()
"""


def ui_unavailable_reason() -> str | None:
    """Why the UI harness cannot run here (None when it can): for ``pytest.skip``."""
    from viewers.perfetto_open import UiBuildNotFound, find_ui_build

    if not find_chromium():
        return "Chromium is not installed (apt-get install chromium, or set KTRACE_CHROMIUM)"
    try:
        find_ui_build()
    except UiBuildNotFound as e:
        return str(e)
    return None


@dataclasses.dataclass(frozen=True)
class Track:
    """One node of the UI's track tree.

    Attributes:
        name: the name the UI shows.
        uri: the track's content (None for a group without its own content).
        expanded: whether its children are shown.
        summary: whether it is a group's summary track.
        pinned: whether it is pinned to the top.
        children: its child tracks, in the UI's order.
    """

    name: str
    uri: str | None
    expanded: bool
    summary: bool
    pinned: bool
    children: tuple["Track", ...]

    @classmethod
    def of(cls, d: dict) -> "Track":
        return cls(d["name"], d["uri"], bool(d["expanded"]), bool(d["summary"]), bool(d["pinned"]), tuple(cls.of(c) for c in d["children"]))

    def walk(self):
        """This track and all below it, depth first in the UI's order."""
        yield self
        for c in self.children:
            yield from c.walk()


@dataclasses.dataclass(frozen=True)
class UiState:
    """What the Perfetto UI holds for the loaded trace.

    Attributes:
        visible: (start, end) of the visible time window, trace ns.
        bounds: (start, end) of the trace, trace ns.
        title: the trace's title (file name and size).
        url: the URL the trace was loaded from.
        trace_type: the format the trace processor recognised (``proto``, ``json``).
        import_errors: the UI's count of import errors (from the stats table).
        loading_errors: errors the UI met while loading.
        tracks: the top-level tracks (processes), in the UI's order.
        pinned: names of the pinned tracks.
        selection: what is selected (``{"kind": "empty"}``; a slice: ``kind``, ``event``, ``track``).
        flows: the arrows the UI draws for the selection: ``{"id", "begin", "end"}``, each end
            with the slice id, name, thread and process names as the flows panel shows them.
    """

    visible: tuple[int, int]
    bounds: tuple[int, int]
    title: str
    url: str
    trace_type: str | None
    import_errors: int
    loading_errors: tuple[str, ...]
    tracks: tuple[Track, ...]
    pinned: tuple[str, ...]
    selection: dict
    flows: tuple[dict, ...]

    @classmethod
    def of(cls, d: dict) -> "UiState":
        return cls((int(d["visible"][0]), int(d["visible"][1])), (int(d["bounds"][0]), int(d["bounds"][1])), d["title"], d["url"],
                   d["type"], int(d["importErrors"] or 0), tuple(d["loadingErrors"]), tuple(Track.of(t) for t in d["tracks"]),
                   tuple(d["pinned"]), d["selection"], tuple(d["flows"]))


class PerfettoUI:
    """Headless Chromium showing a Perfetto UI build served from this machine.

    Args:
        ui_build: the UI build (default: :func:`viewers.perfetto_open.find_ui_build`).
        chromium: the browser executable (default: :func:`.cdp.find_chromium`).
        width, height: the viewport in CSS pixels.

    Raises:
        PerfettoUnavailable: no Chromium or no UI build.
    """

    def __init__(self, ui_build=None, chromium: str | None = None, width: int = 1600, height: int = 1000):
        from viewers.perfetto_open import UiBuildNotFound, find_ui_build, serve_trace

        reason = None if (ui_build or chromium) else ui_unavailable_reason()
        if reason:
            raise PerfettoUnavailable(reason)
        try:
            self.build = ui_build or find_ui_build()
        except UiBuildNotFound as e:
            raise PerfettoUnavailable(str(e)) from e
        self.server = serve_trace(None, port=0, ui_build=self.build)
        try:
            self.browser = Browser(chromium)
            self.page: Page = self.browser.new_page(width, height)
        except BrowserError as e:
            self.server.stop()
            raise PerfettoUnavailable(f"Chromium did not start: {e}") from e

    def link(self, trace: str | os.PathLike, window: tuple[int, int] | None = None) -> str:
        """The link that opens ``trace`` (served from now on), optionally at ``window`` (trace ns)."""
        self.server.add(trace)
        return self.server.ui_link(trace, window)

    def open(self, trace: str | os.PathLike, window: tuple[int, int] | None = None, timeout: float = 90.0) -> UiState:
        """Open ``trace`` as a user's link would, wait until the UI is idle, return its state.

        Args:
            trace: a trace file.
            window: the ``visStart``/``visEnd`` of the link (trace ns); None: the whole trace.
            timeout: seconds to wait for the trace to load.

        Raises:
            BrowserError: the trace did not load (the message carries the UI's console errors).
        """
        link = self.link(trace, window)
        return self.open_link(link, self.server.trace_url(trace), timeout)

    def open_link(self, link: str, trace_url: str, timeout: float = 90.0) -> UiState:
        """Open a UI link that loads ``trace_url`` (in a fresh document); see :meth:`open`."""
        self.page.console.clear()
        # A fresh document for each trace (a link differing only in its #fragment would not load one).
        self.page.navigate("about:blank")
        while self.page.evaluate("location.href") != "about:blank":
            time.sleep(0.05)
        self.page.navigate(link)
        deadline = time.monotonic() + timeout
        seen_loading = False
        phase = "starting"
        while time.monotonic() < deadline:
            try:
                phase = self.page.evaluate(f"window.__ktrace ? __ktrace.phase() : window.app ? ({_JS_HELPERS}, __ktrace.phase()) : 'starting'")
            except BrowserError:
                phase = "starting"  # the page is between documents
            if phase == "loaded":
                break
            seen_loading |= phase == "loading"
            if seen_loading and phase == "idle":
                raise BrowserError(f"{trace_url}: the Perfetto UI did not load the trace: {self._errors()}")
            time.sleep(0.1)
        else:
            raise BrowserError(f"{trace_url}: not loaded within {timeout:g} s (last phase {phase}): {self._errors()}")
        self.wait_idle(max(deadline - time.monotonic(), 5.0))
        return self.state()

    def _errors(self) -> str:
        errs = [t for lvl, t in self.page.console if lvl in ("error", "exception")]
        return " | ".join(errs[-5:]) or "no console errors"

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until the UI reports itself idle (no pending queries, redraws or animations)."""
        self.page.evaluate("window.waitForPerfettoIdle()", timeout=timeout)

    def state(self) -> UiState:
        """The UI's state now (see :class:`UiState`)."""
        return UiState.of(self.page.evaluate("__ktrace.state()"))

    def expand(self, names: list[str] | None = None) -> UiState:
        """Expand the top-level tracks named (default: all); returns the state once idle."""
        self.page.evaluate(f"__ktrace.expand({json.dumps(names)})")
        self.wait_idle()
        return self.state()

    def collapse(self, names: list[str] | None = None) -> UiState:
        """Collapse the top-level tracks named (default: all); returns the state once idle."""
        self.page.evaluate(f"__ktrace.collapse({json.dumps(names)})")
        self.wait_idle()
        return self.state()

    def pin(self, path: list[str]) -> bool:
        """Pin the track at ``path`` (names from the top level down); False if there is none."""
        ok = bool(self.page.evaluate(f"__ktrace.pin({json.dumps(path)})"))
        self.wait_idle()
        return ok

    def sql(self, query: str) -> list[dict]:
        """Rows of ``query`` run by the UI's own trace processor (64-bit integers exact)."""
        return json.loads(self.page.evaluate(f"__ktrace.sql({json.dumps(query)})", timeout=60))

    def select_slice(self, slice_id: int) -> UiState:
        """Select a slice as a click would (the UI then draws its arrows); returns the state once idle."""
        self.page.evaluate(f"__ktrace.select({int(slice_id)})")
        self.wait_idle()
        return self.state()

    def show_sidebar(self, visible: bool) -> None:
        """Show or hide the UI's left sidebar (hidden: more room for the tracks)."""
        self.page.evaluate(f"__ktrace.sidebar({json.dumps(bool(visible))})")
        self.wait_idle()

    def screenshot(self, path: str | os.PathLike) -> Path:
        """A PNG of what the UI shows now."""
        self.wait_idle()
        return self.page.screenshot(path)

    def close(self) -> None:
        self.browser.close()
        self.server.stop()

    def __enter__(self) -> "PerfettoUI":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
