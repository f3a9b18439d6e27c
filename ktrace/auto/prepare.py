"""Prepare an unmodified ``@triton.jit`` kernel for tracing: a traced copy, the original untouched.

:func:`prepare` reads the kernel's source (the same source Triton compiles), decides what each
call in it is (:class:`Classifier`: Triton's loads and atomics, declared helpers from
:mod:`ktrace.auto.declare`, inline assembly, the user's own jit helpers), adds the probes
(:func:`ktrace.auto.transform.instrument`) and builds a new JIT function of the same type and
options from the result:

* its signature is the kernel's own plus ``ktrace_buf=None, KTRACE: constexpr = 0,
  KTRACE_WAIT_NS: constexpr = 0`` (a Python function of that signature whose code names the
  kernel's file and first line, so that Triton finds the same source lines);
* its syntax tree is the instrumented one, whose original nodes keep their lines and columns:
  with ``KTRACE = 0`` Triton compiles exactly the kernel's own statements, at their own source
  locations (the PTX is the kernel's, ``tests/test_auto.py`` checks it);
* it sees the kernel's module names (a copy: the module itself is not changed) plus ktrace's
  probe modules and the traced twins of the helpers it calls.

The kernel, its module and its compiled kernels are left as they were.
"""

from __future__ import annotations

import ast
import copy
import inspect
import logging
import re
import textwrap
import threading
from dataclasses import dataclass, field

import triton
import triton.language as tl

from .. import language as _kl
from . import declarations as _declare
from . import known as _known
from . import probes as _probes
from . import transform as T

log = logging.getLogger("ktrace")
_known.register()

#: Triton's atomics: name -> the parameter holding the value written.
_ATOMICS = {"atomic_cas": "val", "atomic_xchg": "val", "atomic_add": "val", "atomic_and": "val", "atomic_or": "val",
            "atomic_xor": "val", "atomic_max": "val", "atomic_min": "val"}
_ADDS = {"atomic_add"}
#: Inline assembly that reads or writes memory the way signals do (PTX and AMDGCN).
_ASM_MEMORY = re.compile(r"\b(atom|red|ld\.(acquire|volatile|relaxed)|st\.(release|volatile|relaxed)|"
                         r"global_atomic|flat_atomic|buffer_atomic|global_load|global_store)\b")
_ASM_LABEL = re.compile(r"^\s*([A-Za-z_$][\w$]*):", re.MULTILINE)
_ASM_BRANCH = re.compile(r"\b(bra(\.uni)?|s_cbranch_\w+|s_branch)\s+([A-Za-z_$][\w$]*)")
_ASM_READ = re.compile(r"\bld\.(acquire|volatile|relaxed)\b|\bglobal_load\w*\b")
_ASM_WRITE = re.compile(r"\bst\.(release|volatile|relaxed)\b|\batom\b|\bred\b|\bglobal_store\w*\b|\bglobal_atomic\w*\b")
_ASM_OPERAND = re.compile(r"\[\s*\$(\d+)\s*\]")


def _tl_fn(name: str):
    return getattr(tl, name, None)


_TL = {name: _tl_fn(name) for name in ("load", "inline_asm_elementwise", *_ATOMICS)}


def _is_jit(obj) -> bool:
    return isinstance(obj, triton.runtime.jit.JITFunction)


def _library(obj) -> bool:
    """A jit function of Triton or ktrace itself (called as written, never traced inside)."""
    mod = getattr(getattr(obj, "fn", obj), "__module__", "") or ""
    return mod.startswith(("triton.", "ktrace.")) or mod in ("triton", "ktrace")


def _resolve(func: ast.expr, scope: dict):
    """The object a call's function expression names in ``scope`` (None when it is not a plain
    dotted name of a known object, e.g. a method of a local)."""
    parts = []
    node = func
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in scope:
        return None
    obj = scope[node.id]
    for p in reversed(parts):
        try:
            obj = getattr(obj, p)
        except Exception:
            return None
    return obj


def _bind(target, call: ast.Call) -> dict | None:
    """The call's argument expressions by parameter name (None when they cannot be bound:
    ``*args``, ``**kwargs``, or a signature that does not take them)."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    fn = getattr(target, "fn", target)
    try:
        sig = inspect.signature(fn)
        b = sig.bind_partial(*call.args, **{k.arg: k.value for k in call.keywords})
    except (TypeError, ValueError):
        return None
    out = dict(b.arguments)
    for name, p in sig.parameters.items():  # defaults a declaration may name (``waitValue: int = 1``)
        if name not in out and p.default is not inspect.Parameter.empty and \
                (p.default is None or isinstance(p.default, (int, str))) and not isinstance(p.default, bool):
            out[name] = ast.Constant(value=p.default)
    return out


def _param_expr(bound: dict, p) -> ast.expr | None:
    """A declaration's parameter (a name: the argument given for it; an int: a constant)."""
    if p is None:
        return None
    if isinstance(p, int):
        return ast.Constant(value=p)
    return bound.get(p)


