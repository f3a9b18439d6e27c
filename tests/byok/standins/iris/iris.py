"""The stand-in's device functions and heap (see the package docstring)."""

import triton
import triton.language as tl


class Iris:
    """A symmetric heap: ``heap_bases`` (uint64 device tensor: where each rank's heap is mapped in
    this process) and ``heap_size`` bytes per rank, as Iris's ``Iris`` object has them."""

    def __init__(self, heap_size=1 << 24, *, reserve=4096):
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        self.cur_rank, self.num_ranks = dist.get_rank(), dist.get_world_size()
        # the heap is a window into one symmetric buffer (Iris maps its heaps with IPC handles)
        group = dist.group.WORLD.group_name
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                enable(group)
        self._backing = symm_mem.empty(heap_size + reserve, dtype=torch.uint8, device="cuda")
        hdl = symm_mem.rendezvous(self._backing, group)
        at = self._backing.data_ptr() - int(hdl.buffer_ptrs[self.cur_rank]) + reserve
        self.heap_size = heap_size
        self.heap_bases = torch.tensor([int(p) + at for p in hdl.buffer_ptrs], dtype=torch.int64, device="cuda").view(torch.uint64)
        self.memory = self._backing[reserve:reserve + heap_size]
        self.offset = 0

    def zeros(self, n, dtype):
        import torch

        size = torch.tensor([], dtype=dtype).element_size() * n
        t = self.memory[self.offset:self.offset + size].view(dtype)
        self.offset += -(-size // 1024) * 1024
        t.zero_()
        return t


@triton.jit
def __translate(ptr, from_rank, to_rank, heap_bases):
    from_base = tl.load(heap_bases + from_rank)
    to_base = tl.load(heap_bases + to_rank)
    offset = tl.cast(ptr, tl.uint64) - from_base
    return tl.cast(tl.cast(to_base, tl.pointer_type(tl.int8)) + offset, ptr.dtype)


@triton.jit
def load(pointer, to_rank, from_rank, heap_bases, mask=None):
    return tl.load(__translate(pointer, to_rank, from_rank, heap_bases), mask=mask)


@triton.jit
def store(pointer, value, from_rank, to_rank, heap_bases, mask=None):
    tl.store(__translate(pointer, from_rank, to_rank, heap_bases), value, mask=mask)


@triton.jit
def atomic_add(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem=None, scope=None):
    return tl.atomic_add(__translate(pointer, from_rank, to_rank, heap_bases), val, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_xchg(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem=None, scope=None):
    return tl.atomic_xchg(__translate(pointer, from_rank, to_rank, heap_bases), val, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_cas(pointer, cmp, val, from_rank, to_rank, heap_bases, sem=None, scope=None):
    return tl.atomic_cas(__translate(pointer, from_rank, to_rank, heap_bases), cmp, val, sem=sem, scope=scope)
