"""Kernels of ``benchmarks/probe_overhead.py``'s hand-off-bound suites (``--suite handoff``, ``diag``, ``small``).

Three kernels whose time is hand-offs between programs and ranks (and one with none), written
against the public API (``ktrace.language`` / ``ktrace.shmem.language``), each with compile-time
switches that turn one probe kind on at a time, so a traced variant differs from the untraced one
by exactly the probes it names:

``pingpong``
    One program per rank; rank ``first`` sets the peer's flag and waits for its own, the other
    waits then answers: ``rounds`` round trips per launch, two hand-offs each.
``pipeline``
    Two programs per rank: program 0 puts ``tiles`` tiles of ``tile_elems`` fp32 into the peer's
    heap and notifies after each; program 1 waits for each tile the peer sends here and copies it
    out. Tiles alternate between two heap buffers by launch parity.
``fanin``
    ``nprog`` programs per rank (one per SM); each round every program puts a small chunk into
    the peer's heap and adds 1 to one counter there, then waits until its own counter holds the
    peer's ``nprog`` arrivals of that round: ``nprog`` notifies into one flag, ``nprog`` waiters
    on it, ``rounds`` times per launch.
``burst`` (``--suite small``, no hand-off)
    A few programs, each copying one block once: a launch of a few microseconds whose probe cost
    is fixed costs only (a span, or the same record made by hand in parts, ``MANUAL``).

Probe switches (compile-time): ``WAITS`` (the waits are traced: WAIT records), ``NOTIFIES``
(NOTIFY records), ``SPANS`` (spans per hand-off: around each round, tile, or put; 4 = the tile
cut into four spans), ``MARKS`` (an instant per hand-off), ``COUNTERS`` (a counter per hand-off).
``BACKOFF`` (pipeline, fan-in): a waiting program sleeps that many ns between reads of a flag (a
schedule experiment: does reading the flag less often speed the producer up?).
``DIAG`` (ping-pong only, untraced) adds raw operations at the hand-off instead of probes, to
tell apart what a probe's parts cost (see ``DIAG_NAMES``).

Flags are epoch counters (never reset): launch ``epoch`` (1, 2, ...) of a kernel waits for values
derived from it, so launches follow each other with no host synchronisation.
"""

from __future__ import annotations

import triton
import triton.language as tl

import ktrace.language as kl
import ktrace.shmem.language as ks

#: DIAG codes of ``pingpong`` (untraced, raw operations between a wait and the next notify).
DIAG_NAMES = {
    0: "nothing",
    1: "8 x st.b64 by thread 0 before the release",
    2: "8 x st.b64 by thread 0 after the release",
    3: "8 x st.b64 by the last warp's lane 0 before the release",
    4: "1 x st.b64 by thread 0 before the release",
    5: "2 timer reads before the release",
    6: "4 x st.v2.b64 by thread 0 before the release",
}


@triton.jit
def _st_b64_by(ptr, value, tid):
    """One 8-byte store of ``value`` at ``ptr`` by the thread whose %tid.x is ``tid`` (raw PTX)."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, $3; @p st.global.b64 [$1], $2; mov.u32 $0, 0; }",
        "=r,l,l,r,~{memory}",
        [ptr, value, tid],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def _st_v2_by(ptr, a, b, tid):
    """One 16-byte store of ``(a, b)`` at ``ptr`` (16-byte aligned) by the thread ``tid``."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, $4; @p st.global.v2.b64 [$1], {$2, $3}; mov.u32 $0, 0; }",
        "=r,l,l,l,r,~{memory}",
        [ptr, a, b, tid],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def _diag(scratch, i, DIAG: tl.constexpr, WHERE: tl.constexpr, NW: tl.constexpr):
    """The raw operations of DIAG placed at WHERE (0: before the release, 1: after it)."""
    v = tl.cast(i, tl.int64)
    if WHERE == 0:
        if DIAG == 1:
            for k in tl.static_range(8):
                tl.store(scratch + k, v + k)
        if DIAG == 3:
            for k in tl.static_range(8):
                _st_b64_by(scratch + k, v + k, (NW - 1) * 32)
        if DIAG == 4:
            tl.store(scratch, v)
        if DIAG == 5:
            t = kl.now()
            t2 = kl.now()
            tl.store(scratch + 9, t2 - t, mask=t2 < t)  # keeps both reads; never stores
        if DIAG == 6:
            for k in tl.static_range(4):
                _st_v2_by(scratch + 2 * k, v + k, v, 0)
    else:
        if DIAG == 2:
            for k in tl.static_range(8):
                tl.store(scratch + k, v + k)


