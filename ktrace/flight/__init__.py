"""The flight recorder: see inside a kernel that is still running, or hung.

A capture opened with ``ktrace.capture(flight_recorder=True)`` traces its launches in ring mode
(``ktrace.schema``'s ring layout): each lane keeps its last N records and a NOW slot that says
which flag it is spinning on, in pinned host memory the device writes and the host reads with no
CUDA call. A watchdog thread writes a live dump (a capture file marked ``live``) when no lane has
recorded anything for a while and some lane is waiting; ``kill -USR1 <pid>`` (``ktrace dump``)
asks for one at any time. ``ktrace report`` on a dump starts with the wait-for graph
(``ktrace.analysis.live``).

Modules: :mod:`ktrace.flight.ring` (numpy only: ring -> dense buffer, NOW slots -> open waits),
:mod:`ktrace.flight.stream` (numpy only: draining rings while they are written, spill segments),
:mod:`ktrace.flight.recorder` (the arena, the watchdog, the signal, the dump, the drain thread)
and :mod:`ktrace.flight.device` (the clock probe kernel). See docs/flight.md. This
package's ``__init__`` imports nothing, so the analysis can read dumps without torch or triton.
"""
