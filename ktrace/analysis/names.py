"""Names a report gives to what the events point at: flags by heap allocation and index, regions
with the source line of the probe call that records them, and the name of time in no region.

A capture made with a heap (``ktrace.capture(heap=...)``) keeps the heap's allocations in its
metadata (``meta["heap"]["allocations"]``: name, offset, bytes, dtype, shape) and every capture
the source lines of its probe calls (``meta["sources"]``, see ``ktrace.regions.source_lines``):
a flag at heap offset ``0x4100c`` is then ``'ready'[3]``, and a wait is ``'tile_wait'
(kernel.py:109)``. Captures without them fall back to offsets and names.
"""

from __future__ import annotations

import math

import numpy as np

from ..auto.addresses import split_key
from ..text import printable

from ..regions import sources_of
from .trace import Trace

#: What attributions call time a workgroup spent in no span, wait or notify.
OUTSIDE = "(outside any region)"


def _allocations(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Sorted allocation starts, ends, element sizes and labels of the capture's heap (cached)."""
    def build():
        meta = trace.meta if isinstance(trace.meta, dict) else {}
        allocs = ((meta.get("heap") or {}).get("allocations") or []) if isinstance(meta.get("heap"), dict) else []
        rows = []
        for a in allocs if isinstance(allocs, list) else ():
            try:
                off, nb = int(a["offset"]), int(a["nbytes"])
                n = math.prod(int(s) for s in a.get("shape") or []) or 1
                label = repr(str(a["name"])[:80]) if a.get("name") else f"allocation#{int(a.get('index', len(rows)))}"
                if not (0 <= off < 1 << 62 and 0 <= nb < 1 << 62 and 0 < n < 1 << 62):  # (from a file: bounded)
                    continue
                rows.append((off, off + max(nb, 1), max(nb // n, 1), label))
            except (KeyError, TypeError, ValueError, OverflowError):
                continue
        rows.sort()
        if not rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), []
        s, e, item, lab = zip(*rows)
        return np.array(s, np.int64), np.array(e, np.int64), np.array(item, np.int64), list(lab)

    return trace.cached(("heap_allocations",), build)


def flag_names(trace: Trace, offsets) -> np.ndarray:
    """Per heap offset, ``'name'[index]`` of the allocation holding it (``+0x1008`` when the
    capture does not know its heap's allocations). Vectorised over the offsets; the text is made
    once per distinct offset."""
    offsets = np.asarray(offsets, np.int64).reshape(-1)
    out = np.empty(offsets.size, dtype=object)
    if offsets.size == 0:
        return out
    starts, ends, item, labels = _allocations(trace)
    u, inv = np.unique(offsets, return_inverse=True)
    texts = []
    k = np.searchsorted(starts, u, side="right") - 1 if starts.size else np.full(u.size, -1)
    spaces = _space_names(trace)
    for off, j in zip(u.tolist(), k.tolist()):
        where = split_key(off)
        if where is not None:  # a location a kernel traced without edits signalled through
            owner, space, at = where
            texts.append(f"{spaces.get(space, f'space {space}')}+{at:#x} on rank {owner}")
        elif j >= 0 and off < ends[j]:
            texts.append(f"{labels[j]}[{(off - int(starts[j])) // int(item[j])}]")
        else:
            texts.append(f"+{off:#x}")
    out[:] = np.array(texts, dtype=object)[inv.reshape(-1)]
    return out


def _space_names(trace: Trace) -> dict:
    """Space number -> its name (``ktrace.auto.addresses``), as the capture's metadata keeps them."""
    meta = trace.meta if isinstance(getattr(trace, "meta", None), dict) else {}
    table = meta.get("spaces") if isinstance(meta.get("spaces"), dict) else {}
    out = {}
    for k, v in table.items():
        try:
            out[int(k)] = printable(str(v))[:80]
        except (TypeError, ValueError):
            continue
    return out


def flag_name(trace: Trace, offset: int) -> str:
    """:func:`flag_names` of one offset."""
    return str(flag_names(trace, [offset])[0])


def barrier_name(trace: Trace, key: int) -> str:
    """An mbarrier by the ``flag`` of its LOCAL hand-offs (``schema.barrier_key``): ``'ready'[1]``."""
    key = int(key)
    return f"'{trace.region_name(key >> 32)}'[{key & 0xFFFFFFFF}]"


def region_source(trace: Trace, rid: int) -> str:
    """``"path:line"`` of the probe call(s) recording region ``rid`` (``""`` if unknown)."""
    table = trace.cached(("region_sources",), lambda: sources_of(trace.meta if isinstance(trace.meta, dict) else {}))
    return table.get(int(rid), "")


def region_label(trace: Trace, rid: int) -> str:
    """``'name' at path:line``, or ``'name'`` when the capture has no source lines."""
    src = region_source(trace, rid)
    name = trace.region_name(rid)
    return f"'{name}' at {src}" if src else f"'{name}'"
