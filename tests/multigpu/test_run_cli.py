"""GPU tiers of the newcomer's path: ``ktrace run`` on every instrumented kernel, and the
numbered examples on real GPUs. These start their own ranks (one process per GPU, through
torchrun), so run them directly, not under ``ktrace.testing.launch``::

    python -m pytest -m "gpu or multigpu" tests/multigpu/test_run_cli.py -q

``KTRACE_RUN_NPROC`` sets the ranks (default: min(4, GPUs)).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _gpus() -> int:
    from ktrace.dist_env import rank_env

    if rank_env() is not None:
        pytest.skip("these tests start their own ranks (through torchrun): run them without ktrace.testing.launch")
    torch = pytest.importorskip("torch")
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _nproc(least: int = 2) -> int:
    n = min(int(os.environ.get("KTRACE_RUN_NPROC", "4")), _gpus())
    if n < least:
        pytest.skip(f"needs {least} GPUs")
    return n


def _ktrace_run(argv) -> int:
    from ktrace import run

    p = argparse.ArgumentParser(prog="ktrace")
    run.register(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["run", *argv])
    return args.func(args)


# small shapes: every kernel, traced on N GPUs, with the output checked against its reference
SMALL = {
    "all_to_all": [],
    "all_reduce": ["-s", "n=262144", "-s", "method=two_shot"],
    "gemm_all_scatter": ["-s", "M=512", "-s", "N=1024", "-s", "K=512", "-s", "schedule=fused_ws"],
    "ag_gemm": ["-s", "M=512", "-s", "N=1024", "-s", "K=512"],
    "gemm_rs": ["-s", "M=512", "-s", "N=512", "-s", "K=1024"],
    "gluon_gemm": ["-s", "M=1024", "-s", "N=1024", "-s", "K=1024"],
}


@pytest.mark.multigpu
@pytest.mark.parametrize("kernel", list(SMALL))
def test_ktrace_run_whole_path(tmp_path, capsys, kernel):
    import json

    from ktrace.clock import clock_model_of
    from ktrace.captures import read_capture

    n = _nproc()
    out = tmp_path / kernel
    assert _ktrace_run([kernel, "--nproc", str(n), "--out", str(out), *SMALL[kernel]]) == 0
    text = capsys.readouterr().out
    assert f"ktrace open {out / (kernel + '.pftrace')}" in text
    cap = read_capture(out / f"{kernel}.ktrace")
    assert sorted(cap.ranks) == list(range(n)) and not cap.partial
    model = clock_model_of(cap)
    assert model.aligned, "calibrated over the heap before and after"
    info = json.loads((out / "run.json").read_text())
    assert all(r["timeouts"] == [] and r["rel_err"] is not None and r["rel_err"] <= 1e-2 for r in info["ranks"].values()), info
    assert (out / f"{kernel}.report.html").is_file() and (out / "logs" / f"rank{n - 1}.log").is_file()
    # every completed wait pairs with the notify that released it (gemm_rs, gemm_all_scatter: counters)
    from ktrace.events import aligned_events
    from ktrace.pairing import pair_table

    assert pair_table(aligned_events(cap))[3] == 0
    # each step's launches released together by the device barrier: the ranks start within 10 µs,
    # no rank's barrier missed another, and no finding blames launch skew
    la = info["launch_alignment"]
    assert la["method"] == "device barrier" and len(la["launches"]) == info["steps"], la
    assert not any(la["missed"].values()), la
    released = [r for r in info["start_skew"] if r["released"] == "device barrier"]
    assert released and all(r["max_ns"] < 10_000 for r in released), info["start_skew"]
    assert "Start skew" in text and "released by a device barrier" in text
    rep = json.loads((out / f"{kernel}.report.json").read_text())
    assert not [f["text"] for f in rep["findings"] if f["kind"] == "late_launch"]
    # both ends of every hand-off recorded: no wait's release is left to the probe density
    assert rep["summary"]["waits_unreleased"] == 0 and not rep["summary"].get("waits_notify_untraced"), rep["summary"]


@pytest.mark.multigpu
def test_ktrace_run_skip_fault_is_a_hang(tmp_path, capsys):
    n = _nproc()
    M = 64
    out = tmp_path / "skip"
    rc = _ktrace_run(["all_to_all", "--nproc", str(n), "--out", str(out), "-s", f"max_tokens={M}", "-s", "skew=0",
                      "--skip", f"{n - 1}:{M * n}", "--steps", "1", "-v"])
    assert rc == 0
    text = capsys.readouterr().out
    assert re.search(rf"HANG: rank 0 .* from rank {n - 1}", text), text[-3000:]


@pytest.mark.multigpu
def test_ktrace_run_refuses_more_ranks_than_gpus(capsys):
    n = _gpus()
    if n == 0:
        pytest.skip("no GPU")
    # a request that is valid for n + 1 ranks (experts split over them), so the GPU count is
    # what refuses it (the request is checked first, before any GPU is looked up)
    assert _ktrace_run(["all_to_all", "--nproc", str(n + 1), "-s", f"num_experts={8 * (n + 1)}"]) == 2
    assert f"only {n}" in capsys.readouterr().err


def _example(name: str, *args: str, cwd: Path) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    opened = [cwd / p for p in re.findall(r"^\s*ktrace open (\S+)$", r.stdout, re.M)]
    assert opened and all(p.is_file() for p in opened), r.stdout[-2000:]
    return r.stdout


@pytest.mark.gpu
def test_example_01_on_one_gpu(tmp_path):
    if _gpus() < 1:
        pytest.skip("needs a GPU")
    text = _example("01_trace_a_single_gpu_kernel.py", "--out", "o", cwd=tmp_path)
    assert re.search(r"^\s+program: +\d+ spans", text, re.M) and re.search(r"^\s+block: +\d+ spans", text, re.M)


@pytest.mark.multigpu
@pytest.mark.parametrize("name, args", [
    ("02_all_to_all_stalls.py", ()),
    ("03_gemm_all_scatter_schedules.py", ("--M", "1024", "--N", "1024", "--K", "2048", "--reps", "10")),
    ("04_find_a_deadlock.py", ()),
    ("05_before_after_diff.py", ()),
])
def test_examples_on_gpus(tmp_path, name, args):
    n = _nproc()
    text = _example(name, "--nproc", str(n), "--out", "o", *args, cwd=tmp_path)
    if name.startswith("03"):
        assert all(s in text for s in ("bulk", "producer_consumer", "fused_sequential", "fused_ws"))
    if name.startswith("04"):
        assert "HANG" in text