@dataclass
class Classifier:
    """What each call of one function is, for :func:`ktrace.auto.transform.instrument`."""

    scope: dict
    #: ``traced(helper) -> bool``: whether a user jit helper records anything (it then has a
    #: traced twin); None: no helper is traced inside
    traced: object = None

    def __call__(self, call: ast.Call):
        obj = _resolve(call.func, self.scope)
        if obj is None:
            return None
        for name, fn in _TL.items():
            if fn is not None and obj is fn:
                return self._triton(name, call)
        d = _declare.lookup(obj) if callable(obj) or _is_jit(obj) else None
        if d is not None:
            return self._declared(d, obj, call)
        if _is_jit(obj) and not _library(obj) and not getattr(obj, "is_gluon", lambda: False)():
            reader = _reader_param(obj)
            if reader is not None:
                bound = _bind(obj, call) or {}
                if reader in bound:
                    return T.Read(addr=bound[reader], what=obj.__name__)
            if self.traced is not None and self.traced(obj):
                return T.Helper(obj, obj.__name__)
        return None

    def _triton(self, name: str, call: ast.Call):
        bound = _bind(_TL[name], call)
        if bound is None:
            return None
        if name == "load":
            return T.Read(addr=bound["pointer"], what="load") if "pointer" in bound else None
        if name == "inline_asm_elementwise":
            return _asm(bound)
        if "pointer" not in bound:
            return None
        return T.Read(addr=bound["pointer"], atomic=_signals(name, bound, _ATOMICS[name]), value=bound.get(_ATOMICS[name]),
                      op="add" if name in _ADDS else "set", what=name)

    def _declared(self, d: _declare.Declaration, obj, call: ast.Call):
        bound = _bind(obj, call)
        if bound is None or d.addr not in bound:
            return None
        addr, owner = bound[d.addr], _param_expr(bound, d.owner)
        value = _param_expr(bound, d.value)
        what = getattr(getattr(obj, "fn", obj), "__name__", d.target)
        if d.role == "reads":
            return T.Read(addr=addr, owner=owner, what=what)
        if d.role == "atomic":
            return T.Read(addr=addr, owner=owner, atomic=_signals(what, bound, d.value if isinstance(d.value, str) else None),
                          value=value, op=d.op, what=what)
        if d.role in ("notifies", "stores"):
            return T.Notify(addr=addr, value=value, owner=owner, op=d.op, elementwise=d.role == "notifies", what=what)
        code = d.cmp_code
        if code is None:  # LIBRARY:PARAM: a compile-time comparison code given at the call
            lib, _, param = d.cmp.partition(":")
            code = _library_code(bound.get(param), self.scope, _declare.CMP_CODES[lib])
            if code is None:
                return None
        return T.Wait(addr=addr, expected=value, cmp=code, owner=owner, producer=_param_expr(bound, d.producer), what=what)


#: Atomics that change nothing when given 0 (``tl.atomic_add(flag, 0, sem="acquire")``: a fence).
_ZERO_IS_READ = ("add", "sub", "or", "xor")


def _signals(name: str, bound: dict, value_param: str | None) -> bool:
    """Whether an atomic may signal: not an acquire-only one (a read with ordering), not one that
    cannot change memory (adding 0; a compare-and-swap writing back the value it compares with)."""
    sem = bound.get("sem")
    if isinstance(sem, ast.Constant) and sem.value == "acquire":
        return False
    value = bound.get(value_param) if value_param else None
    if name.endswith(_ZERO_IS_READ) and isinstance(value, ast.Constant) and value.value == 0:
        return False
    if name.endswith("cas") and value is not None and "cmp" in bound and ast.dump(bound["cmp"]) == ast.dump(value):
        return False
    return True


