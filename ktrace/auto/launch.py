"""Launches of kernels not written for ktrace, traced: the launch hook's dispatcher and the
traced copy it launches (docs/byok.md).

While a capture with ``auto`` is open, ``ktrace.session.route_auto_launches`` sets
:func:`dispatch` as the launch hook's dispatcher (``ktrace.auto.hooks``): a launch of a kernel
the capture's :class:`ktrace.auto.config.AutoConfig` matches runs as its traced copy
(``ktrace.auto.prepare``), made once per kernel and config, through the one traced launch
(``ktrace.traced``); any other launch goes as written.
"""

from __future__ import annotations

import logging
import threading

from .. import regions
from ..traced import Traced
from . import hooks

log = logging.getLogger("ktrace")

_lock = threading.Lock()
_kernels: dict = {}  # (id(original jit function), config) -> (original, AutoTraced | None)
_said: set = set()  # (kernel, line) limits already logged


class AutoTraced(Traced):
    """A kernel not written for ktrace, launched as its traced copy (``ktrace.auto.prepare``).

    Its launches record raw addresses (``meta["addresses"] == "raw"``): the collector maps them
    through each rank's table of mappings (``ktrace.auto.addresses``). A copy that Triton cannot
    compile is dropped with one line, and the kernel runs as written, untraced, from then on.
    """

    launch_meta = {"addresses": "raw", "auto": True}

    def __init__(self, prepared, config):
        self.jit_fn = prepared.jit
        self.original = prepared.original
        self.prepared = prepared
        self.config = config
        self.events_per_program = config.events_per_program
        self.name = prepared.original.__name__
        self.lanes = ()
        self.warm = set()
        self._signature(prepared.jit.fn)
        self.region_sources = prepared.source_lines()
        self.broken = False
        for name in self.region_sources:
            regions.register(name)

    def extra_kwargs(self) -> dict:
        return {"KTRACE_WAIT_NS": int(self.config.wait_timeout_ns)}

    def untraced(self, grid, args, kwargs):
        with hooks.quiet():
            return self.original[grid](*args, **kwargs)

    def launch(self, session, grid, args, kwargs):
        """Launch traced into ``session``; as written once its copy has failed to compile."""
        if self.broken:
            return self.untraced(grid, args, kwargs)
        n_before = len(session.launches)
        try:
            return self.launch_in(session, grid, args, kwargs)
        except Exception as e:
            if type(e).__name__ != "CompilationError":
                raise
            self.broken = True
            if len(session.launches) > n_before:
                del session.launches[n_before:]  # (its buffer stays unused in the arena)
            log.warning("[rank %s] ktrace: the traced copy of %s does not compile (%s); it runs untraced",
                        getattr(session, "rank", "?"), self.name, " ".join(str(e).split())[:300])
            return self.untraced(grid, args, kwargs)


def dispatch(find_session, jit_fn, grid, args, kwargs):
    """The launch hook's dispatcher: a kernel the innermost open capture (``find_session()``)
    traces ``auto`` is launched as its traced copy; any other launch goes as written
    (:data:`ktrace.auto.hooks.PASS`)."""
    session = find_session()
    cfg = getattr(session, "auto_config", None)
    if cfg is None:
        return hooks.PASS
    traced = _auto_traced(jit_fn, cfg, session)
    if traced is None:
        return hooks.PASS
    session.before_auto_launch(args, kwargs)
    with hooks.quiet():
        return traced.launch(session, grid, args, kwargs)


def _auto_traced(jit_fn, cfg, session):
    """The kernel's :class:`AutoTraced` (made once per kernel and config), or None when it cannot be
    prepared (said once, in one line)."""
    from .prepare import prepare
    from .transform import Refused

    key = (id(jit_fn), cfg)
    hit = _kernels.get(key)  # (the launch path: one lookup, no lock, when the kernel was seen)
    if hit is not None and hit[0] is jit_fn:
        return hit[1]
    with _lock:
        if "ktrace_buf" in jit_fn.arg_names or (jit_fn.__module__ or "").startswith("ktrace.") or not cfg.matches(jit_fn):
            _kernels[key] = (jit_fn, None)  # (instrumented by hand, ktrace's own, or not asked for)
            return None
        rank = getattr(session, "rank", "?")
        try:
            p = prepare(jit_fn)
        except Refused as e:
            log.warning("[rank %s] ktrace: kernel %s is not traced: %s", rank, jit_fn.__name__, e)
            _kernels[key] = (jit_fn, None)
            return None
        for line in p.limits():
            if (jit_fn.__name__, line) not in _said:
                _said.add((jit_fn.__name__, line))
                log.warning("[rank %s] ktrace: %s: %s", rank, jit_fn.__name__, line)
        traced = AutoTraced(p, cfg)
        _kernels[key] = (jit_fn, traced)
        return traced
