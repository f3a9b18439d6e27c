"""Host side of the symmetric heap: one block of symmetric memory per process group, sliced into
tensors with torch-like constructors, plus the device table of heap bases.

Usage (under ``torchrun``, ``srun``, ``python -m ktrace.launch`` or ``torch.multiprocessing``)::

    import ktrace.shmem as shmem

    shmem.init_distributed()                       # from RANK/WORLD_SIZE/... if not initialised
    heap = shmem.SymmetricHeap(256 << 20)          # collective
    x = heap.zeros(1 << 20, dtype=torch.float32, name="x")   # collective (checks the rule)
    flags = heap.zeros(heap.world_size, dtype=torch.int32, name="flags")
    kernel[grid](x, flags, heap.rank, heap.bases, ...)
    heap.barrier()                                 # device sync + rule check + group barrier
    heap.check()                                   # raises WaitTimeoutError after a timed-out wait

The memory comes from ``torch.distributed._symmetric_memory`` (``empty`` + ``rendezvous``):
every rank maps every peer's block, and ``heap.bases[r]`` is where rank ``r``'s block lies in
this process's address space. Allocation is a bump pointer; tensors live as long as the heap.
"""

from __future__ import annotations

import logging
import math
import operator
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..dist_env import apply_safe_env, device_index, export_torch_env, rank_env
from . import codes
from .symmetric import RESERVED_BYTES, AllocationLog, SymmetricRuleError, verify

log = logging.getLogger("ktrace")

_CHECK_MODES = ("alloc", "barrier", "off")


@dataclass(frozen=True)
class HeapConfig:
    """How a heap is built.

    Args:
        size_bytes: bytes of symmetric memory per rank (ktrace keeps the first 4 KiB).
        alignment: every tensor starts at a multiple of this (power of two, >= 256 so that the
            device-side translation can promise 128-bit alignment).
        check: when ranks compare their allocation sequences: "alloc" (every allocation and
            barrier; allocation is then collective), "barrier" (only in barrier/verify), "off".
        backing: "symmetric" (torch symmetric memory on the current CUDA/ROCm device), "host"
            (plain CPU memory: the bookkeeping without peer access, for CPU tests), or "auto"
            (symmetric when a GPU is present, else host).
    """

    size_bytes: int = 1 << 30
    alignment: int = 256
    check: str = "alloc"
    backing: str = "auto"

    def __post_init__(self):
        if not isinstance(self.size_bytes, int) or self.size_bytes < RESERVED_BYTES + self.alignment:
            raise ValueError(f"size_bytes must be an int >= {RESERVED_BYTES + self.alignment}, got {self.size_bytes!r}")
        if self.alignment < 256 or self.alignment & (self.alignment - 1):
            raise ValueError(f"alignment must be a power of two >= 256, got {self.alignment}")
        if self.check not in _CHECK_MODES:
            raise ValueError(f"check must be one of {_CHECK_MODES}, got {self.check!r}")
        if self.backing not in ("auto", "symmetric", "host"):
            raise ValueError(f"backing must be 'auto', 'symmetric' or 'host', got {self.backing!r}")


@dataclass(frozen=True)
class WaitTimeout:
    """One wait that gave up at its bound (read back from a rank's error block)."""

    rank: int
    program: int
    flag_offset: int
    flag: str
    peer: int
    expected: int
    seen: int
    cmp: str
    waited_ns: float
    spins: int

    def __str__(self) -> str:
        return (
            f"rank {self.rank}, program {self.program} waited on flag {self.flag} from peer {self.peer} "
            f"for {_fmt_ns(self.waited_ns)} ({self.spins} reads; last saw {self.seen}, waited for {self.cmp} {self.expected})"
        )


class WaitTimeoutError(RuntimeError):
    """Waits timed out on this rank; ``.timeouts`` lists the ones described, ``.count`` all."""

    def __init__(self, message: str, timeouts: list[WaitTimeout], count: int):
        super().__init__(message)
        self.timeouts = timeouts
        self.count = count


def _fmt_ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3f} us"
    return f"{ns:.0f} ns"


