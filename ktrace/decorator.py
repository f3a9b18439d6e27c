"""The ``@ktrace.trace`` decorator, and the kernel source it prepares for deferred records.

Usage::

    @ktrace.trace(events_per_program=4)
    @triton.jit
    def copy(x, y, n, BLOCK: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        ...

    copy[grid](x, y, n, BLOCK=1024)          # untraced: exactly the plain Triton launch

    with ktrace.capture() as cap:             # traced: the innermost open capture records it
        copy[grid](x, y, n, BLOCK=1024)

:class:`TracedKernel` launches, with a capture open (``ktrace.session``), a prepared copy of the
kernel (:func:`_deferring_kernel`: each top-level ``kl.init`` made ``kl.init_deferred`` and
``kl.finish`` appended, by editing the source text) through the one traced launch
(``ktrace.traced.Traced.launch_in``); with none, the kernel as written.
"""

from __future__ import annotations

import ast
import functools
import inspect
import logging
import sys
from typing import Callable

from . import regions, schema, session
from .traced import Traced

log = logging.getLogger("ktrace")

#: Default event slots per program when a kernel's decorator does not say.
DEFAULT_EVENTS_PER_PROGRAM = 16


# ---------------------------------------------------------------------------------------------
# the kernel's source, prepared for deferred records
# ---------------------------------------------------------------------------------------------


def _global_name(mod) -> str:
    """The name under which a prepared kernel's module sees a probe module (set in its globals)."""
    return "_" + mod.__name__.replace(".", "_") + "_"


class KernelShapeError(TypeError):
    """A kernel ``@ktrace.trace`` cannot end with a flush of its tracer (an early ``return``)."""


def _init_module(node, g: dict):
    """The probe module whose ``init`` ``node`` calls, as the kernel's names resolve it, if that
    module supports deferred records (``__ktrace_deferrable__``: it has ``init_deferred`` and
    ``finish``; ``ktrace.language`` does, and a module of probes for another DSL may); else None."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr == "init" and isinstance(f.value, ast.Name):
        mod = g.get(f.value.id)
    elif isinstance(f, ast.Name):
        mod = sys.modules.get(getattr(g.get(f.id), "__module__", None) or "")
        if mod is None or getattr(mod, "init", None) is not g.get(f.id):
            return None
    else:
        return None
    return mod if getattr(mod, "__ktrace_deferrable__", False) else None


#: ``ktrace.language`` probes that read a tracer without writing a record (no result to keep).
_READERS = ("begin", "timestamp")


def _always_off(call) -> bool:
    """``kl.init(buf, 0)``: a tracer that is off whatever the launch (nothing to defer)."""
    gate = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "KTRACE"), None)
    return isinstance(gate, ast.Constant) and gate.value == 0


def _callee(node, scope: dict):
    """The Python object a call's function expression names in ``scope`` (None if unknown)."""
    f = node.func
    if isinstance(f, ast.Name):
        return scope.get(f.id)
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return getattr(scope.get(f.value.id), f.attr, None)
    return None


def _assigned_to(parents: dict, call, name: str) -> bool:
    """Whether the call's result is assigned back to ``name`` (``kt = f(kt)``, ``kt, x = f(kt)``)
    or returned (``return f(kt)`` in a helper: its caller, checked in turn, assigns it back; a
    kernel itself may not return)."""
    st = parents.get(id(call))
    if isinstance(st, ast.Return):
        return True
    if not isinstance(st, ast.Assign):
        return False
    for t in st.targets:
        for n in ast.walk(t):
            if isinstance(n, ast.Name) and n.id == name:
                return True
    return False


