"""Multi-GPU tier of the symmetric heap: every operation against a torch reference, every rank to
every peer, fresh random data each run; acquire/release message passing; wait events; bounded waits.

    python -m ktrace.testing.launch -n 4 -- pytest -m multigpu tests/multigpu -q

No test assumes a world size (1 rank works too: its only peer is itself).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
import ktrace.shmem.language as ks
from ktrace.schema import EventFlag, EventKind
from ktrace.shmem import Cmp, WaitTimeoutError

pytestmark = pytest.mark.multigpu

BLOCK = 1024


def _seed(heap) -> int:
    """One fresh seed per test run, the same on every rank (rank 0's clock)."""
    return int(heap.all_gather_object(time.time_ns() % (2**31 - 1))[0])


def _data(seed: int, rank: int, n: int, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 131 + rank)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g, dtype=dtype)
    return torch.randint(-(2**20), 2**20, (n,), generator=g, dtype=dtype)


def _all_ok(heap, ok: bool, why: str) -> None:
    """Gather every rank's verdict so every rank fails (and says which rank saw what)."""
    verdicts = heap.all_gather_object((bool(ok), why))
    bad = [f"rank {r}: {w}" for r, (o, w) in enumerate(verdicts) if not o]
    assert not bad, "\n".join(bad)


