"""Declarations of the sync helpers of libraries kernels are written with (``ktrace.auto.declare``).

Registered by name when ``ktrace.auto`` is imported, so the libraries need not be importable (nor
imported first): a call is matched by its helper's ``module.qualname`` when a kernel is prepared.

* PyTorch's NVSHMEM and rocSHMEM Triton helpers (``torch.distributed._symmetric_memory.
  _nvshmem_triton`` / ``_rocshmem_triton``, what ``_shmem_triton`` dispatches to): ``wait_until``
  and ``signal_wait_until`` wait; ``putmem_signal_block`` and ``signal_op`` notify the signal on
  ``pe``.
* Iris (``iris.iris``): ``load`` reads ``pointer`` on ``from_rank``; the atomics act on
  ``pointer`` on ``to_rank`` (a read in a spin, a notify elsewhere); ``store`` of one value is a
  notify.
* Triton-distributed (``triton_dist.language.distributed_ops``, ``...extra.libshmem_device``):
  ``wait`` waits for ``waitValue`` on ``barrierPtrs`` (its first barrier is recorded);
  ``notify`` and the ``putmem_signal*``/``signal_op`` calls notify ``sig_addr``/``ptr`` on
  ``rank``/``pe``; ``signal_wait_until`` waits.

Parameter names are the libraries' own (checked against their sources at the versions named in
docs/byok.md); a call that does not bind to them is traced as an ordinary call.
"""

from __future__ import annotations

from . import declarations as _declare


def declare(target: str, **kw) -> None:
    """A library's declaration, unless the program declared that helper itself (its own wins)."""
    if _declare.lookup(target) is None:
        _declare.declare(target, **kw)

_TORCH_NVSHMEM = "torch.distributed._symmetric_memory._nvshmem_triton"
_TORCH_ROCSHMEM = "torch.distributed._symmetric_memory._rocshmem_triton"
_IRIS = "iris.iris"
_TD_OPS = "triton_dist.language.distributed_ops"
_TD_SHMEM = "triton_dist.language.extra.libshmem_device"
_TD_PUTS = ("putmem_signal", "putmem_signal_nbi", "putmem_signal_block", "putmem_signal_nbi_block", "putmem_signal_warp",
            "putmem_signal_nbi_warp", "putmem_signal_wave", "putmem_signal_wg", "putmem_signal_nbi_wave",
            "putmem_signal_nbi_wg")
_IRIS_ATOMICS = ("atomic_add", "atomic_sub", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "atomic_min",
                 "atomic_max")


def register() -> None:
    """Register every declaration above that the program has not made itself (idempotent)."""
    declare(f"{_TORCH_NVSHMEM}.wait_until", waits="ivar", value="cmp_val", cmp="nvshmem:cmp_op")
    declare(f"{_TORCH_NVSHMEM}.signal_wait_until", waits="signal", value="cmp_val", cmp="nvshmem:cmp")
    declare(f"{_TORCH_NVSHMEM}.putmem_signal_block", notifies="signal", value="sig_val", owner="pe")
    declare(f"{_TORCH_NVSHMEM}.signal_op", notifies="sig_addr", value="signal", owner="pe")
    declare(f"{_TORCH_ROCSHMEM}.wait_until", waits="ivar", value="cmp_val", cmp="rocshmem:cmp_op")
    declare(f"{_TORCH_ROCSHMEM}.signal_wait_until", waits="signal", value="cmp_val", cmp="rocshmem:cmp")
    declare(f"{_TORCH_ROCSHMEM}.putmem_signal_block", notifies="signal", value="sig_val", owner="pe")
    declare(f"{_TORCH_ROCSHMEM}.signal_op", notifies="sig_addr", value="signal", owner="pe")

    declare(f"{_IRIS}.load", reads="pointer", owner="from_rank")
    for name in _IRIS_ATOMICS:
        declare(f"{_IRIS}.{name}", atomic="pointer", value="val", owner="to_rank", op="add" if name == "atomic_add" else "set")
    declare(f"{_IRIS}.atomic_cas", atomic="pointer", value="val", owner="to_rank")
    declare(f"{_IRIS}.store", stores="pointer", value="value", owner="to_rank")

    declare(f"{_TD_OPS}.wait", waits="barrierPtrs", value="waitValue")
    declare(f"{_TD_OPS}.notify", notifies="ptr", value="signal", owner="rank")
    declare(f"{_TD_SHMEM}.signal_wait_until", waits="sig_addr", value="cmp_val", cmp="nvshmem:cmp_")  # (its CUDA codes)
    declare(f"{_TD_SHMEM}.signal_op", notifies="sig_addr", value="signal", owner="pe")
    for name in _TD_PUTS:
        declare(f"{_TD_SHMEM}.{name}", notifies="sig_addr", value="signal", owner="pe")
