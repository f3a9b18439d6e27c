"""The kernel folders' run specs (``instrumented_kernels/*/run.py``) and how ``ktrace run`` finds
them, on the CPU: every folder has a valid spec and a driver, discovery is the benchmark's, a
bad spec is refused, and reading the specs imports neither torch nor triton."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import instrumented_kernels
from instrumented_kernels.runspec import Driver, Param, RunSpec
from ktrace import run

ROOT = Path(__file__).resolve().parents[1]


def test_every_kernel_folder_has_a_run_spec_and_a_driver():
    specs = run.kernels()
    assert tuple(specs) == instrumented_kernels.KERNELS
    for name, spec in specs.items():
        assert spec.name == name and spec.summary and spec.params
        assert callable(spec.build)
        if inspect.isclass(spec.build):
            assert all(callable(getattr(spec.build, m, None)) for m in ("step", "check"))
        assert list(inspect.signature(spec.build).parameters) == ["dist", "params", "fault", "seed", "timeout_ns"]
        assert spec.resolve({}, 2) == spec.defaults()  # the defaults run on 2 ranks
        readme = (ROOT / "instrumented_kernels" / name / "README.md").read_text()
        assert f"ktrace run {name}" in readme, f"{name}/README.md does not say how to run it"


def test_discovery_is_the_benchmarks():
    assert [n for n, _ in instrumented_kernels.folder_modules("run")] == list(instrumented_kernels.KERNELS)
    assert [n for n, _ in instrumented_kernels.folder_modules("run", only=["gemm_rs"])] == ["gemm_rs"]
    assert instrumented_kernels.folder_modules("no_such_part") == []  # a folder without it is passed over
    src = (ROOT / "benchmarks" / "kernels.py").read_text()
    assert 'folder_modules("bench"' in src


def test_reading_the_specs_imports_neither_torch_nor_triton():
    code = ("import sys; from ktrace import run; s = run.kernels(); run.list_kernels(); "
            "run.RunConfig(kernel='all_to_all', nproc=4, shape={'skew': 0.0}); "
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


def test_kernel_specific_checks_live_in_the_folder():
    spec = run.kernels()["all_to_all"]
    with pytest.raises(ValueError, match=r"skew must be in \[0, 1\)"):
        spec.resolve({"skew": 1.0}, 2)
    with pytest.raises(ValueError, match="topk <= min"):
        spec.resolve({"topk": 40}, 2)
    # ktrace imports no kernel folder, and ktrace/run.py names none outside its docstrings
    folders = "|".join(instrumented_kernels.KERNELS)
    for path in (ROOT / "ktrace").rglob("*.py"):
        assert not re.search(rf"instrumented_kernels\.({folders})\b", path.read_text()), path
    tree = ast.parse((ROOT / "ktrace" / "run.py").read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body and isinstance(n.body[0], ast.Expr)}
    named = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and id(n) not in docstrings and re.search(rf"\b({folders})\b", n.value)]
    assert named == []


def test_a_bad_spec_is_refused(monkeypatch):
    class _Drv:
        def step(self): ...

        def check(self): ...

    with pytest.raises(ValueError, match="unknown parameters"):
        RunSpec("k", "s", (Param("n", int, 1, "h"),), build=_Drv, split=("m",))
    with pytest.raises(ValueError, match="named twice"):
        RunSpec("k", "s", (Param("n", int, 1, "h"), Param("n", int, 2, "h")), build=_Drv)
    with pytest.raises(ValueError, match="only int parameters"):
        RunSpec("k", "s", (Param("x", float, 1.0, "h"),), build=_Drv, split=("x",))
    with pytest.raises(ValueError, match="is not a int"):
        Param("n", int, 1.5, "h")
    with pytest.raises(ValueError, match="is not one of"):
        Param("m", str, "c", "h", ("a", "b"))
    assert isinstance(_Drv(), Driver) is False  # no heap / plan: not a driver
    mod = type(sys)("fake_run")
    mod.SPEC = RunSpec("other", "s", (Param("n", int, 1, "h"),), build=_Drv)
    monkeypatch.setattr(instrumented_kernels, "folder_modules", lambda part, only=None: [("all_to_all", mod)])
    run.kernels.cache_clear()
    try:
        with pytest.raises(TypeError, match="must be a RunSpec named 'all_to_all'"):
            run.kernels()
    finally:
        monkeypatch.undo()
        run.kernels.cache_clear()


def test_listing_is_built_from_the_specs():
    text = run.list_kernels()
    for spec in run.kernels().values():
        assert spec.listing() in text
        for p in spec.params:
            assert f"-s {p.name}={p.default}  {p.help}" in text
