"""What every analysis starts from: a capture's events on one clock, sorted, with names.

:func:`prepare` turns a ``ktrace.io.Capture`` (or an already aligned event table) into a
:class:`Trace`: the aligned table (``ktrace.clock.aligned_events``) sorted by rank, launch,
program and slot, the region names, the kernels' names and grids, and a dense workgroup id per
event. The clock package is reached through :func:`_align` only, so a change to its API touches
one function.

Also here: the small vectorised helpers the analyses share (group keys, group-by sums, interval
unions). Nothing in this package loops over events in Python.

Speed (10 M events in a few seconds on two cores): several integer columns are packed into one
int64 key (mixed radix) wherever their ranges allow, so that a row-wise ``lexsort`` or
``unique(axis=0)`` becomes one 1-D sort, which is close to linear on a capture's nearly sorted
rows (:func:`lexorder`, :func:`dense_codes`, :func:`argsort_stable`); the columns are copied out
of the event table in one blocked pass; lookups that stay within a workgroup run on blocks of
whole workgroups so that their temporaries stay small. Each fast path has a general one (keys
too wide to pack, short arrays) that gives the same answer; the tests check both.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import schema
from ..schema import EventFlag, EventKind

log = logging.getLogger("ktrace")

#: Called with (step name, steps done, steps in all) as a long analysis advances.
Progress = Callable[[str, int, int], None]

#: Columns an event table must have to be analysed (``ktrace.clock.ALIGNED_DTYPE`` has them all).
REQUIRED_COLUMNS = ("rank", "launch", "program", "slot", "kind", "flags", "region", "hw", "arg0", "arg1", "arg2",
                    "arg3", "arg4", "arg5", "start_ns", "end_ns")


class AnalysisError(ValueError):
    """The input cannot be analysed (not aligned, missing columns, nothing recorded)."""


def _align(capture) -> tuple[np.ndarray, object]:
    """The capture's events on the common clock and the clock model used (the one use of ktrace.clock)."""
    from ..clock.model import aligned_events, clock_model_of

    model = clock_model_of(capture)
    return aligned_events(capture, model), model


def _events_of(load_capture: Callable[[], object], model) -> np.ndarray:
    """The aligned event table of the capture ``load_capture()`` returns, on ``model``'s clock."""
    from ..clock.model import aligned_events

    try:
        return aligned_events(load_capture(), model)
    except (KeyError, ValueError) as e:  # the file is gone or another capture now
        raise AnalysisError(f"cannot rebuild the event table: {e}") from e


_LOCKS_LOCK = threading.Lock()

