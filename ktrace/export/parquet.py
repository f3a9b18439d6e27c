"""A capture's tables as Apache Parquet files, for DuckDB, Polars, pandas, Spark and friends.

``ktrace export CAPTURE --format parquet DIR`` writes into ``DIR`` (schema: ``docs/parquet.md``):

- ``events.parquet``: every event on the common clock, names resolved (kernel, kind, region),
  written a row group (:data:`EVENT_ROW_GROUP` rows) at a time as the capture is decoded
  (``ktrace.events.iter_chunks``: at most ``ktrace.events.BATCH_BYTES`` of raw records at a
  time), so memory stays bounded however large the capture;
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
through its public tables and JSON (``ktrace.analysis.build_report``, ``findings_json``).

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
    """Write ``events.parquet``: row groups of :data:`EVENT_ROW_GROUP` rows (the last shorter),
    whatever the launches' sizes and order, made from runs of consecutive launches decoded
    together (``ktrace.events.iter_chunks``: at most ``ktrace.events.BATCH_BYTES`` of raw records
    at a time) by a thread while this one writes the previous row group (pyarrow encodes and
    compresses without the interpreter lock). Returns the rows written.

    Raises:
        ktrace.fileio.OutputError: the file cannot be written; the message names ``shown``
            (default ``path``).
    """
    pa, pq = _pa()
    sch = event_schema(pa)
    n = 0
    with _naming(path, shown):
        w = pq.ParquetWriter(str(path), sch, compression="zstd")
    try:
        for t in ahead(_event_groups(pa, sch, capture, name, model)):
            with _naming(path, shown):
                w.write_table(t, row_group_size=t.num_rows)
            n += t.num_rows
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


def ahead(items):
    """``items`` (an iterator) made by a thread one item ahead of the caller: while the caller
    writes an item, the next one is made (numpy and pyarrow work without the interpreter lock).
    What the iterator raises is raised here; a caller that stops early stops the thread."""
    import queue
    import threading

    done = object()
    ready: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def make() -> None:
        try:
            for x in items:
                while not stop.is_set():
                    try:
                        ready.put((x, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ready.put((done, None))
        except BaseException as e:  # (raised in the caller's thread)
            ready.put((None, e))

    maker = threading.Thread(target=make, name="ktrace-parquet", daemon=True)
    maker.start()
    try:
        while True:
            x, err = ready.get()
            if err is not None:
                raise err
            if x is done:
                return
            yield x
    finally:
        stop.set()
        while maker.is_alive():  # (a maker blocked on a full queue sees the stop)
            try:
                ready.get_nowait()
            except queue.Empty:
                pass
            maker.join(0.05)


#: Rows per row group of ``events.parquet``.
EVENT_ROW_GROUP = 1 << 20


def _event_groups(pa, sch, capture, name: str, model):
    """The row groups of ``events.parquet``, as Arrow tables of :data:`EVENT_ROW_GROUP` rows."""
    from ..clock.model import clock_model_of
    from ..events import iter_chunks

    model = model or clock_model_of(capture)
    kernels = sorted({ln.kernel for rc in capture.ranks.values() for ln in rc.launches})
    kernel_code = {k: i for i, k in enumerate(kernels)}
    kernel_names = pa.array(kernels, pa.string())
    kind_names = pa.array([_KIND_NAMES.get(k, f"kind{k}") for k in range(256)], pa.string())
    names = pa.array([name], pa.string())
    pending: list[dict] = []
    held = 0
    for refs, b in iter_chunks(capture, model):
        if b.size == 0:
            continue
        c = b.cols
        lns = [refs[li][1] for li in b.launches]
        cols = {"rank": np.full(b.size, b.rank, np.int32), "launch": b.per_row(np.array([ln.index for ln in lns], np.int32)),
                "kernel": b.per_row(np.array([kernel_code[ln.kernel] for ln in lns], np.int32)),
                "program": c["program"].astype(np.int32), "lane": _lane(c, b.size), "slot": c["slot"].astype(np.int32),
                "kind_id": c["kind"].astype(np.uint8), "flags": c["flags"].astype(np.uint8),
                "region_id": c["region"].astype(np.uint32), "hw": c["hw"].astype(np.uint32),
                "start": c["start"].astype(np.int64), "end": c["end"].astype(np.int64),
                **{a: c[a].astype(np.int64) for a in schema.ARG_COLUMNS},
                "start_ns": c["start_ns"], "end_ns": c["end_ns"]}
        pending.append(cols)
        held += b.size
        while held >= EVENT_ROW_GROUP:
            group, pending, held = _split_rows(pending, EVENT_ROW_GROUP)
            yield _event_table(pa, sch, group, names, kernel_names, kind_names, capture)
    if held:
        group, _, _ = _split_rows(pending, held)
        yield _event_table(pa, sch, group, names, kernel_names, kind_names, capture)


def _split_rows(parts: list[dict], n: int) -> tuple[dict, list[dict], int]:
    """The first ``n`` rows of column sets ``parts`` as one, and the rest (and its rows)."""
    take, rest, got = [], [], 0
    for p in parts:
        size = p["rank"].size
        if got >= n:
            rest.append(p)
        elif got + size <= n:
            take.append(p)
            got += size
        else:
            k = n - got
            take.append({c: v[:k] for c, v in p.items()})
            rest.append({c: v[k:] for c, v in p.items()})
            got = n
    group = {c: np.concatenate([p[c] for p in take]) if len(take) > 1 else take[0][c] for c in take[0]}
    return group, rest, sum(p["rank"].size for p in rest)


def _event_table(pa, sch, cols: dict, names, kernel_names, kind_names, capture):
    """One row group of ``events.parquet`` from its columns (names as dictionaries)."""
    rows = cols["rank"].size
    reg_idx, reg_names = _names(cols["region_id"], capture.region_name)
    arrays = {
        "capture": pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), names),
        "kernel": pa.DictionaryArray.from_arrays(pa.array(cols["kernel"]), kernel_names),
        "kind": pa.DictionaryArray.from_arrays(pa.array(cols["kind_id"].astype(np.int32)), kind_names),
        "region": _dict_col(pa, reg_idx, reg_names),
        "dur_ns": pa.array(cols["end_ns"] - cols["start_ns"]),
    }
    return pa.Table.from_arrays([arrays[f.name] if f.name in arrays else pa.array(cols[f.name]) for f in sch], schema=sch)


def _lane(c, rows: int) -> np.ndarray:
    """The lane column of a decoded batch (0 for a buffer written one lane per program)."""
    lane = c.get("lane")
    return np.zeros(rows, np.int32) if lane is None else np.asarray(lane).astype(np.int32)


def _column(pa, v: np.ndarray):
    """A table column as Arrow: numbers as they are, objects (names, lists) by their values."""
    if v.dtype.kind == "O":
        try:  # (names: every value a string or None, converted in one call)
            return pa.array(v, pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
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


def write_table(pa, pq, path, t, name: str, extra: dict | None = None) -> int:
    """Write a report table (and ``extra`` columns of its length) as ``path``, a row group of
    :data:`ROW_GROUP` rows at a time: each converted from the table's columns when it is
    written (a lazy column of a ``ColumnTable`` made at those rows), so the whole table is never
    held as Arrow. Returns its rows."""
    n = int(t.size)
    if n <= ROW_GROUP:
        tab = table_to_arrow(pa, t, name, extra)
        pq.write_table(tab, path, compression="zstd", row_group_size=ROW_GROUP)
        return tab.num_rows
    take = t.at_rows if hasattr(t, "at_rows") else (lambda c, idx: t[c][idx])

    def groups():
        for a in range(0, n, ROW_GROUP):
            idx = np.arange(a, min(a + ROW_GROUP, n))
            yield table_to_arrow(pa, _Rows(t, take, idx), name, _sliced(extra, slice(a, a + ROW_GROUP)))

    parts = ahead(groups())
    first = next(parts)
    with pq.ParquetWriter(str(path), first.schema, compression="zstd") as w:
        w.write_table(first, row_group_size=ROW_GROUP)
        for part in parts:
            if not part.schema.equals(first.schema):  # (an object column read differently: the whole table at once)
                parts.close()
                break
            w.write_table(part, row_group_size=ROW_GROUP)
        else:
            return n
    tab = table_to_arrow(pa, t, name, extra)
    pq.write_table(tab, path, compression="zstd", row_group_size=ROW_GROUP)
    return tab.num_rows


class _Rows:
    """Some rows of a table, read like one (``dtype``, ``size``, ``t[column]``)."""

    def __init__(self, t, take, idx: np.ndarray):
        self.dtype, self.size, self._take, self._idx = t.dtype, int(idx.size), take, idx

    def __getitem__(self, c: str) -> np.ndarray:
        return self._take(c, self._idx)


def _sliced(extra: dict | None, sel: slice) -> dict:
    return {c: v[sel] for c, v in (extra or {}).items()}


def findings_table(pa, doc: dict, name: str, run_id: str | None = None):
    """The report JSON's findings (``doc["findings"]``: ``ktrace.analysis.findings_json``) as an
    Arrow table, one row per finding in report order."""
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
    from ..analysis import build_report, findings_json
    from ..analysis.causes.model import wait_cause_columns
    from ..analysis.document import jsonable
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
        # (the findings as the report's JSON has them: not the whole document, whose other tables
        # cost more than the report)
        doc = {"findings": findings_json(rep)}
        waits = rep.tables["waits"]
        extra = {}
        if rep.trace is not None and waits.size:
            wc = wait_cause_columns(rep.trace)
            wrow = np.asarray(waits["row"])
            have = set(waits.dtype.names)
            if np.array_equal(wc["row"], wrow):  # (both every wait in event order)
                extra = {c: v for c, v in wc.items() if c not in have and c != "row"}
            else:
                pos = np.minimum(np.searchsorted(wc["row"], wrow), max(wc["row"].size - 1, 0))
                if np.array_equal(wc["row"][pos], wrow):
                    extra = {c: v[pos] for c, v in wc.items() if c not in have and c != "row"}
                else:
                    log.warning("the waits' causes could not be joined to the waits by event row: waits.parquet holds no "
                                "cause columns")
            del wc
        for t, tab, more in (("waits", waits, extra), ("workgroups", rep.tables["workgroups"], {}),
                             ("causes", rep.tables["causes"], {})):
            with _naming(tmp / f"{t}.parquet", out / f"{t}.parquet"):
                rows[t] = write_table(pa, pq, tmp / f"{t}.parquet", tab, name, more)
        findings = findings_table(pa, doc, name, run_id)
        with _naming(tmp / "findings.parquet", out / "findings.parquet"):
            pq.write_table(findings, tmp / "findings.parquet", compression="zstd", row_group_size=ROW_GROUP)
        rows["findings"] = findings.num_rows
        manifest = {"format": MANIFEST_FORMAT, "version": PARQUET_VERSION, "capture": name, "source": str(capture_path),
                    "run_id": run_id, "clock": rep.summary.get("clock"),
                    # the counts and times the report prints, under its keys (ktrace.text.MEASURES)
                    "summary": {k: jsonable(rep.summary.get(k)) for k in MEASURES},
                    "files": {t: f"{t}.parquet" for t in rows}, "rows": rows}
        with _naming(tmp / "manifest.json", out / "manifest.json"):
            (tmp / "manifest.json").write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        put_folder(tmp, out, check_out_dir)
    return manifest