def _tracer_threaded(fn, name: str, depth: int = 0, seen=None) -> str | None:
    """Why the tracer ``name`` of jit function ``fn`` is not threaded through every call, else None.

    Deferred records live in the tracer value: a call that takes it and whose result is not
    assigned back to it (``helper(kt, ...)``) would drop the records still pending when the
    callee returns. Calls into ktrace's own device modules are trusted; a user jit function the
    tracer is passed to is checked the same way, recursively.
    """
    seen = set() if seen is None else seen
    if (id(fn), name) in seen or depth > 16:
        return None
    seen.add((id(fn), name))
    fdef = ast.parse(fn.src).body[0]
    scope = {**fn.__globals__, **inspect.getclosurevars(fn.fn).nonlocals}
    parents = {}
    for st in ast.walk(fdef):
        if isinstance(st, (ast.Assign, ast.Return)) and isinstance(st.value, ast.Call):
            parents[id(st.value)] = st
    for call in ast.walk(fdef):
        if not isinstance(call, ast.Call):
            continue
        pos = [i for i, a in enumerate(call.args) if isinstance(a, ast.Name) and a.id == name]
        kws = [k.arg for k in call.keywords if isinstance(k.value, ast.Name) and k.value.id == name]
        if not pos and not kws:
            continue
        target = _callee(call, scope)
        mod = getattr(target, "__module__", "") or ""
        if mod.startswith("ktrace.") and getattr(target, "__name__", "") in _READERS:
            continue
        if not _assigned_to(parents, call, name):
            where = f"{fn.__name__} line {fn.starting_line_number + call.lineno - 1}"
            return f"{where} passes the tracer to {ast.unparse(call.func)} without keeping its result"
        if mod.startswith("ktrace.") or not hasattr(target, "src"):
            continue
        params = list(inspect.signature(target.fn).parameters)
        for p in [params[i] for i in pos if i < len(params)] + [k for k in kws if k in params]:
            why = _tracer_threaded(target, p, depth + 1, seen)
            if why:
                return why
    return None


def _deferring_kernel(jit_fn):
    """The kernel with its tracers' records kept off the critical path, and flushed at its end.

    Each top-level ``name = kl.init(...)`` of the kernel's body becomes
    ``kl.init_deferred(...)`` and ``kl.finish(name)`` is appended to the body, by editing the
    source text (line numbers, hence error messages and the recorded source lines, unchanged).
    The result is a new JIT function of the same type and options (the original, and its
    compiled kernels, are left as they were). A kernel without such a call is returned as is, and
    so is one that passes a tracer to a function whose result it does not assign back to it (the
    records pending at that function's end would be lost): its records are stored by their
    probes, as written (:func:`_tracer_threaded` says why, in the log).

    Raises:
        KernelShapeError: the kernel has a ``return`` statement: the flush could not be placed
            on every path out of it (one line, at decoration).
    """
    src = jit_fn.src
    fdef = ast.parse(src).body[0]
    g = jit_fn.__globals__
    scope = {**g, **inspect.getclosurevars(jit_fn.fn).nonlocals}
    tracers = [(st.targets[0].id, st.value, _init_module(st.value, scope)) for st in fdef.body
               if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
               and _init_module(st.value, scope) is not None and not _always_off(st.value)]
    if not tracers:
        return jit_fn
    for name, _, _ in tracers:
        why = _tracer_threaded(jit_fn, name)
        if why:  # (correct as written: each record stored by its probe, on the critical path)
            log.info("ktrace: kernel %s keeps its records immediate: %s", fdef.name, why)
            return jit_fn
    for node in ast.walk(fdef):
        if isinstance(node, ast.Return):
            raise KernelShapeError(
                f"@ktrace.trace: kernel {fdef.name} returns at line {jit_fn.starting_line_number + node.lineno - 1}: "
                "its trace could not be flushed on that path; end the kernel without `return` (put the rest under `if`)")
    lines = [ln.encode() for ln in src.splitlines(keepends=True)]
    for _, call, mod in sorted(tracers, key=lambda t: (t[1].func.lineno, t[1].func.col_offset), reverse=True):
        f, i = call.func, call.func.lineno - 1
        if f.end_lineno != f.lineno:
            return jit_fn  # (a call name split over lines: left as written, records stored at once)
        lines[i] = lines[i][: f.col_offset] + f"{_global_name(mod)}.init_deferred".encode() + lines[i][f.end_col_offset :]
    end = fdef.end_lineno
    if not lines[end - 1].endswith(b"\n"):
        lines[end - 1] += b"\n"
    indent = " " * fdef.body[0].col_offset
    tail = [f"{indent}{_global_name(mod)}.finish({name})\n".encode() for name, _, mod in tracers]
    new_src = b"".join(lines[:end] + tail + lines[end:]).decode()
    for _, _, mod in tracers:
        if g.setdefault(_global_name(mod), mod) is not mod:
            raise KernelShapeError(f"@ktrace.trace: the name {_global_name(mod)} is taken in module {jit_fn.__module__}")
    new = type(jit_fn)(
        jit_fn.fn, version=jit_fn.version, do_not_specialize=jit_fn.do_not_specialize,
        do_not_specialize_on_alignment=jit_fn.do_not_specialize_on_alignment, debug=jit_fn.debug,
        noinline=jit_fn.noinline, repr=jit_fn._repr, launch_metadata=jit_fn.launch_metadata,
    )
    new.pre_run_hooks = list(jit_fn.pre_run_hooks)
    new._unsafe_update_src(new_src)
    new.ktrace_original = jit_fn
    return new


