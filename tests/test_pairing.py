"""Notify -> wait pairing (``ktrace.pairing``) and the causality check: on small CONSTRUCTED tables
(each row written out by hand here) and on every real capture of a kernel the project ships."""

import json
from pathlib import Path

import numpy as np
import pytest

from ktrace.clock import check_causality
from ktrace.pairing import pair, pair_table
from ktrace.schema import ALIGNED_DTYPE, Cmp, EventFlag, EventKind, arg_column, is_timeout


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
    # >= 2 (saw 2), program 1 for > 2 (saw 3), program 2 for >= 5 and gives up (saw 3); rank 0
    # also sets flag 16 to 3 then 7 (sets: the values differ), and program 3 waits for >= 6 on it
    GE, GT = int(Cmp.GE), int(Cmp.GT)
    TO = int(EventFlag.TIMEOUT)
    t = _table([
        (0, N, 100, 101, 1, 1, 8, 0, 0, 0),
        (0, N, 200, 201, 1, 1, 8, 1, 0, 0),
        (0, N, 300, 301, 1, 1, 8, 2, 0, 0),
        (0, N, 400, 401, 1, 3, 16, 3, 0, 0),
        (0, N, 500, 501, 1, 7, 16, 4, 0, 0),
        (1, W, 10, 250, 0, 9, 8, 2, 2, 0, GE),
        (1, W, 20, 350, 0, 9, 8, 3, 2, 0, GT),
        (1, W, 30, 360, 0, 9, 8, 3, 5, TO, GE),
        (1, W, 40, 550, 0, 9, 16, 7, 6, 0, GE),
    ])
    t["program"][5:] = [0, 1, 2, 3]
    n, w, un_n, un_w = pair_table(t)
    assert dict(zip(w.tolist(), n.tolist())) == {5: 1, 6: 2, 8: 4}
    assert un_w == 0  # program 2's wait for >= 5 timed out: not a completed wait without a notify
    # without the fallback only exact values pair: none of these
    n0, w0, _, un_w0 = pair_table(t, fallback=False)
    assert w0.size == 0 and un_w0 == 3


GE, GT, EQ = int(Cmp.GE), int(Cmp.GT), int(Cmp.EQ)
NOTIFY_COLS = ("rank", "launch", "start", "peer", "value", "flag")
WAIT_COLS = ("rank", "launch", "program", "order", "peer", "flag", "value", "expected", "cmp")


def _cols(names, rows):
    a = np.array(rows, np.int64).reshape(-1, len(names))
    return {k: a[:, i] for i, k in enumerate(names)}


def _waits(rows, timed_out=None):
    w = _cols(WAIT_COLS, rows)
    w["timed_out"] = np.zeros(len(rows), bool) if timed_out is None else np.asarray(timed_out, bool)
    return w


def test_a_counter_fed_by_several_producers_pairs_with_the_add_that_completed_it():
    # three producer programs of rank 0 add 1 to the counter at offset 64 of rank 0 in each of two
    # launches; the counter was at 6 before the capture (earlier launches): launch 0 brings it to
    # 9, launch 1 to 12. The consumer (rank 0, program 3) waits for >= 9, then >= 12, and saw
    # exactly that. In launch 1 producer 2's add is the late one (start 900).
    notifies = _cols(NOTIFY_COLS, [
        (0, 0, 100, 0, 1, 64), (0, 0, 120, 0, 1, 64), (0, 0, 110, 0, 1, 64),  # the last add: start 120 (row 1)
        (0, 1, 500, 0, 1, 64), (0, 1, 510, 0, 1, 64), (0, 1, 900, 0, 1, 64),  # the late one: row 5
    ])
    waits = _waits([(0, 0, 3, 0, 0, 64, 9, 9, GE), (0, 1, 3, 0, 0, 64, 12, 12, GE)])
    p = pair(notifies, waits)
    assert p.wait.tolist() == [0, 1] and p.notify.tolist() == [1, 5] and p.unmatched_waits == 0
    assert p.unmatched_notifies == 4  # the adds that did not complete the count released nothing
    # a wait that names itself as the peer (gemm_rs: every rank adds to its owner's counter) and
    # adds that come from two other ranks, whose order is their aligned start
    notifies = _cols(NOTIFY_COLS, [(1, 0, 300, 0, 1, 64), (2, 0, 250, 0, 1, 64)])
    waits = _waits([(0, 0, 5, 7, 0, 64, 4, 4, GE)])
    p = pair(notifies, waits)
    assert p.notify.tolist() == [0] and p.unmatched_waits == 0 and not p.exact.any()


