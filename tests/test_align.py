"""The launch barrier (``ktrace.shmem.align``) and ``ktrace run``'s start skew, on the CPU.

The barrier kernel is compiled for sm_90 and gfx942 and its assembly checked (what it reads and
writes, and nothing else); the start skew is measured on real captures whose skew is known (the
late-launch scenario: rank 1 held back 300 µs before each launch) and checked against the
aligned event table; the report leaves out launches a capture says a device barrier released.
Running the barrier needs GPUs: ``tests/multigpu/test_align_multigpu.py``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
LATE = ROOT / "tests" / "fixtures" / "scenarios" / "late_launch.ktrace"
A2A = ROOT / "ktrace" / "data" / "a2a_skewed_4xh200.ktrace"


def _asm(target: str, world: int) -> str:
    import triton

    from ktrace.shmem.align import align_kernel
    from ktrace.testing.compile import TARGETS, compile_asm

    sig = {"table": "*i64", "gate": "*i32", "status": "*i32", "rank": "i32", "epoch": "i32"}
    const = {"WORLD": world, "WP": triton.next_power_of_2(world), "HOLD_NS": 200_000, "TIMEOUT_NS": 60_000_000_000}
    return compile_asm(align_kernel, sig, const, TARGETS[target], num_warps=1)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_barrier_compiles_for_sm90_and_touches_only_its_words(world):
    pytest.importorskip("triton")
    ptx = _asm("sm_90", world)
    # arrive: one release exchange at system scope per rank, issued by WORLD threads at once
    xchg = re.findall(r"@%p\d+ atom\.global\.sys\.release\.exch\.b32", ptx)
    assert len(xchg) == 1, xchg
    # the gate (host memory) and the words: acquire reads at system scope; the timer bounds both
    assert len(re.findall(r"ld\.acquire\.sys\.global\.b32", ptx)) >= 2
    assert "%globaltimer" in ptx
    # nothing else is written: no plain store, no other atomic than the two status counters
    assert not re.search(r"\bst\.global", ptx)
    assert len(re.findall(r"atom\.global\.gpu\.relaxed\.add\.u32", ptx)) == 2
    assert len(re.findall(r"\batom\.", ptx)) == 3
    # one warp, no CTA barrier needed
    assert "bar.sync" not in ptx


def test_the_barrier_compiles_for_gfx942():
    pytest.importorskip("triton")
    asm = _asm("gfx942", 4)
    assert "global_atomic_swap" in asm and "s_memrealtime" in asm
    assert "buffer_inv sc0 sc1" in asm  # the acquire at system scope


def test_start_skew_finds_the_injected_late_launch():
    """Rank 1 of this 2 x H200 capture spun 300 µs before each of its 4 launches."""
    from ktrace import run
    from ktrace.captures import read_capture

    info = json.loads(LATE.with_suffix(".scenario.json").read_text())
    inj = info["injected"]
    rows = run.start_skew(read_capture(LATE))
    assert [r["kernel"] for r in rows] == [info["kernel"]]
    (r,) = rows
    assert r["launches"] == list(range(info["launches"])) and r["last_rank"] == inj["rank"] and r["released"] is None
    sk = np.array(r["skew_ns"])
    assert np.all(sk >= inj["injected_ns"]) and np.all(sk < inj["injected_ns"] + 5_000), sk
    text = run.skew_text(rows)
    assert f"{info['kernel']}: 4 launches: max {sk.max() / 1e3:.1f} µs" in text


def test_start_skew_is_the_first_event_of_each_rank_on_the_common_clock():
    """The per-batch reduction agrees with the aligned event table, launch by launch."""
    from ktrace import run
    from ktrace.captures import read_capture
    from ktrace.events import aligned_events

    cap = read_capture(A2A)
    ev = aligned_events(cap)
    rows = run.start_skew(cap)
    assert {r["kernel"] for r in rows} == {"moe_dispatch", "moe_combine"}
    for r in rows:
        for li, s in zip(r["launches"], r["skew_ns"]):
            sel = ev["launch"] == li
            firsts = [ev["start_ns"][sel & (ev["rank"] == q)].min() for q in np.unique(ev["rank"][sel])]
            assert len(firsts) == cap.world_size and s == max(firsts) - min(firsts)


def test_the_capture_says_how_its_steps_were_released():
    from ktrace import run
    from ktrace.captures import read_capture

    cap = read_capture(A2A)
    # (the bundled capture's meta, told the launch of each kernel's first launch was released by
    # a barrier: the rows say so per kernel)
    cap.meta["launch_alignment"] = run.launch_alignment(True, [0], [{"released_by_hold": 0, "missed": 0}] * 4)
    got = {r["kernel"]: r["released"] for r in run.start_skew(cap)}
    first = min(cap.ranks[0].launches, key=lambda ln: ln.index).kernel
    other = ({"moe_dispatch", "moe_combine"} - {first}).pop()
    assert got == {first: "device barrier", other: "queued"}
    text = run.skew_text(run.start_skew(cap), 1000.0)
    assert "released by a device barrier" in text and "queued behind the launch before it" in text
    assert "clocks aligned within ~1.0 µs" in text
    assert run.launch_alignment(False, [0, 2], [None, None]) == {"method": "host barrier", "launches": [0, 2]}


def test_report_skew_adds_the_rows_to_run_json(tmp_path):
    from ktrace import run

    cap = tmp_path / "k.ktrace"
    shutil.copy(LATE, cap)
    (tmp_path / "run.json").write_text(json.dumps({"kernel": "tile_pipeline", "world_size": 2}))
    text = run.report_skew(cap, tmp_path / "run.json")
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["kernel"] == "tile_pipeline" and info["start_skew"][0]["last_rank"] == 1
    assert info["launch_alignment"] is None  # (a capture ktrace run did not make: it does not say)
    assert text.startswith("Start skew") and "tile_pipeline: 4 launches" in text
    # no run.json (a node that did not hold rank 0, or a capture copied by hand): printed only
    assert run.report_skew(cap, tmp_path / "none.json") == text and not (tmp_path / "none.json").exists()


def test_a_launch_a_device_barrier_released_is_not_a_late_launch():
    """The late-launch scenario (real capture) blames rank 1; told that a device barrier released
    those launches (its meta edited here, as ``ktrace run`` would write it), the report does not:
    the skew is then ktrace's, not the program's. A host barrier changes nothing."""
    from ktrace import run
    from ktrace.analysis import build_report
    from ktrace.captures import read_capture

    def kinds(meta):
        cap = read_capture(LATE)
        if meta is not None:
            cap.meta["launch_alignment"] = meta
        return [f.kind for f in build_report(cap).findings]

    assert "late_launch" in kinds(None)
    assert "late_launch" in kinds(run.launch_alignment(False, [0, 1, 2, 3], [None, None]))
    assert "late_launch" not in kinds(run.launch_alignment(True, [0, 1, 2, 3], [{"released_by_hold": 0, "missed": 0}] * 2))
    assert "late_launch" in kinds(run.launch_alignment(True, [0, 1], [{"released_by_hold": 0, "missed": 0}] * 2))


def test_run_takes_no_align(monkeypatch):
    import argparse

    from ktrace import run

    p = argparse.ArgumentParser()
    run.register(p.add_subparsers(dest="cmd"))
    on = run.config_from_args(p.parse_args(["run", "all_to_all", "--nproc", "2"]))
    off = run.config_from_args(p.parse_args(["run", "all_to_all", "--nproc", "2", "--no-align"]))
    assert on.align and not off.align
    assert run.RunConfig.from_json(off.to_json()) == off


def test_importing_the_barrier_module_through_the_package_is_lazy():
    import subprocess
    import sys

    code = ("import sys, ktrace.shmem as s; assert 'ktrace.shmem.align' not in sys.modules; "
            "assert 'align_launch' in s.__all__ and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
