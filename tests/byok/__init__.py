"""Kernels written the way users write them, with their own signalling, and nothing from ktrace.

Each module is a complete multi-GPU kernel over memory every rank can reach (torch symmetric
memory; an Iris-style heap of bases), in one of the styles ktrace must trace without edits:

* :mod:`ring_plain` — plain Triton: ``tl.atomic_xchg(..., sem="release", scope="sys")`` to a
  peer's flag, ``while tl.load(flag, volatile=True) < v`` spins, peers' buffers from
  ``buffer_ptrs``;
* :mod:`ring_asm` — signal helpers whose spin lives in inline PTX (an ``ld.acquire.sys`` loop and
  a release exchange), as PyTorch's symmetric-memory Triton recipes write them, declared once in
  ``ring_asm.json``;
* :mod:`ring_iris` — an Iris-style kernel: a heap-bases table and ``iris.store`` /
  ``iris.atomic_xchg`` / ``iris.atomic_cas`` calls (:mod:`tests.byok.standins.iris`, a stand-in
  with Iris's signatures: Iris itself targets AMD GPUs and is not installable here).

All three run the same ring: on each of T tiles, every program of rank r sends its tile to rank
r+1 and signals it, then waits for rank r-1's tile and writes it, doubled, to ``out``. A
*straggler* (rank, tiles, ns) delays the sending of those tiles; a *skip* (rank, tile) leaves one
signal out. :mod:`tests.byok.scenario` drives them (healthy, straggler, skip) at any world size.
"""