def parse_error_block(raw: np.ndarray, rank: int, tick_hz: int, describe_offset=str) -> tuple[int, list[WaitTimeout]]:
    """Read a rank's error block (``codes``): ``(count, described)`` of the waits that gave up.

    Args:
        raw: the block's bytes (uint8, ``codes.ERROR_BLOCK_BYTES`` of them).
        rank: the rank it belongs to.
        tick_hz: the device timer's rate (for ``waited_ns``).
        describe_offset: names a flag's heap offset (``SymmetricHeap.describe_offset``).
    """
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    count = max(int(raw[:4].view(np.int32)[0]), 0)
    n = min(count, codes.ERROR_SLOTS)
    recs = raw[8 : 8 + n * codes.ERROR_RECORD_DTYPE.itemsize].view(codes.ERROR_RECORD_DTYPE)
    out = []
    for r in recs:
        try:
            cmp = codes.Cmp(int(r["cmp"])).name.lower()
        except ValueError:
            cmp = f"cmp#{int(r['cmp'])}"
        cmp = {"eq": "==", "ne": "!=", "ge": ">=", "gt": ">", "le": "<=", "lt": "<"}.get(cmp, cmp)
        out.append(
            WaitTimeout(
                rank=rank,
                program=int(r["program"]),
                flag_offset=int(r["flag"]),
                flag=describe_offset(int(r["flag"])),
                peer=int(r["peer"]),
                expected=int(r["expected"]),
                seen=int(r["seen"]),
                cmp=cmp,
                waited_ns=int(r["waited"]) * 1e9 / tick_hz,
                spins=int(r["spins"]),
            )
        )
    return count, out


def timeout_error(rank: int, count: int, described: list[WaitTimeout]) -> WaitTimeoutError:
    """The :class:`WaitTimeoutError` for ``count`` timed-out waits of ``rank`` (each described
    one logged, with the rank prefix)."""
    lines = [str(t) for t in described]
    more = count - len(described)
    if more > 0:
        lines.append(f"... and {more} more timed-out waits on rank {rank}")
    for line in lines:
        log.error("[rank %d] ktrace wait timeout: %s", rank, line)
    return WaitTimeoutError(f"{count} wait(s) timed out on rank {rank}:\n  " + "\n  ".join(lines), described, count)


def init_distributed(backend: str | None = None, timeout_s: float = 600.0):
    """Initialise ``torch.distributed`` from the launcher's environment if it is not already.

    Reads torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``
    or, for a task started by Slurm's ``srun``, ``SLURM_PROCID``, ``SLURM_NTASKS``,
    ``SLURM_LOCALID`` and the node list (:func:`ktrace.dist_env.rank_env` says how), selects this
    rank's GPU and applies ``ktrace.dist_env.SAFE_ENV`` (NVLink multicast off). Backend: NCCL
    when a GPU is present, else gloo.

    Returns:
        ``(rank, world_size)``.
    """
    import datetime

    import torch
    import torch.distributed as dist

    apply_safe_env()
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    re = rank_env()
    missing = ["RANK", "WORLD_SIZE"] if re is None else [k for k, v in (("MASTER_ADDR", re.master_addr),
                                                                       ("MASTER_PORT", re.master_port)) if v is None]
    if missing:
        raise RuntimeError(
            f"torch.distributed is not initialised and {missing} are not set: launch with torchrun or srun "
            "(see docs/scale.md), or call init_process_group yourself"
        )
    export_torch_env(re)  # env:// reads them; a Slurm task then looks like a torchrun worker
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    kwargs = {}
    if torch.cuda.is_available():
        local = device_index(re, torch.cuda.device_count())
        torch.cuda.set_device(local)
        if backend == "nccl":
            kwargs["device_id"] = torch.device("cuda", local)
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return dist.get_rank(), dist.get_world_size()


class _Collectives:
    """The heap's collectives over its group: fixed-size int gathers and object gathers."""

    def __init__(self, group, device):
        import torch.distributed as dist

        self.dist = dist
        self.group = group
        backend = dist.get_backend(group)
        self.device = device if "nccl" in str(backend).lower() else "cpu"

    def gather(self, values: list[int]) -> list[list[int]]:
        import torch

        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        n = self.dist.get_world_size(self.group)
        out = torch.empty(n * t.numel(), dtype=torch.int64, device=self.device)
        self.dist.all_gather_into_tensor(out, t, group=self.group)
        return out.view(n, -1).cpu().tolist()

    def gather_object(self, obj) -> list:
        out = [None] * self.dist.get_world_size(self.group)
        self.dist.all_gather_object(out, obj, group=self.group)
        return out


