"""The one-GPU scenario captures (``tests/fixtures/scenarios/w1_*``) hold what was injected.

Recorded on one H100 by ``tests/fixtures/record_gpus.sh 1 OUTDIR`` (the ``handoff`` kernel of
``tests/fixtures/pipeline_kernel.py``: producer and consumer programs of one rank). Each check
reads the raw events with numpy (not with the analyses the captures are made to test) and finds
the injected cause where its ``.scenario.json`` says it is: the program, the tiles, the size.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ktrace.analysis import prepare
from ktrace.schema import EventKind, is_timeout

SCEN = Path(__file__).resolve().parent / "fixtures" / "scenarios"
NAMES = ("handoff_healthy", "handoff_late_tiles", "handoff_heavy", "handoff_skip", "handoff_late_start",
         "counter_healthy", "counter_late")


def _info(name: str) -> dict:
    return json.loads((SCEN / f"w1_{name}.scenario.json").read_text())


def _trace(name: str):
    return prepare(SCEN / f"w1_{name}.ktrace")


def _rid(tr, name: str) -> int:
    return next(int(k) for k, v in tr.regions.items() if v == name)


def _held(ev: np.ndarray):
    """Per notify: how long its program was idle right before it (its previous record's end to
    its start, on the program's own clock), its program and its tile (the previous record, the
    ``send`` span, carries the tile)."""
    n = np.flatnonzero(ev["kind"][1:] == EventKind.NOTIFY) + 1
    same = ev["program"][n] == ev["program"][n - 1]
    n = n[same]
    return (ev["start_ns"][n] - ev["end_ns"][n - 1]).astype(np.int64), ev["program"][n], ev["arg0"][n - 1]


@pytest.mark.parametrize("name", NAMES)
def test_capture_is_small_one_rank_and_described(name):
    info = _info(name)
    assert (SCEN / f"w1_{name}.ktrace").stat().st_size <= 200_000
    assert info["world_size"] == 1 and info["device"].startswith("NVIDIA H100") and info["kernel"] == "handoff"
    tr = _trace(name)
    assert set(np.unique(tr.events["rank"]).tolist()) == {0}
    assert np.unique(tr.events["launch"]).size == info["launches"]
    assert set(np.unique(tr.events["program"]).tolist()) == set(range(info["programs"]))
    # the consumers' sums were checked against the host's after every complete launch
    assert all(e < 1e-5 for e in info["rel_err"]) and len(info["rel_err"]) == (0 if name == "handoff_skip" else info["launches"])


@pytest.mark.parametrize("name", ["handoff_late_tiles", "counter_late", "handoff_healthy", "counter_healthy"])
def test_held_notifies_are_the_injected_ones(name):
    info = _info(name)
    inj = info["injected"]
    gap, prog, tile = _held(_trace(name).events)
    late = gap > 10_000
    if inj["kind"] == "none":
        assert not late.any()
        return
    assert set(prog[late].tolist()) == set(inj["programs"]) and set(tile[late].tolist()) == set(inj["tiles"])
    assert late.sum() == info["launches"] * len(inj["tiles"]) * len(inj["programs"])
    assert abs(np.median(gap[late]) - inj["delay_ns"]) <= 0.02 * inj["delay_ns"]


def test_heavy_program_computes_longer_by_the_injected_time():
    inj = _info("handoff_heavy")["injected"]
    tr = _trace("handoff_heavy")
    ev = tr.events
    c = (ev["kind"] == EventKind.SPAN) & (ev["region"] == _rid(tr, "compute"))
    d = (ev["end_ns"] - ev["start_ns"])[c]
    heavy = ev["program"][c] == inj["program"]
    assert abs(np.median(d[heavy]) - np.median(d[~heavy]) - inj["extra_per_tile_ns"]) <= 0.05 * inj["extra_per_tile_ns"]


def test_late_program_starts_late_and_the_launch_ends_late_by_as_much():
    inj = _info("handoff_late_start")["injected"]
    late, healthy = _trace("handoff_late_start").events, _trace("handoff_healthy").events
    for ln in np.unique(late["launch"]):
        e = late[late["launch"] == ln]
        first = np.array([e["start_ns"][e["program"] == p].min() for p in range(8)]) - e["start_ns"].min()
        assert int(np.argmax(first)) == inj["program"]
        assert abs(first.max() - inj["injected_ns"]) <= 0.02 * inj["injected_ns"]
        assert np.sort(first)[-2] < 1_000  # every other program started within 1 µs
    span = lambda ev: np.array([ev["end_ns"][ev["launch"] == ln].max() - ev["start_ns"][ev["launch"] == ln].min()  # noqa: E731
                                for ln in np.unique(ev["launch"])], np.float64)
    assert abs(np.median(span(late)) - np.median(span(healthy)) - inj["injected_ns"]) <= 0.05 * inj["injected_ns"]


def test_skipped_notify_leaves_its_consumer_waiting_to_the_bound():
    info = _info("handoff_skip")
    inj = info["injected"]
    tr = _trace("handoff_skip")
    ev = tr.events
    w = ev[ev["kind"] == EventKind.WAIT]
    out = w[is_timeout(w["flags"])]
    assert out.size == info["launches"] and set(out["program"].tolist()) == {inj["program"]}
    assert np.allclose(out["end_ns"] - out["start_ns"], inj["injected_ns"], rtol=0.01)
    # the producer sent every tile but that one
    n = ev[(ev["kind"] == EventKind.NOTIFY) & (ev["program"] == inj["producer_program"])]
    assert n.size == info["launches"] * (info["tiles"] - 1)
    assert len(info["timeouts"]["0"]) == info["launches"]


@pytest.mark.parametrize("fan_in", [1, 3])
def test_handoff_kernel_compiles_for_sm90_with_its_probes(fan_in):
    """The recorded kernel as the script launches it compiles on the CPU (sm_90): a set flag
    (exchange) with one producer per consumer, an add-one counter with three."""
    pytest.importorskip("triton")
    from ktrace.testing.compile import CUDA_SM90, compile_asm
    from tests.fixtures import pipeline_kernel as K

    sig = {"src": "*fp32", "out": "*fp32", "recv": "*fp32", "flags": "*i32", "heap_bases": "*i64", "ktrace_buf": "*i64",
           **{k: "i32" for k in K.HANDOFF_INTS}}
    consts = dict(WORLD=1, FAN_IN=fan_in, BLOCK=1024, TIMEOUT_NS=5_000_000)
    traced = compile_asm(K.handoff, sig, dict(consts, KTRACE=100), CUDA_SM90, num_warps=4)
    plain = compile_asm(K.handoff, sig, dict(consts, KTRACE=0), CUDA_SM90, num_warps=4)
    assert ("atom.global.sys.release.add" if fan_in > 1 else "atom.global.sys.release.exch") in traced
    assert traced.count("%globaltimer") > plain.count("%globaltimer")
