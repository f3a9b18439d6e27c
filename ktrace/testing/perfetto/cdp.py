"""A small Chrome DevTools Protocol client for headless Chromium, over a pipe.

Chromium started with ``--remote-debugging-pipe`` reads protocol commands from its file
descriptor 3 and writes replies and events to descriptor 4, each message a JSON text ended by a
NUL byte. That needs no port, no websocket library and no browser download: the system's
Chromium (``apt-get install chromium``) is driven with the standard library alone.

Only what the Perfetto UI harness needs is here: open a page, evaluate JavaScript (awaiting
promises), collect console messages and exceptions, take screenshots.
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

log = logging.getLogger("ktrace")

#: Environment variable naming the Chromium (or Chrome) executable.
CHROMIUM_ENV = "KTRACE_CHROMIUM"
#: Flags for a quiet, offline, throw-away headless browser.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--no-default-browser-check",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--mute-audio", "--hide-scrollbars", "--remote-debugging-pipe")


class BrowserError(RuntimeError):
    """Chromium could not be started, answered with an error, or did not answer in time."""


def find_chromium() -> str | None:
    """``$KTRACE_CHROMIUM``, else the first of chromium / chromium-browser / google-chrome on the PATH."""
    env = os.environ.get(CHROMIUM_ENV)
    if env:
        return env if Path(env).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    return None


_ON_3_AND_4 = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"


def _above_4(fd: int) -> int:
    if fd > 4:
        return fd
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Browser:
    """One headless Chromium process with a fresh profile, driven over the DevTools pipe.

    Args:
        executable: the browser (default: :func:`find_chromium`).
        extra_flags: more command-line flags.
    """

    def __init__(self, executable: str | None = None, extra_flags: tuple[str, ...] = ()):
        exe = executable or find_chromium()
        if not exe:
            raise BrowserError(f"no Chromium found (apt-get install chromium, or set {CHROMIUM_ENV})")
        self._profile = tempfile.mkdtemp(prefix="ktrace-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Above 4, so that placing them on 3 and 4 cannot overwrite one of them.
        to_browser_r, from_browser_w = _above_4(to_browser_r), _above_4(from_browser_w)
        args = [exe, *FLAGS, f"--user-data-dir={self._profile}", *extra_flags, "about:blank"]
        # The browser expects the pipe on descriptors 3 and 4: a few lines of Python put it there
        # and exec the browser (a POSIX shell cannot name descriptors above 9).
        self._proc = subprocess.Popen([sys.executable, "-c", _ON_3_AND_4, str(to_browser_r), str(from_browser_w), *args],
                                      pass_fds=(to_browser_r, from_browser_w), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[threading.Event, list]] = {}
        self._listeners: dict[str, list] = {}
        self._closed = False
        self.stderr_tail: list[str] = []
        threading.Thread(target=self._read, name="ktrace-cdp", daemon=True).start()
        threading.Thread(target=self._drain_stderr, name="ktrace-cdp-stderr", daemon=True).start()
        self.version = self.send("Browser.getVersion", timeout=60).get("product", "?")

    def _drain_stderr(self) -> None:
        for raw in self._proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self.stderr_tail = (self.stderr_tail + [line])[-50:]
                log.debug("chromium: %s", line)

    def _read(self) -> None:
        buf = b""
        with open(self._from_browser, "rb", buffering=0) as f:
            while chunk := f.read(1 << 16):
                buf += chunk
                *messages, buf = buf.split(b"\0")
                for raw in messages:
                    self._dispatch(json.loads(raw))
        self._closed = True
        for ev, box in list(self._pending.values()):
            box.append({"error": {"message": "the browser closed its pipe"}})
            ev.set()

    def _dispatch(self, msg: dict) -> None:
        if "id" in msg:
            waiter = self._pending.pop(msg["id"], None)
            if waiter:
                waiter[1].append(msg)
                waiter[0].set()
            return
        for fn in self._listeners.get(msg.get("method", ""), []):
            fn(msg.get("params", {}), msg.get("sessionId"))

    def on(self, method: str, fn) -> None:
        """Call ``fn(params, session_id)`` on each event ``method`` (from the reader thread)."""
        self._listeners.setdefault(method, []).append(fn)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30.0) -> dict:
        """Send one command and return its result.

        Raises:
            BrowserError: an error reply, a closed browser, or no reply within ``timeout`` seconds.
        """
        if self._closed:
            raise BrowserError(f"{method}: the browser has exited ({' | '.join(self.stderr_tail[-3:])})")
        mid = next(self._ids)
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        ev, box = threading.Event(), []
        self._pending[mid] = (ev, box)
        with self._lock:
            os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        if not ev.wait(timeout):
            self._pending.pop(mid, None)
            raise BrowserError(f"{method}: no answer from the browser within {timeout:g} s")
        reply = box[0]
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    def new_page(self, width: int = 1600, height: int = 1000) -> "Page":
        """A new tab of ``width`` x ``height`` CSS pixels."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return Page(self, session, width, height)

    def close(self) -> None:
        """End the browser and remove its profile."""
        if self._proc.poll() is None:
            try:
                self.send("Browser.close", timeout=5)
            except BrowserError:
                pass
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        os.close(self._to_browser)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    """One tab: navigate, evaluate JavaScript, take screenshots; console output is collected.

    Attributes:
        console: ``(level, text)`` of console messages and uncaught exceptions, oldest first.
    """

    def __init__(self, browser: Browser, session: str, width: int, height: int):
        self.browser = browser
        self.session = session
        self.console: list[tuple[str, str]] = []
        browser.on("Runtime.consoleAPICalled", self._on_console)
        browser.on("Runtime.exceptionThrown", self._on_exception)
        for method in ("Runtime.enable", "Page.enable"):
            self.send(method)
        self.resize(width, height)

    def _on_console(self, params: dict, session: str | None) -> None:
        if session == self.session:
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append((params.get("type", "log"), text))

    def _on_exception(self, params: dict, session: str | None) -> None:
        if session == self.session:
            d = params.get("exceptionDetails", {})
            self.console.append(("exception", d.get("exception", {}).get("description") or d.get("text", "")))

    def send(self, method: str, params: dict | None = None, timeout: float = 30.0) -> dict:
        """A command to this tab (see :meth:`Browser.send`)."""
        return self.browser.send(method, params, self.session, timeout)

    def resize(self, width: int, height: int) -> None:
        """Set the viewport to ``width`` x ``height`` CSS pixels."""
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def navigate(self, url: str) -> None:
        """Start loading ``url`` (returns once navigation started; wait for the page's own state)."""
        res = self.send("Page.navigate", {"url": url})
        if res.get("errorText"):
            raise BrowserError(f"{url}: {res['errorText']}")

    def evaluate(self, expression: str, timeout: float = 30.0):
        """The JSON value of a JavaScript expression (a promise is awaited).

        Raises:
            BrowserError: the expression threw (the message says what).
        """
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            raise BrowserError(f"JavaScript: {d.get('exception', {}).get('description') or d.get('text')}")
        return res.get("result", {}).get("value")

    def screenshot(self, path: str | os.PathLike) -> Path:
        """Write a PNG of the viewport to ``path``."""
        data = self.send("Page.captureScreenshot", {"format": "png"}, timeout=60)["data"]
        out = Path(path)
        out.write_bytes(base64.b64decode(data))
        return out
