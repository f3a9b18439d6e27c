"""ktrace.keys and the pairing's round numbers against the numpy calls they stand for, on random
keys that take every path: packed and too wide to pack, nearly sorted and shuffled, int32, int64
and bool columns, and ties."""

import numpy as np
import pytest

from ktrace import keys
from ktrace.pairing import _occurrence


def _columns(rng, n):
    return [
        rng.integers(0, 4, n).astype(np.int32),  # few values: many ties
        rng.integers(-(2**40), 2**40, n),  # wide
        rng.random(n) < 0.5,
        np.sort(rng.integers(1 << 60, (1 << 60) + 1000, n)),  # large offset, nearly sorted
        rng.integers(-(2**31), 2**31 - 1, n).astype(np.int32),  # the whole int32 range
    ]


@pytest.mark.parametrize("n", [0, 1, 7, 1000, keys.LARGE + 123])
def test_lexorder_is_lexsort(n):
    rng = np.random.default_rng(n)
    cols = _columns(rng, n)
    for pick in ([0], [0, 2], [0, 4], [2, 0, 3], [0, 1], [1, 0, 4], [4, 4, 0], [3, 0, 2, 4]):
        ks = [cols[i] for i in pick]
        assert np.array_equal(keys.lexorder(*ks), np.lexsort(ks[::-1])), pick


@pytest.mark.parametrize("n", [5, keys.LARGE + 7])
def test_argsort_stable_and_dense_codes(n):
    rng = np.random.default_rng(n + 1)
    for k in (*_columns(rng, n)[:2], np.arange(n)[::-1].copy(), np.sort(rng.integers(0, 50, n)),
              rng.integers(0, 2**20, n).astype(np.uint32)):
        assert np.array_equal(keys.argsort_stable(k), np.argsort(k, kind="stable"))
        codes, u = keys.dense_codes(k)
        ru, rinv = np.unique(k, return_inverse=True)
        assert np.array_equal(u, ru) and np.array_equal(codes, rinv.reshape(-1))
        d = keys.distinct(k)
        assert d.dtype == ru.dtype and np.array_equal(d, ru)


@pytest.mark.parametrize("n", [0, 1, 6, 40])
def test_is_lexsorted_is_row_by_row_comparison(n):
    rng = np.random.default_rng(n + 2)
    for trial in range(200):
        cols = [rng.integers(0, 3, n), rng.integers(0, 3, n).astype(np.int32), rng.integers(0, 4, n)][: 1 + trial % 3]
        if trial % 2:  # mostly sorted, so that both answers occur
            o = np.lexsort(cols[::-1])
            cols = [c[o] for c in cols]
            if n > 1 and trial % 4 == 1:
                i = int(rng.integers(0, n - 1))
                for c in cols:
                    c[[i, i + 1]] = c[[i + 1, i]]
        rows = list(zip(*(c.tolist() for c in cols)))
        assert keys.is_lexsorted(*cols) == all(r <= q for r, q in zip(rows, rows[1:]))
        assert keys.is_lexsorted(*cols, strict=True) == all(r[:-1] < q[:-1] or (r[:-1] == q[:-1] and r[-1] < q[-1])
                                                             for r, q in zip(rows, rows[1:]))


def test_occurrence_counts_within_runs():
    rng = np.random.default_rng(3)
    k = np.sort(rng.integers(0, 300, 5000))
    ref = np.zeros(k.size, np.int64)
    for i in range(1, k.size):
        ref[i] = ref[i - 1] + 1 if k[i] == k[i - 1] else 0
    assert np.array_equal(_occurrence(k), ref)
    assert _occurrence(np.zeros(0, np.int64)).size == 0
