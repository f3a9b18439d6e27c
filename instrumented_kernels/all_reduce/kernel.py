"""All-reduce (sum) on the symmetric heap: one-shot and two-shot, with per-program flags.

One-shot (small messages): every rank copies its input into its heap (``stage``), tells every
peer, then reads every peer's staged copy and reduces locally. Each rank reads ``(W-1) * n``
elements over the links; one flag round trip of latency.

One-shot push (``one_shot_push``): every rank stores its input straight into its own slot of
every peer's heap (``inbox[src]``, remote stores: writes are posted, reads wait a round trip),
tells every peer, then sums its own input and the ``W-1`` slots the peers wrote into its heap,
all local reads. Each rank writes ``(W-1) * n`` elements over the links and reads nothing
remote; no staging copy.

Two-shot (large messages): chunk ``c`` belongs to rank ``c % W``. Reduce-scatter: every rank
pushes its copy of the chunks others own into the owner's ``gather`` slots and signals; the
owner sums them with its own input. All-gather: the owner pushes the reduced chunk into every
peer's ``result`` and signals; the peers copy it out. Each rank moves ``2 (W-1) n / W``.

Both kernels are persistent: ``G`` programs (at most the SM count, the same on every rank)
loop over chunks ``c = pid, pid + G, ...``; a flag per (sender, program) covers all of that
program's chunks, so a program sends every signal before it waits on any, and every program is
resident: no wait can block a signal it depends on. Flags are epoch counters (``wait >= epoch``,
never reset); the staging buffers alternate by epoch parity, so back-to-back calls need no
host synchronisation (a rank can be at most one call ahead of any peer: each call waits for
every peer's signal of that call).

Notify numbering (for ``Fault(skip_notify=k)``): program ``p``'s notify to ``peer`` has index
``p * W + peer`` (both one-shots, and two-shot reduce-scatter); two-shot all-gather notifies have
``(G + p) * W + peer``.

Probes (traced launches), three densities (``AllReduceConfig.probes``):

* ``"waits"``: only the WAIT events (their releases are not recorded: a report says so).

* ``"lean"`` (default): both ends of every hand-off, a WAIT per wait (``ks.wait``: who waited on
  whom, how long, timeouts) and a NOTIFY per signal (``ks.notify`` stores its record after the
  release, so nothing of it sits in front of the release fence), and one span per chunk of work:
  ``reduce`` (one-shot: the reads of every peer's copy, the sum and the store; two-shot: the
  owner's reduction and push). Nothing is recorded between the staging stores and the notifies,
  where a span's end would sit in front of the release fences on the critical path of a small
  message (4-16 KiB on 4 x H200, first benchmark method: the full density, 17 slots per program,
  timed 2.6-2.9 % over untraced, with the notify records then stored before the release).
* ``"full"``: also the spans ``stage`` (one per chunk), ``pull`` (one-shot: one per chunk and
  peer instead of ``reduce``), ``push`` (one-shot push: one per chunk, its stores to every peer),
  ``scatter`` / ``gather`` (two-shot).

``expected_events`` gives the exact counts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
import ktrace.shmem.language as ks
from instrumented_kernels import harness as H

log = logging.getLogger("ktrace")

METHODS = ("one_shot", "one_shot_push", "two_shot")
PROBES = ("waits", "lean", "full")


def _slots(meta, full_spans: int, phases: int) -> int:
    """Slots per program: the spans of its ``K`` chunks (``full_spans`` per chunk at the full
    density, one at the lean, none with only waits), and per phase a wait and a notify (two slots
    each) per peer (only the waits with ``WAITS_ONLY``)."""
    W, G = meta["WORLD"], meta["nprog"]
    K = triton.cdiv(triton.cdiv(meta["n"], meta["BLOCK"]), G)
    waits_only = meta.get("WAITS_ONLY", False)
    spans = K * full_spans if meta.get("FULL_PROBES", False) else K * (not waits_only)
    return spans + phases * 2 * (W - 1) * (1 if waits_only else 2) + 1


def _one_shot_slots(meta) -> int:
    return _slots(meta, meta["WORLD"], 1)


def _two_shot_slots(meta) -> int:
    return _slots(meta, 2, 2)


@triton.jit
def _signal_peers(kt, quiet, flags, epoch, rank, heap_bases, nprog, pid, index0, fault_delay_ns, fault_skip,
                  WORLD: tl.constexpr, FAULTS: tl.constexpr, NOTIFIES: tl.constexpr):
    """Set ``flags[rank, pid] = epoch`` on every peer (releases at system scope), recorded as
    NOTIFY events with ``NOTIFIES`` (every density but "waits"). Notify index
    ``(index0 + pid) * W + peer``."""
    for i in tl.static_range(1, WORLD):
        peer = (rank + i) % WORLD
        if NOTIFIES:
            kt = H.notify(kt, flags + rank * nprog + pid, epoch, rank, peer, heap_bases, (index0 + pid) * WORLD + peer,
                          fault_delay_ns, fault_skip, FAULTS)
        else:
            H.notify(quiet, flags + rank * nprog + pid, epoch, rank, peer, heap_bases, (index0 + pid) * WORLD + peer,
                     fault_delay_ns, fault_skip, FAULTS)
    return kt


@triton.jit
def _wait_peers(kt, flags, epoch, rank, heap_bases, nprog, pid, WORLD: tl.constexpr, TIMEOUT_NS: tl.constexpr):
    """Wait until every peer's program ``pid`` set ``flags[peer, pid] >= epoch`` here (bounded)."""
    for i in tl.static_range(1, WORLD):
        peer = (rank + i) % WORLD
        kt = ks.wait(kt, flags + peer * nprog + pid, epoch, rank, peer, heap_bases, timeout_ns=TIMEOUT_NS)
    return kt


