"""Real multi-rank captures recorded on 4 H200s, shipped with the package (ktrace/data/a2a_*_4xh200.ktrace,
remade by ``python -m ktrace.testing.launch -n 4 -- python -m tests.fixtures.make_kernel_captures OUT``
and copied over the same names): the clock model they carry, causality after alignment, and
both trace formats read back. What each capture injected is in its ``.scenario.json``."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ktrace.clock import check_causality, clock_model_of
from ktrace.events import aligned_events
from ktrace.captures import read_capture
from ktrace.export import write_chrome_json, write_perfetto
from ktrace.schema import EventFlag, EventKind

FIXTURES = Path(__file__).parents[1] / "ktrace" / "data"
NAMES = ["a2a_skewed", "a2a_delay20us", "a2a_delay200us", "a2a_skip"]


def _load(name):
    path = FIXTURES / f"{name}_4xh200.ktrace"
    if not path.exists():
        pytest.fail(f"missing fixture {path}: remake it with tests/fixtures/make_kernel_captures.py")
    return read_capture(path), json.loads((FIXTURES / f"{name}_4xh200.scenario.json").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_fixture_is_small_and_real(name):
    cap, sc = _load(name)
    assert (FIXTURES / f"{name}_4xh200.ktrace").stat().st_size <= 200_000
    assert sc["world_size"] == cap.world_size == 4 and sorted(cap.ranks) == [0, 1, 2, 3] and not cap.partial
    assert all("H200" in rc.device["name"] for rc in cap.ranks.values())
    assert {ln.kernel for rc in cap.ranks.values() for ln in rc.launches} == {"moe_dispatch", "moe_combine"}


@pytest.mark.parametrize("name", NAMES)
def test_clock_model_and_causality(name):
    cap, sc = _load(name)
    model = clock_model_of(cap)
    assert model.aligned and model.anchor == "host"
    others = [rc for r, rc in model.ranks.items() if r != model.reference_rank]
    assert all(rc.method == "pingpong+drift" for rc in others)
    assert max(rc.residual_ns for rc in others) <= 100.0
    ev = aligned_events(cap, model)
    rep = check_causality(ev, model)
    assert rep.n_pairs > 1000 and rep.n_violations == 0, rep.summary()
    if sc["fault"]["skip_rank"] < 0:
        assert rep.timeouts == 0 and rep.unmatched_waits == 0
    else:
        assert rep.timeouts >= 1


def _perfetto(path):
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    t = Trace()
    t.ParseFromString(path.read_bytes())
    tracks, kinds, flows_out, flows_in = {}, Counter(), set(), set()
    for p in t.packet:
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if p.HasField("track_event"):
            te = p.track_event
            kinds[te.type] += 1
            flows_out.update(te.flow_ids)
            flows_in.update(te.terminating_flow_ids)
    return tracks, kinds, flows_out, flows_in, TrackEvent


def test_real_capture_reads_back_in_both_formats(tmp_path):
    cap, _ = _load("a2a_skewed")
    ev = aligned_events(cap)
    rep = check_causality(ev, clock_model_of(cap))
    n_counters = int((ev["kind"] == EventKind.COUNTER).sum())
    n_slices = len(ev) - n_counters
    n_kernels = sum(len(rc.launches) for rc in cap.ranks.values())
    from ktrace.export.plan import plan_trace

    n_marks = plan_trace(cap).flows.n_markers  # where the arrows of waits with a duration end
    assert n_marks > 0

    tracks, kinds, fo, fi, TE = _perfetto(write_perfetto(cap, tmp_path / "t.pftrace"))
    procs = sorted(td.process.pid for td in tracks.values() if td.HasField("process"))
    assert procs == [1, 2, 3, 4]
    assert kinds[TE.TYPE_SLICE_BEGIN] + kinds[TE.TYPE_INSTANT] == n_slices + n_kernels + n_marks
    assert kinds[TE.TYPE_SLICE_END] == kinds[TE.TYPE_SLICE_BEGIN]
    assert fo == fi and len(fo) == rep.n_pairs  # one flow arrow per notify -> wait pair

    out = write_chrome_json(cap, tmp_path / "t.json.gz")
    with gzip.open(out, "rb") as f:
        d = json.loads(f.read())
    assert d["otherData"]["acquired_marks"] == n_marks
    evs = [e for e in d["traceEvents"] if e["ph"] != "M" and e.get("name") != "acquired"]
    assert {e["pid"] for e in evs} == {1, 2, 3, 4}
    assert sum(1 for e in evs if e.get("cat") != "kernel") == len(ev)
    assert d["otherData"]["flows"] == rep.n_pairs
    waits = [e for e in evs if e.get("cat", "").startswith("wait")]
    assert len(waits) == int((ev["kind"] == EventKind.WAIT).sum())
    timeouts = int(((ev["kind"] == EventKind.WAIT) & ((ev["flags"] & int(EventFlag.TIMEOUT)) != 0)).sum())
    assert timeouts == 0
    # ns survive the float µs: rebased timestamps reproduce the aligned ones exactly
    base = d["otherData"]["base_ns"]
    got = np.sort(np.array([round(e["ts"] * 1000) for e in evs if e.get("cat") != "kernel"], dtype=np.int64))
    assert np.array_equal(got, np.sort(ev["start_ns"] - base))
