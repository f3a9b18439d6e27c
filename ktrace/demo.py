"""The bundled real captures and ``ktrace demo``: the whole analysis path with no GPU.

The package ships small captures recorded on 4 H200s from the instrumented MoE all-to-all
(``instrumented_kernels/all_to_all``; how they were made is in ``ktrace/data/README.md`` and in
each capture's ``.scenario.json``). :data:`BUNDLED_CAPTURE` is the one ``ktrace demo`` (and
``ktrace report`` with no capture argument) analyses: the skewed routing, where the busy ranks'
receive workgroups are overloaded and the others wait for them.

:func:`analyse` is the one path from a capture file to what a user looks at, shared by
``ktrace demo`` and ``ktrace run``: the Perfetto trace (all ranks on one clock), the HTML report
and its JSON, in one output folder. Needs numpy, orjson and perfetto; never torch or triton.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

#: Folder of the package data.
DATA_DIR = Path(__file__).resolve().parent / "data"

#: The bundled captures by short name (file names stay stable when a capture is re-recorded).
BUNDLED = {
    "skewed": "a2a_skewed_4xh200.ktrace",
    "skip": "a2a_skip_4xh200.ktrace",
    "delay20us": "a2a_delay20us_4xh200.ktrace",
    "delay200us": "a2a_delay200us_4xh200.ktrace",
    "byok": "byok_ring_straggler_4xh100.ktrace",
}

#: The capture ``ktrace demo`` and ``ktrace report`` (no argument) analyse.
BUNDLED_CAPTURE = DATA_DIR / BUNDLED["skewed"]

#: Where ``ktrace demo`` writes unless told otherwise.
DEFAULT_DEMO_OUT = "ktrace-demo"


class DemoError(RuntimeError):
    """A bundled capture is missing (a broken install) or an output cannot be written."""


def bundled_capture(name: str = "skewed") -> Path:
    """The path of a bundled capture.

    Args:
        name: a key of :data:`BUNDLED` (``skewed``, ``skip``, ``delay20us``, ``delay200us``, ``byok``).

    Raises:
        DemoError: unknown name, or the file is not installed.
    """
    if name not in BUNDLED:
        raise DemoError(f"no bundled capture {name!r}; there are: {', '.join(BUNDLED)}")
    path = DATA_DIR / BUNDLED[name]
    if not path.is_file():
        raise DemoError(f"the bundled capture {path.name} is not installed in {DATA_DIR} (reinstall ktrace)")
    return path


def scenario(name: str = "skewed") -> dict:
    """What a bundled capture recorded: kernel, shape, world size, injected fault, device."""
    path = bundled_capture(name).with_suffix(".scenario.json")
    if not path.is_file():
        raise DemoError(f"{path.name} is not installed in {DATA_DIR} (reinstall ktrace)")
    return json.loads(path.read_text())


@dataclass(frozen=True)
class Outputs:
    """What :func:`analyse` wrote, and the report it built.

    Attributes:
        capture: the capture analysed.
        trace: the Perfetto trace (``ktrace open`` it).
        html: the self-contained HTML report.
        json: the report as JSON.
        report: the :class:`ktrace.analysis.Report`.
    """

    capture: Path
    trace: Path
    html: Path
    json: Path
    report: object


def analyse(capture: str | os.PathLike, out_dir: str | os.PathLike, *, stem: str | None = None, progress=None) -> Outputs:
    """Read a capture, write its Perfetto trace, HTML report and JSON report into ``out_dir``.

    The capture is read once; the trace and the report use the same clock alignment (the one
    the capture stores, else fitted from its calibration samples), and the report's times are
    those of the trace.

    Args:
        capture: a ``.ktrace`` file (merged over ranks, as ``ktrace run`` and ``cap.gather`` write).
        out_dir: created if needed.
        stem: file name stem of the outputs (default: the capture's).
        progress: called as each report step starts (``name, done, total``).

    Returns:
        :class:`Outputs`.

    Raises:
        ktrace.captures.CaptureError: the capture cannot be read.
        ktrace.analysis.AnalysisError: it cannot be analysed.
        DemoError: the output folder cannot be written.
    """
    import orjson

    from .analysis import ReportConfig, build_report, report_json
    from .captures import read_capture
    from .export import write_perfetto
    from .fileio import write_bytes

    src = Path(capture)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DemoError(f"cannot create the output folder {out}: {e}") from None
    from viewers.perfetto_open import served_url

    stem = stem or src.name.removesuffix(".ktrace")
    cap = read_capture(src)
    # the report knows where its trace will be: served by `ktrace open` (next_steps says how), so
    # every finding's link opens the trace at the finding
    rep = build_report(cap, ReportConfig(trace_url=served_url(out / f"{stem}.pftrace")), progress=progress)
    rep.summary.source = str(src)  # the file, not "<capture>", in every rendering
    rep.source = str(src)
    from viewers.report import write_html

    try:
        trace = write_perfetto(cap, out / f"{stem}.pftrace")
        html = write_html(rep, out / f"{stem}.report.html")
        js = write_bytes(out / f"{stem}.report.json",
                         orjson.dumps(report_json(rep), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))
    except OSError as e:
        raise DemoError(f"cannot write into {out}: {e}") from None
    return Outputs(capture=src, trace=Path(trace), html=html, json=js, report=rep)


def next_steps(o: Outputs) -> str:
    """The lines printed after the summary: what was written and the command to look at it."""
    return "\n".join([
        "",
        f"Trace (all ranks on one clock): {o.trace}",
        f"HTML report:                    {o.html}",
        f"JSON report:                    {o.json}",
        "",
        "Next: open the trace in ui.perfetto.dev (served from this machine, nothing is uploaded; --offline: a Perfetto UI "
        "served from here too):",
        f"  ktrace open {shlex.quote(str(o.trace))}",
        "(while it serves the trace on port 9001, the report's links open it at each finding; it also prints a link per "
        "finding, from the report JSON next to the trace)",
        f"and the report in a browser: {o.html.resolve().as_uri()}",
    ])


def _cmd_demo(args) -> int:
    from viewers.terminal import report_text

    from .analysis import AnalysisError
    from .captures import CaptureError
    from .text import printable

    try:
        src = Path(args.capture) if args.capture and args.capture not in BUNDLED else bundled_capture(args.capture or "skewed")
        if not src.is_file():
            print(f"ktrace demo: {printable(src)}: no such capture file (bundled: {', '.join(BUNDLED)})", file=sys.stderr)
            return 2
        o = analyse(src, args.out)
    except (DemoError, CaptureError, AnalysisError, ValueError) as e:
        print(f"ktrace demo: {printable(' '.join(str(e).split()))}", file=sys.stderr)
        return 2
    if src.parent == DATA_DIR:
        try:
            sc = scenario(next(k for k, v in BUNDLED.items() if v == src.name))
            if "description" in sc:
                print(f"Bundled capture: {sc['description']}\n")
            else:
                print(f"Bundled capture: {sc.get('kernel')} on {sc.get('world_size')} x {sc.get('device')}, "
                      f"shape {_shape_text(sc.get('shape', {}))}, fault {_fault_text(sc.get('fault', {}))}\n")
        except (DemoError, StopIteration, ValueError):
            pass
    print(report_text(o.report, verbose=args.verbose, max_findings=args.max_findings))
    print(next_steps(o))
    return 0


def _shape_text(shape: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in shape.items() if k != "name") or "?"


def _fault_text(f: dict) -> str:
    parts = []
    if f.get("delay_rank", -1) >= 0:
        parts.append(f"rank {f['delay_rank']} delays each notify by {f['delay_ns'] / 1e3:g} µs")
    if f.get("skip_rank", -1) >= 0:
        parts.append(f"rank {f['skip_rank']} skips notify {f['skip_notify']}")
    return "; ".join(parts) or "none"


def report_arguments(s: argparse.ArgumentParser) -> None:
    """The options of a command that prints a report as ``report_text`` does (demo, run, record)."""
    s.add_argument("--max-findings", type=int, default=10, help="findings printed with -v (default 10)")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="every finding's full paragraph and the headline numbers (default: the first screen)")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``demo`` to the ``ktrace`` command's subparsers."""
    s = subparsers.add_parser(
        "demo", help="analyse a real 4-GPU capture shipped with ktrace: trace + report, no GPU needed",
        description="Analyse a capture bundled with ktrace (recorded on 4 H200s from the skewed MoE all-to-all): "
                    "print the report, write the Perfetto trace and the HTML/JSON report into --out, and say how "
                    "to open them. Needs no GPU.")
    s.add_argument("capture", nargs="?", default=None,
                   help=f"a bundled capture ({', '.join(BUNDLED)}; default skewed) or a .ktrace file")
    s.add_argument("--out", default=DEFAULT_DEMO_OUT, metavar="DIR", help=f"output folder (default ./{DEFAULT_DEMO_OUT})")
    report_arguments(s)
    s.set_defaults(func=_cmd_demo)
