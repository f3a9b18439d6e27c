"""What a capture with ``auto=`` traces, and how (``ktrace.capture(auto=...)``, ``ktrace record``)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

#: Slots per program of a kernel traced without edits: the program span, a span per iteration of
#: its top-level loops, two per wait and per notify. Events past it are dropped and counted.
DEFAULT_EVENTS = 64
#: How long a traced spin polls before it gives up and records a timed-out wait (ns): a signal
#: that never comes then ends the kernel instead of hanging it (the untraced kernel is unbounded).
DEFAULT_WAIT_TIMEOUT_NS = 5_000_000_000


@dataclass(frozen=True)
class AutoConfig:
    """Which kernels a capture traces without edits, and how.

    Attributes:
        kernels: patterns (``fnmatch``) matched against a kernel's name and its
            ``module.qualname``; empty: every ``@triton.jit`` kernel launched.
        events_per_program: slots each program of a traced launch owns.
        wait_timeout_ns: a traced spin's deadline (0: none; the untraced kernel never has one).
        symmetric_memory: record where torch symmetric-memory rendezvous map each rank's memory
            (what pairs waits and notifies across ranks).
    """

    kernels: tuple[str, ...] = ()
    events_per_program: int = DEFAULT_EVENTS
    wait_timeout_ns: int = DEFAULT_WAIT_TIMEOUT_NS
    symmetric_memory: bool = True

    def __post_init__(self):
        if isinstance(self.kernels, str):
            object.__setattr__(self, "kernels", tuple(p.strip() for p in self.kernels.split(",") if p.strip()))
        if not all(isinstance(p, str) and p for p in self.kernels):
            raise ValueError(f"kernels: patterns must be non-empty strings, got {self.kernels!r}")
        if isinstance(self.events_per_program, bool) or not isinstance(self.events_per_program, int) or \
                not 1 <= self.events_per_program <= 1 << 20:
            raise ValueError(f"events_per_program must be an int in [1, {1 << 20}], got {self.events_per_program!r}")
        if isinstance(self.wait_timeout_ns, bool) or not isinstance(self.wait_timeout_ns, int) or \
                not 0 <= self.wait_timeout_ns < 1 << 62:
            raise ValueError(f"wait_timeout_ns must be a non-negative int, got {self.wait_timeout_ns!r}")

    def matches(self, jit_fn) -> bool:
        """Whether a kernel is one to trace."""
        if not self.kernels:
            return True
        fn = getattr(jit_fn, "fn", jit_fn)
        names = (getattr(fn, "__name__", ""), f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}")
        return any(fnmatch.fnmatchcase(n, p) for p in self.kernels for n in names)

    def to_json(self) -> dict:
        return {"kernels": list(self.kernels), "events_per_program": self.events_per_program,
                "wait_timeout_ns": self.wait_timeout_ns, "symmetric_memory": self.symmetric_memory}

    @classmethod
    def from_json(cls, d: dict) -> "AutoConfig":
        return cls(kernels=tuple(d.get("kernels") or ()), events_per_program=int(d.get("events_per_program", DEFAULT_EVENTS)),
                   wait_timeout_ns=int(d.get("wait_timeout_ns", DEFAULT_WAIT_TIMEOUT_NS)),
                   symmetric_memory=bool(d.get("symmetric_memory", True)))


def config_of(auto) -> AutoConfig:
    """``capture(auto=...)``'s value as an :class:`AutoConfig`: True, a pattern string, a config."""
    if isinstance(auto, AutoConfig):
        return auto
    if auto is True:
        return AutoConfig()
    if isinstance(auto, str):
        return AutoConfig(kernels=auto)
    raise TypeError(f"auto: True, a kernel name pattern or an AutoConfig, got {auto!r}")
