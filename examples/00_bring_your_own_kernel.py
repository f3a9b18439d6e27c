"""00 - A ring all-gather in plain Triton over torch symmetric memory: a kernel that knows nothing of ktrace.

This file imports nothing from ktrace. Run it as you would any program; trace it, without
changing a line, by putting ``ktrace record --`` in front::

    python examples/00_bring_your_own_kernel.py                                      # one GPU
    torchrun --nproc-per-node 4 examples/00_bring_your_own_kernel.py                 # as written
    ktrace record -- torchrun --nproc-per-node 4 examples/00_bring_your_own_kernel.py
    ktrace record -- torchrun --nproc-per-node 4 examples/00_bring_your_own_kernel.py --slow-rank 2

``ktrace record`` traces every ``@triton.jit`` kernel the ranks launch from its own source: the
program and each step of the ring as spans, the ``while tl.load(flag, volatile=True) < epoch``
spin as a wait on that flag, the ``tl.atomic_xchg(..., sem="release", scope="sys")`` to the next
rank's flag as a notify, with the addresses they touched. It finds where torch symmetric memory
maps each rank's buffers, pairs every wait with the notify that released it across ranks, puts
the ranks on one clock and writes the trace and the report into ``ktrace-record/``. With
``--slow-rank 2`` that rank's programs hold back every chunk they forward by ``--delay-us``.
This program releases its launches by a host barrier, so the ranks' launches leave tens of µs
apart: recorded on 2 x H200 with ``--slow-rank 1``, rank 0 started 47-142 µs after rank 1, more
than rank 1's 30 µs hold, and the report's first finding was that late launch ("rank 0 launched
late ... 51.9 µs shorter per launch"), true by the events. A hold well beyond that skew
(``--delay-us 300``) is meant to put the slow rank first; that run has not been made yet. (One GPU works too: a ring of one rank has
nothing to pass on, so its kernel only copies its own chunk.)
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
import triton
import triton.language as tl


@triton.jit
def _spin_ns(ns):
    start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    now = start
    while now - start < ns:
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit(do_not_specialize=["rank", "epoch", "slow_rank", "delay_ns"])
def ring_all_gather(x, out_ptrs, flag_ptrs, rank, world, epoch, slow_rank, delay_ns, N: tl.constexpr, BLOCK: tl.constexpr):
    """Every rank ends with every rank's ``x`` in ``out[world, N]``: at step s it forwards chunk
    (rank - s) to the next rank, then waits for chunk (rank - 1 - s) from the previous one."""
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    nxt = (rank + 1) % world
    my_out = tl.load(out_ptrs + rank).to(tl.pointer_type(tl.float32))
    next_out = tl.load(out_ptrs + nxt).to(tl.pointer_type(tl.float32))
    my_flags = tl.load(flag_ptrs + rank).to(tl.pointer_type(tl.int32))
    next_flags = tl.load(flag_ptrs + nxt).to(tl.pointer_type(tl.int32))
    tl.store(my_out + rank * N + offs, tl.load(x + offs, mask=mask), mask=mask)
    for s in range(world - 1):
        chunk = (rank - s + world) % world
        data = tl.load(my_out + chunk * N + offs, mask=mask)
        if rank == slow_rank:
            _spin_ns(delay_ns)
        tl.store(next_out + chunk * N + offs, data, mask=mask)
        tl.debug_barrier()
        tl.atomic_xchg(next_flags + s * progs + pid, epoch, sem="release", scope="sys")
        while tl.load(my_flags + s * progs + pid, volatile=True) < epoch:
            pass
        tl.atomic_add(my_flags + s * progs + pid, 0, sem="acquire", scope="sys")


def symmetric(n: int, dtype, group: str):
    """A tensor in symmetric memory, and where each rank's copy is mapped here (int64, on the GPU)."""
    t = symm_mem.empty(n, dtype=dtype, device="cuda")
    hdl = symm_mem.rendezvous(t, group)
    off = t.data_ptr() - int(hdl.buffer_ptrs[dist.get_rank()])
    return t, torch.tensor([int(p) + off for p in hdl.buffer_ptrs], dtype=torch.int64, device="cuda")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 16, help="elements per rank")
    ap.add_argument("--steps", type=int, default=8, help="launches")
    ap.add_argument("--slow-rank", type=int, default=-1, help="this rank forwards every chunk late")
    ap.add_argument("--delay-us", type=float, default=30.0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("00_bring_your_own_kernel.py needs a GPU; without one, `ktrace demo byok` reports on such a kernel "
                         "recorded on 4 H100s")
    if "RANK" not in os.environ:  # one GPU, no launcher
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD.group_name
    if hasattr(symm_mem, "enable_symm_mem_for_group"):  # (older torch needs it)
        symm_mem.enable_symm_mem_for_group(group)
    out, out_ptrs = symmetric(world * args.n, torch.float32, group)
    BLOCK = 1024
    progs = triton.cdiv(args.n, BLOCK)
    flags, flag_ptrs = symmetric(max(world - 1, 1) * progs, torch.int32, group)
    flags.zero_()
    x = torch.empty(args.n, device="cuda")
    times = []
    for epoch in range(1, args.steps + 1):
        x.normal_()
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        ring_all_gather[(progs,)](x, out_ptrs, flag_ptrs, rank, world, epoch, args.slow_rank, int(args.delay_us * 1e3),
                                  N=args.n, BLOCK=BLOCK)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        want = torch.empty(world, args.n, device="cuda")
        dist.all_gather_into_tensor(want, x)
        if not torch.equal(out.view(world, args.n), want):
            raise SystemExit(f"[rank {rank}] step {epoch}: the all-gather differs from torch's")
    if rank == 0:
        print(f"ring all-gather on {world} GPU(s), {args.n} floats per rank: {args.steps} steps correct; "
              f"median {sorted(times)[len(times) // 2]:.3f} ms per step (host-timed)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
