"""``ktrace.dist_env``: where a rank sits, read from torchrun's or Slurm's environment (no torch)."""

from __future__ import annotations

import pytest

from ktrace.dist_env import (
    SAFE_ENV,
    RankEnv,
    apply_safe_env,
    device_index,
    export_torch_env,
    first_host,
    rank_env,
    slurm_port,
)

TORCHRUN = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "head",
            "MASTER_PORT": "29500", "GROUP_RANK": "1"}
SRUN = {"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "2",
        "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_NODELIST": "gpu[07-09]", "SLURM_JOB_ID": "123456"}


def test_no_launcher_is_one_process():
    assert rank_env({}) is None
    assert rank_env({"SLURM_JOB_ID": "1", "PATH": "/bin"}) is None  # in an allocation, but no task


def test_torchrun():
    assert rank_env(TORCHRUN) == RankEnv(5, 8, 1, "head", 29500, "torchrun")


def test_srun_task():
    re = rank_env(SRUN)
    assert re == RankEnv(6, 8, 2, "gpu07", slurm_port(123456), "slurm")
    assert re.master_port == 15000 + 123456 % 10000
    # MASTER_ADDR / MASTER_PORT set by the user win over the derived ones
    assert rank_env({**SRUN, "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "23456"}).master_addr == "10.1.2.3"
    assert rank_env({**SRUN, "MASTER_PORT": "23456"}).master_port == 23456
    # the step's task count wins over the job's (srun -n 2 inside a 8-task job)
    assert rank_env({**SRUN, "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"}).world_size == 2
    # SLURM_NTASKS alone, and the job's node list when the step's is missing
    only = {k: v for k, v in SRUN.items() if k not in ("SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST")}
    assert rank_env(only) == RankEnv(6, 8, 2, "gpu07", slurm_port(123456), "slurm")


def test_torchrun_under_srun_takes_torchruns_ranks():
    # srun starts one torchrun per node: SLURM_PROCID is the node, RANK the worker
    both = {**SRUN, "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", **TORCHRUN}
    assert rank_env(both) == RankEnv(5, 8, 1, "head", 29500, "torchrun")


@pytest.mark.parametrize("env, message", [
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
    ({"RANK": "0"}, "RANK is set but WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE is set but RANK is not"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, r"rank 2 is not in 0\.\.1"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "0"}, "port must be in 1..65535"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "two"}, "SLURM_NTASKS='two' is not an integer"),
    ({**SRUN, "SLURM_STEP_NODELIST": "gpu[07-08"}, "cannot read the Slurm host list"),
])
def test_malformed_environment_is_one_clear_line(env, message):
    with pytest.raises(ValueError, match=message):
        rank_env(env)


@pytest.mark.parametrize("nodes, host", [
    ("node7", "node7"),
    ("a,b,c", "a"),
    ("gpu[03-04,07],cpu1", "gpu03"),
    ("gpu[12,3-4]", "gpu12"),
    ("rack[1-2]-n[01-08]", "rack1-n01"),
    ("login-[002-004].cluster", "login-002.cluster"),
])
def test_first_host_of_a_slurm_host_list(nodes, host):
    assert first_host(nodes) == host


@pytest.mark.parametrize("nodes", ["", "gpu[1-2", "gpu]1[", "gpu[]"])
def test_bad_host_lists_are_refused(nodes):
    with pytest.raises(ValueError):
        first_host(nodes)


def test_export_fills_what_env_init_reads_without_overriding():
    env = {"MASTER_PORT": "1234"}
    export_torch_env(RankEnv(3, 4, 1, "gpu07", 15000, "slurm"), env)
    assert env == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "gpu07", "MASTER_PORT": "1234"}
    env = {}
    export_torch_env(RankEnv(0, 1, 0), env)
    assert "MASTER_ADDR" not in env and env["RANK"] == "0"


def test_device_index():
    assert device_index(RankEnv(5, 8, 1), 4) == 1
    assert device_index(RankEnv(5, 8, 1), 0) is None
    assert device_index(RankEnv(6, 8, 2, launcher="slurm"), 1) == 0  # srun --gpus-per-task=1
    with pytest.raises(RuntimeError, match="LOCAL_RANK 2 but only 1 GPUs are visible"):
        device_index(RankEnv(2, 4, 2), 1)  # two torchrun workers would share a GPU


def test_safe_env_keeps_multicast_off_unless_chosen():
    env = {"NCCL_NVLS_ENABLE": "1"}
    apply_safe_env(env)
    assert env == {**SAFE_ENV, "NCCL_NVLS_ENABLE": "1"}
    assert SAFE_ENV == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def test_session_and_heap_read_the_same_environment(monkeypatch):
    from ktrace import session
    from ktrace.shmem import SAFE_ENV as heap_safe_env

    assert heap_safe_env is SAFE_ENV
    for k in list(TORCHRUN) + list(SRUN):
        monkeypatch.delenv(k, raising=False)
    assert session._dist_rank_world() == (0, 1)
    for k, v in SRUN.items():
        monkeypatch.setenv(k, v)
    assert session._dist_rank_world() == (6, 8)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert session._dist_rank_world() == (2, 3)
