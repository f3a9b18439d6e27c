"""Constants of the heap's device code and its readers: orderings, scopes, the error block.

Pure Python (no torch, no triton). The comparison codes a wait records (``Cmp``) belong to the
event layout and are defined in ``ktrace.schema``.
"""

from __future__ import annotations

import numpy as np

# the comparison codes are part of the event layout: defined in ktrace.schema, named here too
# for the heap's device code
from ..schema import CMP_NAMES, Cmp  # noqa: F401

#: Memory orderings accepted by the atomics (Triton's names).
SEMS = ("relaxed", "acquire", "release", "acq_rel")
#: Scopes accepted by the atomics; "block" is an alias of Triton's "cta".
SCOPES = {"block": "cta", "cta": "cta", "gpu": "gpu", "sys": "sys"}

# ---------------------------------------------------------------------------------------------
# The error block: the first bytes of every heap (inside symmetric.RESERVED_BYTES).
#
#   int32 [0]      number of waits that timed out on this rank since the last clear
#   int32 [1]      reserved (0)
#   int64 [1 + 8*i .. 8 + 8*i]   record i < ERROR_SLOTS of the first timed-out waits:
#                  ERROR_RECORD_DTYPE below
# ---------------------------------------------------------------------------------------------

#: Timed-out waits described in detail (later ones are only counted).
ERROR_SLOTS = 16
#: int64 words per error record.
ERROR_WORDS = 8
ERROR_RECORD_DTYPE = np.dtype(
    [
        ("program", "<i8"),  # linear program id of the waiting program
        ("flag", "<i8"),  # byte offset of the flag in the heap
        ("peer", "<i8"),  # the rank expected to set it
        ("expected", "<i8"),
        ("seen", "<i8"),  # the last value read
        ("cmp", "<i8"),
        ("waited", "<i8"),  # timer ticks from the start of the wait to giving up
        ("spins", "<i8"),
    ]
)
assert ERROR_RECORD_DTYPE.itemsize == ERROR_WORDS * 8
#: Bytes of the error block.
ERROR_BLOCK_BYTES = 8 + ERROR_SLOTS * ERROR_WORDS * 8
