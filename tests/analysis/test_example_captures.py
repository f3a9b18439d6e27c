"""The report on a real capture of ``examples/00_bring_your_own_kernel.py`` (2 x H200, rank 1 slow,
rank 0 launched late): what it would save, checked against the kernel's own logic.

The kernel (a ring all-gather of 2 ranks): each program stores its chunk, rank 1 spins 30 µs
(``--slow-rank 1``), stores into the next rank, notifies it, then waits for the previous rank's
notify. A host barrier releases each launch, so rank 0 starts 47 µs to 142 µs after rank 1 (see
``tests/fixtures/examples/README.md``). Started with rank 1, rank 0 would notify at once (rank
1's wait would find its flag set) and wait only for rank 1's chunk: each launch would last about
as long as rank 1's own work (its programs less their waits, which are all on rank 0) and a read
of a flag already set. The expected figures below come from the raw events (``claims.Raw``: the
one decode, nothing of ``ktrace.analysis``), never from the analysis under test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ktrace.analysis import build_report, report_json

from .claims import N, W, Raw

PATH = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "examples" / "ex00_slow_rank1_2xh200.ktrace"


@pytest.fixture(scope="module")
def doc():
    return report_json(build_report(str(PATH)))


@pytest.fixture(scope="module")
def raw(doc):
    return Raw(PATH, leave_out=doc["summary"].get("warmup_launches", []))


def test_rank_0_found_every_flag_set(raw):
    """What the prediction rests on: every wait of rank 0 began after rank 1 had notified every
    program of that launch (by 19 µs or more), so none of them saw a signal arrive."""
    for ln in np.unique(raw.launch).tolist():
        sent = raw.s[raw.sel(1, ln, kind=N)].max()
        began = raw.s[raw.sel(0, ln, kind=W)]
        assert began.size == 64 and began.min() - sent > 10_000, (ln, began.min() - sent)


def test_started_on_time_the_launches_last_as_long_as_rank_1s_own_work(doc, raw):
    f = doc["findings"][0]
    assert (f["kind"], f["data"]["rank"], f["severity"]) == ("late_launch", 0, "warning"), f["text"]
    launches = np.unique(raw.launch).tolist()
    assert f["data"]["n_launches"] == len(launches) == 7
    read_set = float(np.median((raw.t - raw.s)[raw.sel(0, kind=W)]))  # a wait on a flag already set
    want = 0.0
    for ln in launches:
        m = raw.launch == ln
        first, last = int(raw.s[m].min()), int(raw.t[m].max())
        on_time = 0
        for p in np.unique(raw.program[raw.sel(1, ln)]).tolist():
            prog = raw.sel(1, ln, p)
            waited = int((raw.t - raw.s)[prog & (raw.kind == W)].sum())
            on_time = max(on_time, int(raw.t[prog].max()) - first - waited)
        want += (last - first) - (on_time + read_set)
    # (about 52 µs a launch of 86 µs; before the replay told a flag found set from a signal seen
    # arriving, it predicted 3.2 µs: rank 0's waits were held to their observed ends)
    got = f["data"]["saving_ns"]
    assert abs(got - want) <= 0.10 * want, (got, want)
    assert f["data"]["saving_launches"] == 7


def test_no_slow_link_from_rank_1(doc):
    """Rank 0's waits found their flags set (above): no signal from rank 1 was seen on its way, so
    none is said to have been slow (its notify-to-end was up to 92 µs: rank 0's late start)."""
    slow = [f["text"] for f in doc["findings"] if f["kind"] == "slow_link" and f["data"]["rank"] == 1]
    assert not slow, slow
