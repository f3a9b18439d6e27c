"""Open a trace in ui.perfetto.dev by serving that one file on the loopback interface.

ui.perfetto.dev loads a trace from ``https://ui.perfetto.dev/#!/?url=<url>``; the page fetches
the URL from the user's browser, so a server on 127.0.0.1 is enough and nothing leaves the
machine. The server answers only the one path it was given (anything else is 404), binds only
127.0.0.1, sends the CORS header the UI needs (``Access-Control-Allow-Origin:
https://ui.perfetto.dev``), and stops after the trace has been fetched once, on Ctrl-C, or at
its timeout.
"""

from __future__ import annotations

import http.server
import logging
import os
import threading
import urllib.parse
import webbrowser
from pathlib import Path

log = logging.getLogger("ktrace")

PERFETTO_UI = "https://ui.perfetto.dev"
HOST = "127.0.0.1"
DEFAULT_PORT = 9001


def _handler(path: Path, url_path: str, done: threading.Event):
    class Handler(http.server.BaseHTTPRequestHandler):
        def _cors(self):
            self.send_header("Access-Control-Allow-Origin", PERFETTO_UI)
            self.send_header("Access-Control-Allow-Methods", "GET, OPTIONS")
            self.send_header("Access-Control-Allow-Headers", "*")
            self.send_header("Cache-Control", "no-cache")

        def do_OPTIONS(self):  # CORS preflight
            self.send_response(204)
            self._cors()
            self.end_headers()

        def do_GET(self):
            if urllib.parse.urlsplit(self.path).path != url_path:
                self.send_response(404)
                self._cors()
                self.end_headers()
                return
            size = path.stat().st_size
            self.send_response(200)
            self._cors()
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    self.wfile.write(chunk)
            done.set()

        def log_message(self, fmt, *args):
            log.debug("ktrace open: " + fmt, *args)

    return Handler


class TraceServer:
    """A one-file HTTP server on 127.0.0.1 (use :func:`serve_trace`)."""

    def __init__(self, path: str | os.PathLike, port: int = DEFAULT_PORT):
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise FileNotFoundError(f"{path}: no such trace file")
        self.url_path = "/" + urllib.parse.quote(self.path.name)
        self.fetched = threading.Event()
        self.httpd = http.server.ThreadingHTTPServer((HOST, port), _handler(self.path, self.url_path, self.fetched))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="ktrace-open", daemon=True)

    @property
    def url(self) -> str:
        """The trace's own URL on the loopback server."""
        return f"http://{HOST}:{self.port}{self.url_path}"

    @property
    def ui_url(self) -> str:
        """The ui.perfetto.dev link that loads the trace."""
        return f"{PERFETTO_UI}/#!/?url={urllib.parse.quote(self.url, safe=':/')}"

    def start(self) -> "TraceServer":
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the trace was fetched (True) or ``timeout`` seconds passed (False)."""
        return self.fetched.wait(timeout)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve_trace(path: str | os.PathLike, port: int = DEFAULT_PORT) -> TraceServer:
    """Start serving one trace file on 127.0.0.1 (``port`` 0 picks a free one); returns the server."""
    return TraceServer(path, port).start()


def open_trace(path: str | os.PathLike, *, port: int = DEFAULT_PORT, browser: bool = True, timeout: float | None = 600.0,
               linger: float = 2.0, echo=print) -> bool:
    """Serve a trace to ui.perfetto.dev, print (and open) its link, stop once it is fetched.

    Args:
        path: a ``.pftrace`` or ``.json[.gz]`` trace.
        port: the loopback port (the UI accepts http://127.0.0.1:9001).
        browser: also open the link in the default browser.
        timeout: give up after this many seconds without a fetch (None: wait until Ctrl-C).
        linger: seconds to keep serving after the fetch (the UI may ask twice).
        echo: where the link is printed.

    Returns:
        True when the trace was fetched, False on timeout or Ctrl-C.
    """
    srv = serve_trace(path, port)
    try:
        echo(f"Serving {srv.path.name} on {srv.url} (this file only, loopback only). Open:\n  {srv.ui_url}")
        if browser:
            try:
                webbrowser.open(srv.ui_url)
            except webbrowser.Error as e:
                log.info("could not open a browser: %s", e)
        try:
            got = srv.wait(timeout)
            if got:
                srv.fetched.clear()
                srv.wait(linger)
            else:
                echo(f"no request for the trace within {timeout:.0f} s; stopping")
            return got
        except KeyboardInterrupt:
            echo("stopped")
            return False
    finally:
        srv.stop()
