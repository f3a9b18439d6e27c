"""Compile checks shared by the kernels' CPU-tier tests."""

import re

from ktrace.testing.compile import TARGETS, compile_asm

#: A timer read in the assembly of each target.
TIMER = {"sm_90": re.compile(r"%globaltimer"), "gfx942": re.compile(r"s_memrealtime")}


def compile_variants(fn, signature: dict, constexprs: dict, target: str, slots: int = 32) -> dict:
    """Assembly of ``fn`` for ``target``: untraced with unbounded waits (no timer may remain),
    untraced with bounded waits, traced, and untraced with faults on (bounded waits).

    (The faults variant is untraced: in a traced kernel prepared by ``@ktrace.trace`` LLVM may
    duplicate blocks holding timer reads, so counting reads across traced variants says nothing.)"""
    sig_off = {k: v for k, v in signature.items() if k != "ktrace_buf"}
    sig_on = dict(signature, ktrace_buf="*i64")
    t = TARGETS[target]
    return {
        "off": compile_asm(fn, sig_off, dict(constexprs, FAULTS=False, TIMEOUT_NS=0, KTRACE=0), t, num_warps=8),
        "off_bounded": compile_asm(fn, sig_off, dict(constexprs, FAULTS=False, TIMEOUT_NS=10**8, KTRACE=0), t, num_warps=8),
        "on": compile_asm(fn, sig_on, dict(constexprs, FAULTS=False, TIMEOUT_NS=10**8, KTRACE=slots), t, num_warps=8),
        "off_faults": compile_asm(fn, sig_off, dict(constexprs, FAULTS=True, TIMEOUT_NS=10**8, KTRACE=0), t, num_warps=8),
    }


def assert_probes_gated(asm: dict, target: str) -> None:
    """Untraced without time bounds: no timer read; traced: more timer reads than untraced."""
    timer = TIMER[target]
    assert not timer.search(asm["off"]), "an untraced kernel with unbounded waits still reads the timer"
    n_bounded = len(timer.findall(asm["off_bounded"]))
    n_on = len(timer.findall(asm["on"]))
    assert n_on > n_bounded, f"traced kernel has {n_on} timer reads, untraced (bounded waits) {n_bounded}"
    assert len(timer.findall(asm["off_faults"])) > n_bounded, "the delay knob's spin must read the timer"
