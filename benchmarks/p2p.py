"""Symmetric-heap point-to-point microbenchmark: remote load/store/put/get vs peer copy and NCCL.

    python benchmarks/p2p.py                      # every visible GPU, torch.multiprocessing launch
    python benchmarks/p2p.py -n 2 --json out.json

For each message size, rank 0 against each peer (the others idle), then every rank against every
peer at once, it measures side by side in one run:

* ``load``  remote read into registers (a reduction, nothing written),
* ``store`` remote write of values computed in registers,
* ``get``   remote read -> local write (``ks.get``), ``put`` local read -> remote write (``ks.put``),
* ``copy_pull`` / ``copy_push``: ``tensor.copy_`` between local memory and the peer's heap (the
  device-to-device peer copy the driver does),
* ``nccl``: ``torch.distributed`` send/recv of the same bytes,

plus the flag round-trip latency (``ktrace.clock.calibrate.ping_pong``). Each figure is the median
over ``--reps`` timed batches of ``--iters`` operations after warm-up (CUDA events); bandwidth is
bytes moved per rank per second (GB/s = 1e9 B/s). It ends with put/get as a fraction of the peer
copy at 64 MiB (the target is >= 85 %).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
import triton
import triton.language as tl

import ktrace.shmem.language as ks

BLOCK = 4096
MiB = 1 << 20


@triton.jit
def _p2p_kernel(src, dst, partial, n, rank, first_peer, n_peers, world, heap_bases, OP: tl.constexpr, BLOCK: tl.constexpr):
    # axis 0: blocks of the message; axis 1: which peer (first_peer + i) % world
    pid = tl.program_id(0)
    peer = (first_peer + tl.program_id(1)) % world
    slot = tl.program_id(1).to(tl.int64) * n  # all-peers: each peer's data has its own slot
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    if OP == "load":
        v = ks.load(src + offs, rank, peer, heap_bases, mask=m, other=0.0)
        tl.store(partial + pid + tl.program_id(1) * tl.num_programs(0), tl.sum(v, axis=0))
    elif OP == "store":
        ks.store(dst + slot + offs, offs.to(tl.float32), rank, peer, heap_bases, mask=m)
    elif OP == "get":
        ks.get(src + offs, dst + slot + offs, rank, peer, heap_bases, mask=m)
    else:
        ks.put(src + offs, dst + slot + offs, rank, peer, heap_bases, mask=m)


def _time(fn, iters: int, reps: int, warmup: int = 3) -> float:
    """Median seconds per call over ``reps`` batches of ``iters`` calls (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / 1e3 / iters)
    return statistics.median(times)


