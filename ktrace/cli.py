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
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
