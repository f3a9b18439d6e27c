"""Live dumps of several ranks merged keep what made each rank's dump.

The dump: the real one-rank live dump of ``tests/fixtures/flight_dump_h100.ktrace`` (H100, its
watchdog's). The two-rank capture below is CONSTRUCTED from it: the same rank again as rank 1,
said to have dumped on a signal (as ``ktrace dump`` makes a rank whose kernels ended dump), the
way ``tests/multigpu/test_flight_multigpu.py`` merges two ranks' real dumps on two GPUs.
"""

from __future__ import annotations

import copy
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "flight_dump_h100.ktrace"


def _two_ranks(reason0: str, reason1: str):
    from ktrace.captures import Capture, read_capture

    cap = read_capture(FIXTURE)
    rc0 = cap.ranks[0]
    rc1 = copy.deepcopy(rc0)
    rc1.rank = 1
    for rc, why in ((rc0, reason0), (rc1, reason1)):
        for ln in rc.launches:
            ln.meta["live"]["reason"] = why
    return Capture(world_size=2, ranks={0: rc0, 1: rc1}, regions=cap.regions, run_id=cap.run_id, meta=dict(cap.meta))


def test_each_ranks_reason_is_named_when_they_differ():
    from ktrace.analysis.live import live_report

    rep = live_report(_two_ranks("watchdog", "signal"))
    assert rep.headline.startswith("HUNG at the dump (rank 0: watchdog; rank 1: signal): ")
    assert live_report(_two_ranks("watchdog", "watchdog")).headline.startswith("HUNG at the dump (watchdog): ")


def test_a_dump_without_reasons_per_launch_reads_the_captures():
    from ktrace.analysis.live import live_report
    from ktrace.captures import read_capture

    cap = read_capture(FIXTURE)  # (recorded before launches carried the reason)
    assert all("reason" not in ln.meta["live"] for ln in cap.ranks[0].launches)
    assert live_report(cap).headline.startswith(f"HUNG at the dump ({cap.meta['live']['reason']}): ")
