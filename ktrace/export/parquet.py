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
- ``manifest.json``: the capture, its run, the files and their row counts (``format`` is
  ``ktrace-parquet``: what marks a folder as a ktrace export).

The folder is written whole or not at all: the tables are written into a temporary folder next
to it (``ktrace.fileio.atomic_folder``) and renamed into place once all are complete, replacing
an earlier export of ktrace's (a folder holding only ``manifest.json`` of format
``ktrace-parquet`` and the tables it names) or an empty folder; a folder holding anything else, a
symbolic link, or a file is refused before anything is written (:func:`check_out_dir`). A table
that cannot be written (a full disk) is named in the error (:class:`ktrace.fileio.OutputError`),
never blamed on the capture.

Every table has a ``capture`` column (the capture file's name), so a folder of exports reads as
one table (``read_parquet('exports/*/findings.parquet')`` in DuckDB). The report is consumed
through its public tables and JSON (``ktrace.analysis.build_report``, ``report_json``).

Needs ``pyarrow`` (``pip install 'ktrace[parquet]'``); never torch or triton.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
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
#: What ``manifest.json``'s ``format`` says.
MANIFEST_FORMAT = "ktrace-parquet"
#: The tables an export holds (``<name>.parquet``).
TABLES = ("events", "waits", "workgroups", "causes", "findings")
#: Largest ``manifest.json`` read when checking a folder (ktrace's are under 4 KiB).
_MAX_MANIFEST = 1 << 20


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


def write_events(capture, path: str | os.PathLike, *, name: str, model=None, shown: str | os.PathLike | None = None) -> int:
    """Write ``events.parquet``: one row group per decoded batch. Returns the rows written.

    Raises:
        ktrace.fileio.OutputError: the file cannot be written; the message names ``shown``
            (default ``path``).
    """
    from ..clock.model import clock_model_of
    from ..events import iter_batches

    pa, pq = _pa()
    sch = event_schema(pa)
    model = model or clock_model_of(capture)
    n = 0
    with _naming(path, shown):
        w = pq.ParquetWriter(str(path), sch, compression="zstd")
    try:
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
            with _naming(path, shown):
                w.write_table(pa.Table.from_arrays(cols, schema=sch))
            n += rows
    finally:
        with _naming(path, shown):
            w.close()
    return n


@contextlib.contextmanager
def _naming(path, shown=None):
    """An OSError while writing ``path`` (pyarrow's say no file) as an OutputError naming the file
    (``shown``: the name to give, the final one when ``path`` is a temporary's)."""
    from ..fileio import OutputError

    try:
        yield
    except OutputError:
        raise
    except OSError as e:
        code = e.errno
        m = re.search(r"\[errno (\d+)\]", str(e))
        if code is None and m:
            code = int(m.group(1))
        why = os.strerror(code) if code else " ".join(str(e).split())
        raise OutputError(code, f"cannot write {shown or path}: {why}") from None


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


def _is_export(folder: Path) -> str | None:
    """None when ``folder`` holds only what an export of ktrace's holds (see the module), else what
    else it holds, in words."""
    names = sorted(os.listdir(folder))
    if not names:
        return None
    man = folder / "manifest.json"
    try:
        st = os.lstat(man)
    except FileNotFoundError:
        return f"{folder / names[0]}, not written by ktrace export (no manifest.json of a ktrace export)"
    if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_MANIFEST:
        return f"{man}, which is not a ktrace export's manifest"
    try:
        doc = orjson.loads(man.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        doc = None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT or not isinstance(files, dict):
        return f"{man}, which is not a ktrace export's manifest (its format is not {MANIFEST_FORMAT!r})"
    ours = {"manifest.json"} | {f"{t}.parquet" for t in TABLES}
    for n in names:
        st = os.lstat(folder / n)
        if n not in ours or not stat.S_ISREG(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "a file"
            return f"{folder / n}, {what} that ktrace export does not write"
    return None


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """``out_dir`` if an export may be written there: a folder that does not exist yet, an empty folder, or an earlier export of ktrace's. Raises ValueError (one line naming
    it) for a symbolic link, a file, or a folder that holds anything else."""
    out = Path(out_dir)
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return out  # (made, with the folders above it)
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(f"{out} is a symbolic link: refusing to write through it (give the folder itself)")
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{out} is a file: give a directory to write the tables into")
    other = _is_export(out)
    if other is not None:
        raise ValueError(f"{out} holds {other}: give an empty directory, or an earlier export's")
    return out


def export_parquet(capture_path: str | os.PathLike, out_dir: str | os.PathLike, *, config=None) -> dict:
    """Write a capture's tables as Parquet files into ``out_dir`` (see the module's docstring).

    The events are written first, batch by batch; then the report is built (its own memory) and
    its tables written. All go into a temporary folder next to ``out_dir``, renamed into place
    once complete.

    Returns:
        The manifest (also written as ``manifest.json``).

    Raises:
        ParquetUnavailable: no pyarrow.
        CaptureError, AnalysisError: a capture that cannot be read or analysed.
        ValueError: ``out_dir`` is not a place an export may be written (:func:`check_out_dir`).
        ktrace.fileio.OutputError: a table could not be written (the message names it).
    """
    from ..analysis import build_report, report_json, wait_causes
    from ..captures import read_capture
    from ..fileio import OutputError, atomic_folder, put_folder

    pa, pq = _pa()
    out = check_out_dir(out_dir)
    name = Path(capture_path).name
    cap = read_capture(capture_path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(e.errno, f"cannot write {out}: {e.strerror or e}") from None
    with atomic_folder(out) as tmp:
        rows = {"events": write_events(cap, tmp / "events.parquet", name=name, shown=out / "events.parquet")}
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
            with _naming(tmp / f"{t}.parquet", out / f"{t}.parquet"):
                pq.write_table(tab, tmp / f"{t}.parquet", compression="zstd", row_group_size=ROW_GROUP)
            rows[t] = tab.num_rows
        manifest = {"format": MANIFEST_FORMAT, "version": PARQUET_VERSION, "capture": name, "source": str(capture_path),
                    "run_id": run_id, "clock": rep.summary.get("clock"),
                    # the counts and times the report prints, under its keys (ktrace.text.MEASURES)
                    "summary": {k: doc["summary"].get(k) for k in MEASURES},
                    "files": {t: f"{t}.parquet" for t in rows}, "rows": rows}
        with _naming(tmp / "manifest.json", out / "manifest.json"):
            (tmp / "manifest.json").write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        put_folder(tmp, out, check_out_dir)
    return manifest
