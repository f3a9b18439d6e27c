"""The assembly of every kernel the compile tests build, to check that a change to the probes'
Python leaves the device code as it was.

    python scripts/asm_snapshot.py OUT_DIR              # compile, write one file per kernel variant
    python scripts/asm_snapshot.py --diff OLD NEW [--sass]   # compare two snapshots, instruction by instruction

The snapshot runs the compile tests (``TESTS`` below) with ``triton.compile`` watched: every
kernel they compile, with its signature, constants, target and options, is written as its PTX
(sm_90) or AMDGCN (gfx942). It then compiles each kernel of ``tests/probe_kernels.py``,
``tests/gluon_probe_kernels.py`` and ``tests/auto_kernels.py`` (prepared by ``ktrace.auto``)
traced and untraced, for each target it compiles for. ``--diff`` compares two snapshots without
the debug information (``.loc``/``.file`` lines, debug sections: they hold source line numbers),
and prints the kernels that differ, appeared or disappeared (those whose instructions are the
same, in another order or with other register numbers, said so; with ``--sass``, whether ``ptxas``
makes the same SASS of those); its exit status is 1 when any did.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The tests that compile kernels: probes, Gluon probes, ktrace.auto, the instrumented kernels,
#: the heap's and the flight recorder's device code, the launch barrier.
TESTS = [
    "tests/test_compile.py",
    "tests/test_gluon.py",
    "tests/test_auto.py",
    "tests/test_shmem_cpu.py",
    "tests/test_align.py",
    "tests/test_flight.py",
    "tests/kernels/test_gemm_compile.py",
    "tests/kernels/test_all_reduce_compile.py",
    "tests/kernels/test_all_to_all_compile.py",
    "tests/test_probe_overhead_cpu.py",
]


def _key(src, target, options) -> tuple[str, dict]:
    fn = src.fn
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"
    sig = {str(k): str(v) for k, v in sorted(src.signature.items())}
    consts = {str(k): repr(v) for k, v in sorted(getattr(src, "constants", {}).items())}
    tgt = f"{target.backend}:{target.arch}" if target is not None else "default"
    what = {"kernel": name, "src_sha": hashlib.sha1(fn.src.encode()).hexdigest()[:10], "signature": sig,
            "constants": consts, "attrs": repr(sorted(getattr(src, "attrs", {}).items())), "target": tgt, "options": {str(k): repr(v) for k, v in sorted((options or {}).items())}}
    h = hashlib.sha1(json.dumps({k: v for k, v in what.items() if k != "src_sha"}, sort_keys=True).encode()).hexdigest()[:12]
    # the source's hash names the file too: a prepared kernel and its original share a name
    return f"{name}-{h}-{what['src_sha']}", what


def snapshot(out: Path) -> int:
    import pytest
    import triton

    out.mkdir(parents=True, exist_ok=True)
    index: dict[str, dict] = {}
    real = triton.compile

    def watched(src, target=None, options=None, *a, **kw):
        kernel = real(src, target=target, options=options, *a, **kw)
        try:
            name, what = _key(src, target, options)
        except Exception:  # (an IR source, not a Python kernel: not ours to compare)
            return kernel
        asm = kernel.asm.get("ptx") or kernel.asm.get("amdgcn")
        if asm is not None and name not in index:
            index[name] = what
            (out / (name + (".ptx" if "ptx" in kernel.asm else ".amdgcn"))).write_text(asm)
        return kernel

    triton.compile = watched
    try:
        rc = pytest.main(["-q", "-p", "no:cacheprovider", *[str(ROOT / t) for t in TESTS]])
        _extra_kernels()
    finally:
        triton.compile = real
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True))
    print(f"{len(index)} kernel variants written to {out} (tests: exit {int(rc)})")
    return int(rc)


def _extra_kernels() -> None:
    """Every kernel of the probe test modules, traced and untraced, whether or not a test compiles it."""
    sys.path.insert(0, str(ROOT))
    import ktrace
    from ktrace.testing.compile import CUDA_SM90, HIP_GFX942, compile_asm
    from tests import auto_kernels as ak
    from tests import gluon_probe_kernels as gpk
    from tests import probe_kernels as pk

    copy = {"x": "*fp32", "y": "*fp32", "n": "i32", "ktrace_buf": "*i64"}
    relay = {"flag": "*i32", "rank": "i32", "peer": "i32", "heap_bases": "*i64", "ktrace_buf": "*i64"}
    triton_cases = [
        (pk.copy_kernel, copy, {"BLOCK": 1024}),
        (pk.shape_kernel, {"out": "*fp32", "ktrace_buf": "*i64"}, {}),
        (pk.overflow_kernel, {"out": "*i32", "n_marks": "i32", "ktrace_buf": "*i64"}, {}),
        (pk.wait_layout_kernel, {"out": "*i32", "ktrace_buf": "*i64"}, {}),
        (pk.copy_multi_span_kernel, copy, {"BLOCK": 1024, "SPANS": 4}),
        (pk.relay_kernel, relay, {}),
    ]
    for fn, sig, consts in triton_cases:
        original = getattr(getattr(fn, "jit_fn", fn), "ktrace_original", None) or getattr(fn, "jit_fn", fn)
        for kernel in (original, ktrace.trace(original)):
            for target in (CUDA_SM90, HIP_GFX942):
                for slots in (0, 8, ktrace.schema.ring_gate(8)):
                    compile_asm(kernel, sig, {**consts, "KTRACE": slots}, target)
    handoff = {"out": "*i32", "n_iters": "i32", "ktrace_buf": "*i64"}
    flag = {"flags": "*i32", "rank": "i32", "dst": "i32", "src": "i32", "heap_bases": "*i64", "n_rounds": "i32", "ktrace_buf": "*i64"}
    for fn, sig in ((gpk.handoff_kernel, handoff), (gpk.flag_kernel, flag)):
        for slots in (0, 16):
            compile_asm(fn, sig, {"KTRACE": slots, "KTRACE_LANES": 2}, CUDA_SM90, num_warps=4)
    from ktrace.auto import prepare

    auto_cases = [
        (ak.spins, {"flags": "*i32", "out": "*i32", "v": "i32"}, {"N": 8}),
        (ak.notifies, {"flags": "*i32", "data": "*fp32", "out": "*i32", "v": "i32"}, {"N": 8}),
    ]
    for fn, sig, consts in auto_cases:
        p = prepare.prepare(fn)
        for target in (CUDA_SM90, HIP_GFX942):
            compile_asm(fn, sig, consts, target)
            compile_asm(p.jit, sig, {**consts, "KTRACE": 0}, target)
            compile_asm(p.jit, {**sig, "ktrace_buf": "*i64"}, {**consts, "KTRACE": 48, "KTRACE_WAIT_NS": 1_000_000}, target)


_DEBUG = re.compile(r"^\s*(\.loc|\.file|//|;|\.ident|\$L__tmp\d+:|\.Ltmp\d+:)")


def instructions(text: str) -> list[str]:
    """The assembly without debug information: what runs, and its layout."""
    out = []
    for ln in text.splitlines():
        if re.match(r"^\s*\.section\s+\.debug", ln) or re.match(r"^\s*\.section\s+\.AMDGPU\.csdata", ln):
            break
        if _DEBUG.match(ln) or not ln.strip():
            continue
        out.append(ln.split("//")[0].rstrip())
    return out


def _shape(lines: list[str]) -> list[str]:
    """The instructions with registers and labels numbered away, sorted: equal for two listings of
    the same instructions in another order (or with other register numbers)."""
    reg = re.compile(r"(%[a-z]+|\$L__BB\d+_|\.LBB\d+_|\.L_x_|\b[vs]|\b(?:U?R|U?P|B))\d+")
    jump = re.compile(r"\b(BRA|BSSY|CALL\.REL|JMP)(\S*)\s+(`?\(?\.?\w*\)?|0x[0-9a-f]+)")  # (targets: addresses)
    return sorted(jump.sub(r"\1\2 #", reg.sub(r"\1#", ln.replace(".reuse", ""))) for ln in lines if ln.strip() not in ("NOP",))


def _sass(ptx: Path) -> list[str] | None:
    """The SASS ``ptxas`` makes of a saved PTX (Triton's own ``ptxas``, for the target the PTX
    names), its addresses and encodings left out; None where this Triton ships no ``ptxas``."""
    import subprocess
    import tempfile

    import triton

    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    if not (tools / "ptxas").exists() or not (tools / "cuobjdump").exists():
        return None
    arch = re.search(r"^\.target\s+(sm_\w+)", ptx.read_text(), re.M).group(1)
    with tempfile.TemporaryDirectory() as d:
        cubin = Path(d) / "k.cubin"
        subprocess.run([str(tools / "ptxas"), f"-arch={arch}", "-o", str(cubin), str(ptx)], check=True, capture_output=True)
        text = subprocess.run([str(tools / "cuobjdump"), "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    return [re.sub(r"/\*[0-9a-f]{4}\*/|/\* 0x[0-9a-f]+ \*/", "", ln).strip().rstrip(";").strip() for ln in text.splitlines()
            if re.match(r"^\s+/\*[0-9a-f]{4}\*/", ln)]


def _count_change(a: list[str], b: list[str]) -> str:
    """The instructions one listing has more of than the other (registers numbered away)."""
    from collections import Counter

    ca, cb = Counter(_shape(a)), Counter(_shape(b))
    more, fewer = cb - ca, ca - cb
    def said(c, sign):
        return "; ".join(f"{sign}{n} x {ln}" if n > 1 else f"{sign}{ln}" for ln, n in c.items())[:200]

    return f"{sum(more.values())} instruction(s) more ({said(more, '+')}), {sum(fewer.values())} fewer ({said(fewer, '-')})"


def diff(old: Path, new: Path, sass: bool = False) -> int:
    import difflib

    a = {p.name: p for p in old.iterdir() if p.suffix in (".ptx", ".amdgcn")}
    b = {p.name: p for p in new.iterdir() if p.suffix in (".ptx", ".amdgcn")}
    strip = lambda n: n.rsplit("-", 1)[0]  # noqa: E731  (the source hash: matched separately)
    a_by, b_by = {strip(n): n for n in a}, {strip(n): n for n in b}
    same = changed = reordered = 0
    for k in sorted(set(a_by) | set(b_by)):
        if k not in b_by:
            print(f"gone: {a_by[k]}")
            changed += 1
            continue
        if k not in a_by:
            print(f"new: {b_by[k]}")
            changed += 1
            continue
        ia, ib = instructions(a[a_by[k]].read_text()), instructions(b[b_by[k]].read_text())
        if ia == ib:
            same += 1
            continue
        changed += 1
        if _shape(ia) == _shape(ib):
            reordered += 1
            said = ""
            if sass and a_by[k].endswith(".ptx"):
                sa, sb = _sass(a[a_by[k]]), _sass(b[b_by[k]])
                said = ("; SASS identical" if sa == sb else f"; SASS {len(sa)} -> {len(sb)} lines, "
                        + ("the same instructions reordered" if _shape(sa) == _shape(sb) else _count_change(sa, sb))) \
                    if sa is not None else "; no ptxas here"
            print(f"reordered: {k} (the same {len(ia)} instructions, in another order or with other register numbers{said})")
            continue
        print(f"differs: {k} ({len(ia)} -> {len(ib)} lines)")
        for ln in list(difflib.unified_diff(ia, ib, lineterm="", n=2))[:60]:
            print("   ", ln)
    print(f"{same} identical, {changed} not ({reordered} of them the same instructions reordered)")
    return 1 if changed else 0


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "--diff" and sys.argv[4:] in ([], ["--sass"]):
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3]), sass=sys.argv[4:] == ["--sass"]))
    if len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        sys.exit(snapshot(Path(sys.argv[1])))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
