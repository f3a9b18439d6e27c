"""GEMM + reduce-scatter on N GPUs: matches the float32 reference on fresh inputs, traced and
untraced, over consecutive calls; traced captures hold one span per partial tile and per
reduced tile; the fault knobs work and a skipped notify is reported, not hung on.

    python -m ktrace.testing.launch -n 4 -- python -m pytest -m multigpu tests/kernels -q
"""

import time

import pytest

from instrumented_kernels import harness as H
from tests.kernels.conftest import launch_counts

pytestmark = pytest.mark.multigpu


def _shape(i):
    from instrumented_kernels.gemm_rs.reference import SHAPES

    return SHAPES["test"][i]


def _plan(dist, shape, **kw):
    import torch

    from instrumented_kernels.common_gemm import GemmConfig
    from instrumented_kernels.gemm_rs.kernel import GemmReduceScatter, GemmRSConfig

    bm, bn, bk = shape["block"]
    gemm = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=4, num_stages=2)
    cfg = GemmRSConfig(gemm=gemm, programs=5, **kw)
    M = shape["M_per_rank"] * dist.world_size
    heap = H.heap(M * shape["N"] * 2 + (1 << 20))
    return GemmReduceScatter(heap, M, shape["N"], shape["K_per_rank"], torch.bfloat16, cfg)


def _kw(shape):
    return dict(N=shape["N"], M_per_rank=shape["M_per_rank"], K_per_rank=shape["K_per_rank"])


def _count(events, kind, name):
    from ktrace.schema import EventKind, region_id

    return int(((events["kind"] == getattr(EventKind, kind)) & (events["region"] == region_id(name))).sum())


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
@pytest.mark.parametrize("shape", range(2), ids=lambda i: f"shape{i}")
def test_matches_reference(dist, shape, traced):
    import ktrace
    from instrumented_kernels.gemm_rs.reference import check, generate_input, reference

    shape = _shape(shape)
    plan = _plan(dist, shape)
    for call in range(2):
        seed = H.fresh_seed(dist)
        inp = generate_input(dist.rank, dist.world_size, seed, **_kw(shape))
        ref = reference(dist.rank, dist.world_size, seed, **_kw(shape))
        H.poison(plan.out)
        plan.heap.barrier()
        if traced:
            with ktrace.capture() as cap:
                out = plan(inp["A"], inp["B"])
            (c,) = launch_counts(cap, cap.rank)
            assert c["TIMEOUT"] == 0 and c["dropped"] == 0
            ev = c["events"]
            assert _count(ev, "SPAN", "gemm_tile") == plan.per_block * dist.world_size
            assert _count(ev, "SPAN", "reduce") == plan.per_block
            assert _count(ev, "NOTIFY", "partial_sent") == plan.per_block * dist.world_size
            assert _count(ev, "WAIT", "partial_wait") == plan.per_block
        else:
            out = plan(inp["A"], inp["B"])
        plan.heap.check()
        check(out, ref, rank=dist.rank)
        plan.heap.barrier()


def test_delay_fault_is_applied_and_harmless(dist):
    import torch

    from instrumented_kernels.gemm_rs.reference import check, generate_input, reference

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
    assert elapsed_ns >= delay_ns, f"rank {dist.rank}: {elapsed_ns:.0f} ns < {delay_ns}"
    plan.heap.barrier()


def test_skipped_notify_times_out_and_is_reported(dist):
    """Rank 0 skips notify 0 (its first partial tile, owned by rank 1): rank 1's reduction wait
    gives up and is reported; nobody hangs; after reset() the plan works again."""
    from instrumented_kernels.gemm_rs.reference import generate_input, reference
    from tests.kernels.conftest import skipped_notify_scenario

    if dist.world_size < 2:
        pytest.skip("needs a peer")
    shape = _shape(0)
    plan = _plan(dist, shape, fault=H.Fault(skip_rank=0, skip_notify=0), timeout_ns=200_000_000)
    seed = H.fresh_seed(dist)
    inp = generate_input(dist.rank, dist.world_size, seed, **_kw(shape))
    skipped_notify_scenario(dist, plan, inp, reference(dist.rank, dist.world_size, seed, **_kw(shape)), waiter=1, flag_word="arrive", peer=None)
