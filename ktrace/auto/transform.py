"""A kernel's syntax tree with ktrace's probes added: the pure-Python half of tracing without edits.

:func:`instrument` takes the ``FunctionDef`` of a ``@triton.jit`` function and returns a copy in
which

* the program is one span (the kernel) and each iteration of a top-level loop is one span,
  named by the loop's source line;
* every *spin* — a ``while`` whose condition reads memory (a volatile load, an atomic, a helper
  declared as a read), or whose body re-reads the variable its condition tests — records a WAIT:
  when it began and ended, the address it polled, the last value it saw, the value and the
  comparison it waited for, how often it read (bounded by a deadline when the launch gives one);
* every atomic on a scalar address, and every call of a helper declared to notify, records a
  NOTIFY (address, value) after it was issued;
* every call of a helper declared to wait records a WAIT around it;
* every call of a user ``@triton.jit`` helper that holds any of these (directly or further down)
  calls the helper's traced twin instead, which takes and returns the tracer.

Each instrumented statement is wrapped in ``if <tracer>.ON: <traced form> else: <the statement
as written>``: ``ON`` is a compile-time constant, so a launch with tracing off compiles the
original statements alone (the same nodes, at the same source lines and columns). Nodes made here
carry the location of the statement they instrument.

What is instrumented is decided by a *classifier* the caller gives (:class:`Classify`), which
knows the Python objects behind the names (``ktrace.auto.prepare`` on Triton's). This module
imports neither Triton nor torch.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Callable, Optional

#: The names this module gives the probe modules, the tracer and its temporaries, in the prepared
#: function. A kernel that already uses a name starting with ``_kt`` is refused (:class:`Refused`).
PREFIX = "_kt"
KL = "_kt_language"  # ktrace.language
KP = "_kt_probes"  # ktrace.auto.probes
TRACER = "_kt"
#: The parameters a prepared kernel gains (after its own, all with defaults).
BUF_PARAM, GATE_PARAM, BOUND_PARAM = "ktrace_buf", "KTRACE", "KTRACE_WAIT_NS"

#: Comparison codes (``ktrace.schema.Cmp``), repeated as plain ints: this module imports no ktrace
#: module but the schema's numbers are fixed by the capture format.
EQ, NE, GE, GT, LE, LT = 1, 2, 3, 4, 5, 6
#: The comparison a spin waits *for*, from the one its loop continues on (``while v < x``: the
#: loop ends once ``v >= x``), for the value on the left ...
_UNTIL = {ast.Lt: GE, ast.LtE: GT, ast.Gt: LE, ast.GtE: LT, ast.Eq: NE, ast.NotEq: EQ}
#: ... and on the right (``while x < v``: ends once ``v <= x``).
_UNTIL_MIRRORED = {ast.Lt: LE, ast.LtE: LT, ast.Gt: GE, ast.GtE: GT, ast.Eq: NE, ast.NotEq: EQ}


class Refused(ValueError):
    """The function cannot be prepared at all (the reason is the message)."""


# ---------------------------------------------------------------------------------------------
# what a call is, as the classifier says
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    """A call whose result is a value read from memory at ``addr``.

    ``owner``: where the address is this rank's symmetric address of a location on another rank
    (a library call given the peer), the expression of that rank; else None.
    ``atomic``: the call is also a write (an atomic), so outside a spin it is a notify.
    ``value``/``op``: what it writes when it is an atomic (None: the value is not known).
    """

    addr: ast.expr
    owner: Optional[ast.expr] = None
    atomic: bool = False
    value: Optional[ast.expr] = None
    op: str = "set"
    what: str = "load"


@dataclass(frozen=True)
class Notify:
    """A call that signals: it writes ``value`` (None: unknown) to ``addr`` (on ``owner``)."""

    addr: ast.expr
    value: Optional[ast.expr] = None
    owner: Optional[ast.expr] = None
    op: str = "set"
    #: every element of a block of addresses is one notify (a declared helper); else a block
    #: address is data, not a signal, and records nothing
    elementwise: bool = False
    what: str = "notify"


@dataclass(frozen=True)
class Wait:
    """A call that returns once the flag at ``addr`` compares ``cmp`` to ``expected``."""

    addr: ast.expr
    expected: Optional[ast.expr]
    cmp: int
    owner: Optional[ast.expr] = None
    producer: Optional[ast.expr] = None
    what: str = "wait"


@dataclass(frozen=True)
class Helper:
    """A call of a user jit function: traced inside when it holds anything traced."""

    target: object
    name: str


@dataclass(frozen=True)
class Opaque:
    """A call that hides a spin the classifier recognised but cannot describe (inline asm that
    loops on memory): timed as a span, not paired."""

    why: str


#: ``classify(call) -> Read | Notify | Wait | Helper | Opaque | None`` (None: an ordinary call).
Classify = Callable[[ast.Call], object]


@dataclass
class Site:
    """One thing the prepared function records."""

    kind: str  # "program", "loop", "spin", "wait", "notify", "call", "asm"
    line: int  # line in the function's own source (1: its ``def``)
    region: str
    what: str = ""


@dataclass
class Limit:
    """Something the preparation left as written, and why (one line each)."""

    line: int
    why: str


@dataclass
class Result:
    """:func:`instrument`'s outcome."""

    fdef: ast.FunctionDef
    sites: list[Site] = field(default_factory=list)
    limits: list[Limit] = field(default_factory=list)
    #: user jit helpers whose twins the function calls: twin name -> the helper object
    twins: dict[str, object] = field(default_factory=dict)

    @property
    def traced(self) -> bool:
        """Whether it records anything beyond the program span (a helper with nothing traced is
        called as written)."""
        return any(s.kind != "program" for s in self.sites)


