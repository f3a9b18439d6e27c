"""Finding the root causes: every registered kind's ``detect``, each cause priced by a replay
without it (``model.replay``), and the causes as a table."""

from __future__ import annotations

import math

import numpy as np

from ...text import ranges_text
from ..trace import Trace
from .model import CAUSE_DTYPE, Cause, CauseConfig, Context, price_cause, sample_codes, launch_makespans, replay_model
from .registry import MODULES


def root_causes(trace: Trace, config: CauseConfig = CauseConfig(), *, workgroups: np.ndarray | None = None,
                timeouts: np.ndarray | None = None, missing: np.ndarray | None = None,
                min_excess: float = 0.5) -> list[Cause]:
    """Find the root causes in a capture and price each by a replay without it.

    Args:
        trace: the prepared capture.
        config: thresholds and replay limits.
        workgroups: ``load.workgroups(trace)`` (computed when not given).
        timeouts, missing: ``hangs.timeouts`` and ``hangs.missing_notifies`` (computed when not
            given).
        min_excess: ranks count as unevenly loaded when one rank's median workgroup works
            ``1 + min_excess`` times another's (``LoadConfig.min_excess``).

    Returns:
        The causes: hangs first, then by saving, then by the time they put in (``excess_ns``).
    """
    return find(context(trace, config, workgroups=workgroups, timeouts=timeouts, missing=missing,
                        min_excess=min_excess))


def context(trace: Trace, config: CauseConfig = CauseConfig(), *, workgroups=None, timeouts=None, missing=None,
            min_excess: float = 0.5) -> Context:
    """The :class:`Context` the kinds read (tables not given are computed)."""
    from .. import hangs, load

    if workgroups is None:
        workgroups = load.workgroups(trace)
    if timeouts is None:
        timeouts = hangs.timeouts(trace)
    if missing is None:
        missing = hangs.missing_notifies(trace, timeouts)
    return Context(trace, config, workgroups, timeouts, missing, min_excess)


def find(ctx: Context) -> list[Cause]:
    """Every registered kind's causes, each priced on its own sample of launches."""
    found = [c for m in MODULES for c in m.detect(ctx) if c.launches.size]
    samples = [sample_codes(np.unique(c.launches), ctx.config.max_replay_launches) for c in found]
    if found:  # one model of every launch some cause is priced on
        m = replay_model(ctx.trace, np.unique(np.concatenate(samples)))
        for c, smp in zip(found, samples):
            price_cause(m, c, smp, ctx.config)
    found.sort(key=lambda c: (c.kind != "hang", -c.saving_ns, -c.excess_ns))
    return found


def causes_table(trace: Trace, found: list[Cause]) -> np.ndarray:
    """The root causes as a table (``CAUSE_DTYPE``), in the order given."""
    lids, spans = launch_makespans(trace)
    total = float(spans.sum())
    out = np.zeros(len(found), CAUSE_DTYPE)
    for i, c in enumerate(found):
        d = c.detail
        progs = getattr(d, "programs", ())
        if isinstance(progs, dict):
            progs = "; ".join(f"rank {r}: {ranges_text(p, 3)}" for r, p in progs.items())
        else:
            progs = ranges_text(progs, 3)
        rid = getattr(d, "region_id", None)
        region = getattr(d, "region", trace.region_name(rid) if rid is not None and rid >= 0 else "")
        out[i] = (c.kind, c.rank, tuple(c.ranks), c.launches.size, lids.size, c.saving_ns,
                  c.saving_ns / max(c.launches.size, 1), c.saving_ns / total if total > 0 else math.nan,
                  c.saving_launches, c.sampled, getattr(d, "magnitude_ns", math.nan), progs,
                  ranges_text(getattr(d, "rounds", ()), 3), region, c.waiting_removed_ns, c.waits_affected)
    return out