# ---------------------------------------------------------------------------------------------
# the decorator
# ---------------------------------------------------------------------------------------------


class TracedKernel(Traced):
    """A ``@triton.jit`` (or ``@gluon.jit``) kernel that records events when a capture is active.

    Launch it exactly like the kernel (``k[grid](...)``). When no capture is active and
    ``KTRACE`` is not set in the environment, the launch is the plain Triton launch, with
    ``KTRACE=0`` (the kernel's default): no buffer, no probe code.

    The kernel launched is a prepared copy (:func:`_deferring_kernel`): its tracers keep each
    WAIT record and the last span, instant or counter in registers until a release, the next
    wait or the kernel's end, where ``kl.finish`` (added by the decorator) stores them. A kernel
    that returns early is refused (:class:`KernelShapeError`).
    """

    def __init__(self, jit_fn, events_per_program: int | Callable[[dict], int] = DEFAULT_EVENTS_PER_PROGRAM, name: str | None = None,
                 lanes=None):
        if not hasattr(jit_fn, "arg_names") or not hasattr(jit_fn, "run"):
            raise TypeError("@ktrace.trace wraps a @triton.jit or @gluon.jit function: put it above @triton.jit (or @gluon.jit)")
        want = ("ktrace_buf", "KTRACE") + (("KTRACE_LANES",) if lanes else ())
        missing = [p for p in want if p not in jit_fn.arg_names]
        if missing:
            raise TypeError(
                f"kernel {jit_fn.__name__} lacks the parameter(s) {missing}: "
                "declare `ktrace_buf=None, KTRACE: tl.constexpr = 0` as its last parameters"
                + (" and `KTRACE_LANES: gl.constexpr = 1` (a kernel traced per lane)" if lanes else "")
            )
        self.lanes = _lane_names(lanes)
        if isinstance(events_per_program, int) and events_per_program <= 0:
            raise ValueError(f"events_per_program must be positive, got {events_per_program}")
        jit_fn = getattr(jit_fn, "ktrace_original", jit_fn)
        self.jit_fn = _deferring_kernel(jit_fn)
        self.events_per_program = events_per_program
        self.name = name or jit_fn.__name__
        self.warm = set()
        self._signature(jit_fn.fn)
        functools.update_wrapper(self, jit_fn.fn)
        regions.scan_kernel(jit_fn)

    def __getattr__(self, name):  # .fn, .cache, .warmup, ... of the jit function
        return getattr(self.__dict__["jit_fn"], name)

    def __getitem__(self, grid):
        return functools.partial(self._launch, grid)

    def run(self, *args, grid, **kwargs):
        return self._launch(grid, *args, **kwargs)

    def _launch(self, grid, *args, **kwargs):
        if _compiling():
            # torch.compile (Dynamo) traces this call: with no capture open anywhere the kernel as
            # written (not the copy prepared for deferred records: the same binary when off) is
            # compiled into the caller's graph, as without the decorator; with one open it is left
            # out (a graph break) and runs here at every call, traced (the global read is guarded:
            # opening or closing a capture recompiles the caller)
            original = getattr(self.jit_fn, "ktrace_original", self.jit_fn)
            if not session.tracing() and _inductor_can_emit(original):
                return original[grid](*args, **kwargs)
            return _outside_compiled_graph()(self, grid, args, kwargs)
        return self._launch_now(grid, args, kwargs)

    def _launch_now(self, grid, args, kwargs):
        s = session.active_session()
        if s is None or "KTRACE" in kwargs:
            return self.untraced(grid, args, kwargs)
        return self.launch_in(s, grid, args, kwargs)