# ---------------------------------------------------------------------------------------------
# small AST builders
# ---------------------------------------------------------------------------------------------


def _name(id_: str, store: bool = False) -> ast.Name:
    return ast.Name(id=id_, ctx=ast.Store() if store else ast.Load())


def _attr(mod: str, fn: str) -> ast.Attribute:
    return ast.Attribute(value=_name(mod), attr=fn, ctx=ast.Load())


def _call(mod: str, fn: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=_attr(mod, fn), args=list(args), keywords=[])


def _const(v) -> ast.Constant:
    return ast.Constant(value=v)


def _assign(target: str | ast.expr, value: ast.expr) -> ast.Assign:
    t = _name(target, store=True) if isinstance(target, str) else target
    return ast.Assign(targets=[t], value=value, lineno=0)


def _with_ctx(node: ast.expr, ctx) -> ast.expr:
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if hasattr(n, "ctx"):
            n.ctx = ctx()
    return node


def _stored(node: ast.expr) -> ast.expr:
    """A copy of an expression usable as an assignment target."""
    return _with_ctx(node, ast.Store)


def _loaded(node: ast.expr) -> ast.expr:
    """A copy of an expression to read again."""
    return _with_ctx(node, ast.Load)


def _locate(nodes, where: ast.AST):
    """Give every node made here (and what it holds) the location of ``where``."""
    for top in nodes if isinstance(nodes, list) else [nodes]:
        for n in ast.walk(top):
            if "lineno" in n._attributes and not hasattr(n, "_kt_keep"):
                n.lineno = where.lineno
                n.col_offset = where.col_offset
                n.end_lineno = getattr(where, "end_lineno", where.lineno)
                n.end_col_offset = getattr(where, "end_col_offset", where.col_offset)
    return nodes


def _keep(nodes):
    """Mark original nodes (and everything under them) so that :func:`_locate` leaves them."""
    for top in nodes if isinstance(nodes, list) else [nodes]:
        for n in ast.walk(top):
            n._kt_keep = True
    return nodes


def _flush() -> ast.stmt:
    """``_kt = kl.flush(_kt)``: the deferred tracer's pending records stored now (before a wait,
    where the stores cost nothing)."""
    return _assign(TRACER, _call(KL, "flush", _name(TRACER)))