@triton.jit
def _notify_timed(kt, flag, value, rank, peer, heap_bases, T0: tl.constexpr):
    """``ks.notify`` (set, sys scope) with its NOTIFY record's timer reads placed by ``T0`` (an
    experiment on where the reads cost): 1 the start read before the CTA barrier; 2 no start
    read (start = end, read after the release); 3 no timer read at all (both 0). It reads the
    heap's bases with ``tl.load``, as ``ks.notify`` did before ``ks.heap_base``: in a traced loop
    those reads stay in front of the barrier, which is what this experiment found (BENCHMARKS.md)."""
    my_base = tl.load(heap_bases + rank)
    remote = ks._moved(flag, tl.load(heap_bases + peer) - my_base)
    if T0 == 1:
        t0 = kl.now()
    tl.debug_barrier()
    tl.atomic_xchg(remote, value, sem="release", scope="sys")
    if T0 == 1:
        t1 = kl.now()
    elif T0 == 2:
        t1 = kl.now()
        t0 = t1
    else:
        t0 = tl.zeros((), tl.int64)
        t1 = t0
    kt = kl.flush_single(kt)
    off = flag.to(tl.int64, bitcast=True) - my_base
    return kl.record_notify(kt, "notify", t0, t1, peer, value, off, kt.cur)


@triton.jit
def _delay(cycles):
    """Busy-wait about ``cycles`` SM cycles (``%clock64``); one clock read when ``cycles`` <= 0."""
    t = _clock()
    c = t
    while c - t < cycles:
        c = _clock()


@triton.jit
def _jitter(i, side, J):
    """A pseudo-random delay in [0, J) cycles for round ``i`` of ``side`` (the same sequence in
    every variant and launch)."""
    h = (tl.cast(i, tl.int64) * 2654435761 + tl.cast(side, tl.int64) * 40503 + 12345) & 0xFFFFFFFF
    h = (h ^ (h >> 13)) * 1274126177 & 0xFFFFFFFF
    return h % J


@triton.jit(do_not_specialize=["rounds", "epoch", "rank", "peer", "first", "delay"])
def pingpong(
    flag,
    scratch,
    rounds,
    epoch,
    rank,
    peer,
    first,
    heap_bases,
    WAITS: tl.constexpr = False,
    NOTIFIES: tl.constexpr = False,
    SPANS: tl.constexpr = 0,
    MARKS: tl.constexpr = False,
    COUNTERS: tl.constexpr = False,
    DIAG: tl.constexpr = 0,
    NW: tl.constexpr = 4,
    LOCAL: tl.constexpr = False,
    NOTIFY_T0: tl.constexpr = 0,
    JITTER: tl.constexpr = 0,
    CHECK: tl.constexpr = 1,
    delay=0,
    ktrace_buf=None,
    KTRACE: tl.constexpr = 0,
):
    """``rounds`` round trips with ``peer``: ``flag`` (int32, this rank's heap) is the one flag.

    The rank with ``first`` != 0 signals first each round. Values: ``(epoch - 1) * rounds + i + 1``.
    With ``LOCAL`` the two sides are programs 0 and 1 of one launch on one GPU (``flag[0]`` and
    ``flag[1]``; ``rank``, ``peer`` and ``first`` are ignored; ``heap_bases[0]`` is the error block).
    Each side busy-waits ``delay`` SM cycles after each wait, before its next notify (the
    polling-phase sweep), plus a pseudo-random ``[0, JITTER)`` cycles per round when JITTER > 0.
    ``CHECK``: the waits' ``check_every``.
    """
    kt = kl.init(ktrace_buf, KTRACE)
    quiet = kl.init(ktrace_buf, 0)
    base = (epoch - 1) * rounds
    if LOCAL:
        pid = tl.program_id(0)
        mine = flag + pid
        theirs = flag + 1 - pid
        rank = 0
        peer = 0
        first = (pid == 0).to(tl.int32)
    else:
        mine = flag
        theirs = flag
    for i in range(rounds):
        v = base + i + 1
        if SPANS > 0:
            s = kl.begin(kt, "round", i)
        if first != 0:
            if NOTIFIES:
                if NOTIFY_T0 > 0:
                    kt = _notify_timed(kt, theirs, v, rank, peer, heap_bases, NOTIFY_T0)
                else:
                    kt = ks.notify(kt, theirs, v, rank, peer, heap_bases)
            else:
                ks.notify(quiet, theirs, v, rank, peer, heap_bases)
            _diag(scratch, i, DIAG, 1, NW)
        if WAITS:
            kt = ks.wait(kt, mine, v, rank, peer, heap_bases, check_every=CHECK)
        else:
            ks.wait(quiet, mine, v, rank, peer, heap_bases, check_every=CHECK)
        d = delay
        if JITTER > 0:
            d = d + _jitter(i, first, JITTER)
        _delay(d)
        _diag(scratch, i, DIAG, 0, NW)
        if first == 0:
            if NOTIFIES:
                if NOTIFY_T0 > 0:
                    kt = _notify_timed(kt, theirs, v, rank, peer, heap_bases, NOTIFY_T0)
                else:
                    kt = ks.notify(kt, theirs, v, rank, peer, heap_bases)
            else:
                ks.notify(quiet, theirs, v, rank, peer, heap_bases)
            _diag(scratch, i, DIAG, 1, NW)
        if SPANS > 0:
            kt = kl.end(kt, s)
        if MARKS:
            kt = kl.mark(kt, "round", i)
        if COUNTERS:
            kt = kl.counter(kt, "round", i)


