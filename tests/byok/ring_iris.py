"""The ring as an Iris kernel (no ktrace): see the package docstring. Data and flags live on the
heap; every remote access goes through the heap-bases table."""

import triton
import triton.language as tl

import iris


@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit(do_not_specialize=["rank", "epoch", "delay_rank", "delay_lo", "delay_hi", "delay_ns", "skip_rank", "skip_tile", "delay_plo", "delay_phi", "skip_prog", "shift"])
def ring_iris(x, out, buf, flags, heap_bases, rank, world, epoch, n_tiles: tl.constexpr, TILE: tl.constexpr,
              delay_rank, delay_lo, delay_hi, delay_ns, skip_rank, skip_tile, delay_plo, delay_phi, skip_prog, shift):
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    dst = (rank + 1) % world
    offs = tl.arange(0, TILE)
    for t in range(n_tiles):
        slot = (t * progs + pid) * TILE
        dslot = (t * progs + (pid + shift) % progs) * TILE
        data = tl.load(x + slot + offs)
        if (rank == delay_rank) & (t >= delay_lo) & (t < delay_hi) & (pid >= delay_plo) & (pid < delay_phi):
            start = _now()
            while _now() - start < delay_ns:
                pass
        iris.store(buf + dslot + offs, data + rank, rank, dst, heap_bases)
        tl.debug_barrier()
        if (rank != skip_rank) | (t != skip_tile) | (pid != skip_prog):
            iris.atomic_xchg(flags + t * progs + (pid + shift) % progs, epoch, rank, dst, heap_bases, sem="release", scope="sys")
        while iris.atomic_cas(flags + t * progs + pid, epoch, epoch, rank, rank, heap_bases, sem="acquire", scope="sys") != epoch:
            pass
        got = tl.load(buf + slot + offs)
        tl.store(out + slot + offs, got * 2)
