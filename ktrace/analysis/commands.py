"""The ``ktrace report`` and ``ktrace diff`` subcommands.

``ktrace/cli.py`` adds them with :func:`register`::

    from .analysis.commands import register as _register_analysis
    _register_analysis(sub)

Both work on saved captures with no GPU and without torch or triton. Progress goes to stderr
(a bar when stderr is a terminal), the summary to stdout; ``--json -`` writes the JSON to stdout
instead of the summary.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson


class _Bar:
    """A one-line progress bar on stderr (only when stderr is a terminal)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def __call__(self, name: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        width = 24
        fill = int(width * done / max(total, 1))
        sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {name:<16} {time.perf_counter() - self.t0:6.1f} s")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _write_json(dest: str, data: dict) -> None:
    blob = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    if dest == "-":
        sys.stdout.write(blob.decode() + "\n")
    else:
        Path(dest).write_bytes(blob)


def _cmd_report(args) -> int:
    from ..captures.file import CaptureError
    from . import LoadConfig, ReportConfig, build_report, render_text, report_json
    from .trace import AnalysisError

    try:
        cfg = ReportConfig(load=LoadConfig(work_region=args.work_region), trace_url=args.trace_url,
                           min_late_ns=args.min_late_us * 1e3)
        rep = build_report(args.capture, cfg, progress=_Bar(not args.quiet))
    except (CaptureError, AnalysisError, ValueError) as e:
        print(f"ktrace report: {e}", file=sys.stderr)
        return 2
    if args.json:
        _write_json(args.json, report_json(rep))
    if args.json != "-":
        print(render_text(rep, max_findings=args.max_findings))
    if args.html:
        from viewers.report import write_html

        path = write_html(rep, args.html)
        print(f"HTML report: {path}", file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json and args.json != "-":
        print(f"JSON report: {args.json}")
    return 1 if any(f.kind == "hang" and f.severity == "error" for f in rep.findings) and args.fail_on_hang else 0


def _cmd_diff(args) -> int:
    from ..captures.file import CaptureError
    from . import build_diff, diff_json, render_diff_text
    from .trace import AnalysisError

    try:
        d = build_diff(args.a, args.b, progress=_Bar(not args.quiet), top=args.top)
    except (CaptureError, AnalysisError, ValueError) as e:
        print(f"ktrace diff: {e}", file=sys.stderr)
        return 2
    if args.json:
        _write_json(args.json, diff_json(d))
    if args.json != "-":
        print(render_diff_text(d))
    if args.html:
        from viewers.report import write_diff_html

        path = write_diff_html(d, args.html)
        print(f"HTML diff: {path}", file=sys.stderr if args.json == "-" else sys.stdout)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``report`` and ``diff`` to the ``ktrace`` command's subparsers."""
    s = subparsers.add_parser(
        "report", help="find spin-lock stalls and their cause, uneven workgroup load, exposed communication and hangs",
        description="Analyse a capture: findings first, in plain words (most costly first), then the headline numbers.")
    s.add_argument("capture", help="a .ktrace capture file")
    s.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report (plots, ranked findings)")
    s.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-': to stdout, instead of the summary)")
    s.add_argument("--trace-url", metavar="URL", help="where this capture's trace is served, for the Perfetto links")
    s.add_argument("--work-region", metavar="NAME", help="region whose spans count as work items (default: the most frequent)")
    s.add_argument("--min-late-us", type=float, default=1.0, metavar="US",
                   help="name a producer a straggler only when it is at least this late (default 1 µs)")
    s.add_argument("--max-findings", type=int, default=20, help="findings printed (default 20)")
    s.add_argument("--fail-on-hang", action="store_true", help="exit 1 when the capture shows a hang")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=_cmd_report)

    d = subparsers.add_parser("diff", help="compare two captures of the same kernel: biggest movers first",
                              description="Per region, rank and workgroup: time per launch in A and B, biggest change first.")
    d.add_argument("a", help="the capture before (A)")
    d.add_argument("b", help="the capture after (B)")
    d.add_argument("--html", metavar="FILE", help="also write a self-contained HTML diff")
    d.add_argument("--json", metavar="FILE", help="also write the diff as JSON ('-': to stdout)")
    d.add_argument("--top", type=int, default=10, help="region movers listed (default 10)")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=_cmd_diff)
