"""A ring over torch symmetric memory in plain Triton (no ktrace): see the package docstring."""

import triton
import triton.language as tl


@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _linger(ns):
    start = _now()
    while _now() - start < ns:
        pass


@triton.jit(do_not_specialize=["rank", "epoch", "delay_rank", "delay_lo", "delay_hi", "delay_ns", "skip_rank", "skip_tile", "delay_plo", "delay_phi", "skip_prog", "shift"])
def ring_plain(x, out, buf_ptrs, flags_ptrs, rank, world, epoch, n_tiles: tl.constexpr, TILE: tl.constexpr,
               delay_rank, delay_lo, delay_hi, delay_ns, skip_rank, skip_tile, delay_plo, delay_phi, skip_prog, shift):
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    dst = (rank + 1) % world
    offs = tl.arange(0, TILE)
    my_buf = tl.load(buf_ptrs + rank).to(tl.pointer_type(tl.float32))
    peer_buf = tl.load(buf_ptrs + dst).to(tl.pointer_type(tl.float32))
    my_flags = tl.load(flags_ptrs + rank).to(tl.pointer_type(tl.int32))
    peer_flags = tl.load(flags_ptrs + dst).to(tl.pointer_type(tl.int32))
    for t in range(n_tiles):
        slot = (t * progs + pid) * TILE
        dslot = (t * progs + (pid + shift) % progs) * TILE
        data = tl.load(x + slot + offs)
        if (rank == delay_rank) & (t >= delay_lo) & (t < delay_hi) & (pid >= delay_plo) & (pid < delay_phi):
            _linger(delay_ns)
        tl.store(peer_buf + dslot + offs, data + rank)
        tl.debug_barrier()
        if (rank != skip_rank) | (t != skip_tile) | (pid != skip_prog):
            tl.atomic_xchg(peer_flags + t * progs + (pid + shift) % progs, epoch, sem="release", scope="sys")
        while tl.load(my_flags + t * progs + pid, volatile=True) < epoch:
            pass
        tl.atomic_add(my_flags + t * progs + pid, 0, sem="acquire", scope="sys")
        got = tl.load(my_buf + slot + offs)
        tl.store(out + slot + offs, got * 2)
