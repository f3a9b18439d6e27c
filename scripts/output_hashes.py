"""Hash what ``ktrace`` writes from every bundled capture, to show a refactoring changed no byte.

For each capture under ``ktrace/data/`` and ``tests/fixtures/`` it runs, in this process,
``ktrace report --json R.json --html R.html`` (its printed text too), ``ktrace merge -o X.pftrace``,
``ktrace merge -o X.json`` and ``ktrace merge -o X.ktrace``, and records the SHA-256 of every file
written (a split trace: the index and each part; a capture: its members' names and contents) with the
exit status. ``--compare OLD.json``
lists every output whose hash differs from an earlier run's::

    PYTHONPATH=$PWD python3 scripts/output_hashes.py -o before.json
    ...change the code...
    PYTHONPATH=$PWD python3 scripts/output_hashes.py -o after.json --compare before.json

Exit status 1 when ``--compare`` finds a difference.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def captures() -> list[Path]:
    """Every bundled capture, in a stable order."""
    found = sorted((ROOT / "ktrace" / "data").rglob("*.ktrace")) + sorted((ROOT / "tests" / "fixtures").rglob("*.ktrace"))
    return found


def _sha(path: Path) -> str:
    """SHA-256 of a file; of a capture (a zip), of its members' names and contents, since a zip
    also stores each member's time of writing."""
    if path.suffix == ".ktrace":
        import zipfile

        h = hashlib.sha256()
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                h.update(f"{info.filename}:{info.compress_type}:".encode() + zf.read(info) + b"\0")
        return h.hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(argv: list[str]) -> tuple[int, str]:
    """``ktrace ARGV`` in this process: its exit status and the SHA-256 of what it printed."""
    from ktrace.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as e:  # (argparse)
            status = e.code
    return int(status or 0), hashlib.sha256(out.getvalue().encode()).hexdigest()


def hash_capture(cap: Path, tmp: Path) -> dict[str, str]:
    """The hashes of every output made from ``cap``, keyed ``command/output``. The capture is named
    relative to the checkout (run from its root): a report names its source, and two checkouts
    then write the same report."""
    got: dict[str, str] = {}
    cap = cap.relative_to(ROOT)
    work = tmp / cap.stem
    work.mkdir()
    rep_json, rep_html = work / "r.json", work / "r.html"
    status, printed = _run(["report", str(cap), "-q", "--json", str(rep_json), "--html", str(rep_html)])
    got["report/status"] = str(status)
    got["report/stdout"] = printed
    for f in (rep_json, rep_html):
        if f.exists():
            got[f"report/{f.name}"] = _sha(f)
    for suffix in ("pftrace", "json", "ktrace"):
        out_dir = work / suffix
        out_dir.mkdir()
        status, printed = _run(["merge", str(cap), "-o", str(out_dir / f"x.{suffix}")])
        got[f"merge.{suffix}/status"] = str(status)
        for f in sorted(out_dir.iterdir()):
            got[f"merge.{suffix}/{f.name}"] = _sha(f)
    return got


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", required=True, help="where to write the hashes (JSON)")
    p.add_argument("--compare", metavar="OLD.json", help="an earlier run's hashes: list every difference")
    args = p.parse_args()
    os.chdir(ROOT)
    result: dict[str, dict[str, str]] = {}
    # (one fixed folder: the report's printed text names the files it wrote; TMPDIR moves it)
    tmp = Path(tempfile.gettempdir()) / "ktrace-output-hashes"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for i, cap in enumerate(captures()):
            name = str(cap.relative_to(ROOT))
            print(f"[{i + 1}] {name}", file=sys.stderr, flush=True)
            d = Path(tmp) / str(i)
            d.mkdir()
            result[name] = hash_capture(cap, d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    Path(args.output).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    n = sum(len(v) for v in result.values())
    print(f"{args.output}: {n} hashes of {len(result)} captures")
    if not args.compare:
        return 0
    old = json.loads(Path(args.compare).read_text())
    diffs = []
    for name in sorted(set(old) | set(result)):
        a, b = old.get(name, {}), result.get(name, {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                diffs.append(f"{name}: {key}: {a.get(key, 'absent')} -> {b.get(key, 'absent')}")
    print("\n".join(diffs) if diffs else f"no difference from {args.compare}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
