"""The ``ktrace`` command. Only the command line's modules (this one, ``ktrace.demo`` and
``ktrace.run``, which add their subcommands here) parse arguments and print.

``ktrace info``, ``merge``, ``open``, ``report`` and ``diff`` work on saved captures with no GPU
and without importing torch or triton. Progress goes to stderr (a bar when stderr is a
terminal), results to stdout; ``--json -`` writes a report's JSON to stdout instead of its
summary.

Bad input (a missing, foreign, truncated or damaged capture, parts of different runs, an output
that would overwrite an input) gets one line on stderr naming the file and what is wrong, and
exit status 2; nothing is written then. Output into a pipe closed early (``ktrace report X |
head -1``) ends quietly with status 141, as a process stopped by SIGPIPE would.
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


def _fail(prog: str, e: BaseException | str, path: str | os.PathLike | None = None) -> int:
    """Print one line ``prog: [path: ]message`` on stderr and return :data:`EXIT_BAD_INPUT`; the
    path is added when the message does not name it already."""
    text = " ".join(str(e).split()) or type(e).__name__
    if path is not None and str(path) not in text:
        text = f"{path}: {text}"
    print(f"{prog}: {text}", file=sys.stderr)
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

    path = args.capture
    try:
        cap = read_capture(path)
        run = f", run {cap.run_id}" if cap.run_id else ", no run id (written by an older ktrace)"
        part = f" (PARTIAL: ranks {cap.missing_ranks} missing)" if cap.partial else ""
        lines = [f"{path}: world size {cap.world_size}, ranks {sorted(cap.ranks)}{part}{run}"]
        lines += [f"  note: {n}" for n in cap.notes]
        for r, rc in sorted(cap.ranks.items()):
            dev = rc.device.get("name", "?")
            lines.append(f"  rank {r} on {dev} ({rc.device.get('arch', '?')}): {len(rc.launches)} launches")
            lines += [f"    note: {n}" for n in rc.notes]
            if rc.timeouts and rc.timeouts.get("count"):
                lines.append(f"    {rc.timeouts['count']} wait(s) TIMED OUT during the capture:")
                lines += [f"      program {w.get('program')} waited on flag {w.get('flag')} from peer {w.get('peer')} for "
                          f"{w.get('waited_ns', 0) / 1e6:.3f} ms (last saw {w.get('seen')}, waited for {w.get('cmp')} "
                          f"{w.get('expected')})" for w in rc.timeouts.get("waits", [])]
            for ln in rc.launches:
                d = ln.decode(r, cache=False)
                kinds = np.bincount(d.events["kind"], minlength=16)
                parts = ", ".join(f"{kinds[k]} {EventKind(k).name.lower()}" for k in EventKind if k and kinds[k])
                ring = (ln.meta or {}).get("ring_slots") or ((ln.meta or {}).get("live") or {}).get("ring_slots")
                if ring:  # ring mode (the flight recorder): the oldest records make room, by design
                    drop = f", {d.dropped} older records overwritten (each lane keeps its last {ring})" if d.dropped else ""
                else:
                    drop = f", {d.dropped} DROPPED (raise events_per_program above {ln.capacity})" if d.dropped else ""
                lines.append(f"    launch {ln.index} {ln.kernel} grid {tuple(ln.grid)}: {d.written} events ({parts or 'none'}){drop}")
    except (CaptureError, ValueError, OSError) as e:
        return _fail("ktrace info", e, path)
    print("\n".join(lines))
    return 0


def _cmd_merge(args) -> int:
    from .captures import CaptureError, merge_captures, read_capture
    from .clock import attach_clock
    from .text import ranges_text
    from .export import format_of

    refused = _refuse_overwrite("ktrace merge", args.captures, [args.output])
    if refused is not None:
        return refused
    try:
        fmt = args.format or format_of(args.output)
    except ValueError as e:
        return _fail("ktrace merge", e)
    try:
        cap = merge_captures([read_capture(p) for p in args.captures], world_size=args.world_size,
                             allow_mixed_runs=args.allow_mixed_runs)
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
        cap, out = _write_selected(cap, args, fmt)
    except (CaptureError, ValueError, OSError) as e:
        return _fail("ktrace merge", e)
    n = sum(len(rc.launches) for rc in cap.ranks.values())
    part = f" PARTIAL: ranks {cap.missing_ranks} missing" if cap.partial else ""
    clock = (cap.clock or {}).get("method", "none")
    if str(out).endswith(".index.json"):
        from .export.split import read_index

        _, parts = read_index(out)
        print(f"{out}: {fmt} trace in {len(parts)} parts (open the index with ktrace open), ranks {ranges_text(cap.ranks)} of "
              f"{cap.world_size}, {n} launches, clock {clock}{part}")
        return 0
    print(f"{out}: {fmt}, ranks {ranges_text(cap.ranks)} of {cap.world_size}, {n} launches, clock {clock}{part}")
    return 0


def _merge_profile(cap, args, fmt: str) -> int:
    """``ktrace merge --with-profile``: the capture and the PyTorch profiler's trace as one Perfetto
    trace (``ktrace.export.profile``); prints each rank's alignment."""
    from .export.profile import profiles_of, write_merged

    if fmt != "perfetto":
        raise ValueError("--with-profile writes a Perfetto trace: use an output ending in .pftrace")
    if args.split or args.ranks or args.launches or args.window:
        raise ValueError("--with-profile writes the whole capture: it does not combine with --split/--ranks/--launches/--window")
    refused = _refuse_overwrite("ktrace merge", args.with_profile, [args.output])
    if refused is not None:
        return refused
    profiles = profiles_of(cap, args.with_profile, args.captures[0])
    out, aligned = write_merged(cap, args.output, profiles)
    n = sum(len(rc.launches) for rc in cap.ranks.values())
    print(f"{out}: perfetto, the capture ({n} launches) inside the profiler's timeline of {len(profiles)} rank(s)")
    for a in aligned.values():
        print(f"  {a.describe()}")
    return 0