def _dual(traced: list[ast.stmt], original: list[ast.stmt], where: ast.AST) -> ast.If:
    """``if _kt.ON: traced else: original`` (``ON`` is a compile-time constant)."""
    test = ast.Attribute(value=_name(TRACER), attr="ON", ctx=ast.Load())
    node = ast.If(test=test, body=traced, orelse=_keep(original))
    _locate([node], where)
    return node


# ---------------------------------------------------------------------------------------------
# expressions: which calls read or signal, and whether an expression may be evaluated twice
# ---------------------------------------------------------------------------------------------

#: Calls that are pure (free of memory effects), so an expression holding only these may be
#: evaluated again after the statement to record its value. Matched on the callee's text.
_PURE_CALLS = {"tl.arange", "tl.program_id", "tl.num_programs", "tl.cast", "tl.full", "tl.zeros", "tl.where",
               "tl.minimum", "tl.maximum", "tl.multiple_of", "tl.max_contiguous", "tl.cdiv", "triton.cdiv", "min",
               "max", "int", "len"}
_PURE_METHODS = {"to"}


def _pure(node: ast.expr) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            text = ast.unparse(f)
            if text in _PURE_CALLS or (isinstance(f, ast.Attribute) and f.attr in _PURE_METHODS):
                continue
            return False
        if isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.Lambda)):
            return False
    return True


class _Calls:
    """The classified calls under a node, in evaluation order."""

    def __init__(self, node: ast.AST, classify: Classify):
        self.found: list[tuple[ast.Call, object]] = []
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                kind = classify(n)
                if kind is not None:
                    self.found.append((n, kind))

    def of(self, *types) -> list[tuple[ast.Call, object]]:
        return [(c, k) for c, k in self.found if isinstance(k, types)]


def _holds(node: ast.AST, target: ast.AST) -> bool:
    return any(n is target for n in ast.walk(node))


# ---------------------------------------------------------------------------------------------
# the transformer
# ---------------------------------------------------------------------------------------------


