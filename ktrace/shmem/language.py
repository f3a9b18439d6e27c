"""Device API of the symmetric heap: ``import ktrace.shmem.language as ks`` in ``@triton.jit`` code.

Every rank's heap holds the same tensors at the same offsets (``ktrace.shmem.SymmetricHeap``
enforces it), so a pointer into this rank's copy of a tensor becomes a pointer into ``peer``'s
copy by moving it from this rank's heap base to the peer's: :func:`translate`. ``heap_bases`` is
the heap's int64 device table of bases (``heap.bases``), ``rank`` this rank (``heap.rank``).

Conventions (the order of :func:`translate`: from the rank that owns the pointer, to the rank to
touch)::

    x = ks.load(ptr, rank, peer, heap_bases, mask=m)          # read peer's copy
    ks.store(ptr, x, rank, peer, heap_bases, mask=m)          # write peer's copy
    ks.get(src, dst, rank, peer, heap_bases, mask=m)          # peer's src -> my dst
    ks.put(src, dst, rank, peer, heap_bases, mask=m)          # my src -> peer's dst
    old = ks.atomic_add(ptr, v, rank, peer, heap_bases, sem="acq_rel", scope="sys")
    kt = ks.notify(kt, flag, 1, rank, peer, heap_bases)       # release, then set peer's flag
    kt = ks.wait(kt, flag, 1, rank, peer, heap_bases)         # spin on my flag, then acquire

Tracing: :func:`notify` and :func:`wait` take the kernel's tracer (``kt = kl.init(...)``) and
return it advanced. With tracing on they record a NOTIFY / WAIT event (two slots each) with the
flag's heap offset and the peer, so the stall analysis can pair them across ranks; with tracing
off the tracer is a no-op and nothing is recorded.

Ring mode (``ktrace.flight``, ``KTRACE = schema.RING_GATE | N``): a wait that has read its flag
``NOW_AFTER_SPINS`` times writes what it waits for into its lane's NOW slot (flag, expected
value, comparison, peer, the value read, since when), keeps the value read up to date when it
changes and clears the slot when it ends; a shorter wait stores nothing more than in the dense
mode. See docs/flight.md.

Bounded waits: a wait gives up after ``timeout_ns`` (and/or ``max_spins`` reads), records its
WAIT event with the TIMEOUT flag, writes what it waited for into the heap's error block (this
rank's heap, first bytes) and returns. Once a wait on a rank has timed out, other waits of the
rank that are still spinning give up at their next read, so a kernel with a missing signal ends
in about one bound instead of one bound per wait. The host turns the block into "rank r, program
p waited on flag f from peer q for T" (``heap.check()``).

Memory model (NVIDIA PTX / AMD GFX942 LLVM model)
    * :func:`notify` runs a CTA barrier, then one thread writes the peer's flag with a ``release``
      atomic at ``scope`` (default ``"sys"``, which cross-GPU signalling needs). The barrier makes
      the writes of every thread of the program (e.g. a :func:`put`) precede the release, so a
      peer that sees the flag with acquire also sees that data.
    * :func:`wait` spins with an ``acquire`` load in every thread (``ld.acquire.<scope>.global`` on
      NVIDIA; ``global_load sc0 sc1`` + ``s_waitcnt vmcnt(0)`` + ``buffer_inv sc0 sc1`` on gfx942),
      so every thread of the program is ordered after the producer's writes: no barrier needed
      after it.
    * Atomics take ``sem`` in relaxed/acquire/release/acq_rel and ``scope`` in block/gpu/sys
      ("block" is Triton's "cta"); they are Triton's ``tl.atomic_*`` on the translated pointer.

Cost
    * The base table is read by :func:`heap_base` as invariant data (``ld.global.nc`` on NVIDIA):
      the compiler may hoist the reads out of a loop and merge repeated ones, traced or not.
    * :func:`translate`: two scalar loads of the (cached) base table, a subtraction and an add. The
      bases are 256-byte aligned (checked by the host) and the shift carries that alignment hint,
      so loads and stores through a translated pointer stay vectorised (128-bit) when the
      original pointer would be.
    * :func:`notify`: two loads of the base table (before the barrier), a CTA barrier, one remote
      atomic; traced: a timer read on each side of the release and a 64-byte record stored after
      it (immediate tracer) or kept for the next wait's first read (deferred tracer: a kernel
      prepared by ``@ktrace.trace``); nothing is stored before the release.
    * :func:`wait`: one acquire load per spin, then a relaxed read of the error word (one after
      the other: a spin is two load latencies, and every waiting warp reads each word once per
      spin; ``check_every=N`` reads the error word every N-th spin only, a spin is then one load
      latency), plus a timer read per spin when bounded by time or traced. No barrier: on NVIDIA
      thread 0 alone counts and describes a timeout (a branch taken only on failure). Traced,
      immediate tracer: one 64-byte record store after the spin, which a notify right after the
      wait waits for; deferred tracer: the record is kept (register copies) and the tracer's
      pending records are stored behind the first read of the flag. A wait whose flag is
      already set costs one acquire load.

A spin is executed by every thread; threads of a program may leave the loop one read apart, so a
wait that is satisfied exactly at its bound may count one spin more or less in some lanes.
"""

