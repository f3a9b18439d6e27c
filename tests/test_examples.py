"""The numbered examples run in their tier: here (CPU) the ones that analyse bundled captures
with ``--from-capture``, and the GPU ones refuse cleanly; ``tests/multigpu/test_run_cli.py``
runs the GPU paths. Each example ends by printing the command that shows its result."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _run(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _opened(stdout: str, cwd: Path) -> list[Path]:
    """The files the printed ``ktrace open`` commands name (they must exist)."""
    paths = [Path(m) for m in re.findall(r"^\s*ktrace open (\S+)$", stdout, re.M)]
    return [p if p.is_absolute() else cwd / p for p in paths]


def test_examples_are_numbered_and_documented():
    names = sorted(p.name for p in EXAMPLES.glob("[0-9][0-9]_*.py"))
    assert names == ["00_bring_your_own_kernel.py", "01_trace_a_single_gpu_kernel.py", "02_all_to_all_stalls.py", "03_gemm_all_scatter_schedules.py",
                     "04_find_a_deadlock.py", "05_before_after_diff.py",
                     "06_rank_captures_with_duckdb.py", "07_trace_a_gluon_kernel.py", "08_cuda_graph_replays.py"]
    for n in names:
        src = (EXAMPLES / n).read_text()
        assert src.startswith('"""' + n[:2] + " - "), n
        assert f"python examples/{n}" in src, f"{n} says how to run it"


def test_00_imports_nothing_from_ktrace_and_refuses_without_a_gpu(tmp_path):
    src = (EXAMPLES / "00_bring_your_own_kernel.py").read_text()
    assert not re.search(r"^\s*(import|from)\s+ktrace", src, re.M)
    r = _run("00_bring_your_own_kernel.py", cwd=tmp_path)
    assert r.returncode == 1 and "needs a GPU" in r.stderr and "ktrace demo byok" in r.stderr


def test_02_all_to_all_stalls_from_the_bundled_capture(tmp_path):
    r = _run("02_all_to_all_stalls.py", "--from-capture", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for title in ("Wait time per rank", "Producers, most costly first", "Outlier workgroups", "Imbalance per rank"):
        assert title in r.stdout
    opened = _opened(r.stdout, tmp_path)
    assert len(opened) == 1 and opened[0].is_file() and opened[0].suffix == ".pftrace"
    assert r.stdout.rstrip().splitlines()[-1].startswith("and the report in a browser: file://")


def test_04_find_a_deadlock_names_the_missing_notify(tmp_path):
    r = _run("04_find_a_deadlock.py", "--from-capture", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "never signalled" in r.stdout
    m = re.search(r"The report's verdict \((\d+) hang finding", r.stdout)
    assert m and int(m.group(1)) >= 1
    assert re.search(r"!! HANG: rank 0 .* from rank 3 .* rank 3 never sent it", r.stdout)
    assert all(p.is_file() for p in _opened(r.stdout, tmp_path))


def test_05_before_after_diff_from_the_bundled_pair(tmp_path):
    r = _run("05_before_after_diff.py", "--from-capture", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ktrace diff: A = " in r.stdout and "Biggest movers:" in r.stdout and "Regions, biggest movers first" in r.stdout
    assert (tmp_path / "out" / "diff.html").is_file()
    opened = _opened(r.stdout, tmp_path)
    assert [p.name for p in opened] == ["before.pftrace", "after.pftrace"] and all(p.is_file() for p in opened)
    assert re.search(r"^\s*ktrace diff \S+a2a_delay200us_4xh200.ktrace \S+a2a_delay20us_4xh200.ktrace --html ", r.stdout, re.M)


def test_06_gluon_kernel_from_the_recorded_capture(tmp_path):
    r = _run("07_trace_a_gluon_kernel.py", "--from-capture", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "lanes mma_partition, load_partition, epilogue_partition" in r.stdout
    assert "partition load_partition (lane 1) held up the other partitions" in r.stdout
    opened = _opened(r.stdout, tmp_path)
    assert len(opened) == 1 and opened[0].is_file() and opened[0].suffix == ".pftrace"


def test_05_wants_two_files_or_none(tmp_path):
    r = _run("05_before_after_diff.py", "--from-capture", "one.ktrace", cwd=tmp_path)
    assert r.returncode == 2 and "no file (the bundled pair) or two" in r.stderr


@pytest.mark.parametrize("name, args", [
    ("01_trace_a_single_gpu_kernel.py", ()),
    ("02_all_to_all_stalls.py", ("--nproc", "2")),
    ("03_gemm_all_scatter_schedules.py", ("--nproc", "2")),
    ("04_find_a_deadlock.py", ("--nproc", "2")),
    ("05_before_after_diff.py", ("--nproc", "2")),
    ("07_trace_a_gluon_kernel.py", ()),
    ("08_cuda_graph_replays.py", ()),
])
def test_gpu_paths_refuse_cleanly_without_a_gpu(tmp_path, name, args):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = _run(name, *args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "GPU" in r.stderr
    assert not any(tmp_path.iterdir()), "nothing written"
