"""MoE all-to-all for expert parallelism: dispatch and combine on the symmetric heap.

Rank ``r`` holds ``m_r <= M`` tokens ``x (M, D)``, their ``topk`` expert ids ``(M, K)`` and weights
``(M, K)``; expert ``e`` lives on rank ``e // EL`` (``EL = E / W`` experts per rank).

dispatch
    Each program computes the routing of this rank's tokens in registers (which ranks each
    token goes to, and its slot there: the number of earlier tokens routed to that rank), then
    sends its share of the (token, rank) pairs: a token goes once to each rank owning one of its
    experts, with its local expert ids and weights for that rank. Work is split across programs
    by pairs, not tokens (varlen work distribution: a program's tokens carry about the same
    number of sends). Every row has its own flag (set to the call's epoch after the row landed);
    program ``d < W`` also sends rank ``d`` the number of rows to expect. Receive side: every
    program waits for all the counts, then for the flags of its share of the incoming rows. When
    the kernel ends, ``recv_x[src, slot]`` holds every row routed here (slots in source-token
    order) and ``recv_tok / recv_eid / recv_w`` say where it came from and which local experts
    and weights apply.

combine (with the grouped-GEMM stand-in fused)
    Each program takes an equal share of the received rows, applies the experts' stand-in (a
    per-channel scale per expert: ``y = x * sum_k w_k * scale[e_k]`` over this rank's experts of
    the token: a diagonal grouped GEMM), and writes the row straight into its origin's
    ``comb_x[me, token]`` with a per-token flag. Receive side: each program takes a range of this
    rank's tokens, waits for the flag of every rank the token went to, and sums their rows.

Flags are epoch counters (never reset; ``wait >= epoch``) and every data buffer alternates by
epoch parity, so calls follow each other with no host synchronisation.

Notify numbering (``Fault(skip_notify=k)``), shared by both kernels: dispatch row of token ``t``
to rank ``d``: ``t * W + d``; dispatch count to rank ``d``: ``M * W + d``; combine row of token
``t`` back to its origin ``src``: ``M * W + W + t * W + src``.

Probes (traced launches): dispatch: ``route`` (one span per program), ``send`` (one per
(token, rank) pair: the row copy and its metadata), NOTIFY per row and per count, WAIT per count
and per incoming row. combine: ``expert`` (one per received row: stand-in and copy back), NOTIFY
per row, WAIT per (token, rank) pair, ``reduce`` (one per token: the sum of the returned rows).
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


def _dispatch_slots(meta) -> int:
    W, G, M = meta["WORLD"], meta["nprog"], meta["M"]
    per = triton.cdiv(W * M, G)
    return 1 + 2 + 3 * (per + W) + 2 * W + 2 * (per + 1) + 2


def _combine_slots(meta) -> int:
    W, G, M = meta["WORLD"], meta["nprog"], meta["M"]
    rows = triton.cdiv(W * M, G) + 1
    toks = triton.cdiv(M, G) + 1
    return 3 * rows + (1 + 2 * W) * toks + 2


@triton.jit
def _routing(topk_idx, m, EL, K: tl.constexpr, KP: tl.constexpr, MP: tl.constexpr, WORLD: tl.constexpr, WP: tl.constexpr):
    """Routing of this rank's tokens, in registers.

    Returns ``(R, S, cnt)``: ``R[t, d]`` = 1 if token t goes to rank d; ``S[t, d]`` its slot there
    (exclusive prefix over tokens); ``cnt[d]`` rows for rank d. Cost: one read of ``topk_idx``.
    """
    am = tl.arange(0, MP)
    ak = tl.arange(0, KP)
    aw = tl.arange(0, WP)
    idx = tl.load(topk_idx + am[:, None] * K + ak[None, :], mask=(am[:, None] < m) & (ak[None, :] < K), other=-1)
    dst = tl.where(idx >= 0, idx // EL, -1)
    hit = (dst[:, :, None] == aw[None, None, :]).to(tl.int32)
    R = tl.max(hit, axis=1)
    S = tl.cumsum(R, axis=0) - R
    cnt = tl.sum(R, axis=0)
    return R, S, cnt


@ktrace.trace(events_per_program=_dispatch_slots)
@triton.jit(do_not_specialize=H.RUNTIME_INTS)
def moe_dispatch(
    x,
    topk_idx,
    topk_w,
    m,
    recv_x,
    recv_tok,
    recv_eid,
    recv_w,
    recv_count,
    recv_flag,
    count_flag,
    epoch,
    rank,
    heap_bases,
    nprog,
    fault_delay_ns,
    fault_skip,
    M,
    D,
    EL,
    K: tl.constexpr,
    KP: tl.constexpr,
    MP: tl.constexpr,
    WORLD: tl.constexpr,
    WP: tl.constexpr,
    BLOCK_D: tl.constexpr,
    FAULTS: tl.constexpr = False,
    TIMEOUT_NS: tl.constexpr = ks.DEFAULT_TIMEOUT_NS,
    ktrace_buf=None,
    KTRACE: tl.constexpr = 0,
):
    """Send this rank's tokens to the ranks of their experts; wait for the rows sent here.

    Heap buffers (indexed ``[par]`` = epoch parity, ``src`` = sending rank, ``slot``):
    ``recv_x (2, W, M, D)``, ``recv_tok (2, W, M)``, ``recv_eid (2, W, M, KP)`` (local expert id or
    -1), ``recv_w (2, W, M, KP)`` (fp32), ``recv_count (2, W)``; flags ``recv_flag (W, M)`` and
    ``count_flag (W,)``.
    """
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    par = epoch % 2
    am = tl.arange(0, MP)
    ak = tl.arange(0, KP)
    aw = tl.arange(0, WP)
    ad = tl.arange(0, BLOCK_D)
    s = kl.begin(kt, "route", pid, m)
    R, S, cnt = _routing(topk_idx, m, EL, K, KP, MP, WORLD, WP)
    n_t = tl.sum(R, axis=1)
    P = tl.cumsum(n_t, axis=0) - n_t
    T = tl.sum(n_t)
    lo = pid * T // nprog
    hi = (pid + 1) * T // nprog
    t_lo = tl.sum((P < lo).to(tl.int32))
    t_hi = tl.sum((P < hi).to(tl.int32))
    kt = kl.end(kt, s, pid, t_hi - t_lo)
    # 1. send: each of my tokens goes once to every rank owning one of its experts.
    for t in range(t_lo, t_hi):
        sel = am == t
        rrow = tl.sum(tl.where(sel[:, None], R, 0), axis=0)
        srow = tl.sum(tl.where(sel[:, None], S, 0), axis=0)
        kmask = ak < K
        idx_row = tl.load(topk_idx + t * K + ak, mask=kmask, other=-1)
        w_row = tl.load(topk_w + t * K + ak, mask=kmask, other=0.0)
        for i in tl.static_range(WORLD):
            d = (rank + i) % WORLD
            routed = tl.sum(tl.where(aw == d, rrow, 0))
            if routed > 0:
                slot = tl.sum(tl.where(aw == d, srow, 0))
                sp = kl.begin(kt, "send", t, d)
                row = (par * WORLD + rank) * M + slot
                dst = recv_x + row.to(tl.int64) * D
                src = x + t.to(tl.int64) * D
                for d0 in range(0, D, BLOCK_D):
                    dm = d0 + ad < D
                    ks.store(dst + d0 + ad, tl.load(src + d0 + ad, mask=dm), rank, d, heap_bases, mask=dm)
                local = (idx_row // EL == d) & (idx_row >= 0)
                ks.store(recv_eid + row * KP + ak, tl.where(local, idx_row - d * EL, -1), rank, d, heap_bases)
                ks.store(recv_w + row * KP + ak, tl.where(local, w_row, 0.0), rank, d, heap_bases)
                ks.store(recv_tok + row, t, rank, d, heap_bases)
                kt = kl.end(kt, sp)
                kt = H.notify(kt, recv_flag + rank * M + slot, epoch, rank, d, heap_bases, t * WORLD + d, fault_delay_ns, fault_skip, FAULTS)
    # Program d tells rank d how many rows to expect from me.
    if pid < WORLD:
        c = tl.sum(tl.where(aw == pid, cnt, 0))
        ks.store(recv_count + par * WORLD + rank, c, rank, pid, heap_bases)
        kt = H.notify(kt, count_flag + rank, epoch, rank, pid, heap_bases, M * WORLD + pid, fault_delay_ns, fault_skip, FAULTS)
    # 2. receive: every count, then the flags of my share of the incoming rows.
    for i in tl.static_range(WORLD):
        src_rank = (rank + i) % WORLD
        kt = ks.wait(kt, count_flag + src_rank, epoch, rank, src_rank, heap_bases, timeout_ns=TIMEOUT_NS)
    cntv = tl.load(recv_count + par * WORLD + aw, mask=aw < WORLD, other=0)
    cum = tl.cumsum(cntv, axis=0)
    excl = cum - cntv
    rows = tl.sum(cntv)
    for j in range(pid * rows // nprog, (pid + 1) * rows // nprog):
        src_rank = tl.sum(((cum <= j) & (aw < WORLD)).to(tl.int32))
        slot = j - tl.sum(tl.where(aw == src_rank, excl, 0))
        kt = ks.wait(kt, recv_flag + src_rank * M + slot, epoch, rank, src_rank, heap_bases, timeout_ns=TIMEOUT_NS)


#: The combine's register bound on NVIDIA (ptxas ``.maxnreg``): the hardware's own limit, given
#: explicitly. Without any bound ptxas keeps the expert loop's gather of the K scale rows to four
#: loads in flight (90 registers at one rank, sm_90), as if other warps would hide their latency;
#: the plan runs one program per SM, so nothing does. With a bound it schedules all K + 1 loads of
#: an iteration at once (104-112 registers, no spill at 1-8 ranks) — the schedule the traced
#: kernel got by itself, which made traced combines 15-18 % faster than untraced ones (ncu on an
#: H100: 19.7 against 10.9 warp cycles per issued instruction). ``tests/kernels`` checks the SASS.
COMBINE_MAXNREG = 255


@ktrace.trace(events_per_program=_combine_slots)
@triton.jit(do_not_specialize=H.RUNTIME_INTS)
def moe_combine(
    topk_idx,
    m,
    scales,
    out,
    recv_x,
    recv_tok,
    recv_eid,
    recv_w,
    recv_count,
    comb_x,
    comb_flag,
    epoch,
    rank,
    heap_bases,
    nprog,
    fault_delay_ns,
    fault_skip,
    M,
    D,
    EL,
    K: tl.constexpr,
    KP: tl.constexpr,
    WORLD: tl.constexpr,
    WP: tl.constexpr,
    BLOCK_D: tl.constexpr,
    FAULTS: tl.constexpr = False,
    TIMEOUT_NS: tl.constexpr = ks.DEFAULT_TIMEOUT_NS,
    ktrace_buf=None,
    KTRACE: tl.constexpr = 0,
):
    """Apply the experts' stand-in to the rows dispatched here and return them; sum what returns.

    ``scales (EL, D)`` fp32: this rank's experts. ``comb_x (2, W, M, D)`` heap: rows returned by
    rank ``d`` for my token ``t`` at ``[par, d, t]``; ``comb_flag (W, M)``. ``out (M, D)``: rows
    ``t < m`` are written.
    """
    kt = kl.init(ktrace_buf, KTRACE)
    pid = tl.program_id(0)
    par = epoch % 2
    ak = tl.arange(0, KP)
    aw = tl.arange(0, WP)
    ad = tl.arange(0, BLOCK_D)
    # 1. expert stand-in on my share of the received rows, written back to their origin.
    cntv = tl.load(recv_count + par * WORLD + aw, mask=aw < WORLD, other=0)
    cum = tl.cumsum(cntv, axis=0)
    excl = cum - cntv
    rows = tl.sum(cntv)
    for j in range(pid * rows // nprog, (pid + 1) * rows // nprog):
        src_rank = tl.sum(((cum <= j) & (aw < WORLD)).to(tl.int32))
        slot = j - tl.sum(tl.where(aw == src_rank, excl, 0))
        row = (par * WORLD + src_rank) * M + slot
        sp = kl.begin(kt, "expert", src_rank, slot)
        tok = tl.load(recv_tok + row)
        eid = tl.load(recv_eid + row * KP + ak)
        w = tl.load(recv_w + row * KP + ak)
        has = eid >= 0
        xin = recv_x + row.to(tl.int64) * D
        dst = comb_x + ((par * WORLD + rank) * M + tok).to(tl.int64) * D
        for d0 in range(0, D, BLOCK_D):
            dm = d0 + ad < D
            sc = tl.load(scales + eid[:, None].to(tl.int64) * D + d0 + ad[None, :], mask=has[:, None] & dm[None, :], other=0.0)
            scale = tl.sum(w[:, None] * sc, axis=0)
            y = tl.load(xin + d0 + ad, mask=dm, other=0.0).to(tl.float32) * scale
            ks.store(dst + d0 + ad, y.to(comb_x.dtype.element_ty), rank, src_rank, heap_bases, mask=dm)
        kt = kl.end(kt, sp)
        kt = H.notify(kt, comb_flag + rank * M + tok, epoch, rank, src_rank, heap_bases, M * WORLD + WORLD + tok * WORLD + src_rank, fault_delay_ns, fault_skip, FAULTS)
    # 2. my tokens: wait for every rank each went to, then sum the returned rows.
    for t in range(pid * m // nprog, (pid + 1) * m // nprog):
        idx_row = tl.load(topk_idx + t * K + ak, mask=ak < K, other=-1)
        dst_row = tl.where(idx_row >= 0, idx_row // EL, -1)
        rrow = tl.max((dst_row[:, None] == aw[None, :]).to(tl.int32), axis=0)
        for i in tl.static_range(WORLD):
            d = (rank + i) % WORLD
            if tl.sum(tl.where(aw == d, rrow, 0)) > 0:
                kt = ks.wait(kt, comb_flag + d * M + t, epoch, rank, d, heap_bases, timeout_ns=TIMEOUT_NS)
        sp = kl.begin(kt, "reduce", t, tl.sum(rrow))
        for d0 in range(0, D, BLOCK_D):
            dm = d0 + ad < D
            acc = tl.zeros((BLOCK_D,), tl.float32)
            for i in tl.static_range(WORLD):
                d = (rank + i) % WORLD
                if tl.sum(tl.where(aw == d, rrow, 0)) > 0:
                    acc += tl.load(comb_x + ((par * WORLD + d) * M + t).to(tl.int64) * D + d0 + ad, mask=dm, other=0.0).to(tl.float32)
            tl.store(out + t.to(tl.int64) * D + d0 + ad, acc.to(out.dtype.element_ty), mask=dm)
        kt = kl.end(kt, sp)


# ---------------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MoEConfig:
    """Shape of an :class:`MoEAllToAll` plan (validated on construction).

    Args:
        max_tokens: M, tokens per rank (the most any rank may pass; <= 2048).
        hidden: D, the token width.
        num_experts: E, experts in all (a multiple of the world size).
        topk: K, experts per token (<= 32, <= E).
        dtype: "bfloat16" or "float16".
        max_programs: upper bound on programs (0: the SM count, agreed over ranks).
        timeout_ns: bound of every wait.
        block_d: elements of a row moved per step (power of two).
        num_warps: warps per program.
    """

    max_tokens: int
    hidden: int
    num_experts: int
    topk: int
    dtype: str = "bfloat16"
    max_programs: int = 0
    timeout_ns: int = 5_000_000_000
    block_d: int = 1024
    num_warps: int = 8

    def __post_init__(self):
        for f in ("max_tokens", "hidden", "num_experts", "topk"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"MoEConfig.{f} must be a positive int, got {v!r}")
        if self.max_tokens > 2048:
            raise ValueError(f"max_tokens must be <= 2048 (routing is computed in registers), got {self.max_tokens}")
        if self.topk > min(32, self.num_experts):
            raise ValueError(f"topk must be <= min(32, num_experts), got {self.topk}")
        if self.dtype not in ("bfloat16", "float16"):
            raise ValueError(f"dtype must be bfloat16 or float16, got {self.dtype!r}")
        if self.block_d < 64 or self.block_d & (self.block_d - 1):
            raise ValueError(f"block_d must be a power of two >= 64, got {self.block_d}")
        if self.max_programs < 0 or self.timeout_ns <= 0 or self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"bad max_programs/timeout_ns/num_warps in {self}")

    def check_world(self, world_size: int) -> None:
        if self.num_experts % world_size:
            raise ValueError(f"num_experts {self.num_experts} is not a multiple of the world size {world_size}")


class MoEAllToAll:
    """Dispatch and combine over the heap's ranks (construction is collective).

    Usage::

        a2a = MoEAllToAll(harness.heap(MoEAllToAll.heap_bytes(cfg, W)), cfg)
        a2a.dispatch(x, topk_idx, topk_w, m)       # recv_x / recv_* hold the rows routed here
        out = a2a.combine(scales)                  # out[:m] = sum_k w_k * x * scale[e_k]
    """

    def __init__(self, heap, cfg: MoEConfig):
        import torch

        cfg.check_world(heap.world_size)
        self.heap, self.cfg = heap, cfg
        self.rank, self.world = heap.rank, heap.world_size
        self.dtype = getattr(torch, cfg.dtype)
        W, M, D = self.world, cfg.max_tokens, cfg.hidden
        self.EL = cfg.num_experts // W
        self.KP = triton.next_power_of_2(cfg.topk)
        self.MP = triton.next_power_of_2(M)
        self.WP = triton.next_power_of_2(W)
        sms = torch.cuda.get_device_properties(heap.device).multi_processor_count
        limit = min(cfg.max_programs or sms, sms)
        self.nprog = max(W, min(heap.all_gather_object(limit)))
        self.recv_x = heap.zeros(2, W, M, D, dtype=self.dtype, name="a2a.recv_x")
        self.recv_tok = heap.zeros(2, W, M, dtype=torch.int32, name="a2a.recv_tok")
        self.recv_eid = heap.zeros(2, W, M, self.KP, dtype=torch.int32, name="a2a.recv_eid")
        self.recv_w = heap.zeros(2, W, M, self.KP, dtype=torch.float32, name="a2a.recv_w")
        self.recv_count = heap.zeros(2, W, dtype=torch.int32, name="a2a.recv_count")
        self.recv_flag = heap.zeros(W, M, dtype=torch.int32, name="a2a.recv_flag")
        self.count_flag = heap.zeros(W, dtype=torch.int32, name="a2a.count_flag")
        self.comb_x = heap.zeros(2, W, M, D, dtype=self.dtype, name="a2a.comb_x")
        self.comb_flag = heap.zeros(W, M, dtype=torch.int32, name="a2a.comb_flag")
        heap.barrier()
        self.epoch = 0
        self._m = None
        self._topk_idx = None

    @staticmethod
    def heap_bytes(cfg: MoEConfig, world_size: int) -> int:
        """Heap bytes a plan of ``cfg`` allocates (an upper bound)."""
        W, M, D = world_size, cfg.max_tokens, cfg.hidden
        kp = triton.next_power_of_2(cfg.topk)
        return 2 * (2 * W * M * D * 2) + 2 * W * M * (4 + 8 * kp) + 2 * W * M * 4 + 64 * W + 16 * 256

    def _common(self, fault, ktrace_buf, ktrace_slots):
        fault.check_world(self.world)
        d, s = fault.kernel_args(self.rank)
        extra = {} if ktrace_buf is None else {"ktrace_buf": ktrace_buf, "KTRACE": ktrace_slots}
        return d, s, dict(
            K=self.cfg.topk, KP=self.KP, WORLD=self.world, WP=self.WP, BLOCK_D=self.cfg.block_d, FAULTS=fault.active,
            TIMEOUT_NS=self.cfg.timeout_ns, num_warps=self.cfg.num_warps, **extra,
        )

    def dispatch(self, x, topk_idx, topk_w, m: int, fault: H.Fault = H.NO_FAULT, ktrace_buf=None, ktrace_slots: int = 0):
        """Send this rank's first ``m`` tokens to their experts' ranks (one call per step).

        Args:
            x: (M, D) tokens; topk_idx: (M, K) int32 expert ids in [0, E); topk_w: (M, K) fp32.
            m: tokens of this rank in use (0 < m <= M); rows past m are ignored.
            fault, ktrace_buf, ktrace_slots: as :meth:`AllReduce.__call__`.
        """
        import torch

        cfg = self.cfg
        M, D, K = cfg.max_tokens, cfg.hidden, cfg.topk
        if tuple(x.shape) != (M, D) or x.dtype != self.dtype or not x.is_contiguous():
            raise ValueError(f"x must be a contiguous {self.dtype} ({M}, {D}) tensor, got {x.dtype} {tuple(x.shape)}")
        if tuple(topk_idx.shape) != (M, K) or topk_idx.dtype != torch.int32 or not topk_idx.is_contiguous():
            raise ValueError(f"topk_idx must be a contiguous int32 ({M}, {K}) tensor")
        if tuple(topk_w.shape) != (M, K) or topk_w.dtype != torch.float32 or not topk_w.is_contiguous():
            raise ValueError(f"topk_w must be a contiguous float32 ({M}, {K}) tensor")
        if not 0 < m <= M:
            raise ValueError(f"m must be in (0, {M}], got {m}")
        self.epoch += 1
        self._m, self._topk_idx = m, topk_idx
        d, s, kw = self._common(fault, ktrace_buf, ktrace_slots)
        moe_dispatch[(self.nprog,)](
            x, topk_idx, topk_w, m, self.recv_x, self.recv_tok, self.recv_eid, self.recv_w, self.recv_count,
            self.recv_flag, self.count_flag, self.epoch, self.rank, self.heap.bases, self.nprog, d, s, M, D, self.EL,
            MP=self.MP, **kw,
        )

    def combine(self, scales, out=None, fault: H.Fault = H.NO_FAULT, ktrace_buf=None, ktrace_slots: int = 0):
        """Run the experts' stand-in on the dispatched rows and return them to their origin.

        Args:
            scales: (EL, D) fp32 per-channel scale of each of this rank's experts.
            out: (M, D) output (allocated if None); rows ``t < m`` are written.

        Returns:
            ``out``.
        """
        import torch

        cfg = self.cfg
        M, D = cfg.max_tokens, cfg.hidden
        if self._m is None:
            raise RuntimeError("combine needs a dispatch first")
        if tuple(scales.shape) != (self.EL, D) or scales.dtype != torch.float32 or not scales.is_contiguous():
            raise ValueError(f"scales must be a contiguous float32 ({self.EL}, {D}) tensor")
        if out is None:
            out = torch.empty(M, D, dtype=self.dtype, device=self.heap.device)
        d, s, kw = self._common(fault, ktrace_buf, ktrace_slots)
        if torch.version.hip is None:
            kw["maxnreg"] = COMBINE_MAXNREG
        moe_combine[(self.nprog,)](
            self._topk_idx, self._m, scales, out, self.recv_x, self.recv_tok, self.recv_eid, self.recv_w, self.recv_count,
            self.comb_x, self.comb_flag, self.epoch, self.rank, self.heap.bases, self.nprog, d, s, M, D, self.EL, **kw,
        )
        return out

    def received(self):
        """This rank's dispatch output after the last dispatch (synchronises): a list, per source
        rank, of ``(tokens, rows, local_eids, weights)`` tensors in slot order."""
        import torch

        torch.cuda.synchronize(self.heap.device)
        par = self.epoch % 2
        cnt = self.recv_count[par].tolist()
        return [
            (self.recv_tok[par, s, :c], self.recv_x[par, s, :c], self.recv_eid[par, s, :c, : self.cfg.topk], self.recv_w[par, s, :c, : self.cfg.topk])
            for s, c in enumerate(cnt)
        ]

    def slots(self, which: str) -> int:
        """Event slots per program of a traced ``"dispatch"`` or ``"combine"`` launch."""
        meta = {"WORLD": self.world, "nprog": self.nprog, "M": self.cfg.max_tokens}
        return _dispatch_slots(meta) if which == "dispatch" else _combine_slots(meta)

    def expected_events(self, topk_idx_all, m_all) -> dict[str, dict[str, int]]:
        """Exact event counts of one traced dispatch and combine on this rank.

        Args:
            topk_idx_all: every rank's topk ids (list of (M, K) tensors); m_all: every rank's m.
        """
        W, EL, r = self.world, self.EL, self.rank
        routed = [(idx[:m].long() // EL) for idx, m in zip(topk_idx_all, m_all)]
        # rows sent by rank s to rank d: tokens of s with an expert on d
        sent = [[int((rt == d).any(dim=1).sum()) for d in range(W)] for rt in routed]
        out_pairs = sum(sent[r])
        incoming = sum(sent[s][r] for s in range(W))
        G = self.nprog
        return {
            "dispatch": {"SPAN": G + out_pairs, "NOTIFY": out_pairs + W, "WAIT": G * W + incoming},
            "combine": {"SPAN": incoming + m_all[r], "NOTIFY": incoming, "WAIT": out_pairs},
        }
