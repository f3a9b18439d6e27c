"""The flight recorder on a GPU (``-m gpu``): ``tests/gpu/flight_gpu.py --role hang`` in a child
process group killed at its time limit (a spinning kernel must never outlive the test)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = Path(__file__).with_name("flight_gpu.py")


@pytest.mark.parametrize("placement", ["pinned", "device"])
def test_hung_kernel_is_dumped_by_the_watchdog_and_on_signal_then_released(tmp_path, placement):
    stall_s = 3.0
    p = subprocess.Popen([sys.executable, str(SCRIPT), "--role", "hang", "--out", str(tmp_path), "--stall-s", str(stall_s),
                          "--placement", placement],
                         start_new_session=True)
    try:
        assert p.wait(timeout=150) == 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["watchdog"]["reason"] == "watchdog" and s["watchdog"]["open_waits"] == s["progs"] - 1
    assert max(s["watchdog"]["waited_s_at_dump"]) <= stall_s + 2.0
    assert s["signal"]["reason"] == "signal" and s["signal"]["still_running"] and s["signal"]["open_waits"] == s["progs"] - 1
    assert s["released"] and s["child_rc"] == 0 and not s.get("killed")
    first = s["report_first_line"]
    assert first.startswith(f"HUNG at the dump (watchdog): rank 0 programs 1-{s['progs'] - 1} wait on flag ")
    assert "from rank 0 program 0, which never sent it" in first


def test_ring_mode_cost_and_ring_contents(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--role", "bench", "--out", str(tmp_path), "--reps", "20"],
                       timeout=300, start_new_session=True)
    assert r.returncode == 0
    b = json.loads((tmp_path / "bench.json").read_text())
    # every ring the bench ran was checked: in device and in pinned host memory, records stored by
    # each probe and deferred (as @ktrace.trace prepares a kernel)
    rings = {"ring (device memory)", "ring (pinned host memory)"}
    assert set(b["ring_checks"]) == rings | {f"{n}, deferred" for n in rings}
    assert all(c["ok"] for c in b["ring_checks"].values())


def test_streaming_a_persistent_kernel_counts_every_record(tmp_path):
    """66 M records in 5 s drained while written: each taken record is its own, and every lane's
    taken + lost is what it wrote (the drain's ceiling is in BENCHMARKS.md: records above it are
    lost, and counted)."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--role", "stream", "--out", str(tmp_path)], timeout=120,
                       start_new_session=True)
    assert r.returncode == 0
    s = json.loads((tmp_path / "stream.json").read_text())
    assert s["events_written"] == 66_000_000 and s["kernel_done"] == s["iters"]
    assert s["rows_not_their_record"] == 0 and s["every_lane_whole"] and s["rows_spilled"] + s["lost"] == s["events_written"]
    assert s["maxrss_mib_after"] - s["maxrss_mib_before"] < 512  # bounded: the records went to disk
