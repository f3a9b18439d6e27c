"""Complete communication kernels carrying ktrace probes, one folder each.

Every folder follows one contract: ``kernel.py`` (the kernel and its launcher), ``reference.py``
(``generate_input(rank, world_size, seed, **shape)``, a torch reference, ``check(...)``), its shapes
as data (``shapes.json``), ``bench.py`` (``cases(world_size)`` for ``benchmarks/kernels.py``) and a
README. What they share lives in :mod:`instrumented_kernels.harness`.

Importing this package has no side effects.
"""

#: The kernel folders ``benchmarks/kernels.py`` and the tests look in (a folder without a
#: ``bench.py`` is skipped by the benchmark).
KERNELS = ("all_to_all", "all_reduce", "gemm_all_scatter", "ag_gemm", "gemm_rs")
