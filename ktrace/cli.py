"""The ``ktrace`` command. Only the command line's modules (this one, ``ktrace.demo`` and
``ktrace.run``, which add their subcommands here) parse arguments and print.

``ktrace info``, ``merge``, ``open``, ``report`` and ``diff`` work on saved captures with no GPU
and without importing torch or triton. Progress goes to stderr (a bar when stderr is a
terminal), results to stdout; ``--json -`` writes a report's JSON to stdout instead of its
summary.

Bad input (a missing, foreign, truncated or damaged capture, a device or FIFO, metadata that
claims more than the file holds, parts of different runs, an output that would overwrite an
input or cannot be written) gets one line on stderr naming the file and what is wrong, and exit
status 2; nothing is written then (outputs go through temporaries renamed into place:
``ktrace.fileio``). Names from a capture are printed with their control characters escaped
(``ktrace.text.printable``). Ctrl-C ends quietly with status 130 and SIGTERM with 143, what was
being written removed. Output into a pipe closed early (``ktrace report X | head -1``) ends
quietly with status 141, as a process stopped by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import orjson

from . import __version__

#: Exit status of bad input (one line on stderr says what is wrong).
EXIT_BAD_INPUT = 2
#: Exit status when stdout was closed early (128 + SIGPIPE, what a shell shows for such a process).
EXIT_CLOSED_PIPE = 141
#: Exit status after Ctrl-C (128 + SIGINT) and after SIGTERM (128 + SIGTERM): outputs not finished
#: are removed, nothing else is said.
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


class _Terminated(BaseException):
    """Raised in the main thread by SIGTERM, so that every ``finally`` (temporaries) runs."""


def _fail(prog: str, e: BaseException | str, path: str | os.PathLike | None = None) -> int:
    """Print one line ``prog: [path: ]message`` on stderr and return :data:`EXIT_BAD_INPUT`; the
    path is added when the message does not name it already."""
    from .text import printable

    text = " ".join(str(e).split()) or type(e).__name__
    if path is not None and str(path) not in text:
        text = f"{path}: {text}"
    print(f"{prog}: {printable(text)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file (an existing one, through links too, or one path)."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def _refuse_overwrite(prog: str, inputs, outputs) -> int | None:
    """:data:`EXIT_BAD_INPUT` (with its line) when an output would overwrite an input, else None."""
    for out in outputs:
        if out is None or out == "-":
            continue
        for src in inputs:
            if src is not None and _same_file(src, out):
                return _fail(prog, f"the output {out} is the input {src}: refusing to write over it (choose another output)")
    return None


def _cmd_info(args) -> int:
    import numpy as np

    from .captures import CaptureError, read_capture
    from .schema import EventKind

    from .decode import impossible_times
    from .events import is_raw
    from .schema import is_timeout
    from .probe_cost import capture_lines
    from .text import MEASURES, count_text, printable as pr, programs_text, ranges_text

    path = args.capture
    try:
        cap = read_capture(path)
        run = f", run {pr(cap.run_id)}" if cap.run_id else ", no run id (written by an older ktrace)"
        part = f" (PARTIAL: ranks {ranges_text(cap.missing_ranks)} missing)" if cap.partial else ""
        lines = [f"{pr(path)}: world size {cap.world_size}, ranks {ranges_text(cap.ranks) or 'none'}{part}{run}, "
                 f"{count_text('launches', cap.n_launches)} ({MEASURES['launches'][1]})"]
        n_events = 0
        lines += [f"  note: {pr(n)}" for n in cap.notes]
        lines += [f"  {x}" for x in capture_lines(cap.meta)]  # (what ktrace.cost measured beside it)
        timed_out = 0
        for r, rc in sorted(cap.ranks.items()):
            dev = pr(rc.device.get("name", "?"))
            lines.append(f"  rank {r} on {dev} ({pr(rc.device.get('arch', '?'))}): {count_text('launches', len(rc.launches))}")
            lines += [f"    note: {pr(n)}" for n in rc.notes]
            if rc.timeouts and rc.timeouts.get("count"):
                lines.append(f"    {pr(rc.timeouts['count'])} wait(s) TIMED OUT during the capture (the heap's error block):")
                lines += [pr(f"      program {w.get('program')} waited on flag {w.get('flag')} from peer {w.get('peer')} for "
                             f"{_num(w.get('waited_ns')) / 1e6:.3f} ms (last saw {w.get('seen')}, waited for {w.get('cmp')} "
                             f"{w.get('expected')})") for w in (rc.timeouts.get("waits") or []) if isinstance(w, dict)]
            for ln in rc.launches:
                d = ln.decode(r, cache=False)
                ev = d.events
                kinds = np.bincount(ev["kind"], minlength=16)
                parts = ", ".join(f"{kinds[k]} {EventKind(k).name.lower()}" for k in EventKind if k and kinds[k])
                ring = (ln.meta or {}).get("ring_slots") or ((ln.meta or {}).get("live") or {}).get("ring_slots")
                if ring:  # ring mode (the flight recorder): the oldest records make room, by design
                    drop = f", {d.dropped} older records overwritten (each lane keeps its last {ring})" if d.dropped else ""
                else:
                    drop = f", {d.dropped} DROPPED (raise events_per_program above {ln.capacity})" if d.dropped else ""
                to = (ev["kind"] == EventKind.WAIT) & is_timeout(ev["flags"])
                n_to = int(to.sum())
                timed_out += n_to
                tos = ""
                if n_to:
                    peers = np.unique(ev["arg0"][to])
                    tos = (f"; {n_to} wait(s) TIMED OUT (gave up at their bound): {programs_text(ev['program'][to])} waiting on "
                           f"{'peer' if peers.size == 1 else 'peers'} {ranges_text(peers[:1000])}")
                bad = impossible_times(ln.load_raw(), cap.world_size, raw=is_raw(ln))
                bad = f"; IMPOSSIBLE times, left out of analyses: {bad}" if bad else ""
                n_events += int(d.written)
                lines.append(f"    launch {ln.index} {pr(ln.kernel)} grid {tuple(ln.grid)}: {count_text('events', d.written)} "
                             f"({parts or 'none'}){drop}{tos}{bad}")
        lines[0] += f", {count_text('events', n_events)}"
        if timed_out:
            lines.append(f"  {timed_out} wait(s) timed out in all: the capture shows a hang (ktrace report says who waited on whom)")
    except (CaptureError, ValueError, OSError) as e:
        return _fail("ktrace info", e, path)
    print("\n".join(lines))
    return 0


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")


def _cmd_merge(args) -> int:
    from .captures import CaptureError, merge_captures, read_capture
    from .clock import attach_clock
    from .text import ranges_text
    from .export import format_of

    from .text import printable

    refused = _refuse_overwrite("ktrace merge", args.captures, [args.output])
    if refused is not None:
        return refused
    try:
        fmt = args.format or format_of(args.output)
    except ValueError as e:
        return _fail("ktrace merge", e)
    try:
        caps = []
        for p in args.captures:
            caps.append(read_capture(p))
        cap = merge_captures(caps, world_size=args.world_size, allow_mixed_runs=args.allow_mixed_runs)
        try:
            attach_clock(cap)
        except CaptureError:
            raise  # (a damaged buffer, read for its timer rate: the message says which)
        except ValueError as e:
            raise CaptureError(f"clock calibration samples: {e}") from None
        if args.with_profile is not None:
            return _merge_profile(cap, args, fmt)
        named = (cap.meta or {}).get("profile")
        if named:
            print(f"ktrace merge: the capture names its profiler trace ({', '.join(named.values())}): add --with-profile to "
                  "merge it into the trace", file=sys.stderr)
    except (CaptureError, ValueError, OSError) as e:
        return _fail("ktrace merge", e)
    try:
        cap, out = _write_selected(cap, args, fmt)
    except OSError as e:  # the output (a full disk, a missing folder): the message names it
        return _fail("ktrace merge", e, args.output)
    except (CaptureError, ValueError) as e:
        return _fail("ktrace merge", e)
    part = f"; PARTIAL: ranks {ranges_text(cap.missing_ranks)} missing" if cap.partial else ""
    clock = (cap.clock or {}).get("method", "none")
    what = f"ranks {ranges_text(cap.ranks)} of {cap.world_size}, {_launches_text(cap)}, clock {printable(clock)}{part}"
    if str(out).endswith(".index.json") and Path(out) != Path(args.output):  # (parts were written, and their index)
        from .export.split import read_index

        _, parts = read_index(out)
        print(f"{printable(out)}: {fmt} trace in {len(parts)} part{'s' if len(parts) != 1 else ''} (open the index with "
              f"ktrace open), {what}")
        return 0
    print(f"{printable(out)}: {fmt}, {what}")
    return 0


def _merge_profile(cap, args, fmt: str) -> int:
    """``ktrace merge --with-profile``: the capture and the PyTorch profiler's trace as one Perfetto
    trace (``ktrace.export.profile``); prints each rank's alignment."""
    from .export.profile import profiles_of, write_merged
    from .text import printable

    if fmt != "perfetto":
        raise ValueError("--with-profile writes a Perfetto trace: use an output ending in .pftrace")
    if args.split or args.ranks or args.launches or args.window:
        raise ValueError("--with-profile writes the whole capture: it does not combine with --split/--ranks/--launches/--window")
    refused = _refuse_overwrite("ktrace merge", args.with_profile, [args.output])
    if refused is not None:
        return refused
    profiles = profiles_of(cap, args.with_profile, args.captures[0])
    out, aligned = write_merged(cap, args.output, profiles)
    print(f"{printable(out)}: perfetto, the capture ({_launches_text(cap)}) inside the profiler's timeline of "
          f"{len(profiles)} rank(s)")
    for a in aligned.values():
        print(f"  {a.describe()}")
    return 0


