"""Kernels of many shapes, written as users write them (nothing from ktrace), for tests/test_auto.py."""

import triton
import triton.language as tl


@triton.jit
def ld_acquire(p):
    return tl.load(p, volatile=True)


@triton.jit
def wait_flag(flag, v):
    while tl.atomic_add(flag, 0, sem="acquire", scope="gpu") < v:
        pass


@triton.jit
def spins(flags, out, v, N: tl.constexpr):
    pid = tl.program_id(0)
    while tl.load(flags + pid, volatile=True) < v:  # ge v
        pass
    while tl.load(flags + pid, volatile=True) != v:  # eq v
        pass
    while v > tl.load(flags + pid, volatile=True):  # mirrored: ge v
        pass
    while tl.atomic_cas(flags + pid, 1, 0, sem="acquire", scope="gpu") != 1:  # eq 1
        pass
    while tl.load(flags + pid, volatile=True) == 0:  # ne 0
        pass
    x = ld_acquire(flags + pid)
    while x < v:  # the read in the body: ge v
        x = ld_acquire(flags + pid)
    while ld_acquire(flags + N + pid) < v:  # a reader helper in the condition
        pass
    wait_flag(flags + 2 * N + pid, v)  # a helper holding a spin: its traced twin
    tl.store(out + pid, x)


@triton.jit
def notifies(flags, data, out, v, N: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, N)
    tl.atomic_add(data + offs, 1.0)  # a block: data, not a signal
    tl.atomic_add(flags + pid, 0, sem="acquire")  # a fence: not a signal
    old = tl.atomic_xchg(flags + pid, v, sem="release", scope="sys")  # a signal
    tl.atomic_add(flags + N + pid, 1, sem="release", scope="gpu")  # a signal (a counter)
    tl.store(out + pid, old)


@triton.jit
def loops(x, out, n_iter, N: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((N,), tl.float32)
    for i in range(n_iter):  # one span per iteration
        for j in range(2):  # nested: no span of its own
            acc += tl.load(x + i * N + tl.arange(0, N)) * j
    k = 0
    while k < n_iter:  # a top-level loop that reads no memory: a span per iteration
        acc += 1.0
        k += 1
    tl.store(out + pid * N + tl.arange(0, N), acc)


@triton.jit
def early_return(x, out, n, N: tl.constexpr):
    pid = tl.program_id(0)
    if pid * N >= n:
        return
    tl.store(out + pid * N + tl.arange(0, N), tl.load(x + pid * N + tl.arange(0, N)))


@triton.jit
def asm_spin(flag, out):
    tl.inline_asm_elementwise(
        """
        {
        .reg .pred %p<1>;
        spin:
            ld.acquire.gpu.global.u32 $0, [$1];
            setp.eq.s32 %p0, $0, 0;
            @%p0 bra spin;
        }
        """, "=r,l", [flag], dtype=tl.int32, is_pure=False, pack=1)
    tl.store(out, 1)


@triton.jit
def branchy_helper(flag, v):
    if v > 0:
        return tl.atomic_xchg(flag, v, sem="release")
    return tl.atomic_xchg(flag, 0, sem="release")


@triton.jit
def calls_branchy(flag, v):
    branchy_helper(flag, v)


@triton.jit
def uses_reserved(x, _kt_mine):
    tl.store(x, _kt_mine)
