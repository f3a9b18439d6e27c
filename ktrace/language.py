"""Device-side probes: ``import ktrace.language as kl`` inside ``@triton.jit`` code.

A traced kernel declares two trailing parameters and opens a tracer once per program::

    @ktrace.trace
    @triton.jit
    def copy(x, y, n, BLOCK: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        kt = kl.init(ktrace_buf, KTRACE)
        s = kl.begin(kt, "copy", tl.program_id(0))
        ...
        kt = kl.end(kt, s)

``KTRACE`` is the compile-time gate and the number of event slots each program owns. With
``KTRACE == 0`` (the default, and what an untraced launch gets) every probe is resolved at
compile time to nothing: the kernel's PTX/AMDGCN holds no timer read and no record store
(tests/test_compile.py checks this). ``@ktrace.trace`` fills both parameters when tracing is on.

Writers (``end``, ``mark``, ``counter``) return the tracer with its slot cursor advanced:
reassign it (``kt = kl.end(kt, s)``), in loops too. Each program writes only its own slots, with
no atomics; an event that does not fit is counted in the program's dropped counter and never
written out of bounds.

Timestamps
    NVIDIA: ``mov.u64 %globaltimer`` (ns; it updates every 32 ns on H100/H200).
    AMD CDNA: ``s_waitcnt vmcnt(0); s_memrealtime; s_waitcnt lgkmcnt(0)`` (100 MHz on MI300).
    The read is inline assembly marked as having side effects and clobbering memory, so
    neither Triton's passes nor LLVM move loads or stores across it: in program order, the
    memory instructions of a region stay between its two timer reads (checked on the PTX and
    the LLVM IR in tests/test_compile.py). What the read does NOT order differs by vendor:

    * NVIDIA: loads and stores are asynchronous. A timestamp taken after a ``tl.load`` is
      taken after the load was *issued*, not after its data arrived; a ``tl.store`` is
      fire-and-forget. A region ends when its last instruction issued. To time data arrival,
      end the region after an instruction that uses the loaded value.
    * AMD: ``s_waitcnt vmcnt(0)`` before the read waits for every outstanding vector memory
      operation of the wavefront, so a timestamp follows the completion of earlier loads (and
      the acknowledgement of earlier stores). This costs the latency of whatever is in flight.

Cost (per probe, per program; cycles measured in a loop on an H200, see docs/probes.md)
    ``begin``: one timer read (12 cycles), nothing written.
    ``end`` / ``mark`` / ``counter``: one timer read, a few integer ops and, on NVIDIA, one asm
    block in which thread 0 stores the 32-byte record as two 16-byte stores when its slot is
    free, or the 4-byte dropped count when it is not (about 72 cycles in all); on AMD four 8-byte
    scalar stores. One thread writes every word of a record, so its start and end are that
    thread's own readings.
    ``init``: one read of the SM id (NVIDIA) or HW_ID/XCC_ID registers (AMD), the grid size, and
    (NVIDIA) whether this thread is thread 0, read once so that no record re-reads it.
    Events carrying a DETAIL record (waits, notifies) store 64 bytes (four 16-byte stores, about
    92 cycles).
    The event buffer must be 16-byte aligned (records are 32-byte aligned inside it): every torch
    allocation and every buffer ``@ktrace.trace`` makes is.

Hand-offs
    A store issued just before a release (``ks.notify``) is waited for by that release. In a
    kernel prepared by ``@ktrace.trace`` the tracer is a :class:`DeferredTracer`: a WAIT, a
    NOTIFY and the last span/instant/counter wait in registers and are stored behind the next
    wait's first read of its flag, after the next release, or by :func:`finish` (which the
    decorator appends). docs/probes.md ("Deferred records") has where each goes and the figures.
"""


import triton
import triton.language as tl
from triton.language import core

from . import regions as _regions
from . import schema as _schema

#: ``@ktrace.trace`` may prepare kernels that call this module's ``init`` (it has ``init_deferred``
#: and ``finish``): see ``ktrace.decorator._deferring_kernel``.
__ktrace_deferrable__ = True