def _library_code(node, scope: dict, table: dict) -> int | None:
    """A library's comparison code given at the call (a literal, or a module's constant such as
    ``libshmem_device.NVSHMEM_CMP_EQ``), as ktrace's code (``table``: the library's codes)."""
    if isinstance(node, ast.Constant):
        value = node.value
    elif isinstance(node, (ast.Name, ast.Attribute)):
        value = _resolve(node, scope) if isinstance(node, ast.Attribute) else scope.get(node.id)
        value = getattr(value, "value", value)  # (a tl.constexpr)
    else:
        return None
    return table.get(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _asm(bound: dict):
    """What an inline-assembly call does with memory: a loop that reads or writes memory is a
    spin it cannot describe (:class:`~ktrace.auto.transform.Opaque`); a single acquire/volatile
    load of ``[$k]`` is a read of that operand; a single release store or atomic, a notify."""
    text = bound.get("asm")
    args = bound.get("args")
    if not isinstance(text, ast.Constant) or not isinstance(text.value, str):
        return None
    asm = text.value
    if not _ASM_MEMORY.search(asm):
        return None
    labels = set(_ASM_LABEL.findall(asm))
    branches = {m.group(3) for m in _ASM_BRANCH.finditer(asm)}
    if labels & branches:
        return T.Opaque("inline asm that loops on memory")
    operands = _ASM_OPERAND.findall(asm)
    if not isinstance(args, (ast.List, ast.Tuple)) or len(set(operands)) != 1:
        return None
    # operand numbers count the outputs first: $0 is the result of a one-output asm
    k = int(operands[0])
    outs = len(bound["dtype"].elts) if isinstance(bound.get("dtype"), (ast.Tuple, ast.List)) else 1
    i = k - outs
    if not 0 <= i < len(args.elts):
        return None
    addr = args.elts[i]
    if _ASM_READ.search(asm) and not _ASM_WRITE.search(asm):
        return T.Read(addr=addr, what="asm load")
    if _ASM_WRITE.search(asm):
        return T.Notify(addr=addr, value=None, elementwise=False, what="asm store")
    return None


def _reader_param(obj) -> str | None:
    """The parameter a jit helper reads and returns (``return tl.load(p, volatile=True)``, an
    acquire-load asm of ``p``): such a helper is a read of ``p`` at its call."""
    try:
        fdef = obj.parse().body[0]
    except Exception:
        return None
    body = [s for s in fdef.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
        return None
    params = {a.arg for a in fdef.args.args}
    kind = Classifier({**obj.__globals__, **_nonlocals(obj)})(body[0].value)
    if isinstance(kind, T.Read) and not kind.atomic and isinstance(kind.addr, ast.Name) and kind.addr.id in params:
        return kind.addr.id
    return None


def _nonlocals(obj) -> dict:
    try:
        return dict(inspect.getclosurevars(obj.fn).nonlocals)
    except (TypeError, ValueError):
        return {}


# ---------------------------------------------------------------------------------------------
# building the prepared function
# ---------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    """A traced copy of a jit function, and what it records."""

    jit: object  # the new JITFunction
    original: object
    result: T.Result
    #: the traced twins of the helpers it calls (and theirs), by name in its scope
    twins: dict = field(default_factory=dict)

    @property
    def sites(self) -> list[T.Site]:
        return self.result.sites

    def limits(self) -> list[str]:
        """One line per thing left as written (this function's, then its helpers')."""
        fn = self.original.fn
        where = _where(fn)
        out = [f"{where[0]}:{where[1] + lim.line - 1}: {lim.why}" for lim in self.result.limits]
        for tw in self.twins.values():
            if isinstance(tw, Prepared):
                out += [x for x in tw.limits() if x not in out]
        return out

    def source_lines(self) -> dict[str, list[str]]:
        """Region name -> ``["path:line"]``: where in the user's source each region is recorded."""
        path, first = _where(self.original.fn)
        out: dict[str, list[str]] = {}
        for s in self.result.sites:
            if s.region:
                out.setdefault(s.region, []).append(f"{path}:{first + s.line - 1}")
        for tw in self.twins.values():
            if isinstance(tw, Prepared):
                for k, v in tw.source_lines().items():
                    out.setdefault(k, []).extend(x for x in v if x not in out.get(k, []))
        return out


def _where(fn) -> tuple[str, int]:
    """The display path of a function's file (``pkg/mod.py`` or the file's name) and its
    ``def`` line."""
    from ..regions import display_path

    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return "?", 1
    for i, ln in enumerate(lines):
        if ln.lstrip().startswith("def "):
            return display_path(fn), first + i
    return display_path(fn), first


_lock = threading.RLock()
_cache: dict = {}  # (what, id(function)) -> (the function, Prepared | None | T.Refused)
_CX = ast.Constant(value="tl.constexpr")  # (a string annotation: Triton reads "constexpr" in it)


def prepare(jit_fn, *, kernel: bool = True) -> Prepared:
    """The traced copy of ``jit_fn`` (cached per function).

    Raises:
        ktrace.auto.transform.Refused: it cannot be prepared (the reason in one line).
    """
    return _cached(("kernel" if kernel else "helper", id(jit_fn)), jit_fn, lambda: _prepare(jit_fn, kernel, set()))


def _cached(key, obj, make):
    """``make()``'s result for ``obj``, made once (a refusal is remembered and raised again)."""
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] is obj:
            if isinstance(hit[1], Exception):
                raise hit[1]
            return hit[1]
        try:
            out = make()
        except T.Refused as e:
            _cache[key] = (obj, e)
            raise
        _cache[key] = (obj, out)
        return out


def _prepare(jit_fn, kernel: bool, stack: set) -> Prepared:
    if getattr(jit_fn, "is_gluon", lambda: False)():
        raise T.Refused("a Gluon kernel is traced with ktrace.gluon's probes (docs/gluon.md), not prepared from source")
    fn = jit_fn.fn
    scope = {**jit_fn.__globals__, **_nonlocals(jit_fn)}
    try:
        tree = jit_fn.parse()
    except SyntaxError as e:
        raise T.Refused(f"its source does not parse ({e.msg})") from None
    fdef = tree.body[0]
    twins: dict[str, object] = {}
    stack = stack | {id(jit_fn)}

    def twin_name(obj):
        if id(obj) in stack:  # (recursion: Triton does not compile it either)
            return None
        name = f"{T.PREFIX}_twin_{obj.__name__}_{id(obj) & 0xFFFFFF:06x}"
        if name not in twins:
            try:
                tw = _cached_twin(obj, stack)
            except T.Refused as e:
                twins[name] = e
                return None
            if tw is None:
                return None
            twins[name] = tw
        return name if isinstance(twins[name], Prepared) else None

    classifier = Classifier(scope, traced=lambda obj: twin_name(obj) is not None)
    result = T.instrument(fdef, classifier, kernel=kernel, label=fn.__name__, twin_name=twin_name, constexpr=_CX)
    for name, tw in twins.items():
        if isinstance(tw, T.Refused):
            result.limits.append(T.Limit(fdef.lineno, f"helper {name.split('_twin_', 1)[1].rsplit('_', 1)[0]} is not "
                                                      f"traced inside: {tw}"))
    g = dict(jit_fn.__globals__)
    g.update(_nonlocals(jit_fn))
    g[T.KL] = _kl
    g[T.KP] = _probes
    for name, tw in twins.items():
        if isinstance(tw, Prepared):
            g[name] = tw.jit
    new = _build(jit_fn, result.fdef, g)
    return Prepared(jit=new, original=jit_fn, result=result, twins=twins)


def _cached_twin(obj, stack) -> Prepared | None:
    """A helper's traced twin, or None when it records nothing (it is then called as written)."""
    def make():
        p = _prepare(obj, False, stack)
        return p if p.result.traced else None

    return _cached(("twin", id(obj)), obj, make)


def _build(jit_fn, fdef: ast.FunctionDef, g: dict):
    """A JIT function of ``jit_fn``'s type and options whose source is ``fdef`` (see the module
    docstring for what keeps its source locations)."""
    fn = jit_fn.fn
    code = fn.__code__
    sig_def = ast.FunctionDef(name=fn.__name__, args=copy.deepcopy(fdef.args), body=[ast.Pass()], decorator_list=[],
                              returns=None, type_params=[], lineno=code.co_firstlineno, col_offset=0)
    mod = ast.Module(body=[sig_def], type_ignores=[])
    ast.fix_missing_locations(mod)
    for n in ast.walk(mod):
        if hasattr(n, "lineno"):
            n.lineno = n.end_lineno = code.co_firstlineno
    ns: dict = {}
    exec(compile(mod, code.co_filename, "exec"), g, ns)
    new_fn = ns[fn.__name__]
    new_fn.__qualname__ = fn.__qualname__
    new_fn.__doc__ = fn.__doc__
    new_fn.__module__ = fn.__module__
    kw = dict(version=jit_fn.version, do_not_specialize=jit_fn.do_not_specialize,
              do_not_specialize_on_alignment=jit_fn.do_not_specialize_on_alignment, debug=jit_fn.debug,
              noinline=jit_fn.noinline, repr=jit_fn._repr, launch_metadata=jit_fn.launch_metadata)
    new = type(jit_fn)(new_fn, **kw)
    new.pre_run_hooks = list(jit_fn.pre_run_hooks)
    new._unsafe_update_src(ast.unparse(fdef))
    tree = ast.Module(body=[fdef], type_ignores=[])
    new.parse = lambda: copy.deepcopy(tree)  # (the tree with the kernel's own source locations)
    new.ktrace_auto = True
    new.ktrace_original = jit_fn
    return new
