"""Report JSON given to ``ktrace open --report`` or found beside the trace: every class of
damaged or hostile report, run as real ``ktrace open`` processes.

A report named with ``--report`` is read by ``viewers.perfetto_open.load_report``: a regular file
of at most 64 MiB, JSON, of format ``ktrace-report``, its findings objects whose times are
integers in ns (``start_ns <= end_ns``) and whose ranks are rank numbers. Each fault is one line
naming the file, exit status 2, before anything is served. A report found beside the trace (not
named) that is damaged is left out with one line naming it, and the trace opens. Counts are
printed with ``-s`` (``[report-json] N cases: ...``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .surface_kit import Surface, listing, random_file, say_counts

S = Surface("report-json")
SERVE = ["open", "--no-browser", "--online", "--port", "0"]


_say_counts = say_counts(S)


def _trace(tmp: Path, name: str = "t.pftrace", size: int = 4096) -> Path:
    return random_file(tmp, name, size)


def _report(**over) -> dict:
    return {"format": "ktrace-report", "summary": {"trace_end_ns": 10_000},
            "findings": [{"kind": "straggler", "text": "x", "start_ns": 100, "end_ns": 5_000, "ranks": [0]},
                         {"kind": "hang", "text": "y", "start_ns": None, "end_ns": None}], **over}


def _finding(**over) -> dict:
    return _report(findings=[{"kind": "k", "text": "t", "start_ns": 100, "end_ns": 200, **over}])


BAD_REPORTS = {
    "not JSON": (b"{\"format\": ", "not a JSON report"),
    "not UTF-8": (b'{"format": "\xff"}', "not a JSON report"),
    "a list": (b"[]", "not a ktrace report"),
    "other format": (json.dumps({"format": "x"}).encode(), "not a ktrace report"),
    "findings an object": (json.dumps(_report(findings={"a": 1})).encode(), "findings are not a list of objects"),
    "finding a string": (json.dumps(_report(findings=["x"])).encode(), "findings are not a list of objects"),
    "start_ns a string": (json.dumps(_finding(start_ns="100")).encode(), "finding 1's start_ns is \"100\""),
    "start_ns true": (json.dumps(_finding(start_ns=True)).encode(), "finding 1's start_ns is true"),
    "start_ns 1.5": (json.dumps(_finding(start_ns=1.5)).encode(), "not a time in ns"),
    "start_ns Infinity": (b'{"format": "ktrace-report", "findings": [{"start_ns": Infinity, "end_ns": 5}]}', "not a time in ns"),
    "start_ns NaN": (b'{"format": "ktrace-report", "findings": [{"start_ns": NaN, "end_ns": 5}]}', "not a time in ns"),
    "end_ns 10^30": (json.dumps(_finding(end_ns=10**30)).encode(), "outside what a trace spans"),
    "end_ns 10^5000": (b'{"format": "ktrace-report", "findings": [{"start_ns": 1, "end_ns": 1' + b"0" * 5000 + b"}]}", "not a JSON report"),
    "end before start": (json.dumps(_finding(start_ns=500, end_ns=100)).encode(), "ends (100 ns) before it starts"),
    "ranks strings": (json.dumps(_finding(ranks=["0"])).encode(), "ranks are not a list of rank numbers"),
    "ranks negative": (json.dumps(_finding(ranks=[-1])).encode(), "ranks are not a list of rank numbers"),
    "summary a list": (json.dumps(_report(summary=[1])).encode(), "summary is not an object"),
    "trace_end_ns negative": (json.dumps(_report(summary={"trace_end_ns": -5})).encode(), "trace_end_ns -5 is negative"),
    "deep nesting": (b'{"format": "ktrace-report", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "not a JSON report"),
}


def test_a_report_named_on_the_command_line_is_checked(tmp_path):
    t = _trace(tmp_path)
    for cls, (data, fault) in BAD_REPORTS.items():
        rep = tmp_path / "r.json"
        rep.write_bytes(data)
        S.refused(tmp_path, [*SERVE, "--timeout", "0.01", t, "--report", rep], names=str(rep), fault=fault, cls=f"--report: {cls}",
                  inputs=[t, rep], size=len(data))
    rep = tmp_path / "r.json"
    rep.write_bytes(json.dumps(_report()).encode())
    for n, fault in ((2, "finding 2 has no time range"), (9, "no finding 9")):
        S.refused(tmp_path, [*SERVE, "--timeout", "0.01", t, "--report", rep, "--finding", str(n)], names=str(rep), fault=fault,
                  cls="--finding: no range", inputs=[t, rep])
    os.truncate(rep, (64 << 20) + 1)
    S.refused(tmp_path, [*SERVE, "--timeout", "0.01", t, "--report", rep], names=str(rep), fault="more than a report holds",
              cls="--report: too large", inputs=[])
    for special, fault in (("/dev/zero", "is a device"), (tmp_path, "is a folder")):
        S.refused(tmp_path, [*SERVE, "--timeout", "0.01", t, "--report", special], names=str(special), fault=fault,
                  cls="--report: not a file", inputs=[t])
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    S.refused(tmp_path, [*SERVE, "--timeout", "0.01", t, "--report", fifo], names=str(fifo), fault="is a FIFO",
              cls="--report: not a file", inputs=[t])
    rep.write_bytes(json.dumps(_report()).encode())
    p = S.ok(tmp_path, [*SERVE, "--timeout", "0.01", t, "--report", rep, "--finding", "1"], cls="--report: good", inputs=[t, rep], status=1)
    assert "visStart=100&visEnd=5000" in p.stdout


def test_a_damaged_report_beside_the_trace_does_not_block_it(tmp_path):
    t = _trace(tmp_path, "run.pftrace")
    beside = tmp_path / "run.report.json"
    for cls in ("not JSON", "a list", "finding a string", "start_ns true", "end_ns 10^5000", "deep nesting"):
        data, fault = BAD_REPORTS[cls]
        beside.write_bytes(data)
        files = listing(tmp_path)
        p = S.ok(tmp_path, [*SERVE, "--timeout", "0.01", t], cls=f"beside: {cls}", inputs=[t, beside], status=1)
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and str(beside) in lines[0] and fault in lines[0] and "left out" in lines[0], p.stderr
        assert "Serving" in p.stdout and "finding " not in p.stdout and listing(tmp_path) == files
    beside.write_bytes(json.dumps(_report()).encode())
    p = S.ok(tmp_path, [*SERVE, "--timeout", "0.01", t], cls="beside: good", inputs=[t, beside], status=1)
    assert p.stderr == "" and "  finding 1: " in p.stdout
