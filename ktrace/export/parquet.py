"""A capture's tables as Apache Parquet files, for DuckDB, Polars, pandas, Spark and friends.

``ktrace export CAPTURE --format parquet DIR`` writes into ``DIR`` (schema: ``docs/parquet.md``):

- ``events.parquet``: every event on the common clock, names resolved (kernel, kind, region),
  written batch by batch as the capture is decoded (``ktrace.events.iter_batches``: at most
  ``ktrace.events.BATCH_BYTES`` of raw records at a time), so memory stays bounded however
  large the capture;
- ``waits.parquet``: each wait with the notify that released it and why it waited (the report's
  ``waits`` table, joined by event row with ``ktrace.analysis.wait_causes``);
- ``workgroups.parquet``: the report's ``workgroups`` table;
- ``findings.parquet``: the report's findings, most costly first (``finding`` = 1, 2, ...);
- ``causes.parquet``: the report's root causes with what each would save;
- ``manifest.json``: the capture, its run, the files and their row counts.

Every table has a ``capture`` column (the capture file's name), so a folder of exports reads as
one table (``read_parquet('exports/*/findings.parquet')`` in DuckDB). The report is consumed
through its public tables and JSON (``ktrace.analysis.build_report``, ``report_json``).

Needs ``pyarrow`` (``pip install 'ktrace[parquet]'``); never torch or triton.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import orjson

from .. import schema
from ..text import MEASURES

log = logging.getLogger("ktrace")

#: The export's layout version (``manifest.json``; ``docs/parquet.md``).
PARQUET_VERSION = 1
#: Rows per row group of the report's tables.
ROW_GROUP = 1 << 16


class ParquetUnavailable(RuntimeError):
    """pyarrow is not installed (the message says how to get it)."""


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ParquetUnavailable("writing Parquet needs pyarrow: pip install 'ktrace[parquet]'") from None
    return pa, pq


def _names(codes: np.ndarray, name_of) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode names of integer codes: (indices, dictionary), one call per distinct code."""
    uniq, inv = np.unique(codes, return_inverse=True)
    return inv.reshape(-1).astype(np.int32), [name_of(int(u)) for u in uniq.tolist()]


def _dict_col(pa, idx: np.ndarray, values: list[str]):
    return pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), pa.array(values, pa.string()))


_KIND_NAMES = {int(k): k.name.lower() for k in schema.EventKind}


def event_schema(pa):
    """The Arrow schema of ``events.parquet``."""
    d = pa.dictionary(pa.int32(), pa.string())
    return pa.schema([
        ("capture", d), ("rank", pa.int32()), ("launch", pa.int32()), ("kernel", d), ("program", pa.int32()),
        ("lane", pa.int32()), ("slot", pa.int32()), ("kind_id", pa.uint8()), ("kind", d), ("flags", pa.uint8()), ("region_id", pa.uint32()), ("region", d),
        ("hw", pa.uint32()), ("start", pa.int64()), ("end", pa.int64()),
        *[(c, pa.int64()) for c in schema.ARG_COLUMNS],
        ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("dur_ns", pa.int64()),
    ])


def write_events(capture, path: str | os.PathLike, *, name: str, model=None) -> int:
    """Write ``events.parquet``: one row group per decoded batch. Returns the rows written."""
    from ..clock.model import clock_model_of
    from ..events import iter_batches

    pa, pq = _pa()
    sch = event_schema(pa)
    model = model or clock_model_of(capture)
    n = 0
    with pq.ParquetWriter(str(path), sch, compression="zstd") as w:
        for refs, b in iter_batches(capture, model):
            rows = b.size
            if rows == 0:
                continue
            c = b.cols
            lns = [refs[li][1] for li in b.launches]
            launch = b.per_row(np.array([ln.index for ln in lns], np.int32))
            k_idx, k_names = _names(b.per_row(np.arange(len(lns), dtype=np.int32)), lambda i: lns[i].kernel)
            kind_idx, kind_names = _names(c["kind"], lambda k: _KIND_NAMES.get(k, f"kind{k}"))
            reg_idx, reg_names = _names(c["region"], capture.region_name)
            cols = [
                _dict_col(pa, np.zeros(rows, np.int32), [name]), pa.array(np.full(rows, b.rank, np.int32)), pa.array(launch),
                _dict_col(pa, k_idx, k_names), pa.array(c["program"].astype(np.int32)),
                pa.array(_lane(c, rows)), pa.array(c["slot"].astype(np.int32)),
                pa.array(c["kind"].astype(np.uint8)), _dict_col(pa, kind_idx, kind_names), pa.array(c["flags"].astype(np.uint8)),
                pa.array(c["region"].astype(np.uint32)), _dict_col(pa, reg_idx, reg_names), pa.array(c["hw"].astype(np.uint32)),
                pa.array(c["start"].astype(np.int64)), pa.array(c["end"].astype(np.int64)),
                *[pa.array(c[a].astype(np.int64)) for a in schema.ARG_COLUMNS],
                pa.array(c["start_ns"]), pa.array(c["end_ns"]), pa.array(c["end_ns"] - c["start_ns"]),
            ]
            w.write_table(pa.Table.from_arrays(cols, schema=sch))
            n += rows
    return n


