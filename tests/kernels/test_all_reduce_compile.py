"""CPU tier: the all-reduce kernels compile for sm_90 and gfx942, traced and untraced, and their
probes compile away when tracing is off."""

import pytest

from tests.kernels._compile_util import assert_probes_gated, compile_variants

pytest.importorskip("triton")

COMMON = {"n": "i32", "epoch": "i32", "rank": "i32", "heap_bases": "*i64", "nprog": "i32", "fault_delay_ns": "i32", "fault_skip": "i32"}
ONE = {"inp": "*bf16", "out": "*bf16", "stage": "*bf16", "flags": "*i32", **COMMON}
PUSH = {"inp": "*bf16", "out": "*bf16", "inbox": "*bf16", "flags": "*i32", **COMMON}
TWO = {"inp": "*bf16", "out": "*bf16", "gather": "*bf16", "result": "*bf16", "flags_rs": "*i32", "flags_ag": "*i32", **COMMON}


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
@pytest.mark.parametrize("method", ["one_shot", "one_shot_push", "two_shot"])
def test_compiles_and_probes_are_gated(method, target):
    from instrumented_kernels.all_reduce import kernel as K

    fn, sig = {"one_shot": (K.all_reduce_one_shot, ONE), "one_shot_push": (K.all_reduce_one_shot_push, PUSH),
               "two_shot": (K.all_reduce_two_shot, TWO)}[method]
    asm = compile_variants(fn, sig, {"WORLD": 4, "BLOCK": 2048}, target)
    assert_probes_gated(asm, target)


def test_config_is_validated():
    from instrumented_kernels.all_reduce.kernel import AllReduceConfig, pick_block

    with pytest.raises(ValueError):
        AllReduceConfig(n=0)
    with pytest.raises(ValueError):
        AllReduceConfig(n=10, method="three_shot")
    with pytest.raises(ValueError):
        AllReduceConfig(n=10, block=1000)
    assert pick_block(1, 132) == 512 and pick_block(1 << 26, 132) == 8192
    assert pick_block(1 << 19, 132) == 4096
    assert pick_block(1 << 15, 132, "one_shot_push") == 1024 and pick_block(1 << 17, 132, "one_shot_push") == 8192
