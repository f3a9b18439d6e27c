"""CPU tier for the symmetric heap: the symmetric rule, the heap's bookkeeping over gloo, the
device API compiled for sm_90 and gfx942, and the clock-calibration kernels (the launcher: test_launch.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp
import triton
import triton.language as tl
from triton.compiler import ASTSource

import ktrace.language as kl
import ktrace.shmem.language as ks
from ktrace.shmem import codes
from ktrace.shmem.symmetric import (
    RESERVED_BYTES,
    AllocationLog,
    SymmetricRuleError,
    explain_mismatch,
    verify,
)
from ktrace.testing.compile import TARGETS, compile_asm
from ktrace.launch import free_port

# ---------------------------------------------------------------------------------------------
# the symmetric rule, pure
# ---------------------------------------------------------------------------------------------


def test_allocation_log_aligns_and_digests():
    a, b = AllocationLog(1 << 20), AllocationLog(1 << 20)
    for lg in (a, b):
        lg.allocate(100, "float32", (25,), "x")
        lg.allocate(8, "int32", (2,), "flags")
    assert a.allocations[0].offset == RESERVED_BYTES
    assert a.allocations[1].offset == RESERVED_BYTES + 256  # 100 B rounded up to the alignment
    assert a.state() == b.state()
    c = AllocationLog(1 << 20)
    c.allocate(100, "float32", (25,), "another label")  # labels are not part of the rule
    c.allocate(8, "int64", (1,), "flags")
    assert c.state()[0] == a.state()[0] and c.state()[1] != a.state()[1]
    assert 0 <= a.digest < 2**63


def test_allocation_log_full_and_bad_input():
    lg = AllocationLog(RESERVED_BYTES + 1024)
    lg.allocate(1024, "uint8", (1024,))
    with pytest.raises(MemoryError, match="heap full"):
        lg.allocate(1, "uint8", (1,))
    with pytest.raises(ValueError):
        AllocationLog(1 << 20, alignment=100)
    with pytest.raises(ValueError):
        AllocationLog(100)


def test_describe_offset_names_tensor_and_element():
    lg = AllocationLog(1 << 20)
    lg.allocate(64, "float32", (16,), "x")
    f = lg.allocate(16, "int32", (4,), "flags")
    assert lg.describe_offset(f.offset + 8) == f"'flags'[2] (int32 at heap offset {f.offset + 8:#x})"
    assert "heap offset" in lg.describe_offset(10)


def _gather_from(states_by_rank):
    """A fake all-gather over ranks whose states are known (what each rank contributes)."""
    return lambda mine: states_by_rank


def test_verify_reports_first_differing_allocation():
    logs = [AllocationLog(1 << 20) for _ in range(3)]
    for r, lg in enumerate(logs):
        lg.allocate(64, "float32", (16,), "x")
        lg.allocate(64 if r != 2 else 32, "float32", (16 if r != 2 else 8,), "y")
    states = [[1, *lg.state()] for lg in logs]
    payload = [("check", lg.allocations) for lg in logs]
    with pytest.raises(SymmetricRuleError) as e:
        verify(logs[0], lambda m: [[states[0][0]] + s[1:] for s in states], lambda o: payload, op="check", rank=0)
    msg = str(e.value)
    assert "allocation #1 differs" in msg
    assert "rank 2: float32[8] 'y' (32 B" in msg
    assert "rank 0: float32[16] 'y' (64 B" in msg


def test_verify_passes_when_equal_and_names_missing_allocation():
    logs = [AllocationLog(1 << 20) for _ in range(2)]
    for lg in logs:
        lg.allocate(64, "float32", (16,))
    verify(logs[0], lambda m: [m, m], lambda o: pytest.fail("logs exchanged although states agree"))
    logs[1].allocate(4, "int32", (1,), "extra")
    text = explain_mismatch([lg.allocations for lg in logs], ["barrier", "allocate"])
    assert "rank 0: nothing (only 1 allocations)" in text and "'extra'" in text
    assert "different heap operations" in text


# ---------------------------------------------------------------------------------------------
# the heap over gloo (host backing), two processes
# ---------------------------------------------------------------------------------------------


def _heap_worker(rank, world, port, scenario, q):
    import torch.distributed as dist

    from ktrace.shmem import HeapConfig, SymmetricHeap

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out = {"rank": rank}
    try:
        cfg = HeapConfig(size_bytes=1 << 20, backing="host", check="alloc" if scenario != "lazy" else "barrier")
        heap = SymmetricHeap(config=cfg)
        out["world"] = heap.world_size
        x = heap.zeros(3, 5, dtype=torch.float32, name="x")
        f = heap.full((7,), 3, dtype=torch.int32, name="f")
        o = heap.ones_like(x, name="o")
        a = heap.arange(10, name="a")
        e = heap.empty_like(f, dtype=torch.int64)
        out["offsets"] = [heap.offset_of(t) for t in (x, f, o, a, e)]
        out["values"] = (x.sum().item(), f.tolist(), o.sum().item(), a.tolist(), e.dtype == torch.int64)
        if scenario == "mismatch":
            heap.zeros(4 if rank == 0 else 8, dtype=torch.float16, name="m")
        elif scenario == "extra":
            if rank == 1:
                heap.zeros(4, dtype=torch.float32, name="only_on_rank1")
            heap.barrier()
        elif scenario == "lazy":
            heap.empty(16, dtype=torch.int32 if rank == 0 else torch.int16, name="lazy")
            heap.barrier()
        elif scenario == "full":
            heap.empty(1 << 21, dtype=torch.uint8)
        elif scenario == "badtype":
            heap.empty(4, dtype="float32")
        heap.barrier()
        out["ok"] = True
    except Exception as ex:  # reported to the parent, which asserts on it
        out["error"] = f"{type(ex).__name__}: {ex}"
    q.put(out)
    dist.destroy_process_group()


def _run_heap(scenario, world=2):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_heap_worker, args=(r, world, port, scenario, q)) for r in range(world)]
    for p in procs:
        p.start()
    outs = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return sorted(outs, key=lambda o: o["rank"])


def test_heap_constructors_agree_across_ranks():
    outs = _run_heap("ok")
    assert all(o.get("ok") for o in outs), outs
    assert outs[0]["offsets"] == outs[1]["offsets"]
    assert len(set(outs[0]["offsets"])) == 5 and all(off % 256 == 0 and off >= RESERVED_BYTES for off in outs[0]["offsets"])
    assert outs[0]["values"] == (0.0, [3] * 7, 15.0, list(range(10)), True)


@pytest.mark.parametrize(
    "scenario, pattern",
    [
        ("mismatch", r"allocation #5 differs between ranks:\n  rank 0: float16\[4\] 'm'.*\n  rank 1: float16\[8\] 'm'"),
        ("extra", r"rank 0: nothing \(only 5 allocations\)\n  rank 1: float32\[4\] 'only_on_rank1'"),
        ("lazy", r"allocation #5 differs.*\n  rank 0: int32\[16\] 'lazy'.*\n  rank 1: int16\[16\] 'lazy'"),
    ],
)
def test_heap_detects_broken_rule_on_every_rank(scenario, pattern):
    outs = _run_heap(scenario)
    for o in outs:
        assert "error" in o, o
        assert o["error"].startswith("SymmetricRuleError"), o["error"]
        assert re.search(pattern, o["error"]), o["error"]


def test_heap_full_and_bad_dtype_errors():
    for o in _run_heap("full"):
        assert o["error"].startswith("MemoryError") and "heap full" in o["error"]
    for o in _run_heap("badtype"):
        assert o["error"].startswith("TypeError") and "torch.dtype" in o["error"]


def test_heap_config_validation():
    from ktrace.shmem import HeapConfig

    with pytest.raises(ValueError):
        HeapConfig(size_bytes=10)
    with pytest.raises(ValueError):
        HeapConfig(alignment=128)
    with pytest.raises(ValueError):
        HeapConfig(check="sometimes")
    with pytest.raises(ValueError):
        HeapConfig(backing="disk")


def test_import_has_no_heavy_side_effects():
    code = "import sys, ktrace.shmem, ktrace.shmem.codes, ktrace.shmem.symmetric; print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


# ---------------------------------------------------------------------------------------------
# device API: compiles for both vendors, with the instructions it promises
# ---------------------------------------------------------------------------------------------


def compile_aligned(fn, signature, constexprs, target, aligned=(), num_warps=4):
    """Compile as Triton's launcher would for 16-byte aligned pointer args (``tt.divisibility``)."""
    names = list(signature) + list(constexprs)
    sig = dict(signature)
    sig.update({k: "constexpr" for k in constexprs})
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in aligned}
    k = triton.compile(ASTSource(fn, sig, constexprs=dict(constexprs), attrs=attrs), target=target, options={"num_warps": num_warps})
    return k.asm["ptx"] if target.backend == "cuda" else k.asm["amdgcn"]


