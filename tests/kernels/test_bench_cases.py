"""CPU tier: ``benchmarks/kernels.py``'s case selection and table, and the cases the GPU script
(``scripts/gpu_round_launch.sh``) names, which must be real case names at 4 ranks."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("triton")
_spec = importlib.util.spec_from_file_location("bench_kernels", ROOT / "benchmarks" / "kernels.py")
K = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(K)


def test_the_scripts_cases_exist_at_four_ranks():
    text = (ROOT / "scripts" / "gpu_round_launch.sh").read_text()
    named = re.search(r'BENCH_CASES=\$\{BENCH_CASES:-"([^"]+)"\}', text).group(1).split()
    kernels = re.search(r"benchmarks/kernels\.py --kernels ([a-z_ ]+) --exact", text).group(1).split()
    cases = K.discover(4, kernels)
    names = {c.name for c in cases}
    assert set(named) <= names, set(named) - names
    # every kernel compared with its torch/NCCL baseline gets a case
    assert {c.kernel for c in cases if c.name in named} == set(kernels) == {"all_to_all", "all_reduce", "gemm_all_scatter",
                                                                            "ag_gemm", "gemm_rs"}


def test_the_table_gives_ours_over_the_baseline():
    row = {"kernel": "all_reduce", "case": "one_shot_push-65536B", "us": {"ktrace": 9.0, "baseline": 18.0, "traced": 9.2},
           "p10_us": {"ktrace": 8.8}, "p90_us": {"ktrace": 9.3}, "baseline_variant": "baseline", "speedup": 2.0,
           "vs_baseline": 0.5, "vs_baseline_p10": 0.48, "vs_baseline_p90": 0.53, "traced_ratio": 1.02,
           "traced_ratio_p10": 1.0, "traced_ratio_p90": 1.04}
    failed = {"kernel": "gemm_rs", "case": "x", "error": "rank 1: MismatchError"}
    lines = K.table([row, failed], "NVIDIA H100 80GB HBM3", 4).splitlines()
    assert lines[0] == "# NVIDIA H100 80GB HBM3 x 4 ranks"
    head = [c.strip() for c in lines[2].split("|")]
    body = [c.strip() for c in lines[4].split("|")]
    assert len(head) == len(body) == len([c for c in lines[5].split("|")])
    got = dict(zip(head, body))
    assert got["ktrace/baseline (p10-p90)"] == "0.5 (0.48-0.53)" and got["baseline µs"] == "18.0"
    assert got["traced/untraced (p10-p90)"] == "1.02 (1.0-1.04)"
    assert "FAILED: rank 1: MismatchError" in lines[5]
    assert K.baseline_of({"ktrace": 1, "torch": 2}) == "torch" and K.baseline_of({"ktrace": 1}) is None
