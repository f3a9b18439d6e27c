"""A kernel launched traced: the one traced launch, shared by ``@ktrace.trace`` and ``ktrace.auto``.

A :class:`Traced` kernel has a jit function that takes ``ktrace_buf`` and ``KTRACE`` (and
``KTRACE_LANES`` when traced per lane), a name, its lanes and its event slots per program.
:meth:`Traced.launch_in` launches it into an open capture session: the session gives the launch
its buffer (``Session.new_launch``: a slice of a zeroed arena, a flight recorder's ring, or a CUDA
graph's stage), the kernel gets the buffer and the gate, a profiler range names the launch when the
capture records a profiler too, and a launch captured into a CUDA graph is followed by its commit.

Who decides that a launch is traced, and with which session, is the caller's:
``ktrace.decorator.TracedKernel`` (the innermost open capture) and ``ktrace.auto.launch`` (the
launch hook's dispatcher). This module imports neither the session nor them.
"""

from __future__ import annotations

import inspect
from typing import Callable

#: A traced launch's profiler range is named ``ktrace <kernel> #<launch index>`` (``capture(profiler=)``).
PROFILE_RANGE_PREFIX = "ktrace "


def grid3(g) -> tuple[int, int, int]:
    """A launch grid (an int, or a tuple of 1-3 non-negative ints) as three extents."""
    if isinstance(g, int):
        g = (g,)
    g = tuple(int(x) for x in g)
    if not 1 <= len(g) <= 3 or any(x < 0 for x in g):
        raise ValueError(f"bad launch grid {g}")
    return (g + (1, 1))[:3]  # type: ignore[return-value]


def require_torch():
    """torch, or an ImportError that says which install records captures."""
    try:
        import torch
    except ImportError:
        raise ImportError("recording a capture needs torch and triton: pip install 'ktrace[gpu]' (analysing, merging "
                          "and viewing captures does not)") from None
    return torch


def device_of(args, kwargs) -> int:
    """The CUDA device a launch runs on: its first CUDA tensor argument's, else the current device."""
    torch = require_torch()

    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and a.is_cuda:
            return a.device.index if a.device.index is not None else torch.cuda.current_device()
    return torch.cuda.current_device()


class Traced:
    """What a session needs of a kernel to launch it traced (set by the subclass's constructor).

    Attributes:
        jit_fn: the jit function launched (it takes ``ktrace_buf`` and ``KTRACE``).
        name: the kernel's name in traces.
        lanes: lane names of a kernel traced per lane (``ktrace.gluon``); () for one lane.
        events_per_program: slots per program (an int, or a function of the launch's arguments).
        warm: (device, KTRACE) of the traced launches made outside any CUDA graph capture in this
            process: their binary is loaded, so a graph capture may launch it
            (``Session._graph_launch``).
    """

    jit_fn: object
    name: str
    lanes: tuple
    events_per_program: int | Callable[[dict], int]
    warm: set
    #: what each launch's record keeps besides (``ktrace.auto``: the addresses are raw)
    launch_meta: dict = {}

    def _signature(self, fn) -> None:
        self._sig = inspect.signature(fn)

    def arguments(self, args, kwargs) -> dict:
        """The launch's arguments by name (parameters' defaults filled in; launch options such as
        ``num_warps`` kept too), as a grid function or ``events_per_program`` gets them."""
        params = self._sig.parameters
        try:
            bound = self._sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in params})
        except TypeError as e:
            raise TypeError(f"{self.name}: {e}") from None
        bound.apply_defaults()
        meta = dict(bound.arguments)
        meta.update({k: v for k, v in kwargs.items() if k not in params})
        return meta

    def extra_kwargs(self) -> dict:
        """Launch arguments a traced launch passes besides the buffer and the gate."""
        return {}

    def untraced(self, grid, args, kwargs):
        """The launch as written, with no buffer (``KTRACE`` at the kernel's default, 0)."""
        return self.jit_fn[grid](*args, **kwargs)

    def launch_in(self, session, grid, args, kwargs):
        """Launch into ``session``: a buffer from it, the gate, the lanes; untraced when the grid
        is empty or the session records no more launches."""
        # the launch's arguments by name, for a grid or a slot count given as a function of them
        # (bound only then: binding costs about as much as the rest of a traced launch's host work)
        meta = self.arguments(args, kwargs) if callable(grid) or callable(self.events_per_program) else None
        g = grid3(grid(meta) if callable(grid) else grid)
        cap = session.events_per_program or (
            self.events_per_program(meta) if callable(self.events_per_program) else self.events_per_program
        )
        cap = int(cap)
        if cap <= 0:
            raise ValueError(f"{self.name}: events per program must be positive, got {cap}")
        device = device_of(args, kwargs)
        extra = {"lanes": self.lanes} if self.lanes else {}
        if self.launch_meta:
            extra["meta"] = self.launch_meta
        pl = session.new_launch(self, g, cap, device, **extra) if g[0] * g[1] * g[2] > 0 else None
        if pl is None:
            return self.untraced(grid, args, kwargs)
        gate = getattr(pl, "gate", 0) or cap
        if getattr(pl, "injected", False):  # (its buffer follows a delay table: ``ktrace.inject``)
            from .schema import inject_gate

            gate = inject_gate(gate)
        kwargs = dict(kwargs, ktrace_buf=pl.buffer, KTRACE=gate, **self.extra_kwargs())
        if self.lanes:
            kwargs["KTRACE_LANES"] = len(self.lanes)
        after = getattr(pl, "after", None)  # a launch captured into a CUDA graph: its commit follows it
        if getattr(session, "profiler", None) is not None:  # a named range around the launch: its CUPTI record by correlation
            import torch

            label = f"graph capture {pl.number}" if after is not None else f"#{pl.index}"
            with torch.profiler.record_function(f"{PROFILE_RANGE_PREFIX}{self.name} {label}"):
                out = self.jit_fn[grid](*args, **kwargs)
        else:
            out = self.jit_fn[grid](*args, **kwargs)
        if after is not None:
            after()
        else:
            self.warm.add((device, gate))
        return out
