"""Device probes that ``ktrace.auto`` adds to kernels it prepares: waits and notifies on raw addresses.

The kernels ``ktrace record`` traces signal through memory of their own (a torch symmetric-memory
buffer, an Iris-style heap, a flag in an ordinary tensor): their waits and notifies are recorded
with the *address* they touched, as the program saw it, not a ktrace heap offset. The collector
maps each address to the rank that owns the memory and an offset in a known allocation through
the rank's table of mappings (``ktrace.auto.addresses``), and pairing then works as on ktrace's
own heap.

Records (``ktrace.schema``): a WAIT with ``peer`` = the producer when a declaration names it, else
-1; ``flag`` = the address (see :func:`flag_word`), ``value`` = the last value read, ``expected``
and ``cmp`` = what the spin waited for (0: not known). A NOTIFY with ``peer`` = -1 (the owner of
the address, found on the host), ``value`` = the value written (0: not known), ``flag`` = the
address, ``seq`` = 0.

Every probe takes the tracer and returns it, and compiles to nothing when the tracer is off
(``kt.ON`` is a compile-time constant). Cost when on: a timer read before and after the traced
statement, and the record (``kl.record_wait`` / ``kl.record_notify``: kept in registers by the
deferred tracer of a prepared kernel and stored after the next release); a spin with a deadline
also reads the timer once per poll.
"""

import triton
import triton.language as tl

import ktrace.language as kl

#: Bit 48 up of a recorded address word: the owner given by the call (plus one), when the address
#: is this rank's symmetric address of memory on another rank (``iris.atomic_add(p, v, me, peer,
#: bases)``, ``putmem_signal(sig, ..., pe)``); 0 when the address itself says where it points.
OWNER_SHIFT: tl.constexpr = tl.constexpr(48)
#: Elements of a block of addresses recorded one by one (a declared helper given a block, one
#: address per peer): at most this many; a larger block records its first ones.
MAX_ELEMENTS: tl.constexpr = tl.constexpr(64)


@triton.jit
def _with_owner(a, owner):
    """An int64 address word with the owner given by the call (bits 48 and up), if any."""
    if owner is None:
        return a
    else:
        o = tl.cast(owner, tl.int64)
        return tl.where(o >= 0, a | ((o + 1) << OWNER_SHIFT), a)


@triton.jit
def flag_word(addr, owner):
    """A pointer (or the lowest address of a block of pointers) as the int64 word a record keeps,
    with the owner given by the call (None: the address says where it points; see
    :data:`OWNER_SHIFT`)."""
    if len(addr.shape) == 0:
        a = addr.to(tl.int64)
    else:
        a = tl.min(tl.reshape(addr.to(tl.int64), addr.numel), axis=0)
    return _with_owner(a, owner)


@triton.jit
def _element(x, i):
    """Element ``i`` (a compile-time int) of a block, as a scalar; a scalar as it is."""
    if len(x.shape) == 0:
        return x
    else:
        flat = tl.reshape(x, x.numel)
        return tl.sum(tl.where(tl.arange(0, x.numel) == i, flat, tl.zeros_like(flat)), axis=0)


@triton.jit
def _i32(v):
    """A value read, written or expected, as a scalar int32 (a block: its first element)."""
    return _element(tl.cast(v, tl.int32), 0)


@triton.jit
def keep_spinning(cond, t0, BOUND_NS: tl.constexpr):
    """A spin's condition to go on, with its deadline: ``cond`` while fewer than ``BOUND_NS``
    nanoseconds have passed since ``t0`` (no deadline when ``BOUND_NS`` is 0)."""
    if BOUND_NS > 0:
        return cond & ((kl.now() - t0) < BOUND_NS)
    else:
        return cond


@triton.jit
def spun(kt, name: tl.constexpr, t0, addr, owner, producer, value, expected, CMP: tl.constexpr, spins, still):
    """Record a finished spin (WAIT): begun at ``t0``, polling ``addr`` ``spins`` times, last
    seeing ``value``; ``still`` is its loop condition after the loop (true: it gave up at its
    deadline)."""
    if kt.ON:
        t1 = kl.now()
        kt = kl.record_wait(kt, name, t0, t1, producer, spins, flag_word(addr, owner), _i32(value), _i32(expected),
                            CMP, still, FLUSHED=True)
    return kt


@triton.jit
def _owner_of(owner, i):
    if owner is None:
        return None
    else:
        return _element(tl.cast(owner, tl.int64), i)


