"""Complete communication kernels carrying ktrace probes, one folder each.

Every folder follows one contract: ``kernel.py`` (the kernel and its launcher), ``reference.py``
(``generate_input(rank, world_size, seed, **shape)``, a torch reference, ``check(...)``), its shapes
as data (``shapes.json``), ``bench.py`` (``cases(world_size)`` for ``benchmarks/kernels.py``),
``run.py`` (``SPEC``, the run spec and driver ``ktrace run`` uses; see
:mod:`instrumented_kernels.runspec`) and a README. What they share lives in
:mod:`instrumented_kernels.harness` (and, for the GEMM folders, :mod:`instrumented_kernels.common_gemm`).

Importing this package has no side effects.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: The kernel folders, in the order tools list them (``ktrace run --list``, the benchmark table).
KERNELS = ("all_to_all", "all_reduce", "gemm_all_scatter", "ag_gemm", "gemm_rs", "gluon_gemm")


def folder_modules(part: str, only: list[str] | tuple[str, ...] | None = None) -> list[tuple[str, ModuleType]]:
    """``(folder, module)`` for each kernel folder that has ``<part>.py``, in :data:`KERNELS` order.

    How the tools find what a folder offers: ``benchmarks/kernels.py`` its ``bench.py`` cases,
    ``ktrace run`` its ``run.py`` spec. A folder without the module is passed over; an import
    error inside one that has it is raised.

    Args:
        part: the module's name in the folder (``"bench"``, ``"run"``).
        only: folders to look in (default: all of :data:`KERNELS`).
    """
    out = []
    for name in KERNELS:
        if only and name not in only:
            continue
        try:
            mod = importlib.import_module(f"{__name__}.{name}.{part}")
        except ModuleNotFoundError as e:
            if e.name in (f"{__name__}.{name}", f"{__name__}.{name}.{part}"):
                continue
            raise
        out.append((name, mod))
    return out
