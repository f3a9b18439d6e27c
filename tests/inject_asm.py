"""Fingerprints of the probes' assembly with delay injection off (``tests/test_inject.py``).

``tests/fixtures/asm/inject_off.json`` holds, per kernel and target, the SHA-256 of the kernel's
PTX (sm_90) or AMDGCN (gfx942) without its debug lines, as compiled before delay injection
existed (Triton 3.6.0). The test compiles the same kernels again: with injection off, the
assembly must be byte for byte what it was. Remade (only when the probes change on purpose) with
``PYTHONPATH=. python3 tests/inject_asm.py``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "asm" / "inject_off.json"

_RELAY = {"flag": "*i32", "rank": "i32", "peer": "i32", "heap_bases": "*i64", "ktrace_buf": "*i64"}


def cases() -> dict:
    """name -> (jit function, signature, constexprs): immediate records (copy), a kernel prepared
    by ``@ktrace.trace`` (deferred: spans, marks, counters; a wait and a notify), traced."""
    import ktrace
    from tests import probe_kernels as pk

    return {
        "copy_immediate": (pk.copy_kernel.jit_fn.ktrace_original if hasattr(pk.copy_kernel.jit_fn, "ktrace_original")
                           else pk.copy_kernel.jit_fn,
                           {"x": "*fp32", "y": "*fp32", "n": "i32", "ktrace_buf": "*i64"}, {"BLOCK": 1024, "KTRACE": 8}),
        "shape_deferred": (pk.shape_kernel.jit_fn, {"out": "*fp32", "ktrace_buf": "*i64"}, {"KTRACE": 64}),
        "relay_deferred": (ktrace.trace(pk.relay_kernel).jit_fn, _RELAY, {"KTRACE": 8}),
        "relay_immediate": (pk.relay_kernel, _RELAY, {"KTRACE": 8}),
        "relay_off": (pk.relay_kernel, _RELAY, {"KTRACE": 0}),
    }


def stripped(asm: str) -> str:
    """The assembly without its debug sections, ``.loc``/``.file`` lines and comments (they hold
    source paths and line numbers, which differ between checkouts)."""
    out = []
    for ln in asm.split(".section\t.debug")[0].split(".section .debug")[0].splitlines():
        s = ln.split("//")[0].strip()
        if s and not s.startswith((".loc", ".file", ";")):
            out.append(s)
    return "\n".join(out)


def fingerprints() -> dict:
    """``{"<case> <target>": sha256}`` of every case compiled for sm_90 and gfx942."""
    from ktrace.testing.compile import TARGETS, compile_asm

    out = {}
    for name, (fn, sig, consts) in cases().items():
        for tname, target in TARGETS.items():
            out[f"{name} {tname}"] = hashlib.sha256(stripped(compile_asm(fn, sig, consts, target)).encode()).hexdigest()
    return out


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(fingerprints(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")
