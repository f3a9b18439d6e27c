"""The analysis install: reading, merging (with a profiler's trace too), exporting, reporting and the
demo run with torch and triton unimportable (``pip install ktrace`` installs neither: they are the
``gpu`` extra); the package's own metadata says so; CI runs the README's test command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ktrace

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(ktrace.__file__).parent / "data"
PROFILE = ROOT / "tests" / "fixtures" / "profile"

#: Runs ``ktrace.cli.main(argv)`` with torch and triton unimportable; fails if either got imported.
_BLOCKED = """
import sys, importlib.abc
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'triton'):
            raise ImportError(f'{name} is blocked: the analysis path must not import it')
sys.meta_path.insert(0, _Block())
from ktrace.cli import main
rc = main(sys.argv[1:])
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton'))
assert not bad, bad
sys.exit(rc)
"""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", _BLOCKED, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args", [
    ["demo", "--out", "demo"],
    ["info", str(DATA / "a2a_skip_4xh200.ktrace")],
    ["report", str(DATA / "a2a_skewed_4xh200.ktrace"), "-q", "--json", "r.json"],
    ["merge", str(PROFILE / "step.ktrace"), "-o", "step.pftrace", "--with-profile"],
    ["export", str(DATA / "a2a_skewed_4xh200.ktrace"), "--format", "parquet", "tables"],
], ids=lambda a: a[0])
def test_analysis_path_without_torch_or_triton(tmp_path, args):
    p = _run(args, tmp_path)
    assert p.returncode == 0, (p.stdout[-1000:], p.stderr[-2000:])


def test_base_install_needs_neither_torch_nor_triton():
    tomllib = pytest.importorskip("tomllib")  # (Python 3.11+)
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = [re.split(r"[<>=!~ \[]", d)[0].lower() for d in meta["dependencies"]]
    assert "torch" not in base and "triton" not in base
    gpu = [re.split(r"[<>=!~ \[]", d)[0].lower() for d in meta["optional-dependencies"]["gpu"]]
    assert sorted(gpu) == ["torch", "triton"]
    assert "ktrace[gpu,parquet]" in meta["optional-dependencies"]["dev"]


def test_ci_runs_the_readme_commands():
    """README's two set-up-and-test lines; .ci/run installs the pinned CPU torch and triton first,
    then the README's install of ktrace, then exactly the README's test command."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Set up\n\n```bash\n(.*?)```", readme, re.S).group(1).strip().splitlines()
    install, test = block[0], block[1]
    assert "--index-url https://download.pytorch.org/whl/cpu" in install and "torch==2.13.0" in install
    assert '-e ".[dev]"' in install and "triton==3.6.0" in install
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip().startswith("python3 ")]
    assert ci[0].startswith("python3 -m pip install") and "torch==2.13.0" in ci[0] and "triton==3.6.0" in ci[0]
    assert ci[1] == 'python3 -m pip install -q -e ".[dev]"'
    assert ci[2] == test
