"""Hashes of everything ktrace writes for every bundled capture: to show that a change of speed
changed no output.

For each capture (``ktrace/data/*.ktrace``, ``tests/fixtures/**/*.ktrace``,
``benchmarks/data/*.ktrace`` and any ``--extra`` files) a fresh ``ktrace`` process of the tree
named by ``--tree`` runs each of these commands, and the SHA-256 of every output is recorded:

- ``report CAP -q``: the text printed; ``--json FILE``: the JSON (its bytes, and its content
  re-serialised with sorted keys and no whitespace: equal content in another layout shows as
  such); ``--html FILE``;
- ``merge CAP -o trace.pftrace`` / ``trace.json`` / ``trace.json.gz``: the bytes (a gzip file's
  inflated bytes), and the canonical form of its content (every event with its track, name,
  arguments and flows, sorted: a trace written by several worker processes has its pieces in the
  order they finished, so its bytes differ from run to run);
- ``export CAP DIR``: ``manifest.json`` and each ``.parquet`` file's bytes, and each table's
  contents (schema and rows, independent of how its rows are split into row groups).

The exit status and stderr of each command are hashed too (a warning is an output).

    python benchmarks/same_outputs.py record base.json --tree /path/to/old/tree
    python benchmarks/same_outputs.py compare base.json              # this tree, against the record
    python benchmarks/same_outputs.py compare base.json --extra /tmp/1m.ktrace --keep /tmp/outs

``compare`` prints each output that differs (capture, command, output) and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The commands run on every capture: name -> (arguments after the capture, outputs it writes).
#: ``{o}`` is the command's output folder.
COMMANDS = {
    "report": (["report", "{cap}", "-q"], []),
    "report_json": (["report", "{cap}", "-q", "--json", "{o}/report.json"], ["report.json"]),
    "report_html": (["report", "{cap}", "-q", "--html", "{o}/report.html"], ["report.html"]),
    "merge_pftrace": (["merge", "{cap}", "-o", "{o}/trace.pftrace"], ["trace.pftrace"]),
    "merge_json": (["merge", "{cap}", "-o", "{o}/trace.json"], ["trace.json"]),
    "merge_json_gz": (["merge", "{cap}", "-o", "{o}/trace.json.gz"], ["trace.json.gz"]),
    "export": (["export", "{cap}", "{o}/export"], ["export"]),
}

_RUN = "import sys; sys.argv[0] = 'ktrace'; from ktrace.cli import main; sys.exit(main())"


def captures(extra: list[str]) -> list[str]:
    found = sorted(glob.glob(str(ROOT / "ktrace/data/*.ktrace")) + glob.glob(str(ROOT / "tests/fixtures/**/*.ktrace"), recursive=True)
                   + glob.glob(str(ROOT / "benchmarks/data/*.ktrace")))
    return [os.path.relpath(p, ROOT) for p in found] + [os.path.abspath(e) for e in extra]


def _abs(cap: str) -> str:
    return str(ROOT / cap) if not os.path.isabs(cap) else cap


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _table_hash(path: Path) -> str:
    """A Parquet table's schema and rows, whatever its row groups."""
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    h = hashlib.sha256(str(t.schema).encode())
    for name in t.column_names:
        h.update(name.encode())
        h.update(json.dumps(t.column(name).to_pylist(), default=str).encode())
    return h.hexdigest()


def _trace_hash(path: Path) -> str:
    """A trace's events, tracks and flows, whatever order the writer's workers appended them in
    (the canonical forms ``tests/test_export.py`` compares)."""
    sys.path.insert(0, str(ROOT))
    from tests.test_export import _chrome_canonical, _perfetto_canonical

    canon = _perfetto_canonical(path) if path.suffix == ".pftrace" else _chrome_canonical(path)
    return _sha(repr(canon).encode())


