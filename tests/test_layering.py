"""The floors of ktrace (``docs/architecture.md``): no import runs up a floor, and none runs in a circle.

Every ``import`` and ``from ... import`` in ``ktrace/``, ``viewers/`` and ``instrumented_kernels/``
is read from the source (module level and inside functions alike) and resolved to the module of
those folders it names. Each module sits on the floor of the longest prefix of its name in
:data:`FLOORS`; an import may only name a module on its own floor or a lower one, and the graph
of all imports has no cycle. ``instrumented_kernels/`` uses only ktrace's public API
(:data:`KERNELS_MAY_IMPORT`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Floors, lowest first: each entry is a module or package name (a package covers its modules,
#: unless one of them is named on its own). Kept in step with docs/architecture.md.
FLOORS: list[tuple[str, ...]] = [
    ("ktrace", "ktrace._lazy", "ktrace._memory", "ktrace.fileio", "ktrace.links", "ktrace.schema", "ktrace.text", "ktrace.probe_cost"),  # layouts, names, words, safe files, Perfetto UI links, the probes' cost in words
    ("ktrace.device", "ktrace.dist_env", "ktrace.keys"),  # device and rank facts; sorting and grouping machinery
    ("ktrace.regions", "ktrace.decode", "ktrace.pairing", "ktrace.flight.ring", "ktrace.flight.stream",
     "ktrace.graphs.ring", "ktrace.graphs.inductor", "ktrace.auto.transform", "ktrace.auto.declarations",
     "ktrace.auto.known", "ktrace.auto.addresses", "ktrace.auto.config", "ktrace.inject"),  # region names, raw buffer -> columns, notify -> wait; ring buffers -> dense; replay rings -> launch buffers; a kernel's source with probes, sync declarations, addresses -> locations
    ("ktrace.language", "ktrace.gluon", "ktrace.testing", "ktrace.testing.compile", "ktrace.auto.probes",
     "ktrace.auto.prepare", "ktrace.auto.hooks"),  # device probes (triton, gluon); kernels prepared without edits, the launch hook
    ("ktrace.captures",),  # capture files, synthetic captures, gathering ranks
    ("ktrace.clock", "ktrace.clock.hostclock"),  # calibration samples -> per-rank maps; the causality check; host clocks (stdlib)
    ("ktrace.events",),  # the one decode: a capture's events as aligned columns
    ("ktrace.shmem", "ktrace.shmem.align"),  # the symmetric heap and its traced device API; the launch barrier
    ("ktrace.clock.calibrate",),  # the ping-pong that measures the clocks (over the heap)
    ("ktrace.traced", "ktrace.session", "ktrace.decorator", "ktrace.flight", "ktrace.graphs", "ktrace.auto", "ktrace.auto.launch",
     "ktrace.auto.boot", "ktrace.auto._site", "ktrace.cost"),  # the traced launch, capture sessions, the decorator; the flight recorder; CUDA graph replays; kernels traced without edits, launched; ktrace record's side in the program
    ("ktrace.export", "ktrace.analysis"),  # traces for Perfetto; the analyses and the report
    ("viewers",),  # the HTML report, serving traces to the Perfetto UI
    # the command line; the test harnesses of the real consumers (Perfetto's trace processor and UI)
    ("ktrace.cli", "ktrace.demo", "ktrace.run", "ktrace.check", "ktrace.record", "ktrace.dump", "ktrace.launch", "ktrace.testing.launch",
     "ktrace.testing.perfetto",
     "instrumented_kernels"),  # (and the instrumented kernels, which the command line discovers and runs)
]


def _floor_of(module: str) -> int | None:
    best, floor = -1, None
    for i, names in enumerate(FLOORS):
        for n in names:
            if (module == n or module.startswith(n + ".")) and len(n) > best:
                best, floor = len(n), i
    return floor


def _shipped() -> list[str]:
    """The top-level packages that ship: ``pyproject.toml``'s ``[tool.setuptools.packages.find]``
    ``include`` patterns (``ktrace*`` -> ``ktrace``)."""
    import re

    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("[tool.setuptools.packages.find]", 1)[1].split("\n[", 1)[0]
    include = re.search(r"include\s*=\s*\[([^\]]*)\]", block).group(1)
    return sorted({re.split(r"[*.]", p)[0] for p in re.findall(r'"([^"]+)"', include)})


#: The folders that ship, every module of which this test reads.
SHIPPED = _shipped()


def _modules() -> dict[str, Path]:
    out = {}
    for top in SHIPPED:
        for p in sorted((ROOT / top).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(module: str, path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every ktrace/viewers/instrumented_kernels module that ``module`` imports, anywhere in it."""
    is_pkg = path.name == "__init__.py"
    pkg = module if is_pkg else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from package import module`` names a module; ``from module import name`` the module
            names = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        for n in names:
            while n and n not in MODULES:
                n = n.rpartition(".")[0]
            if n and n != module:
                found.append((node.lineno, n))
    return found


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_every_module_has_a_floor():
    assert [m for m in MODULES if _floor_of(m) is None] == []


def test_every_shipped_folder_is_read():
    """The modules read are those of every package that ships (and its Python files all): a new
    shipped folder is read without a change here."""
    assert {"instrumented_kernels", "ktrace", "viewers"} <= set(SHIPPED)
    for top in SHIPPED:
        files = sorted((ROOT / top).rglob("*.py"))
        assert files and all(p in MODULES.values() for p in files), top


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_up_a_floor(module):
    mine = _floor_of(module)
    up = [f"{MODULES[module].relative_to(ROOT)}:{line} imports {target} (floor {_floor_of(target)} > {mine})"
          for line, target in GRAPH[module] if _floor_of(target) > mine]
    assert not up, "\n".join(up)


