"""``ktrace dump``: ask the ranks of a running capture for a live dump (``ktrace.flight``).

Each process recording with ``ktrace.capture(flight_recorder=...)`` registers itself (pid, rank,
run id, where it writes dumps) in the flight registry (``$KTRACE_FLIGHT_DIR``, else a per-user
folder in the temporary directory); ``ktrace dump`` sends ``SIGUSR1`` to the registered processes
of a run (the newest run by default, or ``--run``), or to the pids given. Each writes its dump and
keeps running. Processes on other hosts are reached by running the command there.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def registered(registry: Path) -> dict[str, list[dict]]:
    """The registered processes by run id, from the registry folder (unreadable entries skipped)."""
    runs: dict[str, list[dict]] = {}
    if not registry.is_dir():
        return runs
    for run_dir in sorted(p for p in registry.iterdir() if p.is_dir()):
        for f in sorted(run_dir.glob("rank*.json")):
            try:
                e = json.loads(f.read_text())
                e = {"pid": int(e["pid"]), "rank": int(e["rank"]), "run_id": str(e.get("run_id") or run_dir.name),
                     "out_dir": str(e.get("out_dir", "?")), "started_ns": int(e.get("started_ns", 0)), "file": f}
            except (OSError, ValueError, KeyError, TypeError):
                continue
            runs.setdefault(e["run_id"], []).append(e)
    return runs


def _fail(text: str) -> int:
    """One line on stderr, exit status 2 (what the ``ktrace`` command does for bad input)."""
    print(f"ktrace dump: {' '.join(text.split())}", file=sys.stderr)
    return 2


def _cmd_dump(args) -> int:
    from .captures.gather import _alive
    from .flight.recorder import registry_dir

    sig = signal.SIGUSR1
    if args.pid:
        bad = [p for p in args.pid if p <= 0]
        if bad:  # (0 and negative pids signal process groups: never)
            return _fail(f"--pid takes process ids (positive), not {bad[0]}")
        targets = [{"pid": p, "rank": "?", "out_dir": "its flight recorder's out_dir"} for p in args.pid]
    else:
        registry = Path(args.registry) if args.registry else registry_dir()
        runs = {k: [e for e in v if _alive(e["pid"])] for k, v in registered(registry).items()}
        runs = {k: v for k, v in runs.items() if v}
        if args.list:
            for rid, es in sorted(runs.items(), key=lambda kv: -max(e["started_ns"] for e in kv[1])):
                print(f"run {rid}: " + ", ".join(f"rank {e['rank']} pid {e['pid']}" for e in sorted(es, key=lambda e: e["rank"])))
            return 0
        if args.run is not None:
            if args.run not in runs:
                known = ", ".join(sorted(runs)) or "none"
                return _fail(f"no running process of run {args.run} is registered in {registry} (running: {known})")
            targets = runs[args.run]
        elif runs:
            newest = max(runs, key=lambda k: max(e["started_ns"] for e in runs[k]))
            targets = runs[newest]
        else:
            return _fail(f"no process with a flight recorder is registered in {registry} "
                                        "(open the capture with flight_recorder=True, or give --pid)")
    sent = 0
    for e in sorted(targets, key=lambda e: str(e["rank"])):
        try:
            os.kill(int(e["pid"]), sig)
        except ProcessLookupError:
            print(f"ktrace dump: rank {e['rank']} pid {e['pid']}: no such process", file=sys.stderr)
            continue
        except PermissionError:
            print(f"ktrace dump: rank {e['rank']} pid {e['pid']}: not allowed to signal it", file=sys.stderr)
            continue
        sent += 1
        print(f"asked rank {e['rank']} (pid {e['pid']}) for a live dump; it writes it to {e['out_dir']}")
    return 0 if sent else 2


def register(subparsers) -> None:
    """Add ``dump`` to the ``ktrace`` command's subparsers."""
    s = subparsers.add_parser(
        "dump", help="ask the ranks of a running capture (flight_recorder=True) for a live dump; the kernels keep running",
        description="Send SIGUSR1 to the processes of a run that record with a flight recorder (the newest run "
                    "registered on this host, --run RUN, or --pid PID...): each writes a live dump (a capture of "
                    "every lane's last events and the wait it is in now) and keeps running. `ktrace report DUMP` "
                    "starts with the wait-for graph. Exit status 2 when no process could be asked.")
    s.add_argument("--run", metavar="RUN_ID", help="the run whose ranks to ask (default: the newest registered)")
    s.add_argument("--pid", type=int, nargs="+", metavar="PID", help="ask these processes instead")
    s.add_argument("--registry", metavar="DIR", help="the flight registry folder (default: $KTRACE_FLIGHT_DIR or the "
                                                     "per-user folder in the temporary directory)")
    s.add_argument("--list", action="store_true", help="list the registered running processes by run; send nothing")
    s.set_defaults(func=_cmd_dump)
