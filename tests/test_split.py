"""Traces that stay openable: selections, and a 64-rank capture split into parts with an index.

The capture is CONSTRUCTED (``ktrace.captures.synth``: 64 ranks, 6 launches each). Every part
must load in Perfetto's own trace processor with no error and hold what the index says (ranks,
launches, time range on the whole capture's time base, events, arrows); the part a finding
falls in is the one ``ktrace open INDEX --finding N`` opens.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ktrace.links import link_range
from ktrace.captures import write_capture
from ktrace.captures.synth import constructed_capture, replicated
from ktrace.cli import main
from ktrace.clock import attach_clock
from ktrace.export.split import parse_ints, parse_window, part_for, plan_parts, read_index, select, write_split
from ktrace.testing.perfetto import unavailable_reason

REASON = unavailable_reason()


@pytest.fixture(scope="module")
def cap64():
    cap, _ = constructed_capture(world_size=64, programs=8, iters=2, seed=5, round_trips=200)
    cap = replicated(cap, 6)
    attach_clock(cap)
    return cap


def test_selection_arguments():
    assert parse_ints("0-3,7,2") == [0, 1, 2, 3, 7] and parse_ints(None) is None
    assert parse_window("1.5:20") == (1500, 20000)
    for bad in ("3-1", "x", ",", "-2"):
        with pytest.raises(ValueError):
            parse_ints(bad)
    with pytest.raises(ValueError, match="end must come after"):
        parse_window("5:5")


def test_select_keeps_ranks_launches_and_windows(cap64):
    s = select(cap64, ranks=[1, 2, 99], launches=[0, 5])
    assert sorted(s.ranks) == [1, 2] and [ln.index for ln in s.ranks[1].launches] == [0, 5]
    assert s.meta["selection"]["ranks"] == [1, 2]
    # a window of the third launch's time (launches are ~13.7 µs apart here) keeps launch 2 only
    w = select(cap64, window=(27_600, 29_000))
    assert {ln.index for rc in w.ranks.values() for ln in rc.launches} == {2} and len(w.ranks) == 64
    with pytest.raises(ValueError, match="keeps no launch"):
        select(cap64, launches=[99])


def test_parts_are_runs_of_launches_then_groups_of_ranks(cap64):
    parts = plan_parts(cap64, budget_events=10**9)
    assert parts == [(list(range(64)), [0, 1, 2, 3, 4, 5])]
    parts = plan_parts(cap64, budget_events=3000)  # one launch index alone holds more: ranks in groups
    assert all(len(ls) == 1 for _, ls in parts) and sorted({li for _, ls in parts for li in ls}) == list(range(6))
    for li in range(6):
        assert sorted(r for rs, ls in parts if ls == [li] for r in rs) == list(range(64))


@pytest.mark.skipif(REASON is not None, reason=f"Perfetto's trace processor cannot run here: {REASON}")
def test_a_64_rank_capture_splits_into_parts_that_each_load(cap64, tmp_path):
    from ktrace.testing.perfetto import TraceProcessorHost

    budget = 600_000
    idx = write_split(cap64, tmp_path / "t.pftrace", "perfetto", part_bytes=budget)
    doc, parts = read_index(idx)
    assert doc["time_base"] == "ns since the capture's first event" and len(parts) >= 3
    assert sorted({(r, li) for p in parts for r in p.ranks for li in p.launches}) == [(r, li) for r in range(64) for li in range(6)]
    total_events = sum(ln.decode(r).events.size for r, rc in cap64.ranks.items() for ln in rc.launches)
    assert sum(p.events for p in parts) == total_events  # nothing lost, nothing twice
    with TraceProcessorHost() as tp:
        for p in parts:
            assert p.bytes <= budget * 1.05  # (the budget is met from an estimate of bytes per event)
            t = tp.load(p.file)
            try:
                assert t.problems() == []
                procs = [int(x["name"].split()[1]) for x in t.query("select name from process where name glob 'rank *' order by pid")]
                assert procs == p.ranks
                assert t.scalar("select count(*) from flow") == p.flows > 0
                lo, hi = t.scalar("select min(ts) from slice"), t.scalar("select max(ts + dur) from slice")
                assert (lo, hi) == (p.start_ns, p.end_ns)  # on the whole capture's time base
            finally:
                t.close()
    # the part of a range: by time and ranks
    mid = parts[len(parts) // 2]
    assert part_for(parts, mid.start_ns + 10, mid.start_ns + 20, [mid.ranks[-1]]) is mid


def test_cli_merge_splits_and_open_finds_the_part(cap64, tmp_path, capsys):
    src = write_capture(tmp_path / "c64.ktrace", cap64)
    out = tmp_path / "m.pftrace"
    assert main(["merge", str(src), "-o", str(out), "--part-mb", "0.6"]) == 0
    said = capsys.readouterr()
    assert "parts" in said.out and "writing it in parts" in said.err
    idx = tmp_path / "m.pftrace.index.json"
    _, parts = read_index(idx)
    assert main(["merge", str(src), "-o", str(tmp_path / "sel.json"), "--ranks", "0-3", "--launches", "2"]) == 0
    assert "ranks 0-3 of 64, 1 launch," in capsys.readouterr().out  # (launch 2, on each of 4 ranks)
    # a report's finding in the middle of the capture, on the last ranks: the part that holds it opens
    mid = parts[len(parts) // 2 + 1]
    f = {"kind": "straggler", "text": "a finding", "start_ns": mid.start_ns + 100, "end_ns": mid.start_ns + 900, "ranks": [mid.ranks[-1]]}
    rep = tmp_path / "r.json"
    rep.write_bytes(orjson.dumps({"format": "ktrace-report", "summary": {"trace_end_ns": parts[-1].end_ns}, "findings": [f]}))
    capsys.readouterr()
    assert main(["open", str(idx), "--report", str(rep), "--finding", "1", "--no-browser", "--timeout", "0.2", "--port", "0",
                 "--online"]) == 1  # (nothing fetched it)
    first = capsys.readouterr().out.splitlines()[0]
    want = part_for(parts, *link_range(f["start_ns"], f["end_ns"]), f["ranks"])
    assert want is mid and f"opening {Path(want.file).name}" in first
