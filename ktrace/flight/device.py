"""Device code of the flight recorder's host side: the probe that reads the device timer at a
moment the host chooses (``ktrace.flight.recorder``)."""

import triton
import triton.language as tl

import ktrace.language as kl


@triton.jit
def clock_probe(words):
    """Spin until the host sets ``words[0]`` (pinned host memory), then store the device timer in
    ``words[1]``. One program; the host brackets the moment with its own clock."""
    go = tl.load(words, volatile=True)
    while go == 0:
        go = tl.load(words, volatile=True)
    tl.store(words + 1, kl.now())
