"""The flight recorder: see inside a kernel that is still running, or hung.

A capture opened with ``ktrace.capture(flight_recorder=True)`` traces its launches in ring mode
(``ktrace.schema``'s ring layout): each lane keeps its last N records and a NOW slot that says
which flag it is spinning on, in pinned host memory the device writes and the host reads with no
CUDA call. A watchdog thread writes a live dump (a capture file marked ``live``) when no lane has
recorded anything for a while and some lane is waiting; ``kill -USR1 <pid>`` (``ktrace dump``)
asks for one at any time. ``ktrace report`` on a dump starts with the wait-for graph
(``ktrace.analysis.live``).

Modules: :mod:`ktrace.flight.ring` (numpy only: ring -> dense buffer, NOW slots -> open waits)
and :mod:`ktrace.flight.recorder` (the pinned arena, the watchdog, the signal, the dump). This
package's ``__init__`` imports nothing, so the analysis can read dumps without torch or triton.
"""
