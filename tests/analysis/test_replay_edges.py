"""The replay model on captures the scenario tests do not cover (CONSTRUCTED, written out here).

An all-reduce whose flags are set by nothing the capture holds (its waits have no notify) made
``ktrace run all_reduce`` fail in the report on 2 x H200: pricing a cause on some launches took a
sub-model, and the sub-model's notify index was empty.
"""

from __future__ import annotations

import numpy as np

from ktrace.analysis import build_report, prepare
from ktrace.analysis.causes import replay_model
from ktrace.captures import Capture, Launch, RankCapture
from ktrace.captures.synth import encode_buffer, event_table
from ktrace.schema import Cmp, EventKind, region_id


def _waits_without_notifies(heavy_launch: int = 1, n: int = 8, launches: int = 3) -> Capture:
    """Two ranks, ``launches`` launches of ``n`` programs: each works, then waits (>= 1) on a flag
    of the other rank that no captured notify sets; rank 1 program 3 works 5 µs longer in
    launch ``heavy_launch`` only."""
    ranks = {}
    for r in range(2):
        lns = []
        for k in range(launches):
            ev = event_table(2 * n)
            for p in range(n):
                extra = 5000 if (r, p, k) == (1, 3, heavy_launch) else 0
                t = k * 100_000
                rows = {2 * p: dict(program=p, kind=EventKind.SPAN, region=region_id("work"), start=t + 100, end=t + 1000 + extra),
                        2 * p + 1: dict(program=p, kind=EventKind.WAIT, region=region_id("wait"), start=t + 1100 + extra,
                                        end=t + 3000 + extra, arg0=1 - r, arg2=64 * p, arg4=1, arg5=int(Cmp.GE))}
                for i, fields in rows.items():
                    for name, v in fields.items():
                        ev[name][i] = v
            lns.append(Launch(k, "k", (n, 1, 1), 4, encode_buffer(ev, grid=(n, 1, 1), capacity=4)))
        ranks[r] = RankCapture(rank=r, launches=lns)
    return Capture(world_size=2, ranks=ranks, regions={region_id("work"): "work", region_id("wait"): "wait"})


def test_a_model_without_notifies_takes_a_subset_of_its_launches():
    m = replay_model(prepare(_waits_without_notifies()))
    assert m.n_waits == 48 and m.n_wg.size == 0  # (no notify at all)
    sub = m.take(np.array([1]))
    assert sub.launch_ids.tolist() == [1] and sub.n_waits == 16


def test_the_report_prices_a_cause_of_one_launch_when_no_wait_has_a_notify():
    rep = build_report(_waits_without_notifies())
    uneven = [f for f in rep.findings if f.kind == "uneven_work"]
    assert uneven and "rank 1 program 3" in uneven[0].text and "1 of 3 launches" in uneven[0].text, [f.text for f in rep.findings]