@ktrace.trace(events_per_program=_one_shot_slots)
@triton.jit(do_not_specialize=H.RUNTIME_INTS)
def all_reduce_one_shot(
    inp,
    out,
    stage,
    flags,
    n,
    epoch,
    rank,
    heap_bases,
    nprog,
    fault_delay_ns,
    fault_skip,
    WORLD: tl.constexpr,
    BLOCK: tl.constexpr,
    FAULTS: tl.constexpr = False,
    TIMEOUT_NS: tl.constexpr = ks.DEFAULT_TIMEOUT_NS,
    FULL_PROBES: tl.constexpr = False,
    WAITS_ONLY: tl.constexpr = False,
    ktrace_buf=None,
    KTRACE: tl.constexpr = 0,
):
    """One-shot all-reduce of ``n`` elements: ``out = sum over ranks of inp``.

    Args:
        inp, out: this rank's input and output (``n`` elements, any device memory).
        stage: heap tensor (2, n_pad): the staged copies, by epoch parity.
        flags: heap int32 (W, G): ``flags[src, p]`` = last epoch src's program p staged.
        epoch: this call's number (>= 1, increasing by one per call).
        nprog: G, the number of programs (the same on every rank).
    """
    kt = kl.init(ktrace_buf, KTRACE)
    quiet = kl.init(ktrace_buf, 0)  # lean density: probes on it compile to nothing
    pid = tl.program_id(0)
    C = tl.cdiv(n, BLOCK)
    par = epoch % 2
    my_stage = stage + par * (C * BLOCK).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    # 1. stage my chunks in the heap, then tell every peer.
    for c in range(pid, C, nprog):
        o = c.to(tl.int64) * BLOCK + offs
        m = o < n
        if FULL_PROBES:
            s = kl.begin(kt, "stage", c, BLOCK)
            tl.store(my_stage + o, tl.load(inp + o, mask=m), mask=m)
            kt = kl.end(kt, s)
        else:
            tl.store(my_stage + o, tl.load(inp + o, mask=m), mask=m)
    kt = _signal_peers(kt, quiet, flags, epoch, rank, heap_bases, nprog, pid, 0, fault_delay_ns, fault_skip, WORLD, FAULTS, not WAITS_ONLY)
    # 2. wait for every peer's program pid, then read and reduce.
    kt = _wait_peers(kt, flags, epoch, rank, heap_bases, nprog, pid, WORLD, TIMEOUT_NS)
    for c in range(pid, C, nprog):
        o = c.to(tl.int64) * BLOCK + offs
        m = o < n
        if FULL_PROBES:
            acc = tl.load(inp + o, mask=m, other=0.0).to(tl.float32)
            for i in tl.static_range(1, WORLD):
                peer = (rank + i) % WORLD
                s = kl.begin(kt, "pull", c, peer)
                acc += ks.load(my_stage + o, rank, peer, heap_bases, mask=m, other=0.0).to(tl.float32)
                kt = kl.end(kt, s)
            tl.store(out + o, acc.to(out.dtype.element_ty), mask=m)
        else:
            if not WAITS_ONLY:
                s = kl.begin(kt, "reduce", c, WORLD - 1)
            acc = tl.load(inp + o, mask=m, other=0.0).to(tl.float32)
            for i in tl.static_range(1, WORLD):
                peer = (rank + i) % WORLD
                acc += ks.load(my_stage + o, rank, peer, heap_bases, mask=m, other=0.0).to(tl.float32)
            tl.store(out + o, acc.to(out.dtype.element_ty), mask=m)
            if not WAITS_ONLY:
                kt = kl.end(kt, s)