def _worker(rank: int, world: int, port: int, args, out_q) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    from ktrace.device import device_info
    from ktrace.clock.calibrate import CalibrationConfig, ping_pong
    from ktrace.shmem import SymmetricHeap, init_distributed

    init_distributed()
    dev = torch.device("cuda", rank)
    sizes = [int(s * MiB) for s in args.sizes_mib]
    maxn = max(sizes) // 4
    heap = SymmetricHeap(2 * max(sizes) * max(1, world - 1) + max(sizes) + 64 * MiB)
    src = heap.empty(maxn, dtype=torch.float32, name="src")
    dst = heap.zeros(maxn * max(1, world - 1), dtype=torch.float32, name="dst")
    src.copy_(torch.randn(maxn, device=dev))
    local = torch.empty(maxn * max(1, world - 1), dtype=torch.float32, device=dev)
    partial = torch.empty(((maxn + BLOCK - 1) // BLOCK) * max(1, world - 1), dtype=torch.float32, device=dev)
    heap.barrier()
    results = []

    def record(kind, op, peer, nbytes, secs):
        if secs is not None:
            results.append({"kind": kind, "op": op, "peer": peer, "bytes": nbytes, "us": secs * 1e6, "gbps": nbytes / secs / 1e9})

    def kernel(op, n, first_peer, n_peers):
        grid = (triton.cdiv(n, BLOCK), n_peers)
        # get: peer's src -> local; put: this rank's src (local memory) -> peer's dst
        s, d = src, (local if op == "get" else dst)
        return lambda: _p2p_kernel[grid](s, d, partial, n, rank, first_peer, n_peers, world, heap.bases, OP=op, BLOCK=BLOCK, num_warps=8)

    peers = [q for q in range(world) if q != rank]
    for nbytes in sizes:
        n = nbytes // 4
        iters = max(2, min(50, (256 * MiB) // nbytes))
        # --- rank 0 against each peer, one at a time ---
        for q in range(1, world):
            for op in ("load", "store", "get", "put"):
                heap.barrier()
                secs = _time(kernel(op, n, q, 1), iters, args.reps) if rank == 0 else None
                record("per_peer", op, q, nbytes, secs)
            heap.barrier()
            if rank == 0:
                rs, rd = heap.remote(src[:n], q), heap.remote(dst[:n], q)
                record("per_peer", "copy_pull", q, nbytes, _time(lambda: local[:n].copy_(rs), iters, args.reps))
                record("per_peer", "copy_push", q, nbytes, _time(lambda: rd.copy_(src[:n]), iters, args.reps))
            heap.barrier()
            if rank in (0, q):
                if rank == 0:
                    f = lambda: dist.send(src[:n], dst=q)  # noqa: E731
                else:
                    f = lambda: dist.recv(local[:n], src=0)  # noqa: E731
                record("per_peer", "nccl", q if rank == 0 else 0, nbytes, _time(f, iters, args.reps) if rank == 0 else None)
                if rank == q:
                    _time(f, iters, args.reps)  # the matching receives (not recorded)
            heap.barrier()
        # --- every rank against every peer at once ---
        if world > 1 and nbytes <= args.all_peers_max_mib * MiB:
            for op in ("load", "store", "get", "put"):
                heap.barrier()
                record("all_peers", op, -1, nbytes * (world - 1), _time(kernel(op, n, rank + 1, world - 1), iters, args.reps))
            heap.barrier()
            streams = [torch.cuda.Stream(dev) for _ in peers]
            rviews = [heap.remote(src[:n], q) for q in peers]

            def pull_all():
                ev = torch.cuda.current_stream().record_event()
                for i, (st, rv) in enumerate(zip(streams, rviews)):
                    st.wait_event(ev)
                    with torch.cuda.stream(st):
                        local[i * n : (i + 1) * n].copy_(rv)
                for st in streams:
                    torch.cuda.current_stream().wait_stream(st)

            record("all_peers", "copy_pull", -1, nbytes * (world - 1), _time(pull_all, iters, args.reps))
            heap.barrier()

            def nccl_all():
                ops = []
                for i, q in enumerate(peers):
                    ops.append(dist.P2POp(dist.isend, src[:n], q))
                    ops.append(dist.P2POp(dist.irecv, local[i * n : (i + 1) * n], q))
                for w in dist.batch_isend_irecv(ops):
                    w.wait()

            record("all_peers", "nccl", -1, nbytes * (world - 1), _time(nccl_all, iters, args.reps))
            heap.barrier()
    # --- flag round trip ---
    latency = []
    if world > 1:
        samples = ping_pong(heap, "before", CalibrationConfig(rounds=args.rounds))
        for s in samples:
            rt = [b - a for a, b in zip(s["t1"], s["t4"])]
            rt.sort()
            latency.append({"peer": s["peer"], "min_ns": rt[0], "median_ns": rt[len(rt) // 2], "p99_ns": rt[int(len(rt) * 0.99)]})
    heap.barrier()
    info = device_info(rank)
    gathered = heap.all_gather_object({"rank": rank, "results": results})
    if rank == 0:
        out_q.put({"world": world, "device": info["name"], "arch": info["arch"], "ranks": gathered, "flag_round_trip": latency})
    heap.barrier()
    dist.destroy_process_group()


def _report(res: dict, target_mib: float) -> str:
    lines = [f"device: {res['world']} x {res['device']} ({res['arch']})"]
    rows = [r for g in res["ranks"] for r in g["results"] if g["rank"] == 0 or r["kind"] == "all_peers"]
    lines.append(f"{'kind':10} {'op':10} {'peer':>4} {'MiB':>8} {'us':>10} {'GB/s':>8}")
    for g in res["ranks"]:
        for r in g["results"]:
            if r["kind"] == "per_peer" and g["rank"] != 0:
                continue
            if r["kind"] == "all_peers" and g["rank"] != 0:
                continue
            lines.append(f"{r['kind']:10} {r['op']:10} {r['peer']:>4} {r['bytes'] / MiB:>8.2f} {r['us']:>10.1f} {r['gbps']:>8.1f}")
    for lat in res["flag_round_trip"]:
        lines.append(f"flag round trip 0<->{lat['peer']}: min {lat['min_ns']} ns, median {lat['median_ns']} ns, p99 {lat['p99_ns']} ns")
    target = int(target_mib * MiB)
    per = {(r["op"], r["peer"]): r["gbps"] for r in rows if r["kind"] == "per_peer" and r["bytes"] == target}
    for q in sorted({p for _, p in per}):
        copy = max(per.get(("copy_pull", q), 0), per.get(("copy_push", q), 0))
        if copy:
            lines.append(
                f"{target_mib:g} MiB 0->{q}: put {per[('put', q)]:.1f} GB/s = {per[('put', q)] / copy:.1%} of peer copy, "
                f"get {per[('get', q)]:.1f} GB/s = {per[('get', q)] / copy:.1%} (peer copy {copy:.1f} GB/s, NCCL {per.get(('nccl', q), 0):.1f} GB/s)"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--nprocs", type=int, default=None, help="ranks (default: every visible GPU)")
    ap.add_argument("--sizes-mib", type=float, nargs="+", default=[0.0625, 1, 16, 64, 256])
    ap.add_argument("--all-peers-max-mib", type=float, default=64)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2000, help="flag round trips per peer")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    world = args.nprocs or torch.cuda.device_count()
    if world < 1 or world > torch.cuda.device_count():
        print(f"need 1..{torch.cuda.device_count()} ranks (one GPU each), got {world}", file=sys.stderr)
        return 2
    if any(s * MiB % (4 * BLOCK) for s in args.sizes_mib):
        print(f"sizes must be multiples of {4 * BLOCK} bytes", file=sys.stderr)
        return 2
    from ktrace.shmem import apply_safe_env
    from ktrace.launch import free_port

    apply_safe_env()
    ctx = torch.multiprocessing.get_context("spawn")
    q = ctx.SimpleQueue()
    torch.multiprocessing.start_processes(_worker, args=(world, free_port(), args, q), nprocs=world, start_method="spawn")
    res = q.get()
    print(_report(res, 64))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
