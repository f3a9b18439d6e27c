"""What every analysis starts from: a capture's events on one clock, sorted, with names.

:func:`prepare` turns a ``ktrace.captures.Capture`` (or an already aligned event table) into a
:class:`Trace`: the events' columns decoded and aligned by ``ktrace.events`` (the same batches
the trace writers decode), sorted by rank, launch, program and slot, the region names, the
kernels' names and grids, and a dense workgroup id per event. Analyses read columns
(:meth:`Trace.column`, :meth:`Trace.at`), each copied once and cached; the full aligned table
(:attr:`Trace.events`) is built only when asked for.

The vectorised machinery the analyses share lives beside this module: composite keys and
group-bys in ``ktrace.keys``, span lookups in :mod:`ktrace.analysis.spans`, interval unions in
:mod:`ktrace.analysis.intervals`. Nothing in this package loops over events in Python.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import schema
from ..keys import dense_codes, is_lexsorted
from ..schema import EventKind
from ..text import printable, ranges_text

log = logging.getLogger("ktrace")

#: Called with (step name, steps done, steps in all) as a long analysis advances.
Progress = Callable[[str, int, int], None]

#: Columns an event table must have to be analysed (``schema.ALIGNED_DTYPE`` has them all).
REQUIRED_COLUMNS = ("rank", "launch", "program", "slot", "kind", "flags", "region", "hw", "arg0", "arg1", "arg2",
                    "arg3", "arg4", "arg5", "start_ns", "end_ns")


class AnalysisError(ValueError):
    """The input cannot be analysed (not aligned, missing columns, nothing recorded)."""


def _align(capture, model=None) -> tuple[np.ndarray, object]:
    """The capture's aligned event table and the clock model used."""
    from ..clock.model import clock_model_of
    from ..events import aligned_events

    model = model or clock_model_of(capture)
    return aligned_events(capture, model), model


def _events_of(load_capture: Callable[[], object], model) -> np.ndarray:
    """The aligned event table of the capture ``load_capture()`` returns, on ``model``'s clock."""
    try:
        return _align(load_capture(), model)[0]
    except (KeyError, ValueError) as e:  # the file is gone or another capture now
        raise AnalysisError(f"cannot rebuild the event table: {e}") from e


_LOCKS_LOCK = threading.Lock()


