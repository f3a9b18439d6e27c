"""Kernels of the flight recorder's tests (``tests/test_flight*.py``, ``tests/gpu/flight_gpu.py``).

``handoff``: program 0 produces ``rounds`` rounds (a span of work, then a notify that sets
``flags[0]`` to the round's number); programs 1.. consume them (a wait for ``flags[0] >= round``,
then a span). With ``skip`` < ``rounds`` the producer sends no notify from round ``skip`` on (it
finishes its rounds without them). (Recorded for the fixture before ``_produce`` was shared with
``cross_handoff``: the fixture's source lines are those of that version, the code the same.): the consumers spin on round ``skip`` for ever when their
wait is unbounded (``TIMEOUT_NS = 0``). Producer and consumers are programs of one launch on one
GPU; ``rank`` is both the sender's and the receiver's rank.
"""

import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
import ktrace.shmem.language as ks


@triton.jit
def _produce(kt, flags, data, offs, rounds, skip, base, rank, peer, heap_bases):
    """The producer: ``rounds`` rounds of work, each but those from ``skip`` on notifying ``peer``."""
    for i in range(rounds):
        s = kl.begin(kt, "produce", i)
        tl.store(data + offs, (offs + i).to(tl.float32))
        kt = kl.end(kt, s)
        if i < skip:
            kt = ks.notify(kt, flags, base + i + 1, rank, peer, heap_bases, name="tile_ready")
    return kt


@ktrace.trace(events_per_program=64)
@triton.jit(do_not_specialize=["rounds", "skip", "base", "rank"])
def handoff(flags, data, rounds, skip, base, rank, heap_bases, TIMEOUT_NS: tl.constexpr = 0, BLOCK: tl.constexpr = 256,
            ktrace_buf=None, KTRACE: tl.constexpr = 0):
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    if pid == 0:
        kt = _produce(kt, flags, data, offs, rounds, skip, base, rank, rank, heap_bases)
    else:
        acc = tl.zeros((BLOCK,), tl.float32)
        for i in range(rounds):
            kt = ks.wait(kt, flags, base + i + 1, rank, rank, heap_bases, timeout_ns=TIMEOUT_NS, name="tile_wait")
            s = kl.begin(kt, "consume", i)
            acc += tl.load(data + offs)
            kt = kl.end(kt, s)
        tl.store(data + BLOCK * pid + offs, acc)


@ktrace.trace(events_per_program=64)
@triton.jit(do_not_specialize=["rounds", "skip", "base", "rank", "peer"])
def cross_handoff(flags, data, rounds, skip, base, rank, peer, heap_bases, TIMEOUT_NS: tl.constexpr = 0,
                  BLOCK: tl.constexpr = 256, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """Two ranks: program 0 of each sends ``rounds`` rounds to ``peer`` (``flags[0]`` on the peer's
    heap), program 1 waits for the peer's. With ``skip`` < ``rounds`` on one rank, the other rank's
    program 1 spins on round ``skip`` for ever (unbounded waits)."""
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    if pid == 0:
        kt = _produce(kt, flags, data, offs, rounds, skip, base, rank, peer, heap_bases)
    else:
        for i in range(rounds):
            kt = ks.wait(kt, flags, base + i + 1, rank, peer, heap_bases, timeout_ns=TIMEOUT_NS, name="tile_wait")


@ktrace.trace(events_per_program=16)
@triton.jit(do_not_specialize=["iters", "gap_ns"])
def ticker(out, iters, gap_ns, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """A persistent kernel: each program records a mark (``arg0`` = its round) every ``gap_ns``,
    ``iters`` times: ``grid x iters`` records in ``iters x gap_ns`` ns, for streaming."""
    kt = kl.init(ktrace_buf, KTRACE)
    t = kl.now()
    for i in range(iters):
        kt = kl.mark(kt, "tick", i)
        t += gap_ns
        c = kl.now()
        while c < t:
            c = kl.now()
    tl.store(out + tl.program_id(0), iters)
