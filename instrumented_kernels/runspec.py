"""What ``ktrace run`` needs from a kernel folder: a run spec and a driver (``<folder>/run.py``).

Each kernel folder's ``run.py`` defines ``SPEC``, a :class:`RunSpec`: the kernel's name (the
folder's), a one-line summary, its shape parameters (:class:`Param`: type, default, help,
allowed values), which of them must split evenly over the ranks, any further check of a
parameter set, and ``build``, the driver's constructor. ``ktrace run`` finds the specs through
:func:`instrumented_kernels.folder_modules` (the way ``benchmarks/kernels.py`` finds each
folder's ``bench.py``) and knows nothing else about any kernel.

A driver (:class:`Driver`) is built on every rank, collectively, by
``build(dist, params, fault, seed, timeout_ns)``: ``dist`` is the rank's ``harness.Dist``,
``params`` every parameter (defaults with the run's overrides, checked by :meth:`RunSpec.resolve`),
``fault`` a ``harness.Fault``, ``seed`` the inputs' seed (the same on every rank), ``timeout_ns``
the bound of every wait in the kernel (None: the kernel's own). It puts its plan on the shared
symmetric heap (``harness.heap``), makes its inputs, and then ``step()`` runs one step and
``check()`` compares the last step's output with the folder's reference.

Pure Python: importing this module, or a folder's ``run.py``, pulls in neither torch nor triton
(``ktrace run --list`` and the checks of a request run on a machine with neither); a driver
imports what it needs when it is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable


@dataclass(frozen=True)
class Param:
    """One shape parameter of a kernel (validated on construction).

    Attributes:
        name: the keyword (``-s NAME=VALUE``).
        type: ``int``, ``float`` or ``str``.
        default: its value when not set.
        help: a few words for ``ktrace run --list``.
        choices: the allowed values (empty: any value of the type).
    """

    name: str
    type: type
    default: object
    help: str
    choices: tuple = ()

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"parameter name {self.name!r} is not an identifier")
        if self.type not in (int, float, str):
            raise ValueError(f"parameter {self.name}: type must be int, float or str, got {self.type!r}")
        if not isinstance(self.default, self.type) or isinstance(self.default, bool):
            raise ValueError(f"parameter {self.name}: default {self.default!r} is not a {self.type.__name__}")
        if self.choices and self.default not in self.choices:
            raise ValueError(f"parameter {self.name}: default {self.default!r} is not one of {self.choices}")

    def parse(self, text: str):
        """The value of ``text`` for this parameter.

        Raises:
            ValueError: not of the type, not among the choices, or negative (one line naming it).
        """
        try:
            v = self.type(text)
        except ValueError:
            raise ValueError(f"{self.name}={text!r}: expected {self.type.__name__}") from None
        if self.choices and v not in self.choices:
            raise ValueError(f"{self.name}={text!r}: one of {', '.join(map(str, self.choices))}")
        if self.type in (int, float) and v < 0:
            raise ValueError(f"{self.name}={text!r}: must not be negative")
        return v


@runtime_checkable
class Driver(Protocol):
    """One kernel's plan, inputs, step and check on this rank (what ``RunSpec.build`` returns).

    Attributes:
        heap: the symmetric heap the plan lives on (``ktrace.shmem.SymmetricHeap``).
        plan: the kernel's plan; if it has ``reset()``, ``ktrace run`` calls it after a step that
            a skipped notify left uneven.
    """

    heap: Any
    plan: Any

    def step(self) -> None:
        """Run one step of the kernel on this rank (collective: every rank steps together)."""

    def check(self) -> float:
        """The relative error of the last step's output against the reference.

        Raises:
            harness.MismatchError: above the kernel's tolerance (naming the rank).
        """


@dataclass(frozen=True)
class RunSpec:
    """What ``ktrace run`` knows about one kernel folder (validated on construction).

    Attributes:
        name: the folder's name, and the kernel's name on the command line.
        summary: one line for ``ktrace run --list``.
        params: the shape parameters, in the order ``--list`` shows them.
        build: ``build(dist, params, fault, seed, timeout_ns) -> Driver`` (see the module docstring).
        split: parameters that must be multiples of the number of ranks.
        validate: ``validate(params, world_size)`` raises ValueError (one line) for a parameter
            set the kernel cannot run; called after the generic checks. None: no further check.
    """

    name: str
    summary: str
    params: tuple[Param, ...]
    build: Callable[..., Driver]
    split: tuple[str, ...] = ()
    validate: Callable[[dict, int], None] | None = None

    def __post_init__(self):
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: a parameter is named twice in {names}")
        unknown = [k for k in self.split if k not in names]
        if unknown:
            raise ValueError(f"{self.name}: split names unknown parameters {unknown}")
        if any(self.param(k).type is not int for k in self.split):
            raise ValueError(f"{self.name}: only int parameters can split over the ranks")
        if not callable(self.build) or (self.validate is not None and not callable(self.validate)):
            raise ValueError(f"{self.name}: build (and validate, if given) must be callable")

    def param(self, name: str) -> Param:
        """The parameter called ``name``.

        Raises:
            ValueError: the kernel has no such parameter (the line lists those it has).
        """
        for p in self.params:
            if p.name == name:
                return p
        raise ValueError(f"{self.name} has no parameter {name!r}; it has: {', '.join(p.name for p in self.params)}")

    def defaults(self) -> dict:
        """Every parameter with its default value."""
        return {p.name: p.default for p in self.params}

    def resolve(self, overrides: dict, world_size: int) -> dict:
        """Every parameter: the defaults with ``overrides``, checked for ``world_size`` ranks.

        Raises:
            ValueError: an unknown parameter, a value of the wrong type, a size that does not
                split over the ranks, an int below 1, or what :attr:`validate` refuses (one line).
        """
        full = self.defaults()
        for k, v in overrides.items():
            p = self.param(k)
            if not isinstance(v, p.type) or isinstance(v, bool):
                raise ValueError(f"{k}={v!r}: expected {p.type.__name__}")
            full[k] = v
        for k in self.split:
            if full[k] % world_size:
                raise ValueError(f"{self.name}: {k}={full[k]} does not split over {world_size} ranks "
                                 f"(use a multiple of {world_size})")
        for k, v in full.items():
            if self.param(k).type is int and v < 1:
                raise ValueError(f"{k} must be >= 1, got {v}")
        if self.validate is not None:
            self.validate(full, world_size)
        return full

    def listing(self) -> str:
        """This kernel's lines of ``ktrace run --list``."""
        lines = [f"{self.name}: {self.summary}"]
        for p in self.params:
            ch = f" (one of {', '.join(map(str, p.choices))})" if p.choices else ""
            lines.append(f"    -s {p.name}={p.default}  {p.help}{ch}")
        return "\n".join(lines)