def test_several_waits_on_one_counter_each_pair_with_the_add_that_reached_their_value():
    # adds of 4 (the notify's value is the amount added) by two producers; four programs wait on
    # the same counter, which stood at 100: >= 104, > 104, == 112 and >= 110 (saw 112: the value
    # the wait saw decides, not the least it would have taken)
    notifies = _cols(NOTIFY_COLS, [(0, 0, 10, 1, 4, 8), (2, 0, 30, 1, 4, 8), (0, 0, 20, 1, 4, 8)])
    waits = _waits([(1, 0, 0, 0, 0, 8, 104, 104, GE), (1, 0, 1, 0, 0, 8, 108, 104, GT),
                    (1, 0, 2, 0, 0, 8, 112, 112, EQ), (1, 0, 3, 0, 0, 8, 112, 110, GE)])
    p = pair(notifies, waits)
    assert dict(zip(p.wait.tolist(), p.notify.tolist())) == {0: 0, 1: 2, 2: 1, 3: 1}
    assert p.unmatched_waits == 0 and p.unmatched_notifies == 0
    # without the value seen (an older capture's callers): the least value that satisfies each
    del waits["value"]
    p = pair(notifies, waits)
    assert dict(zip(p.wait.tolist(), p.notify.tolist())) == {0: 0, 1: 2, 2: 1, 3: 1}


def test_a_missing_add_is_missing_and_a_flag_nobody_wrote_stays_unmatched():
    # two producers should each add 1 per launch to a counter: in launch 0 one add never came (the
    # counter stopped at 1) and the consumer, waiting for >= 2, gave up (timed out: neither paired
    # nor unmatched); in launch 1 both added (1 -> 3) and the wait for >= 3 is released by the
    # second; a wait on a flag no notify wrote is unmatched
    notifies = _cols(NOTIFY_COLS, [(0, 0, 10, 0, 1, 8), (0, 1, 50, 0, 1, 8), (0, 1, 60, 0, 1, 8)])
    waits = _waits([(0, 0, 5, 0, 0, 8, 1, 2, GE), (0, 1, 5, 0, 0, 8, 3, 3, GE), (0, 1, 6, 0, 0, 16, 1, 1, GE)],
                   timed_out=[True, False, False])
    p = pair(notifies, waits)
    assert p.wait.tolist() == [1] and p.notify.tolist() == [2]
    assert p.unmatched_waits == 1  # the wait on flag 16


# --- real captures -----------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
#: every capture of an instrumented or scenario kernel the project ships (not the probe fixture,
#: whose waits are made to time out without a notify)
KERNEL_CAPTURES = sorted([*(ROOT / "tests" / "fixtures" / "scenarios").glob("*.ktrace"),
                          *(ROOT / "tests" / "fixtures" / "runs").glob("*.ktrace"),
                          *(ROOT / "ktrace" / "data").glob("*.ktrace"), *(ROOT / "benchmarks" / "data").glob("*.ktrace")])


def _aligned(path):
    from ktrace.captures import read_capture
    from ktrace.events import aligned_events

    return aligned_events(read_capture(path))


@pytest.mark.parametrize("path", KERNEL_CAPTURES, ids=lambda p: p.stem)
def test_every_completed_wait_of_a_real_capture_pairs_with_a_notify_to_its_flag(path):
    ev = _aligned(path)
    n, w, _, un_w = pair_table(ev)
    wait = ev["kind"] == W
    done = wait & ~is_timeout(ev["flags"])
    assert un_w == 0 and w.size == int(done.sum())
    assert (ev["kind"][n] == N).all() and (ev["kind"][w] == W).all() and (np.diff(w) > 0).all()
    # the notify wrote the flag the wait read (consumer rank, heap offset), in the same launch
    assert (ev[arg_column(N, "peer")][n] == ev["rank"][w]).all()
    assert (ev[arg_column(N, "flag")][n] == ev[arg_column(W, "flag")][w]).all()
    assert (ev["launch"][n] == ev["launch"][w]).all()
    # and it started before the wait ended (on one rank exactly; across ranks within the clock's bound)
    rep = check_causality(ev)
    assert rep.n_pairs == w.size and rep.n_violations == 0, rep


