"""What the numbered examples share: recording through ``ktrace run`` or reading a bundled
capture, and printing a table. Not an example itself."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def show(table: np.ndarray, cols: list[str], title: str, n: int = 8) -> None:
    """Print the first ``n`` rows of an analysis table (unit-suffixed columns: ``*_ns`` in µs)."""
    print(f"\n{title} ({table.size} rows{', first ' + str(n) if table.size > n else ''}):")
    if not table.size:
        print("  (none)")
        return
    heads = [c.removesuffix("_ns") + (" µs" if c.endswith("_ns") else "") for c in cols]
    rows = []
    for r in table[:n]:
        cells = []
        for c in cols:
            v = r[c]
            if c.endswith("_ns"):
                cells.append(f"{float(v) / 1e3:.1f}")
            elif isinstance(v, (float, np.floating)):
                cells.append(f"{float(v):.2f}")
            else:
                cells.append(str(v.decode() if isinstance(v, bytes) else v))
        rows.append(cells)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    print("  " + "  ".join(h.rjust(w) for h, w in zip(heads, widths)))
    for r in rows:
        print("  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)))


def record_or_exit(cfg) -> Path:
    """Record a ``ktrace.run.RunConfig`` on this node's GPUs; on failure print why and exit
    (status 2: not enough GPUs, 1: a rank failed)."""
    from ktrace.run import RunError, record, refusal

    why = refusal(cfg.nproc)
    if why:
        print(f"{why}\n(on a machine with no GPU, pass --from-capture to use a capture bundled with ktrace)", file=sys.stderr)
        sys.exit(2)
    try:
        return record(cfg)
    except RunError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