from .._memory import keep_freed_memory  # noqa: E402,F401  (re-exported: the command and benchmarks use it)


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
        partial: the capture misses ranks or was marked partial.
        clock: the ``ClockModel`` the events were aligned with (None for a given table).
        source: where it came from (a file name), for reports.
        wg: per event, a dense workgroup id (index into ``wg_keys``).
        wg_keys: per workgroup, ``(rank, launch, program)`` (int64, shape (W, 3)).
    """

    def __init__(self, events: np.ndarray | None = None, regions: dict[int, str] | None = None, world_size: int = 0,
                 kernels: dict[tuple[int, int], str] | None = None, n_programs: dict[tuple[int, int], int] | None = None,
                 partial: bool = False, clock: object | None = None, source: str = "", wg: np.ndarray | None = None,
                 wg_keys: np.ndarray | None = None, *, columns: "_Columns | None" = None,
                 load_events: Callable[[], np.ndarray] | None = None):
        self.regions = regions if regions is not None else {}
        self.world_size = world_size
        self.kernels = kernels if kernels is not None else {}
        self.n_programs = n_programs if n_programs is not None else {}
        self.partial = partial
        self.clock = clock
        self.source = source
        self.wg = wg
        self.wg_keys = wg_keys
        self._cache: dict = {}
        self._locks: dict = {}
        self._load_events = load_events
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
                    f"event table lacks columns {missing}: analyses need an aligned table (ktrace.clock.aligned_events)"
                )
            self._events = ev = events
            self._n = int(ev.shape[0])
            if ev.size:
                # the columns are copied out once (blocked); sortedness is checked on the copies
                cols = [self.column(c) for c in ("rank", "launch", "program")]
                if not _is_sorted(*cols, np.asarray(ev["slot"])):
                    order = np.lexsort((ev["slot"], ev["program"], ev["launch"], ev["rank"]))
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
_COPIED = ("rank", "launch", "program", "kind", "flags", "region", "hw", "start_ns", "end_ns")
#: Columns copied at the same time only at the rows of these kinds (see :meth:`Trace.at`).
_COPIED_AT = (("arg0", "arg1", "arg2", "arg3", "arg4", "arg5"), (EventKind.WAIT, EventKind.NOTIFY))
#: Rows per block when copying columns out of (or into) a structured table: a block of the
#: table stays in cache while each column is copied.
_BLOCK = 1 << 16


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


def _is_sorted(rank: np.ndarray, launch: np.ndarray, program: np.ndarray, slot: np.ndarray) -> bool:
    dr, dl, dp, ds = (np.diff(np.asarray(c, np.int64)) for c in (rank, launch, program, slot))
    if (dr < 0).any():
        return False
    up_r = dr > 0
    if (~up_r & (dl < 0)).any():
        return False
    up_l = up_r | (dl > 0)
    if (~up_l & (dp < 0)).any():
        return False
    return not (~up_l & (dp == 0) & (ds <= 0)).any()


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
        source: a ``ktrace.io.Capture``, a path to a ``.ktrace`` file, a :class:`Trace` (returned
            as is), or a structured array with the columns of ``ktrace.clock.ALIGNED_DTYPE``.
        regions: region id -> name (default: the capture's; for a table, none: ids are shown).
        name: what to call it in reports (default: the file name).

    Raises:
        AnalysisError: the table is not aligned or has no events.
        ktrace.io.CaptureError: the file cannot be read.
    """
    if isinstance(source, Trace):
        return source
    if isinstance(source, np.ndarray):
        return Trace(events=source, regions=dict(regions or {}), source=name or "<table>")
    if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__"):
        from ..io.capture_file import read_capture

        path = str(source)
        # the trace does not keep the capture (its buffers are freed once decoded)
        return _from_capture(read_capture(path), regions, name or path, functools.partial(read_capture, path))
    if not hasattr(source, "ranks"):
        raise AnalysisError(f"cannot analyse a {type(source).__name__}: give a Capture, a .ktrace path or an aligned table")
    return _from_capture(source, regions, name or "<capture>", functools.partial(_same, source))


def _same(x):
    return x


def _from_capture(cap, regions: dict[int, str] | None, name: str, reload: Callable[[], object]) -> Trace:
    from ..clock.model import clock_model_of

    model = clock_model_of(cap)
    columns = _aligned_columns(cap, model)
    kernels: dict[tuple[int, int], str] = {}
    n_programs: dict[tuple[int, int], int] = {}
    for r, rc in cap.ranks.items():
        for ln in rc.launches:
            kernels[(r, ln.index)] = ln.kernel
            g = tuple(ln.grid)
            n_programs[(r, ln.index)] = int(g[0] * g[1] * g[2]) if len(g) == 3 else 0
    regs = dict(cap.regions)
    regs.update(regions or {})
    partial = bool(cap.partial or cap.missing_ranks)
    if partial:
        log.warning("capture is partial (missing ranks %s): stall pairing misses the absent ranks' notifies", cap.missing_ranks)
    meta = dict(regions=regs, world_size=cap.world_size, kernels=kernels, n_programs=n_programs, partial=partial,
                clock=model, source=name)
    if columns is None:  # rows out of order: the whole table, sorted by Trace
        return Trace(events=_align(cap)[0], **meta)
    return Trace(columns=columns, load_events=functools.partial(_events_of, reload, model), **meta)


@dataclass
class _Columns:
    """Columns of an aligned event table (see :func:`_aligned_columns`)."""

    n: int
    cols: dict  # name -> array of n
    at: dict  # (kind, name) -> array, at the rows of that kind


