"""06 - A folder of captures as tables: rank 100 runs by what fixing their first finding would save.

    python examples/06_rank_captures_with_duckdb.py                 # no GPU: 100 captures made here, ranked
    python examples/06_rank_captures_with_duckdb.py --exports DIR   # rank a folder of `ktrace export` outputs

``ktrace export CAPTURE --format parquet DIR/<name>`` writes a capture's tables as Parquet files
(docs/parquet.md); every table carries the capture's name, so DuckDB reads a whole folder of
exports as one table with a glob. With no ``--exports``, the script exports 100 captures into
``./ktrace-example-06/``: the four captures bundled with ktrace (a MoE all-to-all recorded on
4 x H200, with a skewed launch, a skipped notify and two slow producers) and 96 CONSTRUCTED
two-rank captures (``ktrace.captures.synth``: random clock offsets and drifts, no fault). Then one
SQL query ranks them by their first finding's saving and another sums the waits' causes per
capture. Needs ``pip install duckdb`` (in ktrace's dev extra) besides ``ktrace[parquet]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb


def make_exports(out: Path, n: int) -> None:
    """Export ``n`` captures into ``out/<capture name>/``: the bundled ones, then constructed ones."""
    import ktrace
    from ktrace.captures import write_capture
    from ktrace.captures.synth import constructed_capture
    from ktrace.export.parquet import export_parquet

    caps = out / "captures"
    caps.mkdir(parents=True, exist_ok=True)
    files = sorted((Path(ktrace.__file__).parent / "data").glob("*.ktrace"))[:n]
    for seed in range(n - len(files)):
        cap, _ = constructed_capture(world_size=2, programs=4, iters=3, seed=seed)
        files.append(write_capture(caps / f"constructed_{seed:03d}.ktrace", cap))
    for f in files:
        export_parquet(f, out / "exports" / f.stem)


def rank(exports: Path, top: int = 10) -> list[tuple]:
    """Each capture's first finding, biggest saving first (DuckDB over every export's findings)."""
    glob = str(exports / "*" / "findings.parquet")
    con = duckdb.connect()
    n = con.execute(f"select count(distinct capture) from read_parquet('{glob}')").fetchone()[0]
    # (information has no saving: a capture whose first finding is no root cause has nothing to fix)
    rows = con.execute(f"""
        select capture, kind, saving_ns / 1e3 as saving_us, text
        from read_parquet('{glob}')
        where finding = 1 and saving_ns is not null
        order by saving_ns desc, capture
        limit {int(top)}""").fetchall()
    n_causes = con.execute(f"select count(distinct capture) from read_parquet('{glob}') where finding = 1 "
                           "and saving_ns is not null").fetchone()[0]
    print(f"{n} captures, {n_causes} with a root cause to fix; their first findings, biggest saving first:")
    for cap, kind, us, text in rows:
        print(f"  {us:10.1f} µs  {cap:<34} {kind:<14} {text[:70]}")
    print(f"{n - n_causes} captures with no root cause (their first finding is information)")
    waits = con.execute(f"""
        select capture, count(*) as waits, sum(wait_ns) / 1e3 as wait_us, sum(producer_late_ns) / 1e3 as late_us
        from read_parquet('{exports / "*" / "waits.parquet"}')
        group by capture order by wait_us desc limit 3""").fetchall()
    print("most waiting (µs): " + "; ".join(f"{c} {w:.0f} waits {t:.1f} (producer late {p:.1f})" for c, w, t, p in waits))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exports", type=Path, help="a folder of `ktrace export` outputs (default: make 100 here)")
    ap.add_argument("--n", type=int, default=100, help="captures to make and export when no --exports (default 100)")
    ap.add_argument("--out", type=Path, default=Path("ktrace-example-06"), help="where to make them")
    args = ap.parse_args(argv)
    exports = args.exports
    if exports is None:
        make_exports(args.out, args.n)
        exports = args.out / "exports"
    if not any(exports.glob("*/findings.parquet")):
        print(f"{exports}: no exports (*/findings.parquet) in it", file=sys.stderr)
        return 2
    rank(exports)
    print("\nthe same tables in Polars: pl.scan_parquet('" + str(exports / "*" / "findings.parquet") + "')")
    print("look at the first one's trace:\n  ktrace merge CAPTURE -o top.pftrace && ktrace open top.pftrace")
    return 0


if __name__ == "__main__":
    sys.exit(main())