def _launches_text(cap) -> str:
    """How many launches a capture holds, counted and labelled as ``info`` and ``report`` do."""
    from .text import count_text

    return count_text("launches", cap.n_launches)


def _write_selected(cap, args, fmt: str):
    """Write ``cap`` (or the selection ``--ranks``/``--launches``/``--window`` of it) as ``fmt``, in
    parts with an index when asked (``--split``) or when one trace would be too large for the
    Perfetto UI; returns what was written from and the path written (a trace, or the index)."""
    from .export import write_trace
    from .export.formats import get
    from .export.split import estimate_bytes, parse_ints, parse_window, select, write_split

    top_rank = max(cap.ranks, default=0)
    top_launch = max((ln.index for rc in cap.ranks.values() for ln in rc.launches), default=0)
    ranks, launches = parse_ints(args.ranks, upper=top_rank), parse_ints(args.launches, upper=top_launch)
    window = parse_window(args.window)
    form = get(fmt)
    if ranks is not None or launches is not None or window is not None:
        if not form.ui:
            raise ValueError("--ranks/--launches/--window select what a trace shows: write a .pftrace or .json")
        cap = select(cap, ranks=ranks, launches=launches, window=window)
    budget = int(args.part_mb * (1 << 20)) if args.part_mb else form.part_bytes
    if budget is not None and budget < 1:
        raise ValueError(f"--part-mb {args.part_mb}: give a positive size in MB")
    estimate = estimate_bytes(cap, fmt) if form.split and not args.split else 0
    if form.split and (args.split or estimate > budget):
        if not args.split:
            print(f"ktrace merge: the trace would be about {estimate / 1e6:.0f} MB, more than a part "
                  f"({budget / 1e6:.0f} MB, what the Perfetto UI opens comfortably unless --part-mb says otherwise): "
                  f"writing it in parts with an index", file=sys.stderr)
        return cap, write_split(cap, args.output, fmt, part_bytes=budget)
    return cap, write_trace(cap, args.output, fmt)