@triton.jit
def _move_kernel(a, b, n, rank, peer, heap_bases, OP: tl.constexpr, BLOCK: tl.constexpr):
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
        ks.copy(a + offs, b + offs, peer, rank, rank, heap_bases, mask=m)


_MOVE_SIG = {"a": "*fp32", "b": "*fp32", "n": "i32", "rank": "i32", "peer": "i32", "heap_bases": "*i64"}


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
@pytest.mark.parametrize("op", ["load", "store", "get", "put", "copy"])
def test_data_movement_stays_vectorised_and_masked(target, op):
    asm = compile_aligned(_move_kernel, _MOVE_SIG, {"OP": op, "BLOCK": 1024}, TARGETS[target], aligned=("a", "b", "n"))
    if target == "sm_90":
        assert re.search(r"@%p\d+ ld\.global(\.\w+)*\.v4\.b32", asm), "translated loads lost their 128-bit vectors"
        assert re.search(r"@%p\d+ st\.global(\.\w+)*\.v4\.b32", asm), "translated stores lost their 128-bit vectors"
        assert asm.count("ld.global.nc.u64") >= 2  # the two heap bases, read as invariant data
    else:
        assert "global_load_dwordx4" in asm and "global_store_dwordx4" in asm
        assert "s_and_saveexec_b64" in asm or "v_cmp" in asm  # the mask becomes an exec predicate


