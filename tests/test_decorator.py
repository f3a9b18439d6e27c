"""The @ktrace.trace decorator's host logic, on the CPU (the launch itself is recorded, not run)."""

import pytest

import ktrace
from ktrace import decorator, traced
from ktrace import session as kcap
from tests import probe_kernels as pk


class _Recorder:
    """Stands in for the JIT function's launcher to see exactly what the decorator passes."""

    def __init__(self, real):
        self.real = real
        self.calls = []

    def __getitem__(self, grid):
        return lambda *a, **k: self.calls.append((grid, a, k))

    def __getattr__(self, n):
        return getattr(self.real, n)


class _FakeSession:
    events_per_program = None

    def __init__(self):
        self.asked = []

    def new_launch(self, kernel, grid, capacity, device):
        self.asked.append((kernel.name, grid, capacity))

        class PL:
            buffer = "BUF"

        return PL()


def _wrap(tk):
    rec = _Recorder(tk.jit_fn)
    tk.__dict__["jit_fn"] = rec
    return rec


def test_decorator_requires_the_trace_parameters():
    import triton
    import triton.language as tl

    with pytest.raises(TypeError, match="ktrace_buf"):

        @ktrace.trace
        @triton.jit
        def k(x, n):
            pass

    with pytest.raises(TypeError, match="above @triton.jit"):
        ktrace.trace(lambda x: x)


def test_untraced_launch_passes_arguments_through_unchanged(monkeypatch):
    tk = ktrace.trace(events_per_program=4)(pk.copy_kernel.jit_fn)
    rec = _wrap(tk)
    monkeypatch.delenv("KTRACE", raising=False)
    tk[(3,)]("x", "y", 10, BLOCK=4)
    assert rec.calls == [((3,), ("x", "y", 10), {"BLOCK": 4})]


