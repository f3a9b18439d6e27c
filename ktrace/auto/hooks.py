"""Where tracing without edits meets Triton and torch: the launch hook and the allocation hooks.

:func:`install` (idempotent, process-wide; undone by nothing: a hook with no session to serve
passes every call through unchanged) puts three small wrappers in place:

* ``triton.runtime.jit.JITFunction.run`` — every launch of every ``@triton.jit`` kernel goes
  through it. While a dispatcher is set (a capture with ``auto=`` is open: ``ktrace.session``
  sets it) and the launch is not a warm-up, not inside the autotuner's benchmarking, not a kernel
  ktrace prepared or instrumented itself, the dispatcher may launch a traced copy instead; it
  returns :data:`PASS` to let the launch go as written.
* ``triton.runtime.autotuner.Autotuner._bench`` — marks its benchmarking launches, which are not
  recorded (they are the autotuner's timing runs, not the program's).
* ``torch.distributed._symmetric_memory.rendezvous`` — registers each handle's buffers and
  signal pads as spaces (``ktrace.auto.addresses``), so the addresses kernels record in them
  map to (owner, offset). Installed when torch's symmetric memory is imported, before or after.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
import threading

from . import addresses

log = logging.getLogger("ktrace")

#: What a dispatcher returns to let a launch go as written.
PASS = object()

_lock = threading.Lock()
_installed: set[str] = set()
_dispatch = None  # dispatch(jit_fn, grid, args, kwargs) -> kernel | PASS
_local = threading.local()


def set_dispatch(fn) -> None:
    """Route launches to ``fn`` (None: every launch goes as written)."""
    global _dispatch
    _dispatch = fn


def busy() -> bool:
    """Whether this thread is inside a launch ktrace makes itself or the autotuner's benchmarking."""
    return getattr(_local, "busy", 0) > 0


class quiet:
    """``with quiet():`` launches on this thread go as written (nested use allowed)."""

    def __enter__(self):
        _local.busy = getattr(_local, "busy", 0) + 1

    def __exit__(self, *exc):
        _local.busy -= 1


def install() -> None:
    """Put the wrappers in place (once per process): the launch hook and the allocation hook."""
    watch()
    with _lock:
        if "triton" not in _installed:
            _install_triton()
            _installed.add("triton")


def watch() -> None:
    """Record where torch symmetric memory maps every rank's copy of each allocation from now on
    (the rendezvous hook alone; imports nothing). A program that allocates before its first
    ``ktrace.capture(auto=...)`` calls this first, or gives the handles made earlier to
    :func:`register_handle`; ``ktrace record`` does it when each process starts."""
    with _lock:
        if "symm" not in _installed:
            _installed.add("symm")
            if "torch.distributed._symmetric_memory" in sys.modules:
                _install_symm(sys.modules["torch.distributed._symmetric_memory"])
            else:
                after_import("torch.distributed._symmetric_memory", _install_symm)


def _install_triton() -> None:
    from triton.runtime import autotuner, jit

    original_run = jit.JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        d = _dispatch
        if d is not None and not warmup and not busy() and not getattr(self, "ktrace_auto", False):
            got = d(self, grid, args, kwargs)
            if got is not PASS:
                return got
        return original_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    run.__wrapped__ = original_run
    run.__doc__ = original_run.__doc__
    jit.JITFunction.run = run

    bench = getattr(autotuner.Autotuner, "_bench", None)
    if bench is not None:
        def _bench(self, *args, **kwargs):
            with quiet():
                return bench(self, *args, **kwargs)

        _bench.__wrapped__ = bench
        autotuner.Autotuner._bench = _bench