def _cmd_export(args) -> int:
    from .analysis import AnalysisError
    from .captures import CaptureError
    from .export.parquet import ParquetUnavailable, check_out_dir, export_parquet
    from .fileio import OutputError

    out = Path(args.out_dir)
    refused = _refuse_overwrite("ktrace export", [args.capture], [out])
    if refused is not None:
        return refused
    try:
        check_out_dir(out)  # (said before any work)
        m = export_parquet(args.capture, out)
    except ParquetUnavailable as e:
        return _fail("ktrace export", e)
    except OutputError as e:  # (a table that could not be written: a full disk is the output's, not the capture's)
        return _fail("ktrace export", e)
    except (CaptureError, AnalysisError) as e:
        return _fail("ktrace export", e, args.capture)
    except (ValueError, OSError) as e:
        return _fail("ktrace export", e, None if str(out) in str(e) else args.capture)
    print(f"{out}: " + ", ".join(f"{t}.parquet ({n} rows)" for t, n in m["rows"].items()))
    return 0


def _cmd_open(args) -> int:
    import tempfile

    from .fileio import InputError, regular_input

    try:
        regular_input(args.trace, "trace file")
        if args.report:
            regular_input(args.report, "report")
    except InputError as e:
        return _fail("ktrace open", e)
    beside = None
    if args.report is None and args.finding is None:  # a report next to the trace (ktrace demo, run): a link per finding
        near = Path(args.trace).with_name(Path(args.trace).name.split(".")[0] + ".report.json")
        if near.is_file():
            beside = str(near)
    if args.finding is not None and not args.report:
        return _fail("ktrace open", "--finding needs --report REPORT.json (ktrace report --json)")
    report = None
    if args.report or beside:  # (one named on the command line must be right; one found beside the trace may not block it)
        from viewers.perfetto_open import load_report

        from .text import printable

        try:
            report = load_report(args.report or beside)
        except ValueError as e:
            if args.report:
                return _fail("ktrace open", e)
            print(f"ktrace open: {printable(' '.join(str(e).split()))}: the report found beside the trace is left out "
                  "(no links to its findings)", file=sys.stderr)
    from .export.formats import formats

    form = next((f for f in formats().values() if args.trace.lower().endswith(f.extensions)), None)
    if form is None or form.ui:  # (a trace the UI opens, or a split trace's index)
        return _open(args, args.trace, report=report)
    if form.name != "ktrace":
        ui = [e for f in formats().values() if f.ui for e in f.extensions]
        return _fail("ktrace open", f"{args.trace}: a {form.name} file, not a trace the Perfetto UI opens ({', '.join(ui)}) "
                     "nor a capture (.ktrace)")
    # a capture: its Perfetto trace is written to a temporary folder, served, and removed at the end
    from .captures import CaptureError, read_capture
    from .export import write_perfetto

    with tempfile.TemporaryDirectory(prefix="ktrace-open-") as tmp:
        try:
            cap = read_capture(args.trace)
            trace = write_perfetto(cap, Path(tmp) / (Path(args.trace).name.removesuffix(".ktrace") + ".pftrace"))
        except (CaptureError, ValueError, OSError) as e:
            return _fail("ktrace open", e, args.trace)
        del cap
        note = (f"{Path(args.trace).name}: a capture; its Perfetto trace is served (written to a temporary folder, removed when "
                "this ends; `ktrace merge CAPTURE -o X.pftrace` keeps one)")
        return _open(args, str(trace), note, report=report)