def _find_cycle(edges: dict) -> list[str] | None:
    """A circle of the import graph ``edges`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                got = visit(t)
                if got:
                    return got
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state:
            cycle = visit(m)
            if cycle:
                return cycle
    return None


def test_no_import_circle():
    # a package's __init__ re-exporting its modules is not a circle with them
    edges = {m: {t for _, t in GRAPH[m] if not (m.startswith(t + ".") and MODULES[t].name == "__init__.py")} for m in MODULES}
    cycle = _find_cycle(edges)
    assert cycle is None, " -> ".join(cycle)


def test_the_floors_test_can_fail(tmp_path):
    # the import reader sees a function-level relative import that runs up a floor
    probe = tmp_path / "probe.py"
    probe.write_text("import numpy\n\n\ndef f():\n    from ..export import write_trace\n")
    got = _imports("ktrace.clock.probe", probe)
    assert got == [(5, "ktrace.export")] and _floor_of("ktrace.export") > _floor_of("ktrace.clock.probe")


#: What ``viewers`` may import of ``ktrace.analysis``: the report's types and document, nothing
#: that reaches the trace or the causal model.
VIEWERS_MAY_IMPORT = {"ktrace.analysis.document"}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m == "viewers" or m.startswith("viewers.")))
def test_viewers_render_from_the_report_document_alone(module):
    bad = [(line, m) for line, m in _imports(module, MODULES[module])
           if (m == "ktrace.analysis" or m.startswith("ktrace.analysis.")) and m not in VIEWERS_MAY_IMPORT]
    assert not bad, f"{module} imports {bad}: renderers read the report's document only"


def test_the_viewers_rule_can_fail(tmp_path):
    bad = tmp_path / "v.py"
    bad.write_text("from ktrace.analysis.causes import launch_makespans\nfrom ktrace.analysis import document\n")
    found = [m for _, m in _imports("viewers.v", bad)]
    assert "ktrace.analysis.causes" in found and "ktrace.analysis.document" in found


#: What ``instrumented_kernels/`` may import of ktrace: its public API. The host API (``ktrace``:
#: ``trace``, ``capture``, ``decode_buffer``, ...), the device API for both DSLs and the heap, and
#: the buffer layout (``schema``: a harness that sizes buffers of its own follows it).
KERNELS_MAY_IMPORT = {"ktrace", "ktrace.language", "ktrace.gluon", "ktrace.shmem", "ktrace.shmem.language", "ktrace.shmem.gluon",
                      "ktrace.schema"}


def _private_imports(module: str, path: Path) -> list[tuple[int, str]]:
    return [(line, m) for line, m in _imports(module, path)
            if (m == "ktrace" or m.startswith("ktrace.")) and m not in KERNELS_MAY_IMPORT]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[0] == "instrumented_kernels"))
def test_instrumented_kernels_use_only_the_public_api(module):
    bad = _private_imports(module, MODULES[module])
    assert not bad, f"{module} imports {bad}: instrumented kernels use only {sorted(KERNELS_MAY_IMPORT)}"


def test_the_public_api_rule_can_fail(tmp_path):
    bad = tmp_path / "k.py"
    bad.write_text("import ktrace\nimport ktrace.language as kl\n\n\ndef f():\n    from ktrace.pairing import pair_table\n"
                   "    from ktrace.shmem import SymmetricHeap\n")
    assert _private_imports("instrumented_kernels.x.k", bad) == [(6, "ktrace.pairing")]
    assert "instrumented_kernels.harness" in MODULES and _floor_of("instrumented_kernels.harness") == len(FLOORS) - 1


def test_the_circle_check_can_fail():
    """The cycle finder of :func:`test_no_import_circle` finds a circle made of two real modules."""
    edges = {m: {t for _, t in GRAPH[m]} for m in MODULES}
    edges["ktrace.schema"] = edges["ktrace.schema"] | {"ktrace.session"}  # (session reaches schema)
    assert _find_cycle(edges) is not None
    assert _find_cycle({m: {t for _, t in GRAPH[m] if not (m.startswith(t + ".") and MODULES[t].name == "__init__.py")}
                        for m in MODULES}) is None


def _private_names(module: str, path: Path) -> list[tuple[int, str]]:
    """``(line, module.name)`` of every private name (``_x``, not a module) that ``module`` imports
    from another module of the shipped folders."""
    is_pkg = path.name == "__init__.py"
    pkg = module if is_pkg else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = pkg.split(".")
            mod = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        if mod.split(".")[0] not in SHIPPED:
            continue
        for a in node.names:
            if a.name.startswith("_") and not a.name.startswith("__") and f"{mod}.{a.name}" not in MODULES:
                found.append((node.lineno, f"{mod}.{a.name}"))
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_is_imported_across_modules(module):
    """A name with a leading underscore is its module's own: another module that needs it asks for
    a public one (private modules, ``ktrace._lazy``, are modules and may be imported)."""
    bad = _private_names(module, MODULES[module])
    assert not bad, f"{MODULES[module].relative_to(ROOT)} imports private names: {bad}"


def test_the_private_name_rule_can_fail(tmp_path):
    bad = tmp_path / "p.py"
    bad.write_text("from .stalls import waits, _holds\nfrom .. import _lazy\n\n\ndef f():\n    from ktrace.decode import _x\n")
    assert _private_names("ktrace.analysis.p", bad) == [(1, "ktrace.analysis.stalls._holds"), (6, "ktrace.decode._x")]
