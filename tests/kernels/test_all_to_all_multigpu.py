"""MoE all-to-all on N GPUs: dispatch and combine match the references on fresh inputs, traced
and untraced (uniform and skewed routing); traced captures hold the expected events; the
fault knobs work.

    python -m ktrace.testing.launch -n 4 -- python -m pytest -m multigpu tests/kernels -q
"""

import json
from pathlib import Path

import pytest

from instrumented_kernels import harness as H
from tests.kernels.conftest import launch_counts, wait_durations

pytestmark = pytest.mark.multigpu

SHAPES = json.loads((Path(H.__file__).parent / "all_to_all" / "shapes.json").read_text())["test"]
_PLANS = {}


def _plan(dist, timeout_ns=5_000_000_000, **shape):
    from instrumented_kernels.all_to_all.kernel import MoEAllToAll, MoEConfig

    if shape["num_experts"] % dist.world_size:
        pytest.skip(f"{shape['num_experts']} experts do not split over {dist.world_size} ranks")
    cfg = MoEConfig(max_tokens=shape["max_tokens"], hidden=shape["hidden"], num_experts=shape["num_experts"], topk=shape["topk"], timeout_ns=timeout_ns)
    if cfg not in _PLANS:
        _PLANS[cfg] = MoEAllToAll(H.heap(MoEAllToAll.heap_bytes(cfg, dist.world_size)), cfg)
    return _PLANS[cfg]


def _inputs(dist, shape, seed):
    from instrumented_kernels.all_to_all.reference import expert_scales, generate_input

    sh = {k: v for k, v in shape.items() if k != "name"}
    inputs = [generate_input(r, dist.world_size, seed, device=dist.device, **sh) for r in range(dist.world_size)]
    scales_all = expert_scales(seed, sh["num_experts"], sh["hidden"], dist.device)
    return inputs, scales_all


def _run(plan, dist, inputs, scales_all, fault=H.NO_FAULT):
    import torch
    import torch.distributed as tdist

    inp = inputs[dist.rank]
    EL = plan.EL
    scales = scales_all[dist.rank * EL : (dist.rank + 1) * EL].contiguous()
    for t in (plan.recv_x, plan.comb_x):
        H.poison(t[(plan.epoch + 1) % 2])  # the parity the next call writes
    plan.heap.barrier()  # no peer may write into them before they are poisoned
    tdist.barrier()  # a device-side barrier last: the ranks launch within a few µs of each other
    torch.cuda.synchronize()
    out = H.poison(torch.empty_like(inp["x"]))
    plan.dispatch(inp["x"], inp["topk_idx"], inp["topk_w"], inp["m"], fault=fault)
    received = plan.received()
    plan.combine(scales, out, fault=fault)
    return received, out


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
@pytest.mark.parametrize("shape", SHAPES, ids=[s["name"] for s in SHAPES])
def test_matches_reference(dist, shape, traced):
    import ktrace
    from instrumented_kernels.all_to_all.reference import check_combine, check_dispatch, reference_dispatch

    plan = _plan(dist, **{k: v for k, v in shape.items() if k not in ("name", "skew")})
    seed = H.fresh_seed(dist)
    inputs, scales_all = _inputs(dist, shape, seed)
    if traced:
        with ktrace.capture() as cap:
            received, out = _run(plan, dist, inputs, scales_all)
        counts = launch_counts(cap, cap.rank)
        exp = plan.expected_events([i["topk_idx"] for i in inputs], [i["m"] for i in inputs])
        assert [c["kernel"] for c in counts] == ["moe_dispatch", "moe_combine"]
        for c, which in zip(counts, ("dispatch", "combine")):
            got = {k: c[k] for k in exp[which]}
            assert got == exp[which], f"rank {dist.rank} {which}: events {got}, expected {exp[which]}"
            assert c["TIMEOUT"] == 0 and c["dropped"] == 0
    else:
        received, out = _run(plan, dist, inputs, scales_all)
    plan.heap.check()
    check_dispatch(received, reference_dispatch(dist.rank, inputs, plan.EL), rank=dist.rank)
    check_combine(out, inputs[dist.rank], scales_all, rank=dist.rank)


def test_back_to_back_steps(dist):
    """Steps follow each other without host synchronisation, each with its own routing."""
    import torch

    from instrumented_kernels.all_to_all.reference import check_combine

    shape = SHAPES[0]
    plan = _plan(dist, **{k: v for k, v in shape.items() if k != "name"})
    EL = plan.EL
    runs = []
    for _ in range(4):
        inputs, scales_all = _inputs(dist, shape, H.fresh_seed(dist))
        inp = inputs[dist.rank]
        out = H.poison(torch.empty_like(inp["x"]))
        plan.dispatch(inp["x"], inp["topk_idx"], inp["topk_w"], inp["m"])
        plan.combine(scales_all[dist.rank * EL : (dist.rank + 1) * EL].contiguous(), out)
        runs.append((out, inp, scales_all))
    plan.heap.check()
    for out, inp, scales_all in runs:
        check_combine(out, inp, scales_all, rank=dist.rank)


