"""Multi-GPU tier: a capture survives its kernel's faults.

A kernel launched inside ``ktrace.capture(heap=heap)`` with one notify never sent: its bounded
wait gives up, and then leaving the ``with`` block raises nothing (the closing clock calibration
used to fail on the kernel's timeout, still in the heap's error block, and then cleared it), the
capture keeps the timed-out wait, ``heap.check()`` still reports it, both calibrations ran, and
the report of the gathered capture names the hang.

    python -m ktrace.testing.launch -n 2 -- python -m pytest -m multigpu tests/multigpu/test_capture_faults.py -q

(Rank 0 skips one notify to rank 1, so this needs two ranks; more work too.)
"""

from __future__ import annotations

import re
import time

import pytest
import torch

import ktrace
from ktrace.clock.calibrate import CalibrationConfig
from ktrace.schema import EventFlag, EventKind
from ktrace.shmem import WaitTimeoutError

# the missing-notify kernel (a gate of world-size phases, then one notify and one short bounded
# wait per program) and the verdict gathering of the heap's own tier
from test_shmem_multigpu import _all_ok, traced_missing

pytestmark = pytest.mark.multigpu

PROGRAMS = 8
VICTIM = 5  # rank 0 never notifies rank 1's program 5
TIMEOUT_NS = 20_000_000


def test_a_skipped_notify_inside_a_capture_with_a_heap_is_kept_and_reported(heap):
    r, w = heap.rank, heap.world_size
    if w < 2:
        pytest.skip("needs two ranks")
    nxt, prv = (r + 1) % w, (r - 1) % w
    flags = heap.zeros(PROGRAMS, dtype=torch.int32, name="fault.flags")
    gate = heap.zeros(PROGRAMS, dtype=torch.int32, name="fault.gate")
    heap.clear_timeouts()
    heap.barrier()
    # compile the traced variant on every rank first, every notify sent (-1: no program skips)
    with ktrace.capture():
        traced_missing[(PROGRAMS,)](flags, gate, r, nxt, prv, w, heap.bases, -1, TIMEOUT_NS=TIMEOUT_NS)
    heap.barrier()
    heap.check()
    flags.zero_()
    gate.zero_()
    heap.barrier()

    skip = VICTIM if r == 0 else -1
    t0 = time.perf_counter()
    with ktrace.capture(heap=heap, calibration=CalibrationConfig(rounds=500, anchor_repeats=8)) as cap:
        traced_missing[(PROGRAMS,)](flags, gate, r, nxt, prv, w, heap.bases, skip, TIMEOUT_NS=TIMEOUT_NS)
    left_s = time.perf_counter() - t0  # (leaving raised nothing: this line ran)
    errs = []
    rc = cap.to_capture().ranks[r]
    if rc.notes:
        errs.append(f"notes: {rc.notes}")
    if r != 0:  # the ping-pong samples of both calibrations (the reference rank measures, keeps none)
        phases = {s["phase"] for s in rc.clock_samples["pingpong"]}
        if phases != {"before", "after"}:
            errs.append(f"calibration phases kept: {sorted(phases)}")
    ev = cap.events()
    timed_out = ev[(ev["kind"] == EventKind.WAIT) & ((ev["flags"] & int(EventFlag.TIMEOUT)) != 0)]
    if r == 1:
        t = (rc.timeouts or {}).get("waits") or [{}]
        if rc.timeouts is None or rc.timeouts["count"] != 1 or (t[0].get("program"), t[0].get("peer")) != (VICTIM, 0):
            errs.append(f"capture's timeouts: {rc.timeouts}")
        if len(timed_out) != 1 or int(timed_out[0]["program"]) != VICTIM:
            errs.append(f"TIMEOUT wait events: {timed_out[['program', 'arg0']].tolist()}")
        try:
            heap.check()
            errs.append("heap.check() saw no timeout after the capture")
        except WaitTimeoutError as e:
            if f"rank 1, program {VICTIM} waited on flag 'fault.flags'[{VICTIM}]" not in str(e):
                errs.append(f"heap.check() said {e}")
    else:
        if rc.timeouts != {"count": 0, "waits": []} or len(timed_out):
            errs.append(f"timeouts on rank {r}: {rc.timeouts}, {len(timed_out)} TIMEOUT events")
        try:
            heap.check()
        except WaitTimeoutError as e:
            errs.append(f"heap.check(): {e}")
    if left_s > 60:
        errs.append(f"the capture took {left_s:.1f} s")
    merged = cap.gather(dst=0)
    if r == 0:
        from ktrace.analysis import build_report
        from viewers.text import render_text
        from ktrace.clock import clock_model_of

        model = clock_model_of(merged)
        if merged.partial or not all(c.method == "pingpong+drift" for q, c in model.ranks.items() if q != model.reference_rank):
            errs.append(f"merged: partial {merged.partial}, clock {model.method}")
        text = render_text(build_report(merged))
        print(text)
        if not re.search(rf"HANG: rank 1 program {VICTIM} .* from rank 0 .*rank 0 never sent it", text):
            errs.append("the report names no hang of rank 1's program on rank 0")
    _all_ok(heap, not errs, "; ".join(errs))
