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

Cost (per probe, per lane; NVIDIA sm_90+)
    ``init``: the SM id, the program id and one index per thread (to pick the writing thread).
    ``begin``: one timer read. ``end`` / ``mark`` / ``counter``: one timer read and one 32-byte
    record (two 16-byte stores from one thread), as ``ktrace.language``. ``wait``: two timer
    reads around the wait and 64 bytes stored after it. ``arrive`` / ``expect``: the barrier
    operation, then one timer read and 64 bytes stored (after the operation: the release
    never waits for the record).
"""

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier
from triton.language import core

from . import language as _kl
from . import schema as _schema

_SPAN: gl.constexpr = gl.constexpr(int(_schema.EventKind.SPAN))
_INSTANT: gl.constexpr = gl.constexpr(int(_schema.EventKind.INSTANT))
_COUNTER: gl.constexpr = gl.constexpr(int(_schema.EventKind.COUNTER))
_WAIT: gl.constexpr = gl.constexpr(int(_schema.EventKind.WAIT))
_NOTIFY: gl.constexpr = gl.constexpr(int(_schema.EventKind.NOTIFY))
_DETAIL: gl.constexpr = gl.constexpr(int(_schema.EventKind.DETAIL))
_LOCAL_DETAIL: gl.constexpr = gl.constexpr(int(_schema.EventFlag.DETAIL | _schema.EventFlag.LOCAL))
_EQ: gl.constexpr = gl.constexpr(int(_schema.Cmp.EQ))
_WORDS: gl.constexpr = gl.constexpr(_schema.RECORD_BYTES // 8)
_HEADER_WORDS: gl.constexpr = gl.constexpr(_schema.HEADER_BYTES // 8)

# The record stores are ktrace.language's (one asm block, predicated on the writing thread).
_ST_RECORD_PTX: gl.constexpr = gl.constexpr(_kl._ST_RECORD_PTX)
_ST_RECORD2_PTX: gl.constexpr = gl.constexpr(_kl._ST_RECORD2_PTX)

region = _kl.region
_tag = _kl._tag




@gluon.jit
def now():
    """Read ``%globaltimer`` (int64 ns) in every thread; ordered with the surrounding memory
    operations at compile time (side effects + memory clobber), as ``ktrace.language.now``."""
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,~{memory}", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def _smid():
    return gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)


@core._aggregate
class Tracer:
    """A lane's view of the event buffer (on). Created by :func:`init`."""

    recs: gl.tensor  # *int64: this lane's first slot
    dropped_ptr: gl.tensor  # *int32: this lane's dropped counter
    cur: gl.tensor  # int32: next free slot
    nd: gl.tensor  # int32: events dropped so far
    hw: gl.tensor  # int64: SM id, pre-shifted into the tag word's high half
    lead: gl.tensor  # int32 [threads of the lane], one element per thread: 1 in the lane's thread 0
    CAP: gl.constexpr
    ON: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, recs, dropped_ptr, cur, nd, hw, lead, CAP):
        self.recs = recs
        self.dropped_ptr = dropped_ptr
        self.cur = cur
        self.nd = nd
        self.hw = hw
        self.lead = lead
        self.CAP = gl.constexpr(CAP)
        self.ON = gl.constexpr(True)


@core._aggregate
class NoTracer:
    """The tracer of an untraced launch: every probe on it compiles to nothing."""

    CAP: gl.constexpr
    ON: gl.constexpr

    @gluon.constexpr_function
    def __init__(self):
        self.CAP = gl.constexpr(0)
        self.ON = gl.constexpr(False)


@core._aggregate
class Span:
    """An open span (returned by :func:`begin`)."""

    t0: gl.tensor
    args: gl.tensor
    REGION: gl.constexpr
    ON: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, t0, args, REGION):
        self.t0 = t0
        self.args = args
        self.REGION = gl.constexpr(REGION)
        self.ON = gl.constexpr(True)


@core._aggregate
class NoSpan:
    ON: gl.constexpr

    @gluon.constexpr_function
    def __init__(self):
        self.ON = gl.constexpr(False)


