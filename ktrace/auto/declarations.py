"""Sync helpers named once: which calls wait, which notify, and on what.

A spin written in Triton (``while tl.load(flag, volatile=True) < v``) and an atomic on a flag are
recognised in the kernel's source. A spin that hides in inline assembly or in a library's
compiled code (PyTorch's ``wait_signal``/``send_signal`` style helpers, NVSHMEM's
``signal_wait_until``, Triton-distributed's ``dl.wait``) is not: it is declared once, by the
helper's qualified name (``module.qualname``), and every call of it is then traced::

    ktrace.auto.declare("mykernels.sync.wait_signal", waits="addrs", value=1)
    ktrace.auto.declare("mykernels.sync.send_signal", notifies="addrs", value=1)

or, in the helper's own file, with a decorator above ``@triton.jit``::

    @ktrace.auto.waits("addrs", value=1)
    @triton.jit
    def wait_signal(addrs): ...

or in a JSON file given to ``ktrace record --declare FILE``::

    {"mykernels.sync.wait_signal": {"waits": "addrs", "value": 1, "cmp": "eq"}}

Roles:

* ``waits=P``: the call returns once the flag at parameter ``P`` compares ``cmp`` (``eq``,
  ``ne``, ``ge``, ``gt``, ``le``, ``lt``; or ``"nvshmem:Q"``: parameter ``Q`` holds an NVSHMEM
  comparison code) to ``value``. A block of addresses is one wait per element.
* ``notifies=P``: the call writes ``value`` to the flag at ``P`` (``op`` "set" or "add"); a block
  of addresses is one notify per element.
* ``stores=P``: the call stores ``value`` at ``P``: a notify when ``P`` is one address (a store
  of a block is data, not a signal).
* ``reads=P``: the call returns the value at ``P`` (an acquire load): a ``while`` testing it is a
  spin on ``P``.
* ``atomic=P``: the call is an atomic on ``P`` (writing ``value``): in a spin's condition it is
  the read, elsewhere a notify.

``value`` and ``producer``/``owner`` are a parameter name or a constant. ``owner=Q``: the
address is this rank's symmetric address of the location on rank ``Q`` (Iris's ``to_rank``,
NVSHMEM's ``pe``); without it the address itself says where it points (a pointer into a peer's
mapped buffer). ``producer=Q``: the rank expected to release the wait, when the call says.

Declarations live in one process-wide registry; :mod:`ktrace.auto.known` adds those of
PyTorch's NVSHMEM Triton helpers, Iris and Triton-distributed when it is imported (by
``ktrace.auto``), keyed by name, so the libraries need not be imported first.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Union

#: Comparison names a declaration takes (the capture format's codes: ``ktrace.schema.Cmp``).
CMPS = {"eq": 1, "ne": 2, "ge": 3, "gt": 4, "le": 5, "lt": 6}
#: NVSHMEM's comparison codes (``NVSHMEM_CMP_*``, as OpenSHMEM numbers them) -> ktrace's.
NVSHMEM_CMPS = {0: CMPS["eq"], 1: CMPS["ne"], 2: CMPS["gt"], 3: CMPS["le"], 4: CMPS["lt"], 5: CMPS["ge"]}
#: rocSHMEM's (``ROCSHMEM_CMP_*``: GE and LE in the other order) -> ktrace's.
ROCSHMEM_CMPS = {0: CMPS["eq"], 1: CMPS["ne"], 2: CMPS["gt"], 3: CMPS["ge"], 4: CMPS["lt"], 5: CMPS["le"]}
#: ``cmp="PREFIX:PARAM"``: a parameter holding a library's comparison code, by library.
CMP_CODES = {"nvshmem": NVSHMEM_CMPS, "rocshmem": ROCSHMEM_CMPS}
ROLES = ("waits", "notifies", "stores", "reads", "atomic")

Param = Union[str, int, None]


class DeclarationError(ValueError):
    """A declaration that cannot be used (the message says which and why, in one line)."""


@dataclass(frozen=True)
class Declaration:
    """What one helper does (see the module docstring)."""

    target: str
    role: str
    addr: str
    value: Param = None
    cmp: Union[str, int] = "eq"
    owner: Param = None
    producer: Param = None
    op: str = "set"

    def __post_init__(self):
        where = f"declaration of {self.target!r}"
        if self.role not in ROLES:
            raise DeclarationError(f"{where}: role must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.addr, str) or not self.addr.isidentifier():
            raise DeclarationError(f"{where}: the address must be a parameter name, got {self.addr!r}")
        for k in ("value", "owner", "producer"):
            v = getattr(self, k)
            if v is not None and not (isinstance(v, str) and v.isidentifier()) and \
                    not (isinstance(v, int) and not isinstance(v, bool)):
                raise DeclarationError(f"{where}: {k} must be a parameter name or an integer, got {v!r}")
        if self.op not in ("set", "add"):
            raise DeclarationError(f"{where}: op must be 'set' or 'add', got {self.op!r}")
        c = self.cmp
        lib, _, param = c.partition(":") if isinstance(c, str) else ("", "", "")
        ok = (isinstance(c, str) and (c in CMPS or (lib in CMP_CODES and param.isidentifier()))) or \
            (isinstance(c, int) and not isinstance(c, bool) and c in CMPS.values())
        if not ok:
            raise DeclarationError(f"{where}: cmp must be one of {sorted(CMPS)} or 'nvshmem:PARAM' / 'rocshmem:PARAM', "
                                   f"got {c!r}")

    @property
    def cmp_code(self) -> int | None:
        """The comparison's code, or None when a parameter holds it (``nvshmem:PARAM``, ``rocshmem:PARAM``)."""
        return CMPS[self.cmp] if isinstance(self.cmp, str) and self.cmp in CMPS else \
            self.cmp if isinstance(self.cmp, int) else None


