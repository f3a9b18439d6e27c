"""``ktrace open`` serves exactly the trace it was given: split indexes, reports and requests an
attacker or a careless user could give it, run against real ``ktrace open`` processes.

What is checked: a split index's parts must be files in its own folder; a request whose ``Host``
is not this loopback server's gets 403 (DNS rebinding); only the trace's own path is served, from
the file opened at start (a path swapped later serves nothing else); 200 concurrent requests all
complete (timed); a client that resets mid-download leaves nothing on stderr; Ctrl-C ends with
130 and SIGTERM with 143 (reports given to ``open``: ``tests/test_surface_report_json.py``).
Counts are printed with ``-s`` (``[open] N cases: ...``).
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from .surface_kit import RUNNER, TIMEOUT, Surface, env_for, random_file, say_counts

S = Surface("open")
SERVE = ["open", "--no-browser", "--online", "--port", "0"]


_say_counts = say_counts(S)


def _trace(tmp: Path, name: str = "t.pftrace", size: int = 4096) -> Path:
    return random_file(tmp, name, size)


class Served:
    """A ``ktrace open`` process serving a trace; its port read from what it prints."""

    def __init__(self, tmp: Path, *args):
        self.p = subprocess.Popen([sys.executable, "-c", RUNNER, *SERVE, *map(str, args)], cwd=tmp, env=env_for(tmp),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        line = self.p.stdout.readline().decode()
        m = re.search(r"on http://127\.0\.0\.1:(\d+) ", line)
        assert m, (line, self.p.stderr.read() if self.p.poll() is not None else "")
        self.port = int(m.group(1))
        self.path = re.search(r"url=http://127\.0\.0\.1:\d+(/trace/[^&\s]+)", self.p.stdout.readline().decode()).group(1)

    def request(self, path: str | None = None, host: str | None = "127.0.0.1", method: str = "GET") -> tuple[int, bytes]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        try:
            c.putrequest(method, path or self.path, skip_host=True, skip_accept_encoding=True)
            if host is not None:
                c.putheader("Host", host if ":" in host.replace("[::1]", "") else f"{host}:{self.port}")
            c.endheaders()
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def stop(self, sig=signal.SIGINT) -> tuple[int, bytes, bytes]:
        os.killpg(self.p.pid, sig) if sig == signal.SIGINT else self.p.send_signal(sig)
        out, err = self.p.communicate(timeout=TIMEOUT)
        return self.p.returncode, out, err


# ---------------------------------------------------------------------------------------------
# the server: hosts, paths, bursts, resets, signals
# ---------------------------------------------------------------------------------------------


def test_only_loopback_hosts_and_only_the_trace_are_served(tmp_path):
    t = _trace(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    srv = Served(tmp_path, t)
    try:
        body = t.read_bytes()
        for host in ("127.0.0.1", "localhost", "LOCALHOST", "[::1]"):
            assert srv.request(host=host) == (200, body), host
            S.counted(f"host allowed: {host.lower()}")
        for host in ("evil.example", "127.0.0.1.evil.example", "localhost.evil.example", "evil.example:80", f"127.0.0.1:{srv.port + 1}",
                     "127.0.0.2", "", "0x7f000001", "127.1"):
            status, data = srv.request(host=host if host else f":{srv.port}")
            assert status == 403 and data == b"", (host, status)
            S.counted("host refused (403): " + ("rebinding" if "evil" in host else "other"))
        status, _ = srv.request(host=None)  # (no Host at all)
        assert status == 403
        S.counted("host refused (403): none")
        for path in ("/trace/../secret.txt", "/trace/%2e%2e/secret.txt", "/trace/secret.txt", "/secret.txt", "/", "/trace/",
                     f"/trace/{t.name}/", f"/trace/..%2f{secret.name}", str(secret), "/proc/self/environ"):
            status, data = srv.request(path)
            assert status == 404 and data == b"", (path, status)
            S.counted("path outside the trace (404)")
        # the trace's path swapped for a link to another file after the start: the file opened then is served
        os.replace(t, tmp_path / "moved.pftrace")
        t.symlink_to(secret)
        assert srv.request() == (200, body)
        S.counted("path swapped after start")
        code, out, err = srv.stop(signal.SIGINT)
        assert code == 130 and b"Traceback" not in err and err == b"", (code, err[-2000:])
        S.counted("Ctrl-C: 130")
    finally:
        if srv.p.poll() is None:
            srv.p.kill()


def test_a_burst_of_200_requests_and_clients_that_reset(tmp_path):
    """200 concurrent connections (what an offline UI and a few tabs ask for at once, several
    times over) all answered quickly; clients resetting mid-download leave nothing on stderr."""
    t = _trace(tmp_path, size=64 << 10)
    big = _trace(tmp_path, "big.pftrace", size=48 << 20)
    srv = Served(tmp_path, t)
    try:
        results, barrier = [], threading.Barrier(200)

        def one():
            barrier.wait()
            t0 = time.monotonic()
            try:
                results.append((srv.request()[0], time.monotonic() - t0))
            except OSError as e:
                results.append((repr(e), time.monotonic() - t0))

        threads = [threading.Thread(target=one) for _ in range(200)]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        took = time.monotonic() - t0
        assert [r for r, _ in results].count(200) == 200, sorted({str(r) for r, _ in results})
        assert took < 10, took
        print(f"\n[open] 200 concurrent requests of a 64 KiB trace: all 200 answered in {took:.2f} s "
              f"(slowest {max(d for _, d in results):.2f} s)")
        S.counted("burst: 200 concurrent requests")
        code, _, err = srv.stop(signal.SIGTERM)
        assert code == 143 and err == b"", (code, err[-2000:])
        S.counted("SIGTERM: 143")
        srv = Served(tmp_path, big)
        for _ in range(5):  # read a little, then reset (RST: SO_LINGER 0)
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(f"GET {srv.path} HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n\r\n".encode())
            s.recv(4096)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            S.counted("client reset mid-download")
        time.sleep(0.5)
        assert srv.request()[0] == 200  # (still serving)
        code, _, err = srv.stop(signal.SIGINT)
        assert code == 130 and err == b"", (code, err[-3000:])
    finally:
        if srv.p.poll() is None:
            srv.p.kill()


# ---------------------------------------------------------------------------------------------
# split indexes: parts inside the index's folder only
# ---------------------------------------------------------------------------------------------


def _index(tmp: Path, parts, name="x.pftrace.index.json", raw: bytes | None = None) -> Path:
    f = tmp / name
    doc = {"format": "ktrace-trace-index", "version": 1, "trace_format": "perfetto", "parts": parts}
    f.write_bytes(raw if raw is not None else orjson.dumps(doc))
    return f


def _part(file, **over):
    return {"file": file, "ranks": [0], "launches": [0], "start_ns": 0, "end_ns": 10, **over}


def test_split_indexes_name_only_files_in_their_own_folder(tmp_path):
    d = tmp_path / "traces"
    d.mkdir()
    _trace(d, "x.part1.pftrace")
    outside = _trace(tmp_path, "outside.pftrace")
    (d / "link.pftrace").symlink_to(outside)
    (d / "sub").mkdir()
    _trace(d / "sub", "p.pftrace")
    os.mkfifo(d / "fifo.pftrace")
    cases = {
        "part ../": ([_part("../outside.pftrace")], "not a file name in the index's folder"),
        "part absolute": ([_part(str(outside))], "not a file name in the index's folder"),
        "part /etc/passwd": ([_part("/etc/passwd")], "not a file name in the index's folder"),
        "part in a subfolder": ([_part("sub/p.pftrace")], "not a file name in the index's folder"),
        "part a link out": ([_part("link.pftrace")], "not a regular file in the index's folder"),
        "part a FIFO": ([_part("fifo.pftrace")], "not a regular file in the index's folder"),
        "part missing": ([_part("nope.pftrace")], "not a regular file in the index's folder"),
        "part ..": ([_part("..")], "not a file name"),
        "part name a number": ([_part(7)], "not a file name"),
        "part not an object": (["x.part1.pftrace"], "not an object"),
        "ranks a string": ([_part("x.part1.pftrace", ranks="0")], "ranks is not a list"),
        "ranks empty": ([_part("x.part1.pftrace", ranks=[])], "ranks is not a list"),
        "launches bool": ([_part("x.part1.pftrace", launches=[True])], "launches is not a list"),
        "start_ns a string": ([_part("x.part1.pftrace", start_ns="0")], "start_ns is not an integer"),
        "end_ns 2^64": ([_part("x.part1.pftrace", end_ns=2**64 - 1)], "end_ns is not an integer"),
        "parts an object": ({"file": "x"}, "parts are not a list"),
    }
    for cls, (parts, fault) in cases.items():
        idx = _index(d, parts)
        S.refused(tmp_path, [*SERVE, "--timeout", "0.01", idx], names=str(idx), fault=fault, cls=f"index: {cls}", inputs=[idx])
    for cls, raw, fault in (("not JSON", b"\xff{", "not a readable trace index"), ("a list", b"[]", "not a ktrace trace index"),
                            ("other format", b'{"format": "x"}', "not a ktrace trace index")):
        idx = _index(d, [], raw=raw)
        S.refused(tmp_path, [*SERVE, "--timeout", "0.01", idx], names=str(idx), fault=fault, cls=f"index: {cls}", inputs=[idx])
    idx = _index(d, [])
    os.truncate(idx, (64 << 20) + 1)  # (sparse: claims 64 MiB, holds nothing)
    S.refused(tmp_path, [*SERVE, "--timeout", "0.01", idx], names=str(idx), fault="more than a trace index holds", cls="index: too large",
              inputs=[])
    idx = _index(d, [_part("x.part1.pftrace")])
    p = S.ok(tmp_path, [*SERVE, "--timeout", "0.01", idx], cls="index: a part in its folder", status=1, inputs=[idx])
    assert "opening x.part1.pftrace" in p.stdout and "/trace/x.part1.pftrace" in p.stdout
