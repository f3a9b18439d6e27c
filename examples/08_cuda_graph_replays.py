"""08 - A traced all-to-all inside a CUDA graph: every replay recorded as a launch, then reported.

    python examples/08_cuda_graph_replays.py                                   # one GPU
    python -m ktrace.launch -n 4 -- python examples/08_cuda_graph_replays.py   # 4 GPUs
    python examples/08_cuda_graph_replays.py --replays 500 --drain-every 100 --out DIR

Inference engines and ``torch.compile(mode="reduce-overhead")`` capture a step into a CUDA graph
and replay it thousands of times. Here the step is a tile all-to-all on the symmetric heap: each
of ``world x chunks`` programs sends ``tiles`` tiles to one peer rank (``send``, then a
``tile_ready`` notify) and receives a chunk from that peer (``tile_wait``, ``consume``). At one
rank the peer is the rank itself and each program waits for the tiles of another program.

What makes a kernel replayable in a graph: a graph keeps every argument of its capture, so the
round number that flags are compared with is read from device memory (``epoch``) and advanced by
a one-program kernel captured before it (``bump``), not passed from the host. What ktrace does:
inside ``ktrace.capture()``, a traced launch captured into a graph gets a buffer at a fixed address
and a ring of replay slots; a small kernel captured after it copies each replay's records into
the next slot (docs/graphs.md). Each replay becomes a launch of the capture, numbered in replay
order, so the trace, the report and ``ktrace diff`` read them as any other launches.

The script warms the step up (eagerly, traced: ktrace needs the traced kernel loaded before a
capture), captures it with ``torch.cuda.graph``, replays it ``--replays`` times and takes the
replays every ``--drain-every`` (``cap.drain_replays()``: the ring holds ``graph_ring``
replays). One program of the last rank is made a straggler in a few replays: it holds back its
notifies (``--slow-us`` each). It prints what the capture recorded, the report's first finding
(that program, in those replays), and the commands that open the trace and the report.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
import ktrace.shmem.language as ks
from instrumented_kernels import harness as H

#: Integer arguments that vary between ranks or captures: one binary for every value.
RUNTIME_INTS = ("rank", "tiles", "work_ns", "slow_rank", "slow_prog", "slow_from", "slow_to", "slow_ns", "slow_mask",
                "skip_rank", "skip_epoch", "skip_index")


@triton.jit
def bump(epoch):
    """Advance the round number the step's kernels read (one program, captured before them)."""
    tl.store(epoch, tl.load(epoch) + 1)


def _slots(meta) -> int:
    # per tile: compute, send, consume (one slot each), notify and wait (two each)
    return 7 * int(meta["tiles"]) + 2