def _open(args, trace: str, note: str | None = None, report=None) -> int:
    """Serve ``trace`` (or the part of a split trace that holds the finding asked for), with links
    from ``report`` (a checked report document, ``viewers.perfetto_open.load_report``)."""
    import errno

    from viewers.perfetto_open import UiBuildNotFound, finding_windows, open_trace

    from .text import printable

    window, links = None, {}
    try:
        if report is not None:
            windows = finding_windows(report, args.finding)
            if args.finding is not None:
                window = windows[args.finding]
            else:
                links = {f"finding {n}": w for n, w in windows.items()}
        if trace.endswith(".index.json"):  # a split trace: the part that holds the finding (else the first)
            from .export.split import part_for, read_index

            _, parts = read_index(trace)
            if not parts:
                raise ValueError(f"{trace}: the index names no part")
            ranks = list(report.findings[args.finding - 1].ranks) if report is not None and args.finding is not None else []
            part = parts[0] if window is None else part_for(parts, *window, ranks)
            others = ", ".join(Path(p.file).name for p in parts if p is not part)
            print(f"{printable(Path(trace).name)}: {len(parts)} parts; opening {printable(Path(part.file).name)} (ranks "
                  f"{part.ranks[0]}..{part.ranks[-1]}, launches {part.launches[0]}..{part.launches[-1]})"
                  + (f"; the others: {printable(others)}" if others else ""))
            trace = part.file
            links = {k: w for k, w in links.items() if part.start_ns <= w[0] and w[1] <= part.end_ns}
    except (OSError, ValueError) as e:
        return _fail("ktrace open", e)
    offline = True if args.offline else (False if args.online else None)
    try:
        said = []

        def echo(text: str) -> None:  # (the note once the server is up: a port in use is then the only line)
            if note and not said:
                said.append(print(note, file=sys.stderr))
            print(text)

        got = open_trace(trace, port=args.port, browser=not args.no_browser, timeout=args.timeout or None,
                         offline=offline, window=window, links=links, echo=echo)
    except UiBuildNotFound as e:
        return _fail("ktrace open", f"--offline: {e}")
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return _fail("ktrace open", f"port {args.port} on 127.0.0.1 is in use (another ktrace open?): stop that one, or "
                                       "pass --port N for another port (--port 0 picks a free one; ui.perfetto.dev "
                                       "accepts traces from any loopback port)")
        if e.errno is None or e.filename:  # (a file to serve, not the port: the message names it)
            return _fail("ktrace open", e if e.errno is None else f"{e.filename}: {e.strerror or e}")
        return _fail("ktrace open", f"cannot serve on 127.0.0.1:{args.port}: {e.strerror or e}")
    return 0 if got or not args.timeout else 1


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


