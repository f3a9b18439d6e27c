"""All-gather + GEMM on N GPUs: matches the float32 reference on fresh inputs, traced and
untraced, over consecutive calls; traced captures hold one span per tile and per pushed chunk;
the fault knobs work and a skipped notify is reported, not hung on.

    python -m ktrace.testing.launch -n 4 -- python -m pytest -m multigpu tests/kernels -q
"""

import time

import pytest

from instrumented_kernels import harness as H
from tests.kernels.conftest import launch_counts

pytestmark = pytest.mark.multigpu


def _shape(i):
    from instrumented_kernels.ag_gemm.reference import SHAPES

    return SHAPES["test"][i]


def _plan(dist, shape, **kw):
    import torch

    from instrumented_kernels.ag_gemm.kernel import AGGemmConfig, AllGatherGemm
    from instrumented_kernels.common_gemm import GemmConfig

    bm, bn, bk = shape["block"]
    gemm = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=4, num_stages=2)
    cfg = AGGemmConfig(gemm=gemm, comm_programs=2, gemm_programs=5, copy_k=64, **kw)
    M = shape["M_per_rank"] * dist.world_size
    heap = H.heap(M * shape["K"] * 2 + (1 << 20))
    return AllGatherGemm(heap, M, shape["N_per_rank"], shape["K"], torch.bfloat16, cfg)


def _kw(shape):
    return dict(K=shape["K"], M_per_rank=shape["M_per_rank"], N_per_rank=shape["N_per_rank"])


def _count(events, kind, name):
    from ktrace.schema import EventKind, region_id

    return int(((events["kind"] == getattr(EventKind, kind)) & (events["region"] == region_id(name))).sum())


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
@pytest.mark.parametrize("shape", range(2), ids=lambda i: f"shape{i}")
def test_matches_reference(dist, shape, traced):
    import ktrace
    from instrumented_kernels.ag_gemm.reference import check, generate_input, reference

    shape = _shape(shape)
    plan = _plan(dist, shape)
    for call in range(2):
        seed = H.fresh_seed(dist)
        inp = generate_input(dist.rank, dist.world_size, seed, **_kw(shape))
        ref = reference(dist.rank, dist.world_size, seed, **_kw(shape))
        H.poison(plan.C)
        H.poison(plan.A_full)
        plan.heap.barrier()
        if traced:
            with ktrace.capture() as cap:
                out = plan(inp["A"], inp["B"])
            (c,) = launch_counts(cap, cap.rank)
            assert c["TIMEOUT"] == 0 and c["dropped"] == 0
            ev = c["events"]
            assert _count(ev, "SPAN", "gemm_tile") == plan.n_tiles
            w = dist.world_size
            assert _count(ev, "SPAN", "push") == plan.n_chunks * (w - 1)
            assert _count(ev, "NOTIFY", "chunk_ready") == plan.n_chunks * (w - 1)
            # one wait per remote tile: tiles of the peers' rows
            assert _count(ev, "WAIT", "chunk_wait") == plan.n_tiles * (w - 1) // w
        else:
            out = plan(inp["A"], inp["B"])
        plan.heap.check()
        check(out, ref, rank=dist.rank)
        plan.heap.barrier()


def test_delay_fault_is_applied_and_harmless(dist):
    import torch

    from instrumented_kernels.ag_gemm.reference import check, generate_input, reference

    delay_ns = 2_000_000
    shape = _shape(0)
    plan = _plan(dist, shape, fault=H.Fault(delay_rank=0, delay_ns=delay_ns))
    seed = H.fresh_seed(dist)
    inp = generate_input(dist.rank, dist.world_size, seed, **_kw(shape))
    plan.heap.barrier()
    t0 = time.perf_counter()
    out = plan(inp["A"], inp["B"])
    torch.cuda.synchronize()
    elapsed_ns = (time.perf_counter() - t0) * 1e9
    plan.heap.check()
    check(out, reference(dist.rank, dist.world_size, seed, **_kw(shape)), rank=dist.rank)
    if dist.world_size > 1 and dist.rank != 0:
        assert elapsed_ns >= delay_ns, f"rank {dist.rank}: {elapsed_ns:.0f} ns < {delay_ns}"
    plan.heap.barrier()


def test_skipped_notify_times_out_and_is_reported(dist):
    """Rank 0 skips notify 0 (chunk 0 to rank 1): rank 1's chunk wait gives up and is reported."""
    from instrumented_kernels.ag_gemm.reference import generate_input, reference
    from tests.kernels.conftest import skipped_notify_scenario

    if dist.world_size < 2:
        pytest.skip("needs a peer")
    shape = _shape(0)
    plan = _plan(dist, shape, fault=H.Fault(skip_rank=0, skip_notify=0), timeout_ns=200_000_000)
    seed = H.fresh_seed(dist)
    inp = generate_input(dist.rank, dist.world_size, seed, **_kw(shape))
    skipped_notify_scenario(dist, plan, inp, reference(dist.rank, dist.world_size, seed, **_kw(shape)), waiter=1, flag_word="chunk")
