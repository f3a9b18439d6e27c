"""The replay's prediction of an injected delay (``ktrace.analysis.verify``), against the answer
known by construction: GENERATED captures (``ktrace.captures.generate``, labelled so in their
metadata) of a cause, simulated again with that cause larger by the delay.

The GPU side (the delay injected for real, the kernel timed) is ``scripts/gpu_cost.sh``'s.
"""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ktrace.analysis import verify as V
from ktrace.analysis.causes.model import replay, replay_model
from ktrace.analysis.report import build_report
from ktrace.captures import generate as G

DELAY_NS = 10_000
#: Real captures of `ktrace run` (``tests/fixtures/runs``).
RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
#: What each cause is injected as, at its culprit.
WHERE = {"held": "notify", "straggler": "region", "late_launch": "launch"}


def _durations(shape, inj, seed) -> np.ndarray:
    return np.array([d for _, _, d in G.simulate(shape, inj, seed)], np.float64)


def _cases(kind: str, n: int = 4):
    """Up to ``n`` drawn cases of ``kind`` made to hold the cause in every round and launch (a
    delay injected at a call site acts on every notify there): (shape, cause, seed)."""
    out = []
    for seed in range(40):
        try:
            case = G.draw(seed, kind)
        except ValueError:  # (a shape that cannot hold this cause)
            continue
        s, inj = case.shape, case.injected
        # an all-to-all's straggler counts rounds per notify, not per round of work; per-lane agents
        # are not injected into
        if s.pattern == "gluon" or inj.lane >= 0 or (kind == "straggler" and s.pattern == "a2a"):
            continue
        out.append((s, replace(inj, rounds=tuple(range(100_000)) if inj.rounds else (), launches=tuple(range(s.launches))), seed))
        if len(out) == n:
            break
    return out


@pytest.mark.parametrize("kind", sorted(WHERE))
def test_prediction_matches_the_simulated_truth(kind):
    checked = 0
    for shape, inj, seed in _cases(kind):
        rep = build_report(G.build(shape, inj, seed).capture)
        plan = V.plan(rep, (DELAY_NS, 2 * DELAY_NS))
        if plan is None:  # (the report names no cause of a kind a delay is injected for)
            continue
        assert (plan.rank, plan.where) == (inj.rank, WHERE[kind]), plan
        judged = slice(1 if shape.cold > 1 else 0, None)  # (the report leaves a cold first launch out)
        for size, predicted in zip(plan.sizes_ns, plan.predicted_ns):
            truth = float(np.mean((_durations(shape, replace(inj, magnitude_ns=inj.magnitude_ns + size), seed)
                                   - _durations(shape, inj, seed))[judged]))
            assert truth > 0
            assert abs(predicted - truth) <= 0.05 * truth, (seed, shape.pattern, size, predicted, truth)
        checked += 1
    assert checked >= 2


def test_default_sizes_grow_with_the_launch():
    rep = build_report(G.build(*_cases("held", 1)[0]).capture)
    sizes = V.default_sizes(rep)
    assert len(sizes) == 3 and sizes[0] >= 2_000 and sizes[0] < sizes[1] < sizes[2] and all(s % 100 == 0 for s in sizes)


def test_no_plan_for_a_hang():
    case = G.draw(next(s for s in range(40) if G.draw(s).injected.kind == "hang"))
    rep = build_report(case.capture)
    assert rep.findings[0].kind == "hang"
    plan = V.plan(rep)
    assert plan is None or plan.kind != "hang"


def test_a_plan_for_a_region_of_a_kernel_that_sends_no_notify():
    """A real capture (``ktrace run all_reduce --nproc 1 --delay 0:20`` on an H200,
    ``tests/fixtures/runs/all_reduce_1xh200_delay.ktrace``): at one rank the one-shot all-reduce
    notifies nobody, so the region's spans have no notify to hold; the plan delays the region's
    stretch up to the program's end. (It raised IndexError on the empty notify table before.)"""
    path = RUNS / "all_reduce_1xh200_delay.ktrace"
    rep = build_report(path)
    assert rep.trace.world_size == 1
    plan = V.plan(rep)
    assert plan is not None and plan.where == "region"
    # one program's tail grows by the delay: a launch grows by it at most, and by most of it here
    assert all(0.9 * s <= p <= s for s, p in zip(plan.sizes_ns, plan.predicted_ns)), plan


def test_a_step_of_two_kernels_counts_each_kernel_as_a_step_runs_it():
    """A real capture and its measurement (``ktrace run all_to_all --nproc 1 --delay 0:20 --verify
    --steps 4`` on an H200, ``tests/fixtures/runs/all_to_all_1xh200_delay.ktrace``; the capture
    keeps the run's ``verify`` rows): 4 steps of (dispatch, combine), the first dispatch left out as
    warm-up. A delay in every program's ``send`` (dispatch only) lengthens each dispatch by itself
    in the replay; the GPU measures a step's added time over its 2 launches. A plain mean over the
    7 launches analysed (3 dispatches) was 14 % short of every measurement; weighed by the
    kernels' shares of the capture's launches (4 and 4), each prediction is inside its measured
    interval."""
    path = RUNS / "all_to_all_1xh200_delay.ktrace"
    rep = build_report(path)
    tr = rep.trace
    assert rep.summary.warmup_launches == [0] and tr.left_out == {(0, 0): "moe_dispatch"}
    rows = rep.summary.measured["verify"]
    assert len(rows) == 3 and {r["site"] for r in rows} == {"send"}
    plan = V.plan(rep, tuple(r["delay_ns"] for r in rows))
    assert (plan.where, plan.site, plan.rank, plan.programs) == ("region", "send", 0, ())
    m = replay_model(tr)
    w = V.launch_weights(tr, m.launch_ids)
    kern = np.array([tr.kernels[(0, int(ln))] for ln in m.launch_ids])
    assert np.allclose(w[kern == "moe_dispatch"], 1 / 6) and np.allclose(w[kern == "moe_combine"], 1 / 8)
    base = replay(m).makespan
    for r, predicted in zip(rows, plan.predicted_ns):
        added = replay(m, V.changes(tr, m, "region", "send", 0, (), r["delay_ns"])).makespan - base
        # the mechanism: each dispatch longer by the delay, no combine longer
        assert np.allclose(added[kern == "moe_dispatch"], r["delay_ns"]) and not added[kern == "moe_combine"].any()
        assert float(np.mean(added)) < r["lo_ns"], r  # the plain mean: short of the interval
        assert r["lo_ns"] <= predicted <= r["hi_ns"], (predicted, r)


def test_launch_weights_are_a_mean_for_one_kernel():
    """One kernel, its first launch left out as warm-up: each analysed launch weighs alike."""
    path = RUNS / "all_reduce_1xh200_delay.ktrace"
    rep = build_report(path)
    tr = rep.trace
    assert tr.left_out and set(tr.left_out.values()) == set(tr.kernels.values())
    ids = np.unique(tr.wg_keys[:, 1])
    assert np.allclose(V.launch_weights(tr, ids), 1 / ids.size)