@ktrace.trace(events_per_program=_slots)
@triton.jit(do_not_specialize=RUNTIME_INTS)
def tile_exchange(src, out, recv, flags, epoch_ptr, rank, heap_bases, tiles, work_ns, slow_rank, slow_prog, slow_from,
                  slow_to, slow_ns, slow_mask, skip_rank, skip_epoch, skip_index, WORLD: tl.constexpr,
                  CHUNKS: tl.constexpr, BLOCK: tl.constexpr, TIMEOUT_NS: tl.constexpr = ks.DEFAULT_TIMEOUT_NS,
                  ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """One round of the tile all-to-all (see the module docstring).

    Program ``p`` exchanges with peer ``d = p % WORLD``: it sends its chunk ``c = p // WORLD`` and
    receives chunk ``(c + 1) % CHUNKS`` of ``d``. Heap buffers: ``recv (2, WORLD, CHUNKS, tiles,
    BLOCK)`` fp32 (round parity, sending rank, chunk, tile) and ``flags (WORLD, CHUNKS, tiles)``
    int32 (sending rank, chunk, tile), set to the round and never reset (waits are ``>= round``).
    ``epoch_ptr``: the round (int32, device memory, advanced by :func:`bump`).

    Faults (runtime ints): on rank ``slow_rank``, program ``slow_prog`` spins ``slow_ns`` before the
    notify of each tile whose bit is set in ``slow_mask``, in rounds ``slow_from <= round <
    slow_to``; on rank ``skip_rank`` in round ``skip_epoch`` the notify numbered ``skip_index``
    (``p * tiles + t``) is not sent.
    """
    p = tl.program_id(0)
    d = p % WORLD
    c = p // WORLD
    c2 = (c + 1) % CHUNKS
    epoch = tl.load(epoch_ptr)  # the round, from the device: a graph replays this launch as it was captured
    par = epoch % 2
    kt = kl.init(ktrace_buf, KTRACE)
    offs = tl.arange(0, BLOCK)
    x = tl.load(src + c * BLOCK + offs)
    acc = tl.zeros([BLOCK], tl.float32)
    slow = (rank == slow_rank) & (p == slow_prog) & (epoch >= slow_from) & (epoch < slow_to)
    skip = tl.where((rank == skip_rank) & (epoch == skip_epoch), skip_index, -1)
    for t in range(tiles):
        s = kl.begin(kt, "compute", t, p)
        H.spin_ns(work_ns)
        x = x * 0.5 + 1.0
        kt = kl.end(kt, s)
        s = kl.begin(kt, "send", t, d)
        ks.store(recv + (((par * WORLD + rank) * CHUNKS + c) * tiles + t) * BLOCK + offs, x, rank, d, heap_bases)
        kt = kl.end(kt, s)
        held = tl.where(slow & (((slow_mask >> t) & 1) != 0), slow_ns, 0)
        kt = H.notify(kt, flags + (rank * CHUNKS + c) * tiles + t, epoch, rank, d, heap_bases, p * tiles + t, held, skip, True,
                      name="tile_ready")
        kt = ks.wait(kt, flags + (d * CHUNKS + c2) * tiles + t, epoch, rank, d, heap_bases, timeout_ns=TIMEOUT_NS,
                     name="tile_wait")
        s = kl.begin(kt, "consume", t, d)
        acc += tl.load(recv + (((par * WORLD + d) * CHUNKS + c2) * tiles + t) * BLOCK + offs)
        kt = kl.end(kt, s)
    tl.store(out + p * BLOCK + offs, acc)


@dataclass(frozen=True)
class Faults:
    """What :func:`tile_exchange` is made to do wrong (rounds count from 1: the warm-up is round 1)."""

    slow_rank: int = -1
    slow_prog: int = -1
    slow_from: int = 0
    slow_to: int = 0
    slow_ns: int = 0
    slow_mask: int = 0
    skip_rank: int = -1
    skip_epoch: int = -1
    skip_index: int = -1


class TileExchange:
    """The all-to-all's buffers on a symmetric heap, one step (bump + exchange) and its reference."""

    def __init__(self, heap, chunks: int = 4, tiles: int = 8, block: int = 256, work_ns: int = 4_000, seed: int = 0):
        import torch

        if not 1 <= tiles <= 31 or chunks < 2 or heap.world_size * chunks > 64:
            raise ValueError(f"need 1 <= tiles <= 31, chunks >= 2, world x chunks <= 64: {tiles}, {chunks}")
        self.heap, self.C, self.T, self.B, self.work_ns, self.seed = heap, chunks, tiles, block, work_ns, seed
        W = heap.world_size
        self.P = W * chunks
        self.recv = heap.zeros(2, W, chunks, tiles, block, dtype=torch.float32, name="x08.recv")
        self.flags = heap.zeros(W, chunks, tiles, dtype=torch.int32, name="tile_ready")
        self.epoch = torch.zeros(1, dtype=torch.int32, device=heap.device)
        self.src = self.source(heap.rank).to(heap.device)
        self.out = torch.zeros(self.P, block, device=heap.device)

    def source(self, rank: int):
        """Rank ``rank``'s chunks (on the host: every rank can remake every rank's)."""
        import torch

        return torch.randn(self.C, self.B, generator=torch.Generator().manual_seed(self.seed * 1009 + rank))

    def step(self, faults: Faults = Faults(), timeout_ns: int = ks.DEFAULT_TIMEOUT_NS) -> None:
        """One round on the current stream: advance the round on the device, then exchange."""
        f = faults
        bump[(1,)](self.epoch)
        tile_exchange[(self.P,)](self.src, self.out, self.recv, self.flags, self.epoch, self.heap.rank, self.heap.bases, self.T,
                                 self.work_ns, f.slow_rank, f.slow_prog, f.slow_from, f.slow_to, f.slow_ns, f.slow_mask,
                                 f.skip_rank, f.skip_epoch, f.skip_index, WORLD=self.heap.world_size, CHUNKS=self.C,
                                 BLOCK=self.B, TIMEOUT_NS=timeout_ns, num_warps=4)

    def reference(self):
        """``out`` as a complete round leaves it (on the host, float64 then float32)."""
        import torch

        W, r = self.heap.world_size, self.heap.rank
        rows = []
        for p in range(self.P):
            d, c2 = p % W, (p // W + 1) % self.C
            x = self.source(d)[c2].double()
            acc = torch.zeros_like(x)
            for _ in range(self.T):
                x = x * 0.5 + 1.0
                acc += x
            rows.append(acc)
        return torch.stack(rows).float()


def record(out: Path, replays: int = 200, drain_every: int = 100, faults: Faults = Faults(), graph_ring: int = 256,
           chunks: int = 4, tiles: int = 8, heap=None) -> dict:
    """Warm up, capture one step into a CUDA graph, replay it; returns what happened on this rank
    (and, on rank 0, writes the gathered capture to ``out/replays.ktrace``). Collective.

    Args:
        heap: the symmetric heap to use (default: the shared harness's, ``H.heap``).
    """
    import torch

    dist = H.setup()
    heap = heap if heap is not None else H.heap(1 << 22)
    plan = TileExchange(heap, chunks=chunks, tiles=tiles)
    ref = plan.reference().to(dist.device)
    with ktrace.capture():  # the warm-up (round 1), traced: the traced binaries are loaded before the graph capture
        plan.step(faults)
    torch.cuda.synchronize()
    heap.barrier()
    with ktrace.capture(heap=heap, graph_ring=graph_ring) as cap:  # the ranks' clocks calibrated before and after
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            plan.step(faults)  # captured: bump, the traced exchange and ktrace's commit
        heap.barrier()
        drained = 0
        for i in range(replays):
            g.replay()  # replay i: round i + 2
            if drain_every and (i + 1) % drain_every == 0:
                drained += cap.drain_replays()  # (on the stream the graph is replayed on: after its replays)
        torch.cuda.synchronize()
        ok = bool(torch.allclose(plan.out, ref, rtol=1e-5, atol=1e-3))
        heap.barrier()
    merged = cap.gather()
    info = {"rank": dist.rank, "world_size": dist.world_size, "replays": replays, "drained": drained, "output_ok": ok,
            "graphs": cap.graph_summaries(), "faults": asdict(faults), "device": torch.cuda.get_device_name()}
    if merged is not None:
        out.mkdir(parents=True, exist_ok=True)
        info["capture"] = str(ktrace.write_capture(out / "replays.ktrace", merged, compress=True))
    return info


def _one_rank_env() -> None:
    """A single process (no torchrun): rank 0 of 1, on a free local port."""
    if "RANK" in os.environ or "SLURM_PROCID" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replays", type=int, default=200, help="graph replays (default 200)")
    ap.add_argument("--drain-every", type=int, default=100, help="take the replays every N (0: only at the end)")
    ap.add_argument("--slow-us", type=float, default=60.0, help="the straggler's hold per notify (µs)")
    ap.add_argument("--out", default="ktrace-example-08", help="output folder")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("08_cuda_graph_replays: needs a GPU (one per rank); without one, try: ktrace demo", file=sys.stderr)
        return 2
    _one_rank_env()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    # the last rank's program 1 holds back its notifies of tiles 2-5 in replays 50-59 (rounds 52-61:
    # the warm-up is round 1, replay k round k + 2)
    faults = Faults(slow_rank=world - 1, slow_prog=1, slow_from=52, slow_to=62, slow_ns=int(args.slow_us * 1000),
                    slow_mask=0b111100)
    info = record(Path(args.out), replays=args.replays, drain_every=args.drain_every, faults=faults)
    if info["rank"] != 0:
        return 0 if info["output_ok"] else 1
    g = info["graphs"][0]
    print(f"{info['device']}, {info['world_size']} rank(s): the graph was replayed {g['replays']} times; "
          f"{g['recorded']} replays recorded as launches, {g['overwritten']} overwritten (ring of {g['ring_slots']})")
    print(f"output of the last replay {'matches' if info['output_ok'] else 'DOES NOT match'} the reference")
    from ktrace.demo import analyse, next_steps

    o = analyse(Path(info["capture"]), args.out)
    print("\nThe report's first finding:")
    print(f"  {o.report.findings[0].text if o.report.findings else '(none)'}")
    print(next_steps(o))
    return 0 if info["output_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
