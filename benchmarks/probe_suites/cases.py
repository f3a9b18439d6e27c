"""The hand-off kernels' cases (``benchmarks/handoff_kernels.py``), each timed with a suite's
variants: the ping-pong, the tile pipeline and the fan-in, at one rank (programs of one GPU, the
peer the rank itself, over :class:`OneGpuHeap`) or between pairs of ranks (the symmetric heap).
Every variant's output is checked and every traced variant's records decoded."""

from __future__ import annotations

from . import common as C


def heap_for(dist, H):
    """The heap a suite's cases use: the symmetric heap over the ranks, or one GPU's memory."""
    return H.heap(64 << 20) if dist.world_size > 1 else OneGpuHeap(64 << 20, dist.device)


def pingpong_case(dist, H, heap, variants: dict, rounds: int, reps: int, warmup: int, case: str) -> list[dict]:
    """Two ranks: one program each. One rank: programs 0 and 1 of one launch (``LOCAL``)."""
    import torch

    import handoff_kernels as hk

    local = dist.world_size == 1
    P = 2 if local else 1
    flag = heap.zeros(2, dtype=torch.int32, name=f"{case}.flag")
    scratch = torch.zeros(16, dtype=torch.int64, device=dist.device)
    heap.barrier()
    ep = C.Epochs()
    peer = C.peer_of(dist)
    first = int(dist.rank % 2 == 0)
    launchers = C.variant_launchers(
        hk.pingpong, variants, (P,), lambda e: (flag, scratch, rounds, e, dist.rank, peer, first, heap.bases),
        lambda sw: max(1, rounds * C.slots_per_round(sw)), P, dist.device, 4, {"_epochs": ep, "LOCAL": local},
    )
    rows = C.time_case(dist, H, case, launchers, reps, warmup, 1, 2 * rounds, plans=(ep,))
    torch.cuda.synchronize()
    heap.check()
    seen = flag[:P].tolist()
    C.barrier(dist)  # the peer's next launch would move the flag on
    if seen != [ep.epoch * rounds] * P:
        raise SystemExit(f"{case}: flags hold {seen}, expected {ep.epoch * rounds}")
    _check_rounds(rows, case, launchers, variants, P, rounds)
    return rows


def pipeline_launchers(dist, heap, variants: dict, tiles: int, tile_elems: int, case: str, pair: int, src, out, ep):
    """Allocate the pipeline's heap tensors and make its variants' launchers (``C.variant_launchers``),
    program 0 the producer and program ``pair`` the consumer; returns the launchers and the grid
    size."""
    import torch

    import handoff_kernels as hk

    n = tiles * tile_elems
    dst = heap.zeros(2 * n, dtype=torch.float32, name=f"{case}.dst")
    flags = heap.zeros(tiles, dtype=torch.int32, name=f"{case}.flags")
    heap.barrier()
    P = pair + 1
    peer = C.peer_of(dist)
    launchers = C.variant_launchers(
        hk.pipeline, variants, (P,), lambda e: (src, dst, out, flags, tiles, tile_elems, e, dist.rank, peer, heap.bases),
        lambda sw: max(1, tiles * C.slots_per_round(sw)), P, dist.device, 4, {"_epochs": ep, "BLOCK": 512, "PAIR": pair},
    )
    return launchers, P


