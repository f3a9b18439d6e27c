"""The symmetric heap's signals for ``@gluon.jit`` kernels: ``import ktrace.shmem.gluon as ksg``.

The same conventions as ``ktrace.shmem.language`` (``heap.bases``, ``heap.rank``): a flag is an
int32 in this rank's heap; :func:`notify` writes ``peer``'s copy, :func:`wait` spins on this
rank's. Both record what ``ktrace.shmem.language``'s do (NOTIFY / WAIT with the flag's heap
offset), so traces, pairing and the stall analysis take them unchanged; the probes are
``ktrace.gluon``'s, written by the calling lane.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .. import gluon as kg


@gluon.jit
def heap_base(heap_bases, rank):
    """``rank``'s heap base (int64), read as invariant data (``ld.global.nc``, no side effects):
    the compiler may hoist it out of a loop past the probes' assembly (see
    ``ktrace.shmem.language.heap_base``)."""
    return gl.inline_asm_elementwise("ld.global.nc.u64 $0, [$1];", "=l,l", [heap_bases + rank], dtype=gl.int64, is_pure=True, pack=1)


@gluon.jit
def translate(ptr, from_rank, to_rank, heap_bases):
    """``ptr`` (into ``from_rank``'s heap) moved to the same offset of ``to_rank``'s heap."""
    delta = heap_base(heap_bases, to_rank) - heap_base(heap_bases, from_rank)
    return (ptr.to(gl.int64, bitcast=True) + delta).to(ptr.dtype, bitcast=True)


@gluon.jit
def notify(kt, flag, value, rank, peer, heap_bases, name: gl.constexpr = "notify"):
    """Publish this partition's earlier writes and set ``peer``'s copy of ``flag`` to ``value``
    (see ``ktrace.gluon.notify_flag``). Returns the advanced tracer."""
    my_base = heap_base(heap_bases, rank)
    remote = (flag.to(gl.int64, bitcast=True) + (heap_base(heap_bases, peer) - my_base)).to(flag.dtype, bitcast=True)
    return kg.notify_flag(kt, remote, value, peer, flag.to(gl.int64, bitcast=True) - my_base, name)


@gluon.jit
def wait(kt, flag, expected, rank, peer, heap_bases, timeout_ns: gl.constexpr = 5_000_000_000, name: gl.constexpr = "wait"):
    """Spin until this rank's ``flag`` >= ``expected`` (set by ``peer``), then acquire (see
    ``ktrace.gluon.wait_flag``). Returns ``(kt, ok)``."""
    off = flag.to(gl.int64, bitcast=True) - heap_base(heap_bases, rank)
    return kg.wait_flag(kt, flag, expected, peer, off, timeout_ns, name)


__all__ = ["heap_base", "translate", "notify", "wait"]