class SymmetricHeap:
    """A symmetric heap over a process group. Creating one is collective.

    Args:
        size_bytes: bytes per rank (overrides ``config.size_bytes``).
        group: the process group (default: the world).
        device: the GPU (default: the current CUDA device).
        config: a :class:`HeapConfig`.

    Attributes:
        rank, world_size: this process's rank in ``group`` and the group's size.
        bases: int64 device tensor, ``bases[r]`` = address of rank r's heap in this process.
        base_ptrs: the same as a list of ints.
    """

    def __init__(self, size_bytes: int | None = None, *, group=None, device=None, config: HeapConfig | None = None):
        import torch
        import torch.distributed as dist

        apply_safe_env()
        if config is None:
            config = HeapConfig() if size_bytes is None else HeapConfig(size_bytes=int(size_bytes))
        elif size_bytes is not None:
            config = HeapConfig(size_bytes=int(size_bytes), alignment=config.alignment, check=config.check, backing=config.backing)
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("SymmetricHeap needs torch.distributed initialised (see ktrace.shmem.init_distributed)")
        self.config = config
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)
        backing = config.backing
        if backing == "auto":
            backing = "symmetric" if torch.cuda.is_available() else "host"
        self.backing = backing
        if backing == "symmetric":
            if device is None:
                device = torch.device("cuda", torch.cuda.current_device())
            self.device = torch.device(device)
        else:
            self.device = torch.device("cpu")
        self._coll = _Collectives(self.group, self.device)
        self._log = AllocationLog(config.size_bytes, config.alignment)
        self._broken: str | None = None
        self._handle = None
        # timed-out waits moved off the device's error block by hold_timeouts (count, described)
        self._held: tuple[int, list[WaitTimeout]] = (0, [])
        if backing == "symmetric":
            self.buffer, self.base_ptrs = self._symmetric_block(config.size_bytes)
        else:
            raw = torch.zeros(config.size_bytes + config.alignment, dtype=torch.uint8)
            skip = -raw.data_ptr() % config.alignment
            self.buffer = raw[skip : skip + config.size_bytes]
            self.base_ptrs = [int(p[0]) for p in self._coll.gather([self.buffer.data_ptr()])]
        bad = [(r, p) for r, p in enumerate(self.base_ptrs) if p % config.alignment]
        if bad:
            raise RuntimeError(f"heap bases not {config.alignment}-byte aligned: {bad}; the device translation needs it")
        self.bases = torch.tensor(self.base_ptrs, dtype=torch.int64, device=self.device)
        self.buffer[: codes.ERROR_BLOCK_BYTES].zero_()
        self._tick_hz = self._timer_hz()
        self._verify("create")
        log.info(
            "[rank %d] symmetric heap: %d B per rank on %s (%s), %d ranks",
            self.rank, config.size_bytes, self.device, backing, self.world_size,
        )

    # construction ----------------------------------------------------------------------------
    def _symmetric_block(self, nbytes: int):
        import torch
        import torch.distributed._symmetric_memory as symm

        torch.cuda.set_device(self.device)
        enable = getattr(symm, "enable_symm_mem_for_group", None)
        is_enabled = getattr(symm, "is_symm_mem_enabled_for_group", None)
        if enable is not None and (is_enabled is None or not is_enabled(self.group.group_name)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated (a no-op) on newer torch
                enable(self.group.group_name)
        from ..auto.addresses import suppressed

        buf = symm.empty(nbytes, dtype=torch.uint8, device=self.device)
        with suppressed():  # (ktrace's heap: its kernels record offsets, not addresses to map)
            self._handle = symm.rendezvous(buf, self.group)
        ptrs = [int(p) for p in self._handle.buffer_ptrs]
        local_off = buf.data_ptr() - ptrs[self.rank]
        if local_off < 0:
            raise RuntimeError("symmetric memory returned a tensor outside its own buffer")
        self._local_off = local_off
        return buf, [p + local_off for p in ptrs]

    def _timer_hz(self) -> int:
        if self.device.type != "cuda":
            return 1_000_000_000
        from ktrace.device import timer_hz

        return timer_hz(self.device.index)

    # the rule ---------------------------------------------------------------------------------
    def _verify(self, op: str) -> None:
        if self._broken:
            raise SymmetricRuleError(self._broken)
        try:
            verify(self._log, self._coll.gather, self._coll.gather_object, op=op, rank=self.rank)
        except SymmetricRuleError as e:
            self._broken = str(e)
            log.error("%s", e)
            raise

    def verify(self) -> None:
        """Collective: check every rank made the same allocations (SymmetricRuleError if not)."""
        self._verify("verify")

    def barrier(self) -> None:
        """Collective: wait for this device's work, check the rule (unless ``check="off"``), and
        wait for every rank. Afterwards every rank's earlier kernels have finished."""
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if self.config.check == "off":
            if self._broken:
                raise SymmetricRuleError(self._broken)
            self._coll.gather([0])
        else:
            self._verify("barrier")

    def all_gather_object(self, obj) -> list:
        """Collective: every rank's ``obj`` (picklable), in rank order, over the heap's group."""
        return self._coll.gather_object(obj)

    # allocation -------------------------------------------------------------------------------
    def _alloc(self, shape, dtype, name: str):
        import torch

        if self._broken:
            raise SymmetricRuleError(self._broken)
        if dtype is None:
            dtype = torch.get_default_dtype()
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
        shape = _shape(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        n = math.prod(shape)
        a = self._log.allocate(n * itemsize, str(dtype).replace("torch.", ""), shape, name)
        if self.config.check == "alloc":
            self._verify(f"allocate {a.describe()}")
        t = self.buffer[a.offset : a.offset + a.nbytes].view(dtype).view(shape)
        return t

    def empty(self, *size, dtype=None, name: str = ""):
        """An uninitialised tensor on the heap (collective when ``check="alloc"``)."""
        return self._alloc(size, dtype, name)

    def zeros(self, *size, dtype=None, name: str = ""):
        """A zero-filled tensor on the heap."""
        return self._alloc(size, dtype, name).zero_()

    def ones(self, *size, dtype=None, name: str = ""):
        """A tensor of ones on the heap."""
        return self._alloc(size, dtype, name).fill_(1)

    def full(self, size, fill_value, *, dtype=None, name: str = ""):
        """A tensor filled with ``fill_value`` on the heap."""
        return self._alloc((size,) if isinstance(size, int) else size, dtype, name).fill_(fill_value)

    def arange(self, n: int, *, dtype=None, name: str = ""):
        """``0 .. n-1`` on the heap (int64 unless ``dtype`` says otherwise)."""
        import torch

        t = self._alloc((n,), dtype or torch.int64, name)
        t.copy_(torch.arange(n, dtype=t.dtype))
        return t

    def empty_like(self, t, *, dtype=None, name: str = ""):
        """An uninitialised heap tensor shaped like ``t``."""
        return self._alloc(tuple(t.shape), dtype or t.dtype, name)

    def zeros_like(self, t, *, dtype=None, name: str = ""):
        return self.empty_like(t, dtype=dtype, name=name).zero_()

    def ones_like(self, t, *, dtype=None, name: str = ""):
        return self.empty_like(t, dtype=dtype, name=name).fill_(1)

    def full_like(self, t, fill_value, *, dtype=None, name: str = ""):
        return self.empty_like(t, dtype=dtype, name=name).fill_(fill_value)

    def as_symmetric(self, t, *, name: str = ""):
        """A heap copy of ``t`` (any device)."""
        out = self.empty_like(t, name=name)
        out.copy_(t)
        return out

    # queries ----------------------------------------------------------------------------------
    def offset_of(self, t) -> int:
        """Byte offset of ``t``'s first element from this rank's heap base (ValueError if not on it)."""
        off = t.data_ptr() - self.base_ptrs[self.rank]
        if not 0 <= off < self.config.size_bytes or t.device != self.device:
            raise ValueError("tensor is not on this symmetric heap")
        return off

    def remote(self, t, peer: int):
        """A tensor viewing ``peer``'s copy of heap tensor ``t`` (symmetric backing only).

        Host-side access to peer memory (e.g. ``local.copy_(heap.remote(x, peer))``): it is what a
        device-to-device peer copy reads and writes.
        """
        if self._handle is None:
            raise RuntimeError("remote views need the symmetric backing (a GPU)")
        if not 0 <= peer < self.world_size:
            raise ValueError(f"peer {peer} out of range for world size {self.world_size}")
        if not t.is_contiguous():
            raise ValueError("remote views need a contiguous tensor")
        off = self._local_off + self.offset_of(t)
        if off % t.element_size():
            raise ValueError("tensor offset is not a multiple of its element size")
        return self._handle.get_buffer(peer, list(t.shape), t.dtype, off // t.element_size())

    @property
    def used_bytes(self) -> int:
        return self._log.used

    @property
    def allocations(self):
        """This rank's allocations, in order (``ktrace.shmem.symmetric.Allocation``)."""
        return list(self._log.allocations)

    def describe_offset(self, offset: int) -> str:
        return self._log.describe_offset(offset)

    # timed-out waits --------------------------------------------------------------------------
    #
    # Device code records a wait that gave up in this rank's error block (``codes``). ktrace's own
    # kernels (the clock calibration) wait on flags too and must tell their timeouts apart from
    # the user's: they first move what the block holds to the host (hold_timeouts), then read
    # and clear their own (take_timeouts). timeouts() and check() report both the held ones and
    # what the block holds now, so nothing a user's kernel recorded is lost on the way.

    def _read_error_block(self) -> tuple[int, list[WaitTimeout]]:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        raw = self.buffer[: codes.ERROR_BLOCK_BYTES].cpu().numpy()
        return parse_error_block(raw, self.rank, self._tick_hz, self.describe_offset)

    def _zero_error_block(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.buffer[: codes.ERROR_BLOCK_BYTES].zero_()

    def timeouts(self) -> tuple[int, list[WaitTimeout]]:
        """This rank's waits that gave up since the last clear: ``(count, described)``, the ones
        :meth:`hold_timeouts` kept first, then those the error block holds now (waits past the
        block's first ``codes.ERROR_SLOTS`` are counted, not described)."""
        count, described = self._read_error_block()
        held_count, held = self._held
        return held_count + count, held + described

    def hold_timeouts(self) -> int:
        """Move the timed-out waits the error block holds to the host, where :meth:`timeouts` and
        :meth:`check` still report them, and zero the block (after the device finished with it):
        for ktrace's own kernels, which then read their own timeouts with :meth:`take_timeouts`.

        Returns:
            How many were moved.
        """
        count, described = self._read_error_block()
        if count:
            held_count, held = self._held
            self._held = (held_count + count, held + described)
            self._zero_error_block()
        return count

    def take_timeouts(self) -> tuple[int, list[WaitTimeout]]:
        """Read and zero the error block, without keeping what it held: ``(count, described)``
        of the waits that gave up since the last :meth:`hold_timeouts` (or clear)."""
        count, described = self._read_error_block()
        if count:
            self._zero_error_block()
        return count, described

    def clear_timeouts(self) -> None:
        """Forget every timed-out wait: zero the error block (after the device finished with it)
        and drop the held ones."""
        self._zero_error_block()
        self._held = (0, [])

    def check(self, clear: bool = True) -> None:
        """Raise :class:`WaitTimeoutError` if a wait on this rank timed out; logs each one.

        Args:
            clear: forget them before raising (:meth:`clear_timeouts`), so the heap can be reused.
        """
        count, described = self.timeouts()
        if count == 0:
            return
        if clear:
            self.clear_timeouts()
        raise timeout_error(self.rank, count, described)

    def close(self) -> None:
        """Drop this rank's references to the memory (tensors sliced from it keep it alive)."""
        self._handle = None
        self.buffer = None
        self.bases = None

    def __repr__(self) -> str:
        return (
            f"SymmetricHeap(rank={self.rank}, world_size={self.world_size}, size={self.config.size_bytes}, "
            f"used={self._log.used}, device={self.device}, backing={self.backing!r})"
        )


def _shape(size) -> tuple[int, ...]:
    """``(2, 3)``, ``((2, 3),)``, ``([2, 3],)`` or ``(torch.Size([2, 3]),)`` -> ``(2, 3)``."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, bool):
            raise TypeError(f"sizes must be ints, got {tuple(size)!r}")
        try:
            s = operator.index(s)
        except TypeError:
            raise TypeError(f"sizes must be ints, got {tuple(size)!r}") from None
        if s < 0:
            raise ValueError(f"negative size in {tuple(size)!r}")
        out.append(s)
    return tuple(out)


def heap_size_for(tensors: Sequence[tuple[Sequence[int], int]], alignment: int = 256) -> int:
    """Bytes a heap needs for tensors given as ``(shape, itemsize)`` pairs (plus ktrace's block)."""
    total = RESERVED_BYTES
    for shape, itemsize in tensors:
        total = -(-total // alignment) * alignment + math.prod(shape) * itemsize
    return -(-total // alignment) * alignment + alignment
