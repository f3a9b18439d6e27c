"""Tracing kernels without edits (``ktrace.auto``), on the CPU.

What the preparation does to kernels written as users write them (``tests/auto_kernels.py``,
``tests/byok/``): which spins become waits (their address, expected value and comparison), which
atomics notifies, which loops spans, what is left as written and said in one line; that the
prepared kernel compiles traced for sm_90 and gfx942 and, with tracing off, to exactly the
kernel's own assembly; declarations; addresses mapped through each rank's table and paired
across ranks on a capture whose buffers are laid out as the probes lay them; ``ktrace record``'s
refusals. (Running the prepared kernels is the GPU tier's: tests/gpu, scripts/gpu_byok.sh.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ktrace.auto import addresses as A
from ktrace.auto import declarations as D
from ktrace.auto import transform as T

ROOT = Path(__file__).resolve().parents[1]
triton = pytest.importorskip("triton")

from ktrace.auto import prepare as P  # noqa: E402
from ktrace.testing.compile import CUDA_SM90, HIP_GFX942, compile_asm  # noqa: E402
from tests import auto_kernels as K  # noqa: E402


def _sites(p, kind):
    return [s for s in p.sites if s.kind == kind]


@pytest.fixture
def fresh_triton_cache(tmp_path, monkeypatch):
    """Triton's disk cache keys a compile by its source, not by the file it came from: a compile
    cached from another checkout of this repository carries that checkout's path in its debug
    information. Comparisons that include source locations compile in a cache of their own."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))


def _ptx_pair(kernel, sig, consts, target=CUDA_SM90, **opts):
    """The kernel's own assembly, and its prepared copy's with tracing off."""
    p = P.prepare(kernel)
    return compile_asm(kernel, sig, consts, target, **opts), compile_asm(p.jit, sig, {**consts, "KTRACE": 0}, target, **opts)


def _traced(kernel, sig, consts, target=CUDA_SM90):
    p = P.prepare(kernel)
    return compile_asm(p.jit, {**sig, "ktrace_buf": "*i64"}, {**consts, "KTRACE": 48, "KTRACE_WAIT_NS": 1_000_000}, target)


SPINS_SIG = {"flags": "*i32", "out": "*i32", "v": "i32"}
NOTIFY_SIG = {"flags": "*i32", "data": "*fp32", "out": "*i32", "v": "i32"}
LOOPS_SIG = {"x": "*fp32", "out": "*fp32", "n_iter": "i32"}
RING_SIG = {"x": "*fp32", "out": "*fp32", "buf_ptrs": "*i64", "flags_ptrs": "*i64", **{k: "i32" for k in (
    "rank", "world", "epoch", "delay_rank", "delay_lo", "delay_hi", "skip_rank", "skip_tile", "delay_plo", "delay_phi",
    "skip_prog", "shift")}, "delay_ns": "i64"}


# ---------------------------------------------------------------------------------------------
# what is recognised
# ---------------------------------------------------------------------------------------------


def test_spins_become_waits_with_their_address_value_and_comparison():
    p = P.prepare(K.spins)
    src = p.jit.src
    spun = [ln for ln in src.splitlines() if "_kt_probes.spun(" in ln]
    assert len(spun) == 7, src
    # (address, expected, cmp) of each, in source order
    want = [("flags + pid", "v", T.GE), ("flags + pid", "v", T.EQ), ("flags + pid", "v", T.GE), ("flags + pid", "1", T.EQ),
            ("flags + pid", "0", T.NE), ("flags + pid", "v", T.GE), ("flags + N + pid", "v", T.GE)]
    for line, (addr, exp, cmp) in zip(spun, want):
        args = line.split("spun(", 1)[1]
        assert f", {addr}, None, -1, " in args and f", {exp}, {cmp}, " in args, (line, addr, exp, cmp)
    # the helper with a spin is called through its traced twin, which records the wait in it
    assert "_kt_twin_wait_flag_" in src and "_kt = _kt_twin_wait_flag_" in src
    twin = next(iter(p.twins.values()))
    assert [s.kind for s in twin.sites] == ["spin"] and "spun(" in twin.jit.src
    assert p.limits() == []
    # each spin's region names the kernel and its source line
    lines = [s.line for s in _sites(p, "spin")]
    first = K.spins.fn.__code__.co_firstlineno
    src_lines = Path(K.__file__).read_text().splitlines()
    assert all(src_lines[first + ln - 1].lstrip().startswith("while") for ln in lines), lines