@triton.jit(do_not_specialize=["tiles", "tile_elems", "epoch", "rank", "peer"])
def pipeline(
    src,
    dst,
    out,
    flags,
    tiles,
    tile_elems,
    epoch,
    rank,
    peer,
    heap_bases,
    BLOCK: tl.constexpr,
    WAITS: tl.constexpr = False,
    NOTIFIES: tl.constexpr = False,
    SPANS: tl.constexpr = 0,
    BACKOFF: tl.constexpr = 0,
    CHECK: tl.constexpr = 1,
    PAIR: tl.constexpr = 1,
    SIDE: tl.constexpr = 3,
    TIMERS: tl.constexpr = False,
    ktrace_buf=None,
    KTRACE: tl.constexpr = 0,
):
    """Program 0 sends ``src`` (``tiles * tile_elems`` fp32) tile by tile into the peer's ``dst``
    (heap, 2 parities); program ``PAIR`` (default 1) receives the peer's tiles into ``out``, in a
    grid of ``PAIR + 1`` whose other programs return at once (so the consumer can sit on an SM far
    from the producer's). ``flags[t]`` (heap int32, one per tile) is set to ``epoch`` when tile
    ``t`` has landed. ``tile_elems`` must be a multiple of ``max(SPANS, 1) * BLOCK``. ``CHECK``:
    the waits' ``check_every``. ``SIDE``: the spans of the producer (1), the consumer (2) or both
    (3); ``TIMERS``: each span's two timer reads alone, nothing recorded (a control)."""
    kt = kl.init(ktrace_buf, KTRACE)
    quiet = kl.init(ktrace_buf, 0)
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    NS: tl.constexpr = SPANS if SPANS > 0 else 1
    PUT_SPANS: tl.constexpr = SPANS > 0 and (SIDE & 1) != 0 and not TIMERS
    TAKE_SPANS: tl.constexpr = SPANS > 0 and (SIDE & 2) != 0 and not TIMERS
    part = tile_elems // NS
    buf = dst + (epoch % 2).to(tl.int64) * tiles * tile_elems
    if pid == 0:
        for t in range(tiles):
            for j in tl.static_range(NS):
                if PUT_SPANS:
                    s = kl.begin(kt, "put", t, j)
                if TIMERS:
                    kl.timestamp(kt)
                for c in range(0, part, BLOCK):
                    o = t.to(tl.int64) * tile_elems + j * part + c + offs
                    ks.store(buf + o, tl.load(src + o), rank, peer, heap_bases)
                if PUT_SPANS:
                    kt = kl.end(kt, s)
                if TIMERS:
                    kl.timestamp(kt)
            if NOTIFIES:
                kt = ks.notify(kt, flags + t, epoch, rank, peer, heap_bases)
            else:
                ks.notify(quiet, flags + t, epoch, rank, peer, heap_bases)
    elif pid == PAIR:
        for t in range(tiles):
            if WAITS:
                kt = ks.wait(kt, flags + t, epoch, rank, peer, heap_bases, backoff_ns=BACKOFF, check_every=CHECK)
            else:
                ks.wait(quiet, flags + t, epoch, rank, peer, heap_bases, backoff_ns=BACKOFF, check_every=CHECK)
            for j in tl.static_range(NS):
                if TAKE_SPANS:
                    s = kl.begin(kt, "take", t, j)
                if TIMERS:
                    kl.timestamp(kt)
                for c in range(0, part, BLOCK):
                    o = t.to(tl.int64) * tile_elems + j * part + c + offs
                    tl.store(out + o, tl.load(buf + o))
                if TAKE_SPANS:
                    kt = kl.end(kt, s)
                if TIMERS:
                    kl.timestamp(kt)


