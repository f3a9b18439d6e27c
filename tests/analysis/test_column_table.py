"""ColumnTable: the analyses' wide tables kept as columns, read like structured arrays."""

import numpy as np
import pytest

from ktrace.analysis.trace import ColumnTable

DT = np.dtype([("a", "<i8"), ("b", "<f8"), ("name", "O"), ("d", "<i8")])


def _table(calls):
    rng = np.random.default_rng(7)
    a = rng.integers(0, 1000, 50).astype(np.int32)  # held narrower than the rows' type
    b = rng.random(50)

    def name(idx):
        calls.append(idx if isinstance(idx, slice) else np.asarray(idx).copy())
        return np.array([f"n{x}" for x in a[idx].tolist()], dtype=object)

    return ColumnTable(DT, {"a": a, "b": b}, {"name": name}, {"d": lambda idx: a[idx] * 2}), a, b


def test_rows_match_a_structured_array_built_whole():
    calls = []
    t, a, b = _table(calls)
    ref = np.zeros(50, DT)
    ref["a"], ref["b"], ref["name"], ref["d"] = a, b, [f"n{x}" for x in a.tolist()], a * 2
    mask = b > 0.5
    idx = np.array([3, 0, 49, 3])
    for sel in (mask, idx, slice(5, 20, 3), slice(None, 3)):
        got = t[sel]
        assert got.dtype == DT
        assert got.tolist() == ref[sel].tolist()
    assert t[7].tolist() == ref[7].tolist() and t[-1].tolist() == ref[-1].tolist()
    assert t.size == len(t) == 50 and t.shape == (50,)
    assert np.asarray(t).tolist() == ref.tolist()  # numpy functions see every row
    assert np.sort(t, order="a").tolist() == np.sort(ref, order="a").tolist()


def test_lazy_columns_are_made_for_the_rows_asked_then_kept_whole():
    calls = []
    t, a, _ = _table(calls)
    t[np.array([1, 2])]
    assert len(calls) == 1 and calls[0].tolist() == [1, 2]  # only those rows
    col = t["name"]
    assert col.tolist() == [f"n{x}" for x in a.tolist()] and calls[-1] == slice(None)
    assert t["name"] is col and len(calls) == 2  # kept
    t[np.array([4])]
    assert len(calls) == 2  # rows now come from the kept column


def test_take_is_a_column_of_the_rows_without_building_them():
    calls = []
    t, a, b = _table(calls)
    idx = np.array([3, 0, 49, 3])
    rows = t[idx]
    calls.clear()
    for name in ("a", "b", "name", "d"):
        got = t.take(name, idx)
        assert got.tolist() == rows[name].tolist() and got.dtype == DT[name]
    assert [c.tolist() for c in calls] == [[3, 0, 49, 3]] and "name" not in t._cols  # (made at those rows only)
    with pytest.raises(ValueError):
        t.take("nosuch", idx)


def test_derived_columns_are_never_kept():
    t, a, _ = _table([])
    d1, d2 = t["d"], t["d"]
    assert d1 is not d2 and (d1 == a * 2).all()
    assert "d" not in t._cols


def test_bad_names_and_rows_raise():
    t, _, _ = _table([])
    with pytest.raises(ValueError, match="no field of name nope"):
        t["nope"]
    with pytest.raises(IndexError):
        t[50]
    with pytest.raises(IndexError):
        t[np.array([0, 50])]
    with pytest.raises(IndexError):
        t[np.ones(49, bool)]
    with pytest.raises(ValueError, match="different lengths"):
        ColumnTable(DT, {"a": np.zeros(3), "b": np.zeros(4)}, {"name": len, "d": len})
    with pytest.raises(ValueError, match="no column or maker"):
        ColumnTable(DT, {"a": np.zeros(3)})


def test_sparse_vector_at_rows_and_whole():
    from ktrace.analysis.trace import Sparse

    s = Sparse(np.array([2, 5, 9]), np.array([1.5, -2.0, 7.0]), 1.0, 12)
    whole = np.ones(12)
    whole[[2, 5, 9]] = [1.5, -2.0, 7.0]
    assert s(slice(None)).tolist() == whole.tolist()
    idx = np.array([9, 0, 5, 5, 11, 2])
    assert s(idx).tolist() == whole[idx].tolist()
    names = Sparse(np.array([1]), np.array(["x"], dtype=object), "", 3)
    assert names(slice(None)).tolist() == ["", "x", ""] and Sparse(np.zeros(0), np.zeros(0), 0.0)(idx).tolist() == [0.0] * 6