class Trace:
    """A capture's events ready for analysis.

    Made by :func:`prepare` (from a capture: the columns the analyses use are decoded straight
    from the event buffers, the full table only on first use of :attr:`events`) or from an
    aligned event table (``Trace(events=table, ...)``).

    Attributes:
        events: the aligned event table (``start_ns``/``end_ns`` on the common clock), sorted by
            rank, launch, program, slot. Analyses report rows of it by index (``row`` columns).
            A trace prepared from a capture builds it on first use (from the capture, or by
            reading its file again); analyses use :meth:`column` and :meth:`at` instead.
        regions: region id -> name.
        world_size: ranks the capture was taken on.
        kernels: (rank, launch) -> kernel name.
        n_programs: (rank, launch) -> programs in the launch grid (0 when unknown).
        lanes: (rank, launch) -> the names of its programs' lanes, in lane order (``ktrace.gluon``;
            absent for a launch whose programs are one lane each). Events carry their lane in the
            ``lane`` column (0 in a table without one).
        partial: the capture misses ranks or was marked partial.
        clock: the ``ClockModel`` the events were aligned with (None for a given table).
        source: where it came from (a file name), for reports.
        wg: per event, a dense workgroup id (index into ``wg_keys``).
        wg_keys: per workgroup, ``(rank, launch, program)`` (int64, shape (W, 3)).
        meta: the capture's metadata (``Capture.meta``: its heap's allocations, the source lines
            of its probe calls, ...; empty for a given table).
        live: some launch of the capture is a live dump's (``ktrace.analysis.live``).
    """

    def __init__(self, events: np.ndarray | None = None, regions: dict[int, str] | None = None, world_size: int = 0,
                 kernels: dict[tuple[int, int], str] | None = None, n_programs: dict[tuple[int, int], int] | None = None,
                 partial: bool = False, clock: object | None = None, source: str = "", wg: np.ndarray | None = None,
                 wg_keys: np.ndarray | None = None, *, columns: "_Columns | None" = None,
                 load_events: Callable[[], np.ndarray] | None = None, meta: dict | None = None,
                 lanes: dict[tuple[int, int], tuple[str, ...]] | None = None, live: bool = False):
        self.lanes = lanes if lanes is not None else {}
        self.live = live
        self.regions = regions if regions is not None else {}
        self.world_size = world_size
        self.kernels = kernels if kernels is not None else {}
        self.n_programs = n_programs if n_programs is not None else {}
        self.partial = partial
        self.clock = clock
        self.source = source
        self.wg = wg
        self.wg_keys = wg_keys
        self.meta = dict(meta) if meta else {}
        self._cache: dict = {}
        self._locks: dict = {}
        self._load_events = load_events
        #: launches the capture marks as warm-up (``ktrace.capture(warmup=N)``)
        self.warmup_marked: frozenset = frozenset()
        #: (rank, launch) -> kernel name of the capture's launches left out of this trace
        #: (:func:`drop_launches`: warm-up); with ``kernels``, the mix of kernels its steps ran
        self.left_out: dict[tuple[int, int], str] = {}
        if events is None:
            if columns is None:
                raise AnalysisError("a Trace needs an aligned event table (or prepare() a capture)")
            # rows already sorted (checked while decoding)
            self._events = None
            self._n = columns.n
            for n, c in columns.cols.items():
                self._cache[("col", n)] = c
            for (k, n), c in columns.at.items():
                self._cache[("at", k, n)] = c
        else:
            names = events.dtype.names or ()
            missing = [c for c in REQUIRED_COLUMNS if c not in names]
            if missing:
                raise AnalysisError(
                    f"event table lacks columns {missing}: analyses need an aligned table (ktrace.events.aligned_events)"
                )
            self._events = ev = events
            self._n = int(ev.shape[0])
            if ev.size:
                # the columns are copied out once (blocked); sortedness is checked on the copies
                # (rows of a lane buffer: each lane's slots in order, lanes of a program in order)
                lane = ("lane",) if "lane" in names else ()
                cols = [self.column(c) for c in ("rank", "launch", "program", *lane)]
                if not _is_sorted(*cols, np.asarray(ev["slot"])):
                    order = np.lexsort((ev["slot"], *(ev[c] for c in lane), ev["program"], ev["launch"], ev["rank"]))
                    self._events = ev[order]
                    self._cache.clear()
        if self.wg is None:
            self.wg, self.wg_keys = _workgroups(self)
        if not self.world_size:
            self.world_size = int(self.column("rank").max()) + 1 if self._n else 0

    def __repr__(self) -> str:
        return (f"Trace(source={self.source!r}, events={self._n}, world_size={self.world_size}, "
                f"workgroups={self.n_workgroups}, partial={self.partial})")

    @property
    def events(self) -> np.ndarray:
        if self._events is None:
            if self._load_events is None:
                raise AnalysisError("this trace keeps no event table and cannot rebuild it")
            ev = self._load_events()
            if ev.shape[0] != self._n or not np.array_equal(ev["start_ns"], self.column("start_ns")):
                raise AnalysisError(f"{self.source}: the capture changed since it was prepared (its events differ)")
            self._events = ev
        return self._events

    @property
    def n_events(self) -> int:
        """Rows of :attr:`events` (without building the table)."""
        return self._n

    # -- names ---------------------------------------------------------------------------
    def region_name(self, rid: int) -> str:
        return self.regions.get(int(rid), f"region#{int(rid):06x}")

    def names_of(self, rids: np.ndarray) -> np.ndarray:
        """Region names (object array) for an array of region ids."""
        rids = np.asarray(rids)
        if rids.size == 0:
            return np.zeros(0, object)
        inv, u = dense_codes(rids)
        return np.array([self.region_name(x) for x in u.tolist()], dtype=object)[inv]

    def kernel_name(self, rank: int, launch: int) -> str:
        return self.kernels.get((int(rank), int(launch)), "?")

    # -- cached columns ------------------------------------------------------------------
    def column(self, name: str) -> np.ndarray:
        """A contiguous copy of one column (cached: structured-array columns are strided).

        The columns the analyses use are copied out together on first use, a block of rows at a
        time (the table is read once instead of once per column).
        """
        c = self._cache.get(("col", name))
        if c is None:
            if name in _COPIED and ("col", name) not in self._cache:
                self._copy_columns([n for n in _COPIED if n in (self.events.dtype.names or ())])
                c = self._cache.get(("col", name))
            if c is None:
                if name == "lane" and "lane" not in (self.events.dtype.names or ()):
                    c = np.zeros(self._n, np.int32)  # (a table from before lanes: every program one lane)
                else:
                    c = np.ascontiguousarray(self.events[name])
                self._cache[("col", name)] = c
        return c

    def _copy_columns(self, names: list[str]) -> None:
        ev = self.events
        names = [n for n in names if ("col", n) not in self._cache]
        cols = {n: np.empty(ev.shape[0], ev.dtype[n]) for n in names}
        # the argument columns only where they mean something (waits, notifies)
        have = ev.dtype.names or ()
        at_names = [n for n in _COPIED_AT[0] if n in have] if "kind" in names else []
        kinds = [int(k) for k in _COPIED_AT[1]]
        kind_col = cols.get("kind")
        at = {}
        if at_names:
            counts = np.bincount(np.asarray(ev["kind"]), minlength=256)
            at = {(k, n): np.empty(int(counts[k]), ev.dtype[n]) for k in kinds for n in at_names}
        filled = dict.fromkeys(kinds, 0)
        for a in range(0, ev.shape[0], _BLOCK):
            part = ev[a : a + _BLOCK]
            for n in names:
                cols[n][a : a + _BLOCK] = part[n]
            if at:
                kb = kind_col[a : a + _BLOCK]
                for k in kinds:
                    m = kb == k
                    c = int(np.count_nonzero(m))
                    if c:
                        f = filled[k]
                        for n in at_names:
                            at[(k, n)][f : f + c] = part[n][m]
                        filled[k] = f + c
        for n in names:
            self._cache[("col", n)] = cols[n]
        for (k, n), c in at.items():
            self._cache[("at", k, n)] = c

    def at(self, kind: EventKind, name: str) -> np.ndarray:
        """One column at the rows of one event kind (cached; gathered without copying the
        whole column when it is not cached already)."""
        key = ("at", int(kind), name)
        c = self._cache.get(key)
        if c is None and name in _COPIED_AT[0] and kind in _COPIED_AT[1] and ("col", name) not in self._cache:
            self.column("kind")  # copies these too
            c = self._cache.get(key)
        if c is None:
            c = self.cached(key, lambda: self.column(name)[self.rows_of(kind)])
        return c

    def rows_of(self, kind: EventKind) -> np.ndarray:
        """Row indices of the events of one kind (cached)."""
        key = ("kind", int(kind))
        r = self._cache.get(key)
        if r is None:
            r = self.cached(key, lambda: np.flatnonzero(self.column("kind") == int(kind)))
        return r

    def cached(self, key, compute: Callable[[], object]):
        """``self._cache[key]``, computed by ``compute()`` on first use, once even when several
        threads ask at the same time (the others wait for it; ``build_report`` runs analyses
        that share intermediate results in two threads)."""
        v = self._cache.get(key)
        if v is not None:
            return v
        with _LOCKS_LOCK:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            v = self._cache.get(key)
            if v is None:
                v = self._cache[key] = compute()
        return v

    @property
    def origin_ns(self) -> int:
        """The earliest event start: reports give times relative to it."""
        if not self._n:
            return 0
        o = self._cache.get("origin")
        if o is None:
            o = self._cache["origin"] = int(self.column("start_ns").min())
        return o

    @property
    def n_workgroups(self) -> int:
        return int(self.wg_keys.shape[0])


