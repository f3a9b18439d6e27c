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
    assert all(c["ok"] for c in b["ring_checks"].values()) and len(b["ring_checks"]) == 2
