"""Fixtures of the multi-GPU tier: one pytest per rank, started through torchrun by
``ktrace.testing.launch`` (which times every rank out and names the one that failed)::

    python -m ktrace.testing.launch -n 2 -- python -m pytest -m multigpu tests/multigpu tests/kernels -q

Plain ``torchrun --nproc-per-node 2 -m pytest ...`` or ``srun -n 2 python -m pytest ...`` start
the same ranks (without the time limit and the per-rank verdict).
"""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(scope="session")
def dist_env():
    from ktrace.dist_env import rank_env

    if rank_env() is None:
        pytest.skip("multi-GPU tests run under: python -m ktrace.testing.launch -n N -- python -m pytest -m multigpu ...")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from ktrace.shmem import init_distributed

    rank, world = init_distributed()
    logging.basicConfig(level=logging.INFO, format=f"[rank {rank}] %(levelname)s %(name)s: %(message)s")
    yield rank, world
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture(scope="session")
def heap(dist_env):
    from ktrace.shmem import SymmetricHeap

    h = SymmetricHeap(256 << 20)
    yield h
    h.barrier()
