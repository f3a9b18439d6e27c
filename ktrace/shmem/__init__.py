"""Symmetric heap: host allocator (``ktrace.shmem``) and device API (``ktrace.shmem.language``).

Host::

    import ktrace.shmem as shmem
    shmem.init_distributed()
    heap = shmem.SymmetricHeap(64 << 20)
    x = heap.zeros(4096, dtype=torch.float32, name="x")

Device (inside ``@triton.jit``)::

    import ktrace.shmem.language as ks
    kt = ks.wait(kt, flag, 1, rank, peer, heap_bases)

Launches released together on every rank (a device-side barrier, ``ktrace.shmem.align``)::

    with shmem.align_launch(heap):
        kernel[grid](...)

Importing this package has no side effects and pulls in neither torch nor triton: the names
below load their module on first use, and ``ktrace.shmem.codes`` / ``ktrace.shmem.symmetric``
are pure Python (analyses use them to name comparison codes).
"""

from .._lazy import lazy_attributes

_LAZY = {
    "SymmetricHeap": ("ktrace.shmem.heap", "SymmetricHeap"),
    "HeapConfig": ("ktrace.shmem.heap", "HeapConfig"),
    "WaitTimeout": ("ktrace.shmem.heap", "WaitTimeout"),
    "WaitTimeoutError": ("ktrace.shmem.heap", "WaitTimeoutError"),
    "init_distributed": ("ktrace.shmem.heap", "init_distributed"),
    "apply_safe_env": ("ktrace.dist_env", "apply_safe_env"),
    "SAFE_ENV": ("ktrace.dist_env", "SAFE_ENV"),
    "SymmetricRuleError": ("ktrace.shmem.symmetric", "SymmetricRuleError"),
    "Allocation": ("ktrace.shmem.symmetric", "Allocation"),
    "Cmp": ("ktrace.shmem.codes", "Cmp"),
    "align_launch": ("ktrace.shmem.align", "align_launch"),
    "aligner_for": ("ktrace.shmem.align", "aligner_for"),
}

__all__ = list(_LAZY)


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
