"""The ``ktrace`` command. Only this module parses arguments and prints.

``ktrace info``, ``merge``, ``open`` and ``report`` work on saved captures with no GPU and
without importing torch or triton.
"""

from __future__ import annotations

import argparse
import logging
import sys

from . import __version__


def _cmd_info(args) -> int:
    import numpy as np

    from .io.capture_file import CaptureError, read_capture
    from .schema import EventKind

    try:
        cap = read_capture(args.capture)
    except CaptureError as e:
        print(f"ktrace: {e}", file=sys.stderr)
        return 2
    print(f"{args.capture}: world size {cap.world_size}, ranks {sorted(cap.ranks)}{' (PARTIAL)' if cap.partial else ''}")
    for r, rc in sorted(cap.ranks.items()):
        dev = rc.device.get("name", "?")
        print(f"  rank {r} on {dev} ({rc.device.get('arch', '?')}): {len(rc.launches)} launches")
        for ln in rc.launches:
            try:
                d = ln.decode(r)
            except CaptureError as e:
                print(f"    launch {ln.index} {ln.kernel}: UNREADABLE: {e}")
                continue
            kinds = np.bincount(d.events["kind"], minlength=16)
            parts = ", ".join(f"{kinds[k]} {EventKind(k).name.lower()}" for k in EventKind if k and kinds[k])
            drop = f", {d.dropped} DROPPED (raise events_per_program above {ln.capacity})" if d.dropped else ""
            print(f"    launch {ln.index} {ln.kernel} grid {tuple(ln.grid)}: {d.written} events ({parts or 'none'}){drop}")
    return 0


def _cmd_merge(args) -> int:
    from .io import CaptureError, format_of, merge_captures, read_capture, write_trace

    try:
        fmt = args.format or format_of(args.output)
    except ValueError as e:
        print(f"ktrace: {e}", file=sys.stderr)
        return 2
    try:
        cap = merge_captures((read_capture(p) for p in args.captures), world_size=args.world_size)
        out = write_trace(cap, args.output, fmt)
    except (CaptureError, ValueError, OSError) as e:
        print(f"ktrace: {e}", file=sys.stderr)
        return 2
    n = sum(len(rc.launches) for rc in cap.ranks.values())
    part = f" PARTIAL: ranks {cap.missing_ranks} missing" if cap.partial else ""
    clock = (cap.clock or {}).get("method", "none")
    print(f"{out}: {fmt}, ranks {sorted(cap.ranks)} of {cap.world_size}, {n} launches, clock {clock}{part}")
    return 0


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
    try:
        if args.report:
            windows = finding_windows(args.trace, args.report, args.finding)
            if args.finding is not None:
                window = windows[args.finding]
            else:
                links = {f"finding {n}": w for n, w in windows.items()}
    except (OSError, ValueError) as e:
        print(f"ktrace: {e}", file=sys.stderr)
        return 2
    offline = True if args.offline else (False if args.online else None)
    try:
        got = open_trace(args.trace, port=args.port, browser=not args.no_browser, timeout=args.timeout or None,
                         offline=offline, window=window, links=links)
    except UiBuildNotFound as e:
        print(f"ktrace: --offline: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"ktrace: cannot serve on 127.0.0.1:{args.port}: {e}", file=sys.stderr)
        return 2
    return 0 if got or not args.timeout else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ktrace",
        description="Intra-kernel tracing for multi-GPU Triton kernels: inspect, merge, view and analyse captures.",
    )
    p.add_argument("--version", action="version", version=f"ktrace {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    s = sub.add_parser("info", help="summarise a capture file: ranks, launches, events, drops")
    s.add_argument("capture", help="a .ktrace capture file")
    s.set_defaults(func=_cmd_info)
    s = sub.add_parser("merge", help="merge per-rank captures into one capture or trace (format by suffix)")
    s.add_argument("captures", nargs="+", help="per-rank .ktrace files")
    s.add_argument("-o", "--output", required=True, help="out.ktrace | out.pftrace | out.json | out.json.gz")
    s.add_argument("--format", choices=["ktrace", "perfetto", "chrome"], help="override the format the suffix implies")
    s.add_argument("--world-size", type=int, help="expected number of ranks (default: what the files say)")
    s.set_defaults(func=_cmd_merge)
    s = sub.add_parser("open", help="serve a trace on 127.0.0.1 and open it in the Perfetto UI (until Ctrl-C)",
                       description="Serve a trace on 127.0.0.1 until Ctrl-C and open it in the Perfetto UI: ui.perfetto.dev, "
                                   "or, with --offline or when ui.perfetto.dev cannot be reached, a Perfetto UI build served "
                                   "from this machine (pip install 'ktrace[offline]').")
    s.add_argument("trace", help="a .pftrace or .json[.gz] trace")
    s.add_argument("--port", type=int, default=9001, help="loopback port (default 9001, which ui.perfetto.dev allows)")
    s.add_argument("--no-browser", action="store_true", help="only print the link")
    s.add_argument("--timeout", type=float, default=0, help="stop after this many seconds without a request (default 0: never)")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--offline", action="store_true", help="serve the Perfetto UI from this machine too (no internet needed)")
    where.add_argument("--online", action="store_true", help="use ui.perfetto.dev without checking that it can be reached")
    s.add_argument("--report", metavar="REPORT.json", help="a report of this trace's capture (ktrace report --json): print a link per finding")
    s.add_argument("--finding", type=int, metavar="N", help="with --report: open at finding N's time range (numbered as ktrace report prints them)")
    s.set_defaults(func=_cmd_open)
    from .analysis.commands import register as _register_analysis

    _register_analysis(sub)  # report, diff
    from .demo import register as _register_demo
    from .run import register as _register_run

    _register_demo(sub)  # demo
    _register_run(sub)  # run
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
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
