"""CPU tier: every GEMM + communication kernel compiles for sm_90 and gfx942, traced and
untraced; untraced kernels with unbounded waits hold no timer read; traced kernels hold more
timer reads than untraced ones; the delay knob adds its spin.
"""

import re

import pytest

from tests.kernels._compile_util import TIMER, assert_probes_gated, compile_variants

P = lambda *n: {k: "*bf16" for k in n}  # noqa: E731
I = lambda *n: {k: "i32" for k in n}  # noqa: E731
BLK = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4, EVEN_K=False)


def _cases():
    from instrumented_kernels.ag_gemm import kernel as ag
    from instrumented_kernels.gemm_all_scatter import kernel as gas
    from instrumented_kernels.gemm_rs import kernel as rs

    gemm_i = I("M", "N_loc", "K", "col0", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn", "rank", "world")
    fault_i = I("epoch", "fault_delay_ns", "fault_skip")
    return {
        "all_scatter.scatter": (
            gas.scatter_kernel,
            {**P("C"), "tile_flags": "*i32", "ready": "*i32", "arrive": "*i32",
             **I("M", "N_loc", "col0", "stride_cm", "stride_cn", "rank", "world"), "heap_bases": "*i64", **fault_i},
            dict(NUM_PROGS=8, WAIT_TILES=True, BLOCK_M=64, BLOCK_N=64, GROUP_M=4),
        ),
        "all_scatter.fused_sequential": (
            gas.fused_sequential_kernel,
            {**P("A", "B", "C"), "ready": "*i32", "arrive": "*i32", **gemm_i, "heap_bases": "*i64", **fault_i},
            dict(NUM_PROGS=8, NOTIFY_PER_TILE=True, **BLK),
        ),
        "all_scatter.fused_ws": (
            gas.fused_ws_kernel,
            {**P("A", "B", "C"), "tile_flags": "*i32", "ready": "*i32", "arrive": "*i32", **gemm_i, "heap_bases": "*i64", **fault_i},
            dict(NUM_PROGS=8, GEMM_PROGS=6, **BLK),
        ),
        "ag_gemm": (
            ag.ag_gemm_kernel,
            {**P("A_loc", "A_full", "B", "C"), "chunk_flags": "*i32", "ready": "*i32",
             **I("M_loc", "N_loc", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn", "rank", "world"),
             "heap_bases": "*i64", **fault_i},
            dict(NUM_PROGS=8, GEMM_PROGS=6, COPY_K=64, **BLK),
        ),
        "gemm_rs": (
            rs.gemm_rs_kernel,
            {**P("A", "B", "P", "out"), "arrive": "*i32", "ready": "*i32",
             **I("M_loc", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_pm", "stride_pn", "stride_om",
                 "stride_on", "rank", "world"), "heap_bases": "*i64", **fault_i},
            dict(NUM_PROGS=8, **BLK),
        ),
    }


CASES = ["all_scatter.scatter", "all_scatter.fused_sequential", "all_scatter.fused_ws", "ag_gemm", "gemm_rs"]


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
@pytest.mark.parametrize("case", CASES)
def test_kernel_compiles_with_probes_gated(case, target):
    fn, sig, consts = _cases()[case]
    asm = compile_variants(fn, dict(sig, ktrace_buf="*i64"), consts, target)
    assert_probes_gated(asm, target)
    # the GEMM's tensor-core instructions survive the instrumentation
    if target == "sm_90" and case != "all_scatter.scatter":
        for v in ("off", "on"):
            assert re.search(r"wgmma|mma\.sync", asm[v]), f"{case}: no MMA instruction in the {v} variant"


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
@pytest.mark.parametrize("kernel", ["gemm", "matmul"])
def test_gemm_kernels_without_waits_hold_no_timer_when_off(kernel, target):
    """The GEMM half of bulk / producer-consumer and the plain GEMM: no wait, so untraced holds no
    timer read at all; traced holds one pair per tile span."""
    from instrumented_kernels import common_gemm as cg
    from instrumented_kernels.gemm_all_scatter import kernel as gas
    from ktrace.testing.compile import TARGETS, compile_asm

    if kernel == "gemm":
        fn = gas.gemm_kernel
        sig = {**P("A", "B", "C"), "tile_flags": "*i32", "ready": "*i32",
               **I("M", "N_loc", "K", "col0", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn",
                   "rank", "world"), "heap_bases": "*i64", **I("epoch")}
        consts = dict(NUM_PROGS=8, SIGNAL=True, **BLK)
    else:
        fn = cg.matmul_kernel
        sig = {**P("A", "B", "C"), **I("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn")}
        consts = dict(NUM_PROGS=8, **BLK)
    t = TARGETS[target]
    off = compile_asm(fn, sig, dict(consts, KTRACE=0), t, num_warps=4)
    on = compile_asm(fn, dict(sig, ktrace_buf="*i64"), dict(consts, KTRACE=16), t, num_warps=4)
    assert not TIMER[target].search(off)
    assert TIMER[target].search(on)


def test_configs_are_validated():
    from instrumented_kernels.ag_gemm.kernel import AGGemmConfig
    from instrumented_kernels.common_gemm import GemmConfig, pick_config
    from instrumented_kernels.gemm_all_scatter.kernel import AllScatterConfig
    from instrumented_kernels.gemm_rs.kernel import GemmRSConfig

    with pytest.raises(ValueError):
        GemmConfig(block_m=96)
    with pytest.raises(ValueError):
        GemmConfig(num_warps=3)
    with pytest.raises(ValueError):
        AllScatterConfig(schedule="eager")
    with pytest.raises(ValueError):
        AllScatterConfig(comm_programs=0)
    with pytest.raises(TypeError):
        AllScatterConfig(fault="skip")
    with pytest.raises(ValueError):
        AGGemmConfig(copy_k=100)
    with pytest.raises(ValueError):
        GemmRSConfig(timeout_ns=0)
    with pytest.raises(ValueError):
        pick_config(0, 1, 1, 1)


def test_pick_config_accounts_for_waves():
    """With 132 programs, 8192 x 1152 in 128x256 tiles (5 x 64 = 320 tiles, 10 % padding) costs
    3 waves; the chosen shape must not cost more waves x area than any candidate."""
    from instrumented_kernels.common_gemm import _CANDIDATES, pick_config

    import triton

    m, n, k, p = 8192, 1152, 36864, 132
    cfg = pick_config(m, n, k, p)

    def cost(bm, bn, eff):
        return triton.cdiv(triton.cdiv(m, bm) * triton.cdiv(n, bn), p) * bm * bn / eff

    chosen = next(c for c in _CANDIDATES if c[:2] == (cfg.block_m, cfg.block_n))
    assert cost(*chosen) <= min(cost(*c) for c in _CANDIDATES) + 1e-9
    assert cfg.block_k == 64 and cfg.num_warps in (4, 8)
