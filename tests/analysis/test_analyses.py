"""Analyses checked against what was injected.

CONSTRUCTED cases: event tables built by ``ktrace.analysis.scenario`` (no GPU recorded them)
with a known fault each. Real captures recorded on H200s with the instrumented kernels' fault
knobs go in ``tests/fixtures/*.ktrace``: adding one is one entry in the ``CASES`` list below
(a loader and what was injected), and every check runs on it too.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import pytest

from ktrace.analysis import (
    LoadConfig,
    RegionClasses,
    Trace,
    build_diff,
    build_report,
    critical_path,
    imbalance,
    overlap,
    prepare,
    release_pairs,
    report_json,
    stall_totals,
    stragglers,
    waits,
    workgroups,
)
from ktrace.analysis import hangs, scenario
from viewers.text import render_text
from ktrace.analysis.intervals import intersect_length, merge_intervals
from ktrace.analysis.trace import empty_event_table
from ktrace.keys import group_index, group_median
from ktrace.schema import EventFlag, EventKind

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@dataclass(frozen=True)
class Case:
    """One capture and what was injected into it (None: nothing of that kind)."""

    name: str
    load: object  # () -> anything ktrace.analysis.prepare takes
    late_rank: int | None = None
    late_ns: float | None = None
    overloaded: frozenset = frozenset()  # {(rank, program)}
    missing: tuple | None = None  # (waiting rank, program, flag, peer)
    constructed: bool = True
    extra: dict = field(default_factory=dict)


def _constructed(sc: scenario.Scenario):
    def load():
        return Trace(events=scenario.build(sc), regions=scenario.REGIONS, world_size=sc.world,
                     kernels={(r, 0): "a2a_constructed" for r in range(sc.world)}, source="constructed")

    return load


D_SMALL, D_LARGE = 20_000, 200_000
_HEAVY = {(1, 3): 3, (2, 5): 3, (0, 0): 4}
_SKIP = (2, 1, 5, 2)  # rank 2 never notifies rank 1's program 5 for tile 2
CASES = [
    Case("constructed-late-20us", _constructed(scenario.Scenario(iters=1, late_rank=2, late_ns=D_SMALL)), late_rank=2, late_ns=D_SMALL),
    Case("constructed-late-200us", _constructed(scenario.Scenario(iters=1, late_rank=1, late_ns=D_LARGE)), late_rank=1, late_ns=D_LARGE),
    Case("constructed-skewed-work", _constructed(scenario.Scenario(iters=2, work=_HEAVY)), overloaded=frozenset(_HEAVY)),
    Case("constructed-skipped-notify", _constructed(scenario.Scenario(iters=3, skip=(_SKIP,))),
         missing=(1, 5, scenario.flag_of(2, 5, 8), 2)),
    Case("constructed-capture-file", lambda: scenario.to_capture(scenario.build(scenario.Scenario(iters=1, late_rank=3, late_ns=D_SMALL))),
         late_rank=3, late_ns=D_SMALL),
]
# Real fixtures (recorded with the instrumented kernels' fault knobs) are added here, e.g.:
#   Case("a2a-late-rank2-20us", lambda: FIXTURES / "a2a_late_r2_20us.ktrace", late_rank=2, late_ns=20_000, constructed=False)


def _ids(cases):
    return [c.name for c in cases]


@pytest.mark.parametrize("case", [c for c in CASES if c.late_rank is not None], ids=_ids([c for c in CASES if c.late_rank is not None]))
def test_late_rank_is_top_straggler_and_first_finding(case):
    tr = prepare(case.load())
    by_rank, by_wg = stragglers(tr)
    assert int(by_rank["rank"][0]) == case.late_rank
    top = by_rank[0]
    assert abs(top["late_median_ns"] - case.late_ns) <= 0.1 * case.late_ns, top
    assert abs(top["excess_late_ns"] - case.late_ns) <= 0.1 * case.late_ns, top
    # every other producer was (nearly) on time
    assert (by_rank["late_median_ns"][1:] < 0.1 * case.late_ns).all()
    assert int(by_wg["rank"][0]) == case.late_rank
    # what it did before notifying: the region the delay was put into, longer by about D
    assert top["before_region"] == "gemm"
    assert abs((top["before_ns"] - top["before_others_ns"]) - case.late_ns) <= 0.1 * case.late_ns
    # the delay is slow work before the notifies (the producer had more work): the first finding
    # names that work on the late rank, and a replay without it saves the delay
    rep = build_report(tr)
    first = rep.findings[0]
    assert first.kind in ("uneven_work", "uneven_ranks") and case.late_rank in first.ranks, render_text(rep)
    assert first.data["region"] == "gemm"
    assert abs(first.data["saving_per_launch_ns"] - case.late_ns) <= 0.1 * case.late_ns, first.text
    assert "gemm" in render_text(rep)


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_wait_split_adds_up_and_releases_match(case):
    tr = prepare(case.load())
    w = waits(tr)
    assert w.size == int((tr.column("kind") == EventKind.WAIT).sum())
    ok = np.isfinite(w["producer_late_ns"])
    np.testing.assert_allclose(w["producer_late_ns"][ok] + w["signal_latency_ns"][ok], w["wait_ns"][ok])
    assert (w["producer_late_ns"][ok] >= 0).all() and (w["signal_latency_ns"][ok] >= 0).all()
    paired = w[w["notify_row"] >= 0]
    ev = tr.events
    n = ev[paired["notify_row"]]
    assert (n["kind"] == EventKind.NOTIFY).all()
    assert (n["arg0"] == paired["rank"]).all() and (n["rank"] == paired["peer"]).all()
    assert (n["arg2"] == paired["flag"]).all()
    assert (n["start_ns"] <= paired["end_ns"]).all()  # causality on a constructed (exact) clock
    # every completed wait of a constructed capture has its notify captured
    if case.constructed:
        assert (w["notify_row"] >= 0).sum() == (~w["timed_out"]).sum()


@pytest.mark.parametrize("case", [c for c in CASES if c.overloaded], ids=_ids([c for c in CASES if c.overloaded]))
def test_overloaded_workgroups_flagged_exactly(case):
    tr = prepare(case.load())
    wg = workgroups(tr)
    flagged = {(int(r), int(p)) for r, p in zip(wg["rank"][wg["overloaded"]], wg["program"][wg["overloaded"]])}
    assert flagged == set(case.overloaded)
    sel = wg[wg["overloaded"]]
    assert (sel["cause"] == "work").all() and (sel["top_region"] == "gemm").all()
    # their gemm tiles are the injected multiples (iters tiles each); by default every leaf span
    # is a work item, here only the gemm region's
    tiles = workgroups(tr, LoadConfig(work_region="gemm"))
    for r, p, items in zip(sel["rank"], sel["program"], tiles["work_items"][wg["overloaded"]]):
        assert items == _HEAVY[(int(r), int(p))] * 2
    imb = imbalance(tr, wg)
    allr = imb[imb["rank"] < 0][0]
    assert allr["max_over_mean"] > 1.5 and allr["n_outliers"] >= len(case.overloaded)


@pytest.mark.parametrize("case", [c for c in CASES if c.missing], ids=_ids([c for c in CASES if c.missing]))
def test_hang_report_names_waiter_program_flag_peer(case):
    tr = prepare(case.load())
    to = hangs.timeouts(tr)
    rank, prog, flag, peer = case.missing
    primary = to[to["status"] == "never signalled"]
    assert primary.size == 1
    row = primary[0]
    assert (row["rank"], row["program"], row["flag"], row["peer"]) == (rank, prog, flag, peer)
    miss = hangs.missing_notifies(tr, to)
    assert miss.size == 1 and miss["producer"][0] == peer and miss["consumer"][0] == rank
    assert not miss["producer_stuck"][0]
    rep = build_report(tr)
    f = rep.findings[0]
    assert f.kind == "hang" and f.severity == "error"
    assert f"rank {rank} program {prog}" in f.text and f"from rank {peer}" in f.text and f"+{flag:#x}" in f.text


def test_counter_waits_pair_with_the_notify_that_reaches_expected():
    """CONSTRUCTED: a 'ge' wait for 3 on a counter that rank 1 increments by 1 three times."""
    t = empty_event_table(4)
    for i in range(3):  # rank 1 adds 1 to rank 0's flag 64 at 100, 200, 300
        t[i] = (1, 0, 0, 0, i, EventKind.NOTIFY, 0, 1, 0, 100 * (i + 1), 100 * (i + 1) + 10, 0, 1, 64, i, 0, 0, 100 * (i + 1), 100 * (i + 1) + 10)
    t[3] = (0, 0, 0, 0, 0, EventKind.WAIT, 0, 2, 0, 50, 400, 1, 20, 64, 3, 3, 3, 50, 400)
    t = t[np.lexsort((t["slot"], t["program"], t["launch"], t["rank"]))]
    tr = Trace(events=t)
    n, w = release_pairs(tr)
    assert w.size == 1 and tr.events["start_ns"][n[0]] == 300
    row = waits(tr)[0]
    assert row["producer_late_ns"] == 250 and row["signal_latency_ns"] == 100


def test_overlap_hidden_and_exposed_exact():
    """CONSTRUCTED: one rank, program 0 computes [0, 100), program 1 puts [50, 200)."""
    t = empty_event_table(2)
    from ktrace.schema import region_id

    t[0] = (0, 0, 0, 0, 0, EventKind.SPAN, 0, region_id("gemm"), 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 100)
    t[1] = (0, 0, 1, 0, 0, EventKind.SPAN, 0, region_id("put"), 0, 50, 200, 0, 0, 0, 0, 0, 0, 50, 200)
    tr = Trace(events=t, regions={region_id("gemm"): "gemm", region_id("put"): "put"})
    ov = overlap(tr)
    assert (ov["comm_ns"][0], ov["compute_ns"][0], ov["hidden_ns"][0], ov["exposed_ns"][0]) == (150, 100, 50, 100)
    # configurable: call 'put' compute and nothing is communication
    ov2 = overlap(Trace(events=t, regions=tr.regions), RegionClasses(compute_names=("put",)))
    assert ov2["comm_ns"][0] == 0 and ov2["compute_ns"][0] == 200
    with pytest.raises(ValueError):
        RegionClasses(comm="(")


def test_critical_path_runs_through_the_late_rank():
    tr = prepare(CASES[0].load())
    path = critical_path(tr)
    assert path.size >= 3 and (path["kind"] == "signal").any()
    run = path[path["kind"] == "run"]
    share = run["dur_ns"][run["rank"] == 2].sum() / path["dur_ns"].sum()
    assert share > 0.5
    # contiguous in time: each segment starts where the previous ended
    assert (path["start_ns"][1:] == path["end_ns"][:-1]).all()


def test_stall_totals_sum_to_the_waits():
    tr = prepare(CASES[0].load())
    w = waits(tr)
    for by in ("rank", "peer", "workgroup"):
        t = stall_totals(tr, by, w)
        assert t["wait_ns"].sum() == w["wait_ns"].sum() and t["n_waits"].sum() == w.size
        assert ((t["wait_frac"] >= 0) & (t["wait_frac"] <= 1)).all()
    with pytest.raises(ValueError):
        stall_totals(tr, "sm", w)


@pytest.mark.parametrize("by", ["rank", "peer", "workgroup"])
def test_stall_totals_per_group_match_a_plain_group_by(by):
    """Each group's sums equal a dict group-by over the waits table's rows (the sums are made a
    block of waits at a time, ranks and peers as cells of a dense table)."""
    from ktrace.analysis import stalls

    tr = prepare(scenario.build(scenario.Scenario(iters=3, late_rank=1, late_ns=D_SMALL)))
    w = waits(tr)
    names = {"rank": ("rank",), "peer": ("rank", "peer"), "workgroup": ("rank", "launch", "program")}[by]
    ref: dict = {}
    for row in w[:].tolist():
        d = dict(zip(w.dtype.names, row))
        acc = ref.setdefault(tuple(d[n] for n in names), [0, 0, 0, 0.0, 0.0])
        late = 0.0 if np.isnan(d["producer_late_ns"]) else d["producer_late_ns"]
        sig = 0.0 if np.isnan(d["signal_latency_ns"]) else d["signal_latency_ns"]
        for k, v in enumerate((1, int(d["timed_out"]), d["wait_ns"], late, sig)):
            acc[k] += v
    for block in (stalls._SUM_BLOCK, 7):  # one block, and many
        old, stalls._SUM_BLOCK = stalls._SUM_BLOCK, block
        try:
            t = stall_totals(tr, by, w)
        finally:
            stalls._SUM_BLOCK = old
        got = {tuple(int(r[n]) for n in names): [int(r["n_waits"]), int(r["timeouts"]), int(r["wait_ns"]),
                                                  float(r["producer_late_ns"]), float(r["signal_latency_ns"])] for r in t}
        assert got == ref and len(t) == len(ref)


def test_diff_biggest_mover_is_the_changed_region():
    base = scenario.Scenario(iters=2)
    a = Trace(events=scenario.build(base), regions=scenario.REGIONS, source="A")
    b = Trace(events=scenario.build(scenario.Scenario(iters=2, work={(3, 2): 5})), regions=scenario.REGIONS, source="B")
    d = build_diff(a, b)
    top = d.tables["regions"][0]
    assert top["region"] == "gemm" and top["rank"] == 3 and top["delta_ns"] == 4 * 2 * base.gemm_ns
    assert d.findings[0].text.startswith("'gemm' on rank 3")
    wgd = d.tables["workgroups"]
    busy = wgd[np.argmax(wgd["b_busy_ns"] - wgd["a_busy_ns"])]
    assert (busy["rank"], busy["program"]) == (3, 2)
    # the other workgroups of program 2 got slower from waiting for it, not from their own work
    assert (np.abs(wgd["b_busy_ns"] - wgd["a_busy_ns"])[(wgd["rank"] != 3)] == 0).all()


def test_report_json_is_serialisable_and_complete():
    rep = build_report(prepare(CASES[3].load()))
    data = orjson.loads(orjson.dumps(report_json(rep)))
    assert data["format"] == "ktrace-report" and data["findings"][0]["kind"] == "hang"
    assert data["tables"]["waits"]["rows_total"] == rep.tables["waits"].size
    assert data["findings"][0]["perfetto"].startswith("https://ui.perfetto.dev/#!/")


def test_commands_report_and_diff(tmp_path, capsys):
    from ktrace.cli import _register_analysis as register
    from ktrace.captures.file import write_capture

    cap = CASES[4].load()
    f = write_capture(tmp_path / "late.ktrace", cap)
    g = write_capture(tmp_path / "base.ktrace", scenario.to_capture(scenario.build(scenario.Scenario(iters=1))))
    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    args = p.parse_args(["report", str(f), "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html"), "-q"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    first = next(ln for ln in out.splitlines() if ln.lstrip(" !").startswith("1. "))
    assert "rank 3" in first and "'gemm'" in first, out
    assert orjson.loads((tmp_path / "r.json").read_bytes())["summary"]["world_size"] == 4
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    args = p.parse_args(["diff", str(g), str(f), "-q"])
    assert args.func(args) == 0
    assert "ktrace diff" in capsys.readouterr().out
    args = p.parse_args(["report", str(tmp_path / "missing.ktrace"), "-q"])
    assert args.func(args) == 2
    assert "no such capture file" in capsys.readouterr().err


def test_bad_input_gets_a_clear_error():
    from ktrace.analysis import AnalysisError

    with pytest.raises(AnalysisError, match="aligned"):
        Trace(events=np.zeros(3, [("rank", "<i4")]))
    with pytest.raises(AnalysisError):
        prepare(42)


def test_helpers_against_brute_force():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, 500), rng.integers(-3, 3, 500)
    inv, keys = group_index(a, b)
    for i, (x, y) in enumerate(keys.tolist()):
        assert set(np.flatnonzero(inv == i)) == set(np.flatnonzero((a == x) & (b == y)))
    v = rng.normal(size=500)
    med = group_median(inv, v, keys.shape[0])
    for i in range(keys.shape[0]):
        assert med[i] == pytest.approx(np.median(v[inv == i]))
    s = rng.integers(0, 1000, 200)
    e = s + rng.integers(0, 50, 200)
    cover = np.zeros(1100, bool)
    for x, y in zip(s, e):
        cover[x:y] = True
    ms, me = merge_intervals(s, e)
    assert (me - ms).sum() == cover.sum()
    s2 = rng.integers(0, 1000, 100)
    e2 = s2 + rng.integers(0, 80, 100)
    cover2 = np.zeros(1100, bool)
    for x, y in zip(s2, e2):
        cover2[x:y] = True
    assert intersect_length((ms, me), merge_intervals(s2, e2)) == (cover & cover2).sum()
    # a wait's enclosing region is the innermost span around it
    w = waits(prepare(CASES[0].load()))
    assert set(w["region"].tolist()) == {"recv"}


def test_timeout_flag_marks_waits():
    tr = prepare(CASES[3].load())
    w = waits(tr)
    assert w["timed_out"].sum() == int(((tr.column("kind") == EventKind.WAIT) & ((tr.column("flags") & EventFlag.TIMEOUT) != 0)).sum())
    assert np.isnan(w["producer_late_ns"][w["timed_out"]]).sum() == 0


def test_overlap_in_blocks_equals_one_sweep(monkeypatch):
    """Overlap sweeps blocks of whole (rank, launch) groups: any block size gives the same table,
    for every launch and for a sample of launches."""
    from ktrace.analysis import spans, timeline

    tr = prepare(scenario.build(scenario.Scenario(iters=3, late_rank=1, late_ns=D_SMALL, work={(0, 1): 3})))
    tr2 = prepare(scenario.replicate(tr.events, 5))
    whole = timeline.overlap(tr2)
    some = timeline.overlap(tr2, launches=[1, 3])
    assert whole.size == 5 * timeline.overlap(tr).size and set(some["launch"].tolist()) == {1, 3}
    for block in (1, 50, 997):  # one group a block (any block holds at least one), and others
        monkeypatch.setattr(spans, "BLOCK_EVENTS", block)
        assert timeline.overlap(tr2).tolist() == whole.tolist()
        assert timeline.overlap(tr2, launches=[1, 3]).tolist() == some.tolist()


def test_region_time_is_exact_and_takes_wide_region_ids():
    """region_time sums each workgroup's leaf spans and waits per region, a block of rows at a time
    (uint32 ns where the sums fit); a table whose region ids are wider than a capture's 24 bits
    gives the same matrix."""
    from ktrace.analysis import load, timeline

    t = scenario.build(scenario.Scenario(iters=3, late_rank=1, late_ns=D_SMALL, work={(0, 1): 3}))
    tr = prepare(t)
    m, rids = load.region_time(tr)
    rows = np.concatenate([timeline.leaf_spans(tr), tr.rows_of(EventKind.WAIT)])
    ref = np.zeros((tr.n_workgroups, rids.size))
    dur = tr.column("end_ns")[rows] - tr.column("start_ns")[rows]
    np.add.at(ref, (tr.wg[rows], np.searchsorted(rids, tr.column("region")[rows])), dur)
    assert m.dtype == np.uint32 and np.array_equal(m, ref)
    wide = t.copy()
    wide["region"] = wide["region"].astype(np.int64) + (1 << 30)
    old, load._BLOCK = load._BLOCK, 7  # (many blocks too)
    try:
        m2, rids2 = load.region_time(prepare(wide))
    finally:
        load._BLOCK = old
    assert np.array_equal(rids2, rids.astype(np.int64) + (1 << 30)) and np.array_equal(m2, m)
