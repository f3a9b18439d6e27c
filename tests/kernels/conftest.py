"""Fixtures of the kernel tests: the process group (multi-GPU tier) and event counting."""

import contextlib

import numpy as np
import pytest


@pytest.fixture(scope="session")
def dist():
    """This rank's ``harness.Dist``; skips outside the multi-GPU launcher or without a GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU per rank")
    from ktrace.dist_env import rank_env

    if rank_env() is None:
        pytest.skip("run under python -m ktrace.testing.launch -n N (or torchrun / srun)")
    from instrumented_kernels import harness as H

    return H.setup()


def launch_counts(cap, rank: int) -> list[dict]:
    """Per launch of ``cap`` (a closed session): {kernel, SPAN, NOTIFY, WAIT, TIMEOUT, dropped}."""
    from ktrace.schema import EventFlag, EventKind

    out = []
    for ln in cap.to_capture().ranks[rank].launches:
        d = ln.decode(rank)
        ev = d.events
        out.append(
            {
                "kernel": ln.kernel,
                "SPAN": int((ev["kind"] == EventKind.SPAN).sum()),
                "NOTIFY": int((ev["kind"] == EventKind.NOTIFY).sum()),
                "WAIT": int((ev["kind"] == EventKind.WAIT).sum()),
                "TIMEOUT": int(((ev["flags"] & int(EventFlag.TIMEOUT)) != 0).sum()),
                "dropped": d.dropped,
                "events": ev,
            }
        )
    return out


def wait_durations(ev, peer: int) -> np.ndarray:
    """Durations (ticks) of the WAIT events of ``ev`` on ``peer``."""
    from ktrace.schema import EventKind

    w = ev[(ev["kind"] == EventKind.WAIT) & (ev["arg0"] == peer)]
    return (w["end"] - w["start"]).astype(np.int64)


@pytest.fixture(autouse=True)
def _ranks_in_step(request):
    """After every multi-GPU test, passed or failed: wait for the device, forget timeouts a
    failed test left in the error blocks, and meet the other ranks at a heap barrier, so the
    next test starts in step on every rank (a rank that left a test early otherwise allocates
    while its peers are still in the old test, and the heap's rule check stops every later test)."""
    yield
    if "dist" not in request.fixturenames:
        return
    import torch

    from instrumented_kernels import harness as H

    torch.cuda.synchronize()
    for h in H._HEAPS:
        if h.buffer is not None:
            h.clear_timeouts()
    if H._HEAPS:
        H._HEAPS[-1].barrier()


class Verdicts:
    """Checks that must not make one rank leave a multi-rank test before its peers.

    ``with v.check("what"): ...`` records a failure instead of raising; the test goes on with its
    collective steps, and ``v.settle()`` (collective) fails on every rank if any rank failed,
    naming the rank.
    """

    def __init__(self, dist):
        self.dist = dist
        self.errors: list[str] = []

    @contextlib.contextmanager
    def check(self, what: str):
        try:
            yield
        except Exception as e:  # noqa: BLE001 - any failure is reported by settle()
            self.errors.append(f"rank {self.dist.rank}, {what}: {type(e).__name__}: {e}")

    def settle(self) -> None:
        import torch.distributed as tdist

        every = [None] * self.dist.world_size
        tdist.all_gather_object(every, self.errors)
        lines = [e for errs in every for e in errs]
        if lines:
            pytest.fail("\n".join(lines), pytrace=False)


def precompile(plan, call, faults) -> None:
    """Compile ``plan``'s launches with each fault of ``faults`` (``plan.config.fault``) on every
    rank without running them, then meet at a heap barrier. Collective.

    A first launch compiles on the host, and ranks compile at different speeds: without this, a
    rank can start a variant tens of ms after its peers and eat their short wait bound.
    """
    from dataclasses import replace

    from instrumented_kernels import harness as H

    for f in faults:
        with H.compile_only(plan):  # also puts plan.config and the epoch back
            plan.config = replace(plan.config, fault=f)
            call()
    plan.heap.barrier()


def skipped_notify_scenario(dist, plan, inp, expected, waiter: int, flag_word: str, peer: int | None = 0) -> None:
    """The GEMM kernels' missing-notify test, in step on every rank even when a check fails.

    ``plan`` was made with ``Fault(skip_rank=0, skip_notify=0)`` and a short bound; rank
    ``waiter`` must report a timeout mentioning ``flag_word`` (on ``peer``; None where the flag
    counts signals of every peer and the wait names none in particular), no rank may hang, and
    after ``plan.reset()`` the same plan without the fault must match ``expected``.
    """
    import time
    from dataclasses import replace

    from instrumented_kernels import harness as H
    from ktrace.shmem import WaitTimeoutError

    call = lambda: plan(inp["A"], inp["B"])  # noqa: E731
    precompile(plan, call, [plan.config.fault, H.NO_FAULT])
    v = Verdicts(dist)
    t0 = time.perf_counter()
    call()
    if dist.rank == waiter:
        with v.check("the skipped notify's wait"):
            with pytest.raises(WaitTimeoutError) as ei:
                plan.heap.check()
            if peer is not None:
                assert any(t.peer == peer for t in ei.value.timeouts), str(ei.value)
            assert flag_word in str(ei.value), str(ei.value)
    else:
        with v.check("no other timeout"):
            plan.heap.check()
    with v.check("no hang"):
        assert time.perf_counter() - t0 < 30.0
    plan.reset()
    plan.config = replace(plan.config, fault=H.NO_FAULT)
    out = call()
    with v.check("after reset()"):
        plan.heap.check()
        H.check_close("after reset()", out, expected, rank=dist.rank)
    v.settle()