def _write_selected(cap, args, fmt: str):
    """Write ``cap`` (or the selection ``--ranks``/``--launches``/``--window`` of it) as ``fmt``, in
    parts with an index when asked (``--split``) or when one trace would be too large for the
    Perfetto UI; returns what was written from and the path written (a trace, or the index)."""
    from .export import write_trace
    from .export.split import DEFAULT_PART_BYTES, estimate_bytes, parse_ints, parse_window, select, write_split

    ranks, launches, window = parse_ints(args.ranks), parse_ints(args.launches), parse_window(args.window)
    if ranks is not None or launches is not None or window is not None:
        if fmt == "ktrace":
            raise ValueError("--ranks/--launches/--window select what a trace shows: write a .pftrace or .json")
        cap = select(cap, ranks=ranks, launches=launches, window=window)
    budget = int(args.part_mb * (1 << 20)) if args.part_mb else DEFAULT_PART_BYTES.get(fmt)
    if fmt != "ktrace" and (args.split or estimate_bytes(cap, fmt) > budget):
        if not args.split:
            print(f"ktrace merge: the trace would be about {estimate_bytes(cap, fmt) / 1e6:.0f} MB, more than a part "
                  f"({budget / 1e6:.0f} MB, what the Perfetto UI opens comfortably unless --part-mb says otherwise): "
                  f"writing it in parts with an index", file=sys.stderr)
        return cap, write_split(cap, args.output, fmt, part_bytes=budget)
    return cap, write_trace(cap, args.output, fmt)


def _cmd_export(args) -> int:
    from .analysis import AnalysisError
    from .captures import CaptureError
    from .export.parquet import ParquetUnavailable, export_parquet

    out = Path(args.out_dir)
    if out.exists() and not out.is_dir():
        return _fail("ktrace export", f"{out} is a file: give a directory to write the tables into")
    if out.is_dir() and any(out.iterdir()) and not (out / "manifest.json").is_file():
        return _fail("ktrace export", f"{out} holds other files: give an empty directory (or a previous export's)")
    refused = _refuse_overwrite("ktrace export", [args.capture], [out])
    if refused is not None:
        return refused
    try:
        m = export_parquet(args.capture, out)
    except ParquetUnavailable as e:
        return _fail("ktrace export", e)
    except (CaptureError, AnalysisError, ValueError, OSError) as e:
        return _fail("ktrace export", e, args.capture)
    print(f"{out}: " + ", ".join(f"{t}.parquet ({n} rows)" for t, n in m["rows"].items()))
    return 0


