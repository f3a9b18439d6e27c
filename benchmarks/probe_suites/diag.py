"""``--suite diag``: the ping-pong with raw operations at the hand-off instead of probes
(``handoff_kernels.DIAG_NAMES``): what a store or a timer read costs there."""

from __future__ import annotations

from . import cases as K

#: Ping-pong with raw operations at each hand-off instead of probes (untraced launches).
DIAG_VARIANTS = {"untraced": {}, **{f"diag {d}": {"DIAG": d} for d in range(1, 7)}}


def rows(dist, H, reps: int, warmup: int) -> list[dict]:
    return K.pingpong_case(dist, H, K.heap_for(dist, H), DIAG_VARIANTS, 200, reps, warmup, "ping-pong, raw ops")