def _counter_waits(name):
    """The aligned events of a capture, its pairs, and per pair the latest add (by start) of the
    pair's flag and launch: a wait that needs every add of its launch is released by that one."""
    ev = _aligned(name)
    n, w, _, _ = pair_table(ev)
    ni = np.flatnonzero(ev["kind"] == N)
    key = lambda rows, who: (ev[who][rows].astype(np.int64) << 40) + (ev["launch"][rows].astype(np.int64) << 32) + \
        ev[arg_column(W, "flag")][rows].astype(np.int64)  # noqa: E731 - (rank, launch, flag) of one flag's writes
    k_all, k_pair = key(ni, arg_column(N, "peer")), key(n, arg_column(N, "peer"))
    latest = {}
    for k, s, r in sorted(zip(k_all.tolist(), ev["start_ns"][ni].tolist(), ni.tolist())):
        latest[k] = r  # (test-side reference, a plain loop on a few hundred rows)
    return ev, n, w, np.array([latest[k] for k in k_pair.tolist()], np.int64)


def test_gemm_rs_counters_pair_every_wait_with_the_add_that_completed_it():
    """``ktrace run gemm_rs --nproc 1``: each output tile's counter gets one add per step (the
    rank adds 1 to its own counter) and the wait for ``>= epoch`` names this rank as its peer.
    The counter carries over the steps (and the two warm-up steps before the capture): every wait
    pairs with its step's add, where it paired with none before."""
    ev, n, w, latest = _counter_waits(ROOT / "tests" / "fixtures" / "runs" / "gemm_rs_1xh100.ktrace")
    assert w.size == int((ev["kind"] == W).sum()) == 256
    assert (n == latest).all()
    assert (ev[arg_column(W, "expected")][w] >= 3).all()  # the warm-up steps counted too (epoch 3, 4)
    assert (ev[arg_column(N, "value")][n] == 1).all()


def test_counter_fed_by_three_producers_pairs_with_the_late_one():
    """``w1_counter_late``: three producer programs add 1 per tile to their consumer's counter,
    program 1 holds its adds of tiles 8..11 back 40 µs. The consumer's waits on those tiles pair
    with program 1's adds; every wait pairs with the latest add of its tile (it needs all three)."""
    info = json.loads((ROOT / "tests" / "fixtures" / "scenarios" / "w1_counter_late.scenario.json").read_text())
    inj = info["injected"]
    ev, n, w, latest = _counter_waits(ROOT / "tests" / "fixtures" / "scenarios" / "w1_counter_late.ktrace")
    assert (n == latest).all()
    mine = w[ev["program"][w] == inj["consumer_program"]]  # rows in (launch, slot) order
    mine_n = n[ev["program"][w] == inj["consumer_program"]]
    tile = np.concatenate([np.arange(c) for c in np.unique(ev["launch"][mine], return_counts=True)[1]])
    assert tile.max() + 1 == info["tiles"]
    late = np.isin(tile, inj["tiles"])
    # from its first held add on, the late producer is the last of the three (it never catches
    # up: 40 µs more behind after each held tile); before it, another producer was last
    assert set(ev["program"][mine_n[tile >= min(inj["tiles"])]].tolist()) == {inj["program"]}
    assert inj["program"] not in set(ev["program"][mine_n[tile < min(inj["tiles"])]].tolist())
    # those waits waited for the held add: about its delay longer than the consumer's others
    d = (ev["end_ns"] - ev["start_ns"])[mine]
    assert abs(np.median(d[late]) - np.median(d[~late & (tile > 0)]) - inj["delay_ns"]) <= 0.1 * inj["delay_ns"]