_lock = threading.Lock()
_registry: dict[str, Declaration] = {}


def _target_name(target) -> str:
    """``module.qualname`` of a helper given as an object (a jit function or a plain function),
    or the string itself."""
    if isinstance(target, str):
        if not all(p.isidentifier() for p in target.split(".")) or "." not in target:
            raise DeclarationError(f"a helper is named 'module.function', got {target!r}")
        return target
    fn = getattr(target, "fn", target)
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not mod or not qual:
        raise DeclarationError(f"cannot name {target!r}: give 'module.function'")
    return f"{mod}.{qual}"


def declare(target, *, waits: str | None = None, notifies: str | None = None, stores: str | None = None,
            reads: str | None = None, atomic: str | None = None, value: Param = None, cmp: Union[str, int] = "eq", owner: Param = None,
            producer: Param = None, op: str = "set") -> Declaration:
    """Declare what a helper does (exactly one of ``waits``, ``notifies``, ``stores``, ``reads``,
    ``atomic``).

    Args:
        target: the helper (a jit function or any function), or its ``module.qualname``.
        waits, notifies, stores, reads, atomic: the parameter holding the flag's address.
        value: the value waited for or written (a parameter name or an int).
        cmp: the comparison a wait waits for (``eq`` .. ``lt``; ``nvshmem:PARAM``).
        owner: the parameter (or int) naming the rank that owns the address's location.
        producer: the parameter (or int) naming the rank expected to release a wait.
        op: what a notify does to the flag: ``set`` or ``add``.

    Returns:
        The declaration, registered (replacing an earlier one of the same helper).

    Raises:
        DeclarationError: a bad declaration (one line).
    """
    roles = {r: v for r, v in (("waits", waits), ("notifies", notifies), ("stores", stores), ("reads", reads),
                               ("atomic", atomic)) if v is not None}
    name = _target_name(target)
    if len(roles) != 1:
        raise DeclarationError(f"declaration of {name!r}: give exactly one of {', '.join(ROLES)}")
    (role, addr), = roles.items()
    d = Declaration(name, role, addr, value=value, cmp=cmp, owner=owner, producer=producer, op=op)
    with _lock:
        _registry[name] = d
    return d


def lookup(target) -> Declaration | None:
    """The declaration of a helper (an object or a name), if any."""
    try:
        name = _target_name(target)
    except DeclarationError:
        return None
    with _lock:
        return _registry.get(name)


def declared() -> dict[str, Declaration]:
    """A copy of every declaration."""
    with _lock:
        return dict(_registry)


def _role_decorator(role: str):
    def deco_factory(addr: str, **kw):
        def deco(fn):
            declare(fn, **{role: addr}, **kw)
            return fn
        return deco
    deco_factory.__name__ = role
    deco_factory.__doc__ = f"Decorator: ``@ktrace.auto.{role}(PARAM, ...)`` above ``@triton.jit`` declares the helper (see :func:`declare`)."
    return deco_factory


waits = _role_decorator("waits")
notifies = _role_decorator("notifies")
stores = _role_decorator("stores")
reads = _role_decorator("reads")
atomic = _role_decorator("atomic")

#: Largest declarations file read (a file of declarations is small; a larger one is not one).
MAX_FILE_BYTES = 1 << 20


def load_file(path: str | os.PathLike) -> list[Declaration]:
    """Register the declarations of a JSON file: ``{"module.function": {"waits": "PARAM", ...}}``.

    Raises:
        DeclarationError: the file cannot be read or holds a bad declaration (one line naming it).
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise DeclarationError(f"{path}: cannot read declarations: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise DeclarationError(f"{path}: more than {MAX_FILE_BYTES} bytes: not a file of declarations")
    try:
        table = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise DeclarationError(f"{path}: not JSON: {e}") from None
    if not isinstance(table, dict):
        raise DeclarationError(f"{path}: expected an object of 'module.function': {{...}} entries")
    out = []
    for name, spec in table.items():
        if not isinstance(spec, dict):
            raise DeclarationError(f"{path}: {name!r}: expected an object, got {type(spec).__name__}")
        unknown = set(spec) - {*ROLES, "value", "cmp", "owner", "producer", "op"}
        if unknown:
            raise DeclarationError(f"{path}: {name!r}: unknown keys {sorted(unknown)}")
        try:
            out.append(declare(name, **spec))
        except (DeclarationError, TypeError) as e:
            raise DeclarationError(f"{path}: {e}") from None
    return out
