"""The symmetric rule: every rank allocates the same sizes, of the same types, in the same order.

Device code reaches a peer's copy of a tensor by adding the tensor's byte offset in the local
heap to the peer's heap base. That is only right if the tensor sits at the same offset on every
rank, which holds exactly when every rank made the same allocations in the same order. A rank
that allocates one extra tensor, or a tensor of another size or dtype, silently shifts every later
offset: remote writes land in the wrong tensor. ktrace detects this instead of leaving it to
corrupt memory.

How: each heap keeps an :class:`AllocationLog`: the list of its allocations and a running 64-bit
digest of their (offset, bytes, dtype, shape). Every collective the heap makes (its barriers and
explicit checks) exchanges the same fixed-size state vector ``(count, digest, used bytes)`` with
every rank, so a rank that is one allocation ahead is caught by the exchange itself rather than
by a mismatched collective that would hang. When states differ, the ranks exchange their logs and
the error names the first allocation that differs and what each rank allocated there.

This module is pure Python (no torch, no triton): the rule's logic is tested on the CPU. The
collective is passed in as a function (``gather``), so the logic does not care whether it runs
over NCCL, gloo or a list in a test.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Callable, Sequence

#: Bytes at the start of every heap that ktrace keeps for itself (the error block, see
#: ``ktrace.shmem.codes``). User tensors start after it.
RESERVED_BYTES = 4096


class SymmetricRuleError(RuntimeError):
    """Ranks made different allocations on a symmetric heap (or disagree on its state)."""


@dataclass(frozen=True)
class Allocation:
    """One tensor carved out of the heap.

    Attributes:
        index: its position in this heap's allocation sequence (0 = first).
        offset: byte offset from the heap base (the same on every rank when the rule holds).
        nbytes: bytes reserved for it (before alignment padding).
        dtype: the element type's name (``"float32"``, ...).
        shape: the tensor's shape.
        name: an optional label, used in messages only (not part of the rule).
    """

    index: int
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    name: str = ""

    def __post_init__(self):
        if self.index < 0 or self.offset < 0 or self.nbytes < 0:
            raise ValueError(f"invalid allocation {self}")
        if any((not isinstance(s, int)) or s < 0 for s in self.shape):
            raise ValueError(f"invalid shape {self.shape!r}")

    def key(self) -> tuple:
        """What must agree across ranks (the label is free to differ)."""
        return (self.offset, self.nbytes, self.dtype, self.shape)

    def describe(self) -> str:
        shape = "x".join(str(s) for s in self.shape) or "scalar"
        label = f" {self.name!r}" if self.name else ""
        return f"{self.dtype}[{shape}]{label} ({self.nbytes} B at offset {self.offset})"


@dataclass
class AllocationLog:
    """A bump allocator over ``[RESERVED_BYTES, capacity)`` that records every allocation.

    Args:
        capacity: heap size in bytes.
        alignment: every allocation starts at a multiple of this (a power of two, >= 16).
    """

    capacity: int
    alignment: int = 256
    allocations: list[Allocation] = field(default_factory=list)
    used: int = RESERVED_BYTES
    digest: int = 0

    def __post_init__(self):
        if self.alignment < 16 or self.alignment & (self.alignment - 1):
            raise ValueError(f"alignment must be a power of two >= 16, got {self.alignment}")
        if self.capacity < RESERVED_BYTES + self.alignment:
            raise ValueError(f"heap capacity {self.capacity} B is too small (ktrace reserves {RESERVED_BYTES} B)")

    def allocate(self, nbytes: int, dtype: str, shape: Sequence[int], name: str = "") -> Allocation:
        """Reserve ``nbytes`` and return where. Raises MemoryError when the heap is full."""
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        offset = -(-self.used // self.alignment) * self.alignment
        end = offset + nbytes
        if end > self.capacity:
            free = max(0, self.capacity - offset)
            raise MemoryError(
                f"symmetric heap full: {dtype}[{'x'.join(map(str, shape))}] needs {nbytes} B, "
                f"{free} B left of {self.capacity} B; create the heap with a larger size"
            )
        a = Allocation(len(self.allocations), offset, int(nbytes), str(dtype), tuple(int(s) for s in shape), name)
        self.allocations.append(a)
        self.used = end
        self.digest = _chain(self.digest, a.key())
        return a

    def state(self) -> tuple[int, int, int]:
        """``(count, digest, used)``: what ranks compare. Each fits in a signed int64."""
        return (len(self.allocations), self.digest, self.used)

    def find(self, offset: int) -> Allocation | None:
        """The allocation holding byte ``offset`` of the heap, if any."""
        for a in self.allocations:
            if a.offset <= offset < a.offset + max(a.nbytes, 1):
                return a
        return None

    def describe_offset(self, offset: int) -> str:
        """``"'flags'[3] (int32 at heap offset 0x1010)"``-like text for messages."""
        a = self.find(offset)
        if a is None:
            return f"heap offset {offset:#x}"
        import math

        n = math.prod(a.shape) if a.shape else 1
        itemsize = a.nbytes // n if n else 1
        label = repr(a.name) if a.name else f"allocation #{a.index}"
        elem = (offset - a.offset) // itemsize if itemsize else 0
        return f"{label}[{elem}] ({a.dtype} at heap offset {offset:#x})"


def allocations_meta(allocations: Sequence[Allocation]) -> list[dict]:
    """Allocations as JSON-ready records (what a capture keeps to name flags by allocation and
    index in reports: ``'ready'[3]`` instead of a heap offset)."""
    return [{"index": a.index, "name": a.name, "offset": a.offset, "nbytes": a.nbytes, "dtype": a.dtype,
             "shape": list(a.shape)} for a in allocations]


def _chain(digest: int, key: tuple) -> int:
    """Fold one allocation into the running digest (63 bits, so it fits an int64 tensor)."""
    h = hashlib.blake2b(struct.pack("<Q", digest) + repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 63) - 1)


def compare_states(states: Sequence[Sequence[int]]) -> int | None:
    """The first rank whose ``(tag, count, digest, used)`` differs from rank 0's, else None.

    A leading ``tag`` lets the caller say which heap operation each rank was in.
    """
    ref = tuple(states[0])
    for r, s in enumerate(states):
        if tuple(s) != ref:
            return r
    return None


def explain_mismatch(logs: Sequence[Sequence[Allocation]], ops: Sequence[str] | None = None) -> str:
    """A message naming the first allocation that differs between ranks and what each made."""
    lines = []
    if ops is not None and len(set(ops)) > 1:
        lines.append("ranks were in different heap operations: " + ", ".join(f"rank {r}: {o}" for r, o in enumerate(ops)))
    n = max(len(lg) for lg in logs)
    first = None
    for i in range(n):
        keys = {lg[i].key() if i < len(lg) else None for lg in logs}
        if len(keys) > 1:
            first = i
            break
    if first is None:
        if not lines:
            lines.append("ranks disagree on the heap's state but their allocation logs agree")
        return "; ".join(lines)
    lines.append(f"allocation #{first} differs between ranks:")
    for r, lg in enumerate(logs):
        what = lg[first].describe() if first < len(lg) else f"nothing (only {len(lg)} allocations)"
        lines.append(f"  rank {r}: {what}")
    lines.append(
        "every rank must allocate the same sizes and dtypes in the same order on a symmetric heap "
        "(allocate outside rank-dependent branches)"
    )
    return "\n".join(lines)


def verify(
    log: AllocationLog,
    gather: Callable[[list[int]], list[list[int]]],
    gather_object: Callable[[object], list[object]],
    op: str = "check",
    rank: int = 0,
) -> None:
    """Check that every rank's heap agrees with this one's; raise SymmetricRuleError if not.

    Collective: every rank of the group must call it (all heap collectives go through here, so a
    rank that is ahead or behind shows up as a different state rather than a hang).

    Args:
        log: this rank's allocation log.
        gather: all-gather of a fixed-length list of ints; returns one list per rank.
        gather_object: all-gather of a picklable object; only called when states differ.
        op: which heap operation this is (in messages).
        rank: this rank (in messages).
    """
    op_code = _op_code(op)
    mine = [op_code, *log.state()]
    states = gather(mine)
    bad = compare_states(states)
    if bad is None:
        return
    payload = gather_object((op, list(log.allocations)))
    ops = [p[0] for p in payload]
    logs = [p[1] for p in payload]
    raise SymmetricRuleError(
        f"[rank {rank}] symmetric heap rule broken (seen during '{op}'; rank {bad} differs from rank 0):\n"
        + explain_mismatch(logs, ops)
    )


def _op_code(op: str) -> int:
    return int.from_bytes(hashlib.blake2b(op.encode(), digest_size=4).digest(), "little")
