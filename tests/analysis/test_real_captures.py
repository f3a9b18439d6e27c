"""The analyses on the real captures shipped in ``ktrace/data`` (4 x H200, MoE all-to-all).

Each capture has a ``.scenario.json`` saying what was injected with the kernel's fault knob
(``instrumented_kernels/all_to_all``): the expected answers below come from it and from the
kernel's own records (its spans and their arguments, read straight from the capture's event
buffers), never from the analysis code being tested.

* delay: rank ``delay_rank`` spins ``delay_ns`` before each of its notifies: the report's first
  finding names it as notifying late, with a lateness within 10 % of the delay, and the held time
  is not reported again as slow work.
* skewed: ranks hold different numbers of tokens: the combine workgroups (the receive side:
  each runs the experts on its share of the received rows, then sums its share of its own
  tokens' returned rows) with more items of work than the median workgroup are exactly the
  ones flagged overloaded.
* skip: rank ``skip_rank`` never sends its count to rank 0: the hang report names rank 0, its
  waiting programs, the count flag and the peer.

On every capture, every completed wait is released by a captured notify (``ktrace.pairing``),
with fan-out, and the waits table's split covers every wait.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from ktrace.analysis import build_report, prepare
from viewers.text import render_text
from ktrace.analysis.stalls import notify_holds, release_pairs
from ktrace.captures.file import read_capture
from ktrace.schema import EventFlag, EventKind

DATA = Path(__file__).resolve().parents[2] / "ktrace" / "data"
CAPTURES = sorted(DATA.glob("a2a_*.ktrace"))  # (the all-to-all recordings; byok_*: tests/test_byok_captures.py)


def _scenario(path: Path) -> dict:
    return json.loads(path.with_suffix(".scenario.json").read_text())


def _by_fault(pred):
    return [p for p in CAPTURES if pred(_scenario(p)["fault"])]


DELAYED = _by_fault(lambda f: f["delay_rank"] >= 0 and f["delay_ns"] > 0)
SKIPPED = _by_fault(lambda f: f["skip_rank"] >= 0)
SKEWED = [p for p in CAPTURES if "skew" in _scenario(p)["shape"]]


def test_the_captures_are_there():
    assert len(DELAYED) >= 2 and SKIPPED and SKEWED, [p.name for p in CAPTURES]


@pytest.mark.parametrize("path", CAPTURES, ids=[p.stem for p in CAPTURES])
def test_every_completed_wait_is_released(path):
    """Pairs by rounds, many waits per notify: every completed wait of these kernels has its notify."""
    tr = prepare(path)
    n, w = release_pairs(tr)
    ev = tr.events
    # fan-out: some notify releases more than one wait (every program waits on each count flag)
    assert np.bincount(n).max() > 1
    assert (ev["kind"][n] == EventKind.NOTIFY).all() and (ev["kind"][w] == EventKind.WAIT).all()
    # the notify wrote to the waiter's rank, the waiter waited on the notifier's rank, same flag
    assert (ev["arg0"][n] == ev["rank"][w]).all() and (ev["arg0"][w] == ev["rank"][n]).all()
    assert (ev["arg2"][n] == ev["arg2"][w]).all()
    done = (ev["kind"] == EventKind.WAIT) & ((ev["flags"] & EventFlag.TIMEOUT) == 0)
    assert w.size == int(done.sum())
    rep = build_report(tr)
    wt = rep.tables["waits"]
    ok = ~wt["timed_out"]
    assert np.isfinite(wt["producer_late_ns"][ok]).all()
    np.testing.assert_allclose(wt["producer_late_ns"][ok] + wt["signal_latency_ns"][ok], wt["wait_ns"][ok])


@pytest.mark.parametrize("path", DELAYED, ids=[p.stem for p in DELAYED])
def test_delayed_rank_is_the_first_finding_with_its_delay(path):
    fault = _scenario(path)["fault"]
    late, D = fault["delay_rank"], float(fault["delay_ns"])
    rep = build_report(path)
    first = rep.findings[0]
    assert first.kind == "late_notifies", render_text(rep)
    assert first.data["rank"] == late
    assert abs(first.data["magnitude_ns"] - D) <= 0.1 * D, first.text  # the true lateness of its notifies
    # the producer agents named: every program of the late rank (each held every round back)
    assert first.text.startswith(f"rank {late} programs 0-{first.data['programs'][-1]} notified late: "), first.text
    by_rank = rep.tables["stragglers"]
    assert int(by_rank["rank"][0]) == late
    others = by_rank[by_rank["rank"] != late]
    assert (np.abs(others["held_excess_ns"]) < 0.1 * D).all(), others
    # independent of the analysis: on the producer's own clock, each of its notifies starts about
    # D after the event it recorded before (the spin sits between them)
    ev = read_capture(path).events()
    gaps = {}
    for r in range(4):
        e = np.sort(ev[ev["rank"] == r], order=["launch", "program", "slot"])
        n = np.flatnonzero((e["kind"] == EventKind.NOTIFY)[1:]) + 1
        same = (e["launch"][n] == e["launch"][n - 1]) & (e["program"][n] == e["program"][n - 1])
        gaps[r] = np.median((e["start"][n] - e["end"][n - 1])[same].astype(np.int64))
    base = np.median([g for r, g in gaps.items() if r != late])
    assert abs(gaps[late] - base - D) <= 0.1 * D  # (the timer counts ns on these GPUs)
    assert abs(first.data["magnitude_ns"] - (gaps[late] - base)) <= 0.02 * D
    # the held time is not reported again as slow work: each delayed notify's hold is taken out
    # of its workgroup's work time
    wg = rep.tables["workgroups"]
    hold = notify_holds(rep.trace)
    delayed = np.bincount(rep.trace.wg[hold["row"]], weights=np.nan_to_num(hold["held_excess_ns"]) >= 0.5 * D,
                          minlength=wg.size)
    mine = wg["rank"] == late
    assert (wg["held_ns"][mine] >= 0.9 * D * delayed[mine]).all()
    assert (wg["work_ns"] == wg["busy_ns"] - wg["held_ns"]).all()
    # a workgroup of the late rank is flagged overloaded only for having more work items than
    # its kernel's median workgroup, never for the time it held its notifies
    over = wg[wg["overloaded"] & mine]
    for k in np.unique(wg["role"][mine]).tolist():
        med = np.median(wg["work_items"][wg["role"] == k])
        assert (over["work_items"][over["role"] == k] > med).all(), over[over["role"] == k]


def _work_items_from_records(path: Path) -> dict[tuple[int, int, int], int]:
    """Per combine workgroup (rank, launch, program): its 'expert' spans (one per received row)
    plus its 'reduce' spans (one per own token summed), read from the decoded event buffers."""
    cap = read_capture(path)
    names = {v: k for k, v in cap.regions.items()}
    items: dict[tuple[int, int, int], int] = {}
    for r, rc in cap.ranks.items():
        for ln in rc.launches:
            if ln.kernel != "moe_combine":
                continue
            e = ln.decode(r).events
            grid = int(np.prod(ln.grid))
            work = (e["kind"] == EventKind.SPAN) & np.isin(e["region"], [names["expert"], names["reduce"]])
            cnt = np.bincount(e["program"][work], minlength=grid)
            for p in range(grid):
                items[(r, ln.index, p)] = int(cnt[p])
    return items


@pytest.mark.parametrize("path", SKEWED, ids=[p.stem for p in SKEWED])
def test_skewed_overloaded_receive_workgroups_flagged_exactly(path):
    items = _work_items_from_records(path)
    rep = build_report(path)
    wg = rep.tables["workgroups"]
    recorded = {k for k in items if k in {tuple(x) for x in zip(wg["rank"].tolist(), wg["launch"].tolist(), wg["program"].tolist())}}
    # the median over every rank's combine workgroups that recorded something
    med = np.median([items[k] for k in recorded])
    expected = {k for k in recorded if items[k] > med}
    assert 0 < len(expected) < len(recorded) / 2
    flagged = {(int(r), int(l), int(p)) for r, l, p, o in zip(wg["rank"], wg["launch"], wg["program"], wg["overloaded"])
               if o and (int(r), int(l), int(p)) in items}
    assert expected <= flagged
    # the others flagged have no more items than the median but worked at least 1.25x its time
    # (LoadConfig.min_excess): their work went slower
    key = {(int(r), int(l), int(p)): i for i, (r, l, p) in enumerate(zip(wg["rank"], wg["launch"], wg["program"]))}
    comb = [key[k] for k in recorded]
    med_work = np.median(wg["work_ns"][comb])
    for k in flagged - expected:
        assert items[k] <= med and wg["work_ns"][key[k]] >= 1.25 * med_work, (k, items[k], wg["work_ns"][key[k]], med_work)
    # and the report says so, as uneven work distribution
    named = set()
    for f in rep.findings:
        if f.kind == "uneven_work":
            named |= {(r, p) for r, ps in f.data["programs"].items() for p in ps}
    assert {(r, p) for r, _, p in expected} <= named


@pytest.mark.parametrize("path", SKIPPED, ids=[p.stem for p in SKIPPED])
def test_skipped_notify_hang_names_rank_programs_flag_and_peer(path):
    sc = _scenario(path)
    peer = sc["fault"]["skip_rank"]
    # what the kernel itself reported when its waits gave up (ks.wait's timeout messages)
    pat = re.compile(r"rank (\d+), program (\d+) waited on flag '([^']+)'\[\d+\] \(int32 at heap offset (0x[0-9a-f]+)\) "
                     r"from peer (\d+) for ([\d.]+) ms")
    reported = [pat.match(t).groups() for t in sc["timeouts"]["0"]]
    assert reported and {g[2] for g in reported} == {"a2a.count_flag"} and {int(g[4]) for g in reported} == {peer}
    flag = {int(g[3], 16) for g in reported}
    assert len(flag) == 1
    flag = flag.pop()
    # from the decoded buffers: rank 0's programs whose wait on that flag from that peer gave up
    ev = read_capture(path).events()
    to = ((ev["kind"] == EventKind.WAIT) & ((ev["flags"] & EventFlag.TIMEOUT) != 0) & (ev["rank"] == 0)
          & (ev["arg0"] == peer) & (ev["arg2"] == flag))
    progs = set(ev["program"][to].tolist())
    assert {int(g[1]) for g in reported} <= progs
    rep = build_report(path)
    first = rep.findings[0]
    assert first.kind == "hang" and first.severity == "error", render_text(rep)
    assert first.data["consumer"] == 0 and first.data["producer"] == peer and first.data["flag"] == flag
    assert set(first.data["programs"]) == progs
    assert first.text.startswith("HANG: rank 0 programs ") and f"flag +{flag:#x}" in first.text
    assert f"from rank {peer}" in first.text and f"rank {peer} never sent it" in first.text
    # the run ended: each of those waits gave up after its timeout (50 ms), not later
    assert abs(first.data["waited_ns"] - 50e6) <= 0.01 * 50e6


@pytest.mark.parametrize("path", CAPTURES, ids=[p.stem for p in CAPTURES])
def test_columns_decoded_from_buffers_equal_the_full_tables(path):
    """``prepare(path)`` decodes the analyses' columns straight from the buffers (arguments at their
    recorded widths, ``schema.arg_dtype``, or 32 bits where every value fits); the full aligned
    table gives the same values, and the waits and workgroups tables (kept as columns) give the
    same rows either way."""
    from ktrace.analysis import load, stalls
    from ktrace.schema import arg_dtype

    from ktrace.analysis import Trace

    tr = prepare(path)
    # from the table: every column int64, as ALIGNED_DTYPE has it
    ref = Trace(events=tr.events, regions=tr.regions, world_size=tr.world_size, kernels=tr.kernels,
                n_programs=tr.n_programs, meta=tr.meta)
    for kind in (EventKind.WAIT, EventKind.NOTIFY):
        for a in ("arg0", "arg1", "arg2", "arg3", "arg4", "arg5"):
            got = tr.at(kind, a)
            assert got.dtype.itemsize <= arg_dtype(kind, a).itemsize and ref.at(kind, a).dtype == np.int64
            assert np.array_equal(got, ref.at(kind, a)), (kind, a)
    for c in ("rank", "launch", "program", "kind", "flags", "region", "hw", "start_ns", "end_ns"):
        assert np.array_equal(tr.column(c), ref.column(c)), c
    w, wr = stalls.waits(tr), stalls.waits(ref)
    assert w.size == wr.size > 0 and w[:].tolist() == wr[:].tolist()
    g, gr = load.workgroups(tr), load.workgroups(ref)
    codes, roles = g.codes("role")  # the roles as codes, given without making the column
    assert roles[codes].tolist() == g["role"].tolist() and list(roles) == sorted(set(roles))
    a, b = g[:], gr[:]
    assert a.dtype == b.dtype and a.size == b.size == tr.n_workgroups
    for c in a.dtype.names:
        if a.dtype[c].kind == "f":
            np.testing.assert_array_equal(a[c], b[c], err_msg=c)
        else:
            assert a[c].tolist() == b[c].tolist(), c


def test_silent_programs_said_once_per_rank_and_count():
    """The same silent-program count on a rank in many launches is one entry with its launch count
    (the skewed capture's launches replicated 5 times: 4 entries, each 'in 5 launches')."""
    from ktrace.analysis import scenario

    tr = prepare(DATA / "a2a_skewed_4xh200.ktrace")
    rep = build_report(prepare(scenario.to_capture(scenario.replicate(tr.events, 5), regions=tr.regions)))
    text = next(f.text for f in rep.findings if f.text.startswith("programs that recorded nothing"))
    one = next(f.text for f in build_report(tr).findings if f.text.startswith("programs that recorded nothing"))
    entries = re.findall(r"rank (\d+) (\d+) of (\d+)( in ([\d,]+) launches)?", text)
    assert len(entries) == len(re.findall(r"rank \d+ \d+ of \d+", one)) == 4
    assert all(e[4] == "5" for e in entries) and "(20 (rank, launch) pairs)" in text