def pipeline_case(dist, H, heap, variants: dict, tiles: int, tile_elems: int, reps: int, warmup: int, case: str,
                   pair: int = 1) -> list[dict]:
    """Program 0 the producer, program ``pair`` the consumer (a grid of ``pair + 1``; the others
    return at once)."""
    import torch

    n = tiles * tile_elems
    seed = H.fresh_seed(dist)
    gen = lambda r: torch.randn(n, generator=torch.Generator(device=dist.device).manual_seed(seed + r), device=dist.device)  # noqa: E731
    src, want = gen(dist.rank), gen(C.peer_of(dist))
    out = H.poison(torch.empty(n, dtype=torch.float32, device=dist.device))
    ep = C.Epochs()
    launchers, P = pipeline_launchers(dist, heap, variants, tiles, tile_elems, case, pair, src, out, ep)
    rows = C.time_case(dist, H, case, launchers, reps, warmup, max(1, 256 // tiles), tiles, plans=(ep,))
    for name, (fn, buf, slots) in launchers.items():
        C.launch_fresh(H, fn, buf, out)
        heap.check()
        if not torch.equal(out, want):
            raise SystemExit(f"{case}/{name}: the tiles received differ from the peer's source")
        if buf is not None:
            sw = variants[name]  # producer: notify + spans per tile; consumer: wait + spans
            side = 0 if sw.get("TIMERS") else sw.get("SIDE", 3)  # (producer 1, consumer 2: whose spans record)
            sides = bool(side & 1) + bool(side & 2)
            per_tile = bool(sw.get("WAITS")) + bool(sw.get("NOTIFIES")) + sides * sw.get("SPANS", 0)
            C.note_spins(rows, name, C.check_records(f"{case}/{name}", buf, P, slots, tiles * per_tile, tiles * C.signals_per_round(sw)))
    return rows


def fanin_case(dist, H, heap, variants: dict, rounds: int, reps: int, warmup: int, case: str) -> list[dict]:
    import torch

    import handoff_kernels as hk

    CHUNK = 256
    nprog = torch.cuda.get_device_properties(dist.device).multi_processor_count
    dst = heap.zeros(nprog * CHUNK, dtype=torch.float32, name=f"{case}.dst")
    counter = heap.zeros(1, dtype=torch.int32, name=f"{case}.counter")
    heap.barrier()
    seed = H.fresh_seed(dist)
    peer = C.peer_of(dist)
    gen = lambda r: torch.randn(nprog * CHUNK, generator=torch.Generator(device=dist.device).manual_seed(seed + r), device=dist.device)  # noqa: E731
    src, want = gen(dist.rank), gen(peer)
    ep = C.Epochs()
    launchers = C.variant_launchers(
        hk.fanin, variants, (nprog,), lambda e: (src, dst, counter, rounds, e, dist.rank, peer, nprog, heap.bases),
        lambda sw: max(1, rounds * C.slots_per_round(sw)), nprog, dist.device, 4, {"_epochs": ep, "CHUNK": CHUNK},
    )
    rows = C.time_case(dist, H, case, launchers, reps, warmup, 4, rounds, plans=(ep,))
    torch.cuda.synchronize()
    heap.check()
    same, seen = torch.equal(dst, want), int(counter.item())
    C.barrier(dist)  # the peer's next launch would add to the counter
    if not same:
        raise SystemExit(f"{case}: the chunks received differ from the peer's source")
    if seen != nprog * rounds * ep.epoch:
        raise SystemExit(f"{case}: counter {seen}, expected {nprog * rounds * ep.epoch}")
    _check_rounds(rows, case, launchers, variants, nprog, rounds)
    return rows


def _check_rounds(rows: list[dict], case: str, launchers: dict, variants: dict, n_programs: int, rounds: int) -> None:
    """Each traced variant launched once more into its zeroed buffer and its records checked: every
    one of ``rounds`` rounds of each of ``n_programs`` programs (the ping-pong, the fan-in)."""
    import torch

    for name, (fn, buf, slots) in launchers.items():
        if buf is not None:
            buf.zero_()
            fn()
            torch.cuda.synchronize()
            sw = variants[name]
            C.note_spins(rows, name, C.check_records(f"{case}/{name}", buf, n_programs, slots,
                                                     n_programs * rounds * C.events_per_round(sw), n_programs * rounds * C.signals_per_round(sw)))


class OneGpuHeap:
    """The symmetric heap at one rank without torch.distributed: one allocation, its first bytes
    the error block, ``bases`` its one base. Producer and consumer programs share the GPU."""

    def __init__(self, nbytes: int, device):
        import torch

        from ktrace.shmem.symmetric import RESERVED_BYTES

        self._mem = torch.zeros(nbytes + 256, dtype=torch.uint8, device=device)
        off = (-self._mem.data_ptr()) % 256
        self._base = self._mem[off : off + nbytes]
        self._used = -(-RESERVED_BYTES // 256) * 256
        self.bases = torch.tensor([self._base.data_ptr()], dtype=torch.int64, device=device)

    def zeros(self, n: int, dtype, name: str = ""):
        import torch

        nb = n * torch.empty((), dtype=dtype).element_size()
        if self._used + nb > self._base.numel():
            raise MemoryError(f"one-GPU heap full ({name})")
        t = self._base[self._used : self._used + nb].view(dtype)
        self._used += -(-nb // 256) * 256
        return t

    def barrier(self) -> None:
        pass

    def check(self) -> None:
        import torch

        if int(self._base[:4].view(torch.int32)[0].item()):
            raise SystemExit("a wait timed out (one-GPU heap's error block)")
