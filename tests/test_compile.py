"""Compile checks: probes present when traced, absent when not, for sm_90 and gfx942.

No GPU is needed: Triton compiles for both targets on the CPU. The AMD path is verified here
by compilation only (no AMD GPU runs these tests).
"""

import re

import pytest

from ktrace.testing.compile import CUDA_SM90, HIP_GFX942, compile_asm
from tests import probe_kernels as pk

TIMER = {"cuda": re.compile(r"%globaltimer"), "hip": re.compile(r"s_memrealtime")}
PLACE = {"cuda": re.compile(r"%smid"), "hip": re.compile(r"hwreg\(HW_REG_HW_ID\)")}

CASES = {
    "copy": (pk.copy_kernel, {"x": "*fp32", "y": "*fp32", "n": "i32", "ktrace_buf": "*i64"}, {"BLOCK": 1024}),
    "shape": (pk.shape_kernel, {"out": "*fp32", "ktrace_buf": "*i64"}, {}),
    "overflow": (pk.overflow_kernel, {"out": "*i32", "n_marks": "i32", "ktrace_buf": "*i64"}, {}),
    "multi": (pk.copy_multi_span_kernel, {"x": "*fp32", "y": "*fp32", "n": "i32", "ktrace_buf": "*i64"}, {"BLOCK": 1024, "SPANS": 4}),
}


def _stores(asm, backend):
    if backend == "cuda":
        return len(re.findall(r"\bst\.global", asm))
    return len(re.findall(r"\b(global_store|buffer_store)", asm))


