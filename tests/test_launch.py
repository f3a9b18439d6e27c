"""The launcher (``ktrace.launch``) on the CPU: the torchrun command it builds, its rank
wrapper alone, and real launches through torchrun with trivial Python ranks: ranks start and
meet over gloo through ``ktrace.shmem.init_distributed`` (the capture API's own set-up), the
failing rank is named with its error and the tail of its log, time limits fire, and torchrun
failing on its own is reported. Slurm's ``srun`` is stood in for by two plain processes with its
environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ktrace import launch as L

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


# ---------------------------------------------------------------------------------------------
# the command line, without starting anything
# ---------------------------------------------------------------------------------------------


def test_torchrun_command_on_one_node():
    cfg = L.LaunchConfig(command=("pytest", "-m", "multigpu", "tests/multigpu"), nprocs=2, timeout_s=300)
    cmd = L.torchrun_command(cfg, "/logs", "abc")
    assert cmd == [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
        "--max-restarts", "0", "--monitor-interval", "0.5", "--module", "ktrace.launch",
        "--rank-wrapper", "--launch-id", "abc", "--timeout", "300", "--log-dir", "/logs", "--tail", "20", "--",
        sys.executable, "-m", "pytest", "-m", "multigpu", "tests/multigpu",
    ]
    # torchrun's own parser reads it as we mean it
    from torch.distributed.run import parse_args

    a = parse_args(cmd[3:])
    assert (a.nproc_per_node, a.standalone, a.max_restarts, a.module, a.training_script) == ("2", True, 0, True,
                                                                                          "ktrace.launch")
    assert a.training_script_args[:2] == ["--rank-wrapper", "--launch-id"]


def test_torchrun_command_passes_multi_node_options_through():
    r = L.Rendezvous(nnodes=2, node_rank=1, rdzv_backend="c10d", rdzv_endpoint="head:29500", rdzv_id="job7")
    cmd = L.torchrun_command(L.LaunchConfig(("python", "x.py"), 4, rendezvous=r), "/l", "id")
    i = cmd.index("--nproc-per-node")
    assert cmd[i : i + 12] == ["--nproc-per-node", "4", "--nnodes", "2", "--node-rank", "1", "--rdzv-backend", "c10d",
                               "--rdzv-endpoint", "head:29500", "--rdzv-id", "job7"]
    assert "--standalone" not in cmd
    static = L.Rendezvous(nnodes=2, node_rank=0, master_addr="10.0.0.1", master_port=29500)
    assert static.torchrun_args() == ["--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "29500"]
    from torch.distributed.run import parse_args

    a = parse_args(L.torchrun_command(L.LaunchConfig(("python", "x.py"), 4, rendezvous=r), "/l", "id")[3:])
    assert (a.nnodes, a.node_rank, a.rdzv_backend, a.rdzv_endpoint, a.rdzv_id) == ("2", 1, "c10d", "head:29500", "job7")


@pytest.mark.parametrize("kwargs, message", [
    ({"nnodes": 2}, "--nnodes 2 needs a rendezvous every node can reach"),
    ({"nnodes": 0}, "--nnodes must be a positive int"),
    ({"nnodes": 2, "rdzv_endpoint": "h:1", "node_rank": 2}, "--node-rank 2 is not among the 2 node(s)"),
    ({"master_addr": "h", "master_port": 70000}, "--master-port must be in 1..65535"),
    ({"rdzv_endpoint": "a b"}, "is empty or holds a space"),
])
def test_rendezvous_is_checked(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        L.Rendezvous(**kwargs)


def test_launch_config_is_checked():
    with pytest.raises(ValueError, match="no command"):
        L.LaunchConfig((), 2)
    with pytest.raises(ValueError, match="nprocs"):
        L.LaunchConfig(("python",), 0)
    with pytest.raises(ValueError, match="positive"):
        L.LaunchConfig(("python",), 1, timeout_s=0)


# ---------------------------------------------------------------------------------------------
# one rank's wrapper, alone (what torchrun starts per rank)
# ---------------------------------------------------------------------------------------------


def _wrapper(tmp_path, timeout, script, env=None):
    cmd = [sys.executable, "-m", "ktrace.launch", "--rank-wrapper", "--launch-id", "t1", "--timeout", str(timeout),
           "--log-dir", str(tmp_path), "--", sys.executable, "-c", textwrap.dedent(script)]
    return subprocess.run(cmd, env={**ENV, "RANK": "3", "LOCAL_RANK": "1", **(env or {})}, capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_rank_wrapper_prefixes_logs_and_reports(tmp_path):
    err = tmp_path / "error.json"
    err.write_text(json.dumps({"message": {"message": "ValueError: bad shape\nmore", "extraInfo": {}}}))
    r = _wrapper(tmp_path, 30, "import sys; print('one'); print('two', flush=True); sys.exit(5)",
                 {"TORCHELASTIC_ERROR_FILE": str(err)})
    assert r.returncode == 5
    assert r.stdout.splitlines() == ["[rank 3] one", "[rank 3] two"]
    assert (tmp_path / "rank3.log").read_text() == "one\ntwo\n"
    s = json.loads((tmp_path / "rank3.json").read_text())
    assert (s["launch"], s["rank"], s["local_rank"], s["status"], s["returncode"]) == ("t1", 3, 1, "failed", 5)
    assert s["error"] == "ValueError: bad shape" and s["tail"] == ["one", "two"]


def test_rank_wrapper_stops_its_command_at_the_deadline(tmp_path):
    r = _wrapper(tmp_path, 1, "import time; print('hanging', flush=True); time.sleep(60)")
    assert r.returncode == L.EXIT_TIMEOUT
    s = json.loads((tmp_path / "rank3.json").read_text())
    assert s["status"] == "timeout" and s["seconds"] < 20 and s["tail"] == ["hanging"]


# ---------------------------------------------------------------------------------------------
# real launches through torchrun (CPU ranks)
# ---------------------------------------------------------------------------------------------


def _launch(args, script, timeout=180):
    cmd = [sys.executable, "-m", "ktrace.launch", *args, "--", "python", "-c", textwrap.dedent(script)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV, cwd=ROOT)


def test_launcher_starts_ranks_that_meet_through_the_capture_api(tmp_path):
    r = _launch(
        ["-n", "3", "--log-dir", str(tmp_path)],
        """
        import os
        import torch
        import torch.distributed as dist
        import ktrace
        from ktrace.shmem import init_distributed

        rank, world = init_distributed()          # gloo on a CPU: the ranks really meet
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t)
        with ktrace.capture() as cap:             # the capture API, unchanged, under torchrun
            pass
        print("env", rank, world, os.environ["LOCAL_RANK"], int(t.item()), cap.rank, cap.world_size,
              os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"], os.environ["NCCL_NVLS_ENABLE"], os.environ["NVSHMEM_DISABLE_NVLS"])
        dist.destroy_process_group()
        """,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    fields = sorted(ln.split() for ln in r.stdout.splitlines() if " env " in ln)
    # "[rank", "r]", "env", rank, world, local, sum, cap.rank, cap.world, 3 x multicast off
    assert [f[1] for f in fields] == ["0]", "1]", "2]"]
    assert all(f[3] == f[1][0] == f[5] == f[7] and f[4] == f[8] == "3" and f[6] == "6" for f in fields), fields
    assert all(f[9:] == ["1", "0", "1"] for f in fields)
    assert "ALL RANKS PASSED" in r.stdout and "through torchrun" in r.stdout
    assert "torch.distributed.run" in (tmp_path / "torchrun.log").read_text().splitlines()[0]


def test_each_ranks_line_gives_its_pytest_counts(tmp_path):
    """A pytest run per rank (as the multi-GPU tier runs): each rank's line carries its counts,
    which differ by rank here (rank 1 skips one test)."""
    (tmp_path / "test_ranked.py").write_text(textwrap.dedent("""
        import os, pytest

        def test_a():
            pass

        def test_b():
            if os.environ["RANK"] == "1":
                pytest.skip("not on rank 1")
    """))
    cmd = [sys.executable, "-m", "ktrace.launch", "-n", "2", "--", "python", "-m", "pytest", "-q", "-p",
           "no:cacheprovider", str(tmp_path / "test_ranked.py")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=ENV, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0: passed (2 passed)" in r.stdout and "rank 1: passed (1 passed, 1 skipped)" in r.stdout, r.stdout
    assert L.outcome_counts(["x", "=== 1 failed, 3 passed, 2 warnings in 0.5s (0:00:00) ==="]) == "1 failed, 3 passed, 2 warnings"
    assert L.outcome_counts(["passed in spirit"]) == ""


def test_launcher_names_the_failing_rank_and_stops_the_others():
    r = _launch(
        ["-n", "2"],
        """
        import os, sys, time
        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            if os.environ["RANK"] == "1":
                print("rank one gives up", flush=True)
                raise ValueError("boom on rank one")
            time.sleep(120)

        main()
        """,
    )
    assert r.returncode == 1
    assert "rank 1: FAILED with exit status 1 (ValueError: boom on rank one)" in r.stdout, r.stdout
    assert "rank 0: stopped after another rank failed" in r.stdout
    assert "rank one gives up" in r.stdout.split("--- rank 1")[1]
    assert r.stdout.strip().splitlines()[-1] == "FAILED: rank 1 (failed), rank 0 (stopped)"


def test_launcher_times_out_hung_ranks(tmp_path):
    r = _launch(["-n", "2", "--timeout", "2", "--log-dir", str(tmp_path)],
                "import time; print('hanging', flush=True); time.sleep(120)")
    assert r.returncode == 1
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("FAILED: rank ") and "(timeout)" in last, r.stdout
    assert "TIMED OUT" in r.stdout and all(f"rank {k} (" in last for k in (0, 1))
    assert (tmp_path / "rank1.log").read_text().strip() == "hanging"


def test_launcher_reports_torchrun_failing_on_its_own():
    r = _launch(["-n", "1", "--rdzv-backend", "no-such-backend", "--rdzv-endpoint", "localhost:1", "--timeout", "30",
                 "--startup", "60"], "print('never')")
    assert r.returncode == 1
    assert "torchrun: FAILED with exit status" in r.stdout and "no-such-backend" in r.stdout, r.stdout[-3000:]
    assert "[rank 0] never" not in r.stdout


def test_launcher_rejects_missing_command_and_lone_nodes():
    r = subprocess.run([sys.executable, "-m", "ktrace.testing.launch", "-n", "2"], capture_output=True, text=True, env=ENV)
    assert r.returncode == 2 and "no command" in r.stderr
    r = subprocess.run([sys.executable, "-m", "ktrace.launch", "-n", "2", "--nnodes", "2", "--", "python", "x.py"],
                       capture_output=True, text=True, env=ENV)
    assert r.returncode == 2 and "needs a rendezvous" in r.stderr


# ---------------------------------------------------------------------------------------------
# Slurm: what srun gives its tasks, without srun
# ---------------------------------------------------------------------------------------------


def test_slurm_tasks_meet_through_the_capture_api(tmp_path):
    script = textwrap.dedent(
        """
        import os
        import torch
        import torch.distributed as dist
        import ktrace
        from ktrace.shmem import init_distributed

        rank, world = init_distributed()
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t)
        with ktrace.capture() as cap:
            pass
        print(rank, world, int(t.item()), cap.rank, cap.world_size, os.environ["RANK"], os.environ["MASTER_ADDR"], flush=True)
        dist.destroy_process_group()
        """
    )
    base = {k: v for k, v in ENV.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    port = str(L.free_port())
    procs = [
        subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**base, "SLURM_PROCID": str(r), "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2",
                              "SLURM_LOCALID": str(r), "SLURM_STEP_NODELIST": "localhost", "SLURM_JOB_ID": "4242",
                              "MASTER_PORT": port})
        for r in range(2)
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert [o.strip().splitlines()[-1].split() for o in outs] == [
        ["0", "2", "3", "0", "2", "0", "localhost"], ["1", "2", "3", "1", "2", "1", "localhost"]]