class _Instrument:
    def __init__(self, fdef: ast.FunctionDef, classify: Classify, *, kernel: bool, label: str,
                 twin_name: Callable[[object], str]):
        self.fdef = fdef
        self.classify = classify
        self.kernel = kernel
        self.label = label  # the function's name in region names
        self.twin_name = twin_name
        self.sites: list[Site] = []
        self.limits: list[Limit] = []
        self.twins: dict[str, object] = {}
        self.n = 0

    # names -----------------------------------------------------------------------------------
    def tmp(self, what: str) -> str:
        self.n += 1
        return f"{PREFIX}_{what}{self.n}"

    def region(self, kind: str, line: int, what: str) -> str:
        name = f"{self.label}:{line} {what}" if what else f"{self.label}:{line}"
        self.sites.append(Site(kind, line, name, what))
        return name

    def limit(self, node: ast.AST, why: str) -> None:
        self.limits.append(Limit(getattr(node, "lineno", self.fdef.lineno), why))

    # statements ------------------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt], top: bool) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for st in stmts:
            out.extend(self.stmt(st, top))
        return out

    def stmt(self, st: ast.stmt, top: bool) -> list[ast.stmt]:
        if isinstance(st, ast.While):
            return self.while_(st, top)
        if isinstance(st, ast.For):
            return self.for_(st, top)
        if isinstance(st, ast.If):
            new = copy.copy(st)
            new.body = self.block(st.body, False) or [ast.Pass()]
            new.orelse = self.block(st.orelse, False)
            return [new]
        if isinstance(st, (ast.With,)):
            new = copy.copy(st)
            new.body = self.block(st.body, False)
            return [new]
        if isinstance(st, ast.Return):
            return self.return_(st)
        if isinstance(st, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)):
            return self.simple(st)
        return [st]

    def return_(self, st: ast.Return) -> list[ast.stmt]:
        """A ``return`` in the kernel closes the program span and flushes the tracer first; in a
        helper it also hands the tracer back."""
        if self.kernel:
            return self._closing(st) + [st]
        # a helper: return (value, tracer) or the tracer alone
        value = st.value
        if value is not None and _Calls(value, self.classify).found:
            self.limit(st, "a traced call inside a returned expression is not recorded (assign it first)")
        if value is None:
            new = ast.Return(value=_name(TRACER))
        else:
            new = ast.Return(value=ast.Tuple(elts=[value, _name(TRACER)], ctx=ast.Load()))
        return [_locate(new, st)]

    def _closing(self, where: ast.AST) -> list[ast.stmt]:
        end = _assign(TRACER, _call(KL, "end", _name(TRACER), _name(f"{PREFIX}_program")))
        fin = ast.Expr(value=_call(KL, "finish", _name(TRACER)))
        return _locate([end, fin], where)

    def simple(self, st: ast.stmt) -> list[ast.stmt]:
        calls = _Calls(st, self.classify)
        if not calls.found:
            return [st]
        reads = calls.of(Read)
        notifies = calls.of(Notify) + [(c, k) for c, k in reads if k.atomic]
        waits = calls.of(Wait)
        helpers = calls.of(Helper)
        opaque = calls.of(Opaque)
        if opaque:
            return self.opaque(st, opaque[0][1])
        if waits:
            if len(waits) > 1 or notifies or helpers:
                self.limit(st, f"{len(waits) + len(notifies) + len(helpers)} signalling calls in one statement: only "
                               "the first wait is recorded")
            return self.waited(st, *waits[0])
        if helpers:
            return self.helper_call(st, helpers)
        if notifies:
            if len(notifies) > 1:
                self.limit(st, f"{len(notifies)} atomics or notifies in one statement: only the first is recorded")
            return self.notified(st, *notifies[0])
        return [st]  # (a plain read outside a spin: not a hand-off)

    # spins -----------------------------------------------------------------------------------
    def while_(self, st: ast.While, top: bool) -> list[ast.stmt]:
        if st.orelse:
            self.limit(st, "a while loop with an else clause is left as written")
            return [st]
        spin = self.spin_shape(st)
        if isinstance(spin, str):  # not a spin: a loop (spanned per iteration at the top level)
            body = self.block(st.body, False) or [ast.Pass()]
            if spin:
                self.limit(st, spin)
            new = copy.copy(st)
            new.body = body
            if top:
                return [self.iteration_spans(new, st, "while", None)]
            return [new]
        return self.spin(st, *spin)

    def spin_shape(self, st: ast.While):
        """``(value expression to hoist or None, test builder, expected, cmp, read call, Read)``
        when the loop is a spin, else a string: why it is not one ("" when it reads nothing)."""
        calls = _Calls(st.test, self.classify)
        reads = calls.of(Read)
        other = [k for _, k in calls.found if not isinstance(k, Read)]
        test = st.test
        if reads:
            if len(reads) > 1 or other:
                return f"a loop condition with {len(calls.found)} memory reads or calls to trace is timed as a loop, not a wait"
            call, read = reads[0]
            return self._condition(test, call, read)
        if other:
            return "a loop condition that calls a traced helper is timed as a loop, not a wait"
        # the condition tests a variable the body reads again: `v = load(p); while v < x: v = load(p)`
        names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        for body_st in reversed(st.body):
            if isinstance(body_st, ast.Assign) and len(body_st.targets) == 1 and isinstance(body_st.targets[0], ast.Name) \
                    and body_st.targets[0].id in names:
                inner = _Calls(body_st.value, self.classify).of(Read)
                if len(inner) == 1:
                    var = body_st.targets[0].id
                    shape = self._condition(test, None, inner[0][1], var=var)
                    if isinstance(shape, str):
                        return shape
                    return shape
        return ""

    def _condition(self, test: ast.expr, call, read: Read, var: str | None = None):
        """The parts of a spin's condition: what to hoist (the side holding the read), how to
        rebuild the test from the hoisted value, the expected value, the comparison waited for."""

        def side_holds(node):
            if var is not None:
                return any(isinstance(n, ast.Name) and n.id == var for n in ast.walk(node))
            return _holds(node, call)

        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, right = test.left, test.comparators[0]
            op = type(test.ops[0])
            if op not in _UNTIL:
                return "a spin comparing with `is`/`in` is timed as a loop, not a wait"
            if side_holds(left) and not side_holds(right):
                cmp, hoist, expected = _UNTIL[op], left, right
                rebuild = lambda v: ast.Compare(left=v, ops=[copy.deepcopy(test.ops[0])], comparators=[_loaded(right)])
            elif side_holds(right) and not side_holds(left):
                cmp, hoist, expected = _UNTIL_MIRRORED[op], right, left
                rebuild = lambda v: ast.Compare(left=_loaded(left), ops=[copy.deepcopy(test.ops[0])], comparators=[v])
            else:
                return "a spin reading on both sides of its comparison is timed as a loop, not a wait"
            if not _pure(expected):
                expected = None  # (recorded as unknown: evaluating it again could change memory)
            return hoist, rebuild, expected, cmp, read
        if side_holds(test) and (test is call or (isinstance(test, ast.Name) and var is not None)):
            # `while load(p):` runs while the value is non-zero: it waits for == 0
            return test, (lambda v: v), _const(0), EQ, read
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and side_holds(test.operand) and \
                (test.operand is call or isinstance(test.operand, ast.Name)):
            return test.operand, (lambda v: ast.UnaryOp(op=ast.Not(), operand=v)), _const(0), NE, read
        return "a spin whose condition is not one comparison of the value read is timed as a loop, not a wait"

    def spin(self, st: ast.While, hoist, rebuild, expected, cmp, read: Read) -> list[ast.stmt]:
        line = st.lineno
        name = self.region("spin", line, f"wait {ast.unparse(read.addr)}"[:120])
        t0, v, n, go = self.tmp("t"), self.tmp("v"), self.tmp("n"), self.tmp("go")
        var_form = isinstance(hoist, ast.Name) and not any(isinstance(x, ast.Call) for x in ast.walk(hoist))
        body = self.block(st.body, False)
        if var_form:  # `while v < x: ... v = load(p)`: the variable is the value
            value = _name(hoist.id)
            test = lambda: _loaded(st.test)
            pre = [_assign(t0, _call(KL, "now")), _flush(), _assign(n, _const(0)), _assign(go, test())]
            step = [ast.AugAssign(target=_name(n, True), op=ast.Add(), value=_const(1)),
                    _assign(go, _call(KP, "keep_spinning", test(), _name(t0), _name(BOUND_PARAM)))]
            loop_body = body + _locate(step, st)
            done_test = test()
        else:
            value = _name(v)
            # (the tracer's pending records are stored while the first read is in flight)
            pre = [_assign(t0, _call(KL, "now")), _assign(v, _loaded(hoist)), _flush(), _assign(n, _const(1)),
                   _assign(go, rebuild(_name(v)))]
            step = [_assign(v, _keep(_loaded(hoist))),
                    ast.AugAssign(target=_name(n, True), op=ast.Add(), value=_const(1)),
                    _assign(go, _call(KP, "keep_spinning", rebuild(_name(v)), _name(t0), _name(BOUND_PARAM)))]
            loop_body = body + _locate(step, st)
            done_test = rebuild(_name(v))
        loop = ast.While(test=_name(go), body=loop_body, orelse=[])
        record = _assign(TRACER, _call(
            KP, "spun", _name(TRACER), _const(name), _name(t0), _loaded(read.addr), self._owner(read.owner), _const(-1),
            value, _loaded(expected) if expected is not None else _const(0), _const(cmp if expected is not None else 0),
            _name(n), done_test))
        traced = _locate(pre, st) + [_locate(loop, st)] + _locate([record], st)
        return [_dual(traced, [st], st)]

    def _owner(self, owner) -> ast.expr:
        return _loaded(owner) if owner is not None else _const(None)

    # loops -----------------------------------------------------------------------------------
    def for_(self, st: ast.For, top: bool) -> list[ast.stmt]:
        new = copy.copy(st)
        new.body = self.block(st.body, False) or [ast.Pass()]
        if st.orelse:
            self.limit(st, "a for loop with an else clause: its else clause is left as written")
        if not top:
            return [new]
        arg = st.target if isinstance(st.target, ast.Name) else None
        return [self.iteration_spans(new, st, "for " + ast.unparse(st.target), arg)]

    def iteration_spans(self, new, st, what: str, arg) -> ast.stmt:
        """Each iteration of a top-level loop as one span (the loop variable as its argument)."""
        name = self.region("loop", st.lineno, what[:100])
        s = self.tmp("s")
        begin_args = [_name(TRACER), _const(name)] + ([_loaded(arg)] if arg is not None else [])
        head = _locate([_assign(s, _call(KL, "begin", *begin_args))], st)
        tail = _locate([_assign(TRACER, _call(KL, "end", _name(TRACER), _name(s)))], st)
        new.body = head + new.body + tail
        return new

    # waits, notifies, helper calls -----------------------------------------------------------
    def waited(self, st: ast.stmt, call: ast.Call, w: Wait) -> list[ast.stmt]:
        """A declared wait. Called as a statement, on its own rank's flag, with what it waits for
        known, it is *polled first*: ktrace reads the flag itself (with the launch's deadline)
        until it compares as declared, then calls the helper, which returns at once; a flag that
        never comes ends the poll at the deadline and the helper is not called (it would spin
        inside its own code with no bound). Otherwise the call is timed as it is."""
        name = self.region("wait", st.lineno, f"{w.what} {ast.unparse(w.addr)}"[:120])
        t0 = self.tmp("t")
        addr = self._hoistable(st, w.addr)
        pre, addr_e = addr
        expected = w.expected if w.expected is not None and _pure(w.expected) else None
        producer = _loaded(w.producer) if w.producer is not None else _const(-1)
        if isinstance(st, ast.Expr) and st.value is call and expected is not None and w.owner is None:
            v, n, go = self.tmp("v"), self.tmp("n"), self.tmp("go")
            unmet = lambda: _call(KP, "unmet", _name(v), _loaded(expected), _const(w.cmp))  # noqa: E731
            head = pre + [_flush(), _assign(t0, _call(KL, "now")), _assign(v, _call(KP, "peek", _loaded(addr_e))),
                          _assign(n, _const(1)), _assign(go, unmet())]
            poll = ast.While(test=_name(go), orelse=[], body=[
                _assign(v, _call(KP, "peek", _loaded(addr_e))),
                ast.AugAssign(target=_name(n, True), op=ast.Add(), value=_const(1)),
                _assign(go, _call(KP, "keep_spinning", unmet(), _name(t0), _name(BOUND_PARAM)))])
            call_it = ast.If(test=ast.UnaryOp(op=ast.Not(), operand=unmet()), body=[st], orelse=[])
            record = _assign(TRACER, _call(KP, "polled", _name(TRACER), _const(name), _name(t0), _loaded(addr_e), producer,
                                           _name(v), _loaded(expected), _const(w.cmp), _name(n), unmet()))
            traced = _locate(head, st) + [_locate(poll, st), _locate(call_it, st)] + _locate([record], st)
            return [_dual(traced, [copy.deepcopy(st)], st)]
        traced = _locate(pre + [_flush(), _assign(t0, _call(KL, "now"))], st) + [st] + _locate([_assign(TRACER, _call(
            KP, "waited", _name(TRACER), _const(name), _name(t0), addr_e, self._owner(w.owner), producer,
            _loaded(expected) if expected is not None else _const(0), _const(w.cmp if expected is not None else 0)))], st)
        return [_dual(traced, [copy.deepcopy(st)], st)]

    def _hoistable(self, st: ast.stmt, expr: ast.expr) -> tuple[list[ast.stmt], ast.expr]:
        """An expression's value for a record made after ``st``: evaluated before the statement
        into a temporary when the statement assigns a name the expression reads, else again after."""
        assigned = {n.id for t in _targets(st) for n in ast.walk(t) if isinstance(n, ast.Name)}
        if assigned & {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}:
            tmp = self.tmp("a")
            return [_assign(tmp, _loaded(expr))], _name(tmp)
        return [], _loaded(expr)

    def notified(self, st: ast.stmt, call: ast.Call, k) -> list[ast.stmt]:
        addr_src = k.addr
        name = self.region("notify", st.lineno, f"{k.what} {ast.unparse(addr_src)}"[:120])
        value = k.value if k.value is not None and _pure(k.value) else None
        if not _pure(addr_src):
            self.limit(st, f"the address of {k.what} is not a pure expression: not recorded")
            return [st]
        pre, addr_e = self._hoistable(st, addr_src)
        vpre, value_e = self._hoistable(st, value) if value is not None else ([], _const(0))
        t0 = self.tmp("t")
        each = getattr(k, "elementwise", False)
        fn = "notified_each" if each else "notified"
        # (a notify of one address only: a block of them is data, and its stamp compiles away)
        stamp = _call(KL, "now") if each else _call(KP, "stamp", _loaded(addr_e))
        traced = _locate(pre + vpre + [_assign(t0, stamp)], st) + [st] + _locate([_assign(TRACER, _call(
            KP, fn, _name(TRACER), _const(name), _name(t0), addr_e, self._owner(k.owner), value_e))], st)
        return [_dual(traced, [copy.deepcopy(st)], st)]

    def helper_call(self, st: ast.stmt, helpers) -> list[ast.stmt]:
        call, h = helpers[0]
        if len(helpers) > 1:
            self.limit(st, f"{len(helpers)} traced helper calls in one statement: traced inside the first only")
        twin = self.twin_name(h.target)
        if twin is None:
            return [st]
        self.twins[twin] = h.target
        new_call = ast.Call(func=_name(twin), args=[_loaded(a) for a in call.args],
                            keywords=[copy.deepcopy(k) for k in call.keywords] + [
                                ast.keyword(arg=TRACER, value=_name(TRACER)),
                                ast.keyword(arg=BOUND_PARAM, value=_name(BOUND_PARAM))])
        if isinstance(st, ast.Expr) and st.value is call:
            new = _assign(TRACER, new_call)
        elif isinstance(st, ast.Assign) and st.value is call and len(st.targets) == 1:
            new = ast.Assign(targets=[ast.Tuple(elts=[_stored(st.targets[0]), _name(TRACER, True)], ctx=ast.Store())],
                             value=new_call)
        else:
            self.limit(st, f"{h.name} is called inside an expression: not traced inside (call it as a statement or "
                           "assign its result)")
            return [st]
        self.sites.append(Site("call", st.lineno, "", h.name))
        return [_dual(_locate([new], st), [copy.deepcopy(st)], st)]

    def opaque(self, st: ast.stmt, k: Opaque) -> list[ast.stmt]:
        name = self.region("asm", st.lineno, "spin (asm)")
        self.limit(st, f"{k.why}: timed as a span named {name!r}, not paired (declare the helper that holds it)")
        s = self.tmp("s")
        traced = _locate([_assign(s, _call(KL, "begin", _name(TRACER), _const(name)))], st) + [st] + \
            _locate([_assign(TRACER, _call(KL, "end", _name(TRACER), _name(s)))], st)
        return [_dual(traced, [copy.deepcopy(st)], st)]


