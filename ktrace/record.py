"""``ktrace record [options] -- COMMAND ...``: trace a program's Triton kernels without edits.

::

    ktrace record -- python my_script.py
    ktrace record --kernels 'ring_*' -o out -- torchrun --nproc-per-node 4 my_script.py
    ktrace record --declare sync.json -- srun -n 8 python my_script.py

The command runs as it would alone, with two things in its environment: ``PYTHONPATH`` starts
with ktrace's ``sitecustomize`` (``ktrace.auto._site``: it chains to any other), and
``KTRACE_RECORD`` holds this command's settings. Every Python process of the command that
imports Triton records the launches of the matching ``@triton.jit`` kernels, prepared from their
source with ktrace's probes (``ktrace.auto``: spans per program and per top-level loop iteration,
spins as waits, signalling atomics as notifies; declared helpers), and writes
``OUT/rank<r>.ktrace`` at exit. Then this process merges the ranks (one clock: the ranks
calibrated over a small heap of ktrace's own), writes ``OUT/record.ktrace``, the Perfetto trace
and the report, and prints the findings and the ``ktrace open`` command.

Exit status: the command's own when it failed (its captures are still merged and reported); 2
for bad options (one line), or when no kernel was traced; 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

#: The default output folder.
DEFAULT_OUT = "ktrace-record"


def _site_dir() -> str:
    return str(Path(__file__).resolve().parent / "auto" / "_site")


def _config(args) -> dict:
    from .auto.config import AutoConfig

    cfg = AutoConfig(kernels=args.kernels or (), events_per_program=args.events,
                     wait_timeout_ns=int(args.wait_timeout_ms * 1e6), symmetric_memory=not args.no_symmetric_memory)
    return cfg.to_json()


def _environment(args, out: Path, declare: list[str]) -> dict:
    from .auto.boot import ENV

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_site_dir(), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)])
    env[ENV] = json.dumps({"out": str(out), "config": _config(args), "declare": declare,
                           "run_id": f"record-{uuid.uuid4().hex[:12]}"})
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        env.setdefault(k, v)  # (NVLink multicast off, as every ktrace launcher sets it; the user's value wins)
    return env


def _run(command: list[str], env: dict) -> int:
    """Run the command in the foreground; Ctrl-C reaches it (its own process group is ours), and
    this process waits for it to end."""
    try:
        proc = subprocess.Popen(command, env=env)
    except OSError as e:
        raise RecordError(f"cannot start {command[0]!r}: {e.strerror or e}") from None
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:  # (the command got the same SIGINT from the terminal: let it finish)
            continue


class RecordError(Exception):
    """Why ``ktrace record`` could not do what was asked (one line)."""


def merge_ranks(out: Path) -> Path | None:
    """Merge ``OUT/rank*.ktrace`` into ``OUT/record.ktrace`` (the clock model fitted); None when
    there is none."""
    from .captures import merge_captures, read_capture, write_capture
    from .clock import attach_clock

    parts = sorted(out.glob("rank*.ktrace"), key=lambda p: int(p.stem[4:]) if p.stem[4:].isdigit() else 1 << 30)
    if not parts:
        return None
    cap = merge_captures([read_capture(p) for p in parts])
    try:
        attach_clock(cap)
    except ValueError as e:
        print(f"ktrace record: the ranks' clocks could not be fitted ({e}); each rank stays on its own clock", file=sys.stderr)
    path = out / "record.ktrace"
    write_capture(path, cap)
    return path


def _cmd_record(args) -> int:
    from .auto.declarations import DeclarationError, load_file

    command = list(args.command or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("ktrace record: give the command to run after --, e.g. ktrace record -- python my_script.py", file=sys.stderr)
        return 2
    declare = []
    for f in args.declare or ():
        try:
            load_file(f)  # (checked here, so that a bad file is one line before anything runs)
        except DeclarationError as e:
            print(f"ktrace record: {e}", file=sys.stderr)
            return 2
        declare.append(str(Path(f).resolve()))
    try:
        from .auto.config import AutoConfig

        AutoConfig.from_json(_config(args))
    except ValueError as e:
        print(f"ktrace record: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    old = sorted(out.glob("rank*.ktrace")) if out.is_dir() else []
    if old:
        print(f"ktrace record: {out} holds captures of an earlier recording ({old[0].name}, ...): give another -o or "
              "remove them", file=sys.stderr)
        return 2
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"ktrace record: cannot create {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    try:
        rc = _run(command, _environment(args, out.resolve(), declare))
    except RecordError as e:
        print(f"ktrace record: {e}", file=sys.stderr)
        return 2
    if rc != 0:
        print(f"ktrace record: the command exited with status {rc}; analysing what it recorded", file=sys.stderr)
    from viewers.terminal import report_text

    from .analysis import AnalysisError
    from .captures import CaptureError
    from .demo import DemoError, analyse, next_steps

    try:
        path = merge_ranks(out)
    except (CaptureError, ValueError, OSError) as e:
        print(f"ktrace record: the ranks' captures cannot be merged: {e}", file=sys.stderr)
        return rc or 2
    if path is None:
        print("ktrace record: no kernel was traced (none launched a matching @triton.jit kernel from Python: see "
              "--kernels, and docs/byok.md)", file=sys.stderr)
        return rc or 2
    if args.no_report:
        print(f"ktrace record: wrote {path}")
        return rc
    try:
        o = analyse(path, out)
    except (CaptureError, AnalysisError, DemoError) as e:
        print(f"ktrace record: the capture was recorded ({path}) but cannot be analysed: {e}", file=sys.stderr)
        return rc or 1
    print()
    print(report_text(o.report, verbose=args.verbose, max_findings=args.max_findings))
    print(next_steps(o))
    return rc


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``record`` to the ``ktrace`` command's subparsers."""
    from .auto.config import DEFAULT_EVENTS, DEFAULT_WAIT_TIMEOUT_NS
    from .demo import report_arguments

    s = subparsers.add_parser(
        "record", help="run a program and trace its Triton kernels without edits (then merge and report)",
        description="Run COMMAND (python, torchrun, srun ...) with ktrace armed in each of its Python processes: every "
                    "matching @triton.jit kernel is traced from its own source (spans, spins as waits, signalling atomics "
                    "as notifies), each rank writes OUT/rank<r>.ktrace, then one trace and one report are made. "
                    "See docs/byok.md.")
    s.add_argument("-o", "--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    s.add_argument("--kernels", metavar="PATTERN",
                   help="trace only kernels whose name or module.qualname matches (fnmatch; several: comma-separated)")
    s.add_argument("--declare", action="append", metavar="FILE",
                   help="a JSON file of sync helpers' declarations ({\"module.function\": {\"waits\": \"PARAM\", ...}})")
    s.add_argument("--events", type=int, default=DEFAULT_EVENTS, metavar="N", help=f"event slots per program (default {DEFAULT_EVENTS})")
    s.add_argument("--wait-timeout-ms", type=float, default=DEFAULT_WAIT_TIMEOUT_NS / 1e6, metavar="MS",
                   help="a traced spin gives up after this long and is recorded as timed out (0: never; default "
                        f"{DEFAULT_WAIT_TIMEOUT_NS / 1e6:g})")
    s.add_argument("--no-symmetric-memory", action="store_true",
                   help="do not record torch symmetric memory's mappings (its addresses then stay unpaired across ranks)")
    s.add_argument("--no-report", action="store_true", help="merge the ranks' captures only")
    report_arguments(s)
    s.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    s.set_defaults(func=_cmd_record)