#: Columns copied out of the event table together (see :meth:`Trace.column`).
_COPIED = ("rank", "launch", "program", "lane", "kind", "flags", "region", "hw", "start_ns", "end_ns")
#: Columns copied at the same time only at the rows of these kinds (see :meth:`Trace.at`).
_COPIED_AT = (("arg0", "arg1", "arg2", "arg3", "arg4", "arg5"), (EventKind.WAIT, EventKind.NOTIFY))
#: Rows per block when copying columns out of (or into) a structured table: a block of the
#: table stays in cache while each column is copied.
_BLOCK = 1 << 16


#: What an agent is: the producer or the consumer of a hand-off. A program of a launch on a
#: rank now; a lane of it (a warp group, a partition) once programs record several: a capture
#: whose events have a ``lane`` column gives it, others are lane 0.
AGENT_FIELDS = ("rank", "launch", "program", "lane")


def has_lanes(trace: Trace) -> bool:
    """Whether the trace's programs have several lanes (a kernel traced per lane, or events that
    name a lane other than 0): only then is an agent more than its workgroup."""
    got = trace._cache.get("has_lanes")
    if got is None:
        ev = trace._events
        known = ("col", "lane") in trace._cache or (ev is not None and "lane" in (ev.dtype.names or ()))
        got = bool(trace.lanes) or (known and trace._n > 0 and int(trace.column("lane").max()) > 0)
        trace._cache["has_lanes"] = got
    return got


