"""GEMM + all-scatter on N GPUs: every schedule matches the float32 reference on fresh inputs,
traced and untraced, over consecutive calls; traced captures hold one span per tile and no
timeout; the fault knobs delay or break exactly what they say, and a skipped notify ends in a
reported timeout instead of a hang.

    python -m ktrace.testing.launch -n 4 -- python -m pytest -m multigpu tests/kernels -q
"""

import time

import numpy as np
import pytest

from instrumented_kernels import harness as H
from tests.kernels.conftest import launch_counts

pytestmark = pytest.mark.multigpu


def _shapes():
    from instrumented_kernels.gemm_all_scatter.reference import SHAPES

    return SHAPES["test"]


def _plan(dist, shape, schedule, **kw):
    import torch

    from instrumented_kernels.common_gemm import GemmConfig
    from instrumented_kernels.gemm_all_scatter.kernel import AllScatterConfig, GemmAllScatter

    bm, bn, bk = shape["block"]
    gemm = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=4, num_stages=2)
    # Few programs, so every program handles several tiles (the persistent loops run).
    cfg = AllScatterConfig(schedule=schedule, gemm=gemm, comm_programs=3, gemm_programs=5, scatter_programs=4, **kw)
    M, K = shape["M"], shape["K"]
    N = shape["N_per_rank"] * dist.world_size
    heap = H.heap(M * N * 2 + (1 << 20))
    return GemmAllScatter(heap, M, N, K, torch.bfloat16, cfg)


def _span_count(events, name):
    from ktrace.schema import EventKind, region_id

    return int(((events["kind"] == EventKind.SPAN) & (events["region"] == region_id(name))).sum())


SCHEDULES = ("bulk", "producer_consumer", "fused_sequential", "fused_ws")


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
@pytest.mark.parametrize("shape", range(2), ids=lambda i: f"shape{i}")
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_matches_reference(dist, schedule, shape, traced):
    import ktrace
    from instrumented_kernels.gemm_all_scatter.reference import check, generate_input, reference

    shape = _shapes()[shape]
    plan = _plan(dist, shape, schedule, notify_per_tile=traced)
    for call in range(2):  # two calls: the epochs advance, flags are never reset
        seed = H.fresh_seed(dist)
        kw = dict(M=shape["M"], K=shape["K"], N_per_rank=shape["N_per_rank"])
        inp = generate_input(dist.rank, dist.world_size, seed, **kw)
        ref = reference(dist.rank, dist.world_size, seed, **kw)
        H.poison(plan.C)
        plan.heap.barrier()  # no peer writes into C before it is poisoned
        if traced:
            with ktrace.capture() as cap:
                out = plan(inp["A"], inp["B"])
            counts = launch_counts(cap, cap.rank)
            assert all(c["TIMEOUT"] == 0 and c["dropped"] == 0 for c in counts), counts
            tiles = sum(_span_count(c["events"], "gemm_tile") for c in counts)
            scatters = sum(_span_count(c["events"], "scatter") for c in counts)
            assert tiles == plan.n_tiles, f"rank {dist.rank}: {tiles} gemm_tile spans for {plan.n_tiles} tiles"
            assert scatters == plan.n_tiles, f"rank {dist.rank}: {scatters} scatter spans for {plan.n_tiles} tiles"
            notifies = sum(c["NOTIFY"] for c in counts)
            assert notifies >= plan.n_tiles * (dist.world_size - 1)
        else:
            out = plan(inp["A"], inp["B"])
        plan.heap.check()
        check(out, ref, rank=dist.rank)
        plan.heap.barrier()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_delay_fault_is_applied_and_harmless(dist, schedule):
    """Rank 0 spins before each of its notifies: results stay right, rank 0's call takes longer."""
    import torch

    from instrumented_kernels.gemm_all_scatter.reference import check, generate_input, reference

    delay_ns = 2_000_000
    shape = _shapes()[0]
    plan = _plan(dist, shape, schedule, fault=H.Fault(delay_rank=0, delay_ns=delay_ns))
    seed = H.fresh_seed(dist)
    kw = dict(M=shape["M"], K=shape["K"], N_per_rank=shape["N_per_rank"])
    inp = generate_input(dist.rank, dist.world_size, seed, **kw)
    H.poison(plan.C)
    plan.heap.barrier()
    t0 = time.perf_counter()
    out = plan(inp["A"], inp["B"])
    torch.cuda.synchronize()
    elapsed_ns = (time.perf_counter() - t0) * 1e9
    plan.heap.check()
    check(out, reference(dist.rank, dist.world_size, seed, **kw), rank=dist.rank)
    if dist.world_size > 1:
        # every rank waits for rank 0's delayed notifies, so every call lasts at least one delay
        assert elapsed_ns >= delay_ns, f"rank {dist.rank}: call took {elapsed_ns:.0f} ns < delay {delay_ns}"
    plan.heap.barrier()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_skipped_notify_times_out_and_is_reported(dist, schedule):
    """Rank 0 skips notify 0 (to rank 1): rank 1's arrival wait gives up at its bound and the heap
    reports it; no rank hangs; after reset() the plan works again."""
    from instrumented_kernels.gemm_all_scatter.reference import generate_input, reference
    from tests.kernels.conftest import skipped_notify_scenario

    if dist.world_size < 2:
        pytest.skip("needs a peer")
    shape = _shapes()[0]
    plan = _plan(dist, shape, schedule, fault=H.Fault(skip_rank=0, skip_notify=0), timeout_ns=200_000_000)
    seed = H.fresh_seed(dist)
    kw = dict(M=shape["M"], K=shape["K"], N_per_rank=shape["N_per_rank"])
    inp = generate_input(dist.rank, dist.world_size, seed, **kw)
    skipped_notify_scenario(dist, plan, inp, reference(dist.rank, dist.world_size, seed, **kw), waiter=1, flag_word="arrive")


def test_bulk_gemm_only_keeps_epochs_in_step(dist):
    """gemm_only() between calls does not disturb the arrival counters of later calls."""
    from instrumented_kernels.gemm_all_scatter.reference import check, generate_input, reference

    shape = _shapes()[1]
    plan = _plan(dist, shape, "bulk")
    seed = H.fresh_seed(dist)
    kw = dict(M=shape["M"], K=shape["K"], N_per_rank=shape["N_per_rank"])
    inp = generate_input(dist.rank, dist.world_size, seed, **kw)
    plan(inp["A"], inp["B"])
    plan.gemm_only(inp["A"], inp["B"])
    out = plan(inp["A"], inp["B"])
    plan.heap.check()
    check(out, reference(dist.rank, dist.world_size, seed, **kw), rank=dist.rank)
    plan.heap.barrier()


def test_plain_matmul_matches_torch(dist):
    """The shared tile GEMM alone (no communication) against torch in float32."""
    import torch

    from instrumented_kernels.common_gemm import GemmConfig, matmul

    g = torch.Generator(device=dist.device).manual_seed(1234 + dist.rank)
    a = torch.randn(300, 200, device=dist.device, generator=g).bfloat16()
    b = torch.randn(200, 136, device=dist.device, generator=g).bfloat16()
    out = matmul(a, b, config=GemmConfig(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=2), programs=3)
    H.check_close("matmul", out, a.float() @ b.float(), rank=dist.rank)
    assert np.isfinite(out.float().cpu().numpy()).all()
