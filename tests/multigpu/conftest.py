"""Fixtures of the multi-GPU tier: one process per rank, started by ``ktrace.testing.launch``.

    python -m ktrace.testing.launch -n 4 -- pytest -m multigpu tests/multigpu -q
"""

from __future__ import annotations

import logging
import os

import pytest


@pytest.fixture(scope="session")
def dist_env():
    if "RANK" not in os.environ or "MASTER_PORT" not in os.environ:
        pytest.skip("multi-GPU tests run under: python -m ktrace.testing.launch -n N -- pytest -m multigpu ...")
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