def _push_slots(meta) -> int:
    return _slots(meta, 2, 1)


@ktrace.trace(events_per_program=_push_slots)
@triton.jit(do_not_specialize=H.RUNTIME_INTS)
def all_reduce_one_shot_push(
    inp,
    out,
    inbox,
    flags,
    n,
    epoch,
    rank,
    heap_bases,
    nprog,
    fault_delay_ns,
    fault_skip,
    WORLD: tl.constexpr,
    BLOCK: tl.constexpr,
    FAULTS: tl.constexpr = False,
    TIMEOUT_NS: tl.constexpr = ks.DEFAULT_TIMEOUT_NS,
    FULL_PROBES: tl.constexpr = False,
    WAITS_ONLY: tl.constexpr = False,
    ktrace_buf=None,
    KTRACE: tl.constexpr = 0,
):
    """One-shot all-reduce by pushing: ``out = sum over ranks of inp``, reading only local memory.

    Args:
        inp, out: this rank's input and output (``n`` elements, any device memory).
        inbox: heap tensor (2, W, n_pad): ``inbox[par, src]`` = rank src's input, written by src
            into every rank's heap (by epoch parity).
        flags: heap int32 (W, G): ``flags[src, p]`` = last epoch src's program p pushed.
        epoch: this call's number (>= 1, increasing by one per call).
        nprog: G, the number of programs (the same on every rank).
    """
    kt = kl.init(ktrace_buf, KTRACE)
    quiet = kl.init(ktrace_buf, 0)  # lean density: probes on it compile to nothing
    pid = tl.program_id(0)
    C = tl.cdiv(n, BLOCK)
    span = (C * BLOCK).to(tl.int64)
    base = inbox + (epoch % 2) * (WORLD * span)
    mine = base + rank * span  # my slot, at the same offset in every rank's heap
    offs = tl.arange(0, BLOCK)
    # 1. store my chunks into my slot on every peer, then tell them.
    for c in range(pid, C, nprog):
        o = c.to(tl.int64) * BLOCK + offs
        m = o < n
        x = tl.load(inp + o, mask=m)
        if FULL_PROBES:
            s = kl.begin(kt, "push", c, WORLD - 1)
            for i in tl.static_range(1, WORLD):
                ks.store(mine + o, x, rank, (rank + i) % WORLD, heap_bases, mask=m)
            kt = kl.end(kt, s)
        else:
            for i in tl.static_range(1, WORLD):
                ks.store(mine + o, x, rank, (rank + i) % WORLD, heap_bases, mask=m)
    kt = _signal_peers(kt, quiet, flags, epoch, rank, heap_bases, nprog, pid, 0, fault_delay_ns, fault_skip, WORLD, FAULTS, not WAITS_ONLY)
    # 2. wait for every peer's program pid, then sum the slots they wrote here.
    kt = _wait_peers(kt, flags, epoch, rank, heap_bases, nprog, pid, WORLD, TIMEOUT_NS)
    for c in range(pid, C, nprog):
        o = c.to(tl.int64) * BLOCK + offs
        m = o < n
        if not WAITS_ONLY:
            s = kl.begin(kt, "reduce", c, WORLD - 1)
        acc = tl.load(inp + o, mask=m, other=0.0).to(tl.float32)
        for i in tl.static_range(1, WORLD):
            src = (rank + i) % WORLD
            acc += tl.load(base + src * span + o, mask=m, other=0.0).to(tl.float32)
        tl.store(out + o, acc.to(out.dtype.element_ty), mask=m)
        if not WAITS_ONLY:
            kt = kl.end(kt, s)


