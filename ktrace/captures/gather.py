"""Gather every rank's capture to one rank through ``torch.distributed`` (torch imported lazily)."""

from __future__ import annotations

import logging

from .file import Capture, CaptureError, capture_from_bytes, capture_to_bytes, merge_captures

log = logging.getLogger("ktrace")


def gather(capture: Capture, *, dst: int = 0, group=None) -> Capture | None:
    """Collect per-rank captures on rank ``dst`` (a collective: every rank of ``group`` calls it).

    Each rank sends the bytes of its capture file (``gather_object``); ``dst`` merges them
    (:func:`ktrace.captures.merge_captures`: the clock model is fitted by the caller,
    ``ktrace.clock.attach_clock``). A rank whose bytes do not read back is left out with a
    warning and the result is marked partial.

    Args:
        capture: this rank's capture (e.g. ``session.to_capture()``).
        dst: the rank that receives the merged capture.
        group: the process group (default: the world).

    Returns:
        The merged capture on ``dst``; None on the other ranks.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("ktrace.captures.gather.gather needs torch.distributed to be initialised")
    me = dist.get_rank(group)
    world = dist.get_world_size(group)
    payload = capture_to_bytes(capture)
    received = [None] * world if me == dst else None
    dist.gather_object(payload, received, dst=dst, group=group)
    if me != dst:
        return None
    caps = []
    for r, data in enumerate(received):
        try:
            caps.append(capture_from_bytes(data, name=f"rank {r}'s capture"))
        except CaptureError as e:
            log.warning("[rank %d] ktrace gather: %s; left out", me, e)
    return merge_captures(caps, world_size=max(world, capture.world_size))
