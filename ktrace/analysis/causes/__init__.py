"""The causal model of a capture: why each wait waited, the root causes, and what each costs.

``model``: the replay of the notify -> wait graph over agents, the split of every wait's time,
the :class:`Cause` / :class:`Claim` / :class:`Description` types. One module per kind of root
cause (``hang``, ``late_launch``, ``late_start``, ``late_notifies``, ``straggler``,
``uneven_work``, ``uneven_ranks``, ``slow_link``), listed once in ``registry``; ``find`` runs them and prices each.
"""

from .model import (
    CAUSE_DTYPE,
    WAIT_CAUSE_DTYPE,
    Cause,
    CauseConfig,
    Changes,
    Claim,
    Context,
    Description,
    ReplayResult,
    kernel_time_total,
    launch_makespans,
    launch_total,
    one_way_latency_ns,
    one_way_pairs,
    replay,
    replay_model,
    sample_launches,
    wait_cause_totals,
    wait_causes,
)
from .find import causes_table, context, find, root_causes
from .registry import BY_KIND, KINDS, MODULES

__all__ = ["BY_KIND", "CAUSE_DTYPE", "KINDS", "MODULES", "WAIT_CAUSE_DTYPE", "Cause", "CauseConfig", "Changes", "Claim",
           "Context", "Description", "ReplayResult", "causes_table", "context", "find", "kernel_time_total", "launch_total",
           "launch_makespans", "one_way_latency_ns", "one_way_pairs", "replay", "replay_model", "root_causes", "sample_launches",
           "wait_cause_totals", "wait_causes"]