def _write_json(dest: str, data: dict, indent: bool = False) -> None:
    from .fileio import write_bytes

    # (compact unless asked: an indented report is three quarters whitespace)
    blob = orjson.dumps(data, option=(orjson.OPT_INDENT_2 if indent else 0) | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    if dest == "-":
        sys.stdout.write(blob.decode() + "\n")
    else:
        write_bytes(dest, blob)


def _emit(prog: str, args, as_json, as_text, write_html, what: str) -> int | None:
    """Print a report's (or diff's) text and write its ``--json``/``--html`` outputs; the status
    of an output that cannot be written (its one line names it), else None."""
    from .text import printable

    try:
        if args.json:
            _write_json(args.json, as_json(), getattr(args, "indent", False))
        if args.json != "-":
            print(as_text())
        if args.html:
            out = write_html(args.html)
            print(f"HTML {what}: {printable(out)}", file=sys.stderr if args.json == "-" else sys.stdout)
    except BrokenPipeError:
        raise
    except OSError as e:
        return _fail(prog, e)
    if args.json and args.json != "-":
        print(f"JSON {what}: {printable(args.json)}")
    return None


def _check_outputs(prog: str, outputs) -> int | None:
    """:data:`EXIT_BAD_INPUT` (with its line) when an output's folder is missing or not writable,
    or the output is a folder: said before any work, not after it."""
    for out in outputs:
        if out is None or out == "-":
            continue
        p = Path(out)
        folder = p.parent
        if p.is_dir():
            return _fail(prog, f"cannot write {out}: it is a folder")
        if not folder.is_dir():
            return _fail(prog, f"cannot write {out}: no folder {folder}")
        if not os.access(folder, os.W_OK | os.X_OK):
            return _fail(prog, f"cannot write {out}: the folder {folder} is not writable")
    return None


def _check_work_region(path, name: str | None) -> None:
    """ValueError when ``--work-region`` names no region of the capture (the message lists them)."""
    if name is None:
        return
    from .captures import read_capture
    from .text import printable

    names = sorted(set(read_capture(path).regions.values()))
    if name not in names:
        listed = ", ".join(printable(n) for n in names[:30]) + (f" and {len(names) - 30} more" if len(names) > 30 else "")
        raise ValueError(f"--work-region {name!r}: the capture has no region of that name; its regions: {listed or 'none'}")


def _live(path):
    """The wait-for graph of a live dump (``ktrace.analysis.live``); None for other captures."""
    from .analysis.live import live_report
    from .captures import read_capture

    return live_report(read_capture(path))


def _cmd_report(args) -> int:
    from .analysis import AnalysisError, LoadConfig, ReportConfig, build_report, report_json
    from .captures import CaptureError

    path = args.capture
    if path is None:
        from .demo import DemoError, bundled_capture

        try:
            path = str(bundled_capture())
        except DemoError as e:
            return _fail("ktrace report", e)
        print(f"ktrace report: no capture given: analysing the bundled example ({path}; `ktrace demo` also writes "
              "its trace)", file=sys.stderr)
    refused = _refuse_overwrite("ktrace report", [path], [args.html, args.json]) or _check_outputs("ktrace report", [args.html, args.json])
    if refused is not None:
        return refused
    if not (args.min_late_us >= 0 and args.min_late_us < 1e9) or args.max_findings < 0:
        return _fail("ktrace report", "--min-late-us wants a time in µs >= 0 and --max-findings a count >= 0")
    try:
        _check_work_region(path, args.work_region)
        cfg = ReportConfig(load=LoadConfig(work_region=args.work_region), trace_url=args.trace_url,
                           min_late_ns=args.min_late_us * 1e3, skip_warmup=args.skip_warmup)
        rep = build_report(path, cfg, progress=_Bar(not args.quiet))
        live = _live(path) if rep.trace is None or rep.trace.live else None  # (a live dump's: read again)
    except (CaptureError, AnalysisError, ValueError) as e:
        return _fail("ktrace report", e, path)
    from viewers.report import write_html
    from viewers.terminal import report_text

    # (a live dump: the wait-for graph at the dump comes first, and goes into the JSON)
    failed = _emit("ktrace report", args, lambda: report_json(rep) | ({"live": live.to_json()} if live else {}),
                   lambda: ("\n".join(live.lines()) + "\n\n" if live is not None else "")
                   + report_text(rep, verbose=args.verbose, max_findings=args.max_findings),
                   lambda path: write_html(rep, path), "report")
    if failed is not None:
        return failed
    return 1 if any(f.kind == "hang" and f.severity == "error" for f in rep.findings) and args.fail_on_hang else 0


def _cmd_diff(args) -> int:
    from viewers.text import render_diff_text

    from .analysis import AnalysisError, build_diff, diff_json, prepare
    from .captures import CaptureError

    refused = _refuse_overwrite("ktrace diff", [args.a, args.b], [args.html, args.json]) or _check_outputs("ktrace diff", [args.html, args.json])
    if refused is not None:
        return refused
    traces = []
    for path in (args.a, args.b):  # one at a time: a damaged capture is named
        try:
            traces.append(prepare(path))
        except (CaptureError, AnalysisError, ValueError) as e:
            return _fail("ktrace diff", e, path)
    try:
        d = build_diff(*traces, progress=_Bar(not args.quiet), top=args.top)
    except (CaptureError, AnalysisError, ValueError) as e:
        return _fail("ktrace diff", e)
    from viewers.report import write_diff_html
    from viewers.terminal import render_diff, use_color

    return _emit("ktrace diff", args, lambda: diff_json(d),
                 lambda: render_diff_text(d) if args.verbose else render_diff(diff_json(d), color=use_color(sys.stdout)),
                 lambda path: write_diff_html(d, path), "diff") or 0


def _register_analysis(subparsers: argparse._SubParsersAction) -> None:
    """Add ``report`` and ``diff`` to the ``ktrace`` command's subparsers."""
    s = subparsers.add_parser(
        "report", help="find spin-lock stalls and their cause, uneven workgroup load, exposed communication and hangs",
        description="Analyse a capture: findings first, in plain words (most costly first), then the headline numbers. "
                    "With no capture, the bundled example (the skewed MoE all-to-all recorded on 4 H200s) is analysed. "
                    "Exit status: 0, 1 with --fail-on-hang when a hang is found, 2 for a capture that cannot be read "
                    "(one line on stderr says why).")
    s.add_argument("capture", nargs="?", default=None,
                   help="a .ktrace capture file (merged over ranks; default: the bundled example capture)")
    s.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report (plots, ranked findings)")
    s.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-': to stdout, instead of the summary)")
    s.add_argument("--indent", action="store_true", help="with --json: indent the JSON (default: compact)")
    s.add_argument("--trace-url", metavar="URL", help="where this capture's trace is served, for the Perfetto links")
    s.add_argument("--work-region", metavar="NAME", help="region whose spans count as work items (default: the most frequent)")
    s.add_argument("--min-late-us", type=_float_in(0, 1e9), default=1.0, metavar="US",
                   help="name a producer a straggler only when it is at least this late (default 1 µs)")
    s.add_argument("--max-findings", type=_int_in(0, 1 << 20), default=10,
                   help="findings printed (default 10; --json and --html hold them all)")
    s.add_argument("--skip-warmup", type=_int_in(0, 1 << 31), default=None, metavar="N",
                   help="leave the first N launches of each kernel out as warm-up (0: keep every launch; default: the "
                        "launches the capture marks as warm-up, else a kernel's first launch when it ran slow)")
    s.add_argument("--fail-on-hang", action="store_true", help="exit 1 when the capture shows a hang")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="every finding in full and the capture's numbers (default: the verdict and the first headlines)")
    s.set_defaults(func=_cmd_report)

    d = subparsers.add_parser("diff", help="compare two captures of the same kernel: biggest movers first",
                              description="Per region, rank and workgroup: time per launch in A and B, biggest change "
                                          "first. Exit status 2 when either capture cannot be read (one line says which).")
    d.add_argument("a", help="the capture before (A)")
    d.add_argument("b", help="the capture after (B)")
    d.add_argument("--html", metavar="FILE", help="also write a self-contained HTML diff")
    d.add_argument("--json", metavar="FILE", help="also write the diff as JSON ('-': to stdout)")
    d.add_argument("--indent", action="store_true", help="with --json: indent the JSON (default: compact)")
    d.add_argument("--top", type=_int_in(0, 1 << 20), default=10, help="region movers listed (default 10)")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    d.add_argument("-v", "--verbose", action="store_true", help="every mover in full and the per-rank table")
    d.set_defaults(func=_cmd_diff)