def _compiling() -> bool:
    """Whether torch.compile is tracing the caller (False when torch is not imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


_OUTSIDE: list = []
_EMITTABLE: dict = {}


def _inductor_can_emit(jit_fn) -> bool:
    """Whether Inductor can compile ``jit_fn`` into a caller's graph: it re-emits a user kernel's
    source, and the ``@triton.jit`` functions, numbers and strings that source names, into a module
    of its own that imports ``triton`` and ``triton.language as tl`` and nothing else; a kernel
    that names any other module (``kl.init`` of ``import ktrace.language as kl``) fails there
    (``NameError``). Such a kernel is left out of the compiled graph, traced or not (one graph
    break). Checked through the ``@triton.jit`` functions it calls; cached per function."""
    import types

    key = id(jit_fn)
    hit = _EMITTABLE.get(key)
    if hit is not None and hit[0] is jit_fn:
        return hit[1]
    ok, seen, todo = True, set(), [jit_fn]
    while todo and ok:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        py = getattr(fn, "fn", None)
        code, glob = getattr(py, "__code__", None), getattr(py, "__globals__", None)
        if code is None or glob is None:  # (not a Triton function: Dynamo decides what it does with it)
            continue
        for name in code.co_names:
            sym = glob.get(name)
            if isinstance(sym, types.ModuleType):
                ok = (name, sym.__name__) in (("tl", "triton.language"), ("triton", "triton"))
                if not ok:
                    break
            elif hasattr(sym, "fn") and hasattr(sym, "arg_names"):  # (a @triton.jit function it calls)
                todo.append(sym)
    _EMITTABLE[key] = (jit_fn, ok)
    return ok


def _outside_compiled_graph():
    """:meth:`TracedKernel._launch_now` behind ``torch.compiler.disable``: called from code
    torch.compile traces, it runs at every call instead of being compiled (made on first use)."""
    if not _OUTSIDE:
        _OUTSIDE.append(sys.modules["torch"].compiler.disable(lambda tk, grid, args, kwargs: tk._launch_now(grid, args, kwargs)))
    return _OUTSIDE[0]


def _lane_names(lanes) -> tuple[str, ...]:
    """Lane names from the decorator's ``lanes``: strings, or the partition functions themselves
    (named after them)."""
    if not lanes:
        return ()
    names = []
    for x in lanes:
        fn = getattr(x, "fn", x)
        name = x if isinstance(x, str) else getattr(fn, "__name__", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"lanes: each lane is a name or a partition function, got {x!r}")
        names.append(name)
    if len(names) > schema.MAX_LANES:
        raise ValueError(f"lanes: at most {schema.MAX_LANES} lanes per program, got {len(names)}")
    return tuple(names)


def trace(fn=None, *, events_per_program: int | Callable[[dict], int] = DEFAULT_EVENTS_PER_PROGRAM, name: str | None = None,
          lanes=None):
    """Decorate a ``@triton.jit`` or ``@gluon.jit`` kernel so that captures record its probes.

    Use as ``@ktrace.trace`` or ``@ktrace.trace(events_per_program=N)`` above the jit decorator.

    Args:
        events_per_program: event slots each program (each lane, with ``lanes``) owns (an int,
            or a function of the launch's arguments by name). Waits and notifies take two
            slots. Events past it are dropped and counted.
        name: the kernel's name in traces (default: the function's name).
        lanes: for a kernel traced per lane (``ktrace.gluon``): one entry per lane, in lane
            order, each a name or the partition function (its name is the lane's). The kernel
            then declares ``KTRACE_LANES: gl.constexpr = 1`` too, and gets ``len(lanes)``.
    """
    if fn is None:
        return lambda f: TracedKernel(f, events_per_program=events_per_program, name=name, lanes=lanes)
    return TracedKernel(fn, events_per_program=events_per_program, name=name, lanes=lanes)
