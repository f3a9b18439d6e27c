"""The faster paths of the report and its exports give what the plain ones give, on the bundled and
scenario captures: the wait causes of a capture made a window of launches at a time, the
report's columns decoded in one pass (``ktrace.events.capture_columns``) against the batches,
the pairs of the waits of two halves of the ranks against those of all at once, the calibrated
latency of each wait looked up in a table of rank pairs against computed one by one, and a
finding's agents matched a rank at a time against one at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ktrace.analysis import prepare
from ktrace.analysis import trace as T
from ktrace.analysis.causes import model as M
from ktrace.captures import read_capture
from ktrace.clock.model import clock_model_of
from ktrace.events import capture_columns

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(ROOT.glob("ktrace/data/*.ktrace")) + sorted(ROOT.glob("tests/fixtures/scenarios/*.ktrace")) + sorted(
    ROOT.glob("tests/fixtures/gluon/*.ktrace"))


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_wait_causes_by_windows_of_launches(path, monkeypatch):
    whole = M._compute_wait_split(prepare(path), M.replay_model(prepare(path)))
    monkeypatch.setattr(M, "WINDOW_WAITS", 40)  # (a window of a launch or two)
    by_windows = M._split_by_windows(prepare(path))
    assert by_windows.keys() == whole.keys()
    for k, v in whole.items():
        assert np.array_equal(by_windows[k], v, equal_nan=v.dtype.kind == "f"), k


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_capture_columns_equal_the_batches(path, monkeypatch):
    import ktrace.events as events

    monkeypatch.setattr(events, "CHUNK_BYTES", 16 << 10)  # (many chunks: the offsets chained over threads)
    cap = read_capture(path)
    model = clock_model_of(cap)
    got = capture_columns(cap, model, T._COPIED, T._COPIED_AT[1], T._COPIED_AT[0], threads=2)
    monkeypatch.setattr(events, "capture_columns", _refuse)
    want = T._aligned_columns(cap, model)
    assert got.n == want.n and not got.impossible
    for c, v in want.cols.items():
        assert np.array_equal(got.cols[c], v) and got.cols[c].dtype == v.dtype, c
    for key, v in want.at.items():
        assert np.array_equal(T._narrowed({key: got.at[key]})[key], v), key


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_pairs_by_halves_of_the_ranks(path, monkeypatch):
    from ktrace import pairing
    from ktrace.analysis import stalls

    monkeypatch.setattr(stalls, "_HALVES_MIN", 1)
    halves = stalls._release_pairs(prepare(path))
    monkeypatch.setattr(stalls, "_pair_by_halves", pairing.pair)
    whole = stalls._release_pairs(prepare(path))
    for k in ("notify", "wait", "exact"):
        assert np.array_equal(getattr(halves, k), getattr(whole, k)), k
    assert (halves.unmatched_notifies, halves.unmatched_waits) == (whole.unmatched_notifies, whole.unmatched_waits)


def _refuse(*a, **k):  # (the checked path: the batches)
    from ktrace.events import NotDecoded

    raise NotDecoded()


@pytest.mark.parametrize("path", CAPTURES[:4], ids=lambda p: p.stem)
def test_one_way_pairs_by_table(path, monkeypatch):
    from ktrace import keys
    from ktrace.analysis.stalls import waits

    trace = prepare(path)
    w = waits(trace)
    # the waits' pairs, and ranks no calibration covers (negative, past the world)
    extra = np.array([-1, 0, 3, int(trace.world_size) + 3, -7], np.int64)
    p = np.r_[w["peer"].astype(np.int64), extra, extra[::-1]]
    c = np.r_[w["rank"].astype(np.int64), extra[::-1], extra]
    monkeypatch.setattr(keys, "LARGE", 1 << 62)  # (one by one)
    plain = M.one_way_pairs(trace, p, c)
    monkeypatch.setattr(keys, "LARGE", 0)  # (by the table)
    tabled = M.one_way_pairs(trace, p, c)
    assert np.isfinite(plain).any()
    assert plain.dtype == tabled.dtype and plain.tobytes() == tabled.tobytes()


def test_finding_agents_matched_by_rank():
    from ktrace.analysis.finding_view import _match

    def one_by_one(rank, program, agents):
        out = np.zeros(rank.size, bool)
        for r, _ln, p in agents:
            out |= ((rank == r) | (r < 0)) & ((program == p) | (p < 0))
        return out

    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(0, 60))
        rank, program = rng.integers(-1, 4, n).astype(np.int32), rng.integers(-1, 6, n).astype(np.int32)
        agents = [tuple(int(x) for x in rng.integers(-1, 5, 3)) for _ in range(int(rng.integers(0, 8)))]
        if rng.random() < 0.8:  # (an agent that is any rank's any program matches every row: rarer)
            agents = [a for a in agents if a[0] >= 0 or a[2] >= 0]
        want = one_by_one(rank, program, agents)
        got = _match(rank, program, agents)
        assert got.dtype == bool and np.array_equal(got, want), (rank, program, agents)