@gluon.constexpr_function
def _check_lanes(lanes, lane):
    if isinstance(lanes, bool) or not isinstance(lanes, int) or not 1 <= lanes <= _schema.MAX_LANES:
        raise TypeError(f"KTRACE_LANES must be an int in 1..{_schema.MAX_LANES}, got {lanes!r}")
    if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane < lanes:
        raise ValueError(f"a lane number must be a compile-time int in 0..{lanes - 1} (KTRACE_LANES={lanes}), got {lane!r}")
    return lanes


@gluon.jit
def _pack(a, b):
    return (a.to(gl.int64) & 0xFFFFFFFF) | (b.to(gl.int64) << 32)


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
        A tracer for the other probes (a no-op tracer when ``KTRACE == 0``).

    Cost: when on, reads the SM id, the program id and one per-thread index; writes nothing.
    """
    if _kl._check_gate(KTRACE) > 0:
        L: gl.constexpr = _check_lanes(KTRACE_LANES, lane)
        n0 = gl.num_programs(0)
        n1 = gl.num_programs(1)
        n2 = gl.num_programs(2)
        pid = (gl.program_id(2).to(gl.int64) * n1 + gl.program_id(1)) * n0 + gl.program_id(0)
        vp = pid * L + lane
        n_virtual = n0.to(gl.int64) * n1 * n2 * L
        recs = ktrace_buf + _HEADER_WORDS + vp * (KTRACE * _WORDS)
        dropped = (ktrace_buf + _HEADER_WORDS + n_virtual * (KTRACE * _WORDS)).to(gl.pointer_type(gl.int32), bitcast=True) + vp
        hw = _smid().to(gl.int64) << 32
        # one element per thread of this lane, numbered in the lane's own threads (a partition's
        # threads are numbered from 0 in its layouts): the element 0 thread writes the records
        NW: gl.constexpr = gl.num_warps()
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
        lead = (gl.arange(0, 32 * NW, layout) == 0).to(gl.int32)
        return Tracer(recs, dropped, gl.to_tensor(0), gl.to_tensor(0), hw, lead, KTRACE)
    else:
        return NoTracer()


@gluon.jit
def _write(kt, t0, t1, tag, args):
    """Store one 32-byte record at the cursor (or count it dropped) and advance."""
    fits = (kt.cur < kt.CAP).to(gl.int32)
    nd = kt.nd + (1 - fits)
    p = (kt.recs + kt.cur * _WORDS).to(gl.int64, bitcast=True)
    gl.inline_asm_elementwise(
        _ST_RECORD_PTX, "=r,l,l,l,l,l,r,l,r,r,~{memory}",
        [p, t0.to(gl.int64), t1.to(gl.int64), kt.hw | tag, args.to(gl.int64), kt.lead & fits,
         kt.dropped_ptr.to(gl.int64, bitcast=True), nd, kt.lead & (1 - fits)],
        dtype=gl.int32, is_pure=False, pack=1)
    return Tracer(kt.recs, kt.dropped_ptr, kt.cur + 1, nd, kt.hw, kt.lead, kt.CAP)


@gluon.jit
def _write_ext(kt, t0, t1, tag, args, x0, x1, x23):
    """Store an event and its DETAIL record (two slots, one thread) or count it dropped."""
    fits = (kt.cur + 1 < kt.CAP).to(gl.int32)
    nd = kt.nd + (1 - fits)
    p = (kt.recs + kt.cur * _WORDS).to(gl.int64, bitcast=True)
    dtag = kt.hw | _tag(_DETAIL, 0, 0)
    gl.inline_asm_elementwise(
        _ST_RECORD2_PTX, "=r,l,l,l,l,l,l,l,l,l,r,l,r,r,~{memory}",
        [p, t0.to(gl.int64), t1.to(gl.int64), kt.hw | tag, args.to(gl.int64), x0.to(gl.int64), x1.to(gl.int64), dtag,
         x23.to(gl.int64), kt.lead & fits, kt.dropped_ptr.to(gl.int64, bitcast=True), nd, kt.lead & (1 - fits)],
        dtype=gl.int32, is_pure=False, pack=1)
    return Tracer(kt.recs, kt.dropped_ptr, kt.cur + 2, nd, kt.hw, kt.lead, kt.CAP)


@gluon.jit
def begin(kt, name: gl.constexpr, arg0=0, arg1=0):
    """Open a span named ``name`` (a compile-time string). Cost: one timer read."""
    if kt.ON:
        return Span(now(), _pack(gl.to_tensor(arg0), gl.to_tensor(arg1)), region(name))
    else:
        return NoSpan()


@gluon.jit
def end(kt, span):
    """Close ``span`` and record it (kind SPAN). Returns the advanced tracer.

    Cost: one timer read and one 32-byte record store by the lane's thread 0.
    """
    if kt.ON:
        t1 = now()
        return _write(kt, span.t0, t1, _tag(_SPAN, span.REGION, 0), span.args)
    else:
        return kt


@gluon.jit
def mark(kt, name: gl.constexpr, arg0=0, arg1=0):
    """Record an instant named ``name`` with two int32 arguments. Cost: one timer read, one record."""
    if kt.ON:
        t = now()
        return _write(kt, t, t, _tag(_INSTANT, region(name), 0), _pack(gl.to_tensor(arg0), gl.to_tensor(arg1)))
    else:
        return kt


@gluon.jit
def counter(kt, name: gl.constexpr, value):
    """Record the int64 ``value`` of counter ``name`` now. Cost: one timer read, one record."""
    if kt.ON:
        t = now()
        return _write(kt, t, t, _tag(_COUNTER, region(name), 0), gl.to_tensor(value).to(gl.int64))
    else:
        return kt


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
        t0 = now()
        mbarrier.wait(bar, phase & 1)
        t1 = now()
        ph = gl.to_tensor(phase)
        tag = _tag(_WAIT, region(name), _LOCAL_DETAIL)
        return _write_ext(kt, t0, t1, tag, _pack(gl.to_tensor(-1), gl.to_tensor(-1)), _barrier_key(region(name), index), ph,
                          _pack(ph, gl.to_tensor(_EQ)))
    else:
        mbarrier.wait(bar, phase & 1)
        return kt


@gluon.jit
def _released(kt, name: gl.constexpr, index, phase):
    t = now()
    return _write_ext(kt, t, t, _tag(_NOTIFY, region(name), _LOCAL_DETAIL), _pack(gl.to_tensor(-1), gl.to_tensor(phase)),
                      _barrier_key(region(name), index), gl.to_tensor(0), gl.to_tensor(0))


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

_GE: gl.constexpr = gl.constexpr(int(_schema.Cmp.GE))
_FLAG_TIMEOUT_SHIFT: gl.constexpr = gl.constexpr(_schema.KIND_BITS + int(_schema.EventFlag.TIMEOUT).bit_length() - 1)


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
        t0 = now()
        gl.atomic_xchg(remote, value, sem="release", scope="sys")
        t1 = now()
        return _write_ext(kt, t0, t1, _tag(_NOTIFY, region(name), _kl._FLAG_DETAIL), _pack(gl.to_tensor(peer), gl.to_tensor(value)),
                          gl.to_tensor(offset), kt.cur, gl.to_tensor(0))
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
    t0 = now()
    v = _load_acquire(flag)
    spins = gl.to_tensor(1)
    ok = v >= expected
    t1 = t0
    stop = ok
    while not stop:
        v = _load_acquire(flag)
        spins += 1
        ok = v >= expected
        t1 = now()
        stop = ok | ((t1 - t0) > timeout_ns)
    if kt.ON:
        failed = (ok == 0).to(gl.int64)
        tag = _tag(_WAIT, region(name), _kl._FLAG_DETAIL) | (failed << _FLAG_TIMEOUT_SHIFT)
        kt = _write_ext(kt, t0, t1, tag, _pack(gl.to_tensor(peer), spins), gl.to_tensor(offset), v,
                        _pack(gl.to_tensor(expected), gl.to_tensor(_GE)))
    return kt, ok


@gluon.jit
def timestamp(kt):
    """The timer (int64 ns) if ``kt`` is on, else the constant 0 (no instruction)."""
    if kt.ON:
        return now()
    else:
        return 0


__all__ = ["Tracer", "NoTracer", "Span", "NoSpan", "init", "begin", "end", "mark", "counter", "wait", "arrive", "expect",
           "notify_flag", "wait_flag",
           "now", "timestamp", "region"]
