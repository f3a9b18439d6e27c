"""Traced kernels inside CUDA graphs: every replay of a captured launch recorded as a launch.

A ``@ktrace.trace`` kernel launched while its stream is being captured into a CUDA graph
(``torch.cuda.graph``, ``make_graphed_callables``, or a side stream made part of a capture) gets
a *replay ring* instead of a one-off buffer: its buffer (the *stage*, at a fixed address, as the
graph keeps every argument of its capture) and, captured right after the kernel, a small commit
kernel that copies the stage into slot ``e % R`` of a ring of ``R`` slots, re-zeroes the stage and
advances the replay count ``e`` on the device. Each replay thus lands in its own slot with no
host work per replay; the host takes the slots when asked (``Session.drain_replays``) or when
the capture closes, counting exactly the replays the ring no longer held.

Modules: :mod:`ktrace.graphs.ring` (numpy only: which replays a ring holds, slots -> launch
buffers, their order), :mod:`ktrace.graphs.device` (the commit kernel),
:mod:`ktrace.graphs.recorder` (memory, capture detection, the commit's launch, reading rings
back) and :mod:`ktrace.graphs.inductor` (naming torch.compile's generated kernels). See
docs/graphs.md. This package's ``__init__`` imports nothing.
"""