def test_truthy_and_negated_spin_conditions_wait_for_zero_and_non_zero():
    """``while load(p):`` waits for == 0, ``while not load(p):`` for != 0 (checked on the tree:
    Triton 3.6 does not compile ``not`` of an int tensor)."""
    import ast

    src = "def k(p):\n    while ld(p):\n        pass\n    while not ld(p + 1):\n        pass\n"
    fdef = ast.parse(src).body[0]

    def classify(call):
        return T.Read(addr=call.args[0]) if ast.unparse(call.func) == "ld" else None

    r = T.instrument(fdef, classify, kernel=True)
    spun = [ln for ln in ast.unparse(r.fdef).splitlines() if "spun(" in ln]
    assert ", p, None, -1, " in spun[0] and f", 0, {T.EQ}, " in spun[0]
    assert ", p + 1, None, -1, " in spun[1] and f", 0, {T.NE}, " in spun[1]


def test_signalling_atomics_become_notifies_and_data_atomics_fences_do_not():
    p = P.prepare(K.notifies)
    notes = _sites(p, "notify")
    # the block atomic is wrapped but records nothing (compiled away: a block is data); the
    # acquire fence is not wrapped at all; the release exchange and the counter add are notifies
    assert [s.what.split()[0] for s in notes] == ["atomic_add", "atomic_xchg", "atomic_add"]
    assert "atomic_add(flags + pid, 0" not in "".join(ln for ln in p.jit.src.splitlines() if "notified(" in ln)
    ptx = _traced(K.notifies, NOTIFY_SIG, {"N": 64})
    # two NOTIFYs, stored as deferred records: their tags are in the PTX; the block atomic's stamp is not a timer read
    assert ptx.count("%globaltimer") >= 5


def test_top_level_loops_are_spanned_per_iteration_nested_ones_are_not():
    p = P.prepare(K.loops)
    loops = _sites(p, "loop")
    assert [s.what for s in loops] == ["for i", "while"], loops
    assert _sites(p, "program")[0].region == "loops"
    assert p.jit.src.count("_kt_language.begin(") == 3  # program + two loops


def test_an_early_return_flushes_the_program_span_first():
    p = P.prepare(K.early_return)
    body = p.jit.src.splitlines()
    ret = next(i for i, ln in enumerate(body) if ln.strip() == "return")
    assert "finish(_kt)" in body[ret - 1] and "end(_kt, _kt_program)" in body[ret - 2]
    asm = _traced(K.early_return, {"x": "*fp32", "out": "*fp32", "n": "i32"}, {"N": 128})
    assert "%globaltimer" in asm


def test_what_cannot_be_prepared_is_said_in_one_line():
    p = P.prepare(K.asm_spin)
    assert len(p.limits()) == 1 and "inline asm that loops on memory" in p.limits()[0]
    assert p.limits()[0].startswith("tests/auto_kernels.py:") or p.limits()[0].startswith("auto_kernels.py:")
    p = P.prepare(K.calls_branchy)
    assert any("branchy_helper is not traced inside" in x and "returns from inside a branch" in x for x in p.limits()), p.limits()
    with pytest.raises(T.Refused, match="_kt_mine"):
        P.prepare(K.uses_reserved)


# ---------------------------------------------------------------------------------------------
# compiled: traced, and with tracing off exactly the kernel's own
# ---------------------------------------------------------------------------------------------

CASES = [
    (K.spins, SPINS_SIG, {"N": 64}),
    (K.notifies, NOTIFY_SIG, {"N": 64}),
    (K.loops, LOOPS_SIG, {"N": 64}),
    (K.early_return, {"x": "*fp32", "out": "*fp32", "n": "i32"}, {"N": 128}),
]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("target", [CUDA_SM90, HIP_GFX942], ids=["sm_90", "gfx942"])
def test_tracing_off_compiles_to_the_kernels_own_assembly(case, target, fresh_triton_cache):
    kernel, sig, consts = CASES[case]
    mine, prepared = _ptx_pair(kernel, sig, consts, target)
    assert prepared == mine  # byte for byte, source locations included
    traced = _traced(kernel, sig, consts, target)
    assert ("%globaltimer" in traced) if target.backend == "cuda" else ("s_memrealtime" in traced)


