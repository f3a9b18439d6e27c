"""Record every analysis result on a fixed set of CONSTRUCTED captures, to check rewrites against.

The analyses are rewritten for speed from time to time; their results must not change. This
script runs :func:`ktrace.analysis.build_report` (every table, every row, the findings and the
summary) and :func:`ktrace.analysis.build_diff` on the captures of :func:`cases` and writes a
digest of each table plus the findings' text to ``golden_report.json``.
``test_golden.py`` recomputes the same and compares. Run it again only when a result is meant to
change (and say why in the commit)::

    python tests/analysis/make_golden.py             # rewrite golden_report.json
    python tests/analysis/make_golden.py --dump DIR  # also write every table in full (to compare)

The captures are CONSTRUCTED (``ktrace.analysis.scenario``, ``ktrace.captures.synth``): the test
scenarios, several launches of them, and variants that reach the less common code paths (spans
that overlap without nesting and ties in time, from seeded jitter; ``ge`` waits paired through
the counter and set fallbacks; a timeout cascade; a capture through the clock alignment).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ktrace.analysis import Trace, build_diff, build_report, diff_json, report_json  # noqa: E402
from ktrace.analysis import scenario as S  # noqa: E402
from ktrace.analysis.report import ReportConfig  # noqa: E402
from ktrace.analysis.trace import table_to_records  # noqa: E402
from ktrace.schema import EventKind  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden_report.json"
_HEAVY = {(1, 3): 3, (2, 5): 3, (0, 0): 4}


def _trace(table: np.ndarray, world: int) -> Trace:
    launches = sorted(set(table["launch"].tolist()))
    return Trace(events=table, regions=S.REGIONS, world_size=world,
                 kernels={(r, ln): "a2a_constructed" for r in range(world) for ln in launches}, source="constructed")


def _jitter(table: np.ndarray, seed: int, ns: int) -> np.ndarray:
    """Times moved by up to ``ns`` (seeded): spans overlap without nesting, some start together."""
    t = table.copy()
    rng = np.random.default_rng(seed)
    s = t["start_ns"] + rng.integers(-ns, ns + 1, t.size)
    e = np.maximum(t["end_ns"] + rng.integers(-ns, ns + 1, t.size), s)
    # a few exact ties of start times within a workgroup
    tie = rng.random(t.size) < 0.05
    s[1:][tie[1:]] = s[:-1][tie[1:]]
    e = np.maximum(e, s)
    t["start_ns"], t["end_ns"], t["start"], t["end"] = s, e, s, e
    return t


def _counter_flags(table: np.ndarray) -> np.ndarray:
    """Notifies that add 1 (a counter) and waits for the running count: the counter fallback."""
    t = table.copy()
    n = t["kind"] == int(EventKind.NOTIFY)
    t["arg1"][n] = 1
    return t


def _low_expected(table: np.ndarray) -> np.ndarray:
    """Waits for ``>= 1`` on flags set to the tile number: the set fallback (first notify reaching it)."""
    t = table.copy()
    w = t["kind"] == int(EventKind.WAIT)
    t["arg4"][w] = 1
    return t


def cases() -> dict[str, object]:
    """name -> what ``build_report`` is given."""
    from ktrace.captures.synth import constructed_capture

    late = S.build(S.Scenario(iters=2, late_rank=2, late_ns=20_000))
    skew = S.build(S.Scenario(iters=2, work=_HEAVY))
    out = {
        "late-20us": _trace(S.build(S.Scenario(iters=1, late_rank=2, late_ns=20_000)), 4),
        "late-200us": _trace(S.build(S.Scenario(iters=1, late_rank=1, late_ns=200_000)), 4),
        "skewed-work": _trace(skew, 4),
        "skipped-notify": _trace(S.build(S.Scenario(iters=3, skip=((2, 1, 5, 2),))), 4),
        "skipped-two": _trace(S.build(S.Scenario(world=3, programs=5, iters=3, skip=((0, 1, 2, 1), (1, 0, 3, 1)))), 3),
        "launches-late": _trace(S.replicate(late, 3), 4),
        "launches-skewed": _trace(S.replicate(skew, 2), 4),
        "jitter": _trace(_jitter(S.replicate(late, 2), seed=1, ns=3_000), 4),
        "jitter-wide": _trace(_jitter(S.build(S.Scenario(iters=3, work=_HEAVY, late_rank=0, late_ns=5_000)), seed=2,
                                      ns=20_000), 4),
        "counter": _trace(_counter_flags(S.replicate(late, 2)), 4),
        "low-expected": _trace(_low_expected(S.replicate(skew, 2)), 4),
        "capture-file": S.to_capture(S.build(S.Scenario(iters=1, late_rank=3, late_ns=20_000))),
        "synth-capture": constructed_capture(world_size=3, programs=4, iters=3)[0],
    }
    return out


def _canonical(o):
    """numpy scalars and arrays as plain Python values for the stdlib encoder."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"cannot digest {type(o).__name__}")


def _digest(records: list) -> str:
    # The standard library's encoder (floats as repr) rather than orjson: orjson's float format
    # changed between versions (1.7e+18 vs 1.7e18), which changed digests of equal tables.
    text = json.dumps(records, sort_keys=True, default=_canonical, allow_nan=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _full(t: np.ndarray) -> list:
    from ktrace.analysis.document import jsonable

    return jsonable(table_to_records(t))


def results(dump: Path | None = None, config: ReportConfig | None = None) -> dict:
    """Every case's report (digests of full tables, findings, summary) and one diff."""
    out: dict = {}
    cs = cases()
    for name, src in cs.items():
        rep = build_report(src, config or ReportConfig())
        js = report_json(rep)
        tables = {}
        for tname, t in rep.tables.items():
            rows = _full(t)
            tables[tname] = {"rows": len(rows), "sha256": _digest(rows)}
            if dump is not None:
                (dump / f"{name}.{tname}.json").write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
        out[name] = {"summary": js["summary"], "findings": js["findings"], "tables": tables}
    d = build_diff(cs["launches-late"], cs["launches-skewed"])
    dj = diff_json(d, max_rows=10**9)
    out["diff"] = {"summary": dj["summary"], "findings": dj["findings"],
                   "tables": {k: {"rows": v["rows_total"], "sha256": _digest(v["rows"])}
                              for k, v in dj["tables"].items()}}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dump", type=Path, help="also write every table in full to this folder")
    p.add_argument("--out", type=Path, default=GOLDEN)
    a = p.parse_args()
    if a.dump:
        a.dump.mkdir(parents=True, exist_ok=True)
    res = results(a.dump)
    a.out.write_bytes(orjson.dumps(res, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    print(f"wrote {a.out} ({len(res)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
