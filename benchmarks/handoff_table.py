"""A markdown table of hand-off suite results side by side (``probe_overhead.py --json`` files).

One row per (case, variant), one column per file: the ratio to the same run's untraced kernel and
the cost per hand-off in ns. The ping-pong's round count (x200 at two ranks, x500 at one) is
dropped from the case name, so one-rank and two-rank runs line up::

    python3 benchmarks/handoff_table.py "2 ranks=p2.json" "2 ranks, maxnreg 255=p2m.json" \\
        --variants "waits;notifies;signals;spans;all" --cases "pipeline 8 x 8K fp32;fan-in x50"
"""

from __future__ import annotations

import argparse
import json
import re
import sys


def _case(name: str) -> str:
    return re.sub(r"^ping-pong x\d+", "ping-pong", name)


def load(path: str) -> dict:
    """(case, variant) -> row of one ``--json`` file (rows without a ratio left out)."""
    with open(path) as f:
        d = json.load(f)
    return {(_case(r["case"]), r["variant"]): r for r in d.get("rows", []) if "ratio" in r}


def cell(r: dict | None) -> str:
    if r is None:
        return "-"
    ns = r.get("extra_ns_per_handoff")
    return f"{r['ratio']:.4f}, {ns:+.0f} ns" if ns is not None else f"{r['ratio']:.4f}"


def table(columns: list[tuple[str, dict]], cases: list[str] | None = None, variants: list[str] | None = None) -> str:
    keys: list = []
    for _, rows in columns:
        keys += [k for k in rows if k not in keys]
    keys = [k for k in keys if (not cases or k[0] in cases) and (not variants or k[1] in variants)]
    if cases or variants:
        keys.sort(key=lambda k: (cases.index(k[0]) if cases else 0, variants.index(k[1]) if variants else 0))
    head = "| case | variant | " + " | ".join(t for t, _ in columns) + " |"
    lines = [head, "|" + "---|" * (2 + len(columns))]
    lines += [f"| {c} | {v} | " + " | ".join(cell(rows.get((c, v))) for _, rows in columns) + " |" for c, v in keys]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("columns", nargs="+", help="TITLE=FILE.json, one per column")
    ap.add_argument("--cases", default=None, help="case names separated by ';' (names hold commas), in this order (default: all)")
    ap.add_argument("--variants", default=None, help="variant names separated by ';', in this order (default: all)")
    a = ap.parse_args(argv)
    cols = []
    for c in a.columns:
        title, sep, path = c.partition("=")
        if not sep:
            ap.error(f"a column is TITLE=FILE.json, got {c!r}")
        try:
            cols.append((title, load(path)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"{path}: not a probe_overhead.py --json file ({e})")
    print(table(cols, a.cases.split(";") if a.cases else None, a.variants.split(";") if a.variants else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