@triton.jit(do_not_specialize=["rounds", "epoch", "rank", "peer", "nprog"])
def fanin(
    src,
    dst,
    counter,
    rounds,
    epoch,
    rank,
    peer,
    nprog,
    heap_bases,
    CHUNK: tl.constexpr,
    WAITS: tl.constexpr = False,
    NOTIFIES: tl.constexpr = False,
    SPANS: tl.constexpr = 0,
    BACKOFF: tl.constexpr = 0,
    CHECK: tl.constexpr = 1,
    ktrace_buf=None,
    KTRACE: tl.constexpr = 0,
):
    """Every round, program ``p`` puts ``src[p]`` (CHUNK fp32) into the peer's ``dst[p]`` (heap)
    and adds 1 to the peer's ``counter`` (heap int32), then waits until its own ``counter``
    reaches ``nprog * ((epoch - 1) * rounds + r + 1)``. Needs all ``nprog`` programs resident."""
    kt = kl.init(ktrace_buf, KTRACE)
    quiet = kl.init(ktrace_buf, 0)
    pid = tl.program_id(0)
    o = pid.to(tl.int64) * CHUNK + tl.arange(0, CHUNK)
    base = (epoch - 1) * rounds
    for r in range(rounds):
        if SPANS > 0:
            s = kl.begin(kt, "put", r)
        ks.put(src + o, dst + o, rank, peer, heap_bases)
        if SPANS > 0:
            kt = kl.end(kt, s)
        if NOTIFIES:
            kt = ks.notify(kt, counter, 1, rank, peer, heap_bases, op="add")
        else:
            ks.notify(quiet, counter, 1, rank, peer, heap_bases, op="add")
        want = nprog * (base + r + 1)
        if WAITS:
            kt = ks.wait(kt, counter, want, rank, peer, heap_bases, backoff_ns=BACKOFF, check_every=CHECK)
        else:
            ks.wait(quiet, counter, want, rank, peer, heap_bases, backoff_ns=BACKOFF, check_every=CHECK)


