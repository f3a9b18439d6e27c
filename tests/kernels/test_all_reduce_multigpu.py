"""All-reduce on N GPUs: one-shot and two-shot match the float32 reference on fresh inputs,
traced and untraced; traced captures hold the expected events; the fault knobs work.

    python -m ktrace.testing.launch -n 4 -- python -m pytest -m multigpu tests/kernels -q
"""

import json
from pathlib import Path

import pytest

from instrumented_kernels import harness as H
from tests.kernels.conftest import launch_counts, wait_durations

pytestmark = pytest.mark.multigpu

SHAPES = json.loads((Path(H.__file__).parent / "all_reduce" / "shapes.json").read_text())["test"]
_PLANS = {}


def _plan(dist, **kw):
    from instrumented_kernels.all_reduce.kernel import AllReduce, AllReduceConfig

    cfg = AllReduceConfig(**kw)
    if cfg not in _PLANS:
        _PLANS[cfg] = AllReduce(H.heap(AllReduce.heap_bytes(cfg, dist.world_size)), cfg)
    return _PLANS[cfg]


def _ids(s):
    return f"{s['method']}-{s['n']}-{s.get('dtype', 'bfloat16')}"


@pytest.mark.parametrize("traced", [False, True, "full"], ids=["untraced", "traced", "traced-full"])
@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
def test_matches_reference(dist, shape, traced):
    import torch

    import ktrace
    from instrumented_kernels.all_reduce.reference import check, generate_input

    dtype = shape.get("dtype", "bfloat16")
    plan = _plan(dist, n=shape["n"], dtype=dtype, method=shape["method"], probes="full" if traced == "full" else "lean")
    seed = H.fresh_seed(dist)
    x = generate_input(dist.rank, dist.world_size, seed, shape["n"], dtype, dist.device)
    out = H.poison(torch.empty_like(x))
    if traced:
        with ktrace.capture() as cap:
            plan(x, out)
        (c,) = launch_counts(cap, cap.rank)
        exp = plan.expected_events()
        got = {k: c[k] for k in exp}
        assert got == exp, f"rank {dist.rank}: events {got}, expected {exp}"
        assert c["TIMEOUT"] == 0 and c["dropped"] == 0
    else:
        plan(x, out)
    plan.heap.check()
    check(out, dist.world_size, seed, shape["n"], dtype, rank=dist.rank)


@pytest.mark.parametrize("method", ["one_shot", "one_shot_push", "two_shot"])
def test_back_to_back_calls(dist, method):
    """Calls follow each other without host synchronisation; each reads its own inputs."""
    import torch

    from instrumented_kernels.all_reduce.reference import check, generate_input

    n = 70_001
    plan = _plan(dist, n=n, method=method)
    seeds = [H.fresh_seed(dist) for _ in range(5)]
    xs = [generate_input(dist.rank, dist.world_size, s, n, "bfloat16", dist.device) for s in seeds]
    outs = [H.poison(torch.empty_like(x)) for x in xs]
    for _ in range(3):
        for x, o in zip(xs, outs):
            plan(x, o)
    plan.heap.check()
    for s, o in zip(seeds, outs):
        check(o, dist.world_size, s, n, "bfloat16", rank=dist.rank)


def _precompile(plan, x, out, fault, traced: bool):
    """Compile the exact binary of the next launch on every rank without running it, then meet:
    a first launch compiles on the host, and a rank that compiles slower starts tens of ms late
    (at 4 ranks this ate the delay being measured, and a short wait bound)."""
    import torch.distributed as tdist

    kw = {}
    if traced:  # what a capture passes: a buffer and the default density's slots
        kw = dict(ktrace_buf=H.trace_buffer(plan.nprog, plan.slots(), x.device), ktrace_slots=plan.slots())
    with H.compile_only(plan):
        plan(x, out, fault=fault, **kw)
    tdist.barrier()


