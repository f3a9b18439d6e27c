"""Tracing kernels that were not written for ktrace, without edits (docs/byok.md).

- ``ktrace.capture(auto=True)`` (or a name pattern, or :class:`AutoConfig`): every matching
  ``@triton.jit`` kernel launched while the capture is open runs as a traced copy of itself
  (:mod:`ktrace.auto.prepare`): a span per program and per iteration of its top-level loops,
  every spin on memory a WAIT, every signalling atomic a NOTIFY, with the addresses they touched.
- ``ktrace record -- COMMAND`` does the same to a whole program from outside (``python ...``,
  ``torchrun ...``, ``srun ...``): each rank writes its capture, then one trace and one report.
- :func:`declare` (or the decorators :func:`waits`, :func:`notifies`, :func:`stores`,
  :func:`reads`, :func:`atomic`) names a sync helper whose spin ktrace cannot see (inline
  assembly, a library call) once; PyTorch's NVSHMEM helpers, Iris and Triton-distributed are
  declared already (:mod:`ktrace.auto.known`).
- :func:`map_heap` gives the bases of an Iris-style heap, so that addresses pair across ranks.
  Torch symmetric memory is found by itself, from each ``rendezvous`` made while ktrace watches:
  from the first ``capture(auto=...)`` on, from the start under ``ktrace record``, or after
  :func:`watch` (a handle made before: :func:`register_handle`).

Importing this package has no side effects and imports neither torch nor triton.
"""

from .._lazy import lazy_attributes

_LAZY = {
    "AutoConfig": ("ktrace.auto.config", "AutoConfig"),
    "declare": ("ktrace.auto.declarations", "declare"),
    "waits": ("ktrace.auto.declarations", "waits"),
    "notifies": ("ktrace.auto.declarations", "notifies"),
    "stores": ("ktrace.auto.declarations", "stores"),
    "reads": ("ktrace.auto.declarations", "reads"),
    "atomic": ("ktrace.auto.declarations", "atomic"),
    "load_declarations": ("ktrace.auto.declarations", "load_file"),
    "DeclarationError": ("ktrace.auto.declarations", "DeclarationError"),
    "map_heap": ("ktrace.auto.hooks", "map_heap"),
    "watch": ("ktrace.auto.hooks", "watch"),
    "register_handle": ("ktrace.auto.hooks", "register_handle"),
}

__all__ = list(_LAZY)

__getattr__ = lazy_attributes(__name__, _LAZY, globals())
