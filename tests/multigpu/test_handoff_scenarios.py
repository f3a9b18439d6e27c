"""The hand-off scenarios (``tests/fixtures/make_scenario_captures.py ... handoff``) recorded at
N ranks (``KTRACE_TEST_NPROC``, default 2), as the ``w<N>_*`` fixtures would be: each records what
was injected, and every completed wait pairs with its notify. They start their own ranks (through
torchrun), so run them directly::

    KTRACE_TEST_NPROC=4 python -m pytest -m multigpu tests/multigpu/test_handoff_scenarios.py -q

(The one-GPU captures ``w1_*`` were recorded by the same script: ``tests/test_scenario_captures_w1.py``.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Ranks the scenarios are recorded at.
NPROC = int(os.environ.get("KTRACE_TEST_NPROC", "2"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from ktrace.dist_env import rank_env

    if rank_env() is not None:
        pytest.skip("this test starts its own ranks (through torchrun): run it without ktrace.testing.launch")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < NPROC:
        pytest.skip(f"needs {NPROC} GPUs")
    out = tmp_path_factory.mktemp(f"w{NPROC}")
    cmd = [sys.executable, "-m", "ktrace.testing.launch", "-n", str(NPROC), "--timeout", "240", "--", sys.executable, "-m",
           "tests.fixtures.make_scenario_captures", str(out), "handoff"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return out


@pytest.mark.multigpu
@pytest.mark.parametrize("name", ["handoff_healthy", "handoff_late_tiles", "handoff_heavy", "handoff_skip",
                                  "handoff_late_start", "counter_healthy", "counter_late"])
def test_handoff_pairs_every_completed_wait(recorded, name):
    from ktrace.captures import read_capture
    from ktrace.events import aligned_events
    from ktrace.pairing import pair_table
    from ktrace.schema import EventKind, is_timeout

    ev = aligned_events(read_capture(recorded / f"w{NPROC}_{name}.ktrace"))
    info = json.loads((recorded / f"w{NPROC}_{name}.scenario.json").read_text())
    assert info["world_size"] == NPROC and set(np.unique(ev["rank"]).tolist()) == set(range(NPROC))
    n, w, _, un_w = pair_table(ev)
    wait = ev["kind"] == EventKind.WAIT
    timed_out = int((wait & is_timeout(ev["flags"])).sum())
    assert un_w == 0 and w.size == int(wait.sum()) - timed_out
    assert timed_out == (info["launches"] if name == "handoff_skip" else 0)
    # producers of rank r feed the consumers of the next rank (itself at one rank)
    assert ((ev["rank"][n] + 1) % NPROC == ev["rank"][w]).all()
    if name == "counter_late":
        inj = info["injected"]
        late = (ev["rank"][w] == inj["consumer_rank"]) & (ev["program"][w] == inj["consumer_program"])
        assert inj["program"] in set(ev["program"][n][late].tolist()) and set(ev["rank"][n][late].tolist()) == {inj["rank"]}