def test_traced_launch_sizes_buffer_from_grid_and_fills_the_gate(monkeypatch):
    tk = ktrace.trace(events_per_program=lambda meta: meta["BLOCK"] // 2, name="mycopy")(pk.copy_kernel.jit_fn)
    rec = _wrap(tk)
    s = _FakeSession()
    monkeypatch.setattr(kcap, "active_session", lambda: s)
    monkeypatch.setattr(traced, "device_of", lambda a, k: 0)
    tk[lambda meta: (meta["n"] // meta["BLOCK"], 2)]("x", "y", 12, BLOCK=6, num_warps=2)
    assert s.asked == [("mycopy", (2, 2, 1), 3)]
    grid, args, kw = rec.calls[0]
    assert args == ("x", "y", 12)
    assert kw == {"BLOCK": 6, "num_warps": 2, "ktrace_buf": "BUF", "KTRACE": 3}


def test_session_override_and_env_switch(monkeypatch):
    tk = ktrace.trace(pk.copy_kernel.jit_fn)
    _wrap(tk)
    s = _FakeSession()
    s.events_per_program = 9
    monkeypatch.setattr(kcap, "active_session", lambda: s)
    monkeypatch.setattr(traced, "device_of", lambda a, k: 0)
    tk[(5,)]("x", "y", 1, BLOCK=1)
    assert s.asked == [("copy_kernel", (5, 1, 1), 9)]
    monkeypatch.undo()
    for v, on in [("", False), ("0", False), ("off", False), ("1", True), ("yes", True)]:
        monkeypatch.setenv("KTRACE", v)
        assert kcap._env_on() is on


def test_capture_context_nests_and_restores():
    assert kcap.active_session() is None or kcap._env_on()
    with ktrace.capture(rank=0, world_size=1) as a:
        assert kcap.active_session() is a
        with ktrace.capture(rank=0, world_size=1) as b:
            assert kcap.active_session() is b
        assert kcap.active_session() is a
    assert a.closed and b.closed
    with pytest.raises(ValueError):
        ktrace.capture(events_per_program=0)


def test_decorator_defers_records_and_appends_the_flush():
    """Each top-level ``kt = kl.init(...)`` becomes ``init_deferred`` and ``kl.finish(kt)`` ends the
    kernel; the lines of the source keep their numbers; wrapping again starts from the original."""
    orig = pk.shape_kernel.jit_fn.ktrace_original
    tk = pk.shape_kernel
    new, old = tk.jit_fn.src.splitlines(), orig.src.splitlines()
    assert len(new) == len(old) + 1 and new[-1].strip() == "_ktrace_language_.finish(kt)"
    changed = [i for i, (a, b) in enumerate(zip(new, old)) if a != b]
    assert len(changed) == 1 and "init_deferred(ktrace_buf, KTRACE)" in new[changed[0]]
    again = ktrace.trace(tk.jit_fn)
    assert again.jit_fn.ktrace_original is orig and again.jit_fn.src == tk.jit_fn.src
    assert orig.src == "\n".join(old) + ("\n" if orig.src.endswith("\n") else "")  # the original is untouched


def test_decorator_refuses_an_early_return_in_one_line():
    import triton
    import triton.language as tl

    import ktrace.language as kl

    @triton.jit
    def k(x, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        kt = kl.init(ktrace_buf, KTRACE)
        if tl.program_id(0) > 0:
            return
        kt = kl.mark(kt, "m")

    with pytest.raises(decorator.KernelShapeError, match=r"kernel k returns at line \d+: .* without `return`") as ei:
        ktrace.trace(k)
    assert "\n" not in str(ei.value)


def test_kernel_without_a_top_level_init_is_left_as_is():
    import triton
    import triton.language as tl

    @triton.jit
    def k(x, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        tl.store(x, 1)

    assert ktrace.trace(k).jit_fn is k


def test_a_tracer_passed_to_a_helper_that_drops_it_keeps_records_immediate(caplog):
    """A helper given the tracer whose result is not assigned back would lose the records still
    pending when it returns: such a kernel is left as written (records stored by their probes)."""
    import logging

    import triton
    import triton.language as tl

    import ktrace.language as kl

    @triton.jit
    def helper(kt, x):
        kt = kl.mark(kt, "in helper")
        tl.store(x, 1)
        return kt

    @triton.jit
    def dropping(x, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        kt = kl.init(ktrace_buf, KTRACE)
        helper(kt, x)

    @triton.jit
    def threading(x, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        kt = kl.init(ktrace_buf, KTRACE)
        off = kl.init(ktrace_buf, 0)
        helper(off, x)
        s = kl.begin(kt, "outer")
        kt = helper(kt, x)
        kt = kl.end(kt, s)

    @triton.jit
    def returning(kt, x):  # a helper that hands the probe's tracer straight back
        tl.store(x, 2)
        return kl.mark(kt, "returned")

    @triton.jit
    def threading_by_return(x, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        kt = kl.init(ktrace_buf, KTRACE)
        kt = returning(kt, x)

    @triton.jit
    def dropping_by_return(x, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        kt = kl.init(ktrace_buf, KTRACE)
        returning(kt, x)

    with caplog.at_level(logging.INFO, logger="ktrace"):
        assert ktrace.trace(dropping).jit_fn is dropping
        assert ktrace.trace(dropping_by_return).jit_fn is dropping_by_return
    assert "passes the tracer to helper without keeping its result" in caplog.text
    assert "passes the tracer to returning without keeping its result" in caplog.text
    assert ktrace.trace(threading).jit_fn.ktrace_original is threading
    assert ktrace.trace(threading_by_return).jit_fn.ktrace_original is threading_by_return


def test_init_imported_by_name_is_prepared_too():
    import triton
    import triton.language as tl

    import ktrace.language as kl
    from ktrace.language import init

    @triton.jit
    def k(x, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        kt = init(ktrace_buf, KTRACE)
        kt = kl.mark(kt, "m")
        tl.store(x, 1)

    src = ktrace.trace(k).jit_fn.src
    assert "kt = _ktrace_language_.init_deferred(ktrace_buf, KTRACE)" in src
    assert src.rstrip().endswith("_ktrace_language_.finish(kt)")


def test_inductor_can_emit_a_kernel_naming_only_triton_and_tl():
    """torch.compile compiles a kernel as written into the caller's graph only when Inductor can
    re-emit it (it names no module but ``triton`` and ``triton.language as tl``); a kernel written
    with ``ktrace.language`` (``kl.init``) is left out of the graph instead of failing there."""
    from tests.byok.ring_plain import ring_plain

    assert decorator._inductor_can_emit(ring_plain)
    assert not decorator._inductor_can_emit(pk.copy_kernel.jit_fn.ktrace_original)
    assert decorator._inductor_can_emit(ring_plain)  # (cached: the same answer)
