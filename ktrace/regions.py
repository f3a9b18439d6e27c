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
from .text import printable

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


# ---------------------------------------------------------------------------------------------
# where in the kernel source each region is recorded
# ---------------------------------------------------------------------------------------------

#: Modules whose probe calls are not a user's call site (their ``name`` is a parameter passed in).
_LIBRARY_MODULES = ("ktrace.language", "ktrace.shmem.language")


def display_path(fn) -> str:
    """The kernel's source file as the repository or package names it (``pkg/mod.py``), never an
    absolute path of the machine it ran on (captures travel)."""
    try:
        path = inspect.getsourcefile(fn) or ""
    except TypeError:
        return "?"
    mod = getattr(fn, "__module__", "") or ""
    rel = mod.replace(".", "/") + ".py"
    norm = path.replace("\\", "/")
    if mod and mod != "__main__" and norm.endswith("/" + rel):
        return rel
    return norm.rsplit("/", 1)[-1] or "?"


def _name_argument(callee, call: ast.Call):
    """The AST node (or default value) a call passes as the jit function's ``name`` parameter."""
    try:
        params = list(inspect.signature(callee.fn).parameters.values())
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params]
    if "name" not in names:
        return None
    for kw in call.keywords:
        if kw.arg == "name":
            return kw.value
    i = names.index("name")
    if i < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: i + 1]):
        return call.args[i]
    default = params[i].default
    return None if default is inspect.Parameter.empty else default


def _resolve_string(node, glb: dict) -> str | None:
    """A region name given as a literal, a module-level (constexpr) string or ``module.NAME``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in glb:
        found = _string_constants(glb[node.id])
        return found[0] if found else None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in glb:
        found = _string_constants(getattr(glb[node.value.id], node.attr, None))
        return found[0] if found else None
    if not isinstance(node, ast.AST):  # a parameter's default value
        found = _string_constants(node)
        return found[0] if found else None
    return None


def _callee(func: ast.AST, glb: dict):
    if isinstance(func, ast.Name):
        return glb.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in glb:
        return getattr(glb[func.value.id], func.attr, None)
    return None


def _is_jit(obj) -> bool:
    return obj is not None and hasattr(obj, "fn") and hasattr(obj, "src")


def source_lines(jit_fn, _seen: set | None = None) -> dict[int, list[str]]:
    """Where each region is recorded: region id -> ``["path:line", ...]`` of the probe calls that
    name it, read from the source of a ``@triton.jit`` kernel and of the jit functions it calls.

    A probe call is a call of a jit function with a ``name`` parameter (``kl.begin``, ``kl.mark``,
    ``kl.counter``, ``ks.wait``, ``ks.notify``, a helper that forwards a ``name``), whose name is a
    literal or a module-level string; a call that leaves ``name`` out records the parameter's
    default (``"wait"``, ``"notify"``). Calls inside ktrace's own device modules are not call
    sites (they forward their caller's name). Several calls naming one region give several
    lines. Host-side only: nothing is added to the kernel.

    Returns:
        region id -> sorted, distinct ``"path:line"`` strings; ``path`` is the kernel module's
        path relative to its package root (``pkg/kernel.py``), or the file's name.
    """
    seen = _seen if _seen is not None else set()
    out: dict[int, list[str]] = {}
    fn = getattr(jit_fn, "fn", jit_fn)
    if id(fn) in seen or not callable(fn):
        return out
    seen.add(id(fn))
    if getattr(fn, "__module__", "") in _LIBRARY_MODULES:
        return out
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return out
    glb = getattr(fn, "__globals__", {})
    path = display_path(fn)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = _callee(node.func, glb)
        if not _is_jit(callee) or callee is jit_fn:
            continue
        arg = _name_argument(callee, node)
        name = _resolve_string(arg, glb) if arg is not None else None
        if name:
            out.setdefault(register(name), []).append(f"{path}:{first + node.lineno - 1}")
        for rid, where in source_lines(callee, seen).items():
            out.setdefault(rid, []).extend(where)
    return {rid: sorted(set(w), key=_line_order) for rid, w in out.items()}


def _line_order(where: str) -> tuple:
    path, _, line = where.rpartition(":")
    return (path, int(line) if line.isdigit() else 0)


def source_table(kernels) -> dict[str, list[str]]:
    """``source_lines`` of several kernels merged, keyed by the region id as text (what a
    capture's metadata stores under ``"sources"``)."""
    merged: dict[int, set] = {}
    for k in kernels:
        for rid, where in source_lines(k).items():
            merged.setdefault(rid, set()).update(where)
    return {str(rid): sorted(w, key=_line_order) for rid, w in sorted(merged.items())}


def sources_of(meta) -> dict[int, str]:
    """Region id -> ``"path:line"`` (several lines of one file: ``"path:12, 40"``) from a
    capture's metadata (``Capture.meta``; a capture or anything with a ``meta`` dict works too).
    Empty when the capture recorded no source lines (captures made before they were recorded)."""
    meta = getattr(meta, "meta", meta) or {}
    table = meta.get("sources") if isinstance(meta, dict) else None
    out: dict[int, str] = {}
    if not isinstance(table, dict):
        return out
    for key, where in table.items():
        try:
            rid = int(key)
        except (TypeError, ValueError):
            continue
        if isinstance(where, str):
            where = [where]
        by_file: dict[str, list[str]] = {}
        for w in where or ():
            path, _, line = printable(str(w)).rpartition(":")  # (from a file: escaped for the terminal)
            by_file.setdefault(path, []).append(line)
        out[rid] = "; ".join(f"{p}:{', '.join(ls)}" for p, ls in by_file.items())
    return out


def source_of(meta, rid: int) -> str:
    """``"path:line"`` of the probe call(s) that record region ``rid`` (see :func:`sources_of`),
    or ``""`` when the capture does not say. For a trace argument: one lookup per region id."""
    return sources_of(meta).get(int(rid), "")