import triton
import triton.language as tl
from triton.language import core

import ktrace.language as kl

from . import codes as _codes
from .symmetric import RESERVED_BYTES as _RESERVED_BYTES

#: Default bound of a wait (ns): long enough for any real signal, short enough to not hang CI.
DEFAULT_TIMEOUT_NS: tl.constexpr = tl.constexpr(5_000_000_000)
#: Ring mode (``ktrace.flight``): a wait fills its lane's NOW slot once it has read the flag this
#: many times (tens of µs inside a GPU, more across GPUs), so short waits store nothing.
NOW_AFTER_SPINS: tl.constexpr = tl.constexpr(64)
#: Alignment (bytes) the host guarantees for every heap base.
HEAP_ALIGN: tl.constexpr = tl.constexpr(256)

_ERR_SLOTS: tl.constexpr = tl.constexpr(_codes.ERROR_SLOTS)
_ERR_WORDS: tl.constexpr = tl.constexpr(_codes.ERROR_WORDS)
assert _codes.ERROR_BLOCK_BYTES <= _RESERVED_BYTES

# ---------------------------------------------------------------------------------------------
# compile-time helpers
# ---------------------------------------------------------------------------------------------


@triton.constexpr_function
def _cmp_code(cmp):
    if cmp not in _codes.CMP_NAMES:
        raise ValueError(f"wait: cmp must be one of {sorted(_codes.CMP_NAMES)}, got {cmp!r}")
    return _codes.CMP_NAMES[cmp]


@triton.constexpr_function
def _scope(scope):
    if scope not in _codes.SCOPES:
        raise ValueError(f"scope must be one of {sorted(_codes.SCOPES)}, got {scope!r}")
    return _codes.SCOPES[scope]


@triton.constexpr_function
def _sem(sem):
    if sem not in _codes.SEMS:
        raise ValueError(f"sem must be one of {_codes.SEMS}, got {sem!r}")
    return sem


