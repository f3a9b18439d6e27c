"""``--suite handoff``: the ping-pong (and jittered), the tile pipeline (consumer next to the producer
and far from it) and the fan-in, each untraced (and its twin) and with each probe kind on."""

from __future__ import annotations

from . import cases as K
from . import common as C

#: Probe variants of each hand-off kernel: name -> compile-time switches. "untraced" is KTRACE=0;
#: every other variant is a traced launch (KTRACE = its slots) into a preallocated buffer.
#: The spin reading the error word every 8th read of the flag (``ks.wait(check_every=8)``).
CHECK8 = {"untraced, check 8": {"CHECK": 8}, "signals, check 8": {"WAITS": True, "NOTIFIES": True, "CHECK": 8},
          "all, check 8": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "CHECK": 8}}
#: The variants every hand-off case starts with: untraced (and its twin: the noise floor), tracing
#: on with no probe, then each kind of record alone.
BASIC = {
    "untraced": {},
    "untraced (twin)": {},
    "on, no probe": {},
    "waits": {"WAITS": True},
    "notifies": {"NOTIFIES": True},
    "signals": {"WAITS": True, "NOTIFIES": True},
    "spans": {"SPANS": 1},
}
PINGPONG_VARIANTS = {
    **BASIC,
    "marks": {"MARKS": True},
    "counters": {"COUNTERS": True},
    "all": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "MARKS": True},
    "all but marks": {"WAITS": True, "NOTIFIES": True, "SPANS": 1},
    "signals + marks": {"WAITS": True, "NOTIFIES": True, "MARKS": True},
    "spans + marks": {"SPANS": 1, "MARKS": True},
    "signals, immediate": {"WAITS": True, "NOTIFIES": True, "IMMEDIATE": True},
    "all, immediate": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "MARKS": True, "IMMEDIATE": True},
    "signals, ring": {"WAITS": True, "NOTIFIES": True, "RING": C.RING},
    "all, ring": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "MARKS": True, "RING": C.RING},
    **CHECK8,
    "all, check 8": {**CHECK8["all, check 8"], "MARKS": True},  # (the ping-pong's "all" marks too)
}

PIPELINE_VARIANTS = {
    **BASIC,
    "all": {"WAITS": True, "NOTIFIES": True, "SPANS": 1},
    "signals, immediate": {"WAITS": True, "NOTIFIES": True, "IMMEDIATE": True},
    "spans, immediate": {"SPANS": 1, "IMMEDIATE": True},
    "all, immediate": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "IMMEDIATE": True},
    "untraced, backoff": {"BACKOFF": 200},
    "signals, backoff": {"WAITS": True, "NOTIFIES": True, "BACKOFF": 200},
    "signals, ring": {"WAITS": True, "NOTIFIES": True, "RING": C.RING},
    "all, ring": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "RING": C.RING},
    "signals, buffer +1 MiB": {"WAITS": True, "NOTIFIES": True, "PAD": 1 << 20},
    "signals, lanes 128 KiB apart": {"WAITS": True, "NOTIFIES": True, "SLOTS": 4096},
    "signals, one slot (all dropped)": {"WAITS": True, "NOTIFIES": True, "SLOTS": 1},
    "spans, one slot (all but the first dropped)": {"SPANS": 1, "SLOTS": 1},
    "spans, producer only": {"SPANS": 1, "SIDE": 1},
    "spans, consumer only": {"SPANS": 1, "SIDE": 2},
    "spans' timer reads only": {"SPANS": 1, "TIMERS": True},
    **CHECK8,
}


#: The pipeline's variants timed again with the consumer on program ``SMs // 2`` (another part of
#: the GPU than program 0: two neighbouring SMs share bandwidth, and which of the two programs is
#: the slower then depends on the SM pair; docs/probes.md).
PIPELINE_FAR = ("untraced", "untraced (twin)", "on, no probe", "waits", "notifies", "signals", "spans", "all", "signals, ring",
                "all, ring", "signals, one slot (all dropped)")


FANIN_VARIANTS = {
    "untraced": {},
    "untraced (twin)": {},
    "signals": {"WAITS": True, "NOTIFIES": True},
    "spans": {"SPANS": 1},
    "all": {"WAITS": True, "NOTIFIES": True, "SPANS": 1},
    "signals, immediate": {"WAITS": True, "NOTIFIES": True, "IMMEDIATE": True},
    "untraced, backoff": {"BACKOFF": 200},
    "signals, backoff": {"WAITS": True, "NOTIFIES": True, "BACKOFF": 200},
    "signals, ring": {"WAITS": True, "NOTIFIES": True, "RING": C.RING},
    "all, ring": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "RING": C.RING},
    **CHECK8,
}


#: Pipeline shapes: (tiles, fp32 elements per tile).
PIPELINE_SHAPES = [(8, 8192), (32, 8192), (8, 65536), (32, 65536)]


#: The jittered ping-pong: each side waits a pseudo-random 0 to JITTER SM cycles per round (about 2 µs at
#: 1.98 GHz: several flag reads, so the polling phase averages out within a launch).
JITTER_CYCLES = 4096


def rows(dist, H, reps: int, warmup: int, quick: bool = False, parts: tuple = ("pingpong", "pipeline", "fanin"),
         shapes: list | None = None) -> list[dict]:
    """The hand-off-bound suite. At one rank (``dist.world_size == 1``) the peer is the rank itself:
    the ping-pong runs between two programs, the pipeline's producer and consumer are two programs
    of one GPU. ``parts``: which of the ping-pong, the pipeline and the fan-in to time; ``shapes``:
    the pipeline's (tiles, elements per tile), default ``PIPELINE_SHAPES`` (the first alone if ``quick``)."""
    import torch

    heap = K.heap_for(dist, H)
    out: list[dict] = []
    rounds = 200 if dist.world_size > 1 else 500
    if "pingpong" in parts:
        out += K.pingpong_case(dist, H, heap, PINGPONG_VARIANTS, rounds, reps, warmup, f"ping-pong x{rounds}")
        jit = {k: {**v, "JITTER": JITTER_CYCLES} for k, v in PINGPONG_VARIANTS.items() if "ring" not in k and "immediate" not in k}
        out += K.pingpong_case(dist, H, heap, jit, rounds, reps, warmup, f"ping-pong x{rounds}, jitter 0-{JITTER_CYCLES} cycles")
    pair = torch.cuda.get_device_properties(dist.device).multi_processor_count // 2  # a consumer far from program 0's SM
    far = {k: PIPELINE_VARIANTS[k] for k in PIPELINE_FAR}
    for tiles, elems in (shapes or (PIPELINE_SHAPES[:1] if quick else PIPELINE_SHAPES)) if "pipeline" in parts else ():
        out += K.pipeline_case(dist, H, heap, PIPELINE_VARIANTS, tiles, elems, reps, warmup, f"pipeline {tiles} x {elems // 1024}K fp32")
        out += K.pipeline_case(dist, H, heap, far, tiles, elems, reps, warmup, f"pipeline {tiles} x {elems // 1024}K fp32, consumer {pair}",
                               pair)
    if "fanin" in parts:
        out += K.fanin_case(dist, H, heap, FANIN_VARIANTS, 50, reps, warmup, "fan-in x50")
    return out
