"""GPU tier: delays the probes inject (``ktrace.inject``) happen where and as long as the table
says, without recompiling; ``ktrace.measure_cost`` and ``ktrace.verify`` run (``pytest -m gpu``)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # collected on CPU machines, skipped there
    pytest.skip("needs a GPU", allow_module_level=True)

import ktrace
from ktrace.inject import Delay, Injection
from ktrace.schema import EventKind
from tests import probe_kernels as pk

pytestmark = pytest.mark.gpu
DEV = "cuda"
N, B = 8 * 1024, 1024


def _spans(cap) -> np.ndarray:
    ev = cap.to_capture().events()
    return ev[ev["kind"] == EventKind.SPAN]


def test_a_delay_in_a_region_lengthens_that_programs_span_only():
    x = torch.randn(N, device=DEV)
    y = torch.empty_like(x)
    with ktrace.capture(inject=Injection(())) as cap:
        pk.copy_kernel[(N // B,)](x, y, N, BLOCK=B)  # (compiled: the same binary for every table)
        cap.inject = Injection((Delay(rank=0, site="copy", ns=40_000, program=3),))
        pk.copy_kernel[(N // B,)](x, y, N, BLOCK=B)
        cap.inject = Injection((Delay(rank=0, site="launch", ns=40_000),))
        pk.copy_kernel[(N // B,)](x, y, N, BLOCK=B)
    torch.testing.assert_close(y, x)
    from ktrace.schema import INJECT_GATE

    # one gate, hence one compilation, for the three tables
    assert {g for _, g in pk.copy_kernel.warm if g & INJECT_GATE} == {INJECT_GATE | 4}
    sp = _spans(cap)
    dur = (sp["end"] - sp["start"]).astype(np.int64)  # ns on NVIDIA
    l0, l1, l2 = (sp["launch"] == k for k in range(3))
    assert dur[l0].max() < 20_000
    assert 40_000 <= dur[l1 & (sp["program"] == 3)].min() < 60_000
    assert dur[l1 & (sp["program"] != 3)].max() < 20_000
    assert dur[l2].max() < 20_000  # (a delay at the start: before the span)
    assert all(m.get("inject") is not None for m in (ln.meta for ln in cap.to_capture().ranks[0].launches))


def test_measure_cost_and_verify_run():
    x = torch.randn(1 << 24, device=DEV)
    y = torch.empty_like(x)

    def step():
        pk.copy_kernel[(x.numel() // B,)](x, y, x.numel(), BLOCK=B)

    pc = ktrace.measure_cost(step, n=20)
    assert 0.9 < pc.ratio < 1.5 and pc.figures["launches_per_step"] == 1
    print(pc)
    from ktrace.analysis.verify import Plan
    from ktrace.check import verify

    small = torch.randn(64 * B, device=DEV)
    out = torch.empty_like(small)

    def one_wave():  # (64 programs: one wave on an H100/H200, so one program held holds the launch)
        pk.copy_kernel[(64,)](small, out, small.numel(), BLOCK=B)

    plan = Plan("copy", "uneven_work", "copy", "region", 0, (0,), (10_000, 20_000), (10_000.0, 20_000.0))
    rows = verify(one_wave, plan, n=10)
    for r in rows:
        print(r["text"])
    assert [r["delay_ns"] for r in rows] == [10_000, 20_000]
    assert all(abs(r["measured_ns"] - r["delay_ns"]) < 0.2 * r["delay_ns"] for r in rows)
