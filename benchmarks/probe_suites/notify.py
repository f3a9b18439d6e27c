"""``--suite notify``: the ping-pong with its NOTIFY record's timer reads moved (before the barrier,
one after the release, none): where a traced notify's cost comes from."""

from __future__ import annotations

from . import cases as K

#: The ping-pong's NOTIFY record with its timer reads moved (``handoff_kernels._notify_timed``):
#: where a traced notify's cost comes from (``--suite notify``).
NOTIFY_VARIANTS = {
    "untraced": {},
    "untraced (twin)": {},
    "notifies": {"NOTIFIES": True},
    "notifies, start read before the barrier": {"NOTIFIES": True, "NOTIFY_T0": 1},
    "notifies, one read after the release": {"NOTIFIES": True, "NOTIFY_T0": 2},
    "notifies, no timer read": {"NOTIFIES": True, "NOTIFY_T0": 3},
    "signals": {"WAITS": True, "NOTIFIES": True},
    "signals, start read before the barrier": {"WAITS": True, "NOTIFIES": True, "NOTIFY_T0": 1},
    "signals, one read after the release": {"WAITS": True, "NOTIFIES": True, "NOTIFY_T0": 2},
    "signals, no timer read": {"WAITS": True, "NOTIFIES": True, "NOTIFY_T0": 3},
}


def rows(dist, H, reps: int, warmup: int) -> list[dict]:
    rounds = 200 if dist.world_size > 1 else 500
    return K.pingpong_case(dist, H, K.heap_for(dist, H), NOTIFY_VARIANTS, rounds, reps, warmup, f"ping-pong x{rounds}, notify timer reads")