@triton.jit
def waited(kt, name: tl.constexpr, t0, addr, owner, producer, expected, CMP: tl.constexpr):
    """Record a call that waited (a declared helper) from ``t0`` until now: one WAIT per address
    of ``addr`` (a block: each element, up to :data:`MAX_ELEMENTS`), each seeing the value it
    waited for (the call returned, so the comparison held)."""
    if kt.ON:
        t1 = kl.now()
        if len(addr.shape) == 0:
            e = _i32(expected)
            kt = kl.record_wait(kt, name, t0, t1, producer, 1, flag_word(addr, owner), e, e, CMP, False, FLUSHED=True)
        else:
            a = tl.reshape(addr.to(tl.int64), addr.numel)
            ex = tl.cast(expected, tl.int32)
            pr = tl.cast(producer, tl.int32)
            for i in tl.static_range(min(addr.numel, MAX_ELEMENTS)):
                e = _element(ex, i)
                # (the first one stored by the next, and so on: only the last stays pending)
                kt = kl.record_wait(kt, name, t0, t1, _element(pr, i), 1, _with_owner(_element(a, i), _owner_of(owner, i)),
                                    e, e, CMP, False)
    return kt


@triton.jit
def stamp(addr):
    """The timer before an atomic or store on ``addr`` when it is one address (a notify); 0 for a
    block of addresses, which :func:`notified` does not record (no timer read is made)."""
    if len(addr.shape) == 0:
        return kl.now()
    else:
        return 0


@triton.jit
def peek(addr):
    """The flag(s) at ``addr`` as they are now (a volatile load: read again at every call)."""
    return tl.load(addr, volatile=True)


@triton.jit
def unmet(v, expected, CMP: tl.constexpr):
    """Whether the value read (any element of a block) does not yet compare ``CMP`` to ``expected``
    (a scalar int1: what a poll goes on while)."""
    if CMP == 1:
        ok = v == expected
    elif CMP == 2:
        ok = v != expected
    elif CMP == 3:
        ok = v >= expected
    elif CMP == 4:
        ok = v > expected
    elif CMP == 5:
        ok = v <= expected
    else:
        ok = v < expected
    if len(ok.shape) == 0:
        return ok == 0
    else:
        return tl.min(tl.reshape(ok.to(tl.int32), ok.numel), axis=0) == 0


@triton.jit
def polled(kt, name: tl.constexpr, t0, addr, producer, value, expected, CMP: tl.constexpr, spins, still):
    """Record a declared wait that ktrace polled itself (WAIT: from ``t0`` until now, ``spins``
    reads, last seeing ``value``; ``still``: it gave up at the deadline). One per address of a
    block (up to :data:`MAX_ELEMENTS`), each with its own last value."""
    if kt.ON:
        t1 = kl.now()
        if len(addr.shape) == 0:
            kt = kl.record_wait(kt, name, t0, t1, producer, spins, flag_word(addr, None), _i32(value), _i32(expected), CMP,
                                still, FLUSHED=True)
        else:
            a = tl.reshape(addr.to(tl.int64), addr.numel)
            vs = tl.cast(tl.reshape(value, value.numel), tl.int32)
            ex = tl.cast(expected, tl.int32)
            pr = tl.cast(producer, tl.int32)
            for i in tl.static_range(min(addr.numel, MAX_ELEMENTS)):
                kt = kl.record_wait(kt, name, t0, t1, _element(pr, i), spins, _element(a, i), _element(vs, i),
                                    _element(ex, i), CMP, still)
    return kt


@triton.jit
def notified(kt, name: tl.constexpr, t0, addr, owner, value):
    """Record an atomic on a scalar address as a NOTIFY (issued between ``t0`` and now). An
    atomic on a block of addresses is data (a reduction, a histogram), not a signal: nothing."""
    if kt.ON:
        if len(addr.shape) == 0:
            t1 = kl.now()
            kt = kl.flush_single(kt)  # (after the release, as ktrace.shmem.notify does)
            kt = kl.record_notify(kt, name, t0, t1, -1, _i32(value), flag_word(addr, owner), 0)
    return kt


@triton.jit
def notified_each(kt, name: tl.constexpr, t0, addr, owner, value):
    """Record a declared notify: one NOTIFY per address of ``addr`` (a block: each element, up to
    :data:`MAX_ELEMENTS`)."""
    if kt.ON:
        t1 = kl.now()
        kt = kl.flush_single(kt)  # (after the release, as ktrace.shmem.notify does)
        if len(addr.shape) == 0:
            kt = kl.record_notify(kt, name, t0, t1, -1, _i32(value), flag_word(addr, owner), 0)
        else:
            a = tl.reshape(addr.to(tl.int64), addr.numel)
            v = tl.cast(value, tl.int32)
            for i in tl.static_range(min(addr.numel, MAX_ELEMENTS)):
                kt = kl.record_notify(kt, name, t0, t1, -1, _element(v, i), _with_owner(_element(a, i), _owner_of(owner, i)), 0)
    return kt
