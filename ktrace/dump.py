"""``ktrace dump``: ask the ranks of a running capture for a live dump (``ktrace.flight``).

Each process recording with ``ktrace.capture(flight_recorder=...)`` registers itself (pid, rank,
run id, where it writes dumps, and its start time and command line) in the flight registry
(``$KTRACE_FLIGHT_DIR``, else a per-user folder in the temporary directory); ``ktrace dump`` sends
``SIGUSR1`` to the registered processes of a run (the newest run by default, or ``--run``), or to
the pids given, each of which must be a registered recording too. Each writes its dump and keeps
running. Processes on other hosts are reached by running the command there.

Nothing a file says is signalled as it is (``ktrace.flight.registry``): the registry must be a
folder only this user can write, and a process is signalled only when it is alive, this user's,
started when its entry says, runs the command line its entry says and catches ``SIGUSR1``; never
pid 0, a negative pid or a process group. Whatever is refused is said in one line.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path


def _fail(text: str) -> int:
    """One line on stderr, exit status 2 (what the ``ktrace`` command does for bad input)."""
    from .text import printable

    print(f"ktrace dump: {printable(' '.join(str(text).split()))}", file=sys.stderr)
    return 2


def _pid(text: str) -> int:
    """An argparse type: a process id, 1..PID_MAX (0 and negative ones name process groups: never)."""
    from .flight.registry import PID_MAX

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id") from None
    if not 0 < v <= PID_MAX:
        raise argparse.ArgumentTypeError(f"{text} is not a process id (positive, at most {PID_MAX}): 0 and negative ids name "
                                         "process groups, which are never signalled")
    return v


def _runs(entries) -> dict[str, list]:
    runs: dict[str, list] = {}
    for e in entries:
        runs.setdefault(e.run_id, []).append(e)
    return runs


def _refused_text(refused: list[str]) -> str:
    return refused[0] + (f" (and {len(refused) - 1} more refused)" if len(refused) > 1 else "")


def _cmd_dump(args) -> int:
    from .flight.registry import RegistryError, registry_dir, scan, send
    from .text import printable

    registry = Path(args.registry) if args.registry else registry_dir()
    try:
        found = scan(registry)
    except FileNotFoundError:
        if args.list:
            return 0
        return _fail(f"no process with a flight recorder is registered in {registry} (no such folder; open the capture with "
                     "flight_recorder=True)")
    except RegistryError as e:
        return _fail(e)
    except OSError as e:
        return _fail(f"{registry}: cannot read it: {e.strerror or e}")
    runs = _runs(found.live)
    if args.list:
        for rid, es in sorted(runs.items(), key=lambda kv: -max(e.started_ns for e in kv[1])):
            print(f"run {printable(rid)}: " + ", ".join(f"rank {e.rank} pid {e.pid}" for e in sorted(es, key=lambda e: e.rank)))
        if found.refused:
            print(f"ktrace dump: {printable(_refused_text(found.refused))}", file=sys.stderr)
        return 0
    if args.pid:
        by_pid = {e.pid: e for e in found.live}
        missing = [p for p in args.pid if p not in by_pid]
        if missing:
            why = next((r for r in found.refused if f"pid {missing[0]} " in r), None)
            return _fail(f"--pid {missing[0]}: not a ktrace recording registered in {registry}"
                         + (f" ({why})" if why else " (only the processes that registered there, alive and unchanged, are signalled)"))
        targets = [by_pid[p] for p in args.pid]
    elif args.run is not None:
        if args.run not in runs:
            known = ", ".join(sorted(runs)) or "none"
            extra = f"; refused: {_refused_text(found.refused)}" if found.refused else ""
            return _fail(f"--run {args.run}: no running process of that run is registered in {registry} (running: {known}){extra}")
        targets = runs[args.run]
    elif runs:
        newest = max(runs, key=lambda k: max(e.started_ns for e in runs[k]))
        targets = runs[newest]
    else:
        extra = f"; refused: {_refused_text(found.refused)}" if found.refused else ""
        return _fail(f"no process with a flight recorder is registered in {registry} (open the capture with "
                     f"flight_recorder=True){extra}")
    if found.refused:
        print(f"ktrace dump: not signalled: {printable(_refused_text(found.refused))}", file=sys.stderr)
    sent, failed = 0, []
    for e in sorted(targets, key=lambda e: (e.rank, e.pid)):
        why = send(e, signal.SIGUSR1)
        if why is not None:
            failed.append(f"rank {e.rank} {why}")
            continue
        sent += 1
        print(f"asked rank {e.rank} (pid {e.pid}) for a live dump; it writes it to {printable(e.out_dir)}")
    if failed:
        print(f"ktrace dump: not signalled: {printable('; '.join(failed))}", file=sys.stderr)
    return 0 if sent else 2


def register(subparsers) -> None:
    """Add ``dump`` to the ``ktrace`` command's subparsers."""
    s = subparsers.add_parser(
        "dump", help="ask the ranks of a running capture (flight_recorder=True) for a live dump; the kernels keep running",
        description="Send SIGUSR1 to the processes of a run that record with a flight recorder (the newest run "
                    "registered on this host, --run RUN, or --pid PID...): each writes a live dump (a capture of "
                    "every lane's last events and the wait it is in now) and keeps running. `ktrace report DUMP` "
                    "starts with the wait-for graph. Only registered recordings are signalled, each checked on the live "
                    "process (this user's, its start time and command line as registered, SIGUSR1 caught). Exit status 2 "
                    "when no process could be asked.")
    s.add_argument("--run", metavar="RUN_ID", help="the run whose ranks to ask (default: the newest registered)")
    s.add_argument("--pid", type=_pid, nargs="+", metavar="PID", help="ask these registered processes instead")
    s.add_argument("--registry", metavar="DIR", help="the flight registry folder (default: $KTRACE_FLIGHT_DIR or the "
                                                     "per-user folder in the temporary directory)")
    s.add_argument("--list", action="store_true", help="list the registered running processes by run; send nothing")
    s.set_defaults(func=_cmd_dump)