@pytest.mark.parametrize("method", ["one_shot", "one_shot_push", "two_shot"])
def test_fault_delay_shows_as_producer_lateness(dist, method):
    if dist.world_size < 2:
        pytest.skip("needs two ranks")
    import torch
    import torch.distributed as tdist

    import ktrace
    from instrumented_kernels.all_reduce.reference import check, generate_input
    from tests.kernels.conftest import Verdicts

    # 2 ms: far above what is left of the ranks' launch skew once every binary is compiled
    W, late, delay = dist.world_size, dist.world_size - 1, 2_000_000
    n = 100_000
    plan = _plan(dist, n=n, method=method)
    seed = H.fresh_seed(dist)
    x = generate_input(dist.rank, W, seed, n, "bfloat16", dist.device)
    out = H.poison(torch.empty_like(x))
    fault = H.Fault(delay_rank=late, delay_ns=delay)
    _precompile(plan, x, out, fault, traced=True)
    v = Verdicts(dist)
    with ktrace.capture() as cap:
        tdist.barrier()  # the GPUs leave the barrier together; the launch follows at once
        plan(x, out, fault=fault)
    with v.check("heap.check"):
        plan.heap.check()
    with v.check("result"):
        check(out, W, seed, n, "bfloat16", rank=dist.rank)
    (c,) = launch_counts(cap, cap.rank)
    if dist.rank != late:
        with v.check("waits"):
            tick_ns = 1e9 / cap.to_capture().ranks[cap.rank].device["tick_hz"]
            on_late = wait_durations(c["events"], late) * tick_ns
            assert on_late.size and on_late.max() >= 0.5 * delay, f"longest wait on rank {late}: {on_late.max() if on_late.size else None} ns"
            if method != "two_shot":  # (two-shot's all-gather waits inherit the lateness from the owners)
                for p in range(W):
                    if p not in (late, dist.rank):  # the waits on punctual peers are short by comparison
                        assert (wait_durations(c["events"], p) * tick_ns).max(initial=0) < on_late.max()
    v.settle()


@pytest.mark.parametrize("method", ["one_shot", "one_shot_push", "two_shot"])
def test_fault_skip_times_out_and_is_reported(dist, method):
    if dist.world_size < 2:
        pytest.skip("needs two ranks")
    import torch
    import torch.distributed as tdist

    import ktrace
    from ktrace.shmem import WaitTimeoutError
    from instrumented_kernels.all_reduce.reference import check, generate_input
    from tests.kernels.conftest import Verdicts

    W, culprit = dist.world_size, dist.world_size - 1
    n = 50_000
    plan = _plan(dist, n=n, method=method, timeout_ns=200_000_000)
    x = generate_input(dist.rank, W, 1, n, "bfloat16", dist.device)
    out = H.poison(torch.empty_like(x))
    # notify index 0 = program 0's signal to rank 0 (reduce-scatter for two-shot)
    fault = H.Fault(skip_rank=culprit, skip_notify=0)
    _precompile(plan, x, out, fault, traced=True)  # the faulty launch, traced
    _precompile(plan, x, out, H.NO_FAULT, traced=False)  # the recovery launch
    v = Verdicts(dist)
    with ktrace.capture() as cap:
        tdist.barrier()
        plan(x, out, fault=fault)
    (c,) = launch_counts(cap, cap.rank)
    if dist.rank == 0:
        with v.check("the skipped notify's wait"):
            with pytest.raises(WaitTimeoutError) as ei:
                plan.heap.check()
            assert any(t.peer == culprit and t.program == 0 for t in ei.value.timeouts), str(ei.value)
            assert f"from peer {culprit}" in str(ei.value)
            assert c["TIMEOUT"] >= 1
    else:
        # knock-on: in two-shot, rank 0 signals its all-gather only after giving up, so ranks
        # waiting on rank 0 may give up too; any timeout here must be on rank 0
        with v.check("knock-on timeouts"):
            try:
                plan.heap.check()
            except WaitTimeoutError as e:
                assert method == "two_shot" and all(t.peer == 0 for t in e.timeouts), str(e)
    tdist.barrier()
    # the next call recovers: every flag moves on to the new epoch
    seed = H.fresh_seed(dist)
    x = generate_input(dist.rank, W, seed, n, "bfloat16", dist.device)
    plan(x, out)
    with v.check("recovery call"):
        plan.heap.check()
        check(out, W, seed, n, "bfloat16", rank=dist.rank)
    v.settle()