@pytest.mark.parametrize("style", ["plain", "asm", "iris"])
def test_the_ring_kernels_compile_traced_and_identical_when_off(style, monkeypatch, fresh_triton_cache):
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "byok" / "standins"))
    D.load_file(ROOT / "tests" / "byok" / "ring_asm.json")
    mod = __import__(f"tests.byok.ring_{style}", fromlist=["x"])
    kernel = getattr(mod, f"ring_{style}")
    sig = dict(RING_SIG)
    if style == "iris":
        del sig["buf_ptrs"], sig["flags_ptrs"]
        sig.update(buf="*fp32", flags="*i32", heap_bases="*u64")
    consts = {"n_tiles": 4, "TILE": 256}
    mine, prepared = _ptx_pair(kernel, sig, consts)
    assert prepared == mine
    p = P.prepare(kernel)
    kinds = sorted({s.kind for s in p.sites})
    assert kinds == sorted({"program", "loop", "notify", "spin" if style != "asm" else "wait"} | ({"notify"})), kinds
    traced = _traced(kernel, sig, consts)
    assert traced.count("%globaltimer") >= 6 and p.limits() == []


# ---------------------------------------------------------------------------------------------
# declarations
# ---------------------------------------------------------------------------------------------


def test_declarations_are_checked_and_named_files_refused_in_one_line(tmp_path):
    with pytest.raises(D.DeclarationError, match="exactly one"):
        D.declare("a.b", waits="x", notifies="y")
    with pytest.raises(D.DeclarationError, match="cmp"):
        D.declare("a.b", waits="x", cmp="roughly")
    with pytest.raises(D.DeclarationError, match="parameter name"):
        D.declare("a.b", waits="x[0]")
    bad = tmp_path / "bad.json"
    bad.write_text('{"m.f": {"waits": "a", "colour": "red"}}')
    with pytest.raises(D.DeclarationError, match=r"bad\.json.*unknown keys"):
        D.load_file(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(D.DeclarationError, match="bad.json"):
        D.load_file(bad)
    bad.write_bytes(b"\xff" * 10)
    with pytest.raises(D.DeclarationError, match="not JSON"):
        D.load_file(bad)


def test_the_libraries_helpers_are_declared_and_torch_nvshmem_waits_map_their_comparison():
    """PyTorch's NVSHMEM helpers are real objects here (torch's CPU build ships their module):
    a kernel calling ``signal_wait_until(sig, NVSHMEM_CMP_GE, v)`` records a ``ge`` wait on ``sig``.
    (Checked on the prepared source only: compiling needs NVSHMEM's device library.)"""
    nv = pytest.importorskip("torch.distributed._symmetric_memory._nvshmem_triton")
    if not hasattr(nv, "signal_wait_until"):
        pytest.skip("this torch has no NVSHMEM Triton helpers")
    assert D.lookup(nv.signal_wait_until).role == "waits"
    assert D.lookup("iris.iris.atomic_cas").role == "atomic" and D.lookup("triton_dist.language.distributed_ops.wait")
    scope = {"nv": nv, "tl": triton.language}
    import ast

    call = ast.parse("nv.signal_wait_until(sig + 1, 5, v)").body[0].value
    kind = P.Classifier(scope)(call)
    assert isinstance(kind, T.Wait) and kind.cmp == T.GE and ast.unparse(kind.addr) == "sig + 1" and ast.unparse(kind.expected) == "v"


# ---------------------------------------------------------------------------------------------
# addresses and pairing across ranks
# ---------------------------------------------------------------------------------------------


def test_addresses_map_to_the_same_location_on_every_rank():
    # rank 0 sees rank 1's buffer at 0x7000_0000, its own at 0x5000_0000; rank 1 the other way round
    t0 = [A.Mapping(0x5000_0000, 4096, 0, 3), A.Mapping(0x7000_0000, 4096, 1, 3)]
    t1 = [A.Mapping(0x9000_0000, 4096, 0, 3), A.Mapping(0x6000_0000, 4096, 1, 3)]
    k0, o0 = A.resolve([0x7000_0040], 0, t0)  # rank 0 writes rank 1's flag 0x40
    k1, o1 = A.resolve([0x6000_0040], 1, t1)  # rank 1 polls its own flag 0x40
    assert k0[0] == k1[0] and o0[0] == o1[0] == 1 and A.split_key(k0[0]) == (1, 3, 0x40)
    # an address in no mapping is private to its rank; one with an owner given by the call is that owner's
    k, o = A.resolve([0x1234, 0x5000_0010 | (2 << 48)], 0, t0)
    assert k[0] == 0x1234 and o[0] == 0 and not A.is_location(k[:1]).any()
    assert A.split_key(k[1]) == (1, 3, 0x10) and o[1] == 1  # (owner 1 given: the heap's symmetric address)
    # a smaller mapping inside a larger one wins (an Iris heap inside a symmetric buffer)
    k, _ = A.resolve([0x5000_0100], 0, t0 + [A.Mapping(0x5000_0100, 256, 0, 4)])
    assert A.split_key(k[0]) == (0, 4, 0)


def test_tables_from_a_file_are_checked_field_by_field():
    good = [{"base": 4096, "size": 64, "owner": 1, "space": 0, "name": "x"}]
    assert A.check_table(good, 2)[0].owner == 1
    for bad, why in ([{"base": -1, "size": 1, "owner": 0, "space": 0}], "base"), ([{"base": 0, "size": 0, "owner": 0, "space": 0}], "size"), \
            ([{"base": 0, "size": 8, "owner": 5, "space": 0}], "owner"), ([{"base": 0, "size": 8, "owner": 0, "space": True}], "space"), \
            (["x"], "not an object"), ({"a": 1}, "not a list"), ([good[0]] * (A.MAX_MAPPINGS + 1), "mappings"):
        with pytest.raises(A.MappingError, match=why):
            A.check_table(bad, 2)


def _raw_capture(tmp_path, *, skip_launch=None):
    """Two ranks, raw-address launches as ``ktrace.auto``'s probes write them: rank 0's programs
    notify rank 1's flags through rank 0's mapping of rank 1's buffer; rank 1's programs wait on
    their own flags, not knowing who signals them (peer -1). Constructed data."""
    from ktrace.captures import Capture, Launch, RankCapture, write_capture
    from ktrace.captures.synth import encode_buffer
    from ktrace.schema import EVENT_DTYPE, EventFlag, EventKind, region_id

    maps = {0: [A.Mapping(0x5000_0000, 1 << 16, 0, 0, name="symm buffer"), A.Mapping(0x7000_0000, 1 << 16, 1, 0, name="symm buffer")],
            1: [A.Mapping(0x9000_0000, 1 << 16, 0, 0, name="symm buffer"), A.Mapping(0x6000_0000, 1 << 16, 1, 0, name="symm buffer")]}
    ranks = {}
    P_, n_launch = 4, 3
    for r in (0, 1):
        rc = RankCapture(rank=r, device={"name": "constructed", "tick_hz": 1_000_000_000}, mappings=maps[r])
        for li in range(n_launch):
            ev = np.zeros(P_, EVENT_DTYPE)
            ev["program"] = np.arange(P_)
            t = 1_000_000 * (li + 1)
            if r == 0:
                ev["kind"] = EventKind.NOTIFY
                ev["start"], ev["end"] = t + 1000 * np.arange(P_), t + 1000 * np.arange(P_) + 50
                ev["arg0"], ev["arg1"] = -1, li + 1  # peer unknown on the device; value = epoch
                ev["arg2"] = 0x7000_0000 + 4 * np.arange(P_)
                ev["region"] = region_id("ring:19 notify")
                if skip_launch == li:
                    ev = ev[1:]  # program 0 never signals in this launch
            else:
                ev["kind"] = EventKind.WAIT
                ev["start"] = t
                ev["end"] = t + 1000 * np.arange(P_) + 400
                ev["arg0"], ev["arg1"] = -1, 7
                ev["arg2"] = 0x6000_0000 + 4 * np.arange(P_)
                ev["arg3"], ev["arg4"], ev["arg5"] = li + 1, li + 1, 3  # saw the epoch, wanted >= it
                ev["region"] = region_id("ring:20 wait")
                if skip_launch == li:
                    ev["flags"][0] = EventFlag.TIMEOUT
                    ev["arg3"][0] = li
                    ev["end"][0] = t + 20_000_000
            raw = encode_buffer(ev, grid=(P_, 1, 1), capacity=4)
            rc.launches.append(Launch(index=li, kernel="ring", grid=(P_, 1, 1), capacity=4, raw=raw, host_ns=0,
                                      meta={"addresses": "raw"}))
        ranks[r] = rc
    cap = Capture(world_size=2, ranks=ranks, regions={region_id("ring:19 notify"): "ring:19 notify",
                                                      region_id("ring:20 wait"): "ring:20 wait"})
    path = tmp_path / "raw.ktrace"
    write_capture(path, cap)
    return path


def test_raw_addresses_pair_across_ranks_and_waits_learn_their_producer(tmp_path):
    from ktrace.captures import read_capture
    from ktrace.events import aligned_events
    from ktrace.pairing import pair_table
    from ktrace.schema import EventKind

    cap = read_capture(_raw_capture(tmp_path))
    assert [m.owner for m in cap.ranks[1].mappings] == [0, 1]
    ev = aligned_events(cap)
    n, w = ev["kind"] == EventKind.NOTIFY, ev["kind"] == EventKind.WAIT
    assert (ev["arg0"][n] == 1).all() and (ev["arg0"][w] == 0).all()  # notify -> rank 1's flag; wait <- rank 0
    assert A.is_location(ev["arg2"][n | w]).all()
    ni, wi, un_n, un_w = pair_table(ev)
    assert un_n == 0 and un_w == 0 and wi.size == int(w.sum())
    assert (ev["program"][ni] == ev["program"][wi]).all() and (ev["launch"][ni] == ev["launch"][wi]).all()


def test_a_skipped_raw_signal_is_a_hang_naming_the_producer_from_other_launches(tmp_path):
    from ktrace.analysis import build_report

    rep = build_report(_raw_capture(tmp_path, skip_launch=2))
    f = rep.findings[0]
    assert f.kind == "hang" and f.data["producer"] == 0 and f.data["consumer"] == 1 and f.data["programs"] == [0], f.text


# ---------------------------------------------------------------------------------------------
# ktrace record
# ---------------------------------------------------------------------------------------------


def _record(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "ktrace.cli", "record", *map(str, args)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


def test_record_refuses_bad_requests_in_one_line(tmp_path):
    r = _record(tmp_path)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "give the command" in r.stderr
    bad = tmp_path / "d.json"
    bad.write_text("{")
    r = _record(tmp_path, "--declare", bad, "--", sys.executable, "-c", "pass")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "d.json" in r.stderr
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "rank0.ktrace").write_bytes(b"old")
    r = _record(tmp_path, "-o", "out", "--", sys.executable, "-c", "pass")
    assert r.returncode == 2 and "earlier recording" in r.stderr and (tmp_path / "out" / "rank0.ktrace").read_bytes() == b"old"
    r = _record(tmp_path, "--events", "0", "--", sys.executable, "-c", "pass")
    assert r.returncode == 2 and "events_per_program" in r.stderr


def test_record_arms_the_processes_that_import_triton_and_keeps_their_sitecustomize(tmp_path):
    """The program runs as it would alone; a process that imports Triton gets its session (with
    ``auto``), one that does not is left alone, and a ``sitecustomize`` of the user's still runs."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
    prog = ("import os, triton, ktrace.session as s; "
            "print('armed', s._env_session is not None and s._env_session._auto is not None, os.environ.get('USER_SITE_RAN'))")
    import os

    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{site}")
    r = subprocess.run([sys.executable, "-m", "ktrace.cli", "record", "-o", "out", "--", sys.executable, "-c", prog],
                       cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    assert "armed True 1" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 2 and "no kernel was traced" in r.stderr  # (nothing launched: nothing to report)
    r = subprocess.run([sys.executable, "-m", "ktrace.cli", "record", "-o", "out2", "--", sys.executable, "-c",
                        "import sys; print('untouched', 'triton' in sys.modules, 'ktrace.session' in sys.modules)"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert "untouched False False" in r.stdout, r.stdout + r.stderr


def test_a_traced_launch_binds_its_arguments_only_for_a_grid_function(monkeypatch):
    """Binding a launch's arguments by name (``inspect``) cost as much as all the rest of a traced
    launch's host work: it is done only when a grid or a slot count is a function of them."""
    import torch

    from ktrace import traced as T
    from ktrace.auto.config import AutoConfig
    from ktrace.auto.launch import AutoTraced
    from tests.byok import ring_plain as R

    traced = AutoTraced(P.prepare(R.ring_plain), AutoConfig())
    launched = []

    class Jit:
        def __getitem__(self, grid):
            return lambda *a, **k: launched.append((grid, k))

    class Pending:
        buffer, gate = object(), 0

    class Session:
        events_per_program, launches, rank, profiler = None, [], 0, None

        def new_launch(self, kernel, grid, cap, device, **kw):
            assert kw["meta"] == {"addresses": "raw", "auto": True}
            return Pending()

    traced.jit_fn = Jit()
    monkeypatch.setattr(T, "device_of", lambda a, k: 0)
    bound = []
    real = traced.arguments
    monkeypatch.setattr(traced, "arguments", lambda a, k: bound.append(1) or real(a, k))
    x = torch.empty(4)
    knobs = dict(rank=0, world=2, epoch=1, n_tiles=4, TILE=256, delay_rank=-1, delay_lo=0, delay_hi=0, delay_ns=0, delay_plo=0,
                 delay_phi=0, skip_rank=-1, skip_tile=-1, skip_prog=-1, shift=0)
    traced.launch(Session(), (8,), (x, x, x, x), knobs)
    assert bound == [] and launched[-1][1]["KTRACE"] == 64 and launched[-1][1]["KTRACE_WAIT_NS"] == 5_000_000_000
    traced.launch(Session(), lambda meta: (meta["n_tiles"] * 2,), (x, x, x, x), knobs)
    assert bound == [1]


def test_a_declared_wait_is_polled_by_ktrace_first_with_the_deadline():
    """The asm ring's ``wait_signal`` spins inside its own assembly: traced, ktrace polls the flag
    itself first (the deadline bounds it), calls the helper only once the flag compares as
    declared, and records the wait with its reads and last value."""
    D.load_file(ROOT / "tests" / "byok" / "ring_asm.json")
    from tests.byok import ring_asm as R

    src = P.prepare(R.ring_asm).jit.src
    body = src.splitlines()
    call = next(i for i, ln in enumerate(body) if ln.strip().startswith("wait_signal(") and "if not" in body[i - 1])
    assert "_kt_probes.unmet(" in body[call - 1] and "keep_spinning" in body[call - 2]
    assert "_kt_probes.polled(" in body[call + 1]
    sig = {**RING_SIG}
    traced = _traced(R.ring_asm, sig, {"n_tiles": 4, "TILE": 256})
    assert traced.count("ld.volatile.global") >= 2  # (the poll's reads, besides the helper's own ld.acquire)


def test_record_arms_at_the_import_even_after_a_find_spec_lookup(tmp_path):
    """``ktrace record``'s hook on Triton's import fires at the import itself, also when the
    program asked ``importlib.util.find_spec`` for the module first (as torch's
    ``has_triton_package`` does before a program imports its kernels): before, that lookup took
    the hook away and nothing was traced."""
    mod = tmp_path / "kt_late_import_probe.py"
    mod.write_text("VALUE = 7\n")
    code = (
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from ktrace.auto import hooks\n"
        "seen = []\n"
        "hooks.after_import('kt_late_import_probe', lambda m: seen.append(m.VALUE))\n"
        "assert importlib.util.find_spec('kt_late_import_probe') is not None\n"
        "assert seen == [], seen\n"
        "import kt_late_import_probe\n"
        "assert seen == [7], seen\n"
        "import importlib; importlib.reload(kt_late_import_probe)\n"
        "assert seen == [7], seen\n"
        "assert not any(type(f).__name__ == '_AfterImport' for f in sys.meta_path)\n"
        "print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