def agent_of(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Per event row, a dense-enough agent id: its workgroup, times the lanes when there are
    several (ids compare and group; :func:`agent_keys` names them)."""
    g = trace.wg[rows].astype(np.int64)
    if not has_lanes(trace):
        return g
    lane = trace.column("lane")[rows].astype(np.int64)
    return g * (int(trace.column("lane").max(initial=0)) + 1) + lane


def agent_keys(trace: Trace, agents: np.ndarray) -> np.ndarray:
    """``(rank, launch, program, lane)`` of agent ids made by :func:`agent_of` (shape (n, 4))."""
    agents = np.asarray(agents, np.int64)
    n_lanes = int(trace.column("lane").max(initial=0)) + 1 if has_lanes(trace) else 1
    out = np.zeros((agents.size, 4), np.int64)
    out[:, :3] = trace.wg_keys[agents // n_lanes]
    out[:, 3] = agents % n_lanes
    return out


def lane_view(trace: Trace) -> Trace:
    """The trace with each agent its own workgroup: ``trace`` itself when its programs have one
    lane, else a view whose workgroups are the (rank, launch, program, lane) agents (cached).

    The lanes of a program (warp groups, partitions) run at once: an analysis that walks a
    workgroup's events as one sequence in time (leaf spans, coverage, the critical path) walks
    each lane on its own in the view. Rows are the same as the trace's (its rows are sorted by
    lane within a program), so row-level results (waits, pairs) carry over; the view's
    ``wg_keys`` keep the real program and ``wg_lane`` gives each workgroup's lane.
    """
    if isinstance(trace, _LaneView) or not has_lanes(trace):
        return trace
    return trace.cached(("lane_view",), lambda: _LaneView(trace))


class _LaneView(Trace):
    """:func:`lane_view`: the parent's columns and rows, one workgroup per lane."""

    def __init__(self, parent: Trace):
        self.__dict__.update({k: v for k, v in parent.__dict__.items() if k not in ("_cache", "_locks")})
        self._cache, self._locks = {}, {}
        self._parent = parent
        n = parent.n_events
        lane = parent.column("lane")
        new = np.r_[True, (parent.wg[1:] != parent.wg[:-1]) | (lane[1:] != lane[:-1])] if n else np.zeros(0, bool)
        self.wg = np.cumsum(new, dtype=np.int64) - 1
        first = np.flatnonzero(new)
        self.wg_keys = parent.wg_keys[parent.wg[first]]
        self.wg_lane = lane[first].astype(np.int64)

    @property
    def events(self) -> np.ndarray:
        return self._parent.events

    def column(self, name: str) -> np.ndarray:
        return self._parent.column(name)

    def at(self, kind: EventKind, name: str) -> np.ndarray:
        return self._parent.at(kind, name)

    def rows_of(self, kind: EventKind) -> np.ndarray:
        return self._parent.rows_of(kind)

    @property
    def origin_ns(self) -> int:
        return self._parent.origin_ns


def wg_lanes(trace: Trace) -> np.ndarray:
    """Per workgroup of ``trace`` (a :func:`lane_view` or a trace), its lane (0 without lanes)."""
    got = getattr(trace, "wg_lane", None)
    return got if got is not None else np.zeros(trace.n_workgroups, np.int64)