def _finding_ranks(report, number) -> list[int]:
    """The ranks a report's finding involves (for the part of a split trace that shows them)."""
    if not report or number is None:
        return []
    doc = orjson.loads(Path(report).read_bytes())
    return [int(r) for r in (doc.get("findings") or [])[number - 1].get("ranks") or []]


def _cmd_open(args) -> int:
    import os

    from viewers.perfetto_open import UiBuildNotFound, finding_windows, open_trace

    if not os.path.isfile(args.trace):
        print(f"ktrace: {args.trace}: no such trace file", file=sys.stderr)
        return 2
    if args.finding is not None and not args.report:
        print("ktrace: --finding needs --report REPORT.json (ktrace report --json)", file=sys.stderr)
        return 2
    window, links = None, {}
    trace = args.trace
    try:
        if args.report:
            windows = finding_windows(args.report, args.finding)
            if args.finding is not None:
                window = windows[args.finding]
            else:
                links = {f"finding {n}": w for n, w in windows.items()}
        if trace.endswith(".index.json"):  # a split trace: the part that holds the finding (else the first)
            from .export.split import part_for, read_index

            _, parts = read_index(trace)
            if not parts:
                raise ValueError(f"{trace}: the index names no part")
            part = parts[0] if window is None else part_for(parts, *window, _finding_ranks(args.report, args.finding))
            others = ", ".join(Path(p.file).name for p in parts if p is not part)
            print(f"{Path(trace).name}: {len(parts)} parts; opening {Path(part.file).name} (ranks {part.ranks[0]}..{part.ranks[-1]}, "
                  f"launches {part.launches[0]}..{part.launches[-1]})" + (f"; the others: {others}" if others else ""))
            trace = part.file
            links = {k: w for k, w in links.items() if part.start_ns <= w[0] and w[1] <= part.end_ns}
    except (OSError, ValueError) as e:
        print(f"ktrace: {e}", file=sys.stderr)
        return 2
    offline = True if args.offline else (False if args.online else None)
    try:
        got = open_trace(trace, port=args.port, browser=not args.no_browser, timeout=args.timeout or None,
                         offline=offline, window=window, links=links)
    except UiBuildNotFound as e:
        print(f"ktrace: --offline: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"ktrace: cannot serve on 127.0.0.1:{args.port}: {e}", file=sys.stderr)
        return 2
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


def _write_json(dest: str, data: dict) -> None:
    blob = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    if dest == "-":
        sys.stdout.write(blob.decode() + "\n")
    else:
        Path(dest).write_bytes(blob)


def _live(path):
    """The wait-for graph of a live dump (``ktrace.analysis.live``); None for other captures."""
    from .analysis.live import live_report
    from .captures import read_capture

    return live_report(read_capture(path))


def _cmd_report(args) -> int:
    from .analysis import AnalysisError, LoadConfig, ReportConfig, build_report, render_text, report_json
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
    refused = _refuse_overwrite("ktrace report", [path], [args.html, args.json])
    if refused is not None:
        return refused
    try:
        cfg = ReportConfig(load=LoadConfig(work_region=args.work_region), trace_url=args.trace_url,
                           min_late_ns=args.min_late_us * 1e3)
        rep = build_report(path, cfg, progress=_Bar(not args.quiet))
        live = _live(path)
    except (CaptureError, AnalysisError, ValueError) as e:
        return _fail("ktrace report", e, path)
    if args.json:
        _write_json(args.json, report_json(rep) | ({"live": live.to_json()} if live else {}))
    if args.json != "-":
        if live is not None:  # a live dump: the wait-for graph at the dump comes first
            print("\n".join(live.lines()) + "\n")
        print(render_text(rep, max_findings=args.max_findings))
    if args.html:
        from viewers.report import write_html

        out = write_html(rep, args.html)
        print(f"HTML report: {out}", file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json and args.json != "-":
        print(f"JSON report: {args.json}")
    return 1 if any(f.kind == "hang" and f.severity == "error" for f in rep.findings) and args.fail_on_hang else 0


def _cmd_diff(args) -> int:
    from .analysis import AnalysisError, build_diff, diff_json, prepare, render_diff_text
    from .captures import CaptureError

    refused = _refuse_overwrite("ktrace diff", [args.a, args.b], [args.html, args.json])
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
    if args.json:
        _write_json(args.json, diff_json(d))
    if args.json != "-":
        print(render_diff_text(d))
    if args.html:
        from viewers.report import write_diff_html

        path = write_diff_html(d, args.html)
        print(f"HTML diff: {path}", file=sys.stderr if args.json == "-" else sys.stdout)
    return 0


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
    s.add_argument("--trace-url", metavar="URL", help="where this capture's trace is served, for the Perfetto links")
    s.add_argument("--work-region", metavar="NAME", help="region whose spans count as work items (default: the most frequent)")
    s.add_argument("--min-late-us", type=float, default=1.0, metavar="US",
                   help="name a producer a straggler only when it is at least this late (default 1 µs)")
    s.add_argument("--max-findings", type=int, default=10, help="findings printed (default 10; --json and --html hold them all)")
    s.add_argument("--fail-on-hang", action="store_true", help="exit 1 when the capture shows a hang")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=_cmd_report)

    d = subparsers.add_parser("diff", help="compare two captures of the same kernel: biggest movers first",
                              description="Per region, rank and workgroup: time per launch in A and B, biggest change "
                                          "first. Exit status 2 when either capture cannot be read (one line says which).")
    d.add_argument("a", help="the capture before (A)")
    d.add_argument("b", help="the capture after (B)")
    d.add_argument("--html", metavar="FILE", help="also write a self-contained HTML diff")
    d.add_argument("--json", metavar="FILE", help="also write the diff as JSON ('-': to stdout)")
    d.add_argument("--top", type=int, default=10, help="region movers listed (default 10)")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=_cmd_diff)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ktrace",
        description="Intra-kernel tracing for multi-GPU Triton kernels: inspect, merge, view and analyse captures.",
        epilog="Exit status 2: bad input (one line on stderr names the file and what is wrong; nothing is written). "
               "Output into a pipe closed early ends quietly with status 141.",
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
    s.add_argument("--format", choices=["ktrace", "perfetto", "chrome"], help="override the format the suffix implies")
    s.add_argument("--world-size", type=int, help="expected number of ranks (default: what the files say)")
    s.add_argument("--allow-mixed-runs", action="store_true",
                   help="merge parts of different runs anyway (their notify/wait pairs then mean nothing)")
    s.add_argument("--ranks", metavar="LIST", help="a trace of these ranks only (e.g. 0-7,12)")
    s.add_argument("--launches", metavar="LIST", help="a trace of these launch indices only, on every rank (e.g. 10-19)")
    s.add_argument("--window", metavar="START:END", help="a trace of the launches that overlap this window (µs since the capture's first event)")
    s.add_argument("--split", action="store_true",
                   help="write the trace in parts with an index (automatic when one trace would exceed the part size)")
    s.add_argument("--part-mb", type=float, metavar="MB",
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
    s.add_argument("trace", help="a .pftrace or .json[.gz] trace, or the index of a split trace (.index.json)")
    s.add_argument("--port", type=int, default=9001, help="loopback port (default 9001, which ui.perfetto.dev allows)")
    s.add_argument("--no-browser", action="store_true", help="only print the link")
    s.add_argument("--timeout", type=float, default=0, help="stop after this many seconds without a request (default 0: never)")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--offline", action="store_true", help="serve the Perfetto UI from this machine too (no internet needed)")
    where.add_argument("--online", action="store_true", help="use ui.perfetto.dev without checking that it can be reached")
    s.add_argument("--report", metavar="REPORT.json", help="a report of this trace's capture (ktrace report --json): print a link per finding")
    s.add_argument("--finding", type=int, metavar="N", help="with --report: open at finding N's time range (numbered as ktrace report prints them)")
    s.set_defaults(func=_cmd_open)
    _register_analysis(sub)  # report, diff
    from .demo import register as _register_demo
    from .run import register as _register_run

    _register_demo(sub)  # demo
    _register_run(sub)  # run
    from .dump import register as _register_dump

    _register_dump(sub)  # dump (the flight recorder's live dumps)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None:  # the `ktrace` process itself (not a caller's program): reuse freed memory
        from ._memory import keep_freed_memory

        keep_freed_memory()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
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
    return status


if __name__ == "__main__":
    sys.exit(main())