def _targets(st: ast.stmt) -> list[ast.expr]:
    if isinstance(st, ast.Assign):
        return list(st.targets)
    if isinstance(st, (ast.AugAssign, ast.AnnAssign)):
        return [st.target]
    return []


def _uses_prefix(fdef: ast.FunctionDef) -> str | None:
    for n in ast.walk(fdef):
        name = n.id if isinstance(n, ast.Name) else n.arg if isinstance(n, ast.arg) else None
        if name and name.startswith(PREFIX) or name in (BUF_PARAM, GATE_PARAM, BOUND_PARAM):
            return name
    return None


def _param(name: str, default, annotation: ast.expr | None) -> tuple[ast.arg, ast.expr]:
    return ast.arg(arg=name, annotation=annotation), default


def instrument(fdef: ast.FunctionDef, classify: Classify, *, kernel: bool, label: str | None = None,
               twin_name: Callable[[object], str | None] = lambda obj: None, constexpr: ast.expr | None = None) -> Result:
    """The function with probes added (a new tree; ``fdef`` is not modified).

    Args:
        fdef: the function's ``def`` as parsed from its source (line 1: the ``def``).
        classify: what each call is (:data:`Classify`).
        kernel: a kernel gains ``ktrace_buf=None, KTRACE: constexpr = 0, KTRACE_WAIT_NS:
            constexpr = 0``, opens its tracer (``init_deferred``), spans the program and each
            iteration of its top-level loops, and flushes at every way out; a helper gains
            ``_kt, KTRACE_WAIT_NS: constexpr`` and returns the tracer after its own result.
        label: the function's name in region names (default: its own).
        twin_name: the name under which a helper's traced twin will be found (None: trace the
            call as an ordinary one).
        constexpr: the expression naming ``tl.constexpr`` in the prepared function's scope.

    Raises:
        Refused: the function uses ktrace's reserved names.
    """
    clash = _uses_prefix(fdef)
    if clash:
        raise Refused(f"it already uses the name {clash!r}, which ktrace reserves for its probes")
    fdef = copy.deepcopy(fdef)
    _keep(fdef)
    ins = _Instrument(fdef, classify, kernel=kernel, label=label or fdef.name, twin_name=twin_name)
    body = list(fdef.body)
    doc = body[:1] if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
        and isinstance(body[0].value.value, str) else []
    body = body[len(doc):]
    new_body = ins.block(body, kernel)
    cx = constexpr if constexpr is not None else ast.Attribute(value=_name("tl"), attr="constexpr", ctx=ast.Load())
    args = fdef.args
    if kernel:
        ins.sites.insert(0, Site("program", fdef.lineno, ins.label, ""))
        init = _assign(TRACER, _call(KL, "init_deferred", _name(BUF_PARAM), _name(GATE_PARAM)))
        begin = _assign(f"{PREFIX}_program", _call(KL, "begin", _name(TRACER), _const(ins.label)))
        head = _locate([init, begin], body[0] if body else fdef)
        ends_with_return = bool(new_body) and isinstance(new_body[-1], ast.Return)
        tail = [] if ends_with_return else ins._closing(body[-1] if body else fdef)
        fdef.body = doc + head + new_body + tail
        extra = [(BUF_PARAM, _const(None), None), (GATE_PARAM, _const(0), copy.deepcopy(cx)),
                 (BOUND_PARAM, _const(0), copy.deepcopy(cx))]
    else:
        last = body[-1] if body else None
        if any(r is not last for r in ast.walk(fdef) if isinstance(r, ast.Return)):
            raise Refused("it returns from inside a branch or loop: its tracer could not be handed back on every path")
        if not isinstance(last, ast.Return):
            new_body.append(_locate(ast.Return(value=_name(TRACER)), last or fdef))
        fdef.body = doc + new_body
        # (keywords at the call: defaults keep them valid after parameters that have defaults)
        extra = [(TRACER, _const(None), None), (BOUND_PARAM, _const(0), copy.deepcopy(cx))]
    for pname, default, ann in extra:
        args.args.append(ast.arg(arg=pname, annotation=ann))
        args.defaults.append(default)
    _locate([fdef.args], fdef)
    fdef.decorator_list = []
    ast.fix_missing_locations(fdef)
    for n in ast.walk(fdef):
        if hasattr(n, "_kt_keep"):
            del n._kt_keep
    return Result(fdef=fdef, sites=ins.sites, limits=ins.limits, twins=ins.twins)
