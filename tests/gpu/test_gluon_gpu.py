"""GPU tier: ``ktrace.gluon`` and the Gluon GEMM on a Hopper GPU (``pytest -m gpu``).

The same checks ``instrumented_kernels/gluon_gemm/gpu_checks.py`` ran for the recorded fixtures:
every lane's events and exact drop counts with 64, 16 and 7 slots, the GEMM against torch
(untraced, traced per tile and per stage), drop counts of a small GEMM buffer.
"""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
    pytest.skip("needs a Hopper GPU", allow_module_level=True)

from instrumented_kernels.gluon_gemm import gpu_checks

pytestmark = pytest.mark.gpu


def test_probes_record_every_lane_and_count_drops_exactly(tmp_path):
    res = {}
    gpu_checks.probes(str(tmp_path), res)
    for cap, r in res["probes"].items():
        assert r["ok"] and r["end_ge_start"], (cap, r)


def test_gluon_gemm_is_correct_traced_and_not_and_drops_exactly(tmp_path):
    res = {}
    gpu_checks.gemm_checks(str(tmp_path), res, memcheck=True)
    assert all(v["ok"] for v in res["gemm"].values()), res["gemm"]
