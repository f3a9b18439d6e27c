"""Multi-GPU tier: a rank that dies mid-run (killed, or its code raises) holds no other rank
past its bound; the others write what they recorded, and the gathered capture is marked partial
with the missing rank named.

These start their own N ranks (``KTRACE_TEST_NPROC``, default 2; ``tests/multigpu/_rank_death_worker.py``;
the last one is meant to fail) as plain processes given the rank environment, as Slurm's ``srun``
starts tasks (which by default lets the other tasks run on when one dies). Under torchrun the
question does not arise: its agent stops every rank at the first failure. Run them directly, not
under the launcher::

    KTRACE_TEST_NPROC=4 python -m pytest -m multigpu tests/multigpu/test_rank_death.py -q
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.multigpu

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "_rank_death_worker.py"
#: Ranks started (the last one dies).
NPROC = int(os.environ.get("KTRACE_TEST_NPROC", "2"))


def _gpus() -> None:
    if "RANK" in os.environ or "LOCAL_RANK" in os.environ:
        pytest.skip("this test starts its own ranks: run it without ktrace.testing.launch")
    torch = pytest.importorskip("torch")
    if NPROC < 2:
        pytest.skip("a rank must die and another see it: KTRACE_TEST_NPROC >= 2")
    if not torch.cuda.is_available() or torch.cuda.device_count() < NPROC:
        pytest.skip(f"needs {NPROC} GPUs")


@pytest.mark.parametrize("mode", ["killed", "raises"])
def test_a_dead_rank_leaves_a_partial_capture_naming_it(tmp_path, monkeypatch, capsys, mode):
    from ktrace.captures import read_capture
    from ktrace.cli import main
    import subprocess

    from ktrace.launch import free_port
    from ktrace.text import ranges_text

    _gpus()
    N, dead = NPROC, NPROC - 1
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), WORLD_SIZE=str(N),
               LOCAL_WORLD_SIZE=str(N), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(tmp_path), mode], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(N)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=420)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    took = time.monotonic() - t0
    summary = "\n".join(f"--- rank {r} (exit {p.returncode}):\n" + o[-3000:] for r, (p, o) in enumerate(zip(procs, outs)))
    print(summary)
    assert all(p.returncode == 0 for p in procs[:dead]), summary
    assert procs[dead].returncode == (-9 if mode == "killed" else 1), summary
    out = json.loads((tmp_path / "rank0.json").read_text())
    # not held up by the dead rank (its bound: 60 s at each edge of the capture and in gather)
    assert out["left_s"] < 30 and out["gather_s"] < 30, out
    why = "did not arrive (its process is gone)" if mode == "killed" else "left with an error"
    assert any(n.startswith(f"closing clock calibration not run: rank {dead} {why}") and
               n.endswith("alignment kept: the opening calibration's (offset only, no drift)") for n in out["notes"]), out
    # its own timed-out wait, kept in its capture and in heap.check()
    assert out["timeouts"]["count"] == 1 and out["timeouts"]["waits"][0]["peer"] == dead, out
    assert out["check"] and "rank 0, program 0 waited on flag 'death.flag'[0]" in out["check"], out
    own = read_capture(tmp_path / "rank0.ktrace")
    assert sorted(own.ranks) == [0] and own.ranks[0].launches and own.ranks[0].timeouts["count"] == 1
    merged = read_capture(tmp_path / "merged.ktrace")
    assert sorted(merged.ranks) == list(range(dead)) and merged.partial and merged.missing_ranks == [dead]
    assert any(f"rank {dead} did not arrive (its process is gone)" in n for n in merged.notes), merged.notes
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "rank0.ktrace"), "-o", str(tmp_path / "again.ktrace")]) == 0
    # (rank 0's capture alone: every other rank is missing from it)
    assert f"PARTIAL: ranks {ranges_text(range(1, N))} missing" in capsys.readouterr().out
    assert main(["report", "-q", str(tmp_path / "merged.ktrace")]) == 0
    text = capsys.readouterr().out
    assert f"the capture is partial (ranks [{dead}] missing)" in text and "(PARTIAL)" in text, text
    assert took < 400
