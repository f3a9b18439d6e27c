"""Process-wide memory settings for ktrace's own processes (the ``ktrace`` command, its workers).

Pure Python plus ctypes; imported by the command line, the analyses and the writers' worker
processes, so it sits below all of them.
"""

import logging

log = logging.getLogger("ktrace")

#: mallopt(3) parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
_memory_kept = False


def keep_freed_memory() -> None:
    """Make the C allocator keep the memory the process frees, for its next allocations.

    An analysis allocates and frees arrays of hundreds of MB; by default glibc returns each to
    the system (``munmap``, heap trimming) and the next one faults fresh pages in again, which
    costs more than the arithmetic on some machines (virtual machines whose host backs guest
    memory on first touch). Here large blocks come from the heap instead of ``mmap``, the heap is
    never trimmed, and threads share one arena, so freed memory is reused without faults. The
    process's peak memory is not raised (only reuse changes); it is not returned to the system
    before the process ends. Process-wide, so it is applied only where the process is ktrace's
    own: by the ``ktrace`` command (``ktrace.cli.main``) and in the trace writers' worker
    processes, never on import or by the library functions a user's program calls. Does nothing where the C library has no ``mallopt``
    (not glibc).
    """
    global _memory_kept
    if _memory_kept:
        return
    _memory_kept = True
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    for param, value in ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_ARENA_MAX, 1)):
        if mallopt(param, value) != 1:
            log.debug("mallopt(%d, %d) was refused", param, value)