def register_handle(hdl, group_ranks=None, name: str = "symm") -> list[int]:
    """Register a torch symmetric-memory handle's buffer and signal pad as two spaces: where
    every rank's copy is mapped in this process (``buffer_ptrs``, ``signal_pad_ptrs``). Returns
    the space numbers registered (none when the handle says nothing usable)."""
    out = []
    for ptrs, size, what in (("buffer_ptrs", "buffer_size", "buffer"), ("signal_pad_ptrs", "signal_pad_size", "signal pad")):
        try:
            bases = [int(p) for p in getattr(hdl, ptrs)]
            nbytes = int(getattr(hdl, size))
        except Exception:
            continue
        if group_ranks is not None and len(group_ranks) == len(bases):  # (a sub-group: index -> world rank)
            world = [0] * (max(group_ranks) + 1)
            for i, r in enumerate(group_ranks):
                world[r] = bases[i]
            bases = world
        space = addresses.register_space(bases, nbytes, f"{name} {what}")
        if space is not None:
            out.append(space)
    return out


def _install_symm(mod) -> None:
    original = getattr(mod, "rendezvous", None)
    if original is None or getattr(original, "__ktrace_wrapped__", False):
        return

    def rendezvous(*args, **kwargs):
        hdl = original(*args, **kwargs)
        try:
            register_handle(hdl, _group_ranks(args, kwargs))
        except Exception as e:  # (never break the program's own rendezvous)
            log.warning("ktrace: could not record a symmetric-memory rendezvous's addresses: %s", e)
        return hdl

    rendezvous.__wrapped__ = original
    rendezvous.__ktrace_wrapped__ = True
    rendezvous.__doc__ = original.__doc__
    mod.rendezvous = rendezvous


def _group_ranks(args, kwargs):
    """The world ranks of the group a rendezvous was over (None: the world, or not known)."""
    group = kwargs.get("group", args[1] if len(args) > 1 else None)
    if group is None:
        return None
    try:
        import torch.distributed as dist

        if isinstance(group, str):
            from torch.distributed.distributed_c10d import _resolve_process_group

            group = _resolve_process_group(group)
        return dist.get_process_group_ranks(group)
    except Exception:
        return None


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback on a module right after it is first imported.

    It stays on ``sys.meta_path`` until the module is imported, not merely looked up: a program
    (torch's ``has_triton_package``, for one) may ask ``importlib.util.find_spec(name)`` long before
    it imports the module, and a finder that left at that first question would never see the
    import."""

    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback
        self._looking = threading.local()
        self.done = False

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self.done or getattr(self._looking, "on", False):
            return None
        self._looking.on = True  # (the lookup below asks the finders again: not this one)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module
        finder = self

        def exec_and_patch(module):
            exec_module(module)
            if finder.done:
                return
            finder.done = True
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
            try:
                finder.callback(module)
            except Exception as e:
                log.warning("ktrace: could not hook %s: %s", fullname, e)

        spec.loader.exec_module = exec_and_patch
        return spec


def after_import(name: str, callback) -> None:
    """Call ``callback(module)`` once the module ``name`` is imported (a finder first on
    ``sys.meta_path``)."""
    sys.meta_path.insert(0, _AfterImport(name, callback))


def map_heap(bases, size: int, name: str = "heap") -> int | None:
    """Tell ktrace where an Iris-style symmetric heap is: ``bases[r]`` is where rank ``r``'s heap
    is mapped in this process (a tensor or a sequence of ints; rank order of the world), ``size``
    its bytes per rank. Call it on every rank, in the same order as its other allocations (it is
    numbered like them). Addresses the kernels record inside it then pair across ranks.

    Returns:
        The space's number (None when every space number is taken: its addresses stay unpaired).
    """
    if hasattr(bases, "tolist"):
        try:
            bases = bases.tolist()
        except Exception:  # (a uint64 tensor torch cannot list: view it as int64)
            bases = bases.view(getattr(__import__("torch"), "int64")).tolist()
    vals = [int(b) & ((1 << 64) - 1) for b in bases]
    if not vals or int(size) <= 0:
        raise ValueError(f"map_heap: bases must list every rank's heap and size be positive, got {len(vals)} bases, "
                         f"size {size}")
    return addresses.register_space(vals, int(size), name)
