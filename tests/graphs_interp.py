"""Run ktrace's replay commit kernel (``ktrace.graphs.device.replay_commit``) in Triton's
interpreter, on the CPU: what a captured launch's stage holds at each replay goes in, the replay
ring as the commits leave it comes out. Used by ``tests/test_graphs.py``::

    TRITON_INTERPRET=1 python -m tests.graphs_interp IN.npz OUT.npz

``IN.npz``: ``stages`` (replays x nbytes, uint8: the stage as each replay's traced kernel leaves
it; the caller writes it over what the previous commit left), ``ring_slots``, ``zero_from`` (words), ``seed`` (the ring starts as random words: it is never
zeroed on a GPU either) and ``drain_after`` (replay counts after which the ring is copied out, as
``Session.drain_replays`` does). ``OUT.npz``: ``key``, ``programs``, ``ring`` (the ring's words
after all replays), ``drains`` (its words at each drain, stacked), ``stage_after`` (the stage after
each commit) and ``mirror`` (the mirror word after each commit).
"""

from __future__ import annotations

import os
import sys

import numpy as np


def main(src: str, dst: str) -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("run with TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    import torch

    from ktrace.graphs import ring as gring
    from ktrace.graphs.device import COMMIT_BLOCK, replay_commit

    a = np.load(src)
    stages = a["stages"]
    nbytes = stages.shape[1]
    n_words = -(-nbytes // 8)
    programs = -(-n_words // COMMIT_BLOCK)
    shape = gring.RingShape(ring_slots=int(a["ring_slots"]), programs=programs, nbytes=nbytes)
    rng = np.random.default_rng(int(a["seed"]))
    ring = torch.from_numpy(rng.integers(-(1 << 62), 1 << 62, shape.words, dtype=np.int64))
    stage = torch.zeros(gring.slot_words(nbytes), dtype=torch.int64)
    key = (1 << 62) | int(rng.integers(0, 1 << 62))
    drain_after = set(int(x) for x in a["drain_after"])
    drains, after, mirror = [], [], []
    for r in range(len(stages)):
        stage.numpy().view(np.uint8)[:nbytes] = stages[r]  # what replay r's traced kernel left there
        replay_commit[(programs,)](stage, ring, ring[shape.mirror_at:], key, n_words, int(a["zero_from"]), shape.keys_at,
                                   shape.slots_at, shape.slot_words, shape.ring_slots, BLOCK=COMMIT_BLOCK)
        after.append(stage.numpy().view(np.uint8)[:nbytes].copy())
        mirror.append(int(ring[shape.mirror_at]))
        if r + 1 in drain_after:
            drains.append(ring.numpy().copy())
    np.savez(dst, key=np.int64(key), programs=programs, ring=ring.numpy(), stage_after=np.stack(after),
             mirror=np.array(mirror, np.int64), drains=np.stack(drains) if drains else np.zeros((0, shape.words), np.int64))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
