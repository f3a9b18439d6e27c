"""Small ``@gluon.jit`` kernels exercising every ``ktrace.gluon`` probe in a warp-specialized
kernel (a default and a worker partition handing off through mbarriers): compiled on the CPU
by tests/test_gluon.py, run on a GPU by instrumented_kernels/gluon_gemm/gpu_checks.py."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

import ktrace
import ktrace.gluon as kg
import ktrace.shmem.gluon as ksg


@gluon.jit
def _producer(out, n_iters, bars, ktrace_buf, KTRACE: gl.constexpr, KTRACE_LANES: gl.constexpr):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 1)
    ready = bars.index(0)
    empty = bars.index(1)
    for i in range(n_iters):
        kt = kg.wait(kt, empty, i - 1, "empty")
        s = kg.begin(kt, "produce", i)
        kt = kg.end(kt, s)
        kt = kg.arrive(kt, ready, i, "ready")


@gluon.jit
def _consumer(out, n_iters, bars, ktrace_buf, KTRACE: gl.constexpr, KTRACE_LANES: gl.constexpr):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 0)
    ready = bars.index(0)
    empty = bars.index(1)
    for i in range(n_iters):
        kt = kg.wait(kt, ready, i, "ready")
        kt = kg.mark(kt, "consumed", i)
        kt = kg.counter(kt, "iteration", i)
        kt = kg.arrive(kt, empty, i, "empty")


@gluon.jit
def handoff_kernel(out, n_iters, ktrace_buf=None, KTRACE: gl.constexpr = 0, KTRACE_LANES: gl.constexpr = 1):
    """A consumer (default partition, lane 0) and a producer (one-warp worker, lane 1) that hand
    off ``n_iters`` times through two mbarriers; every probe of ``ktrace.gluon`` is used."""
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    gl.warp_specialize([(_consumer, (out, n_iters, bars, ktrace_buf, KTRACE, KTRACE_LANES)),
                        (_producer, (out, n_iters, bars, ktrace_buf, KTRACE, KTRACE_LANES))], [1], [24])


traced_handoff = ktrace.trace(handoff_kernel, events_per_program=64, lanes=(_consumer, _producer))


@gluon.jit
def _comm(flags, rank, dst, src, heap_bases, n_rounds, ktrace_buf, KTRACE: gl.constexpr, KTRACE_LANES: gl.constexpr):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 1)
    for i in range(n_rounds):
        kt = ksg.notify(kt, flags + gl.program_id(0), i + 1, rank, dst, heap_bases, name="comm notify")


@gluon.jit
def _waiter(flags, rank, dst, src, heap_bases, n_rounds, ktrace_buf, KTRACE: gl.constexpr, KTRACE_LANES: gl.constexpr):
    kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 0)
    kt, ok = ksg.wait(kt, flags + gl.program_id(0), n_rounds, rank, src, heap_bases, timeout_ns=1_000_000_000, name="comm wait")


@gluon.jit
def flag_kernel(flags, rank, dst, src, heap_bases, n_rounds, ktrace_buf=None, KTRACE: gl.constexpr = 0,
                KTRACE_LANES: gl.constexpr = 1):
    """A communication partition (worker, lane 1) signals rank ``dst``'s flag of this program
    ``n_rounds`` times over the symmetric heap; the default partition (lane 0) waits for rank
    ``src``'s last round on this rank's flag. At one rank both are the rank itself."""
    gl.warp_specialize([(_waiter, (flags, rank, dst, src, heap_bases, n_rounds, ktrace_buf, KTRACE, KTRACE_LANES)),
                        (_comm, (flags, rank, dst, src, heap_bases, n_rounds, ktrace_buf, KTRACE, KTRACE_LANES))], [1], [48])