@triton.jit
def _atomic_kernel(p, out, v, rank, peer, heap_bases, OP: tl.constexpr, SEM: tl.constexpr, SCOPE: tl.constexpr):
    i = tl.arange(0, 64)
    m = i < 48
    if OP == "add":
        r = ks.atomic_add(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    elif OP == "xchg":
        r = ks.atomic_xchg(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    elif OP == "cas":
        r = ks.atomic_cas(p + i, i * 0, i * 0 + v, rank, peer, heap_bases, sem=SEM, scope=SCOPE)
    elif OP == "and":
        r = ks.atomic_and(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    elif OP == "or":
        r = ks.atomic_or(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    elif OP == "xor":
        r = ks.atomic_xor(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    elif OP == "min":
        r = ks.atomic_min(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    else:
        r = ks.atomic_max(p + i, v, rank, peer, heap_bases, mask=m, sem=SEM, scope=SCOPE)
    tl.store(out + i, r)


_ATOMIC_SIG = {"p": "*i32", "out": "*i32", "v": "i32", "rank": "i32", "peer": "i32", "heap_bases": "*i64"}
_PTX_OP = {"add": "add", "xchg": "exch", "cas": "cas", "and": "and", "or": "or", "xor": "xor", "min": "min", "max": "max"}
_AMD_OP = {"add": "add", "xchg": "swap", "cas": "cmpswap", "and": "and", "or": "or", "xor": "xor", "min": "smin", "max": "smax"}
_PTX_SCOPE = {"block": "cta", "gpu": "gpu", "sys": "sys"}


_SEM_SCOPES = [("relaxed", "gpu"), ("acquire", "sys"), ("release", "block"), ("acq_rel", "sys")]


@pytest.mark.parametrize("op, sem, scope", [(op, *_SEM_SCOPES[i % 4]) for i, op in enumerate(_PTX_OP)] + [("add", "acq_rel", "gpu")])
def test_atomics_carry_sem_and_scope(op, sem, scope):
    ptx = compile_aligned(_atomic_kernel, _ATOMIC_SIG, {"OP": op, "SEM": sem, "SCOPE": scope}, TARGETS["sm_90"])
    found = re.findall(r"atom\.global\.(\w+)\.(\w+)\.(\w+)\.", ptx)
    assert found, "no atomic in the PTX"
    # ptxas accepts the qualifiers in either order; Triton prints sys/acquire and relaxed/gpu.
    assert any({a, b} == {_PTX_SCOPE[scope], sem} and c == _PTX_OP[op] for a, b, c in found), found
    gcn = compile_aligned(_atomic_kernel, _ATOMIC_SIG, {"OP": op, "SEM": sem, "SCOPE": scope}, TARGETS["gfx942"])
    # A native atomic, or (for some ops at system scope) LLVM's compare-and-swap loop.
    assert f"global_atomic_{_AMD_OP[op]}" in gcn or ("atomicrmw.start" in gcn and "global_atomic_cmpswap" in gcn)
    if sem in ("release", "acq_rel") and scope == "sys":
        assert "buffer_wbl2 sc0 sc1" in gcn  # system-scope release writes back L2
    if sem in ("acquire", "acq_rel") and scope == "sys":
        assert "buffer_inv sc0 sc1" in gcn


def _compile_error(*args, **kwargs) -> str:
    """Compile and return the whole chain of error messages (Triton wraps the cause)."""
    try:
        compile_aligned(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the chain is what the test reads
        msgs = []
        while e is not None:
            msgs.append(str(e))
            e = e.__cause__ or e.__context__
        return "\n".join(msgs)
    pytest.fail("compiled although the input is invalid")


def test_bad_sem_scope_cmp_are_compile_errors():
    assert "sem must be one of" in _compile_error(
        _atomic_kernel, _ATOMIC_SIG, {"OP": "add", "SEM": "seq_cst", "SCOPE": "sys"}, TARGETS["sm_90"]
    )
    assert "scope must be one of" in _compile_error(
        _atomic_kernel, _ATOMIC_SIG, {"OP": "add", "SEM": "relaxed", "SCOPE": "cluster"}, TARGETS["sm_90"]
    )
    assert "cmp must be one of" in _compile_error(
        _signal_kernel, _SIGNAL_SIG, {"CMP": "approx", "TIMEOUT_NS": 1000, "MAX_SPINS": 0, "KTRACE": 0}, TARGETS["sm_90"]
    )


@triton.jit
def _signal_kernel(
    flag, rank, peer, heap_bases, CMP: tl.constexpr, TIMEOUT_NS: tl.constexpr, MAX_SPINS: tl.constexpr,
    ktrace_buf=None, KTRACE: tl.constexpr = 0,
):
    kt = kl.init(ktrace_buf, KTRACE)
    kt = ks.notify(kt, flag, 7, rank, peer, heap_bases)
    kt = ks.wait(kt, flag + 1, 7, rank, peer, heap_bases, cmp=CMP, timeout_ns=TIMEOUT_NS, max_spins=MAX_SPINS)


_SIGNAL_SIG = {"flag": "*i32", "rank": "i32", "peer": "i32", "heap_bases": "*i64", "ktrace_buf": "*i64"}


@pytest.mark.parametrize("traced", [False, True])
def test_wait_notify_ptx(traced):
    ptx = compile_aligned(
        _signal_kernel, _SIGNAL_SIG, {"CMP": "ge", "TIMEOUT_NS": 0, "MAX_SPINS": 100, "KTRACE": 8 if traced else 0}, TARGETS["sm_90"]
    )
    assert "ld.acquire.sys.global.b32" in ptx  # the spin read
    assert "ld.relaxed.sys.global.b32" in ptx  # the error word
    assert re.search(r"atom\.global\.sys\.release\.exch\.b32", ptx)  # notify
    # notify's CTA barrier before the release, and no other: a wait needs none (each thread's own
    # acquire read orders its later loads; thread 0 alone reports a timeout)
    assert ptx.count("bar.sync") == 1
    assert re.search(r"@%p\d+ atom\.relaxed\.gpu\.global\.add\.u32", ptx)  # counting a timeout (thread 0)
    # Bounded by spins only and untraced: no timer read at all. Traced: timer reads and records.
    assert ("%globaltimer" in ptx) == traced
    if traced:
        assert re.search(r"st\.global\.v2\.b64|st\.global\.b64", ptx)


@triton.jit
def _check_every_kernel(flag, rank, peer, heap_bases, CHECK: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    kt = kl.init(ktrace_buf, KTRACE)
    kt = ks.wait(kt, flag, 7, rank, peer, heap_bases, check_every=CHECK)


@pytest.mark.parametrize("check", [1, 8])
def test_wait_check_every(check):
    """check_every=N: the spin reads the error word only every N-th flag read (a branch between
    the flag's acquire load and the error word's load); 1 (default): after each read."""
    ptx = compile_aligned(_check_every_kernel, _SIGNAL_SIG, {"CHECK": check, "KTRACE": 8}, TARGETS["sm_90"])
    spin = ptx[ptx.rindex("ld.acquire.sys.global.b32"):]  # the loop's read (the first read is before the loop)
    between = spin[: spin.index("ld.relaxed.sys.global.b32")]
    assert (re.search(r"\bbra(\.uni)?\s", between) is not None) == (check > 1)
    gcn = compile_aligned(_check_every_kernel, _SIGNAL_SIG, {"CHECK": check, "KTRACE": 8}, TARGETS["gfx942"])
    assert gcn.count("buffer_inv sc0 sc1") >= 2 and "s_memrealtime" in gcn


@pytest.mark.parametrize("traced", [False, True])
def test_wait_notify_gfx942(traced):
    gcn = compile_aligned(
        _signal_kernel, _SIGNAL_SIG, {"CMP": "eq", "TIMEOUT_NS": 1_000_000, "MAX_SPINS": 0, "KTRACE": 8 if traced else 0}, TARGETS["gfx942"]
    )
    assert re.search(r"global_load_dword v\d+, v\[\d+:\d+\], off sc0 sc1", gcn)
    assert "buffer_inv sc0 sc1" in gcn
    assert "global_atomic_swap" in gcn and "buffer_wbl2 sc0 sc1" in gcn
    assert "s_memrealtime" in gcn  # the time bound reads the timer even untraced
    assert "s_barrier" in gcn


def test_tick_ns_per_target():
    @triton.jit
    def k(out):
        tl.store(out, ks.tick_ns())

    ptx = compile_aligned(k, {"out": "*i64"}, {}, TARGETS["sm_90"])
    gcn = compile_aligned(k, {"out": "*i64"}, {}, TARGETS["gfx942"])
    assert re.search(r"mov\.b64\s+%rd\d+, 1;", ptx)
    assert re.search(r"v_mov_b32_e32 v\d+, 10\b", gcn)  # 100 MHz on MI300: 10 ns per tick


def test_load_acquire_rejects_float_flags():
    @triton.jit
    def k(p):
        tl.store(p, ks.load_acquire(p))

    assert "32/64-bit integer flags" in _compile_error(k, {"p": "*fp32"}, {}, TARGETS["sm_90"])


def test_error_block_layout_fits():
    assert codes.ERROR_BLOCK_BYTES <= RESERVED_BYTES
    assert codes.ERROR_RECORD_DTYPE.names[:3] == ("program", "flag", "peer")


# ---------------------------------------------------------------------------------------------
# clock calibration kernels compile for both vendors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
@pytest.mark.parametrize("is_ref", [True, False])
def test_ping_pong_kernel_compiles(target, is_ref):
    from ktrace.clock.calibrate import _ping_pong_kernel

    sig = {"flags": "*i32", "out": "*i64", "rank": "i32", "peer": "i32", "heap_bases": "*i64", "rounds": "i32"}
    asm = compile_aligned(_ping_pong_kernel, sig, {"IS_REF": is_ref, "TIMEOUT_NS": 10**9}, TARGETS[target], num_warps=1)
    if target == "sm_90":
        assert "%globaltimer" in asm and "ld.acquire.sys.global.b32" in asm and "atom.global.sys.release.exch" in asm
    else:
        assert "s_memrealtime" in asm and "buffer_inv sc0 sc1" in asm


def test_calibration_config_validation():
    from ktrace.clock.calibrate import CalibrationConfig

    with pytest.raises(ValueError):
        CalibrationConfig(rounds=0)
    with pytest.raises(ValueError):
        CalibrationConfig(timeout_ns=0)


@triton.jit
def _handoff_loop(flag, rounds, heap_bases, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    kt = kl.init(ktrace_buf, KTRACE)
    for i in range(rounds):
        kt = ks.notify(kt, flag, i + 1, 0, 0, heap_bases)
        kt = ks.wait(kt, flag + 1, i + 1, 0, 0, heap_bases)


def test_a_traced_loop_reads_the_heap_base_once_before_the_loop_like_an_untraced_one():
    """The base table is read as invariant data, so the probes' assembly (which clobbers memory)
    does not pin a re-read of the bases in front of every release of a traced loop (+97 ns per
    hand-off of the one-GPU ping-pong before): traced and untraced read it once, before the loop."""
    import ktrace

    sig = {"flag": "*i32", "rounds": "i32", "heap_bases": "*i64", "ktrace_buf": "*i64"}
    for fn, slots in ((_handoff_loop, 0), (ktrace.trace(_handoff_loop).jit_fn, 64)):
        ptx = compile_asm(fn, sig, {"KTRACE": slots}, TARGETS["sm_90"])
        lines = ptx.splitlines()
        first_label = min(i for i, line in enumerate(lines) if line.startswith("$L__BB"))
        reads = [i for i, line in enumerate(lines) if "ld.global.nc.u64" in line]
        assert len(reads) == 1 and reads[0] < first_label, (slots, reads, first_label)
        assert "ld.global.b64" not in ptx  # no other read of the table