def _aligned_columns(cap, model) -> _Columns | None:
    """The columns :meth:`Trace.column` / :meth:`Trace.at` serve, decoded and aligned launch by
    launch into arrays allocated once at their final size (counted from the buffers' tags
    first), so that neither the full aligned table nor all launches' decoded tables are ever in
    memory at once. Rows come in ``ktrace.clock.aligned_events`` order; None when that order is
    not sorted by (rank, launch, program, slot) (then the caller sorts the whole table).
    """
    from ..clock.model import iter_aligned
    from ..decode import DecodeError, count_kinds

    launches = [(r, ln) for r, rc in sorted(cap.ranks.items()) for ln in rc.launches]
    at_kinds = [int(k) for k in _COPIED_AT[1]]
    per_kind = np.zeros(16, np.int64)
    try:
        counts = [count_kinds(ln.raw) for _, ln in launches]
    except DecodeError:
        return None  # decoding says what is wrong, with the rank and launch
    n_of = [int(c.sum() - c[EventKind.EMPTY] - c[EventKind.DETAIL]) for c in counts]
    for c in counts:
        per_kind += c
    n = sum(n_of)
    dt = _ALIGNED_DTYPE
    cols = {c: np.empty(n, dt[c]) for c in _COPIED}
    at = {(k, a): np.empty(int(per_kind[k]), dt[a]) for k in at_kinds for a in _COPIED_AT[0]}
    pos = 0
    filled = dict.fromkeys(at_kinds, 0)
    prev = None  # (rank, launch, program, slot) of the last row so far
    it = iter_aligned(cap, model)
    for (r, ln), k_n, (r2, li, ev, s, e) in zip(launches, n_of, it):
        k = ev.shape[0]
        if (r2, li) != (r, ln.index) or k != k_n:
            raise AnalysisError(f"rank {r}, launch {ln.index}: decoded {k} events where its buffer holds {k_n}")
        if not k:
            continue
        first = (r, li, int(ev["program"][0]), int(ev["slot"][0]))
        if prev is not None and first <= prev:
            return None
        prev = (r, li, int(ev["program"][-1]), int(ev["slot"][-1]))
        b = pos + k
        cols["rank"][pos:b] = r
        cols["launch"][pos:b] = li
        for c in ("program", "kind", "flags", "region", "hw"):
            cols[c][pos:b] = ev[c]
        cols["start_ns"][pos:b] = s
        cols["end_ns"][pos:b] = e
        kind = ev["kind"]
        for kk in at_kinds:
            m = np.flatnonzero(kind == kk)
            if m.size:
                f = filled[kk]
                for a in _COPIED_AT[0]:
                    at[(kk, a)][f : f + m.size] = ev[a][m]
                filled[kk] = f + m.size
        pos = b
    return _Columns(n=n, cols=cols, at=at)


#: The aligned table's dtype (``ktrace.clock.ALIGNED_DTYPE``: ``schema.EVENT_DTYPE`` and the times).
_ALIGNED_DTYPE = np.dtype(schema.EVENT_DTYPE.descr + [("start_ns", "<i8"), ("end_ns", "<i8")])


# ---------------------------------------------------------------------------------------------
# vectorised helpers
# ---------------------------------------------------------------------------------------------


#: Composite integer keys (several columns packed into one int64, mixed radix) are used while
#: the product of the columns' ranges stays below this; wider keys take the slower general path.
KEY_LIMIT = 1 << 62
#: Arrays at least this long take the paths that pay off only on large inputs (packed sorts,
#: selection instead of sorting); shorter ones the plain numpy call. Both give the same answer.
LARGE = 1 << 16


