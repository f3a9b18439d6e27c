"""Delays injected at named agents and call sites of traced launches: the table a launch passes.

A report prices each root cause by replaying the capture without it (``ktrace.analysis.causes``).
To check such a prediction on the GPU, the same kind of change is made for real: a set delay at
the culprit (before its held-back notifies, in its heavy region, at its start), and the kernel's
time per launch is measured with and without it (``ktrace.verify``). The device side is the probe
core's (``ktrace.language``: ``kl.init``, ``kl.begin``, ``kl.delay`` and ``ks.notify`` are
injection points, compiled in only with ``schema.INJECT_GATE``); this module builds the table the
host writes before each launch's buffer (``schema``'s layout), so that changing a delay never
recompiles the kernel::

    inj = Injection((Delay(rank=1, site="notify", ns=20_000),))
    with ktrace.capture(inject=inj) as cap:     # each traced launch reads inj's rows for its rank
        step()
    cap.inject = Injection(())                  # the next launches: no delay (the same binary)

A row names a rank, a program (-1: every one), a lane (-1 or 0: a Triton kernel's one lane;
kernels traced per lane are not injected into) and a site: ``"launch"`` (the program's start), or
the name of a region (``kl.begin``: after the span starts, inside it) or of a notify
(``ks.notify(..., name=)``: before its release; "notify" by default).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import regions, schema

#: The site of a delay at each program's start.
LAUNCH = "launch"
#: Longest delay one row may set (ns): a second (a table is data a kernel spins on).
MAX_DELAY_NS = 1_000_000_000


@dataclass(frozen=True)
class Delay:
    """One delay: ``ns`` nanoseconds at ``site`` in ``program`` (lane ``lane``) of rank ``rank``."""

    rank: int
    site: str
    ns: int
    program: int = -1
    lane: int = -1

    def __post_init__(self):
        for name, lo in (("rank", 0), ("program", -1), ("lane", -1), ("ns", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo or v >= 1 << 31:
                raise ValueError(f"Delay.{name} must be an int in [{lo}, 2**31), got {v!r}")
        if self.ns > MAX_DELAY_NS:
            raise ValueError(f"Delay.ns must be at most {MAX_DELAY_NS} (a second), got {self.ns}")
        if self.lane > 0:
            raise ValueError("delays are injected into programs of one lane (lane -1 or 0)")
        if not isinstance(self.site, str) or not self.site:
            raise ValueError(f"Delay.site must be {LAUNCH!r} or a region or notify name, got {self.site!r}")

    @property
    def site_id(self) -> int:
        """The site as the device compares it: ``schema.INJECT_LAUNCH`` or the region's id."""
        return schema.INJECT_LAUNCH if self.site == LAUNCH else regions.register(self.site)


@dataclass(frozen=True)
class Injection:
    """The delays of a capture's launches (at most ``schema.INJECT_ROWS`` per rank).

    An empty one still compiles the injection points in: the baseline a delay is measured against
    runs the same binary.
    """

    delays: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "delays", tuple(self.delays))
        if not all(isinstance(d, Delay) for d in self.delays):
            raise TypeError("Injection.delays holds ktrace.inject.Delay values")
        per_rank: dict = {}
        for d in self.delays:
            per_rank[d.rank] = per_rank.get(d.rank, 0) + 1
        worst = max(per_rank.values(), default=0)
        if worst > schema.INJECT_ROWS:
            raise ValueError(f"at most {schema.INJECT_ROWS} delays per rank, got {worst}")

    def table(self, rank: int) -> np.ndarray:
        """The ``schema.INJECT_WORDS`` int64 words a launch of ``rank`` reads (``schema``'s layout)."""
        out = np.zeros(schema.INJECT_WORDS, np.int64)
        mine = [d for d in self.delays if d.rank == rank]
        out[0] = len(mine)
        for i, d in enumerate(mine):
            at = 1 + i * schema.INJECT_ROW_WORDS
            out[at:at + schema.INJECT_ROW_WORDS] = (d.program, d.lane, d.site_id, d.ns)
        return out

    def scaled(self, ns: int) -> "Injection":
        """The same rows with every delay set to ``ns`` (0: the baseline)."""
        return Injection(tuple(Delay(d.rank, d.site, int(ns), d.program, d.lane) for d in self.delays))

    def to_meta(self) -> list:
        """The rows as a capture's metadata keeps them."""
        return [{"rank": d.rank, "site": d.site, "ns": d.ns, "program": d.program, "lane": d.lane} for d in self.delays]


__all__ = ["LAUNCH", "MAX_DELAY_NS", "Delay", "Injection"]
