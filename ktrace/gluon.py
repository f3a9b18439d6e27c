"""Device-side probes for ``@gluon.jit`` kernels: ``import ktrace.gluon as kg``.

The same records as ``ktrace.language`` (``ktrace.schema``), written per **lane**: a warp
group or a ``gl.warp_specialize`` partition of a program. Each lane opens its own tracer, with
its lane number, and owns its own slots and dropped counter (lane ``l`` of program ``g`` is
virtual program ``g * LANES + l`` of the buffer: ``ktrace.schema``'s *Lanes*), so lanes never
share a slot and need no atomics::

    @ktrace.trace(lanes=(epilogue, loader, mma))      # lane 0, 1, 2: named after the functions
    @gluon.jit
    def gemm(..., ktrace_buf=None, KTRACE: gl.constexpr = 0, KTRACE_LANES: gl.constexpr = 1):
        gl.warp_specialize([(epilogue, (..., ktrace_buf, KTRACE, KTRACE_LANES)),
                            (loader, (..., ktrace_buf, KTRACE, KTRACE_LANES)), ...], [1, 1], [24, 24])

    @gluon.jit
    def loader(..., ktrace_buf, KTRACE: gl.constexpr, KTRACE_LANES: gl.constexpr):
        kt = kg.init(ktrace_buf, KTRACE, KTRACE_LANES, 1)           # lane 1
        kt = kg.wait(kt, empty.index(s), u - 1, "empty", s)         # a traced mbarrier wait
        kt = kg.expect(kt, ready.index(s), nbytes, u, "ready", s)   # expect-tx: TMA completes phase u
        ...

``KTRACE`` is the compile-time gate and the slots per lane (0: every probe compiles to nothing,
checked on the PTX in tests/test_gluon.py); ``@ktrace.trace`` passes it and ``KTRACE_LANES``.

One thread per lane writes: the partition's thread 0 (its first thread in the partition's own
numbering, which Gluon's layouts give: ``gl.arange`` over one element per thread). It stores
its own two timer readings, so a record's end is never before its start.

mbarrier hand-offs
    :func:`wait` times an ``mbarrier.wait`` and records a WAIT with the LOCAL flag: its barrier
    (``flag``: the barrier array's name and index, ``schema.barrier_key``) and the phase it
    waited for (``expected``). Phases are numbered from 0 by completion: a barrier's k-th
    completion completes phase k; waiting for phase -1 (the free pass of a barrier just
    initialised, parity 1) returns at once. :func:`arrive` and :func:`expect` record what
    completes a phase (a NOTIFY with the LOCAL flag: ``value`` is the phase): an arrive, or an
    expect-tx whose TMA copies complete it when their bytes land (the record is the moment the
    copies were requested). ``ktrace.pairing`` pairs them by (rank, launch, program, barrier,
    phase): the arrow of a trace goes from the arrive (or expect) to the wait it released.
    Pass the phase *number* (``i // STAGES``): the probes take its parity for the hardware.
    ``spins`` is -1: an mbarrier wait suspends in hardware (``try_wait``), it is not polled.

One probe core
    ``begin``, ``end``, ``mark``, ``counter``, ``timestamp``, ``now``, ``record_wait``,
    ``record_notify`` (``ktrace.language.SHARED``) are ``ktrace.language``'s own jit functions,
    with the same signatures: called from a ``@gluon.jit`` kernel they compile with Gluon's
    semantics on the lane's tracer (whose writing thread is a tensor over the lane's threads).
    What is Gluon's alone is here: :func:`init` (lanes), the mbarrier probes and the flags
    across ranks, which record through ``record_wait`` / ``record_notify``.

Cost (per probe, per lane; NVIDIA sm_90+)
    ``init``: the SM id, the program id and one index per thread (to pick the writing thread).
    ``begin``: one timer read. ``end`` / ``mark`` / ``counter``: one timer read and one 32-byte
    record (two 16-byte stores from one thread), as ``ktrace.language``. ``wait``: two timer
    reads around the wait and 64 bytes stored after it. ``arrive`` / ``expect``: the barrier
    operation, then one timer read and 64 bytes stored (after the operation: the release
    never waits for the record).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from . import language as kl
from . import schema as _schema

# The probes both DSLs share, taken as they are from the core (kl.SHARED): a probe added there is
# here too. (Explicit names for readers: begin, end, mark, counter, timestamp, now, hw_id, region,
# slots, pack, record_wait, record_notify, and the Tracer / NoTracer / Span / NoSpan aggregates.)
globals().update({_name: getattr(kl, _name) for _name in kl.SHARED})

_EQ: gl.constexpr = gl.constexpr(int(_schema.Cmp.EQ))
_GE: gl.constexpr = gl.constexpr(int(_schema.Cmp.GE))
_WORDS: gl.constexpr = gl.constexpr(_schema.RECORD_BYTES // 8)
_HEADER_WORDS: gl.constexpr = gl.constexpr(_schema.HEADER_BYTES // 8)
_RING_GATE = _schema.RING_GATE  # (a plain int: read by _lane_slots)


@gluon.constexpr_function
def _lane_slots(gate):
    """Slots per lane of a ``KTRACE`` gate (0: off). Ring mode (the flight recorder) is refused:
    it keeps no lanes (each lane's ring would be sized as a program's, and not stamped)."""
    n = kl.slots(gate)
    if gate >= _RING_GATE:
        raise ValueError("ring mode (the flight recorder, KTRACE = RING_GATE | N) records @triton.jit kernels only, "
                         "not @gluon.jit kernels traced per lane")
    return n


@gluon.constexpr_function
def _check_lanes(lanes, lane):
    if isinstance(lanes, bool) or not isinstance(lanes, int) or not 1 <= lanes <= _schema.MAX_LANES:
        raise TypeError(f"KTRACE_LANES must be an int in 1..{_schema.MAX_LANES}, got {lanes!r}")
    if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane < lanes:
        raise ValueError(f"a lane number must be a compile-time int in 0..{lanes - 1} (KTRACE_LANES={lanes}), got {lane!r}")
    return lanes


@gluon.jit
def init(ktrace_buf, KTRACE: gl.constexpr, KTRACE_LANES: gl.constexpr, lane: gl.constexpr):
    """Open this lane's tracer. Call once in each partition (or warp group) that records.

    Args:
        ktrace_buf: the kernel's ``ktrace_buf`` parameter (passed on to the partition).
        KTRACE: the kernel's ``KTRACE`` constexpr: 0 = off, N = slots per lane.
        KTRACE_LANES: the kernel's ``KTRACE_LANES`` constexpr (lanes per program).
        lane: this lane's number, a compile-time int below ``KTRACE_LANES`` (the place of its
            partition in the decorator's ``lanes``).

    Returns:
        A tracer for the other probes (``ktrace.language.Tracer``, its writing thread the lane's
        thread 0; a no-op tracer when ``KTRACE == 0``).

    Cost: when on, reads the SM id, the program id and one per-thread index; writes nothing.
    """
    if _lane_slots(KTRACE) > 0:
        L: gl.constexpr = _check_lanes(KTRACE_LANES, lane)
        n0 = gl.num_programs(0)
        n1 = gl.num_programs(1)
        n2 = gl.num_programs(2)
        pid = (gl.program_id(2).to(gl.int64) * n1 + gl.program_id(1)) * n0 + gl.program_id(0)
        vp = pid * L + lane
        n_virtual = n0.to(gl.int64) * n1 * n2 * L
        recs = ktrace_buf + _HEADER_WORDS + vp * (KTRACE * _WORDS)
        dropped = (ktrace_buf + _HEADER_WORDS + n_virtual * (KTRACE * _WORDS)).to(gl.pointer_type(gl.int32), bitcast=True) + vp
        hw = kl.hw_id().to(gl.int64) << 32
        # one element per thread of this lane, numbered in the lane's own threads (a partition's
        # threads are numbered from 0 in its layouts): the element 0 thread writes the records
        NW: gl.constexpr = gl.num_warps()
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
        lead = (gl.arange(0, 32 * NW, layout) == 0).to(gl.int32)
        return kl.Tracer(recs, dropped, gl.to_tensor(0), gl.to_tensor(0), hw, lead, KTRACE)
    else:
        return kl.NoTracer()


@gluon.jit
def _barrier_key(rid: gl.constexpr, index):
    return (gl.to_tensor(index).to(gl.int64) & 0xFFFFFFFF) | (rid << 32)


@gluon.jit
def wait(kt, bar, phase, name: gl.constexpr, index=0, record: gl.constexpr = True):
    """``mbarrier.wait`` for phase ``phase`` of barrier ``name[index]``, traced.

    Args:
        kt: the lane's tracer.
        bar: the barrier (a shared-memory mbarrier, e.g. ``bars.index(s)``).
        phase: the phase waited for, numbered by completion (the hardware waits on its parity);
            -1: the free pass of a barrier just initialised.
        name: the barrier array's name (compile-time string); ``index``: the barrier within it.
        record: a compile-time switch: False waits without recording (a kernel's probe density).

    Returns:
        The advanced tracer (reassign it). Records WAIT | LOCAL (two slots): start, end,
        ``flag`` = the barrier, ``expected`` = ``value`` = the phase, ``spins`` = -1.

    Cost: two timer reads and 64 bytes stored by the lane's thread 0 after the wait.
    """
    if kt.ON and record:
        t0 = kl.now()
        mbarrier.wait(bar, phase & 1)
        t1 = kl.now()
        ph = gl.to_tensor(phase)
        return kl.record_wait(kt, name, t0, t1, -1, -1, _barrier_key(kl.region(name), index), ph, ph, _EQ, False, LOCAL=True)
    else:
        mbarrier.wait(bar, phase & 1)
        return kt


@gluon.jit
def _released(kt, name: gl.constexpr, index, phase):
    t = kl.now()
    return kl.record_notify(kt, name, t, t, -1, phase, _barrier_key(kl.region(name), index), 0, LOCAL=True)


@gluon.jit
def arrive(kt, bar, phase, name: gl.constexpr, index=0, count: gl.constexpr = 1, record: gl.constexpr = True):
    """``mbarrier.arrive(bar, count=count)``, recorded as completing phase ``phase`` of ``name[index]``.

    Records NOTIFY | LOCAL (two slots) after the arrive. Cost: one timer read and 64 bytes.
    """
    mbarrier.arrive(bar, count=count)
    if kt.ON and record:
        return _released(kt, name, index, phase)
    else:
        return kt


@gluon.jit
def expect(kt, bar, nbytes: gl.constexpr, phase, name: gl.constexpr, index=0, record: gl.constexpr = True):
    """``mbarrier.expect(bar, nbytes)``: the TMA copies issued next complete phase ``phase`` of
    ``name[index]`` when their bytes land. Recorded (NOTIFY | LOCAL) as that phase's release,
    at the moment the copies are requested. Cost: one timer read and 64 bytes."""
    mbarrier.expect(bar, nbytes)
    if kt.ON and record:
        return _released(kt, name, index, phase)
    else:
        return kt


# ---------------------------------------------------------------------------------------------
# flags across ranks (the symmetric heap: ``ktrace.shmem.gluon`` translates the pointers)
# ---------------------------------------------------------------------------------------------


@gluon.jit
def _load_acquire(ptr):
    return gl.inline_asm_elementwise("ld.acquire.sys.global.b32 $0, [$1];", "=r,l,~{memory}", [ptr], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def notify_flag(kt, remote, value, peer, offset, name: gl.constexpr = "notify"):
    """Signal ``peer``: a barrier of the calling partition, then one release atomic exchange of ``value``
    into ``remote`` (the peer's flag, a translated pointer) at system scope. Traced: a NOTIFY
    (two slots: peer, value, the flag's heap ``offset``, the slot as sequence number) stored
    after the release.

    Ordering: the barrier orders every write of this partition's threads before the release;
    a peer that reads the flag with acquire sees them. Cost: one barrier, one remote atomic;
    traced, two timer reads and 64 bytes stored after the release.
    """
    gl.thread_barrier()
    if kt.ON:
        t0 = kl.now()
        gl.atomic_xchg(remote, value, sem="release", scope="sys")
        t1 = kl.now()
        return kl.record_notify(kt, name, t0, t1, peer, value, offset, kt.cur)
    else:
        gl.atomic_xchg(remote, value, sem="release", scope="sys")
        return kt


@gluon.jit
def wait_flag(kt, flag, expected, peer, offset, timeout_ns: gl.constexpr = 5_000_000_000, name: gl.constexpr = "wait"):
    """Spin until this rank's ``flag`` (int32) is at least ``expected``, with acquire loads in
    every thread, giving up after ``timeout_ns``. Traced: a WAIT (two slots: peer, spins, the
    flag's heap ``offset``, the last value, expected, ``ge``; TIMEOUT when it gave up).

    Returns ``(kt, ok)``. Cost: one acquire load when the flag is set; per further spin one
    acquire load and one timer read; traced, 64 bytes stored after the spin. A wait that gives
    up is in the trace only (not in the heap's error block, which ``ktrace.shmem``'s Triton
    waits fill).
    """
    t0 = kl.now()
    v = _load_acquire(flag)
    spins = gl.to_tensor(1)
    ok = v >= expected
    t1 = t0
    stop = ok
    while not stop:
        v = _load_acquire(flag)
        spins += 1
        ok = v >= expected
        t1 = kl.now()
        stop = ok | ((t1 - t0) > timeout_ns)
    if kt.ON:
        kt = kl.record_wait(kt, name, t0, t1, peer, spins, offset, v, expected, _GE, ok == 0)
    return kt, ok


__all__ = [*kl.SHARED, "init", "wait", "arrive", "expect", "notify_flag", "wait_flag"]