@pytest.mark.parametrize("target", [CUDA_SM90, HIP_GFX942], ids=["sm_90", "gfx942"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_probes_compile_away_when_off(case, target):
    fn, sig, consts = CASES[case]
    off = compile_asm(fn, sig, {**consts, "KTRACE": 0}, target)
    on = compile_asm(fn, sig, {**consts, "KTRACE": 8}, target)
    be = target.backend
    assert not TIMER[be].search(off), "untraced kernel reads the timer"
    assert not PLACE[be].search(off), "untraced kernel reads the SM/CU id"
    assert TIMER[be].search(on), "traced kernel has no timer read"
    assert PLACE[be].search(on)
    # the traced kernel has record stores the untraced one does not
    assert _stores(on, be) > _stores(off, be)


def test_untraced_kernel_is_identical_to_a_kernel_without_probes():
    """KTRACE=0 gives the same PTX as the same kernel written with no probe calls at all."""
    import triton
    import triton.language as tl

    @triton.jit
    def plain_copy(x, y, n, BLOCK: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        pid = tl.program_id(0)
        off = pid * BLOCK + tl.arange(0, BLOCK)
        m = off < n
        tl.store(y + off, tl.load(x + off, mask=m), mask=m)

    sig = {"x": "*fp32", "y": "*fp32", "n": "i32", "ktrace_buf": "*i64"}
    a = compile_asm(pk.copy_kernel, sig, {"BLOCK": 1024, "KTRACE": 0}, CUDA_SM90)
    b = compile_asm(plain_copy, sig, {"BLOCK": 1024, "KTRACE": 0}, CUDA_SM90)

    def instructions(asm, name):
        out = []
        for ln in asm.split(".section")[0].splitlines():  # drop the debug sections
            ln = ln.split("//")[0].strip()
            if ln and not ln.startswith((".loc", ".file")):
                out.append(ln.replace(name, "K"))
        return out

    ia, ib = instructions(a, "copy_kernel"), instructions(b, "plain_copy")
    assert len(ia) > 20
    assert ia == ib


def _lines(asm, pat):
    return [i for i, ln in enumerate(asm.splitlines()) if re.search(pat, ln)]


def test_nvidia_region_memory_ops_stay_between_timer_reads():
    """Immediate records (a kernel not prepared by ``@ktrace.trace``). The copy's loads and stores sit between the span's two %globaltimer reads in the PTX
    (straight-line code: predicated, no branches); after the second read come only the record's
    two 16-byte stores under one predicate and the dropped-counter store under another, both
    made from operands: (slot free / full) and (this is thread 0), the latter read once by
    ``kl.init`` (one thread writes the whole record)."""
    fn, sig, consts = CASES["copy"]
    asm = compile_asm(fn.jit_fn.ktrace_original, sig, {**consts, "KTRACE": 4}, CUDA_SM90)
    assert not re.search(r"\bbra\b", asm)
    lines = asm.splitlines()
    timers = _lines(asm, r"%globaltimer")
    loads = _lines(asm, r"ld\.global")
    stores = _lines(asm, r"st\.global")
    assert len(timers) == 2, timers
    assert loads and timers[0] < min(loads) and max(loads) < timers[1]
    inside = [i for i in stores if timers[0] < i < timers[1]]
    after = [lines[i].strip() for i in stores if i > timers[1]]
    assert len(inside) == len(loads)  # every loaded element is stored inside the span
    assert len(after) == 3, after
    preds = {ln.split()[0] for ln in after[:2]}
    assert all("st.global.v2.b64" in ln for ln in after[:2]) and len(preds) == 1, after
    assert "st.global.b32" in after[2] and after[2].split()[0] not in preds, after
    block = "\n".join(lines[timers[1] : stores[-1] + 1])
    pred = preds.pop().lstrip("@")
    assert re.search(rf"setp\.ne\.u32 {re.escape(pred)}, %r\d+, 0;", block), block
    # the writer thread: %tid.x == 0, read once, before the region
    tid = _lines(asm, r"mov\.u32 %t, %tid\.x; setp\.eq\.u32 %q, %t, 0;")
    assert len(tid) == 1 and tid[0] < timers[0]


def test_amd_timer_is_fenced():
    """gfx942: s_waitcnt vmcnt(0) right before each s_memrealtime, lgkmcnt(0) right after it."""
    fn, sig, consts = CASES["copy"]
    asm = compile_asm(fn, sig, {**consts, "KTRACE": 4}, HIP_GFX942)
    lines = asm.splitlines()
    timers = _lines(asm, r"s_memrealtime")
    assert len(timers) == 2
    for t in timers:
        assert "s_waitcnt vmcnt(0)" in lines[t - 1]
        assert "s_waitcnt lgkmcnt(0)" in lines[t + 1]


@pytest.mark.parametrize("target", [CUDA_SM90, HIP_GFX942], ids=["sm_90", "gfx942"])
def test_llvm_ir_keeps_region_memory_ops_between_timer_reads(target):
    """In program order (LLVM IR, before the backend lays out blocks: on gfx942 masked memory
    operations go to out-of-line blocks that branch back), the copy's loads and stores lie
    between the two timer reads, which are side-effecting asm with a memory clobber."""
    fn, sig, consts = CASES["copy"]
    ir = compile_asm(fn.jit_fn.ktrace_original, sig, {**consts, "KTRACE": 4}, target, stage="llir")
    timer = "globaltimer" if target.backend == "cuda" else "s_memrealtime"
    timers = _lines(ir, r"asm sideeffect.*" + timer)
    assert len(timers) == 2
    assert all("~{memory}" in ir.splitlines()[t] for t in timers)
    if target.backend == "cuda":  # NVIDIA lowers memory ops to inline PTX; the data is 32-bit
        mem = _lines(ir, r"(ld|st)\.global\.b32 ")
        records = _lines(ir, r"st\.global\.v2\.b64")  # one asm block: the record's two stores
        n_records = 1
    else:
        lines = ir.splitlines()
        mem = [i for i in _lines(ir, r"(load|store) .*addrspace\(1\)|buffer\.(load|store)") if "i64" not in lines[i]]
        records = _lines(ir, r"store (<1 x )?i64")
        n_records = 4
    assert len(mem) >= 2 and len(records) == n_records
    data = [m for m in mem if m < min(records)]  # the dropped counter's i32 store comes after
    assert data and all(timers[0] < m < timers[1] for m in data), (timers, data)
    assert all(r > timers[1] for r in records)


@pytest.mark.parametrize("target", [CUDA_SM90, HIP_GFX942], ids=["sm_90", "gfx942"])
def test_record_store_is_guarded_by_capacity(target):
    """The record store is predicated on the slot being free (no out-of-bounds write)."""
    fn, sig, consts = CASES["overflow"]
    asm = compile_asm(fn, sig, {**consts, "KTRACE": 4}, target)
    if target.backend == "cuda":
        recs = [ln for ln in asm.splitlines() if re.search(r"st\.global\.(v2\.)?b64", ln)]
        assert recs and all(ln.strip().startswith("@") for ln in recs), recs
    else:
        assert re.search(r"s_and_saveexec|v_cmp", asm)


@pytest.mark.parametrize("traced", [False, True])
def test_hand_off_release_does_not_wait_for_the_notify_record(traced):
    """sm_90, a wait then a notify: the NOTIFY record is stored after the release (so the release
    never waits for it), the WAIT record right after the spin, and the only CTA barrier is the
    notify's (the wait makes none)."""
    sig = {"flag": "*i32", "rank": "i32", "peer": "i32", "heap_bases": "*i64", "ktrace_buf": "*i64"}
    asm = compile_asm(pk.relay_kernel, sig, {"KTRACE": 8 if traced else 0}, CUDA_SM90)
    assert asm.count("bar.sync") == 1
    release = _lines(asm, r"atom\.global\.sys\.release\.exch")
    spin = _lines(asm, r"ld\.acquire\.sys\.global")
    records = _lines(asm, r"st\.global\.v2\.b64")
    assert len(release) == 1 and spin
    if not traced:
        assert not records
        return
    assert len(records) == 8, records  # WAIT + DETAIL, NOTIFY + DETAIL: four 16-byte stores each
    assert all(max(spin) < r < release[0] for r in records[:4])
    assert all(r > release[0] for r in records[4:])
    # prepared by @ktrace.trace: no record store between the spin and the release
    import ktrace

    asm = compile_asm(ktrace.trace(pk.relay_kernel), sig, {"KTRACE": 8}, CUDA_SM90)
    release = _lines(asm, r"atom\.global\.sys\.release\.exch")
    spin = _lines(asm, r"ld\.acquire\.sys\.global")
    records = _lines(asm, r"st\.global\.v2\.b64")
    assert not [r for r in records if max(spin) < r < release[0]]
    assert len([r for r in records if r > release[0]]) >= 8


def test_gate_must_be_a_non_negative_int():
    import triton

    fn, sig, consts = CASES["copy"]
    for bad in (-1, True, 2.5):
        with pytest.raises(triton.CompilationError) as ei:
            compile_asm(fn, sig, {**consts, "KTRACE": bad}, CUDA_SM90)
        causes, e = [], ei.value
        while e is not None:
            causes.append(str(e))
            e = e.__cause__
        assert any("KTRACE must be a non-negative int" in c for c in causes), causes


def test_deferred_span_record_is_stored_at_the_end_by_thread_0():
    """``@ktrace.trace`` prepared the copy: the span's record waits in registers and the added
    ``kl.finish`` stores it after the region, in one predicated block whose words are the two timer
    readings; nothing between the timer reads but the copy's own loads and stores."""
    fn, sig, consts = CASES["copy"]
    assert "finish(kt)" in fn.jit_fn.src and "init_deferred(" in fn.jit_fn.src
    asm = compile_asm(fn, sig, {**consts, "KTRACE": 4}, CUDA_SM90)
    lines = asm.splitlines()
    timers = _lines(asm, r"%globaltimer")
    loads, stores = _lines(asm, r"ld\.global"), _lines(asm, r"st\.global")
    assert len(timers) == 2 and timers[0] < min(loads) and max(loads) < timers[1]
    assert len([i for i in stores if timers[0] < i < timers[1]]) == len(loads)
    after = [lines[i].strip() for i in stores if i > timers[1]]
    assert after and all(ln.startswith("@") for ln in after), after
    regs = [re.search(r"mov\.u64 (%rd\d+), %globaltimer", lines[t]).group(1) for t in timers]
    rec = [ln for ln in after if re.search(rf"\{{{re.escape(regs[0])}, {re.escape(regs[1])}\}}", ln)]
    assert len(rec) == 1 and "st.global.v2.b64" in rec[0], after


def _sass(fn, sig, consts, attrs=None, **options):
    """sm_90 SASS of a kernel (``ktrace.testing.compile.compile_sass``); skipped where this Triton
    ships no ``nvdisasm``."""
    from ktrace.testing.compile import compile_sass

    try:
        return compile_sass(fn, sig, consts, attrs, **options)
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("deferred", [False, True], ids=["immediate", "deferred"])
def test_sass_wait_record_leaves_the_path_from_spin_to_release(deferred):
    """sm_90 SASS of a wait then a notify: with immediate records the WAIT record's four 16-byte
    stores sit between the spin's last flag read and the release's MEMBAR (which waits for them);
    in a kernel prepared by ``@ktrace.trace`` none do: they come after the release's atomic."""
    import ktrace

    sig = {"flag": "*i32", "rank": "i32", "peer": "i32", "heap_bases": "*i64", "ktrace_buf": "*i64"}
    fn = ktrace.trace(pk.relay_kernel) if deferred else pk.relay_kernel
    lines = _sass(fn, sig, {"KTRACE": 8}).splitlines()
    spin = max(i for i, ln in enumerate(lines) if "LDG.E.STRONG.SYS" in ln)
    membar = [i for i, ln in enumerate(lines) if "MEMBAR.ALL.SYS" in ln]
    atom = [i for i, ln in enumerate(lines) if "ATOMG.E.EXCH.STRONG.SYS" in ln]
    assert len(membar) == 1 and len(atom) == 1 and spin < membar[0] < atom[0]
    vec = [i for i, ln in enumerate(lines) if "STG.E.128" in ln]
    between = [i for i in vec if spin < i < membar[0]]
    after = [i for i in vec if i > atom[0]]
    if deferred:
        assert not between and len(after) == 8, (between, after)
    else:
        assert len(between) == 4 and len(after) == 4, (between, after)


@pytest.mark.parametrize("target", [CUDA_SM90, HIP_GFX942], ids=["sm_90", "gfx942"])
def test_deferred_probes_compile_away_when_off(target):
    """A kernel prepared by ``@ktrace.trace`` (deferred records, the added ``kl.finish``) compiled
    with KTRACE=0 is the unprepared kernel's assembly, for every probe kind (relay: a wait and a
    notify; shape: spans, marks, counters)."""
    import ktrace

    relay = {"flag": "*i32", "rank": "i32", "peer": "i32", "heap_bases": "*i64", "ktrace_buf": "*i64"}
    for fn, sig in ((pk.relay_kernel, relay), (pk.shape_kernel.jit_fn.ktrace_original, CASES["shape"][1])):
        prepared = ktrace.trace(fn).jit_fn
        assert prepared is not fn and "finish(kt)" in prepared.src
        a = compile_asm(prepared, sig, {"KTRACE": 0}, target)
        b = compile_asm(fn, sig, {"KTRACE": 0}, target)
        strip = lambda asm: [ln for ln in asm.split(".section")[0].splitlines()  # noqa: E731
                             if ln.strip() and not ln.strip().startswith((".loc", ".file", "//", ";"))]
        assert strip(a) == strip(b)
        assert not PLACE[target.backend].search(a)  # (a bounded wait reads the timer, traced or not)


# ---------------------------------------------------------------------------------------------
# CUDA graph replays (``ktrace.graphs``): the commit kernel, and a kernel replayable in a graph
# ---------------------------------------------------------------------------------------------

_COMMIT_SIG = {"stage": "*i64", "ring": "*i64", "mirror": "*i64", "key": "i64", "n_words": "i32", "zero_from": "i32",
               "keys_at": "i32", "slots_at": "i32", "slot_words": "i32", "ring_slots": "i32"}


@pytest.mark.parametrize("target", [CUDA_SM90, HIP_GFX942], ids=["sm_90", "gfx942"])
def test_commit_kernel_compiles_without_atomics_or_timer(target):
    """The commit kernel captured after a traced launch: plain loads and stores (each program
    advances its own replay count: no atomic), no timer read, and the ring slot's offset computed
    in 64 bits (a ring of many large slots passes 2**31 words)."""
    from ktrace.graphs.device import COMMIT_BLOCK, replay_commit

    asm = compile_asm(replay_commit, _COMMIT_SIG, {"BLOCK": COMMIT_BLOCK}, target)
    be = target.backend
    assert not TIMER[be].search(asm) and not PLACE[be].search(asm)
    if be == "cuda":
        assert not re.search(r"\b(atom|red)\.", asm)
        assert re.search(r"\brem\.s64\b", asm) and re.search(r"\bmul\.lo\.s64\b", asm)
    else:
        assert not re.search(r"\b(global|buffer|flat)_atomic", asm)
    assert _stores(asm, be) >= 5  # the slot, the zeros, the count, the key, the stamp, the mirror


def test_probes_of_a_graph_replayable_kernel_compile_away_when_off():
    """examples/08's tile all-to-all (its round read from device memory, for CUDA graphs): the
    traced binary records, the untraced one has no record store and no SM read (its waits read the
    timer for their bound, traced or not)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "08_cuda_graph_replays.py"
    spec = importlib.util.spec_from_file_location("ktrace_example_08", path)
    ex = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = ex
    spec.loader.exec_module(ex)
    sig = {"src": "*fp32", "out": "*fp32", "recv": "*fp32", "flags": "*i32", "epoch_ptr": "*i32", "rank": "i32",
           "heap_bases": "*i64", **{k: "i32" for k in ex.RUNTIME_INTS if k != "rank"}, "ktrace_buf": "*i64"}
    consts = {"WORLD": 2, "CHUNKS": 4, "BLOCK": 256, "TIMEOUT_NS": 10**9}
    for target in (CUDA_SM90, HIP_GFX942):
        off = compile_asm(ex.tile_exchange, sig, {**consts, "KTRACE": 0}, target)
        on = compile_asm(ex.tile_exchange, sig, {**consts, "KTRACE": 58}, target)
        assert not PLACE[target.backend].search(off) and PLACE[target.backend].search(on)
        assert _stores(on, target.backend) > _stores(off, target.backend)
