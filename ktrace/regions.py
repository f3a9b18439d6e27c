"""Region names: id <-> name, with no list kept by hand.

A region's id is a hash of its name (``schema.region_id``), computed at compile time by the
probes, so the id is the same in every process. To turn ids back into names, the host needs the
names: they are registered here (a) when a probe is compiled in this process, and (b) by
:func:`scan_kernel`, which reads the source of a ``@triton.jit`` kernel and of every jit
function it calls for string constants and module-level string constants. (b) is what makes a
kernel loaded from Triton's on-disk cache, whose probes never ran through the compiler in
this process, still name its regions.

Pure Python: no torch, no triton import.
"""

from __future__ import annotations

import ast
import inspect
import logging
import textwrap
import threading

from .schema import region_id

log = logging.getLogger("ktrace")

_lock = threading.Lock()
_names: dict[int, str] = {}
_collisions: set[tuple[str, str]] = set()


def register(name: str) -> int:
    """Register a region name and return its id. Warns once if two names share an id."""
    rid = region_id(name)
    with _lock:
        old = _names.get(rid)
        if old is None:
            _names[rid] = name
        elif old != name and (old, name) not in _collisions:
            _collisions.add((old, name))
            log.warning(
                "region names %r and %r share the id 0x%06x; their events cannot be told apart, rename one", old, name, rid
            )
    return rid


def name_of(rid: int) -> str:
    """The registered name of a region id, or ``region#xxxxxx`` if none is known."""
    return _names.get(int(rid), f"region#{int(rid):06x}")


def table() -> dict[int, str]:
    """A copy of every registered id -> name."""
    with _lock:
        return dict(_names)


def _string_constants(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    value = getattr(obj, "value", None)  # tl.constexpr("name")
    if isinstance(value, str):
        return [value]
    return []


def scan_kernel(jit_fn, _seen: set | None = None) -> dict[int, str]:
    """Register every string a jit function (and the jit functions it calls) may use as a region name.

    Candidates are string literals in the source and module-level names bound to strings (or
    ``tl.constexpr`` strings). Registering a string that never names a region is harmless: only
    ids that appear in records are ever looked up.

    Returns:
        The id -> name pairs found.
    """
    seen = _seen if _seen is not None else set()
    found: dict[int, str] = {}
    fn = getattr(jit_fn, "fn", jit_fn)
    if id(fn) in seen or not callable(fn):
        return found
    seen.add(id(fn))
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
    except (OSError, TypeError, SyntaxError):
        return found
    glb = getattr(fn, "__globals__", {})
    for node in ast.walk(tree):
        cands: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            cands = [node.value]
        elif isinstance(node, ast.Name) and node.id in glb:
            val = glb[node.id]
            cands = _string_constants(val)
            if hasattr(val, "fn") and hasattr(val, "src") and val is not jit_fn:  # a JITFunction it calls
                found.update(scan_kernel(val, seen))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in glb:
            mod = glb[node.value.id]
            val = getattr(mod, node.attr, None)
            cands = _string_constants(val)
            if val is not None and hasattr(val, "fn") and hasattr(val, "src"):
                found.update(scan_kernel(val, seen))
        for s in cands:
            if s and len(s) <= 200 and s.isprintable():
                found[register(s)] = s
    return found