@triton.jit
def _clock():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,~{memory}", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def probe_cost(out, n, KIND: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """Cycles per iteration of a loop of ``n`` probes of one kind (one program; no hand-off).

    KIND: 0 nothing, 1 ``kl.now``, 2 ``kl.mark``, 3 ``kl.begin`` + ``kl.end``, 4 ``kl.counter``,
    5 ``kl.record_wait``, 6 ``kl.record_notify``. ``out[0]`` = cycles (SM clock), ``out[1]`` = ns.
    """
    kt = kl.init(ktrace_buf, KTRACE)
    acc = tl.zeros((), tl.int64)
    c0 = _clock()
    t0 = kl.now()
    for i in range(n):
        if KIND == 1:
            acc += kl.now()
        if KIND == 2:
            kt = kl.mark(kt, "m", i)
        if KIND == 3:
            s = kl.begin(kt, "s", i)
            kt = kl.end(kt, s)
        if KIND == 4:
            kt = kl.counter(kt, "c", i)
        if KIND == 5:
            t = kl.timestamp(kt)
            kt = kl.record_wait(kt, "w", t, t, 1, i, 64, i, i, 3, False)
        if KIND == 6:
            t = kl.timestamp(kt)
            kt = kl.record_notify(kt, "n", t, t, 1, i, 64, i)
    t1 = kl.now()
    c1 = _clock()
    tl.store(out, c1 - c0)
    tl.store(out + 1, t1 - t0)
    tl.store(out + 2, acc)


@triton.jit
def _lane_record(ktrace_buf):
    """This program's first slot in a buffer of two slots per program, and its placement word and
    storing thread, computed as ``kl.init`` computes them (for the hand-made records)."""
    rec, _, hw = kl._program_slots(ktrace_buf, 2)
    return rec, hw, kl.leader()


@triton.jit
def _lane_raw():
    """The grid position's raw registers (program ids and grid size), read in one asm block with
    no arithmetic on them (for MANUAL 3)."""
    return tl.inline_asm_elementwise(
        "mov.u32 $0, %ctaid.x; mov.u32 $1, %ctaid.y; mov.u32 $2, %ctaid.z; mov.u32 $3, %nctaid.x; mov.u32 $4, %nctaid.y;",
        "=r,=r,=r,=r,=r", [], dtype=(tl.int32, tl.int32, tl.int32, tl.int32, tl.int32), is_pure=True, pack=1)


@triton.jit
def burst(x, y, n, scratch, BLOCK: tl.constexpr, SPANS: tl.constexpr = 0, TIMERS: tl.constexpr = False,
          MANUAL: tl.constexpr = 0, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    """A launch of a few programs, each copying one ``BLOCK`` of ``x`` into ``y`` (``n`` elements):
    the shape of a small all-reduce at one rank (a few microseconds, fixed costs only), for
    ``--suite small``. ``SPANS``: a span around the copy (the all-reduce's ``reduce``). ``TIMERS``
    (untraced): the span's two timer reads alone, kept alive by a store that never happens.
    ``MANUAL`` (untraced tracer; ``ktrace_buf`` holds two slots per program): the span's record
    made by hand by thread 0, to see what each part of a record costs such a launch: 1 its lane's
    address, placement and thread 0 computed after the copy, then stored; 2 computed before the
    copy (as ``kl.init`` does), stored after it; 3 the grid registers read before the copy, the
    address computed from them after it; 4 computed before the copy and stored before it too
    (start = end); 5 computed after the copy, the store never made (a runtime-false predicate)."""
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    o = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    if MANUAL == 2 or MANUAL == 4:
        rec, hw, lead = _lane_record(ktrace_buf)
    if MANUAL == 3:
        cx, cy, cz, nx, ny = _lane_raw()
        hw = tl.cast(kl.hw_id(), tl.int64) << 32
        lead = kl.leader()
    if SPANS > 0:
        s = kl.begin(kt, "copy", pid)
    if TIMERS or MANUAL > 0:
        t0 = kl.now()
    if MANUAL == 4:
        kl._st_vec2_nv(rec.to(tl.int64, bitcast=True), t0, t0, hw | kl._tag(kl._SPAN, kl.region("copy"), 0), kl.pack(pid, 0), lead)
    tl.store(y + o, tl.load(x + o, mask=m), mask=m)
    if TIMERS or MANUAL > 0:
        t1 = kl.now()
        if TIMERS:
            tl.store(scratch, t1 - t0, mask=t1 < t0)  # keeps both reads; never stores
        elif MANUAL != 4:
            if MANUAL == 1 or MANUAL == 5:
                rec, hw, lead = _lane_record(ktrace_buf)
            if MANUAL == 3:
                lin = (cz.to(tl.int64) * ny + cy) * nx + cx
                rec = ktrace_buf + kl._HEADER_WORDS + lin * (2 * kl._WORDS)
            if MANUAL == 5:
                lead = lead * (t1 < t0).to(tl.int32)  # false at run time: the store is never made
            kl._st_vec2_nv(rec.to(tl.int64, bitcast=True), t0, t1, hw | kl._tag(kl._SPAN, kl.region("copy"), 0),
                           kl.pack(pid, 0), lead)
    if SPANS > 0:
        kt = kl.end(kt, s)
