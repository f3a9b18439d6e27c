"""A stand-in for Iris (github.com/ROCm/iris), for tests: the device functions with Iris's own
names and signatures (``iris/iris.py``: ``load(pointer, to_rank, from_rank, heap_bases, mask)``,
``store(pointer, value, from_rank, to_rank, heap_bases, mask)``, the atomics with
``(pointer, val, from_rank, to_rank, heap_bases, mask, sem, scope)``, ``atomic_cas(pointer, cmp,
val, from_rank, to_rank, heap_bases, sem, scope)``), over a heap every rank maps (here: torch
symmetric memory, where Iris uses HIP IPC handles). Iris targets AMD GPUs and is not installable
on these machines; its module is ``iris.iris``, as here."""

from .iris import Iris, atomic_add, atomic_cas, atomic_xchg, load, store  # noqa: F401