def dense_codes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, uniques)`` of an integer array, as ``np.unique(x, return_inverse=True)`` gives
    them reversed: ``uniques`` sorted, ``codes`` (int64) the position of each value in it.

    Small ranges (and region ids: 24 bits) take a table of the values present instead of a
    sort; sorted input takes one pass.
    """
    x = np.asarray(x)
    if x.size == 0:
        return np.zeros(0, np.int64), x.astype(np.int64)[:0] if x.dtype.kind in "iub" else np.unique(x)
    if x.dtype.kind not in "iub":
        u, inv = np.unique(x, return_inverse=True)
        return inv.reshape(-1).astype(np.int64), u
    lo, hi = int(x.min()), int(x.max())
    span = hi - lo + 1
    if span <= max(4 * x.size + 1024, 1 << 25):
        off = (x - lo).astype(np.int64) if lo else x.astype(np.int64, copy=False)
        present = np.zeros(span, bool)
        present[off] = True
        u = np.flatnonzero(present)
        if u.size <= 64:
            codes = np.searchsorted(u, off)
        else:
            codes = (np.cumsum(present, dtype=np.int64) - 1)[off]
        u_dtype = np.result_type(x.dtype, np.int64) if x.dtype.kind == "i" else x.dtype
        return codes.astype(np.int64, copy=False), (u + lo).astype(u_dtype)
    if (x[1:] >= x[:-1]).all():
        new = np.empty(x.size, bool)
        new[0] = True
        np.not_equal(x[1:], x[:-1], out=new[1:])
        return np.cumsum(new, dtype=np.int64) - 1, x[new]
    u, inv = np.unique(x, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), u


def argsort_stable(k: np.ndarray) -> np.ndarray:
    """``np.argsort(k, kind="stable")`` for an integer array, faster on large unsorted input.

    Nearly sorted input (few descents) goes to the stable sort, which runs in about one pass;
    otherwise, when the range allows, each value is packed with its index into one int64 and
    the packed values sorted (a plain sort is about twice as fast as an argsort).
    """
    k = np.asarray(k)
    n = k.size
    if n < LARGE or k.dtype.kind not in "iu":
        return np.argsort(k, kind="stable")
    k = k.astype(np.int64, copy=False)
    if np.count_nonzero(k[1:] < k[:-1]) < n // 64:
        return np.argsort(k, kind="stable")
    lo = int(k.min())
    size = int(k.max()) - lo + 1
    if size * n >= KEY_LIMIT:
        return np.argsort(k, kind="stable")
    packed = (k - lo) * n
    packed += np.arange(n, dtype=np.int64)
    packed.sort()
    packed %= n
    return packed


def _ranged(k: np.ndarray) -> tuple[np.ndarray, int]:
    k = np.asarray(k, np.int64)
    lo = int(k.min())
    return k - lo, int(k.max()) - lo + 1


def lexorder(*keys: np.ndarray, _inner: bool = False) -> np.ndarray:
    """The stable lexicographic order of rows of integer keys, first key first.

    The same permutation as ``np.lexsort(keys[::-1])``; keys whose ranges multiply below
    :data:`KEY_LIMIT` are packed into one int64 and sorted once (stable, so nearly sorted
    input, such as a capture's events in record order, sorts in about one pass); ties left
    by a packed prefix are resolved on the tied rows only.
    """
    n = np.asarray(keys[0]).shape[0]
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    comp, total, used = None, 1, 0
    for k in keys:
        off, size = _ranged(k)
        if total * size >= KEY_LIMIT:
            break
        comp = off if comp is None else comp * size + off
        total *= size
        used += 1
    if used == 0 or (_inner and used == 1):
        return np.lexsort(tuple(np.asarray(k) for k in keys[::-1]))
    o = argsort_stable(comp)
    if used == len(keys):
        return o
    cs = comp[o]
    eq = cs[1:] == cs[:-1]
    if not eq.any():
        return o
    in_run = np.zeros(n, bool)
    in_run[1:] |= eq
    in_run[:-1] |= eq
    pos = np.flatnonzero(in_run)
    first = np.ones(pos.size, bool)
    first[1:] = ~eq[pos[1:] - 1]
    run = np.cumsum(first) - 1
    sub = o[pos]
    so = lexorder(run, *(np.asarray(k)[sub] for k in keys[used:]), _inner=True)
    o[pos] = sub[so]
    return o


def group_index(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense group ids of rows keyed by several integer columns.

    Each column is coded densely and the codes are combined into one int64 key (mixed radix),
    so grouping costs one 1-D sort per column plus one: ``np.unique(axis=0)`` sorts rows as
    bytes and is an order of magnitude slower.

    Returns:
        ``(inverse, keys)``: per row its group (int64), and per group its key values (G, k),
        groups in lexicographic order of the keys.
    """
    n = cols[0].shape[0]
    if n == 0:
        return np.zeros(0, np.int64), np.zeros((0, len(cols)), np.int64)
    uniques, codes, radix = [], [], 1
    key = np.zeros(n, np.int64)
    for c in cols:
        inv, u = dense_codes(np.asarray(c, np.int64))
        uniques.append(u)
        codes.append(inv)
        radix *= max(u.size, 1)
    if radix >= 1 << 62:  # too many combinations for one key: sort the rows instead
        order = np.lexsort(tuple(codes[::-1]))
        srt = np.stack([cd[order] for cd in codes], axis=1)
        new = np.r_[True, (srt[1:] != srt[:-1]).any(axis=1)]
        gid = np.cumsum(new) - 1
        inv = np.empty(n, np.int64)
        inv[order] = gid
        keys = np.stack([u[srt[new, i]] for i, u in enumerate(uniques)], axis=1)
        return inv, keys
    for u, cd in zip(uniques, codes):
        key = key * max(u.size, 1) + cd
    inv, ukey = dense_codes(key)
    keys = np.empty((ukey.size, len(cols)), np.int64)
    rest = ukey
    for i in range(len(cols) - 1, -1, -1):
        size = max(uniques[i].size, 1)
        rest, cd = np.divmod(rest, size)
        keys[:, i] = uniques[i][cd]
    return inv.reshape(-1).astype(np.int64), keys


def group_sum(inv: np.ndarray, weights: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum of ``weights`` per group (float64)."""
    return np.bincount(inv, weights=np.asarray(weights, np.float64), minlength=n_groups)


def group_count(inv: np.ndarray, n_groups: int) -> np.ndarray:
    return np.bincount(inv, minlength=n_groups).astype(np.int64)


def group_max(inv: np.ndarray, values: np.ndarray, n_groups: int, fill=np.nan) -> np.ndarray:
    out = np.full(n_groups, -np.inf)
    _group_reduce_at(np.maximum, out, inv, np.asarray(values, np.float64))
    out[np.isneginf(out)] = fill
    return out


def _group_reduce_at(ufunc, out: np.ndarray, inv: np.ndarray, values: np.ndarray) -> None:
    """``ufunc.at(out, inv, values)``; groups of one value are assigned directly (the common case
    of one wait per notify), the rest go through ``ufunc.at``."""
    if inv.size < LARGE:
        ufunc.at(out, inv, values)
        return
    single = np.bincount(inv, minlength=out.size)[inv] == 1
    out[inv[single]] = ufunc(out[inv[single]], values[single])
    multi = ~single
    if multi.any():
        ufunc.at(out, inv[multi], values[multi])


def group_min(inv: np.ndarray, values: np.ndarray, n_groups: int, fill=np.nan) -> np.ndarray:
    out = np.full(n_groups, np.inf)
    _group_reduce_at(np.minimum, out, inv, np.asarray(values, np.float64))
    out[np.isposinf(out)] = fill
    return out


def group_median(inv: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Median of ``values`` per group (NaN for empty groups); one sort, no per-group loop."""
    return group_median_max(inv, values, n_groups)[0]


def group_median_max(inv: np.ndarray, values: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Median and maximum of ``values`` per group (NaN for empty groups) from one sort."""
    values = np.asarray(values, np.float64)
    out = np.full(n_groups, np.nan)
    mx = np.full(n_groups, np.nan)
    if values.size == 0:
        return out, mx
    v = None
    if n_groups <= 16 and values.size >= LARGE and not np.isnan(values).any():
        # few groups (per rank): order statistics by selection, one pass per group
        for gi in range(n_groups):
            x = values[inv == gi]
            if x.size:
                lo_i, hi_i = (x.size - 1) // 2, x.size // 2
                part = np.partition(x, [lo_i, hi_i, x.size - 1])
                out[gi] = 0.5 * (part[lo_i] + part[hi_i])
                mx[gi] = part[-1]
        return out, mx
    if np.isfinite(values).all():
        lo, hi = float(values.min()), float(values.max())
        size = hi - lo + 1
        if size < 2**52 and size * max(n_groups, 1) < KEY_LIMIT:
            iv = values.astype(np.int64)
            if (iv == values).all():  # whole numbers (ns): one sort of a packed (group, value) key
                key = np.asarray(inv, np.int64) * int(size)
                key += iv - int(lo)
                key.sort()
                v = (key % int(size) + int(lo)).astype(np.float64)
    if v is None:
        order = np.lexsort((values, inv))
        v = values[order]
    counts = np.bincount(inv, minlength=n_groups)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    has = counts > 0
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    out[has] = 0.5 * (v[lo[has]] + v[hi[has]])
    last = (starts + counts - 1)[has]
    mx[has] = v[last]
    if np.isnan(values).any():  # a group's maximum is NaN when it holds one (np.maximum semantics)
        nan_in = np.bincount(inv, weights=np.isnan(values), minlength=n_groups) > 0
        mx[nan_in] = np.nan
    return out, mx


def union_length(start: np.ndarray, end: np.ndarray) -> int:
    """Total length covered by a set of intervals (ns)."""
    s, e = merge_intervals(start, end)
    return int((e - s).sum())


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint sorted intervals ``(starts, ends)``."""
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    if start.size == 0:
        return start[:0], end[:0]
    o = np.argsort(start, kind="stable")
    s, e = start[o], end[o]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    last = np.r_[idx[1:] - 1, s.size - 1]
    return s[idx], run_end[last]


def intersect_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length of the intersection of two unions of disjoint intervals (from :func:`merge_intervals`)."""
    (as_, ae), (bs, be) = a, b
    if as_.size == 0 or bs.size == 0:
        return 0
    t = np.concatenate([as_, ae, bs, be])
    d_a = np.concatenate([np.ones(as_.size, np.int64), -np.ones(ae.size, np.int64), np.zeros(bs.size + be.size, np.int64)])
    d_b = np.concatenate([np.zeros(as_.size + ae.size, np.int64), np.ones(bs.size, np.int64), -np.ones(be.size, np.int64)])
    o = np.argsort(t, kind="stable")
    t, ca, cb = t[o], np.cumsum(d_a[o]), np.cumsum(d_b[o])
    both = (ca[:-1] > 0) & (cb[:-1] > 0)
    return int((np.diff(t) * both).sum())


#: Span lookups and leaf detection run on blocks of about this many events (whole workgroups:
#: the answers never cross one), so that their temporaries stay small and are reused.
BLOCK_EVENTS = 1 << 20


def workgroup_blocks(trace: Trace, size: int | None = None) -> np.ndarray:
    """Row boundaries ``[0, ..., n]`` cutting the events into blocks of whole workgroups of
    about ``size`` (default :data:`BLOCK_EVENTS`) events."""
    n = trace.n_events
    size = BLOCK_EVENTS if size is None else size
    if n <= size:
        return np.array([0, n], np.int64)
    first = workgroup_starts(trace)
    at = np.searchsorted(first, np.arange(size, n, size))
    cuts = first[at[at < first.size]]
    return np.unique(np.concatenate([[0], cuts, [n]]))


def workgroup_starts(trace: Trace) -> np.ndarray:
    """The first row of each workgroup (cached)."""
    return trace.cached(("wg_first",), lambda: np.flatnonzero(np.r_[True, trace.wg[1:] != trace.wg[:-1]]))


def rank_launch_starts(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(first rows, ranks, launches)`` of the (rank, launch) groups of rows, in table order
    (from the workgroups: no pass over the rank and launch columns)."""
    if trace.n_events == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    k = trace.wg_keys
    ch = np.r_[True, (k[1:, 0] != k[:-1, 0]) | (k[1:, 1] != k[:-1, 1])]
    return workgroup_starts(trace)[ch], k[ch, 0], k[ch, 1]


def _per_block(trace: Trace, rows: np.ndarray, fn) -> np.ndarray:
    """``fn(rows, spans)`` on each block of whole workgroups (``rows`` and the spans in it, both
    sorted); the answers (event rows or -1) in the order of ``rows``."""
    rows = np.asarray(rows, np.int64)
    spans = trace.rows_of(EventKind.SPAN)
    if rows.size == 0 or spans.size == 0:
        return np.full(rows.size, -1, np.int64)
    srt = rows.size < 2 or bool((rows[1:] >= rows[:-1]).all())
    o = None if srt else argsort_stable(rows)
    rs = rows if srt else rows[o]
    bounds = workgroup_blocks(trace)
    qb = np.searchsorted(rs, bounds)
    sb = np.searchsorted(spans, bounds)
    out = np.full(rows.size, -1, np.int64)
    for k in range(bounds.size - 1):
        if qb[k + 1] > qb[k] and sb[k + 1] > sb[k]:
            out[qb[k] : qb[k + 1]] = fn(rs[qb[k] : qb[k + 1]], spans[sb[k] : sb[k + 1]])
    if srt:
        return out
    back = np.empty(rows.size, np.int64)
    back[o] = out
    return back


def _pack_pair(trace: Trace, spans: np.ndarray, rows: np.ndarray, t_spans: np.ndarray, t_rows: np.ndarray):
    """Packed (workgroup, time) keys of spans and queries of one block, or None when too wide."""
    wg = trace.wg
    w0 = int(wg[spans[0]]) if spans[0] < rows[0] else int(wg[rows[0]])
    w1 = max(int(wg[spans[-1]]), int(wg[rows[-1]]))
    lo = min(int(t_spans.min()), int(t_rows.min()))
    size = max(int(t_spans.max()), int(t_rows.max())) - lo + 1
    if size * (w1 - w0 + 1) >= KEY_LIMIT:
        return None
    return (wg[spans] - w0) * size + (t_spans - lo), (wg[rows] - w0) * size + (t_rows - lo)


def enclosing_span(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For each event row, the row of the span of the same workgroup that encloses it, or -1.

    The innermost candidate is the span that started last before the event; if that span ended
    before the event ended (spans may overlap freely), the enclosing span that started earliest
    among those still open is taken instead (the outermost).

    Per block of whole workgroups, spans are ordered by (workgroup, start, longest first, row)
    and each query is one binary search.
    """
    return _per_block(trace, rows, lambda r, sp: _enclosing_block(trace, r, sp))


def _enclosing_block(trace: Trace, rows: np.ndarray, spans: np.ndarray) -> np.ndarray:
    s, e, wg = trace.column("start_ns"), trace.column("end_ns"), trace.wg
    keys = _pack_pair(trace, spans, rows, s[spans], s[rows])
    if keys is None:
        return _enclosing_span_merged(trace, rows, spans)
    ks, kq = keys
    o = lexorder(ks, -e[spans])
    srows = spans[o]
    ks = ks[o]
    # per position, the latest span at or before it with the largest end in its workgroup
    packed = _pack_by_group(wg[srows] - int(wg[srows[0]]), e[srows])
    if packed is None:
        return _enclosing_span_merged(trace, rows, spans)
    run = np.maximum.accumulate(packed)
    best = np.maximum.accumulate(np.where(packed == run, np.arange(srows.size), -1))
    del run, packed
    p = np.searchsorted(ks, kq, side="right") - 1
    valid = p >= 0
    pc = np.maximum(p, 0)
    cand = srows[pc]
    valid &= wg[cand] == wg[rows]
    contains = valid & (e[cand] >= e[rows]) & (cand != rows)
    res = np.where(contains, cand, -1)
    need = valid & ~contains
    if need.any():
        ni = np.flatnonzero(need)
        brow = srows[best[pc[ni]]]
        q = rows[ni]
        res[ni] = np.where((e[brow] >= e[q]) & (brow != q), brow, -1)
    return res


def _pack_by_group(group: np.ndarray, value: np.ndarray) -> np.ndarray | None:
    """``group * range + value`` (int64) for a nondecreasing group column, None if too wide."""
    lo = int(value.min())
    size = int(value.max()) - lo + 1
    if size * (int(group.max()) + 1) >= KEY_LIMIT:
        return None
    return group * size + (value - lo)


def _enclosing_span_merged(trace: Trace, rows: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """:func:`enclosing_span` for times too wide for packed keys: one sort of spans and queries together."""
    rows = np.asarray(rows, np.int64)
    wg, s, e = trace.wg, trace.column("start_ns"), trace.column("end_ns")
    # one ordering of spans and queries by (workgroup, start; spans before queries at a tie,
    # longer spans first)
    n_s = spans.size
    allr = np.concatenate([spans, rows])
    typ = np.concatenate([np.zeros(n_s, np.int64), np.ones(rows.size, np.int64)])
    neg_end = -e[allr]
    order = np.lexsort((neg_end, typ, s[allr], wg[allr]))
    is_span = typ[order] == 0
    pos = np.arange(order.size)
    last_span = np.maximum.accumulate(np.where(is_span, pos, -1))
    # the running maximum end among spans so far (per workgroup: reset by comparing workgroups)
    sorted_rows = allr[order]
    sorted_wg = wg[sorted_rows]
    q_at = np.flatnonzero(~is_span)
    q_rows = sorted_rows[q_at]
    cand_pos = last_span[q_at]
    valid = cand_pos >= 0
    cand_rows = np.where(valid, sorted_rows[np.maximum(cand_pos, 0)], -1)
    valid &= sorted_wg[np.maximum(cand_pos, 0)] == wg[q_rows]
    contains = valid & (e[np.maximum(cand_rows, 0)] >= e[q_rows]) & (cand_rows != q_rows)
    res = np.where(contains, cand_rows, -1)
    # fallback: the span with the largest end among spans started so far in the workgroup
    need = valid & ~contains
    if need.any():
        span_end = np.where(is_span, e[sorted_rows], np.iinfo(np.int64).min)
        # segment-wise running argmax of end: encode (workgroup, end) so that a new workgroup resets
        wg_change = np.r_[True, sorted_wg[1:] != sorted_wg[:-1]]
        seg = np.cumsum(wg_change) - 1
        # rank of end within everything, so (seg, end-rank) fits one int64 key
        end_rank = np.argsort(np.argsort(span_end, kind="stable"), kind="stable")
        key = np.where(is_span, seg * (order.size + 1) + end_rank, -1)
        run = np.maximum.accumulate(key)
        best_pos_key = run[q_at[need]]
        same_seg = (best_pos_key >= 0) & (best_pos_key // (order.size + 1) == seg[q_at[need]])
        # turn the end rank back into a position
        pos_of_rank = np.empty(order.size, np.int64)
        pos_of_rank[end_rank] = np.arange(order.size)
        bpos = pos_of_rank[np.where(same_seg, best_pos_key % (order.size + 1), 0)]
        brow = sorted_rows[bpos]
        ok = same_seg & (e[brow] >= e[q_rows[need]]) & (brow != q_rows[need])
        res_need = np.where(ok, brow, -1)
        res[np.flatnonzero(need)] = res_need
    # queries were visited in sorted order; put the answers back in the order asked
    back = np.empty(rows.size, np.int64)
    back[order[~is_span] - n_s] = res
    return back


def preceding_span(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For each event row, the row of the span of the same workgroup that ended last at or before
    the event started (what the program was doing just before), or -1 (the latest row among
    spans that ended at the same time)."""
    return _per_block(trace, rows, lambda r, sp: _preceding_block(trace, r, sp))


def _preceding_block(trace: Trace, rows: np.ndarray, spans: np.ndarray) -> np.ndarray:
    s, e, wg = trace.column("start_ns"), trace.column("end_ns"), trace.wg
    keys = _pack_pair(trace, spans, rows, e[spans], s[rows])
    if keys is None:
        return _preceding_span_merged(trace, rows, spans)
    ks, kq = keys
    o = argsort_stable(ks)
    srows = spans[o]
    p = np.searchsorted(ks[o], kq, side="right") - 1
    crow = srows[np.maximum(p, 0)]
    return np.where((p >= 0) & (wg[crow] == wg[rows]), crow, -1)


def _preceding_span_merged(trace: Trace, rows: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """:func:`preceding_span` for times too wide for packed keys."""
    wg, s, e = trace.wg, trace.column("start_ns"), trace.column("end_ns")
    n_s = spans.size
    allr = np.concatenate([spans, rows])
    t = np.concatenate([e[spans], s[rows]])
    typ = np.concatenate([np.zeros(n_s, np.int64), np.ones(rows.size, np.int64)])
    order = np.lexsort((typ, t, wg[allr]))
    is_span = typ[order] == 0
    pos = np.arange(order.size)
    last = np.maximum.accumulate(np.where(is_span, pos, -1))
    q = np.flatnonzero(~is_span)
    cand = last[q]
    sorted_rows = allr[order]
    crow = sorted_rows[np.maximum(cand, 0)]
    ok = (cand >= 0) & (wg[crow] == wg[sorted_rows[q]])
    res = np.where(ok, crow, -1)
    back = np.empty(rows.size, np.int64)
    back[order[q] - n_s] = res
    return back


def is_timeout(flags: np.ndarray) -> np.ndarray:
    return (np.asarray(flags) & int(EventFlag.TIMEOUT)) != 0


def fmt_ns(ns: float) -> str:
    """A duration in words: 850 ns, 40.3 µs, 3.1 ms, 2.05 s."""
    if ns is None or not np.isfinite(ns):
        return "?"
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


def ranks_text(ranks) -> str:
    """``[0, 1, 3]`` -> "ranks 0, 1, 3"; one rank -> "rank 2"."""
    rs = sorted({int(x) for x in ranks})
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return "ranks " + ", ".join(str(x) for x in rs)


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
    """An aligned-table of ``n`` zero rows (``schema.EVENT_DTYPE`` + ``start_ns``/``end_ns``)."""
    dt = np.dtype(schema.EVENT_DTYPE.descr + [("start_ns", "<i8"), ("end_ns", "<i8")])
    return np.zeros(n, dt)