@triton.constexpr_function
def _elem_bytes(dtype):
    bits = dtype.element_ty.primitive_bitwidth
    return max(1, bits // 8)


@triton.constexpr_function
def _cmp_region(cmp_code, rid):
    """A NOW slot's ``cmp_region`` word (``schema.NOW_DTYPE``) as a signed int32."""
    v = (cmp_code & 0xFF) | (rid << 8)
    return v - (1 << 32) if v >= 1 << 31 else v


@triton.constexpr_function
def _notify_op(op):
    if op not in ("set", "add"):
        raise ValueError(f"notify: op must be 'set' or 'add', got {op!r}")
    return op


def _is_cuda(_semantic):
    opts = _semantic.builder.options
    backend = getattr(opts, "backend_name", None)
    if backend:
        return backend == "cuda"
    return "gfx" not in str(getattr(opts, "arch", ""))


from ..language import tick_ns  # noqa: E402 (the probe core's: ns per tick of ``kl.now()`` on the target)


@core.extern
def load_acquire(ptr, scope="sys", _semantic=None):
    """Read a 32- or 64-bit integer flag with acquire semantics at ``scope`` (every thread reads).

    Args:
        ptr: a scalar or block pointer to int32/uint32/int64/uint64 (this rank's address space).
        scope: "block", "gpu" or "sys".

    Returns:
        The value read. Memory operations of the calling thread that follow in program order
        are ordered after it (and after whatever the release that wrote it published).
    """
    scope = _codes.SCOPES.get(core._unwrap_if_constexpr(scope))
    if scope is None:
        raise ValueError("load_acquire: scope must be block, gpu or sys")
    ety = ptr.dtype.element_ty
    bits = ety.primitive_bitwidth
    if not ety.is_int() or bits not in (32, 64):
        raise TypeError(f"load_acquire reads 32/64-bit integer flags, not {ety}")
    if _is_cuda(_semantic):
        asm = f"ld.acquire.{scope}.global.b{bits} $0, [$1];"
        cons = ("=r" if bits == 32 else "=l") + ",l,~{memory}"
    else:
        # GFX942 memory model: acquire load = load bypassing the caches of the scope, wait for it,
        # then invalidate those caches so later loads see what the release published.
        bitsel = {"cta": "", "gpu": " sc1", "sys": " sc0 sc1"}[scope]
        op = "global_load_dword" if bits == 32 else "global_load_dwordx2"
        inv = "" if scope == "cta" else f"\n\tbuffer_inv{bitsel}"
        asm = f"{op} $0, $1, off{bitsel}\n\ts_waitcnt vmcnt(0){inv}"
        cons = "=v,v,~{memory}"
    return core.inline_asm_elementwise(asm, cons, [ptr], dtype=ety, is_pure=False, pack=1, _semantic=_semantic)


@core.extern
def load_relaxed(ptr, _semantic=None):
    """Read a 32-bit integer with a volatile (uncached at system scope) load; no ordering."""
    ety = ptr.dtype.element_ty
    if not ety.is_int() or ety.primitive_bitwidth != 32:
        raise TypeError(f"load_relaxed reads 32-bit integers, not {ety}")
    if _is_cuda(_semantic):
        asm, cons = "ld.relaxed.sys.global.b32 $0, [$1];", "=r,l,~{memory}"
    else:
        asm, cons = "global_load_dword $0, $1, off sc0 sc1\n\ts_waitcnt vmcnt(0)", "=v,v,~{memory}"
    return core.inline_asm_elementwise(asm, cons, [ptr], dtype=ety, is_pure=False, pack=1, _semantic=_semantic)


@core.extern
def _nanosleep(ns, _semantic=None):
    """Sleep about ``ns`` nanoseconds (a compile-time int) in every thread."""
    ns = int(core._unwrap_if_constexpr(ns))
    asm = f"nanosleep.u32 {ns};" if _is_cuda(_semantic) else f"s_sleep {min(127, max(1, ns // 64))}"
    return core.inline_asm_elementwise(asm + ("\n\tmov.u32 $0, 0;" if _is_cuda(_semantic) else "\n\tv_mov_b32 $0, 0"),
                                       "=r,~{memory}" if _is_cuda(_semantic) else "=v,~{memory}", [],
                                       dtype=core.int32, is_pure=False, pack=1, _semantic=_semantic)


@core.extern
def _is_nvidia(_semantic=None):
    """Whether the compile target is NVIDIA (a compile-time bool)."""
    return core.constexpr(_is_cuda(_semantic))


def _report_ptx():
    # err: the error block (int32 count, then ERROR_SLOTS records of ERROR_WORDS int64 at byte 8)
    stores = "\n".join(f"\t@%p1 st.global.b64 [%a+{8 + 8 * k}], ${4 + k};" for k in range(_codes.ERROR_WORDS))
    return (
        "{\n"
        "\t.reg .pred %p<2>;\n"
        "\t.reg .b32 %s;\n"
        "\t.reg .b64 %a;\n"
        "\tsetp.ne.u32 %p0, $3, 0;\n"
        "\tsetp.ne.and.u32 %p0, $2, 0, %p0;\n"
        "\tmov.u32 %s, 0;\n"
        "\t@%p0 atom.relaxed.gpu.global.add.u32 %s, [$1], 1;\n"
        f"\tsetp.lt.and.u32 %p1, %s, {_codes.ERROR_SLOTS}, %p0;\n"
        f"\tmul.wide.u32 %a, %s, {8 * _codes.ERROR_WORDS};\n"
        "\tadd.s64 %a, %a, $1;\n"
        f"{stores}\n"
        "\tmov.u32 $0, 0;\n"
        "}"
    )


_REPORT_PTX = _report_ptx()


@core.extern
def _report_timeout_nv(err_addr, failed, lead, pid, off, peer, expected, seen, cmp, waited, spins, _semantic=None):
    """NVIDIA: if ``failed`` in the ``lead`` thread (thread 0), that thread counts the wait in the
    error block and fills a record if one of the first ERROR_SLOTS; every other thread does nothing."""
    return core.inline_asm_elementwise(
        _REPORT_PTX, "=r,l,r,r,l,l,l,l,l,l,l,l,~{memory}",
        [err_addr, failed, lead, pid, off, peer, expected, seen, cmp, waited, spins],
        dtype=core.int32, is_pure=False, pack=1, _semantic=_semantic,
    )


# ---------------------------------------------------------------------------------------------
# addressing
# ---------------------------------------------------------------------------------------------


@triton.jit
def translate(ptr, from_rank, to_rank, heap_bases):
    """Move ``ptr`` from ``from_rank``'s heap to the same offset in ``to_rank``'s heap.

    Args:
        ptr: scalar or block pointer into ``from_rank``'s heap (any element type).
        from_rank, to_rank: ranks (int32 scalars).
        heap_bases: the heap's int64 table of bases (``heap.bases``).

    Returns:
        The pointer into ``to_rank``'s heap, with ``ptr``'s alignment and contiguity kept.

    Cost: two scalar loads from the base table and two integer ops; no memory ordering.
    """
    return _moved(ptr, heap_base(heap_bases, to_rank) - heap_base(heap_bases, from_rank))


@triton.jit
def heap_base(heap_bases, rank):
    """``rank``'s heap base (int64) from the base table.

    The table does not change while a kernel runs, so on NVIDIA it is read as invariant data
    (``ld.global.nc`` in inline assembly with no side effects and no memory clobber): the
    compiler may hoist the read out of a loop and merge repeated reads. A ``tl.load`` could not
    be hoisted past a traced probe's assembly (which clobbers memory, so that it stays in program
    order): in a traced loop every notify re-read both bases right before its barrier, and that
    read, after the previous spin had invalidated L1, sat in front of the release (measured: +97
    ns per hand-off of a one-GPU ping-pong, BENCHMARKS.md). AMD: ``tl.load``.
    """
    p = heap_bases + rank
    if _is_nvidia():
        return tl.inline_asm_elementwise("ld.global.nc.u64 $0, [$1];", "=l,l", [p], dtype=tl.int64, is_pure=True, pack=1)
    else:
        return tl.load(p)


@triton.jit
def _moved(ptr, delta):
    """``ptr`` moved by ``delta`` bytes, a difference of two heap bases."""
    EB: tl.constexpr = _elem_bytes(ptr.dtype)
    # The host checks every base is HEAP_ALIGN-aligned, so the shift in elements is a multiple
    # of HEAP_ALIGN // EB; saying so keeps the vector width of accesses through the result.
    shift = tl.multiple_of(delta // EB, HEAP_ALIGN // EB)
    return ptr + shift


@triton.jit
def heap_offset(ptr, rank, heap_bases):
    """Byte offset of ``ptr`` (into ``rank``'s heap) from that heap's base (int64)."""
    return ptr.to(tl.int64, bitcast=True) - heap_base(heap_bases, rank)


@triton.jit
def _error_block(rank, heap_bases):
    base = heap_base(heap_bases, rank)
    return base.to(tl.pointer_type(tl.int32), bitcast=True)


@triton.jit
def timeouts(rank, heap_bases):
    """Number of waits of this rank that timed out since the host last cleared them (int32).

    A kernel looping over many waits can test it to stop early. Cost: one relaxed load.
    """
    return load_relaxed(_error_block(rank, heap_bases))


# ---------------------------------------------------------------------------------------------
# data movement
# ---------------------------------------------------------------------------------------------


@triton.jit
def load(ptr, rank, peer, heap_bases, mask=None, other=None):
    """Read ``peer``'s copy of the heap data at ``ptr`` (a pointer into this rank's heap).

    Masked-off lanes read nothing and yield ``other``. A plain (weak) load: order it after a
    signal with :func:`wait` or an acquire atomic.
    """
    return tl.load(translate(ptr, rank, peer, heap_bases), mask=mask, other=other)


@triton.jit
def store(ptr, value, rank, peer, heap_bases, mask=None):
    """Write ``value`` into ``peer``'s copy of the heap data at ``ptr``. Masked-off lanes write nothing.

    A plain (weak) store: publish it with :func:`notify` (release).
    """
    tl.store(translate(ptr, rank, peer, heap_bases), value, mask=mask)


@triton.jit
def get(src, dst, rank, peer, heap_bases, mask=None):
    """Copy ``peer``'s copy of ``src`` into this rank's ``dst`` (pointer blocks of one shape).

    ``src`` points into this rank's heap; ``dst`` may be any local device memory.
    """
    tl.store(dst, tl.load(translate(src, rank, peer, heap_bases), mask=mask), mask=mask)


@triton.jit
def put(src, dst, rank, peer, heap_bases, mask=None):
    """Copy this rank's ``src`` into ``peer``'s copy of ``dst`` (pointer blocks of one shape).

    ``dst`` points into this rank's heap; ``src`` may be any local device memory.
    """
    tl.store(translate(dst, rank, peer, heap_bases), tl.load(src, mask=mask), mask=mask)


@triton.jit
def copy(src, dst, src_rank, dst_rank, rank, heap_bases, mask=None):
    """Copy ``src_rank``'s copy of ``src`` into ``dst_rank``'s copy of ``dst``.

    Both pointers point into this rank's heap; either rank may be this one or any peer.
    """
    v = tl.load(translate(src, rank, src_rank, heap_bases), mask=mask)
    tl.store(translate(dst, rank, dst_rank, heap_bases), v, mask=mask)


# ---------------------------------------------------------------------------------------------
# atomics on a peer's heap (Triton's tl.atomic_* on the translated pointer)
# ---------------------------------------------------------------------------------------------


@triton.jit
def atomic_add(ptr, val, rank, peer, heap_bases, mask=None, sem: tl.constexpr = tl.constexpr("acq_rel"), scope: tl.constexpr = tl.constexpr("sys")):
    """``peer``'s ``*ptr += val``; returns the old values. ``sem``/``scope`` as in the module doc."""
    return tl.atomic_add(translate(ptr, rank, peer, heap_bases), val, mask=mask, sem=_sem(sem), scope=_scope(scope))


@triton.jit
def atomic_xchg(ptr, val, rank, peer, heap_bases, mask=None, sem: tl.constexpr = tl.constexpr("acq_rel"), scope: tl.constexpr = tl.constexpr("sys")):
    """Swap ``val`` into ``peer``'s ``*ptr``; returns the old values."""
    return tl.atomic_xchg(translate(ptr, rank, peer, heap_bases), val, mask=mask, sem=_sem(sem), scope=_scope(scope))


@triton.jit
def atomic_cas(ptr, cmp, val, rank, peer, heap_bases, sem: tl.constexpr = tl.constexpr("acq_rel"), scope: tl.constexpr = tl.constexpr("sys")):
    """If ``peer``'s ``*ptr == cmp`` set it to ``val``; returns the old values (Triton's cas has no mask)."""
    return tl.atomic_cas(translate(ptr, rank, peer, heap_bases), cmp, val, sem=_sem(sem), scope=_scope(scope))


@triton.jit
def atomic_and(ptr, val, rank, peer, heap_bases, mask=None, sem: tl.constexpr = tl.constexpr("acq_rel"), scope: tl.constexpr = tl.constexpr("sys")):
    """``peer``'s ``*ptr &= val``; returns the old values."""
    return tl.atomic_and(translate(ptr, rank, peer, heap_bases), val, mask=mask, sem=_sem(sem), scope=_scope(scope))


@triton.jit
def atomic_or(ptr, val, rank, peer, heap_bases, mask=None, sem: tl.constexpr = tl.constexpr("acq_rel"), scope: tl.constexpr = tl.constexpr("sys")):
    """``peer``'s ``*ptr |= val``; returns the old values."""
    return tl.atomic_or(translate(ptr, rank, peer, heap_bases), val, mask=mask, sem=_sem(sem), scope=_scope(scope))


@triton.jit
def atomic_xor(ptr, val, rank, peer, heap_bases, mask=None, sem: tl.constexpr = tl.constexpr("acq_rel"), scope: tl.constexpr = tl.constexpr("sys")):
    """``peer``'s ``*ptr ^= val``; returns the old values."""
    return tl.atomic_xor(translate(ptr, rank, peer, heap_bases), val, mask=mask, sem=_sem(sem), scope=_scope(scope))


@triton.jit
def atomic_min(ptr, val, rank, peer, heap_bases, mask=None, sem: tl.constexpr = tl.constexpr("acq_rel"), scope: tl.constexpr = tl.constexpr("sys")):
    """``peer``'s ``*ptr = min(*ptr, val)``; returns the old values."""
    return tl.atomic_min(translate(ptr, rank, peer, heap_bases), val, mask=mask, sem=_sem(sem), scope=_scope(scope))


@triton.jit
def atomic_max(ptr, val, rank, peer, heap_bases, mask=None, sem: tl.constexpr = tl.constexpr("acq_rel"), scope: tl.constexpr = tl.constexpr("sys")):
    """``peer``'s ``*ptr = max(*ptr, val)``; returns the old values."""
    return tl.atomic_max(translate(ptr, rank, peer, heap_bases), val, mask=mask, sem=_sem(sem), scope=_scope(scope))


# ---------------------------------------------------------------------------------------------
# signals
# ---------------------------------------------------------------------------------------------


@triton.jit
def notify(
    kt,
    flag,
    value,
    rank,
    peer,
    heap_bases,
    op: tl.constexpr = tl.constexpr("set"),
    scope: tl.constexpr = tl.constexpr("sys"),
    seq=None,
    name: tl.constexpr = tl.constexpr("notify"),
):
    """Publish this program's earlier writes and signal ``peer`` by writing its flag.

    Args:
        kt: the kernel's tracer (``kl.init``); returned advanced.
        flag: scalar pointer to an int32 flag in this rank's heap; ``peer``'s copy is written.
        value: int32 value to write (``op="set"``) or add (``op="add"``, for counting signals).
        rank, peer, heap_bases: this rank, the rank to signal, the heap's base table.
        op: "set" (atomic exchange) or "add" (atomic add).
        scope: "sys" (default, across GPUs), "gpu" or "block" (a signal within this rank's heap).
        seq: int32 sequence number recorded for pairing; defaults to the event's slot index,
            which orders a program's notifies.
        name: region name of the NOTIFY event.

    Returns:
        The tracer, advanced by two slots when tracing is on.

    Ordering: a CTA barrier, then a release atomic at ``scope`` by one thread: every write of
    every thread of the program issued before the call is visible to a peer that observes the
    flag with acquire (:func:`wait`), trace records included. Cost: two loads of the base table
    (issued before the barrier), one barrier and one remote atomic; traced, plus a timer read
    before and after the release and one 64-byte record store after it, which therefore never
    delays the release.
    """
    OP: tl.constexpr = _notify_op(op)
    # Both bases are read before the barrier, so their latency hides behind it and the record
    # needs no load after the release.
    my_base = heap_base(heap_bases, rank)
    remote = _moved(flag, heap_base(heap_bases, peer) - my_base)
    kl.delay(kt, name)  # (delay injection, ``ktrace.inject``: a held-back notify; nothing when not injecting)
    tl.debug_barrier()
    if kt.ON:
        t0 = kl.now()
        if OP == "set":
            tl.atomic_xchg(remote, value, sem="release", scope=_scope(scope))
        else:
            tl.atomic_add(remote, value, sem="release", scope=_scope(scope))
        t1 = kl.now()
        # after the release: a deferred tracer's pending span is stored here (else the next
        # release would wait for it); the WAIT and this NOTIFY wait for the next wait's first read
        kt = kl.flush_single(kt)
        off = flag.to(tl.int64, bitcast=True) - my_base
        if seq is None:
            s = kt.cur
        else:
            s = seq
        kt = kl.record_notify(kt, name, t0, t1, peer, value, off, s)
    else:
        if OP == "set":
            tl.atomic_xchg(remote, value, sem="release", scope=_scope(scope))
        else:
            tl.atomic_add(remote, value, sem="release", scope=_scope(scope))
    return kt


@triton.jit
def _satisfied(v, expected, CMP: tl.constexpr):
    if CMP == 1:
        r = v == expected
    elif CMP == 2:
        r = v != expected
    elif CMP == 3:
        r = v >= expected
    elif CMP == 4:
        r = v > expected
    elif CMP == 5:
        r = v <= expected
    else:
        r = v < expected
    return r


@triton.jit
def wait_value(
    kt,
    flag,
    expected,
    rank,
    peer,
    heap_bases,
    cmp: tl.constexpr = tl.constexpr("ge"),
    timeout_ns: tl.constexpr = DEFAULT_TIMEOUT_NS,
    max_spins: tl.constexpr = 0,
    scope: tl.constexpr = tl.constexpr("sys"),
    name: tl.constexpr = tl.constexpr("wait"),
    backoff_ns: tl.constexpr = 0,
    check_every: tl.constexpr = 1,
):
    """:func:`wait` that also returns the last value read and whether the wait succeeded.

    Returns:
        ``(kt, value, ok)``: the advanced tracer, the flag's last value (int32), and a boolean
        that is false when the wait gave up (timeout, spin bound, or an earlier timeout on this
        rank).
    """
    CMP: tl.constexpr = _cmp_code(cmp)
    TIMED: tl.constexpr = timeout_ns > 0
    SPIN_BOUND: tl.constexpr = max_spins > 0
    NEED_T: tl.constexpr = kt.ON or TIMED
    LIMIT: tl.constexpr = timeout_ns // tick_ns()
    # This rank's heap base, read once: the error block is at it, and the flag's heap offset (the
    # WAIT record's) is taken from it before the spin, so nothing is loaded after the flag is seen.
    my_base = heap_base(heap_bases, rank)
    err = my_base.to(tl.pointer_type(tl.int32), bitcast=True)
    off = flag.to(tl.int64, bitcast=True) - my_base
    lead = kl.leader()  # the thread that reports a timeout (read here, off the path after the spin)
    if NEED_T:
        t0 = kl.now()
    else:
        t0 = 0
    v = load_acquire(flag, scope)
    # a deferred tracer's pending records go out here, behind the first read of the flag (issued,
    # not yet used): the read is not delayed, and the spin hides the stores
    kt = kl.flush(kt)
    spins = tl.full((), 1, tl.int32)
    ok = _satisfied(v, expected, CMP)
    stop = ok
    t1 = t0
    seen = v
    if kt.ON:
        if kt.RING:
            now_ptr = kl.now_slot(kt)
    while not stop:
        if backoff_ns > 0:
            _nanosleep(backoff_ns)
        # The flag, then the error word, one after the other: a spin is two load latencies. (Both
        # loads in flight at once halve that, but double the rate at which every waiting warp of
        # every program reads the one error word and the flags: on 2 x H200 that slowed the
        # all-to-all's dispatch by 10 % and the 132-program fan-in by 10 %.)
        v = load_acquire(flag, scope)
        spins += 1
        ok = _satisfied(v, expected, CMP)
        if check_every <= 1:
            gave_up = load_relaxed(err) != 0
        else:  # the error word every check_every-th read only (branched: the other spins skip it)
            e = tl.zeros((), tl.int32)
            if (spins % check_every) == 0:
                e = load_relaxed(err)
            gave_up = e != 0
        if NEED_T:
            t1 = kl.now()
        if TIMED:
            gave_up = gave_up | ((t1 - t0) > LIMIT)
        if SPIN_BOUND:
            gave_up = gave_up | (spins >= max_spins)
        stop = ok | gave_up
        if kt.ON:
            if kt.RING:
                # ktrace.flight: the lane's NOW slot says what it waits for, once the wait has spun
                # NOW_AFTER_SPINS times (a hand-off's short wait stores nothing: stores between the
                # spin and the next release delay that release), then the value seen when it changes
                # (branched, not predicated: a short wait's spin runs none of it)
                if spins >= NOW_AFTER_SPINS:
                    fill = spins == NOW_AFTER_SPINS
                    tl.store(now_ptr + 1, off, mask=fill)
                    tl.store(now_ptr + 2, kl.pack(expected, _cmp_region(CMP, kl.region(name))), mask=fill)
                    tl.store(now_ptr + 3, kl.pack(peer, v), mask=fill | (v != seen))
                    tl.store(now_ptr, t0, mask=fill)  # since != 0 marks the slot filled
        seen = v
    if kt.ON:
        if kt.RING:
            tl.store(now_ptr, 0, mask=spins >= NOW_AFTER_SPINS)  # no longer waiting
    failed = ok == 0
    n0 = tl.num_programs(0)
    n1 = tl.num_programs(1)
    pid = (tl.program_id(2).to(tl.int64) * n1 + tl.program_id(1)) * n0 + tl.program_id(0)
    if _is_nvidia():
        # Thread 0 counts and describes a wait that gave up, from its own registers, in one asm
        # block: no barrier (Triton broadcasts a scalar atomic's result through shared memory
        # between two barriers) on the path of every wait, which almost never fails. The block is
        # branched around, so its operands are not computed on the way from the spin to what
        # follows (ptxas materialised them there: about 18 instructions per wait).
        if failed:
            _report_timeout_nv(my_base, failed.to(tl.int32), lead, pid, off, tl.cast(peer, tl.int64), tl.cast(expected, tl.int64),
                               tl.cast(v, tl.int64), tl.cast(CMP, tl.int64), tl.cast(t1 - t0, tl.int64), tl.cast(spins, tl.int64))
    else:
        # No branch: every thread runs the (masked) atomic, which keeps the scalar-result
        # broadcast out of divergent control flow.
        slot = tl.atomic_add(err, 1, mask=failed, sem="relaxed", scope="gpu")
        # Scalar stores: one thread writes the whole record from its own registers, so its fields
        # are one thread's view even if lanes left the spin loop at different reads.
        rec = err.to(tl.pointer_type(tl.int64), bitcast=True) + 1 + slot * _ERR_WORDS
        keep = failed & (slot < _ERR_SLOTS)
        tl.store(rec, pid, mask=keep)
        tl.store(rec + 1, off, mask=keep)
        tl.store(rec + 2, tl.cast(peer, tl.int64), mask=keep)
        tl.store(rec + 3, tl.cast(expected, tl.int64), mask=keep)
        tl.store(rec + 4, tl.cast(v, tl.int64), mask=keep)
        tl.store(rec + 5, tl.cast(CMP, tl.int64), mask=keep)
        tl.store(rec + 6, tl.cast(t1 - t0, tl.int64), mask=keep)
        tl.store(rec + 7, tl.cast(spins, tl.int64), mask=keep)
    if kt.ON:
        kt = kl.record_wait(kt, name, t0, t1, peer, spins, off, v, expected, CMP, failed, True)
    return kt, v, ok


@triton.jit
def wait(
    kt,
    flag,
    expected,
    rank,
    peer,
    heap_bases,
    cmp: tl.constexpr = tl.constexpr("ge"),
    timeout_ns: tl.constexpr = DEFAULT_TIMEOUT_NS,
    max_spins: tl.constexpr = 0,
    scope: tl.constexpr = tl.constexpr("sys"),
    name: tl.constexpr = tl.constexpr("wait"),
    backoff_ns: tl.constexpr = 0,
    check_every: tl.constexpr = 1,
):
    """Spin until this rank's ``flag`` compares ``cmp`` to ``expected``, then acquire.

    Args:
        kt: the kernel's tracer (``kl.init``); returned advanced.
        flag: scalar pointer to an int32 flag in this rank's heap (written by ``peer``'s notify).
        expected: the int32 value to compare with.
        rank: this rank; peer: the rank expected to set the flag (recorded, and in reports).
        heap_bases: the heap's base table (the flag's heap offset and the error block).
        cmp: "ge" (default: counters and round numbers), "eq", "ne", "gt", "le" or "lt".
        timeout_ns: give up after this long (compile-time; 0 = no time bound).
        max_spins: give up after this many reads (compile-time; 0 = no spin bound).
        scope: scope of the acquire load: "sys" (default, across GPUs), "gpu" or "block".
        name: region name of the WAIT event.
        backoff_ns: if > 0, sleep about this long before each re-read of the flag
            (``nanosleep`` on NVIDIA, ``s_sleep`` on AMD): fewer reads competing with the
            producer's traffic, at the price of up to that much later a wake-up.
        check_every: read the rank's error word (has another wait given up?) after every
            ``check_every``-th read of the flag instead of after each (compile-time, default 1).
            A spin is then one load latency instead of two, so the wait sees its flag sooner:
            a two-program ping-pong on one H100 hands off 11-17 % faster with 8, a 132-program
            fan-in 3 % (``BENCHMARKS.md``); a timeout elsewhere on the rank is noticed up to
            that many reads later. Traced or not, the WAIT record is the same.

    Returns:
        The tracer, advanced by two slots when tracing is on.

    Records (tracing on): a WAIT event from the start of the wait to the read that saw the flag
    (or gave up), with peer, spins, flag heap offset, value seen, expected and the cmp code
    (``ktrace.shmem.codes.Cmp``); TIMEOUT is flagged when it gave up. On giving up, traced or not,
    the error block of this rank's heap counts it and describes it (first 16 per rank).

    Ordering: every thread's later loads are ordered after the acquire read that saw the flag
    (its own: no barrier is needed or made). Cost: one acquire load when the flag is already set;
    per extra spin, one acquire load, then one relaxed local load and (if time-bounded or traced)
    one timer read. Traced: the WAIT record is made from values the spin already holds (its
    start and last timer reads, spins, the last value) and stored by thread 0 right after the
    spin (immediate tracer: a release that follows at once waits for it) or later, off the
    path (deferred tracer, see ``ktrace.language.DeferredTracer``).
    """
    kt, v, ok = wait_value(kt, flag, expected, rank, peer, heap_bases, cmp, timeout_ns, max_spins, scope, name, backoff_ns, check_every)
    return kt


__all__ = [
    "DEFAULT_TIMEOUT_NS",
    "HEAP_ALIGN",
    "heap_base",
    "tick_ns",
    "load_acquire",
    "load_relaxed",
    "translate",
    "heap_offset",
    "timeouts",
    "load",
    "store",
    "get",
    "put",
    "copy",
    "atomic_add",
    "atomic_xchg",
    "atomic_cas",
    "atomic_and",
    "atomic_or",
    "atomic_xor",
    "atomic_min",
    "atomic_max",
    "notify",
    "wait",
    "wait_value",
]
