"""Delay injection (``ktrace.inject``, ``kl.delay``): compiled away when off, a timer spin on a
table when on, for sm_90 and gfx942 (no GPU: by compilation; ``scripts/gpu_cost.sh`` runs it)."""

import json
import re

import pytest

from ktrace import schema
from ktrace.testing.compile import TARGETS, compile_asm
from tests import inject_asm

TIMER = {"cuda": "%globaltimer", "hip": "s_memrealtime"}


def _spin_loops(asm: str, backend: str) -> int:
    """Backward branches whose loop body reads the device timer: spins on it."""
    lines = asm.splitlines()
    labels = {}
    for i, ln in enumerate(lines):
        m = re.match(r"^(\$?\.?L\w+):", ln)
        if m:
            labels[m.group(1)] = i
    loops = 0
    for i, ln in enumerate(lines):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$?L\w+)", ln) if backend == "cuda" else re.search(r"s_cbranch_\w+\s+(\.L\w+)", ln)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            if any(TIMER[backend] in x for x in lines[labels[m.group(1)]:i + 1]):
                loops += 1
    return loops


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_injection_off_leaves_the_assembly_byte_identical(target):
    """Every probe kernel (immediate and deferred records, spans, a wait and a notify, off) compiles
    to the assembly it had before delay injection existed (fingerprints in the fixture)."""
    want = json.loads(inject_asm.FIXTURE.read_text())
    got = inject_asm.fingerprints()
    keys = [k for k in want if k.endswith(" " + target)]
    assert len(keys) == 5
    assert {k: got[k] for k in keys} == {k: want[k] for k in keys}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("case,points", [("copy_immediate", 2), ("relay_deferred", 2), ("shape_deferred", 2)])
def test_injection_on_spins_on_the_timer_reading_the_table(case, points, target):
    """With ``schema.INJECT_GATE`` in the gate, each injection point (the program's start, each
    ``kl.begin``, each notify) reads the table's rows and spins on the device timer; without it,
    nothing of the kind is there."""
    fn, sig, consts = inject_asm.cases()[case]
    t = TARGETS[target]
    off = inject_asm.stripped(compile_asm(fn, sig, consts, t))
    on = inject_asm.stripped(compile_asm(fn, sig, {**consts, "KTRACE": schema.inject_gate(consts["KTRACE"])}, t))
    be = t.backend
    # a timer read before each spin and one in its loop, at every point of the source (the shape
    # kernel's: its start and its spans, in loops; the compiler may share reads between them)
    assert on.count(TIMER[be]) > off.count(TIMER[be])
    if case != "shape_deferred":
        assert on.count(TIMER[be]) >= off.count(TIMER[be]) + 2 * points
    assert _spin_loops(on, be) >= _spin_loops(off, be) + points
    if be == "cuda":  # the table's words: rows in use, then 4 words per row
        assert len(re.findall(r"ld\.global(?:\.\w+)*\.b64", on)) - len(re.findall(r"ld\.global(?:\.\w+)*\.b64", off)) \
            >= (1 + schema.INJECT_ROWS * schema.INJECT_ROW_WORDS)
    else:
        assert len(re.findall(r"global_load_dwordx2|s_load_dwordx2|global_load_b64", on)) > \
            len(re.findall(r"global_load_dwordx2|s_load_dwordx2|global_load_b64", off))


def test_injection_gate_arithmetic():
    g = schema.inject_gate(16)
    assert schema.injects(g) and not schema.injects(16) and g & ~schema.INJECT_GATE == 16
    assert schema.injects(schema.inject_gate(schema.ring_gate(64))) and schema.is_ring_gate(schema.inject_gate(schema.ring_gate(64)))
    for bad in (0, g):
        with pytest.raises(ValueError):
            schema.inject_gate(bad)


def test_the_notify_delay_is_before_its_release():
    """In a wait followed by a notify (sm_90), injection adds two timer spins before the notify's
    release atomic: the program's start, and the notify's own point (a held-back notify)."""
    fn, sig, consts = inject_asm.cases()["relay_immediate"]
    t = TARGETS["sm_90"]

    def spins_before_release(asm):
        lines = asm.splitlines()
        rel = next(i for i, ln in enumerate(lines) if re.search(r"\batom\.[\w.]*release", ln))
        return _spin_loops("\n".join(lines[:rel + 1]), "cuda")

    off = inject_asm.stripped(compile_asm(fn, sig, consts, t))
    on = inject_asm.stripped(compile_asm(fn, sig, {**consts, "KTRACE": schema.inject_gate(consts["KTRACE"])}, t))
    assert spins_before_release(off) >= 1  # (the wait's own spin)
    assert spins_before_release(on) == spins_before_release(off) + 2
