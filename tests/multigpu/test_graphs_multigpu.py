"""Multi-GPU tier: a traced all-to-all captured into a CUDA graph on every rank and replayed.

examples/08's tile all-to-all (its round read from device memory) over the symmetric heap:
warmed up, captured with ``torch.cuda.graph``, replayed 200 times without any host
synchronisation between replays (the ranks pace each other through the heap's flags), taken
every 100; the last rank's program 1 holds back its notifies of tiles 2-5 by 60 µs in replays
50-59. Calibrated over the heap before and after (outside the graph).

    python -m ktrace.testing.launch -n 2 -- python -m pytest -m multigpu tests/multigpu/test_graphs_multigpu.py -q
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.multigpu
ROOT = Path(__file__).resolve().parents[2]


def _example08():
    name = "ktrace_example_08"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "08_cuda_graph_replays.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def test_replayed_all_to_all_every_replay_a_launch_paired_aligned_and_reported(heap, dist_env, tmp_path):
    from ktrace.analysis import build_report
    from ktrace.captures import read_capture
    from ktrace.clock import check_causality, clock_model_of
    from ktrace.events import aligned_events

    rank, world = dist_env
    if world < 2:
        pytest.skip("needs two ranks")
    ex = _example08()
    faults = ex.Faults(slow_rank=world - 1, slow_prog=1, slow_from=52, slow_to=62, slow_ns=60_000, slow_mask=0b111100)
    # drained at the end only: a drain in the middle blocks each host until its GPU has caught up
    # and then reads the ring, and the replay after it leaves one host later than the other (on 2 x
    # H200: rank 1's replay 100 started 2.79 ms late, rightly the report's first finding)
    info = ex.record(tmp_path, replays=200, drain_every=0, faults=faults, heap=heap)
    g = info["graphs"][0]
    assert info["output_ok"] and (g["replays"], g["recorded"], g["overwritten"], g["torn"]) == (200, 200, 0, 0), info
    heap.check()  # no wait timed out on any rank
    if rank != 0:
        return
    cap = read_capture(info["capture"])
    assert sorted(cap.ranks) == list(range(world)) and not cap.partial
    ev = cap.events()
    for r, rc in cap.ranks.items():
        assert [ln.meta["graph"]["replay"] for ln in rc.launches] == list(range(200)), r
        mine = ev[ev["rank"] == r]
        firsts = [int(mine["start"][mine["launch"] == ln.index].min()) for ln in rc.launches]
        assert all(np.diff(firsts) > 0), r
    model = clock_model_of(cap)
    assert model.aligned
    rep = check_causality(aligned_events(cap, model), model)
    assert rep.timeouts == 0 and rep.unmatched_waits == 0 and rep.n_violations == 0, rep.summary()
    report = build_report(info["capture"])
    f = report.findings[0]
    assert f.kind == "late_notifies" and f.data["rank"] == world - 1 and f.data["programs"] == [1], f.text
    named = {x for cl in f.claims for x in cl.values.get("launches", [])}
    assert named and named <= set(range(50, 60)), (named, f.text)