def _precompile(plan, dist, inputs, scales_all, fault, traced: bool):
    """Compile dispatch and combine exactly as the next step launches them, on every rank,
    without running them; then meet. (A first launch compiles on the host; a rank that
    compiles slower starts tens of ms after its peers, which at 4 ranks ate the 50 ms bound.)"""
    import torch
    import torch.distributed as tdist

    inp = inputs[dist.rank]
    EL = plan.EL
    scales = scales_all[dist.rank * EL : (dist.rank + 1) * EL].contiguous()
    kd, kc = {}, {}
    if traced:  # what a capture passes: a buffer and the default density's slots
        sd, sc = plan.slots("dispatch"), plan.slots("combine")
        kd = dict(ktrace_buf=H.trace_buffer(plan.nprog, sd, dist.device), ktrace_slots=sd)
        kc = dict(ktrace_buf=H.trace_buffer(plan.nprog, sc, dist.device), ktrace_slots=sc)
    out = torch.empty_like(inp["x"])
    with H.compile_only(plan):
        plan.dispatch(inp["x"], inp["topk_idx"], inp["topk_w"], inp["m"], fault=fault, **kd)
        plan.combine(scales, out, fault=fault, **kc)
    tdist.barrier()


def test_fault_delay_shows_as_producer_lateness(dist):
    import ktrace
    from instrumented_kernels.all_to_all.reference import check_combine
    from tests.kernels.conftest import Verdicts

    if dist.world_size < 2:
        pytest.skip("needs two ranks")
    shape = SHAPES[0]
    late, delay = dist.world_size - 1, 2_000_000
    plan = _plan(dist, **{k: v for k, v in shape.items() if k != "name"})
    inputs, scales_all = _inputs(dist, shape, H.fresh_seed(dist))
    fault = H.Fault(delay_rank=late, delay_ns=delay)
    _precompile(plan, dist, inputs, scales_all, fault, traced=True)
    v = Verdicts(dist)
    with ktrace.capture() as cap:
        _, out = _run(plan, dist, inputs, scales_all, fault=fault)
    with v.check("heap.check and result"):
        plan.heap.check()
        check_combine(out, inputs[dist.rank], scales_all, rank=dist.rank)
    if dist.rank != late:
        with v.check("dispatch waits"):
            tick_ns = 1e9 / cap.to_capture().ranks[cap.rank].device["tick_hz"]
            dispatch = launch_counts(cap, cap.rank)[0]
            on_late = wait_durations(dispatch["events"], late) * tick_ns
            assert on_late.size and on_late.max() >= 0.5 * delay, f"longest dispatch wait on rank {late}: {on_late.max() if on_late.size else None} ns"
    v.settle()


def test_fault_skip_times_out_and_is_reported(dist):
    import torch.distributed as tdist

    from ktrace.shmem import WaitTimeoutError
    from instrumented_kernels.all_to_all.reference import check_combine
    from tests.kernels.conftest import Verdicts

    if dist.world_size < 2:
        pytest.skip("needs two ranks")
    shape = SHAPES[0]
    W, culprit = dist.world_size, dist.world_size - 1
    plan = _plan(dist, timeout_ns=200_000_000, **{k: v for k, v in shape.items() if k != "name"})
    inputs, scales_all = _inputs(dist, shape, H.fresh_seed(dist))
    M = shape["max_tokens"]
    # dispatch notify M * W + 0: the culprit's count message to rank 0
    fault = H.Fault(skip_rank=culprit, skip_notify=M * W)
    _precompile(plan, dist, inputs, scales_all, fault, traced=False)  # the faulty step
    _precompile(plan, dist, inputs, scales_all, H.NO_FAULT, traced=False)  # the recovery step
    v = Verdicts(dist)
    _run(plan, dist, inputs, scales_all, fault=fault)
    if dist.rank == 0:
        with v.check("the skipped notify's wait"):
            with pytest.raises(WaitTimeoutError) as ei:
                plan.heap.check()
            assert any(t.peer == culprit for t in ei.value.timeouts), str(ei.value)
            assert "a2a.count_flag" in str(ei.value) or f"from peer {culprit}" in str(ei.value)
    else:
        with v.check("knock-on timeouts"):
            try:  # knock-on timeouts are on rank 0 only (its combine rows arrive late or not at all)
                plan.heap.check()
            except WaitTimeoutError as e:
                assert all(t.peer == 0 for t in e.timeouts), str(e)
    tdist.barrier()
    inputs, scales_all = _inputs(dist, shape, H.fresh_seed(dist))
    _, out = _run(plan, dist, inputs, scales_all)
    with v.check("recovery step"):
        plan.heap.check()
        check_combine(out, inputs[dist.rank], scales_all, rank=dist.rank)
    v.settle()