@pytest.mark.parametrize("name", ["runs/gemm_rs_1xh100", "scenarios/w1_counter_late"])
def test_the_trace_processor_shows_one_arrow_per_counter_wait(tmp_path, name):
    """The trace written from a capture whose waits are on counters has one flow per paired wait
    (every wait here), each from the add that completed the count, none backwards: read back by
    Perfetto's own trace processor."""
    from ktrace.cli import main
    from ktrace.testing.perfetto import TraceProcessorHost, unavailable_reason

    if unavailable_reason():
        pytest.skip(f"Perfetto's trace processor cannot run here: {unavailable_reason()}")
    src = ROOT / "tests" / "fixtures" / f"{name}.ktrace"
    ev = _aligned(src)
    n, w, _, _ = pair_table(ev)
    assert w.size == int((ev["kind"] == W).sum()) > 0
    out = tmp_path / "t.pftrace"
    assert main(["merge", str(src), "-o", str(out)]) == 0
    with TraceProcessorHost() as host:
        t = host.load(out)
        try:
            assert t.problems() == []
            assert t.scalar("select count(*) from flow") == w.size
            assert t.scalar("select count(*) from flow f join slice a on a.id = f.slice_out join slice b on b.id = f.slice_in "
                            "where b.ts < a.ts") == 0
        finally:
            t.close()


def _rule1_reference(notifies, waits):
    """Rule 1 from its words, one event at a time: the k-th notify of a (producer, consumer,
    flag, value) group in (launch, start) order releases the k-th wait of each program of that
    group in (launch, order) order; timed-out waits take their round unpaired."""
    rounds: dict = {}
    n_order = sorted(range(notifies["rank"].size), key=lambda i: (notifies["launch"][i], notifies["start"][i]))
    for i in n_order:
        rounds.setdefault((notifies["rank"][i], notifies["peer"][i], notifies["flag"][i], notifies["value"][i]), []).append(i)
    out = np.full(waits["rank"].size, -1, np.int64)
    seen: dict = {}
    for i in sorted(range(waits["rank"].size), key=lambda i: (waits["launch"][i], waits["order"][i])):
        g = (waits["peer"][i], waits["rank"][i], waits["flag"][i], waits["expected"][i])
        k = seen.get((g, waits["program"][i]), 0)
        seen[(g, waits["program"][i])] = k + 1
        if not waits["timed_out"][i] and k < len(rounds.get(g, ())):
            out[i] = rounds[g][k]
    return out


@pytest.mark.parametrize("n_flags", [7, 40_000])
def test_exact_pairs_by_round_whatever_the_order_of_the_waits(n_flags):
    # CONSTRUCTED: 3 ranks, launches of several rounds on a few flags (or on more flags than 2^15
    # groups), some notifies and waits missing, some waits timed out; the waits given in record
    # order (rank, launch, order) and shuffled pair the same, and as the rule says, wait by wait
    rng = np.random.default_rng(7)
    n_n = 3000 if n_flags < 100 else 40_000
    n_w = 3 * n_n
    notifies = {"rank": rng.integers(0, 3, n_n), "launch": rng.integers(0, 4, n_n), "start": rng.integers(0, 10**6, n_n),
                "peer": rng.integers(0, 3, n_n), "value": rng.integers(1, 3, n_n), "flag": rng.integers(0, n_flags, n_n) * 8}
    # most waits wait for one of the notifies (in a launch of their own choosing), the rest at random
    of = rng.integers(0, n_n, n_w)
    waits = {"rank": notifies["peer"][of], "launch": rng.integers(0, 4, n_w), "program": rng.integers(0, 5, n_w),
             "peer": notifies["rank"][of], "flag": notifies["flag"][of], "expected": notifies["value"][of],
             "cmp": np.zeros(n_w, np.int64), "timed_out": rng.random(n_w) < 0.05}
    noise = rng.random(n_w) < 0.2
    waits["flag"][noise] = rng.integers(0, n_flags, int(noise.sum())) * 8
    o = np.lexsort((waits["launch"], waits["rank"]))  # record order: rank, launch, then the slot
    waits = {k: v[o] for k, v in waits.items()}
    waits["order"] = np.arange(n_w)
    ref = _rule1_reference(notifies, waits)
    p = pair(notifies, waits, fallback=False)
    got = np.full(n_w, -1, np.int64)
    got[p.wait] = p.notify
    assert (got >= 0).sum() > n_w // 4 and np.array_equal(got, ref)
    s = rng.permutation(n_w)
    p = pair(notifies, {k: v[s] for k, v in waits.items()}, fallback=False)
    got_s = np.full(n_w, -1, np.int64)
    got_s[s[p.wait]] = p.notify
    assert np.array_equal(got_s, ref)
