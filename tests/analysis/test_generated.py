"""Right on kernels the report has never seen: hundreds of GENERATED hand-off programs, each with
the one cause put into it known (``ktrace.captures.generate``), written as real-format captures
and reported on.

For every case (``generated.judge``): the report does not crash; a healthy case (a cold first
launch included) says nothing is wrong; otherwise the first finding names the cause put in — its
kind, its agent (rank, programs, lane), its rounds, its magnitude within 10 % — and what it says a
fix would save is within 25 % of the time the cause put into the simulated launches; no cause is
found in a warm-up launch only; every claim of every finding holds in the raw events
(``claims.py``). The seeds are fixed (``KTRACE_GENERATED_SEED`` moves the first one, to look at
others); a failing case names its seed, and ``python -m tests.analysis.generated SEED`` shows it.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest

from ktrace.captures.generate import KINDS, PATTERNS

from .generated import run_case

#: Cases per run, and per test (the tests split them to keep each short and its failures apart).
N_CASES, PER_TEST = 520, 40
FIRST = int(os.environ.get("KTRACE_GENERATED_SEED", "0"))
_SEEN: dict = {}  # seed -> (cause kind, world size, pattern, lanes)


@pytest.mark.parametrize("block", range(N_CASES // PER_TEST))
def test_generated_cases_are_reported_right(block, tmp_path):
    wrong = []
    for seed in range(FIRST + block * PER_TEST, FIRST + (block + 1) * PER_TEST):
        case, bad, _ = run_case(seed, tmp_path)
        s = case.shape
        _SEEN[seed] = (case.injected.kind, s.world, s.pattern, s.lanes)
        if bad:
            wrong.append(f"{case.describe()}\n    " + "\n    ".join(b[:600] for b in bad[:4])
                         + f"\n    (python -m tests.analysis.generated {seed})")
    assert not wrong, f"{len(wrong)} of {PER_TEST} cases reported wrong:\n" + "\n".join(wrong)


def test_the_draws_cover_every_cause_pattern_and_world_size():
    """The run's counts by cause kind and world size (printed; kept in tests/analysis/artifacts):
    every cause at one rank (where one rank can hold it) and at several, every pattern, lanes."""
    if len(_SEEN) < N_CASES:
        pytest.skip("the generated cases did not all run (a -k selection)")
    counts = collections.Counter((k, w) for k, w, _, _ in _SEEN.values())
    worlds = sorted({w for _, w in counts})
    lines = [f"{len(_SEEN)} generated cases (seeds {FIRST}..{FIRST + N_CASES - 1}), by cause kind and world size:",
             "kind         " + "".join(f"{f'W={w}':>7}" for w in worlds) + "   all"]
    for k in KINDS:
        row = [counts[(k, w)] for w in worlds]
        lines.append(f"{k:<12} " + "".join(f"{n:>7}" for n in row) + f"{sum(row):>6}")
    lines.append("patterns: " + ", ".join(f"{p} {sum(1 for v in _SEEN.values() if v[2] == p)}" for p in PATTERNS)
                 + f"; programs of several lanes: {sum(1 for v in _SEEN.values() if v[3] > 1)}")
    text = "\n".join(lines)
    print("\n" + text)
    art = Path(__file__).resolve().parent / "artifacts"
    art.mkdir(exist_ok=True)
    (art / "generated_counts.txt").write_text(text + "\n")
    for k in KINDS:
        assert sum(counts[(k, w)] for w in worlds if w > 1) >= 10, (k, text)
    for k in ("healthy", "straggler", "held", "hang", "heavy"):
        assert counts[(k, 1)] >= 5, (k, text)
    assert {w for _, w in counts} >= {1, 2, 3, 4, 8}
    assert all(sum(1 for v in _SEEN.values() if v[2] == p) >= 50 for p in PATTERNS), text
