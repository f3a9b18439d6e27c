"""``--suite hook``: rows from another module's benchmark (``--hook module:function``), in this table."""

from __future__ import annotations


def rows(spec: str, dist, H, reps: int, warmup: int) -> list[dict]:
    """Rows from another module's benchmark, printed in this table: ``--hook module:function``,
    called as ``function(dist, H, reps, warmup)`` and returning rows shaped like the hand-off
    suite's (``case``, ``variant``, ``median_us``, ``p10_us``, ``p90_us``, and for traced variants
    ``ratio``, ``ratio_p10``, ``ratio_p90``, ``extra_ns_per_handoff``). For kernels written
    elsewhere, e.g. a Gluon GEMM with its own probes, timed with ``H.time_interleaved``."""
    import importlib

    mod, _, fn = spec.partition(":")
    if not fn:
        raise SystemExit(f"--hook wants module:function, got {spec!r}")
    return list(getattr(importlib.import_module(mod), fn)(dist, H, reps, warmup))