@triton.jit
def _move_kernel(a, b, n, rank, peer, peer2, heap_bases, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    if OP == "load":
        tl.store(b + offs, ks.load(a + offs, rank, peer, heap_bases, mask=m, other=0.0), mask=m)
    elif OP == "store":
        ks.store(b + offs, tl.load(a + offs, mask=m), rank, peer, heap_bases, mask=m)
    elif OP == "get":
        ks.get(a + offs, b + offs, rank, peer, heap_bases, mask=m)
    elif OP == "put":
        ks.put(a + offs, b + offs, rank, peer, heap_bases, mask=m)
    else:
        ks.copy(a + offs, b + offs, peer, peer2, rank, heap_bases, mask=m)


@pytest.mark.parametrize("op", ["load", "get", "store", "put", "copy"])
def test_data_movement_every_peer(heap, op):
    r, w = heap.rank, heap.world_size
    seed = _seed(heap)
    n = 5 * BLOCK + int(seed % 997) + 1  # not a multiple of the block: the mask matters
    cap = 6 * BLOCK
    sentinel = -12345.0
    x = heap.empty(cap, dtype=torch.float32, name=f"{op}.x")
    y = heap.full((w * cap,), sentinel, dtype=torch.float32, name=f"{op}.y")
    x.fill_(sentinel)
    x[:n].copy_(_data(seed, r, n))
    out = torch.full((w, cap), sentinel, dtype=torch.float32, device=heap.device)
    heap.barrier()
    grid = (triton.cdiv(n, BLOCK),)
    for q in range(w):
        if op in ("load", "get"):
            _move_kernel[grid](x, out[q], n, r, q, q, heap.bases, OP=op, BLOCK=BLOCK)
        elif op in ("store", "put"):  # my x -> q's y, in my slot
            _move_kernel[grid](x, y[r * cap :], n, r, q, q, heap.bases, OP=op, BLOCK=BLOCK)
        else:  # q's x -> (q+1)'s y, in my slot
            _move_kernel[grid](x, y[r * cap :], n, r, q, (q + 1) % w, heap.bases, OP=op, BLOCK=BLOCK)
    heap.barrier()
    errs = []
    for q in range(w):
        if op in ("load", "get"):
            got, want = out[q].cpu(), _data(seed, q, n)
            what = f"{op} from peer {q}"
        elif op in ("store", "put"):
            got, want = y[q * cap : (q + 1) * cap].cpu(), _data(seed, q, n)
            what = f"{op} by rank {q} into this rank"
        else:
            got, want = y[q * cap : (q + 1) * cap].cpu(), _data(seed, (r - 1) % w, n)
            what = f"copy issued by rank {q} from rank {(r - 1) % w} into this rank"
        if not torch.equal(got[:n], want):
            errs.append(f"{what}: {(got[:n] != want).sum().item()} of {n} elements wrong")
        if not torch.all(got[n:] == sentinel):
            errs.append(f"{what}: wrote past the mask")
    _all_ok(heap, not errs, "; ".join(errs))


@triton.jit
def _atomic_kernel(p, vals, olds, rank, peer, heap_bases, OP: tl.constexpr, SEM: tl.constexpr, SCOPE: tl.constexpr, N: tl.constexpr, LIVE: tl.constexpr):
    i = tl.arange(0, N)
    m = i < LIVE
    v = tl.load(vals + i)
    if OP == "add":
        o = ks.atomic_add(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    elif OP == "xchg":
        o = ks.atomic_xchg(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    elif OP == "cas":
        o = ks.atomic_cas(p + i, i * 0, v, rank, peer, heap_bases, sem=SEM, scope=SCOPE)
    elif OP == "and":
        o = ks.atomic_and(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    elif OP == "or":
        o = ks.atomic_or(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    elif OP == "xor":
        o = ks.atomic_xor(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    elif OP == "min":
        o = ks.atomic_min(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    else:
        o = ks.atomic_max(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    tl.store(olds + i, o, mask=m)


_INIT = {"add": 0, "xchg": 0, "cas": 0, "and": -1, "or": 0, "xor": 0, "min": 2**31 - 1, "max": -(2**31)}


@pytest.mark.parametrize(
    "op, sem, scope",
    [("add", "acq_rel", "sys"), ("add", "relaxed", "gpu"), ("xchg", "acq_rel", "sys"), ("cas", "acquire", "sys"),
     ("and", "release", "sys"), ("or", "relaxed", "sys"), ("xor", "acq_rel", "sys"), ("min", "acq_rel", "sys"),
     ("max", "relaxed", "sys")],
)
def test_atomics_every_peer(heap, op, sem, scope):
    r, w = heap.rank, heap.world_size
    n, live = 64, 48 if op != "cas" else 64
    seed = _seed(heap)

    def vals_of(rank):
        g = torch.Generator().manual_seed(seed * 7 + rank)
        if op in ("and", "or", "xor"):
            return torch.randint(0, 2**31 - 1, (n,), generator=g, dtype=torch.int32)
        if op == "cas":
            return torch.full((n,), rank + 1, dtype=torch.int32)
        return torch.randint(-(2**20), 2**20, (n,), generator=g, dtype=torch.int32)

    p = heap.full((n,), _INIT[op], dtype=torch.int32, name=f"atomic.{op}")
    olds = torch.zeros(w, n, dtype=torch.int32, device=heap.device)
    mine = vals_of(r).to(heap.device)
    heap.barrier()
    # Every rank hits every peer's array; device code is relaxed about which order peers go in.
    for k in range(w):
        q = (r + k) % w
        _atomic_kernel[(1,)](p, mine, olds[q], r, q, heap.bases, OP=op, SEM=sem, SCOPE=scope, N=n, LIVE=live)
    heap.barrier()
    final = p.cpu()
    allv = torch.stack([vals_of(q) for q in range(w)])  # [rank, lane]
    lanes = slice(0, live)
    errs = []
    if op == "add":
        want = allv.sum(0, dtype=torch.int32)
    elif op == "and":
        want = torch.full((n,), -1, dtype=torch.int32)
        for q in range(w):
            want &= allv[q]
    elif op == "or":
        want = torch.zeros(n, dtype=torch.int32)
        for q in range(w):
            want |= allv[q]
    elif op == "xor":
        want = torch.zeros(n, dtype=torch.int32)
        for q in range(w):
            want ^= allv[q]
    elif op == "min":
        want = allv.min(0).values
    elif op == "max":
        want = allv.max(0).values
    else:
        want = None
    if want is not None and not torch.equal(final[lanes], want[lanes]):
        errs.append(f"{op}: {(final[lanes] != want[lanes]).sum().item()} lanes wrong")
    if op == "xchg":
        # The last writer wins: the final value is one rank's value, and the old values handed back
        # to the ranks chain from the initial value through every other rank's value.
        ok = ((final[None, :] == allv).any(0))[lanes].all().item()
        if not ok:
            errs.append("xchg: final values that no rank wrote")
    if op == "cas":
        if not ((final >= 1) & (final <= w)).all():
            errs.append(f"cas: final values outside 1..{w}: {final.tolist()}")
    if live < n and not torch.all(final[live:] == _INIT[op]):
        errs.append(f"{op}: masked-off lanes changed")
    gathered = heap.all_gather_object(olds[:, :live].cpu())  # [rank][peer, lane]: what each rank got back
    if op == "cas":
        winners = sum((gathered[q][r] == 0).to(torch.int64) for q in range(w))  # ranks that saw 0 on my array
        if not torch.all(winners == 1):
            errs.append(f"cas: lanes with {sorted(set(winners.tolist()))} winners instead of exactly 1")
    if op == "xchg":
        seen = torch.stack([gathered[q][r] for q in range(w)])  # olds returned for my array
        vals = allv[:, :live]
        for lane in range(live):
            expect = sorted([_INIT[op]] + vals[:, lane].tolist())
            got = sorted(seen[:, lane].tolist() + [final[lane].item()])
            if got != expect:
                errs.append(f"xchg lane {lane}: returned {got}, expected the chain {expect}")
                break
    _all_ok(heap, not errs, "; ".join(errs))


@triton.jit
def _ring_kernel(data, dflag, ack, errors, rank, nxt, prv, heap_bases, rounds, M: tl.constexpr, TIMEOUT_NS: tl.constexpr,
                 ktrace_buf=None, KTRACE: tl.constexpr = 0):
    kt = kl.init(ktrace_buf, KTRACE)
    offs = tl.arange(0, M)
    bad = tl.zeros((), tl.int32)
    first_bad = tl.full((), -1, tl.int32)
    for i in range(rounds):
        v = i + 1
        # wait until nxt consumed round i-1 from its buffer, then write round i into it
        kt = ks.wait(kt, ack, i, rank, nxt, heap_bases, timeout_ns=TIMEOUT_NS, name="ring.ack")
        ks.store(data + offs, offs * 7919 + v * 31 + rank, rank, nxt, heap_bases)
        kt = ks.notify(kt, dflag, v, rank, nxt, heap_bases, name="ring.data")
        # consume round i from prv
        kt = ks.wait(kt, dflag, v, rank, prv, heap_bases, timeout_ns=TIMEOUT_NS, name="ring.data")
        got = tl.load(data + offs)
        nbad = tl.sum((got != offs * 7919 + v * 31 + prv).to(tl.int32), axis=0)
        first_bad = tl.where((first_bad < 0) & (nbad > 0), i, first_bad)
        bad += nbad
        kt = ks.notify(kt, ack, v, rank, prv, heap_bases, name="ring.ack")
    tl.store(errors, bad)
    tl.store(errors + 1, first_bad)


traced_ring = ktrace.trace(_ring_kernel, events_per_program=lambda meta: 8 * int(meta["rounds"]) + 8, name="ring")


def _ring(heap, rounds, traced):
    r, w = heap.rank, heap.world_size
    m = 1024
    data = heap.zeros(m, dtype=torch.int32, name="ring.data")
    dflag = heap.zeros(1, dtype=torch.int32, name="ring.dflag")
    ack = heap.zeros(1, dtype=torch.int32, name="ring.ack")
    errors = torch.zeros(2, dtype=torch.int32, device=heap.device)
    heap.barrier()
    args = (data, dflag, ack, errors, r, (r + 1) % w, (r - 1) % w, heap.bases, rounds)
    t0 = time.perf_counter()
    if traced:
        with ktrace.capture() as cap:
            traced_ring[(1,)](*args, M=m, TIMEOUT_NS=10**9)
        ev = cap.events()
    else:
        _ring_kernel[(1,)](*args, M=m, TIMEOUT_NS=10**9)
        ev = None
    heap.barrier()
    elapsed = time.perf_counter() - t0
    return errors.cpu().tolist(), ev, elapsed, (heap.offset_of(dflag), heap.offset_of(ack))


def test_message_passing_ring_10k_rounds(heap):
    rounds = 10_000
    (bad, first), _, elapsed, _ = _ring(heap, rounds, traced=False)
    count, described = heap.timeouts()
    _all_ok(
        heap,
        bad == 0 and count == 0,
        f"{bad} stale/lost elements (first bad round {first}), {count} timed-out waits {[str(d) for d in described]}",
    )
    if heap.rank == 0:
        print(f"ring of {heap.world_size}: {rounds} rounds of 4 KiB in {elapsed * 1e3:.1f} ms ({elapsed / rounds * 1e6:.2f} us/round)")


def test_wait_and_notify_events(heap):
    r, w = heap.rank, heap.world_size
    rounds = 32
    (bad, _), ev, _, (off_data, off_ack) = _ring(heap, rounds, traced=True)
    nxt, prv = (r + 1) % w, (r - 1) % w
    errs = []
    if bad:
        errs.append(f"{bad} bad elements in the traced ring")
    waits = ev[ev["kind"] == EventKind.WAIT]
    notes = ev[ev["kind"] == EventKind.NOTIFY]
    if len(waits) != 2 * rounds or len(notes) != 2 * rounds:
        errs.append(f"{len(waits)} waits and {len(notes)} notifies recorded, expected {2 * rounds} each")
    data_w = waits[waits["arg2"] == off_data]
    ack_w = waits[waits["arg2"] == off_ack]
    if not (np.all(data_w["arg0"] == prv) and np.all(ack_w["arg0"] == nxt)):
        errs.append("wait events name the wrong peer")
    if len(data_w) != rounds or not np.array_equal(data_w["arg4"], np.arange(1, rounds + 1)):
        errs.append(f"data waits expected 1..{rounds}: {data_w['arg4'].tolist()}")
    if not np.all(waits["arg3"] >= waits["arg4"]) or not np.all(waits["arg5"] == int(Cmp.GE)):
        errs.append("value seen / cmp of a wait are wrong")
    if not np.all(waits["arg1"] >= 1) or not np.all(waits["end"] >= waits["start"]):
        errs.append("spins < 1 or a wait ending before it started")
    if np.any(waits["flags"] & int(EventFlag.TIMEOUT)):
        errs.append("a wait flagged TIMEOUT although every notify was sent")
    data_n = notes[notes["arg2"] == off_data]
    ack_n = notes[notes["arg2"] == off_ack]
    if not (np.all(data_n["arg0"] == nxt) and np.all(ack_n["arg0"] == prv)):
        errs.append("notify events name the wrong peer")
    if not np.array_equal(data_n["arg1"], np.arange(1, rounds + 1)):
        errs.append(f"data notifies carry values {data_n['arg1'].tolist()}")
    _all_ok(heap, not errs, "; ".join(errs))


@triton.jit
def _delay_kernel(ready, go, rank, nxt, prv, heap_bases, DELAY_NS: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    kt = kl.init(ktrace_buf, KTRACE)
    if tl.program_id(0) == 0:  # sender to nxt: wait until nxt listens, hold the signal back, send it
        kt = ks.wait(kt, ready, 1, rank, nxt, heap_bases, timeout_ns=1_000_000_000, name="delay.ready")
        t = kl.now()
        held = t - t
        while held < DELAY_NS:
            held = kl.now() - t
        kt = ks.notify(kt, go, 1, rank, nxt, heap_bases, name="delay.go")
    # (two ifs rather than if/else: Triton 3.6 fails on an if/else whose branches both return
    # the untraced no-op tracer)
    if tl.program_id(0) == 1:  # receiver from prv: say it listens, then wait
        kt = ks.notify(kt, ready, 1, rank, prv, heap_bases, name="delay.ready")
        kt = ks.wait(kt, go, 1, rank, prv, heap_bases, timeout_ns=1_000_000_000, name="delay.go")


traced_delay = ktrace.trace(_delay_kernel, events_per_program=8, name="delay")


def test_wait_event_measures_a_held_back_signal(heap):
    r, w = heap.rank, heap.world_size
    delay_ns = 200_000
    ready = heap.zeros(1, dtype=torch.int32, name="delay.ready")
    go = heap.zeros(1, dtype=torch.int32, name="delay.go")
    heap.barrier()
    with ktrace.capture() as cap:
        traced_delay[(2,)](ready, go, r, (r + 1) % w, (r - 1) % w, heap.bases, DELAY_NS=delay_ns)
    heap.barrier()
    ev = cap.events()
    from ktrace.device import device_info

    tick_hz = device_info(heap.device.index)["tick_hz"]
    w_go = ev[(ev["kind"] == EventKind.WAIT) & (ev["program"] == 1)]
    errs = []
    if len(w_go) != 1:
        errs.append(f"{len(w_go)} receiver waits recorded")
    else:
        e = w_go[0]
        waited_ns = (int(e["end"]) - int(e["start"])) * 1e9 / tick_hz
        if not (e["arg0"] == (r - 1) % w and e["arg2"] == heap.offset_of(go) and e["arg3"] == 1 and e["arg4"] == 1):
            errs.append(f"wrong peer/flag/value in {e}")
        if waited_ns < delay_ns:
            errs.append(f"waited {waited_ns:.0f} ns for a signal held back {delay_ns} ns")
        if e["arg1"] < 10:
            errs.append(f"only {e['arg1']} spins over a {delay_ns} ns wait")
    _all_ok(heap, not errs, "; ".join(errs))


@triton.jit
def _missing_kernel(flags, gate, rank, nxt, prv, world, heap_bases, skip, TIMEOUT_NS: tl.constexpr, ktrace_buf=None,
                    KTRACE: tl.constexpr = 0):
    kt = kl.init(ktrace_buf, KTRACE)
    p = tl.program_id(0)
    # Gate: ranks launch up to tens of ms apart (each compiles the kernel on its first launch), so
    # the deliberately short wait below must only start once every rank runs. Around the ring,
    # phase k's value leaves a rank only after it saw its prv's k - 1: once this rank sees prv's
    # k, ranks r-1 .. r-k have arrived. After `world` phases all have, and what prv still does
    # before its signal (its own last gate wait) takes the ring's latency, not a launch's skew.
    # (Two phases were too few at 4 ranks: one rank's bounded wait ran out while a third rank
    # was still launching.)
    for k in range(1, world + 1):
        kt = ks.notify(kt, gate + p, k, rank, nxt, heap_bases, name="missing.gate")
        kt = ks.wait(kt, gate + p, k, rank, prv, heap_bases, timeout_ns=5_000_000_000, name="missing.gate")
    if p != skip:
        kt = ks.notify(kt, flags + p, 1, rank, nxt, heap_bases, name="missing.signal")
    kt = ks.wait(kt, flags + p, 1, rank, prv, heap_bases, timeout_ns=TIMEOUT_NS, name="missing.wait")


traced_missing = ktrace.trace(_missing_kernel, events_per_program=80, name="missing")  # (8 ranks: 2 x 8 gate events + 2, two slots each)


def test_missing_notify_times_out_and_is_reported(heap):
    r, w = heap.rank, heap.world_size
    programs, timeout_ns = 8, 20_000_000
    seed = _seed(heap)
    skip_of = [(seed + q) % programs for q in range(w)]  # rank q never signals program skip_of[q] of q+1
    flags = heap.zeros(programs, dtype=torch.int32, name="missing.flags")
    gate = heap.zeros(programs, dtype=torch.int32, name="missing.gate")
    heap.clear_timeouts()
    heap.barrier()
    t0 = time.perf_counter()
    with ktrace.capture() as cap:
        traced_missing[(programs,)](flags, gate, r, (r + 1) % w, (r - 1) % w, w, heap.bases, skip_of[r], TIMEOUT_NS=timeout_ns)
    torch.cuda.synchronize(heap.device)
    elapsed = time.perf_counter() - t0
    heap.barrier()
    prv = (r - 1) % w
    victim = skip_of[prv]  # my program that never hears from prv
    errs = []
    count, described = heap.timeouts()
    if count != 1 or len(described) != 1:
        errs.append(f"{count} timeouts reported, expected 1: {[str(d) for d in described]}")
    else:
        t = described[0]
        if (t.rank, t.program, t.peer, t.flag_offset) != (r, victim, prv, heap.offset_of(flags) + 4 * victim):
            errs.append(f"timeout reported as {t}, expected rank {r}, program {victim}, peer {prv}")
        if not timeout_ns <= t.waited_ns < timeout_ns + 50_000_000:
            errs.append(f"waited {t.waited_ns:.0f} ns for a {timeout_ns} ns bound")
        text = str(t)
        want = f"rank {r}, program {victim} waited on flag 'missing.flags'[{victim}]"
        if not text.startswith(want) or f"from peer {prv} for " not in text:
            errs.append(f"report reads {text!r}")
    if elapsed > 5.0:
        errs.append(f"kernel with a missing signal took {elapsed:.1f} s (bound {timeout_ns / 1e6} ms)")
    ev = cap.events()
    tw = ev[(ev["kind"] == EventKind.WAIT) & ((ev["flags"] & int(EventFlag.TIMEOUT)) != 0)]
    if len(tw) != 1 or int(tw[0]["program"]) != victim or int(tw[0]["arg0"]) != prv:
        errs.append(f"TIMEOUT wait events: {tw[['program', 'arg0', 'arg2']].tolist()}")
    with pytest.raises(WaitTimeoutError) as e:
        heap.check()
    if f"rank {r}, program {victim}" not in str(e.value):
        errs.append(f"check() said {e.value}")
    if heap.timeouts()[0] != 0:
        errs.append("check() did not clear the error block")
    _all_ok(heap, not errs, "; ".join(errs))


def test_clock_ping_pong_samples(heap):
    from ktrace.clock.calibrate import CalibrationConfig, calibrate

    rounds = 500
    out = calibrate(heap, "before", CalibrationConfig(rounds=rounds, anchor_repeats=8))
    errs = []
    samples = out["samples"]
    if [s["peer"] for s in samples] != [q for q in range(heap.world_size) if q != 0]:
        errs.append(f"peers {[s['peer'] for s in samples]}")
    for s in samples:
        t1, t2, t3, t4 = (np.asarray(s[k], dtype=np.int64) for k in ("t1", "t2", "t3", "t4"))
        if not all(len(a) == rounds for a in (t1, t2, t3, t4)):
            errs.append("sample lengths")
            continue
        rtt = (t4 - t1) - (t3 - t2)
        if np.any(rtt <= 0) or np.any(np.diff(t1) <= 0) or np.any(np.diff(t2) <= 0):
            errs.append(f"peer {s['peer']}: non-positive round trips or non-increasing timestamps")
        elif heap.rank == 0:
            print(f"ping-pong 0<->{s['peer']}: min rtt {rtt.min()} ticks, median {int(np.median(rtt))}")
    a = out["anchors"][heap.rank]
    if not (len(a["dev_ticks"]) == 8 and all(b <= c for b, c in zip(a["host_before_ns"], a["host_after_ns"]))):
        errs.append(f"anchor {a}")
    if np.any(np.diff(a["dev_ticks"]) <= 0):
        errs.append("device timer not increasing across anchors")
    _all_ok(heap, not errs, "; ".join(errs))
