"""Notify -> wait pairing (``ktrace.pairing``) and the causality check on small CONSTRUCTED tables
(each row written out by hand here)."""

import numpy as np

from ktrace.clock import check_causality
from ktrace.pairing import pair_table
from ktrace.schema import ALIGNED_DTYPE, Cmp, EventFlag, EventKind


def _table(rows):
    t = np.zeros(len(rows), ALIGNED_DTYPE)
    for i, (rank, kind, start, end, peer, a1, flag, a3, a4, flags, *cmp) in enumerate(rows):
        t[i]["rank"], t[i]["kind"], t[i]["flags"] = rank, kind, flags
        t[i]["program"], t[i]["slot"] = (9, i) if kind == EventKind.WAIT else (0, i)
        t[i]["start_ns"], t[i]["end_ns"], t[i]["start"], t[i]["end"] = start, end, start, end
        t[i]["arg0"], t[i]["arg1"], t[i]["arg2"], t[i]["arg3"], t[i]["arg4"] = peer, a1, flag, a3, a4
        t[i]["arg5"] = cmp[0] if cmp else 0
    return t


N, W = EventKind.NOTIFY, EventKind.WAIT


def test_one_notify_releases_every_wait_on_its_flag():
    # rank 0 sets flag 64 of rank 1 to 5 at t=100; three programs of rank 1 waited for it
    t = _table([
        (0, N, 100, 110, 1, 5, 64, 0, 0, 0),
        (1, W, 10, 150, 0, 40, 64, 5, 5, 0),
        (1, W, 20, 151, 0, 41, 64, 5, 5, 0),
        (1, W, 140, 141, 0, 1, 64, 5, 5, 0),
    ])
    t["program"][1:] = [0, 1, 2]
    n, w, un_n, un_w = pair_table(t)
    assert list(w) == [1, 2, 3] and list(n) == [0, 0, 0] and un_n == 0 and un_w == 0
    rep = check_causality(t)
    assert rep.n_pairs == 3 and rep.n_violations == 0


def test_repeated_signals_pair_with_their_own_round_and_violations_show():
    # the same flag set to 1 in three rounds (reset in between); one program waits in each round,
    # then gives up on a fourth
    t = _table([
        (0, N, 100, 101, 1, 1, 8, 0, 0, 0),
        (0, N, 1000, 1001, 1, 1, 8, 0, 0, 0),
        (0, N, 2000, 2001, 1, 1, 8, 0, 0, 0),
        (1, W, 50, 120, 0, 9, 8, 1, 1, 0),
        (1, W, 900, 1020, 0, 9, 8, 1, 1, 0),
        (1, W, 1900, 1990, 0, 9, 8, 1, 1, 0),  # ends 10 ns before round 3's notify: a violation
        (1, W, 2100, 3000, 0, 9, 8, 1, 1, int(EventFlag.TIMEOUT)),  # gave up: not paired
        (1, W, 3100, 3101, 0, 9, 99, 1, 1, 0),  # nobody signals flag 99
    ])
    n, w, un_n, un_w = pair_table(t)
    assert dict(zip(w.tolist(), n.tolist())) == {3: 0, 4: 1, 5: 2}
    assert un_w == 1 and un_n == 0
    rep = check_causality(t)
    assert rep.n_violations == 1 and rep.worst_lag_ns == -10 and rep.timeouts == 1
    assert check_causality(t, slack_ns=10).n_violations == 0


def test_value_and_direction_must_match():
    t = _table([
        (0, N, 100, 101, 1, 2, 8, 0, 0, 0),  # value 2
        (2, N, 100, 101, 1, 1, 8, 0, 0, 0),  # from rank 2, not 0
        (1, W, 50, 120, 0, 9, 8, 1, 1, 0),  # waits for value 1 from rank 0
    ])
    n, w, un_n, un_w = pair_table(t)
    assert n.size == 0 and un_w == 1 and un_n == 2


def test_ge_waits_on_a_counter_are_released_by_the_notify_that_reached_their_value():
    # rank 0 adds 1 to flag 8 of rank 1 three times (a counter); rank 1's program 0 waits for
    # >= 2, program 1 for > 2 (= 3), program 2 for >= 5 (never reached); rank 0 also sets flag 16
    # to 3 then 7 (sets: the values differ), and program 3 waits for >= 6 on it
    GE, GT = int(Cmp.GE), int(Cmp.GT)
    t = _table([
        (0, N, 100, 101, 1, 1, 8, 0, 0, 0),
        (0, N, 200, 201, 1, 1, 8, 1, 0, 0),
        (0, N, 300, 301, 1, 1, 8, 2, 0, 0),
        (0, N, 400, 401, 1, 3, 16, 3, 0, 0),
        (0, N, 500, 501, 1, 7, 16, 4, 0, 0),
        (1, W, 10, 250, 0, 9, 8, 2, 2, 0, GE),
        (1, W, 20, 350, 0, 9, 8, 3, 2, 0, GT),
        (1, W, 30, 360, 0, 9, 8, 3, 5, 0, GE),
        (1, W, 40, 550, 0, 9, 16, 7, 6, 0, GE),
    ])
    t["program"][5:] = [0, 1, 2, 3]
    n, w, un_n, un_w = pair_table(t)
    assert dict(zip(w.tolist(), n.tolist())) == {5: 1, 6: 2, 8: 4}
    assert un_w == 1  # program 2's >= 5 was never reached
    # without the fallback only exact values pair: none of these
    n0, w0, _, un_w0 = pair_table(t, fallback=False)
    assert w0.size == 0 and un_w0 == 4