def _lane(c, rows: int) -> np.ndarray:
    """The lane column of a decoded batch (0 for a buffer written one lane per program)."""
    lane = c.get("lane")
    return np.zeros(rows, np.int32) if lane is None else np.asarray(lane).astype(np.int32)


def _column(pa, v: np.ndarray):
    """A table column as Arrow: numbers as they are, objects (names, lists) by their values."""
    if v.dtype.kind == "O":
        vals = v.tolist()
        if any(isinstance(x, (list, tuple, np.ndarray)) for x in vals):
            return pa.array([None if x is None else [int(y) for y in x] for x in vals], pa.list_(pa.int64()))
        return pa.array([None if x is None else str(x) for x in vals], pa.string())
    return pa.array(v)


def table_to_arrow(pa, t, name: str, extra: dict | None = None):
    """A report table (structured array or ``ColumnTable``) as an Arrow table, ``capture`` first."""
    names = list(t.dtype.names or ())
    cols = {"capture": pa.array(np.full(t.size, name, dtype=object), pa.string())}
    for c in names:
        cols[c] = _column(pa, np.asarray(t[c]))
    for c, v in (extra or {}).items():
        cols[c] = _column(pa, np.asarray(v))
    return pa.table(cols)


def _saving(finding: dict) -> float | None:
    """What fixing a finding would save: a root cause's replay saving (its data's ``saving_ns``);
    None for information (exposed communication, the critical path, a partition's hold-up)."""
    v = (finding.get("data") or {}).get("saving_ns")
    return float(v) if v is not None else None


def findings_table(pa, doc: dict, name: str, run_id: str | None = None):
    """The report JSON's findings as an Arrow table, one row per finding in report order."""
    f = doc.get("findings") or []
    return pa.table({
        "capture": pa.array([name] * len(f), pa.string()),
        "run_id": pa.array([run_id] * len(f), pa.string()),
        "finding": pa.array(np.arange(1, len(f) + 1, dtype=np.int32)),
        "kind": pa.array([x["kind"] for x in f], pa.string()),
        "severity": pa.array([x["severity"] for x in f], pa.string()),
        # (a root cause's replay saving; information has none: null, never ranked with the causes)
        "saving_ns": pa.array([_saving(x) for x in f], pa.float64()),
        "text": pa.array([x["text"] for x in f], pa.string()),
        "ranks": pa.array([[int(r) for r in x.get("ranks") or []] for x in f], pa.list_(pa.int64())),
        "start_ns": pa.array([x.get("start_ns") for x in f], pa.int64()),
        "end_ns": pa.array([x.get("end_ns") for x in f], pa.int64()),
        "data_json": pa.array([orjson.dumps(x.get("data") or {}, option=orjson.OPT_SERIALIZE_NUMPY).decode() for x in f], pa.string()),
    })


def export_parquet(capture_path: str | os.PathLike, out_dir: str | os.PathLike, *, config=None) -> dict:
    """Write a capture's tables as Parquet files into ``out_dir`` (see the module's docstring).

    The events are written first, batch by batch; then the report is built (its own memory) and
    its tables written.

    Returns:
        The manifest (also written as ``manifest.json``).

    Raises:
        ParquetUnavailable: no pyarrow.
        CaptureError, AnalysisError: a capture that cannot be read or analysed.
    """
    from ..analysis import build_report, report_json, wait_causes
    from ..captures import read_capture

    pa, pq = _pa()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = Path(capture_path).name
    cap = read_capture(capture_path)
    rows = {"events": write_events(cap, out / "events.parquet", name=name)}
    run_id = cap.run_id
    del cap
    rep = build_report(str(capture_path), config) if config is not None else build_report(str(capture_path))
    doc = report_json(rep)
    waits = rep.tables["waits"]
    extra = {}
    if rep.trace is not None and waits.size:
        wc = wait_causes(rep.trace)
        pos = np.searchsorted(wc["row"], np.asarray(waits["row"]))
        pos = np.minimum(pos, max(wc.size - 1, 0))
        if wc.size and np.array_equal(wc["row"][pos], np.asarray(waits["row"])):
            have = set(waits.dtype.names)
            extra = {c: wc[c][pos] for c in wc.dtype.names if c not in have and c != "row"}
        else:
            log.warning("the waits' causes could not be joined to the waits by event row: waits.parquet holds no cause columns")
    tables = {"waits": table_to_arrow(pa, waits, name, extra), "workgroups": table_to_arrow(pa, rep.tables["workgroups"], name),
              "causes": table_to_arrow(pa, rep.tables["causes"], name), "findings": findings_table(pa, doc, name, run_id)}
    for t, tab in tables.items():
        pq.write_table(tab, out / f"{t}.parquet", compression="zstd", row_group_size=ROW_GROUP)
        rows[t] = tab.num_rows
    manifest = {"format": "ktrace-parquet", "version": PARQUET_VERSION, "capture": name, "source": str(capture_path),
                "run_id": run_id, "clock": rep.summary.get("clock"),
                # the counts and times the report prints, under its keys (ktrace.text.MEASURES)
                "summary": {k: doc["summary"].get(k) for k in MEASURES},
                "files": {t: f"{t}.parquet" for t in rows}, "rows": rows}
    (out / "manifest.json").write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    return manifest
