"""CPU tier: the MoE dispatch and combine kernels compile for sm_90 and gfx942, traced and
untraced, and their probes compile away when tracing is off; host-side validation."""

import re

import pytest

from tests.kernels._compile_util import assert_probes_gated, compile_variants

pytest.importorskip("triton")

COMMON = {"epoch": "i32", "rank": "i32", "heap_bases": "*i64", "nprog": "i32", "fault_delay_ns": "i32", "fault_skip": "i32", "M": "i32", "D": "i32", "EL": "i32"}
RECV = {"recv_x": "*bf16", "recv_tok": "*i32", "recv_eid": "*i32", "recv_w": "*fp32", "recv_count": "*i32"}
DISPATCH = {"x": "*bf16", "topk_idx": "*i32", "topk_w": "*fp32", "m": "i32", **RECV, "recv_flag": "*i32", "count_flag": "*i32", **COMMON}
COMBINE = {"topk_idx": "*i32", "m": "i32", "scales": "*fp32", "out": "*bf16", **RECV, "comb_x": "*bf16", "comb_flag": "*i32", **COMMON}
CONST = {"K": 8, "KP": 8, "WORLD": 4, "WP": 4, "BLOCK_D": 1024}


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
@pytest.mark.parametrize("which", ["dispatch", "combine"])
def test_compiles_and_probes_are_gated(which, target):
    from instrumented_kernels.all_to_all import kernel as K

    if which == "dispatch":
        asm = compile_variants(K.moe_dispatch, DISPATCH, dict(CONST, MP=256), target)
    else:
        asm = compile_variants(K.moe_combine, COMBINE, CONST, target)
    assert_probes_gated(asm, target)


def test_config_and_inputs_are_validated():
    from instrumented_kernels.all_to_all.kernel import MoEConfig
    from instrumented_kernels.all_to_all.reference import tokens_of

    with pytest.raises(ValueError):
        MoEConfig(max_tokens=0, hidden=8, num_experts=8, topk=2)
    with pytest.raises(ValueError):
        MoEConfig(max_tokens=8, hidden=8, num_experts=4, topk=5)
    with pytest.raises(ValueError):
        MoEConfig(max_tokens=8, hidden=8, num_experts=6, topk=2).check_world(4)
    assert [tokens_of(r, 4, 256, 0.5) for r in range(4)] == [256, 128, 64, 32]
    assert tokens_of(3, 4, 256) == 256
    with pytest.raises(ValueError):
        tokens_of(0, 2, 8, 1.0)


def test_fault_knob_is_validated():
    from instrumented_kernels.harness import Fault

    assert not Fault().active
    f = Fault(delay_rank=1, delay_ns=500)
    assert f.active and f.kernel_args(1) == (500, -1) and f.kernel_args(0) == (0, -1)
    g = Fault(skip_rank=0, skip_notify=3)
    assert g.kernel_args(0) == (0, 3) and g.kernel_args(1) == (0, -1)
    for bad in (dict(delay_rank=1), dict(delay_ns=5), dict(skip_rank=0), dict(skip_notify=2), dict(delay_rank=-2, delay_ns=1), dict(delay_rank=True, delay_ns=1)):
        with pytest.raises((ValueError, TypeError)):
            Fault(**bad)
    with pytest.raises(ValueError):
        Fault(skip_rank=4, skip_notify=0).check_world(4)


def _gather_loads_ahead(maxnreg) -> tuple[int, int]:
    """(loads of the combine's expert loop, how many of them precede its first FMUL/FFMA) in the
    SASS of the untraced combine for sm_90 at 2 ranks, as a launch specialises it (pointers and
    the row sizes 16-divisible)."""
    from instrumented_kernels.all_to_all import kernel as K
    from tests.test_compile import _sass

    C = dict(CONST, WORLD=2, WP=2, FAULTS=False, TIMEOUT_NS=10**8, KTRACE=0)
    names = list(COMBINE) + list(C)
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a, t in COMBINE.items() if t.startswith("*") or a in ("M", "D", "EL")}
    lines = _sass(K.moe_combine, COMBINE, C, attrs, num_warps=8, **({"maxnreg": maxnreg} if maxnreg else {})).splitlines()
    ins, labels, loops = [], {}, []
    for ln in lines:
        if m := re.match(r"\s*(\.L_x_\d+):", ln):
            labels[m.group(1)] = len(ins)
        elif m := re.search(r"/\*[0-9a-f]{4}\*/\s+(.*?)\s*;", ln):
            ins.append(m.group(1))
            b = re.search(r"BRA `\((\.L_x_\d+)\)", ins[-1])
            if b and b.group(1) in labels:  # a backward branch: a loop from its label to here
                body = ins[labels[b.group(1)]:]
                if sum("LDG" in t for t in body) >= CONST["K"] + 1 and any(t.startswith(("FMUL", "FFMA")) for t in body):
                    loops.append(body)
    body = min(loops, key=len)  # the innermost: one BLOCK_D step of an expert row
    first = next(j for j, t in enumerate(body) if t.startswith(("FMUL", "FFMA")))
    return sum("LDG" in t for t in body), sum("LDG" in t for t in body[:first])


def test_combine_issues_its_gather_at_once():
    """With the register bound the plan launches with, ptxas issues every load of an expert-row
    step (K scale rows and the row) before the first multiply: one memory latency per step.
    Without it (Triton 3.6's ptxas) fewer: the bound is what gives the untraced combine that
    schedule (`COMBINE_MAXNREG`)."""
    from instrumented_kernels.all_to_all.kernel import COMBINE_MAXNREG

    n, ahead = _gather_loads_ahead(COMBINE_MAXNREG)
    assert n == CONST["K"] + 1 and ahead == n, (n, ahead)
    n0, ahead0 = _gather_loads_ahead(None)
    assert n0 == n and ahead0 < n, (n0, ahead0)