# Integer constants the jit code below uses (module-level ints are compile-time constants).
_SPAN: tl.constexpr = tl.constexpr(int(_schema.EventKind.SPAN))
_INSTANT: tl.constexpr = tl.constexpr(int(_schema.EventKind.INSTANT))
_COUNTER: tl.constexpr = tl.constexpr(int(_schema.EventKind.COUNTER))
_WAIT: tl.constexpr = tl.constexpr(int(_schema.EventKind.WAIT))
_NOTIFY: tl.constexpr = tl.constexpr(int(_schema.EventKind.NOTIFY))
_DETAIL: tl.constexpr = tl.constexpr(int(_schema.EventKind.DETAIL))
# a wait's or notify's flags: it has a DETAIL record; LOCAL too inside one program (plain ints: read by _handoff_flags)
_HANDOFF_FLAGS = int(_schema.EventFlag.DETAIL)
_LOCAL_HANDOFF_FLAGS = int(_schema.EventFlag.DETAIL | _schema.EventFlag.LOCAL)
_TIMEOUT_SHIFT: tl.constexpr = tl.constexpr(_schema.KIND_BITS + int(_schema.EventFlag.TIMEOUT).bit_length() - 1)
_WORDS: tl.constexpr = tl.constexpr(_schema.RECORD_BYTES // 8)  # int64 words per record
_HEADER_WORDS: tl.constexpr = tl.constexpr(_schema.HEADER_BYTES // 8)
_NOW_WORDS: tl.constexpr = tl.constexpr(_schema.NOW_BYTES // 8)
_RING_GATE = _schema.RING_GATE  # (a plain int: read by the constexpr functions below)
_INJECT_GATE = _schema.INJECT_GATE
_INJECT_ROWS: tl.constexpr = tl.constexpr(_schema.INJECT_ROWS)
_INJECT_ROW_WORDS: tl.constexpr = tl.constexpr(_schema.INJECT_ROW_WORDS)
_INJECT_WORDS: tl.constexpr = tl.constexpr(_schema.INJECT_WORDS)
_INJECT_LAUNCH: tl.constexpr = tl.constexpr(_schema.INJECT_LAUNCH)


# ---------------------------------------------------------------------------------------------
# Compile-time helpers
# ---------------------------------------------------------------------------------------------


def _register_region(name):
    return _regions.register(name)


# Triton's dependency tracker refuses plain functions reached from jit code; this one only maps a
# name to its hash id (a kernel's cache key already covers the name), so let it pass.
_register_region.__triton_builtin__ = True


@triton.constexpr_function
def region(name):
    """The 24-bit id of a region name, computed at compile time (and registered on the host).

    Args:
        name: a string literal or a module-level string constant.
    """
    if not isinstance(name, str):
        raise TypeError(f"a ktrace region name must be a compile-time string, got {name!r}")
    return _register_region(name)


@triton.constexpr_function
def _tag(kind, rid, flags):
    return (kind & 0xF) | ((flags & 0xF) << _schema.KIND_BITS) | ((rid & _schema.REGION_MASK) << _schema.REGION_SHIFT)


@triton.constexpr_function
def _handoff_flags(local):
    """The flags of a wait's or a notify's record: DETAIL, and LOCAL for a hand-off inside one
    program (an mbarrier's, ``ktrace.gluon``)."""
    return _LOCAL_HANDOFF_FLAGS if local else _HANDOFF_FLAGS


@triton.constexpr_function
def slots(gate):
    """The event slots per program (per lane) a ``KTRACE`` gate gives, at compile time: 0 (off),
    N, or ring mode's N (``schema.RING_GATE | N``, bit removed). A value that is no gate is
    refused in one line (a non-negative int; ring mode's N a power of two >= 2)."""
    if isinstance(gate, bool) or not isinstance(gate, int) or gate < 0:
        raise TypeError(f"KTRACE must be a non-negative int (0 = off, N = event slots per program), got {gate!r}")
    gate = gate & ~_INJECT_GATE  # (delay injection: ``_injects``)
    n = gate - _RING_GATE if gate >= _RING_GATE else gate
    if gate >= _RING_GATE and (n < 2 or n & (n - 1)):
        raise ValueError(f"ring mode needs a power of two >= 2 of slots per lane, got {n}")
    return n


@triton.constexpr_function
def _is_ring(n):
    return (n & ~_INJECT_GATE) >= _RING_GATE


@triton.constexpr_function
def _injects(gate):
    """Whether a ``KTRACE`` gate compiles the delay-injection points in (``schema.INJECT_GATE``)."""
    return bool(gate & _INJECT_GATE) and slots(gate) > 0


# ---------------------------------------------------------------------------------------------
# Hardware reads, chosen by the compile target
# ---------------------------------------------------------------------------------------------


def _backend(_semantic):
    opts = _semantic.builder.options
    return getattr(opts, "backend_name", None) or ("hip" if "gfx" in str(getattr(opts, "arch", "")) else "cuda")


@core.extern
def now(_semantic=None):
    """Read the device timer (int64 raw ticks; ns on NVIDIA).

    Every thread executes the read; it is ordered with the surrounding memory operations at
    compile time (side effects + memory clobber). See the module docstring for what it does and
    does not order at run time.
    """
    if _backend(_semantic) == "cuda":
        return core.inline_asm_elementwise(
            "mov.u64 $0, %globaltimer;", "=l,~{memory}", [], dtype=core.int64, is_pure=False, pack=1, _semantic=_semantic
        )
    arch = str(_semantic.builder.options.arch)
    if "gfx11" in arch or "gfx12" in arch:
        raise NotImplementedError(f"ktrace's AMD timer supports CDNA (gfx9xx) targets, not {arch}")
    return core.inline_asm_elementwise(
        "s_waitcnt vmcnt(0)\n\ts_memrealtime $0\n\ts_waitcnt lgkmcnt(0)",
        "=s,~{memory}",
        [],
        dtype=core.int64,
        is_pure=False,
        pack=1,
        _semantic=_semantic,
    )


@core.extern
def hw_id(_semantic=None):
    """Where this program runs (int32): the SM id on NVIDIA; on AMD ``xcc << 16 | se << 5 | sh << 4 | cu``."""
    if _backend(_semantic) == "cuda":
        return core.inline_asm_elementwise(
            "mov.u32 $0, %smid;", "=r", [], dtype=core.int32, is_pure=True, pack=1, _semantic=_semantic
        )
    arch = str(_semantic.builder.options.arch)
    if arch.startswith("gfx94") or arch.startswith("gfx95"):
        asm = (
            "s_getreg_b32 $0, hwreg(HW_REG_HW_ID)\n\t"
            "s_bfe_u32 $0, $0, 0x80008\n\t"  # bits 15:8 -> cu[3:0] sh[4] se[7:5]
            "s_getreg_b32 $1, hwreg(HW_REG_XCC_ID)\n\t"
            "s_and_b32 $1, $1, 0xf\n\t"
            "s_lshl_b32 $1, $1, 16\n\t"
            "s_or_b32 $0, $0, $1"
        )
        return core.inline_asm_elementwise(
            asm, "=s,=&s", [], dtype=(core.int32, core.int32), is_pure=True, pack=1, _semantic=_semantic
        )[0]
    return core.inline_asm_elementwise(
        "s_getreg_b32 $0, hwreg(HW_REG_HW_ID)\n\ts_bfe_u32 $0, $0, 0x80008",
        "=s",
        [],
        dtype=core.int32,
        is_pure=True,
        pack=1,
        _semantic=_semantic,
    )


# ---------------------------------------------------------------------------------------------
# Tracer state
# ---------------------------------------------------------------------------------------------


@core._aggregate
class Tracer:
    """A program's view of the event buffer (on). Created by :func:`init`."""

    recs: tl.tensor  # *int64: this program's first slot
    dropped_ptr: tl.tensor  # *int32: this program's dropped counter
    cur: tl.tensor  # int32: next free slot
    nd: tl.tensor  # int32: events dropped so far
    hw: tl.tensor  # int64: placement, pre-shifted into the tag word's high half
    lead: tl.tensor  # int32: 1 in the thread that stores records (thread 0), else 0 (per thread)
    CAP: tl.constexpr
    ON: tl.constexpr
    RING: tl.constexpr  # ring mode (ktrace.flight): slot cur % CAP, dropped_ptr holds the head
    DEFER: tl.constexpr
    INJECT: tl.constexpr  # delay injection compiled in (``delay``)

    @triton.constexpr_function
    def __init__(self, recs, dropped_ptr, cur, nd, hw, lead, CAP, RING=False, INJECT=False):
        self.recs = recs
        self.dropped_ptr = dropped_ptr
        self.cur = cur
        self.nd = nd
        self.hw = hw
        self.lead = lead
        self.CAP = tl.constexpr(CAP)
        self.ON = tl.constexpr(True)
        self.RING = tl.constexpr(RING)
        self.DEFER = tl.constexpr(False)
        self.INJECT = tl.constexpr(INJECT)


@core._aggregate
class DeferredTracer:
    """A tracer whose records wait in registers for a moment when storing them costs nothing.

    Created by :func:`init_deferred`, which ``@ktrace.trace`` puts in place of :func:`init` (it
    also appends :func:`finish`). Three records can be pending, each with the slot it was given
    when it was made (slots stay in program order; the cursor and the dropped count are exact):

    * the last WAIT (+ DETAIL), kept as the spin's own values (packed into words only when
      stored): stored behind the next wait's first read of its flag, or by :func:`finish`;
    * the last NOTIFY (+ DETAIL), likewise: stored behind the next wait's first read, after the
      next notify's release, or by :func:`finish`;
    * the last span, instant or counter: stored by the next such probe, after the next notify's
      release, behind the next wait's first read, or by :func:`finish`.

    Thread 0 (NVIDIA) stores every word of a record from its own registers.

    Ring mode (``KTRACE = schema.RING_GATE | N``, ``ktrace.flight``): slot ``s`` is at ``s % N``
    (:func:`_slot`), nothing is dropped, and every store point stores all that is pending, then
    the lane's head (:func:`_ring_flush`): at most the latest probe's record waits in registers.
    """

    recs: tl.tensor  # *int64: this program's first slot
    dropped_ptr: tl.tensor  # *int32: this program's dropped counter (stored by finish; ring mode: the head)
    cur: tl.tensor  # int32: slots claimed so far
    nd: tl.tensor  # int32: events dropped so far
    hw: tl.tensor  # int64: placement, pre-shifted into the tag word's high half
    lead: tl.tensor  # int32: 1 in the thread that stores records, else 0
    # the pending WAIT, as the spin left it (packed into its two records only when stored, after
    # the release: no work between the spin and the release but copies)
    wslot: tl.tensor  # int32: its first slot
    wv: tl.tensor  # int32: 1 while a WAIT is pending
    wt0: tl.tensor  # int64
    wt1: tl.tensor  # int64
    wtag: tl.tensor  # int64: kind, region and DETAIL flag
    wfail: tl.tensor  # int32: timed out
    wpeer: tl.tensor  # int32
    wspins: tl.tensor  # int32
    woff: tl.tensor  # int64: flag offset
    wval: tl.tensor  # int32: last value read
    wexp: tl.tensor  # int32: expected
    wcmp: tl.tensor  # int32: comparison code
    # the pending NOTIFY, likewise (stored after the next wait's first read of its flag was issued)
    nslot: tl.tensor  # int32
    nv: tl.tensor  # int32: 1 while a NOTIFY is pending
    nt0: tl.tensor  # int64
    nt1: tl.tensor  # int64
    ntag: tl.tensor  # int64
    npeer: tl.tensor  # int32
    nval: tl.tensor  # int32: value written
    noff: tl.tensor  # int64: flag offset
    nseq: tl.tensor  # int32
    sp: tl.tensor  # int64: address of the pending single record
    s0: tl.tensor
    s1: tl.tensor
    s2: tl.tensor
    s3: tl.tensor
    sgo: tl.tensor  # int32: 1 in the storing thread while a single record is pending and fits
    CAP: tl.constexpr
    ON: tl.constexpr
    DEFER: tl.constexpr
    RING: tl.constexpr  # ring mode: slots ``slot % CAP``, dropped_ptr holds the head (stored prefix)
    INJECT: tl.constexpr  # delay injection compiled in (``delay``)

    @triton.constexpr_function
    def __init__(self, recs, dropped_ptr, cur, nd, hw, lead, w, n, sp, s0, s1, s2, s3, sgo, CAP, RING=False, INJECT=False):
        self.recs = recs
        self.dropped_ptr = dropped_ptr
        self.cur = cur
        self.nd = nd
        self.hw = hw
        self.lead = lead
        self.wslot, self.wv, self.wt0, self.wt1, self.wtag, self.wfail = w[0], w[1], w[2], w[3], w[4], w[5]
        self.wpeer, self.wspins, self.woff, self.wval, self.wexp, self.wcmp = w[6], w[7], w[8], w[9], w[10], w[11]
        self.nslot, self.nv, self.nt0, self.nt1, self.ntag = n[0], n[1], n[2], n[3], n[4]
        self.npeer, self.nval, self.noff, self.nseq = n[5], n[6], n[7], n[8]
        self.sp = sp
        self.s0 = s0
        self.s1 = s1
        self.s2 = s2
        self.s3 = s3
        self.sgo = sgo
        self.CAP = tl.constexpr(CAP)
        self.ON = tl.constexpr(True)
        self.DEFER = tl.constexpr(True)
        self.RING = tl.constexpr(RING)
        self.INJECT = tl.constexpr(INJECT)


@core._aggregate
class NoTracer:
    """The tracer of an untraced launch: every probe on it compiles to nothing."""

    CAP: tl.constexpr
    ON: tl.constexpr
    RING: tl.constexpr
    DEFER: tl.constexpr
    INJECT: tl.constexpr

    @triton.constexpr_function
    def __init__(self):
        self.CAP = tl.constexpr(0)
        self.ON = tl.constexpr(False)
        self.RING = tl.constexpr(False)
        self.DEFER = tl.constexpr(False)
        self.INJECT = tl.constexpr(False)


@core._aggregate
class Span:
    """An open span: its start time, region and arguments (returned by :func:`begin`)."""

    t0: tl.tensor
    args: tl.tensor  # int64: arg0 (low half) | arg1 (high half)
    REGION: tl.constexpr
    ON: tl.constexpr

    @triton.constexpr_function
    def __init__(self, t0, args, REGION):
        self.t0 = t0
        self.args = args
        self.REGION = tl.constexpr(REGION)
        self.ON = tl.constexpr(True)


@core._aggregate
class NoSpan:
    ON: tl.constexpr

    @triton.constexpr_function
    def __init__(self):
        self.ON = tl.constexpr(False)


@triton.jit
def pack(a, b):
    """Two int32 arguments in one int64 word: ``a`` in the low half, ``b`` in the high half (how a
    record's ``arg0``/``arg1`` and a DETAIL record's two 32-bit fields are laid out).

    Cost: a few integer ops; no memory access."""
    return (tl.cast(a, tl.int64) & 0xFFFFFFFF) | (tl.cast(b, tl.int64) << 32)


@triton.jit
def _program_slots(ktrace_buf, CAP: tl.constexpr):
    """This program's first slot, its dropped counter (its head in ring mode) and its placement
    word, for ``CAP`` slots per program."""
    n0 = tl.num_programs(0)
    n1 = tl.num_programs(1)
    n2 = tl.num_programs(2)
    pid = (tl.program_id(2).to(tl.int64) * n1 + tl.program_id(1)) * n0 + tl.program_id(0)
    n_prog = n0.to(tl.int64) * n1 * n2
    recs = ktrace_buf + _HEADER_WORDS + pid * (CAP * _WORDS)
    dropped = (ktrace_buf + _HEADER_WORDS + n_prog * (CAP * _WORDS)).to(tl.pointer_type(tl.int32)) + pid
    hw = tl.cast(hw_id(), tl.int64) << 32
    return recs, dropped, hw


@triton.jit
def init(ktrace_buf, KTRACE: tl.constexpr):
    """Open this program's tracer. Call once per program, before any other probe.

    Args:
        ktrace_buf: the kernel's ``ktrace_buf`` parameter (an int64 device buffer, or None).
        KTRACE: the kernel's ``KTRACE`` constexpr: 0 = off, N = slots per program.

    Returns:
        A tracer to pass to the other probes (a no-op tracer when ``KTRACE == 0``). In a kernel
        decorated with ``@ktrace.trace`` the decorator turns this call into
        :func:`init_deferred` (records kept in registers until storing them is free) and adds
        :func:`finish` at the kernel's end; elsewhere every record is stored by its probe.

    Cost: when on, reads the SM id and the grid size once; writes nothing (ring mode,
    ``KTRACE = schema.RING_GATE | N``: one timer read and one 8-byte store, the lane's start
    stamp in its NOW slot; see ``ktrace.flight``).
    """
    if slots(KTRACE) > 0:
        CAP: tl.constexpr = slots(KTRACE)
        recs, dropped, hw = _program_slots(ktrace_buf, CAP)
        kt = Tracer(recs, dropped, tl.zeros((), tl.int32), tl.zeros((), tl.int32), hw, leader(), CAP, _is_ring(KTRACE),
                    _injects(KTRACE))
        if kt.RING:
            tl.store(now_slot(kt) + 4, now())  # the lane's start: a lane never stamped never started
        _delay_at(kt, _INJECT_LAUNCH)
        return kt
    else:
        return NoTracer()


@triton.jit
def init_deferred(ktrace_buf, KTRACE: tl.constexpr):
    """:func:`init` for a kernel that ends with :func:`finish`: records wait in registers.

    ``@ktrace.trace`` calls this instead of :func:`init` and adds the :func:`finish` call itself;
    calling it in a kernel that does not end with :func:`finish` loses the last records.
    """
    if slots(KTRACE) > 0:
        CAP: tl.constexpr = slots(KTRACE)
        recs, dropped, hw = _program_slots(ktrace_buf, CAP)
        z = tl.zeros((), tl.int64)
        n = tl.zeros((), tl.int32)
        kt = DeferredTracer(recs, dropped, n, n, hw, leader(), (n, n, z, z, z, n, n, n, z, n, n, n), (n, n, z, z, z, n, n, z, n),
                            z, z, z, z, z, n, CAP, _is_ring(KTRACE), _injects(KTRACE))
        if kt.RING:
            tl.store(now_slot(kt) + 4, now())  # the lane's start, as in init
        _delay_at(kt, _INJECT_LAUNCH)
        return kt
    else:
        return NoTracer()


@core.extern
def _nvidia(_semantic=None):
    """Whether the compile target is NVIDIA (a compile-time bool)."""
    return core.constexpr(_backend(_semantic) == "cuda")


# The lead thread (%tid.x == 0, see leader) stores a record as 16-byte vector stores when its
# slot is free, or the program's dropped count when it is not. One asm block, with its two
# predicates made from operands computed once per program: the stores are the whole cost (no
# per-word predicate, no branch around each store, no thread-id read per record).
def _st_record_ptx(n_vec):
    """PTX: if operand ``go`` is set, ``n_vec`` 16-byte stores of word pairs at ``$1``; if ``drop``
    is set, the 4-byte dropped count. Operands: $1 address, $2.. the words, then go, the dropped
    counter's address, the count, drop."""
    go, dptr, nd, drop = (2 + 2 * n_vec + k for k in range(4))
    stores = "".join(
        f"\t@%p0 st.global.v2.b64 [$1{f'+{16 * k}' if k else ''}], {{${2 + 2 * k}, ${3 + 2 * k}}};\n" for k in range(n_vec)
    )
    return (
        "{\n\t.reg .pred %p<2>;\n"
        f"\tsetp.ne.u32 %p0, ${go}, 0;\n\tsetp.ne.u32 %p1, ${drop}, 0;\n"
        f"{stores}\t@%p1 st.global.b32 [${dptr}], ${nd};\n\tmov.u32 $0, 0;\n}}"
    )


_ST_RECORD_PTX = _st_record_ptx(2)  # one 32-byte record
_ST_RECORD2_PTX = _st_record_ptx(4)  # an event and its DETAIL record


def _st_vec_ptx(n_vec):
    """PTX: if operand ``go`` is set, ``n_vec`` 16-byte stores of word pairs at ``$1`` (a pending
    record's flush: the dropped count is stored once, by :func:`finish`)."""
    stores = "".join(
        f"\t@%p0 st.global.v2.b64 [$1{f'+{16 * k}' if k else ''}], {{${2 + 2 * k}, ${3 + 2 * k}}};\n" for k in range(n_vec)
    )
    return f"{{\n\t.reg .pred %p0;\n\tsetp.ne.u32 %p0, ${2 + 2 * n_vec}, 0;\n{stores}\tmov.u32 $0, 0;\n}}"


_ST_VEC2_PTX = _st_vec_ptx(2)
_ST_VEC4_PTX = _st_vec_ptx(4)
_ST_DROPPED_PTX = "{\n\t.reg .pred %p0;\n\tsetp.ne.u32 %p0, $3, 0;\n\t@%p0 st.global.b32 [$1], $2;\n\tmov.u32 $0, 0;\n}"


@core.extern
def leader(_semantic=None):
    """1 in the thread that stores records (%tid.x == 0 on NVIDIA), 0 in every other thread.

    Read once per program by :func:`init`; per thread, not uniform: used only as an asm operand
    or a store's mask. On AMD, 1 (Triton's scalar stores already pick one lane).

    Cost: one special-register read and a compare (NVIDIA); nothing on AMD.
    """
    if _backend(_semantic) != "cuda":
        return core.full((), 1, core.int32, _semantic=_semantic)
    return core.inline_asm_elementwise(
        "{ .reg .b32 %t; .reg .pred %q; mov.u32 %t, %tid.x; setp.eq.u32 %q, %t, 0; selp.u32 $0, 1, 0, %q; }",
        "=r", [], dtype=core.int32, is_pure=True, pack=1, _semantic=_semantic,
    )


@core.extern
def _st_record_nv(ptr, w0, w1, w2, w3, go, dropped_ptr, nd, drop, _semantic=None):
    return core.inline_asm_elementwise(
        _ST_RECORD_PTX, "=r,l,l,l,l,l,r,l,r,r,~{memory}", [ptr, w0, w1, w2, w3, go, dropped_ptr, nd, drop],
        dtype=core.int32, is_pure=False, pack=1, _semantic=_semantic,
    )


@core.extern
def _st_record2_nv(ptr, w0, w1, w2, w3, w4, w5, w6, w7, go, dropped_ptr, nd, drop, _semantic=None):
    return core.inline_asm_elementwise(
        _ST_RECORD2_PTX, "=r,l,l,l,l,l,l,l,l,l,r,l,r,r,~{memory}", [ptr, w0, w1, w2, w3, w4, w5, w6, w7, go, dropped_ptr, nd, drop],
        dtype=core.int32, is_pure=False, pack=1, _semantic=_semantic,
    )


@core.extern
def _st_vec2_nv(addr, w0, w1, w2, w3, go, _semantic=None):
    return core.inline_asm_elementwise(
        _ST_VEC2_PTX, "=r,l,l,l,l,l,r,~{memory}", [addr, w0, w1, w2, w3, go],
        dtype=core.int32, is_pure=False, pack=1, _semantic=_semantic,
    )


@core.extern
def _st_vec4_nv(addr, w0, w1, w2, w3, w4, w5, w6, w7, go, _semantic=None):
    return core.inline_asm_elementwise(
        _ST_VEC4_PTX, "=r,l,l,l,l,l,l,l,l,l,r,~{memory}", [addr, w0, w1, w2, w3, w4, w5, w6, w7, go],
        dtype=core.int32, is_pure=False, pack=1, _semantic=_semantic,
    )


@core.extern
def _st_dropped_nv(addr, nd, go, _semantic=None):
    return core.inline_asm_elementwise(
        _ST_DROPPED_PTX, "=r,l,r,r,~{memory}", [addr, nd, go],
        dtype=core.int32, is_pure=False, pack=1, _semantic=_semantic,
    )


@triton.jit
def _store_words(ptr, a, b, c, d, fits):
    """Store four int64 words with scalar stores (AMD): Triton issues a scalar store from one
    thread, with that thread's registers, so a record's t0 and t1 are both that thread's readings.

    (A [4] tensor store spreads the words over lanes, and lanes of a warp that diverged, e.g. in a
    spin loop, read the timer at different moments: t1 could then precede t0.)
    """
    tl.store(ptr, tl.cast(a, tl.int64), mask=fits)
    tl.store(ptr + 1, tl.cast(b, tl.int64), mask=fits)
    tl.store(ptr + 2, tl.cast(c, tl.int64), mask=fits)
    tl.store(ptr + 3, tl.cast(d, tl.int64), mask=fits)


@triton.jit
def _slot(kt, slot, N: tl.constexpr):
    """Where slot ``slot`` is and whether ``N`` records (an event, or an event and its DETAIL
    record) fit from it: the one place that maps a slot index to memory. In ring mode slot
    ``slot`` is at ``slot % CAP`` and always fits (the oldest record is overwritten; the head
    counts it), and a pair may wrap: the callers store its two records separately."""
    if kt.RING:
        return kt.recs + (slot & (kt.CAP - 1)) * _WORDS, slot >= 0
    else:
        return kt.recs + slot * _WORDS, slot + (N - 1) < kt.CAP


@triton.jit
def _claim(kt, N: tl.constexpr):
    """The slot of the next ``N`` records at the cursor: its address, whether they fit, and the
    dropped count after them."""
    p, fits = _slot(kt, kt.cur, N)
    return p, fits, kt.nd + (1 - fits.to(tl.int32))


@triton.jit
def _write(kt, t0, t1, tag, args):
    """Store one 32-byte record at the cursor (or count it dropped) and advance."""
    if kt.RING:
        return _write_ring(kt, t0, t1, tag, args)
    else:
        return _write_slot(kt, t0, t1, tag, args)


@triton.jit
def _write_slot(kt, t0, t1, tag, args):
    p, fits, nd = _claim(kt, 1)
    if _nvidia():
        f = fits.to(tl.int32)
        _st_record_nv(p.to(tl.int64, bitcast=True), tl.cast(t0, tl.int64), tl.cast(t1, tl.int64), kt.hw | tag,
                      tl.cast(args, tl.int64), kt.lead & f, kt.dropped_ptr.to(tl.int64, bitcast=True), nd, kt.lead & (1 - f))
    else:
        _store_words(p, t0, t1, kt.hw | tag, args, fits)
        tl.store(kt.dropped_ptr, nd, mask=fits == 0)
    return Tracer(kt.recs, kt.dropped_ptr, kt.cur + 1, nd, kt.hw, kt.lead, kt.CAP, kt.RING, kt.INJECT)


@triton.jit
def _write_ext(kt, t0, t1, tag, args, x0, x1, x23):
    """Store an event and its DETAIL record (two slots, from one thread) or count it dropped."""
    if kt.RING:  # (two records: the pair may wrap around the ring's end)
        return _write_ring(_write_ring(kt, t0, t1, tag, args, False), x0, x1, _tag(_DETAIL, 0, 0), x23)
    else:
        return _write_ext_slots(kt, t0, t1, tag, args, x0, x1, x23)


@triton.jit
def _write_ext_slots(kt, t0, t1, tag, args, x0, x1, x23):
    p, fits, nd = _claim(kt, 2)
    dtag = kt.hw | _tag(_DETAIL, 0, 0)
    if _nvidia():
        f = fits.to(tl.int32)
        _st_record2_nv(p.to(tl.int64, bitcast=True), tl.cast(t0, tl.int64), tl.cast(t1, tl.int64), kt.hw | tag,
                       tl.cast(args, tl.int64), tl.cast(x0, tl.int64), tl.cast(x1, tl.int64), dtag,
                       tl.cast(x23, tl.int64), kt.lead & f, kt.dropped_ptr.to(tl.int64, bitcast=True), nd, kt.lead & (1 - f))
    else:
        _store_words(p, t0, t1, kt.hw | tag, args, fits)
        _store_words(p + _WORDS, x0, x1, dtag, x23, fits)
        tl.store(kt.dropped_ptr, nd, mask=fits == 0)
    return Tracer(kt.recs, kt.dropped_ptr, kt.cur + 2, nd, kt.hw, kt.lead, kt.CAP, kt.RING, kt.INJECT)


@triton.jit
def _write_ring(kt, t0, t1, tag, args, HEAD: tl.constexpr = True):
    """Ring mode: store one record at slot ``cur % CAP`` (overwriting the oldest) and, with
    ``HEAD``, the lane's head (records written in all) in the same asm block, then advance.
    Never drops. (An event and its DETAIL store the head once, after the DETAIL.)"""
    p, _ = _slot(kt, kt.cur, 1)
    head = kt.cur + 1
    if HEAD:
        put_head = kt.lead
    else:
        put_head = kt.lead * 0
    if _nvidia():
        _st_record_nv(p.to(tl.int64, bitcast=True), tl.cast(t0, tl.int64), tl.cast(t1, tl.int64), kt.hw | tag,
                      tl.cast(args, tl.int64), kt.lead, kt.dropped_ptr.to(tl.int64, bitcast=True), head, put_head)
    else:
        _store_words(p, t0, t1, kt.hw | tag, args, head > 0)
        tl.store(kt.dropped_ptr, head, mask=put_head != 0)
    return Tracer(kt.recs, kt.dropped_ptr, head, kt.nd, kt.hw, kt.lead, kt.CAP, kt.RING, kt.INJECT)


@triton.jit
def now_slot(kt):
    """Ring mode: this lane's NOW slot (``schema.NOW_DTYPE``) as an int64 pointer.

    Cost: the grid size and program id, a few integer ops; no memory access.
    """
    n0 = tl.num_programs(0)
    n1 = tl.num_programs(1)
    n2 = tl.num_programs(2)
    pid = (tl.program_id(2).to(tl.int64) * n1 + tl.program_id(1)) * n0 + tl.program_id(0)
    end = (kt.dropped_ptr - pid + n0.to(tl.int64) * n1 * n2).to(tl.int64, bitcast=True)
    return ((end + 15) & -16).to(tl.pointer_type(tl.int64), bitcast=True) + pid * _NOW_WORDS


# Deferred records (DeferredTracer). A pending record is stored by the predicated block below, in
# the thread whose ``go`` is set: its address and words were fixed when it was made.


@triton.jit
def _store1(addr, a, b, c, d, go):
    """Store one pending 32-byte record at ``addr`` (int64) if ``go`` (no-op elsewhere)."""
    if _nvidia():
        _st_vec2_nv(addr, a, b, c, d, go)
    else:
        _store_words(addr.to(tl.pointer_type(tl.int64), bitcast=True), a, b, c, d, go != 0)


@triton.jit
def _store2(addr, a, b, c, d, e, f, g, h, go):
    """Store a pending event and its DETAIL record (64 bytes) at ``addr`` if ``go``."""
    if _nvidia():
        _st_vec4_nv(addr, a, b, c, d, e, f, g, h, go)
    else:
        p = addr.to(tl.pointer_type(tl.int64), bitcast=True)
        _store_words(p, a, b, c, d, go != 0)
        _store_words(p + _WORDS, e, f, g, h, go != 0)


@triton.jit
def _store_pair(kt, slot, a, b, c, d, e, f, g, h, go):
    """Store a pending event and its DETAIL record at slot ``slot`` if ``go`` and they fit;
    returns whether they fit (int32). In ring mode the two go to their own ring slots (the pair
    may wrap around the ring's end)."""
    if kt.RING:
        p0, fits = _slot(kt, slot, 1)
        p1, _ = _slot(kt, slot + 1, 1)
        _store1(p0.to(tl.int64, bitcast=True), a, b, c, d, go)
        _store1(p1.to(tl.int64, bitcast=True), e, f, g, h, go)
    else:
        p, fits = _slot(kt, slot, 2)
        _store2(p.to(tl.int64, bitcast=True), a, b, c, d, e, f, g, h, go & fits.to(tl.int32))
    return fits.to(tl.int32)


@triton.jit
def _w(kt):
    """The pending WAIT's fields (a tuple, in DeferredTracer's order)."""
    return (kt.wslot, kt.wv, kt.wt0, kt.wt1, kt.wtag, kt.wfail, kt.wpeer, kt.wspins, kt.woff, kt.wval, kt.wexp, kt.wcmp)


@triton.jit
def _n(kt):
    """The pending NOTIFY's fields (a tuple, in DeferredTracer's order)."""
    return (kt.nslot, kt.nv, kt.nt0, kt.nt1, kt.ntag, kt.npeer, kt.nval, kt.noff, kt.nseq)


@triton.jit
def _deferred(kt, cur, nd, w, sp, s0, s1, s2, s3, sgo, n=None):
    if n is None:
        n = _n(kt)
    return DeferredTracer(kt.recs, kt.dropped_ptr, cur, nd, kt.hw, kt.lead, w, n, sp, s0, s1, s2, s3, sgo, kt.CAP, kt.RING, kt.INJECT)


@triton.jit
def _flush_notify(kt):
    """Store the pending NOTIFY (event + DETAIL, packed here) in its slots, or count it dropped."""
    f = _store_pair(kt, kt.nslot, kt.nt0, kt.nt1, kt.hw | kt.ntag, pack(kt.npeer, kt.nval), kt.noff, tl.cast(kt.nseq, tl.int64),
                    kt.hw | _tag(_DETAIL, 0, 0), tl.zeros((), tl.int64), kt.lead & kt.nv)
    nd = kt.nd + (kt.nv & (1 - f))
    n = (kt.nslot, tl.zeros((), tl.int32), kt.nt0, kt.nt1, kt.ntag, kt.npeer, kt.nval, kt.noff, kt.nseq)
    return _deferred(kt, kt.cur, nd, _w(kt), kt.sp, kt.s0, kt.s1, kt.s2, kt.s3, kt.sgo, n)


@triton.jit
def _flush_wait(kt):
    """Store the pending WAIT (event + DETAIL, packed here) in its slots, or count it dropped."""
    tag = kt.hw | kt.wtag | (tl.cast(kt.wfail, tl.int64) << _TIMEOUT_SHIFT)
    f = _store_pair(kt, kt.wslot, kt.wt0, kt.wt1, tag, pack(kt.wpeer, kt.wspins), kt.woff, tl.cast(kt.wval, tl.int64),
                    kt.hw | _tag(_DETAIL, 0, 0), pack(kt.wexp, kt.wcmp), kt.lead & kt.wv)
    nd = kt.nd + (kt.wv & (1 - f))
    w = (kt.wslot, tl.zeros((), tl.int32), kt.wt0, kt.wt1, kt.wtag, kt.wfail, kt.wpeer, kt.wspins, kt.woff, kt.wval, kt.wexp, kt.wcmp)
    return _deferred(kt, kt.cur, nd, w, kt.sp, kt.s0, kt.s1, kt.s2, kt.s3, kt.sgo)


@triton.jit
def _flush_single(kt):
    _store1(kt.sp, kt.s0, kt.s1, kt.s2, kt.s3, kt.sgo)
    return _deferred(kt, kt.cur, kt.nd, _w(kt), kt.sp, kt.s0, kt.s1, kt.s2, kt.s3, tl.zeros((), tl.int32))


@triton.jit
def _put_head(kt, go):
    """Ring mode: store the lane's head (``kt.cur``: every record below it is in the ring, none
    above it) in the thread whose ``go`` is set."""
    if _nvidia():
        _st_dropped_nv(kt.dropped_ptr.to(tl.int64, bitcast=True), kt.cur, go)
    else:
        tl.store(kt.dropped_ptr, kt.cur, mask=go != 0)


@triton.jit
def _ring_flush(kt):
    """Ring mode: store every pending record, then the head if anything was pending.

    A deferred ring tracer stores at every store point all that is pending, so that at most the
    latest probe's record is in registers and the records in memory are exactly those below the
    head: a live reader (``ktrace.flight``) takes the ring's last N slots below the head as they
    are, and a pending record can never land in a slot a newer one has taken."""
    go = kt.lead & (kt.wv | kt.nv | kt.sgo)
    kt = _flush_single(_flush_notify(_flush_wait(kt)))
    _put_head(kt, go)
    return kt


@triton.jit
def flush(kt):
    """Store the records a deferred tracer holds (no-op on other tracers). Returns the tracer.

    ``ktrace.shmem.wait`` calls it right after issuing its first read of the flag (the stores
    go out while that read is in flight, and the spin hides them); :func:`finish` at the end.
    """
    if kt.DEFER:
        if kt.RING:
            kt = _ring_flush(kt)
        else:
            kt = _flush_single(_flush_notify(_flush_wait(kt)))
    return kt


@triton.jit
def flush_single(kt):
    """Store a deferred tracer's pending span, instant or counter (``ktrace.shmem.notify`` does,
    after its release, so that the next release does not wait for it). Returns the tracer.
    (Ring mode: nothing here; the NOTIFY recorded next stores everything pending.)"""
    if kt.DEFER:
        if not kt.RING:
            kt = _flush_single(kt)
    return kt


@triton.jit
def finish(kt):
    """End of a traced program: store what is pending and the dropped count (deferred tracers).

    ``@ktrace.trace`` appends this call to the kernel (``kl.finish(kt)`` for each tracer made by
    ``kl.init`` in the kernel's body); a no-op on an immediate tracer or when tracing is off.
    """
    if kt.DEFER:
        if kt.RING:  # (the head, stored even when nothing was pending: the lane's final count)
            kt = _flush_single(_flush_notify(_flush_wait(kt)))
            _put_head(kt, kt.lead)
        else:
            kt = flush(kt)
            go = kt.lead & (kt.nd > 0).to(tl.int32)
            if _nvidia():
                _st_dropped_nv(kt.dropped_ptr.to(tl.int64, bitcast=True), kt.nd, go)
            else:
                tl.store(kt.dropped_ptr, kt.nd, mask=go != 0)


@triton.jit
def _pend(kt, t0, t1, tag, args):
    """Deferred :func:`_write`: the pending single record is stored now (ring mode: everything
    pending), this one waits."""
    if kt.RING:
        kt = _ring_flush(kt)
    else:
        kt = _flush_single(kt)
    p, fits, nd = _claim(kt, 1)
    return _deferred(kt, kt.cur + 1, nd, _w(kt), p.to(tl.int64, bitcast=True), tl.cast(t0, tl.int64), tl.cast(t1, tl.int64), kt.hw | tag,
                     tl.cast(args, tl.int64), kt.lead & fits.to(tl.int32))


@triton.jit
def _pend_wait(kt, tag, t0, t1, peer, spins, flag, value, expected, cmp, timed_out, FLUSHED: tl.constexpr):
    """Deferred WAIT: its fields kept as they are (copies, no arithmetic: this runs between a spin
    and what follows it) until the next release, wait or finish packs and stores them."""
    if not FLUSHED:  # (ktrace.shmem.wait flushed at its start: nothing can be pending here)
        if kt.RING:
            kt = _ring_flush(kt)
        else:
            kt = _flush_wait(kt)
    w = (kt.cur, tl.full((), 1, tl.int32), tl.cast(t0, tl.int64), tl.cast(t1, tl.int64), tl.cast(tag, tl.int64),
         tl.cast(timed_out, tl.int32), tl.cast(peer, tl.int32), tl.cast(spins, tl.int32), tl.cast(flag, tl.int64),
         tl.cast(value, tl.int32), tl.cast(expected, tl.int32), tl.cast(cmp, tl.int32))
    return _deferred(kt, kt.cur + 2, kt.nd, w, kt.sp, kt.s0, kt.s1, kt.s2, kt.s3, kt.sgo)


@triton.jit
def _pend_notify(kt, tag, t0, t1, peer, value, flag, seq):
    """Deferred NOTIFY: a pending one is stored now (after this notify's release), this one kept
    until the next wait's first read, the next notify or finish. (Ring mode: everything pending
    is stored here, after the release.)"""
    if kt.RING:
        kt = _ring_flush(kt)
    else:
        kt = _flush_notify(kt)
    n = (kt.cur, tl.full((), 1, tl.int32), tl.cast(t0, tl.int64), tl.cast(t1, tl.int64), tl.cast(tag, tl.int64),
         tl.cast(peer, tl.int32), tl.cast(value, tl.int32), tl.cast(flag, tl.int64), tl.cast(seq, tl.int32))
    return _deferred(kt, kt.cur + 2, kt.nd, _w(kt), kt.sp, kt.s0, kt.s1, kt.s2, kt.s3, kt.sgo, n)


# ---------------------------------------------------------------------------------------------
# Delay injection (``ktrace.inject``): compiled in only with ``schema.INJECT_GATE`` in the gate
# ---------------------------------------------------------------------------------------------


@core.extern
def tick_ns(_semantic=None):
    """Nanoseconds per tick of :func:`now` on the compile target (a compile-time int; 1 on NVIDIA)."""
    if _backend(_semantic) == "cuda":
        return core.constexpr(1)
    arch = str(_semantic.builder.options.arch).split(":")[0]
    hz = _schema.AMD_WALLCLOCK_HZ.get(arch, _schema.DEFAULT_TICK_HZ[_schema.TimerKind.AMD_MEMREALTIME])
    return core.constexpr(max(1, 1_000_000_000 // hz))


@triton.jit
def _delay_at(kt, site: tl.constexpr):
    """Spin for the delay the launch's table sets for this program at ``site`` (nothing when the
    tracer does not inject: no instruction)."""
    if kt.INJECT:
        n0 = tl.num_programs(0)
        n1 = tl.num_programs(1)
        pid = (tl.program_id(2).to(tl.int64) * n1 + tl.program_id(1)) * n0 + tl.program_id(0)
        # the table sits right before the buffer, whose start this program's first slot is
        # counted from (as ``_program_slots`` counts it)
        table = kt.recs - _HEADER_WORDS - pid * (kt.CAP * _WORDS) - _INJECT_WORDS
        rows = tl.load(table)
        # the program within its launch and its lane (``schema.virtual_grid``: lanes are the
        # innermost programs of a launch traced per lane; a Triton kernel's one lane is 0)
        d = tl.zeros((), tl.int64)
        for i in tl.static_range(_INJECT_ROWS):
            row = table + 1 + i * _INJECT_ROW_WORDS
            prog = tl.load(row)
            lane = tl.load(row + 1)
            hit = (i < rows) & ((prog < 0) | (prog == pid)) & (lane <= 0) & (tl.load(row + 2) == site)
            d += tl.where(hit, tl.load(row + 3), 0)
        spin_ns(d)


@triton.jit
def spin_ns(delay_ns):
    """Spin on the device timer until ``delay_ns`` ns have passed (every thread spins).

    Args:
        delay_ns: nanoseconds (an int); <= 0 returns after one timer read.

    Cost: one timer read per iteration (%globaltimer steps every 32 ns on H100/H200;
    ``s_memrealtime`` every 10 ns on MI300). No memory operation: the delay orders nothing by itself.
    """
    t0 = now()
    limit = delay_ns.to(tl.int64) // tick_ns()
    t = t0
    while t - t0 < limit:
        t = now()


@triton.jit
def delay(kt, name: tl.constexpr):
    """An injection point of its own, at call site ``name``: spins for the delay the launch's
    table sets for this program at ``kl.region(name)`` (``ktrace.inject``). ``kl.init`` (site
    ``schema.INJECT_LAUNCH``), ``kl.begin`` (its region, inside the span) and ``ks.notify`` (its
    name, before the release) are injection points already.

    Cost: nothing unless the launch's gate has ``schema.INJECT_GATE`` (then 17 scalar loads of the
    table and a timer read, plus the spin).
    """
    _delay_at(kt, region(name))


# ---------------------------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------------------------


@triton.jit
def begin(kt, name: tl.constexpr, arg0=0, arg1=0):
    """Open a span named ``name`` (a compile-time string). Spans may nest and overlap freely.

    Args:
        kt: the tracer from :func:`init`.
        name: region name: a string literal or a module-level ``tl.constexpr("...")`` string.
        arg0, arg1: int32 arguments recorded with the span (e.g. tile id, peer, bytes).

    Returns:
        The open span, to close with :func:`end`.

    Cost: one timer read. Nothing is written until :func:`end`.
    """
    if kt.ON:
        t0 = now()
        _delay_at(kt, region(name))  # (injection: inside the span, as more work would be)
        return Span(t0, pack(arg0, arg1), region(name))
    else:
        return NoSpan()


@triton.jit
def end(kt, span, arg0=None, arg1=None):
    """Close ``span`` and record it (kind SPAN). Returns the advanced tracer.

    Args:
        kt: the tracer.
        span: what :func:`begin` returned.
        arg0, arg1: if given, replace the arguments given to :func:`begin`.

    Cost: one timer read and one 32-byte record store (see the module docstring).
    """
    if kt.ON:
        t1 = now()
        args = span.args
        if arg0 is not None:
            args = (args & -4294967296) | (tl.cast(arg0, tl.int64) & 0xFFFFFFFF)
        if arg1 is not None:
            args = (args & 0xFFFFFFFF) | (tl.cast(arg1, tl.int64) << 32)
        if kt.DEFER:
            return _pend(kt, span.t0, t1, _tag(_SPAN, span.REGION, 0), args)
        else:
            return _write(kt, span.t0, t1, _tag(_SPAN, span.REGION, 0), args)
    else:
        return kt


@triton.jit
def mark(kt, name: tl.constexpr, arg0=0, arg1=0):
    """Record an instant named ``name`` with two int32 arguments. Returns the advanced tracer.

    Cost: one timer read and one 32-byte record store.
    """
    if kt.ON:
        t = now()
        if kt.DEFER:
            return _pend(kt, t, t, _tag(_INSTANT, region(name), 0), pack(arg0, arg1))
        else:
            return _write(kt, t, t, _tag(_INSTANT, region(name), 0), pack(arg0, arg1))
    else:
        return kt


@triton.jit
def counter(kt, name: tl.constexpr, value):
    """Record the int64 ``value`` of the counter ``name`` at this moment. Returns the advanced tracer.

    Cost: one timer read and one 32-byte record store.
    """
    if kt.ON:
        t = now()
        if kt.DEFER:
            return _pend(kt, t, t, _tag(_COUNTER, region(name), 0), tl.cast(value, tl.int64))
        else:
            return _write(kt, t, t, _tag(_COUNTER, region(name), 0), tl.cast(value, tl.int64))
    else:
        return kt


@triton.jit
def timestamp(kt):
    """The device timer (int64 ticks) if ``kt`` is on, else the constant 0 (no instruction).

    For code that takes its own timestamps (waits, notifies) and must compile away when off.
    """
    if kt.ON:
        return now()
    else:
        return 0


@triton.jit
def record_wait(kt, name: tl.constexpr, t0, t1, peer, spins, flag, value, expected, cmp, timed_out, FLUSHED: tl.constexpr = False,
                LOCAL: tl.constexpr = False):
    """Record a finished spin-wait (kind WAIT, two slots). Used by ``ktrace.shmem.wait``.

    Args:
        t0, t1: when the wait began and when it saw the flag (or gave up).
        peer: the rank expected to set the flag.
        spins: how many times the flag was read.
        flag: the flag's byte offset in the symmetric heap.
        value: the last value read; expected: the value waited for; cmp: the comparison code.
        timed_out: true if the wait gave up at its bound (sets the TIMEOUT flag).
        FLUSHED: the caller flushed the tracer since its last wait record (``ktrace.shmem.wait``
            does, before its spin): no pending WAIT to store first.
        LOCAL: a hand-off inside one program (``ktrace.gluon``'s mbarrier waits: the LOCAL flag;
            ``flag`` is then the barrier, ``schema.barrier_key``, and ``value``/``expected`` the phase).

    Deferred tracer: the pair is kept in registers and stored by the next release, the next
    wait's start or :func:`finish` (nothing is stored between the spin and what follows it).

    Cost: a few integer ops and 64 bytes stored by thread 0 (four 16-byte stores on NVIDIA), or
    the dropped count when fewer than two slots are left (the event is dropped whole). Ordering:
    every word is thread 0's own, so its ``t1`` is never before its ``t0``.
    """
    if kt.ON:
        # the TIMEOUT flag by arithmetic, not a branch: lanes may disagree on timed_out
        if kt.DEFER:
            kt = _pend_wait(kt, _tag(_WAIT, region(name), _handoff_flags(LOCAL)), t0, t1, peer, spins, flag, value, expected, cmp,
                            timed_out, FLUSHED)
        else:
            tag = _tag(_WAIT, region(name), _handoff_flags(LOCAL)) | (tl.cast(timed_out, tl.int64) << _TIMEOUT_SHIFT)
            kt = _write_ext(kt, t0, t1, tag, pack(peer, spins), flag, value, pack(expected, cmp))
    return kt


@triton.jit
def record_notify(kt, name: tl.constexpr, t0, t1, peer, value, flag, seq, LOCAL: tl.constexpr = False):
    """Record a signal sent to ``peer`` (kind NOTIFY, two slots). Used by ``ktrace.shmem.notify``.

    Args:
        t0, t1: just before and just after the flag write was issued.
        peer: the rank whose flag was written; value: the value written.
        flag: the flag's byte offset in the symmetric heap; seq: a sequence number for pairing.
        LOCAL: what completes a phase of an mbarrier inside one program (``ktrace.gluon``'s
            arrive and expect: the LOCAL flag; ``flag`` is the barrier, ``value`` the phase).

    Cost and ordering: as :func:`record_wait`. ``ktrace.shmem.notify`` calls it after the release,
    so the release never waits for these stores.
    """
    if kt.ON:
        if kt.DEFER:
            kt = _pend_notify(kt, _tag(_NOTIFY, region(name), _handoff_flags(LOCAL)), t0, t1, peer, value, flag, seq)
        else:
            kt = _write_ext(kt, t0, t1, _tag(_NOTIFY, region(name), _handoff_flags(LOCAL)), pack(peer, value), flag, seq, 0)
    return kt


#: The probes both DSLs share: ``ktrace.gluon`` is these same jit functions (they compile in a
#: ``@gluon.jit`` kernel with Gluon's semantics, on its tracer of one lane), so a record is made in
#: one place. A probe added here for both goes in this list (docs/architecture.md, "A new probe kind").
SHARED = ("Tracer", "NoTracer", "Span", "NoSpan", "begin", "end", "mark", "counter", "timestamp", "now", "hw_id", "region",
          "slots", "pack", "record_wait", "record_notify", "delay", "spin_ns", "tick_ns")

__all__ = [*SHARED, "DeferredTracer", "init", "init_deferred", "flush", "flush_single", "finish", "leader", "now_slot"]