def _outputs(o: Path, names: list[str]) -> dict:
    got = {}
    for n in names:
        p = o / n
        if p.is_dir():
            for f in sorted(p.iterdir()):
                got[f"{n}/{f.name}"] = _sha(f.read_bytes())
                if f.suffix == ".parquet":
                    got[f"{n}/{f.name}:table"] = _table_hash(f)
        elif p.exists():
            data = p.read_bytes()
            if p.suffix == ".gz":
                data = gzip.decompress(data)
            got[n] = _sha(data)
            if n == "report.json":
                import orjson

                got[n + ":content"] = _sha(orjson.dumps(orjson.loads(data), option=orjson.OPT_SORT_KEYS))
            elif n.startswith("trace."):
                got[n + ":content"] = _trace_hash(p)
        else:
            got[n] = "missing"
    return got


def run_one(tree: str, cap: str, cmd: str, keep: str | None) -> tuple[str, str, dict]:
    args, outs = COMMANDS[cmd]
    with tempfile.TemporaryDirectory(prefix="kt-same-") as tmp:
        o = Path(tmp)
        argv = [a.format(cap=_abs(cap), o=o) for a in args]
        env = dict(os.environ, PYTHONPATH=tree)
        # (run from the temporary folder: ``python -c`` puts its working folder first on the
        # path, which would shadow ``tree`` with this one)
        p = subprocess.run([sys.executable, "-c", _RUN, *argv], cwd=tmp, env=env, capture_output=True)
        got = {"status": str(p.returncode), "stdout": _sha(_relative(p.stdout, tmp)), "stderr": _sha(_relative(p.stderr, tmp))}
        got.update(_outputs(o, outs))
        if keep:
            dest = Path(keep) / cap.replace("/", "_") / cmd
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(o, dest)
            (dest / "stdout").write_bytes(p.stdout)
            (dest / "stderr").write_bytes(p.stderr)
    return cap, cmd, got


def _relative(text: bytes, tmp: str) -> bytes:
    """Output with the temporary folder and this tree's path taken out (outputs name their files)."""
    return text.replace(tmp.encode(), b"{o}").replace((str(ROOT) + os.sep).encode(), b"")


def collect(tree: str, extra: list[str], jobs: int, keep: str | None, only: list[str] | None) -> dict:
    todo = [(c, k) for c in captures(extra) for k in COMMANDS if not only or k in only]
    out: dict = {}
    with ThreadPoolExecutor(jobs) as ex:
        for cap, cmd, got in ex.map(lambda t: run_one(tree, t[0], t[1], keep), todo):
            out.setdefault(cap, {})[cmd] = got
            print(f"  {cap} {cmd}: status {got['status']}", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["record", "compare"])
    ap.add_argument("record_file")
    ap.add_argument("--tree", default=str(ROOT), help="the ktrace tree to run (default: this one)")
    ap.add_argument("--extra", action="append", default=[], help="another capture to include")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", help="keep every output under this folder")
    ap.add_argument("--only", help="only these commands (comma-separated)")
    args = ap.parse_args()
    only = args.only.split(",") if args.only else None
    got = collect(os.path.abspath(args.tree), args.extra, args.jobs, args.keep, only)
    if args.mode == "record":
        if only and Path(args.record_file).exists():  # (some commands again: the others' records kept)
            old = json.loads(Path(args.record_file).read_text())
            for cap, cmds in got.items():
                old.setdefault(cap, {}).update(cmds)
            got = old
        Path(args.record_file).write_text(json.dumps(got, indent=1, sort_keys=True))
        print(f"recorded {sum(len(v) for v in got.values())} commands on {len(got)} captures")
        return 0
    base = json.loads(Path(args.record_file).read_text())
    differ = 0
    for cap, cmds in sorted(got.items()):
        for cmd, outs in sorted(cmds.items()):
            want = base.get(cap, {}).get(cmd)
            if want is None:
                print(f"NOT RECORDED {cap} {cmd}")
                continue
            for k in sorted(set(outs) | set(want)):
                if outs.get(k) != want.get(k):
                    differ += 1
                    print(f"DIFFERS {cap} {cmd} {k}")
    n = sum(len(v) for v in got.values())
    print(f"{n} commands on {len(got)} captures: {differ} outputs differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