class ColumnTable:
    """A table kept as plain columns, read like a structured array of ``dtype``.

    ``t["name"]`` is a whole column (a contiguous array, often shared with the trace's own
    column cache; a lazy column is computed on first use), ``t[sel]`` (a boolean mask, index array
    or slice) the selected rows as a structured array of ``dtype`` (lazy columns computed at those
    rows only), ``t[i]`` one row. Analyses that read a few columns of millions of rows never build
    the rows (a wide row table costs several times the columns they read); the JSON and HTML
    reports build the rows they show.

    Args:
        dtype: the rows' structured dtype (its names are the table's columns, in order; a column
            may be held in another numeric type and is converted when rows are built).
        columns: name -> array, all of one length.
        lazy: name -> ``fn(index)``: the column's values at the rows ``index`` (an int64 array,
            or ``slice(None)`` for every row: either indexes the columns it is made from); the
            whole column is kept once made.
        derived: the same, for columns cheap to make from others (a difference of two): made
            each time they are read, never kept.
        codes: for columns of names (object), ``name -> (codes, names)``: each row's code into
            the sorted distinct names (what :meth:`codes` gives without making the column).
    """

    def __init__(self, dtype, columns: dict, lazy: dict | None = None, derived: dict | None = None,
                 codes: dict | None = None):
        self.dtype = np.dtype(dtype)
        self._codes = dict(codes or {})
        self._cols = dict(columns)
        self._lazy = dict(lazy or {})
        self._derived = dict(derived or {})
        lengths = {int(np.shape(c)[0]) for c in self._cols.values()}
        if len(lengths) != 1:
            raise ValueError(f"ColumnTable: columns of different lengths {sorted(lengths)}")
        missing = [n for n in self.dtype.names or () if n not in self._cols and n not in self._lazy and n not in self._derived]
        if missing:
            raise ValueError(f"ColumnTable: no column or maker for {missing}")
        self.size = lengths.pop()
        self.shape = (self.size,)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"ColumnTable({self.size} rows, columns {list(self.dtype.names or ())})"

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.column(key)
        if isinstance(key, (int, np.integer)):
            i = int(key) + (self.size if int(key) < 0 else 0)
            if not 0 <= i < self.size:
                raise IndexError(f"row {int(key)} of a table of {self.size}")
            return self.rows(np.array([i], np.int64))[0]
        return self.rows(key)

    def column(self, name: str) -> np.ndarray:
        c = self._cols.get(name)
        if c is None and name in self._derived:
            return np.asarray(self._derived[name](_EVERY))
        if c is None:
            if name not in self._lazy:
                raise ValueError(f"no field of name {name}")
            with self._lock:  # (analyses read tables from two threads)
                c = self._cols.get(name)
                if c is None:
                    c = self._cols[name] = np.asarray(self._lazy[name](_EVERY))
        return c

    def take(self, name: str, idx: np.ndarray) -> np.ndarray:
        """Column ``name`` at the rows ``idx`` (an index array): what ``t[idx][name]`` gives,
        without building the rows (a lazy column is made at those rows only)."""
        c = self._cols.get(name)
        if c is not None:
            return c[idx].astype(self.dtype[name], copy=False)
        if name not in self._lazy and name not in self._derived:
            raise ValueError(f"no field of name {name}")
        return np.asarray((self._derived.get(name) or self._lazy[name])(np.asarray(idx, np.int64)), self.dtype[name])

    def at_rows(self, name: str, idx: np.ndarray) -> np.ndarray:
        """Column ``name`` at the rows ``idx``: what ``t[name][idx]`` gives (in the column's own
        type), a lazy column made at those rows only (and not kept)."""
        c = self._cols.get(name)
        if c is not None:
            return c[idx]
        make = self._derived.get(name) or self._lazy.get(name)
        if make is None:
            raise ValueError(f"no field of name {name}")
        return np.asarray(make(np.asarray(idx, np.int64)))

    def __array__(self, dtype=None, copy=None):
        """Every row as a structured array (``np.asarray(t)``, ``np.sort(t, order=...)``): the
        whole table built at once."""
        out = self.rows()
        return out if dtype is None else out.astype(dtype)

    def codes(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``(codes, names)`` of a column of names when the table was given them, else None."""
        return self._codes.get(name)

    def rows(self, sel=slice(None)) -> np.ndarray:
        """The rows ``sel`` selects (mask, index array or slice), as a structured array of ``dtype``."""
        if isinstance(sel, slice):
            idx = np.arange(self.size, dtype=np.int64)[sel]
        else:
            sel = np.asarray(sel)
            if sel.dtype == bool:
                if sel.shape != (self.size,):
                    raise IndexError(f"a mask of {sel.shape} rows for a table of {self.size}")
                idx = np.flatnonzero(sel)
            else:
                idx = sel.astype(np.int64, copy=False).reshape(-1)
                idx = np.where(idx < 0, idx + self.size, idx)
                if idx.size and (idx.min() < 0 or idx.max() >= self.size):
                    raise IndexError(f"rows out of range for a table of {self.size}")
        out = np.zeros(idx.size, self.dtype)
        for n in self.dtype.names or ():
            c = self._cols.get(n)
            out[n] = c[idx] if c is not None else (self._derived.get(n) or self._lazy[n])(idx)
        return out


#: What a :class:`ColumnTable` column maker is given for the whole column.
_EVERY = slice(None)


class Sparse:
    """A vector of ``size`` that is ``fill`` except at a few sorted positions ``at``, where it is
    ``values``: ``s(idx)`` its values at ``idx`` (an index array, or ``slice(None)``: all of it).
    A column maker for :class:`ColumnTable`, and what keeps a per-workgroup or per-notify vector
    that is set at a handful of places."""

    def __init__(self, at: np.ndarray, values: np.ndarray, fill, size: int | None = None):
        self.at, self.values, self.fill, self.size = np.asarray(at, np.int64), np.asarray(values), fill, size

    def __call__(self, idx) -> np.ndarray:
        if isinstance(idx, slice):
            out = np.full(self.size, self.fill, dtype=self.values.dtype)
            out[self.at] = self.values
            return out[idx]
        idx = np.asarray(idx)
        out = np.full(idx.shape, self.fill, dtype=self.values.dtype)
        if self.at.size:
            pos = np.minimum(np.searchsorted(self.at, idx), self.at.size - 1)
            hit = self.at[pos] == idx
            out[hit] = self.values[pos[hit]]
        return out


def fill_table(out: np.ndarray, columns: dict) -> np.ndarray:
    """Assign ``columns`` (name -> array of ``out``'s length, or a scalar) to the fields of the
    structured table ``out``, a block of rows at a time (each block of the table is written
    while it is in cache, instead of the whole table once per field). Returns ``out``."""
    n = out.shape[0]
    for a in range(0, n, _BLOCK):
        part = out[a : a + _BLOCK]
        for name, c in columns.items():
            part[name] = c[a : a + _BLOCK] if isinstance(c, np.ndarray) and c.ndim else c
    return out


def _is_sorted(*cols: np.ndarray) -> bool:
    """Whether rows are in lexicographic order of ``cols`` (rank, launch, program[, lane], slot),
    the last strictly increasing among rows equal in the others."""
    return is_lexsorted(*cols, strict=True)


def _workgroups(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Dense workgroup ids of a sorted table and each workgroup's (rank, launch, program)."""
    n = trace.n_events
    if n == 0:
        return np.zeros(0, np.int64), np.zeros((0, 3), np.int64)
    r, l, p = (trace.column(c) for c in ("rank", "launch", "program"))
    new = np.empty(n, bool)
    new[0] = True
    new[1:] = (r[1:] != r[:-1]) | (l[1:] != l[:-1]) | (p[1:] != p[:-1])
    wg = np.cumsum(new, dtype=np.int64) - 1
    first = np.flatnonzero(new)
    keys = np.stack([r[first], l[first], p[first]], axis=1).astype(np.int64)
    return wg, keys


def prepare(source, *, regions: dict[int, str] | None = None, name: str = "") -> Trace:
    """Make a :class:`Trace` from a capture, a capture file's path, or an aligned event table.

    From a capture, the columns the analyses use are decoded and aligned straight from the
    launches' event buffers (about a third of the full table's memory); :attr:`Trace.events`
    is built on first use, from the capture (kept by the trace) or, for a path, by reading the
    file again.

    Args:
        source: a ``ktrace.captures.Capture``, a path to a ``.ktrace`` file, a :class:`Trace` (returned
            as is), or a structured array with the columns of ``schema.ALIGNED_DTYPE``.
        regions: region id -> name (default: the capture's; for a table, none: ids are shown).
        name: what to call it in reports (default: the file name).

    Raises:
        AnalysisError: the table is not aligned or has no events.
        ktrace.captures.CaptureError: the file cannot be read.
    """
    if isinstance(source, Trace):
        return source
    if isinstance(source, np.ndarray):
        return Trace(events=source, regions=dict(regions or {}), source=name or "<table>")
    if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__"):
        from ..captures.file import read_capture

        path = str(source)
        # the trace does not keep the capture (its buffers are freed once decoded)
        return _from_capture(read_capture(path), regions, name or path, functools.partial(read_capture, path))
    if not hasattr(source, "ranks"):
        raise AnalysisError(f"cannot analyse a {type(source).__name__}: give a Capture, a .ktrace path or an aligned table")
    return _from_capture(source, regions, name or "<capture>", functools.partial(_same, source))


def _same(x):
    return x


class _Impossible(Exception):
    """Launches whose times cannot be real (``(rank, index) -> why``), found while counting events."""

    def __init__(self, bad: dict):
        super().__init__(f"{len(bad)} launches with impossible times")
        self.bad = bad


def _screened(cap, bad: dict, name: str):
    """``cap`` without the launches ``bad`` names (their times impossible), with one warning line."""
    from ..events import without_launches

    kept = sum(len(rc.launches) for rc in cap.ranks.values()) - len(bad)
    items = sorted(bad.items())
    said = "; ".join(f"rank {r} launch {i}: {why}" for (r, i), why in items[:4]) + (f"; and {len(items) - 4} more" if len(items) > 4 else "")
    if kept <= 0:
        raise AnalysisError(f"{name}: every launch has impossible times, nothing to analyse ({said})")
    log.warning("%s: %d launch%s left out of the analysis, %s times impossible: %s", name, len(items), "" if len(items) == 1 else "es",
                "its" if len(items) == 1 else "their", said)
    return without_launches(cap, bad)


def _screened_reload(reload, bad):
    from ..events import without_launches

    return without_launches(reload(), bad)


def _from_capture(cap, regions: dict[int, str] | None, name: str, reload: Callable[[], object]) -> Trace:
    from ..clock.model import clock_model_of
    from ..events import impossible_launches

    model = clock_model_of(cap)
    try:
        columns = _aligned_columns(cap, model)
    except _Impossible as e:  # launches whose times no probe records: left out, said in one line
        cap, reload = _screened(cap, e.bad, name), functools.partial(_screened_reload, reload, e.bad)
        columns = _aligned_columns(cap, model)
    if columns is None:  # (rows out of order: the whole table is made below; screened here)
        bad = impossible_launches(cap)
        if bad:
            cap, reload = _screened(cap, bad, name), functools.partial(_screened_reload, reload, bad)
    kernels: dict[tuple[int, int], str] = {}
    n_programs: dict[tuple[int, int], int] = {}
    lanes: dict[tuple[int, int], tuple[str, ...]] = {}
    live = False
    for r, rc in cap.ranks.items():
        for ln in rc.launches:
            kernels[(r, ln.index)] = printable(ln.kernel)
            g = tuple(ln.grid)
            live = live or "live" in (ln.meta or {})
            names = tuple(printable(x) for x in ((ln.meta or {}).get("lanes") or ()))  # (from a file: escaped)
            if names:
                lanes[(r, ln.index)] = names
            # (a lane buffer's grid counts each lane as a program: ``ktrace.schema``)
            n_programs[(r, ln.index)] = int(g[0] * g[1] * g[2]) // max(1, len(names)) if len(g) == 3 else 0
    regs = dict(cap.regions)
    regs.update(regions or {})
    # names from a file reach terminals through every finding: their control characters escaped here, once
    regs = {k: printable(v) for k, v in regs.items()}
    partial = bool(cap.partial or cap.missing_ranks)
    if partial:
        log.warning("capture is partial (missing ranks %s): stall pairing misses the absent ranks' notifies", ranges_text(cap.missing_ranks))
    meta = dict(regions=regs, world_size=cap.world_size, kernels=kernels, n_programs=n_programs, partial=partial,
                clock=model, source=printable(name), meta=dict(cap.meta or {}), lanes=lanes, live=live)
    if columns is None:  # rows out of order: the whole table, sorted by Trace
        t = Trace(events=_align(cap, model)[0], **meta)
    else:
        t = Trace(columns=columns, load_events=functools.partial(_events_of, reload, model), **meta)
    t.warmup_marked = frozenset(int(ln.index) for rc in cap.ranks.values() for ln in rc.launches
                                if (ln.meta or {}).get("warmup"))
    return t


def drop_launches(trace: Trace, launches) -> Trace:
    """The trace without the launches given (on every rank): what a report analyses when it
    leaves warm-up launches out. Its time 0 stays the whole capture's (the traces' time 0, so
    that a finding's range still opens at its place in the trace); its columns are the kept rows
    of the trace's (no decode again).

    Raises:
        AnalysisError: nothing would be left.
    """
    drop = {int(x) for x in launches}
    if not drop or trace.n_events == 0:
        return trace
    keep = ~np.isin(trace.column("launch"), np.fromiter(drop, np.int64, len(drop)))
    if keep.all():
        return trace
    if not keep.any():
        raise AnalysisError(f"{trace.source}: every launch would be left out (launches {ranges_text(sorted(drop))})")
    cols = {c: trace.column(c)[keep] for c in _COPIED}
    at = {}
    for k in _COPIED_AT[1]:
        km = keep[trace.rows_of(k)]
        for a in _COPIED_AT[0]:
            at[(int(k), a)] = trace.at(k, a)[km]
    # (the full table from where the trace has it, not from the trace: it and its columns are
    # freed once the caller lets it go)
    table, reload = trace._events, trace._load_events

    def load_events():
        return (table if table is not None else reload())[keep]

    t = Trace(columns=_Columns(n=int(keep.sum()), cols=cols, at=at), load_events=load_events, regions=trace.regions,
              world_size=trace.world_size, kernels={k: v for k, v in trace.kernels.items() if k[1] not in drop},
              n_programs={k: v for k, v in trace.n_programs.items() if k[1] not in drop}, partial=trace.partial,
              clock=trace.clock, source=trace.source, meta=trace.meta,
              lanes={k: v for k, v in trace.lanes.items() if k[1] not in drop})
    t.warmup_marked = trace.warmup_marked - drop
    t.left_out = {**trace.left_out, **{k: v for k, v in trace.kernels.items() if k[1] in drop}}
    t._cache["origin"] = trace.origin_ns
    return t


@dataclass
class _Columns:
    """The columns :meth:`Trace.column` / :meth:`Trace.at` serve (see :func:`_aligned_columns`)."""

    n: int
    cols: dict  # name -> array of n
    at: dict  # (kind, name) -> array, at the rows of that kind


#: The columns the analyses take from ``ktrace.events`` batches (the rank and launch columns are
#: made from the batches' launches).
_DECODED = ("program", "lane", "kind", "flags", "region", "hw", *schema.ARG_COLUMNS, "start_ns", "end_ns")


def _aligned_columns(cap, model) -> _Columns | None:
    """The capture's events as the analyses' columns: decoded and aligned by ``ktrace.events``
    in one pass, runs of consecutive launches at a time, straight into their rows
    (``events.capture_columns``; the argument columns only at waits and notifies), so that
    neither the full aligned table nor all launches' decoded columns are ever in memory at once.
    Where that pass leaves a capture to the checked path (a damaged buffer, one that disagrees
    with its launch record), the batches the trace writers decode (launches of one rank and
    buffer layout, ``events.make_batches``) are screened, counted and copied to their rows, and
    say what is wrong. None when the rows would not be sorted by (rank, launch, program, slot)
    (a rank's launches out of order: the caller sorts the whole table).
    """
    from ..captures.file import CaptureError, read_buffers
    from ..decode import DecodeError, screen_batch
    from ..events import NotDecoded, capture_columns, is_raw, launch_refs, make_batches, read_batch

    refs = launch_refs(cap)
    for (r0, a), (r1, b) in zip(refs, refs[1:]):
        if r0 == r1 and a.index >= b.index:
            return None
    try:
        got = capture_columns(cap, model, _COPIED, _COPIED_AT[1], _COPIED_AT[0])
    except NotDecoded:  # (a buffer that does not decode: the batches below say which and why)
        got = None
    if got is not None:
        if got.impossible:
            raise _Impossible(got.impossible)
        return _Columns(n=got.n, cols=got.cols, at=_narrowed(got.at))
    at_kinds = [int(k) for k in _COPIED_AT[1]]
    per_launch = np.zeros((len(refs), 16), np.int64)
    batches = make_batches(refs)
    bad: dict[tuple[int, int], str] = {}
    try:
        for batch in batches:
            # read for this count only (a buffer not read from its file yet is not kept on its
            # launch: all of them at once would be the raw capture's size again); the CRC is
            # checked when the batch is decoded below
            bufs = read_buffers([refs[li][1] for li in batch], verify=False)
            raw = [is_raw(refs[li][1]) for li in batch]
            for li, (counts, why) in zip(batch, screen_batch(bufs, int(cap.world_size), raw=raw)):
                per_launch[li] = counts
                if why:
                    bad[(refs[li][0], refs[li][1].index)] = why
    except (DecodeError, CaptureError):
        return None  # decoding says what is wrong, with the rank and launch
    if bad:
        raise _Impossible(bad)
    rows_of = per_launch.sum(axis=1) - per_launch[:, EventKind.EMPTY] - per_launch[:, EventKind.DETAIL]
    start_of = np.cumsum(rows_of) - rows_of  # each launch's first row in the table
    kind_start = {k: np.cumsum(per_launch[:, k]) - per_launch[:, k] for k in at_kinds}
    n = int(rows_of.sum())
    dt = schema.ALIGNED_DTYPE
    cols = {c: (np.zeros if c == "lane" else np.empty)(n, dt[c]) for c in _COPIED}  # (lanes: 0 unless copied)
    # (each argument at its recorded width, and below, a 64-bit one at 32 bits where every value
    # fits: about half of int64 for a wait's or a notify's)
    at = {(k, a): np.empty(int(per_launch[:, k].sum()), schema.arg_dtype(k, a)) for k in at_kinds for a in _COPIED_AT[0]}
    done = 0
    for batch in batches:
        b = read_batch(refs, batch, model, _DECODED)
        counts = np.diff(b.offsets)
        lis = np.asarray(batch, np.int64)
        if (counts != rows_of[lis]).any():
            raise AnalysisError(f"rank {b.rank}: decoded a number of events that differs from its buffers' tags")
        # destination row of every decoded row: its launch's place, plus its place in the launch
        dest = np.arange(b.size, dtype=np.int64) + np.repeat(start_of[lis] - b.offsets[:-1], counts)
        cols["rank"][dest] = b.rank
        cols["launch"][dest] = b.per_row([refs[li][1].index for li in batch])
        for c in ("program", "lane", "kind", "flags", "region", "hw", "start_ns", "end_ns"):
            if c != "lane" or any(h.lanes > 1 for h in b.headers):  # (lanes: 0 where a program has one)
                cols[c][dest] = b.cols[c]
        kind = b.cols["kind"]
        which = np.repeat(np.arange(lis.size), counts)
        for kk in at_kinds:
            m = np.flatnonzero(kind == kk)
            if m.size:
                # the k-th wait (notify) of a launch goes after the earlier launches' ones
                first = np.r_[0, np.cumsum(np.bincount(which[m], minlength=lis.size))[:-1]]
                d = kind_start[kk][lis][which[m]] + (np.arange(m.size) - first[which[m]])
                for a in _COPIED_AT[0]:
                    at[(kk, a)][d] = b.cols[a][m]
        done += b.size
    if done != n:
        raise AnalysisError(f"decoded {done} events where the buffers' tags count {n}")
    return _Columns(n=n, cols=cols, at=_narrowed(at))


def _narrowed(at: dict) -> dict:
    """64-bit arguments (flag offsets, values) that all fit 32 bits, held so."""
    for key, c in at.items():
        if c.dtype == np.int64 and c.size and -(2**31) <= int(c.min()) and int(c.max()) < 2**31:
            at[key] = c.astype(np.int32)
    return at


def table_to_records(table: np.ndarray, limit: int | None = None) -> list[dict]:
    """A structured array as JSON-ready dicts (numpy scalars become Python values, NaN None)."""
    if table is None:
        return []
    t = table if limit is None else table[:limit]
    out = []
    names = t.dtype.names or ()
    cols = {n: t[n].tolist() for n in names}
    for i in range(t.shape[0]):
        row = {}
        for n in names:
            v = cols[n][i]
            if isinstance(v, float) and not np.isfinite(v):
                v = None
            row[n] = v
        out.append(row)
    return out


def empty_event_table(n: int = 0) -> np.ndarray:
    """An aligned table (``schema.ALIGNED_DTYPE``) of ``n`` zero rows."""
    return schema.empty_aligned(n)
