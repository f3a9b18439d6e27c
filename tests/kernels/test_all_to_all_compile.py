"""CPU tier: the MoE dispatch and combine kernels compile for sm_90 and gfx942, traced and
untraced, and their probes compile away when tracing is off; host-side validation."""

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