@ktrace.trace(events_per_program=_two_shot_slots)
@triton.jit(do_not_specialize=H.RUNTIME_INTS)
def all_reduce_two_shot(
    inp,
    out,
    gather,
    result,
    flags_rs,
    flags_ag,
    n,
    epoch,
    rank,
    heap_bases,
    nprog,
    fault_delay_ns,
    fault_skip,
    WORLD: tl.constexpr,
    BLOCK: tl.constexpr,
    FAULTS: tl.constexpr = False,
    TIMEOUT_NS: tl.constexpr = ks.DEFAULT_TIMEOUT_NS,
    FULL_PROBES: tl.constexpr = False,
    WAITS_ONLY: tl.constexpr = False,
    ktrace_buf=None,
    KTRACE: tl.constexpr = 0,
):
    """Two-shot all-reduce of ``n`` elements (reduce-scatter, then all-gather, through the heap).

    Args:
        inp, out: this rank's input and output (``n`` elements).
        gather: heap (2, W, CO * BLOCK): ``gather[par, src, j]`` = src's copy of my j-th chunk
            (chunk ``j * W + rank``); CO = chunks per owner.
        result: heap (2, C * BLOCK): reduced chunks pushed by their owners.
        flags_rs, flags_ag: heap int32 (W, G): reduce-scatter / all-gather signals per
            (sender, program).
    """
    kt = kl.init(ktrace_buf, KTRACE)
    quiet = kl.init(ktrace_buf, 0)  # lean density: probes on it compile to nothing
    pid = tl.program_id(0)
    C = tl.cdiv(n, BLOCK)
    CO = tl.cdiv(C, WORLD)
    par = epoch % 2
    gbuf = gather + par * (WORLD * CO * BLOCK).to(tl.int64)
    rbuf = result + par * (C * BLOCK).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    # 1. reduce-scatter, send: my copy of each chunk another rank owns goes to its owner.
    for c in range(pid, C, nprog):
        owner = c % WORLD
        if owner != rank:
            o = c.to(tl.int64) * BLOCK + offs
            m = o < n
            dst = gbuf + (rank * CO + c // WORLD).to(tl.int64) * BLOCK + offs
            if FULL_PROBES:
                s = kl.begin(kt, "scatter", c, owner)
                ks.store(dst, tl.load(inp + o, mask=m), rank, owner, heap_bases, mask=m)
                kt = kl.end(kt, s)
            else:
                ks.store(dst, tl.load(inp + o, mask=m), rank, owner, heap_bases, mask=m)
    kt = _signal_peers(kt, quiet, flags_rs, epoch, rank, heap_bases, nprog, pid, 0, fault_delay_ns, fault_skip, WORLD, FAULTS, not WAITS_ONLY)
    # 2. reduce my chunks; push each result to every peer.
    kt = _wait_peers(kt, flags_rs, epoch, rank, heap_bases, nprog, pid, WORLD, TIMEOUT_NS)
    for c in range(pid + 0, C, nprog):
        if c % WORLD == rank:
            if not WAITS_ONLY:
                s = kl.begin(kt, "reduce", c, BLOCK)
            o = c.to(tl.int64) * BLOCK + offs
            m = o < n
            acc = tl.load(inp + o, mask=m, other=0.0).to(tl.float32)
            for i in tl.static_range(1, WORLD):
                src = (rank + i) % WORLD
                acc += tl.load(gbuf + (src * CO + c // WORLD).to(tl.int64) * BLOCK + offs, mask=m, other=0.0).to(tl.float32)
            r = acc.to(out.dtype.element_ty)
            tl.store(out + o, r, mask=m)
            for i in tl.static_range(1, WORLD):
                peer = (rank + i) % WORLD
                ks.store(rbuf + o, r, rank, peer, heap_bases, mask=m)
            if not WAITS_ONLY:
                kt = kl.end(kt, s)
    kt = _signal_peers(kt, quiet, flags_ag, epoch, rank, heap_bases, nprog, pid, nprog, fault_delay_ns, fault_skip, WORLD, FAULTS, not WAITS_ONLY)
    # 3. all-gather, receive: copy out the chunks the others reduced.
    kt = _wait_peers(kt, flags_ag, epoch, rank, heap_bases, nprog, pid, WORLD, TIMEOUT_NS)
    for c in range(pid + 0, C, nprog):
        owner = c % WORLD
        if owner != rank:
            o = c.to(tl.int64) * BLOCK + offs
            m = o < n
            if FULL_PROBES:
                s = kl.begin(kt, "gather", c, owner)
                tl.store(out + o, tl.load(rbuf + o, mask=m), mask=m)
                kt = kl.end(kt, s)
            else:
                tl.store(out + o, tl.load(rbuf + o, mask=m), mask=m)


# ---------------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllReduceConfig:
    """Shape and schedule of an :class:`AllReduce` plan (validated on construction).

    Args:
        n: elements per rank.
        dtype: element type name: "bfloat16", "float16" or "float32".
        method: "one_shot_push" (inputs pushed into the peers' heaps; the default: faster than
            the pull at every size measured up to 4 MiB on 4 x H200), "one_shot" (peers' staged
            copies pulled) or "two_shot".
        block: elements per chunk (power of two); 0 picks one from ``n`` and the SM count.
        max_programs: upper bound on programs (0: the SM count, agreed as the minimum over ranks).
        timeout_ns: bound of every wait (ns).
        num_warps: warps per program (0: 16 for the push's 8192-element chunks, else 8).
        probes: default probe density of a traced launch: "waits" (only the waits), "lean"
            (every wait and notify, one span per chunk) or "full" (a span per step as well); see
            the module docstring.
    """

    n: int
    dtype: str = "bfloat16"
    method: str = "one_shot_push"
    block: int = 0
    max_programs: int = 0
    timeout_ns: int = 5_000_000_000
    num_warps: int = 0
    probes: str = "lean"

    def __post_init__(self):
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be a positive int, got {self.n!r}")
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError(f"dtype must be bfloat16, float16 or float32, got {self.dtype!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.block and (self.block < 128 or self.block & (self.block - 1)):
            raise ValueError(f"block must be 0 (auto) or a power of two >= 128, got {self.block}")
        if self.probes not in PROBES:
            raise ValueError(f"probes must be one of {PROBES}, got {self.probes!r}")
        if self.max_programs < 0 or self.timeout_ns <= 0 or self.num_warps not in (0, 1, 2, 4, 8, 16):
            raise ValueError(f"bad max_programs/timeout_ns/num_warps in {self}")


def pick_block(n: int, programs: int, method: str = "one_shot") -> int:
    """A chunk size for ``n`` elements and at most ``programs`` programs.

    ``one_shot`` and ``two_shot`` spread the elements over about ``programs`` programs (chunks of
    512 .. 8192). ``one_shot_push`` runs fewer, larger chunks: every program adds ``W - 1``
    notifies (each a release that waits for the program's remote stores) and ``W - 1`` waits, and
    on 4 x H200 (``benchmarks/allreduce_tune.py``) 1024-element chunks were fastest up to 64 KiB
    (9.07 µs vs 9.59 with 512) and 8192 above, with 16 warps (256 KiB: 11.49 and 11.70 µs in two
    sweeps vs 11.73 and 12.2 with 1024; 1 MiB: 19.5-19.7 µs vs 22.5-23.6 with 4096).
    """
    if method == "one_shot_push":
        return 1024 if n <= 1 << 15 else 8192
    per = triton.cdiv(n, programs)
    return int(min(8192, max(512, triton.next_power_of_2(per))))


class AllReduce:
    """A reusable all-reduce over the heap's ranks (construction is collective).

    Usage::

        ar = AllReduce(harness.heap(AllReduce.heap_bytes(cfg, W)), cfg)
        out = ar(x)                 # every rank, same n; out = sum of every rank's x
    """

    def __init__(self, heap, cfg: AllReduceConfig):
        import torch

        self.heap, self.cfg = heap, cfg
        self.rank, self.world = heap.rank, heap.world_size
        self.dtype = getattr(torch, cfg.dtype)
        sms = torch.cuda.get_device_properties(heap.device).multi_processor_count
        limit = cfg.max_programs or sms
        limit = min(heap.all_gather_object(min(limit, sms)))  # the same on every rank
        self.block = cfg.block or pick_block(cfg.n, limit, cfg.method)
        self.num_warps = cfg.num_warps or (16 if cfg.method == "one_shot_push" and self.block >= 8192 else 8)
        self.chunks = triton.cdiv(cfg.n, self.block)
        self.nprog = min(self.chunks, limit)
        W, C, B, G = self.world, self.chunks, self.block, self.nprog
        if cfg.method == "one_shot":
            self.stage = heap.zeros(2, C * B, dtype=self.dtype, name="ar1.stage")
            self.flags = heap.zeros(W, G, dtype=torch.int32, name="ar1.flags")
        elif cfg.method == "one_shot_push":
            self.inbox = heap.zeros(2, W, C * B, dtype=self.dtype, name="ar1p.inbox")
            self.flags = heap.zeros(W, G, dtype=torch.int32, name="ar1p.flags")
        else:
            CO = triton.cdiv(C, W)
            self.gather = heap.zeros(2, W, CO * B, dtype=self.dtype, name="ar2.gather")
            self.result = heap.zeros(2, C * B, dtype=self.dtype, name="ar2.result")
            self.flags_rs = heap.zeros(W, G, dtype=torch.int32, name="ar2.flags_rs")
            self.flags_ag = heap.zeros(W, G, dtype=torch.int32, name="ar2.flags_ag")
        heap.barrier()
        self.epoch = 0

    @staticmethod
    def heap_bytes(cfg: AllReduceConfig, world_size: int, programs: int = 132) -> int:
        """Heap bytes a plan of ``cfg`` allocates (an upper bound)."""
        block = cfg.block or pick_block(cfg.n, programs, cfg.method)
        c = triton.cdiv(cfg.n, block)
        esize = 4 if cfg.dtype == "float32" else 2
        if cfg.method == "one_shot":
            data = 2 * c * block * esize
        elif cfg.method == "one_shot_push":
            data = 2 * world_size * c * block * esize
        else:
            data = 2 * world_size * triton.cdiv(c, world_size) * block * esize + 2 * c * block * esize
        return data + 2 * world_size * c * 4 + 4 * 256

    @property
    def kernel(self):
        return {"one_shot": all_reduce_one_shot, "one_shot_push": all_reduce_one_shot_push, "two_shot": all_reduce_two_shot}[self.cfg.method]

    def __call__(self, x, out=None, fault: H.Fault = H.NO_FAULT, ktrace_buf=None, ktrace_slots: int = 0):
        """Launch one all-reduce of ``x`` into ``out`` (allocated if None); returns ``out``.

        Args:
            x: contiguous tensor of ``cfg.n`` elements of ``cfg.dtype`` on this rank's GPU.
            out: output tensor like ``x`` (may not alias ``x`` for two-shot).
            fault: fault injection (:class:`harness.Fault`).
            ktrace_buf, ktrace_slots: a direct traced launch into this buffer (benchmarks);
                otherwise an open ``ktrace.capture()`` traces the launch.
        """
        if x.numel() != self.cfg.n or x.dtype != self.dtype or not x.is_contiguous():
            raise ValueError(f"x must be a contiguous {self.dtype} tensor of {self.cfg.n} elements, got {x.dtype} {tuple(x.shape)}")
        if out is None:
            import torch

            out = torch.empty_like(x)
        fault.check_world(self.world)
        self.epoch += 1
        d, s = fault.kernel_args(self.rank)
        extra = {} if ktrace_buf is None else {"ktrace_buf": ktrace_buf, "KTRACE": ktrace_slots}
        common = dict(WORLD=self.world, BLOCK=self.block, FAULTS=fault.active, TIMEOUT_NS=self.cfg.timeout_ns,
                      FULL_PROBES=self.cfg.probes == "full", WAITS_ONLY=self.cfg.probes == "waits", num_warps=self.num_warps, **extra)
        if self.cfg.method == "one_shot":
            all_reduce_one_shot[(self.nprog,)](
                x, out, self.stage, self.flags, self.cfg.n, self.epoch, self.rank, self.heap.bases, self.nprog, d, s, **common
            )
        elif self.cfg.method == "one_shot_push":
            all_reduce_one_shot_push[(self.nprog,)](
                x, out, self.inbox, self.flags, self.cfg.n, self.epoch, self.rank, self.heap.bases, self.nprog, d, s, **common
            )
        else:
            all_reduce_two_shot[(self.nprog,)](
                x, out, self.gather, self.result, self.flags_rs, self.flags_ag, self.cfg.n, self.epoch, self.rank,
                self.heap.bases, self.nprog, d, s, **common
            )
        return out

    def slots(self) -> int:
        """Event slots per program of a traced launch (the kernel's default probe density)."""
        meta = {"WORLD": self.world, "nprog": self.nprog, "n": self.cfg.n, "BLOCK": self.block, "FULL_PROBES": self.cfg.probes == "full", "WAITS_ONLY": self.cfg.probes == "waits"}
        return {"one_shot": _one_shot_slots, "one_shot_push": _push_slots, "two_shot": _two_shot_slots}[self.cfg.method](meta)

    def expected_events(self) -> dict[str, int]:
        """Exact event counts of one traced launch on this rank: {"SPAN", "NOTIFY", "WAIT"}."""
        W, C, G = self.world, self.chunks, self.nprog
        full, notifies = self.cfg.probes == "full", self.cfg.probes != "waits"
        spans = notifies  # (one span per chunk at the lean density, none with only waits)
        mine = len(range(self.rank, C, W))
        if self.cfg.method == "one_shot":
            return {"SPAN": C * W if full else C * spans, "NOTIFY": G * (W - 1) * notifies, "WAIT": G * (W - 1)}
        if self.cfg.method == "one_shot_push":
            return {"SPAN": 2 * C if full else C * spans, "NOTIFY": G * (W - 1) * notifies, "WAIT": G * (W - 1)}
        return {"SPAN": 2 * C - mine if full else mine * spans, "NOTIFY": 2 * G * (W - 1) * notifies, "WAIT": 2 * G * (W - 1)}
