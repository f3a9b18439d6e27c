"""Kernels of known shape used by the probe tests (CPU compile tier and GPU tier).

Each is traced with ``@ktrace.trace`` and its expected events follow from its arguments alone,
so a test can check a real buffer event by event.
"""

import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
import ktrace.shmem.language as ks

#: A module-level region name (Triton reads module-level constants only as tl.constexpr).
OUTER = tl.constexpr("outer")


@ktrace.trace(events_per_program=4)
@triton.jit
def copy_kernel(x, y, n, BLOCK: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """One span per program around a block copy (the worst case of the design brief)."""
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    s = kl.begin(kt, "copy", pid)
    off = pid * BLOCK + tl.arange(0, BLOCK)
    m = off < n
    tl.store(y + off, tl.load(x + off, mask=m), mask=m)
    kt = kl.end(kt, s, arg1=BLOCK * 4)


@ktrace.trace(events_per_program=64)
@triton.jit
def shape_kernel(out, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """Program p records: an outer span holding (p % 4) + 1 inner spans, each holding a mark,
    then a counter whose value is p * 2**33 + 7. Events per program: 2 * ((p % 4) + 1) + 2."""
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    so = kl.begin(kt, OUTER, pid)
    acc = 0.0
    for i in range(0, pid % 4 + 1):
        si = kl.begin(kt, "inner", pid, i)
        acc += tl.sum(tl.arange(0, 128).to(tl.float32)) * i
        kt = kl.mark(kt, "tick", i)
        kt = kl.end(kt, si)
    kt = kl.end(kt, so)
    kt = kl.counter(kt, "value", pid.to(tl.int64) * 8589934592 + 7)
    tl.store(out + pid, acc)


@triton.jit
def overflow_kernel(out, n_marks, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """Every program records ``n_marks`` instants, then one wait record (two slots)."""
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    for i in range(0, n_marks):
        kt = kl.mark(kt, "m", i, pid)
    t = kl.timestamp(kt)
    kt = kl.record_wait(kt, "wait", t, t + 100, pid % 3, 5, 4096 + pid * 8, 1, 1, 0, False)
    tl.store(out + pid, pid)


@ktrace.trace(events_per_program=8)
@triton.jit
def wait_layout_kernel(out, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """One wait record and one notify record with known arguments, per program."""
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    t = kl.timestamp(kt)
    kt = kl.record_wait(kt, "wait", t, t + 64, pid + 1, 1000 + pid, 1 << 40, pid * 3, -5, 2, pid % 2 == 1)
    kt = kl.record_notify(kt, "notify", t, t + 32, pid + 2, 77, 123456789012, pid)
    tl.store(out + pid, pid)


@triton.jit
def copy_multi_span_kernel(x, y, n, BLOCK: tl.constexpr, SPANS: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """The copy kernel with SPANS spans per program (each around a quarter-block copy when 4)."""
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    SUB: tl.constexpr = BLOCK // SPANS
    for j in tl.static_range(SPANS):
        s = kl.begin(kt, "copy", pid, j)
        off = pid * BLOCK + j * SUB + tl.arange(0, SUB)
        m = off < n
        tl.store(y + off, tl.load(x + off, mask=m), mask=m)
        kt = kl.end(kt, s)


@triton.jit
def relay_kernel(flag, rank, peer, heap_bases, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """A wait followed at once by a notify: what a ping-pong's answering side does per round."""
    kt = kl.init(ktrace_buf, KTRACE)
    kt = ks.wait(kt, flag, 1, rank, peer, heap_bases)
    kt = ks.notify(kt, flag + 1, 1, rank, peer, heap_bases)
