"""Composite integer keys, stable orders and groups: the sorting machinery pairing, the trace
writers' layout and the analyses share.

Several integer columns are packed into one int64 key (mixed radix) wherever their ranges
allow, so that a row-wise ``lexsort`` or ``unique(axis=0)`` becomes one 1-D sort, close to
linear on a capture's nearly sorted rows (:func:`lexorder`, :func:`dense_codes`,
:func:`argsort_stable`); group-by sums, counts, extremes and medians run on the dense group ids
that :func:`group_index` makes. Each fast path has a general one (keys too wide to pack, short
arrays) that gives the same answer; the tests force both (:data:`KEY_LIMIT`, :data:`LARGE`).
Pure numpy.
"""

from __future__ import annotations

import numpy as np

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


def distinct(x: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer array (``np.unique(x)``), by a table of the
    values present where the range allows (no sort, no codes)."""
    x = np.asarray(x)
    if x.size == 0 or x.dtype.kind not in "iu":
        return np.unique(x)
    lo, hi = int(x.min()), int(x.max())
    if hi - lo + 1 > min(max(4 * x.size + 1024, 1 << 25), 1 << 31):
        return np.unique(x)
    present = np.zeros(hi - lo + 1, bool)
    present[x - x.dtype.type(lo)] = True  # (exact in x's own type: the offsets fit 31 bits)
    return (np.flatnonzero(present) + lo).astype(x.dtype)


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
    packed = np.subtract(k, lo, dtype=np.int64)
    packed *= n
    packed += np.arange(n, dtype=np.int64)
    packed.sort()
    packed %= n
    return packed


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
        k = np.asarray(k)
        lo = int(k.min())
        size = int(k.max()) - lo + 1
        if total * size >= KEY_LIMIT:
            break
        off = np.subtract(k, lo, dtype=np.int64)  # (packed in place: one temporary at a time)
        if comp is None:
            comp = off
        else:
            comp *= size
            comp += off
        del off
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


def _steps(c) -> np.ndarray:
    """``np.diff`` of an integer column in int64 (no int64 copy of the column first)."""
    c = np.asarray(c)
    return np.subtract(c[1:], c[:-1], dtype=np.int64)


def is_lexsorted(*cols: np.ndarray, strict: bool = False) -> bool:
    """Whether rows are in lexicographic order of ``cols``, first column first (with ``strict``,
    the last column strictly increasing among rows equal in the others)."""
    *keys, last = cols
    same = None  # rows equal to the one before in every column so far
    for c in keys:
        d = _steps(c)
        if ((d < 0) if same is None else (same & (d < 0))).any():
            return False
        same = (d == 0) if same is None else (same & (d == 0))
    d = _steps(last)
    bad = (d <= 0) if strict else (d < 0)
    return not (bad if same is None else (same & bad)).any()


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