def _number_in(cast, lo, hi):
    """An argparse type: a number (``cast``: int or float) in ``[lo, hi]``, finite (argparse's one
    line and status 2 otherwise)."""

    def parse(text: str):
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if cast is int else 'a number'}") from None
        if not lo <= v <= hi:  # (NaN fails too)
            raise argparse.ArgumentTypeError(f"{text} is outside {lo:g}..{hi:g}")
        return v

    return parse


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error said in one line (``ktrace merge: --port: ...``) and status 2."""

    def error(self, message: str):
        from .text import printable

        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {printable(' '.join(message.split()))} (see {self.prog} -h)\n")


def _int_in(lo: int, hi: int):
    return _number_in(int, lo, hi)


def _float_in(lo: float, hi: float):
    return _number_in(float, lo, hi)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="ktrace",
        description="Intra-kernel tracing for multi-GPU Triton kernels: inspect, merge, view and analyse captures.",
        epilog="Exit status 2: bad input, or no command (one line on stderr names the file and what is wrong; nothing is "
               "written). Ctrl-C: 130, SIGTERM: 143 (unfinished outputs removed). Output into a pipe closed early ends "
               "quietly with status 141.",
    )
    p.add_argument("--version", action="version", version=f"ktrace {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    s = sub.add_parser("info", help="summarise a capture file: run, ranks, launches, events per kind, drops, timed-out waits",
                       description="Summarise a capture: its run id, ranks (and which are missing), each launch's events "
                                   "per kind and drops, waits that timed out and notes on how it was made. Every buffer "
                                   "is read and checked: a damaged one is exit status 2, with one line saying where.")
    s.add_argument("capture", help="a .ktrace capture file")
    s.set_defaults(func=_cmd_info)
    s = sub.add_parser("merge", help="merge per-rank captures of one run into one capture or trace (format by suffix)",
                       description="Merge per-rank captures of one run into one capture or trace, with the clock model "
                                   "fitted from every rank's calibration samples (all ranks on one clock). Parts of "
                                   "different runs are refused (unless --allow-mixed-runs); missing ranks make the "
                                   "result PARTIAL, and it says which. The output may not be one of the inputs.")
    s.add_argument("captures", nargs="+", help="per-rank .ktrace files")
    s.add_argument("-o", "--output", required=True, help="out.ktrace | out.pftrace | out.json | out.json.gz")
    from .export.formats import Names

    s.add_argument("--format", choices=Names(), metavar="FORMAT",
                   help="override the format the suffix implies (%(choices)s: ktrace.export.formats)")
    s.add_argument("--world-size", type=_int_in(1, 1 << 16),  # (captures.file.MAX_WORLD_SIZE)
                   help="expected number of ranks (default: what the files say)")
    s.add_argument("--allow-mixed-runs", action="store_true",
                   help="merge parts of different runs anyway (their notify/wait pairs then mean nothing)")
    s.add_argument("--ranks", metavar="LIST", help="a trace of these ranks only (e.g. 0-7,12)")
    s.add_argument("--launches", metavar="LIST", help="a trace of these launch indices only, on every rank (e.g. 10-19)")
    s.add_argument("--window", metavar="START:END", help="a trace of the launches that overlap this window (µs since the capture's first event)")
    s.add_argument("--split", action="store_true",
                   help="write the trace in parts with an index (automatic when one trace would exceed the part size)")
    s.add_argument("--part-mb", type=_float_in(0.001, 1e7), metavar="MB",
                   help="largest part of a split trace (default 512 for .pftrace, 256 for .json: what the Perfetto UI opens)")
    s.add_argument("--with-profile", nargs="*", metavar="KINETO.json",
                   help="the PyTorch profiler's Chrome trace(s) of the same run (one per rank; none named: those the capture "
                        "names, recorded with ktrace.capture(profiler=prof)): one .pftrace with the profiler's CPU operators, "
                        "CUDA calls and GPU streams, each traced launch's lanes under its CUPTI kernel, aligned per rank")
    s.set_defaults(func=_cmd_merge)
    s = sub.add_parser("export", help="write a capture's tables (events, waits, workgroups, findings) as Parquet files",
                       description="Write a capture's tables into a directory as Apache Parquet files: the aligned events "
                                   "(names resolved; written in batches, memory bounded), the waits with the notify that "
                                   "released each and why it waited, the workgroups, the root causes and the findings "
                                   "(schema: docs/parquet.md). Needs pyarrow (pip install 'ktrace[parquet]').")
    s.add_argument("capture", help="a .ktrace capture file (merged over ranks)")
    s.add_argument("out_dir", metavar="DIR", help="the directory to write (created; empty, or a previous export's)")
    s.add_argument("--format", choices=["parquet"], default="parquet", help="the tables' format (parquet)")
    s.set_defaults(func=_cmd_export)
    s = sub.add_parser("open", help="serve a trace on 127.0.0.1 and open it in the Perfetto UI (until Ctrl-C)",
                       description="Serve a trace on 127.0.0.1 until Ctrl-C and open it in the Perfetto UI: ui.perfetto.dev, "
                                   "or, with --offline or when ui.perfetto.dev cannot be reached, a Perfetto UI build served "
                                   "from this machine (pip install 'ktrace[offline]').")
    s.add_argument("trace", help="a .pftrace or .json[.gz] trace, the index of a split trace (.index.json), or a .ktrace "
                                 "capture (its trace is written to a temporary folder and served)")
    s.add_argument("--port", type=_int_in(0, 65535), default=9001,
                   help="loopback port (default 9001, which ui.perfetto.dev allows; 0: a free one)")
    s.add_argument("--no-browser", action="store_true", help="only print the link")
    s.add_argument("--timeout", type=_float_in(0, 1e7), default=0,
                   help="stop after this many seconds without a request (default 0: never)")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--offline", action="store_true", help="serve the Perfetto UI from this machine too (no internet needed)")
    where.add_argument("--online", action="store_true", help="use ui.perfetto.dev without checking that it can be reached")
    s.add_argument("--report", metavar="REPORT.json", help="a report of this trace's capture (ktrace report --json): print a link per finding")
    s.add_argument("--finding", type=_int_in(1, 1 << 31), metavar="N",
                   help="with --report: open at finding N's time range (numbered as ktrace report prints them)")
    s.set_defaults(func=_cmd_open)
    _register_analysis(sub)  # report, diff
    from .demo import register as _register_demo
    from .run import register as _register_run

    from .record import register as _register_record

    _register_demo(sub)  # demo
    _register_run(sub)  # run
    _register_record(sub)  # record (kernels traced without edits)
    from .dump import register as _register_dump

    _register_dump(sub)  # dump (the flight recorder's live dumps)
    return p


#: Seconds the cleanup after Ctrl-C or SIGTERM may take before the process ends regardless.
_CLEANUP_S = 20


def _last_resort(status: int) -> None:
    """End the process with ``status`` if its cleanup has not ended it within :data:`_CLEANUP_S`."""
    import threading

    t = threading.Timer(_CLEANUP_S, os._exit, (status,))
    t.daemon = True
    t.start()


def _on_sigterm(signum, frame) -> None:
    _last_resort(EXIT_TERMINATED)
    raise _Terminated()


def _on_sigint(signum, frame) -> None:
    _last_resort(EXIT_INTERRUPTED)
    raise KeyboardInterrupt


def _unraisable(hook) -> None:
    """Ctrl-C or SIGTERM that landed in a callback the interpreter runs for itself (an import
    lock's, a weakref's, ``threading``'s at exit) would be printed as "Exception ignored" and
    lost: it is raised again in the main thread instead."""
    import _thread
    import signal

    if isinstance(hook.exc_value, KeyboardInterrupt):
        _thread.interrupt_main(signal.SIGINT)
    elif isinstance(hook.exc_value, _Terminated):
        _thread.interrupt_main(signal.SIGTERM)
    else:
        sys.__unraisablehook__(hook)


def _settled(status: int) -> int:
    """The process's exit status, with Ctrl-C and SIGTERM blocked from here to its end: the
    interpreter's finalization gives them back their default action, so one landing then would
    end the process by the signal (-2, -15) or print a traceback. One that came before the block,
    its handler not run yet, gives 130 or 143."""
    import signal

    late: list[int] = []
    try:
        if signal.getsignal(signal.SIGINT) is _on_sigint:
            signal.signal(signal.SIGINT, lambda s, f: late.append(EXIT_INTERRUPTED))
        signal.signal(signal.SIGTERM, lambda s, f: late.append(EXIT_TERMINATED))
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        for _ in range(2):  # (the handlers of signals delivered before the block run here, recording)
            pass
    except KeyboardInterrupt:
        late.append(EXIT_INTERRUPTED)
    except _Terminated:
        late.append(EXIT_TERMINATED)
    return late[0] if late and status not in (EXIT_INTERRUPTED, EXIT_TERMINATED) else status


def main(argv: list[str] | None = None) -> int:
    """The ``ktrace`` command; returns its exit status.

    Exit status: 0 done; 1 what a command says (``report --fail-on-hang``); 2 bad input or an
    output that cannot be written (one line on stderr naming the file), or no command given;
    130 after Ctrl-C and 143 after SIGTERM (quietly: unfinished outputs removed); 141 when stdout
    was closed early.
    """
    if argv is not None:  # (a caller's program: its signals are its own)
        return _main(argv)
    try:
        status = _main(None)
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    except _Terminated:
        status = EXIT_TERMINATED
    return _settled(status)


def _main(argv: list[str] | None) -> int:
    import signal

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    if argv is None:  # the `ktrace` process itself (not a caller's program): reuse freed memory; SIGTERM cleans up
        from ._memory import keep_freed_memory

        keep_freed_memory()
        sys.unraisablehook = _unraisable
        signal.signal(signal.SIGTERM, _on_sigterm)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # (not where SIGINT is ignored: nohup, &)
            signal.signal(signal.SIGINT, _on_sigint)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()
    except BrokenPipeError:  # stdout closed early (`ktrace report X | head -1`): end quietly
        if argv is None:  # the process's own stdout: nothing more may reach it, at exit either
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):
                pass
        return EXIT_CLOSED_PIPE
    except KeyboardInterrupt:  # Ctrl-C: every `finally` has removed what was not finished
        return EXIT_INTERRUPTED
    except _Terminated:
        return EXIT_TERMINATED
    except MemoryError:
        return _fail(f"ktrace {args.cmd}", "out of memory (the input is larger than this machine can hold, or damaged)")
    return status


if __name__ == "__main__":
    sys.exit(main())
