"""Ranks as processes over gloo on this machine, for the CPU tests of multi-rank code.

A rank's body is ``target(rank, world, port, q, *args)``: it calls :func:`init`, does its work
into a dict ``out`` (with ``"rank"``, and ``"error"`` holding the traceback of anything it
raised), and ends with :func:`finish`. :func:`spawn` starts the ranks and returns their dicts.
"""

from __future__ import annotations

import logging
import os

import torch.multiprocessing as mp

from ktrace.launch import free_port


def init(rank: int, world: int, port: int) -> None:
    """Join the gloo process group of ``world`` ranks at ``127.0.0.1:port`` (no run id given:
    ktrace agrees on one through the group's store)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    os.environ.pop("KTRACE_RUN_ID", None)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def finish(out: dict, q) -> None:
    """Hand ``out`` to the parent and end this process at once (no teardown of a process group
    one of whose ranks may be gone)."""
    q.put(out)
    q.close()
    q.join_thread()  # (the queue's writer thread must finish before the process ends)
    logging.shutdown()
    os._exit(0)


def spawn(target, world: int, *args, timeout_s: float) -> dict:
    """Run ``target`` on ``world`` spawned ranks; each rank's ``out`` by rank. Fails on the
    first rank that reports an error (with its traceback); a rank that reports nothing within
    ``timeout_s`` fails the caller (``queue.Empty``), and every process is gone on return."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=target, args=(r, world, port, q) + args) for r in range(world)]
    for p in procs:
        p.start()
    outs = {}
    try:
        for _ in procs:
            o = q.get(timeout=timeout_s)
            outs[o["rank"]] = o
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    for o in outs.values():
        assert "error" not in o, f"rank {o['rank']}:\n{o['error']}"
    return outs
