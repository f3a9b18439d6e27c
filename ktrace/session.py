"""Capture sessions: the event buffers of traced launches, the clocks' calibration, the capture.

Usage::

    with ktrace.capture() as cap:             # traced: buffers allocated, launches recorded
        copy[grid](x, y, n, BLOCK=1024)       # (a kernel decorated with ``@ktrace.trace``)
    cap.events()                              # numpy table (schema.EVENT_DTYPE)
    cap.save("run.ktrace")

Setting the environment variable ``KTRACE=1`` traces every launch of every traced kernel in
the process and writes ``$KTRACE_OUT`` (default ``ktrace-rank<r>.ktrace``) at exit.

Each traced launch gets its own zeroed device buffer, carved from arenas of ``ARENA_BYTES``
that are zeroed once when allocated: a launch adds no memset and no host-to-device copy.
Buffers stay on the device until the session ends; then each arena is copied to the host once.

Kernels reach a session through the one traced launch (``ktrace.traced``): those decorated with
``@ktrace.trace`` (``ktrace.decorator``) and, in a capture with ``auto=``, those not written for
ktrace (``ktrace.auto.launch``, through the launch hook :func:`route_auto_launches` sets).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import logging
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import regions, schema
from .device import device_info
from .captures.file import Capture, Launch, RankCapture, write_capture
from .captures.gather import PEER_TIMEOUT_S, register_process
from .captures.identity import run_id as _run_id
from .traced import device_of, require_torch

log = logging.getLogger("ktrace")

#: Launch buffers are carved from zeroed arenas of this size (one memset per arena, not per launch).
ARENA_BYTES = 64 << 20
_ALIGN_WORDS = 32  # 256-byte alignment of each launch buffer inside an arena
#: Bytes of the heap an ``auto`` capture over several ranks makes to calibrate the clocks over
#: (each calibration takes 256 of them: thousands of captures per process).
CALIBRATION_HEAP_BYTES = 1 << 20
_calibration_heaps: dict = {}  # (process group, device) -> the heap

#: Which calibration a phase is, in the capture's notes.
_PHASE_WORDS = {"before": "opening", "after": "closing"}

_state = threading.local()
_env_session: "Session | None" = None
_env_lock = threading.Lock()


def _env_on() -> bool:
    return os.environ.get("KTRACE", "").strip().lower() not in ("", "0", "false", "off", "no")


#: Sessions open in this process (any thread), and whether tracing is on anywhere (one is open, or
#: ``KTRACE`` is set): what ``torch.compile`` decides a traced launch by (a global it reads is
#: guarded, so a change recompiles the caller).
_open_sessions = 0
_TRACING = _env_on()


def _stack() -> list:
    st = getattr(_state, "stack", None)
    if st is None:
        st = _state.stack = []
    return st


def active_session() -> "Session | None":
    """The innermost open capture session of this thread, else the env-var session, else None
    (None inside :func:`suspended`)."""
    if getattr(_state, "suspended", False):
        return None
    st = getattr(_state, "stack", None)
    if st:
        return st[-1]
    if _env_on():
        return _get_env_session()
    return None


@contextlib.contextmanager
def suspended():
    """Launches made in this block (this thread) run untraced, as with no capture open: what
    ``ktrace.measure_cost`` times a step's untraced calls in, between traced ones."""
    before = getattr(_state, "suspended", False)
    _state.suspended = True
    try:
        yield
    finally:
        _state.suspended = before


def _get_env_session() -> "Session":
    global _env_session
    with _env_lock:
        if _env_session is None:
            _env_session = Session()
            _env_session._open()
            _count_open(+1)
            atexit.register(_save_env_session)
        return _env_session


def _count_open(step: int) -> None:
    global _open_sessions, _TRACING
    _open_sessions = max(0, _open_sessions + step)
    _TRACING = _open_sessions > 0 or _env_on()


def tracing() -> bool:
    """Whether a capture is open anywhere in this process, or ``KTRACE`` is set (what a traced
    kernel called from code ``torch.compile`` traces decides by: the global read here is guarded,
    so opening or closing a capture recompiles the caller)."""
    return _TRACING


def route_auto_launches(on: bool) -> None:
    """Route the launches of kernels not written for ktrace through the launch hook to their traced
    copies in the innermost open capture with ``auto`` (``ktrace.auto.launch``), or (off) let every
    launch go as written."""
    from .auto import hooks, launch

    if on:
        hooks.install()
    hooks.set_dispatch(functools.partial(launch.dispatch, active_session) if on else None)


def _save_env_session() -> None:
    s = _env_session
    if s is None or not s.launches:
        return
    out = os.environ.get("KTRACE_OUT") or f"ktrace-rank{s.rank}.ktrace"
    if "{rank}" in out:
        out = out.format(rank=s.rank)
    try:
        s.close()
        path = s.save(out)
        log.info("[rank %d] ktrace: wrote %s (%d launches)", s.rank, path, len(s.launches))
    except Exception as e:  # at exit, report instead of raising into the interpreter's shutdown
        log.error("[rank %d] ktrace: could not write %s: %s", s.rank, out, e)


# ---------------------------------------------------------------------------------------------
# sessions
# ---------------------------------------------------------------------------------------------


@dataclass
class PendingLaunch:
    index: int
    kernel: str
    grid: tuple[int, int, int]
    capacity: int
    device: int
    host_ns: int
    buffer: Any  # torch int64 tensor (a view into an arena) until fetched
    arena: int = 0  # which arena of its device
    offset: int = 0  # int64 words into the arena
    stream: int = 0
    raw: np.ndarray | None = None
    #: lanes per program (``ktrace.gluon``): names, one per lane; () for a program of one lane
    lanes: tuple = ()
    gate: int = 0  # the KTRACE value of a ring-mode launch (ktrace.flight); 0: `capacity`
    #: what the capture's launch record keeps besides (``{"addresses": "raw"}``: ``ktrace.auto``)
    meta: dict = field(default_factory=dict)
    #: a replay of a launch captured into a CUDA graph (``ktrace.graphs``): ``{"capture": n, "replay": r}``
    graph: dict | None = None
    #: its buffer follows a delay table (``ktrace.inject``): launched with ``schema.INJECT_GATE``
    injected: bool = False


@dataclass
class _GraphPending:
    """What a launch captured into a CUDA graph gets: the stage, the gate, and the commit to
    capture after the kernel (``ktrace.graphs.recorder.GraphLaunch``); ``number``: which of the
    session's graph captures it is."""

    buffer: Any
    gate: int
    after: Callable[[], None]
    number: int = 0


@dataclass
class _Arena:
    tensor: Any  # zeroed int64 device tensor
    used: int  # words handed out
    ready: Any  # CUDA event recorded after the zeroing
    stream: int  # stream that zeroed it
    waited: set = field(default_factory=set)  # streams already made to wait for the zeroing


@dataclass
class Session:
    """A capture: collects every traced launch made while it is open.

    Args:
        events_per_program: if set, overrides every kernel's own slots per program.
        rank, world_size: default to torch.distributed's when it is initialised, else 0 and 1.
        max_launches: stop recording (and warn once) after this many launches; None = no limit.
        warmup: the first this many launches of each kernel are marked as warm-up in the capture
            (traced as the others, so that they warm what later launches run): ``ktrace report``
            leaves them out of its findings (``--skip-warmup 0`` keeps them).
        heap: a ``ktrace.shmem.SymmetricHeap``. When given, the session calibrates the ranks'
            clocks over it (flag ping-pong, ``ktrace.clock.calibrate``) when it opens and again
            when it closes, and stores the samples in the capture so the collector can put all
            ranks on one clock. Opening and closing are then collective over the heap's ranks.
        calibration: a ``ktrace.clock.calibrate.CalibrationConfig`` (rounds, reference rank).
        peer_timeout_s: how long opening, closing (with a heap) and :meth:`gather` wait for the
            other ranks to arrive before going on without them (``ktrace.captures.gather.arrive``).
        run_id: the run this capture belongs to (default: ``ktrace.captures.identity.run_id()``,
            the same on every rank).
        flight_recorder: True or a ``ktrace.flight.recorder.FlightConfig``: trace in ring mode
            (each lane keeps its last records and says what it waits for, in pinned host memory),
            with a watchdog that writes a live dump when the kernels stop making progress while
            a lane waits, and a dump on ``SIGUSR1`` (``ktrace dump``). See ``ktrace.flight``.
        auto: trace ``@triton.jit`` kernels that were not written for ktrace, without edits
            (``ktrace.auto``; docs/byok.md): True for every kernel launched while the capture is
            open, a pattern (``"my_kernel*"``, matched against the kernel's name and its
            ``module.qualname``; several separated by commas) or a
            ``ktrace.auto.config.AutoConfig``. Without a ``heap``, a capture over several ranks
            (torch.distributed initialised) makes a small one of its own to calibrate the clocks.
        graph_ring: replays of each traced launch captured into a CUDA graph that the device
            keeps until the host takes them (:meth:`drain_replays`, or when the capture closes);
            older ones are overwritten and counted (``ktrace.graphs``, docs/graphs.md).
        profiler: a ``torch.profiler.profile`` recording the same run. Each traced launch is then
            wrapped in a profiler range named ``ktrace <kernel> #<launch index>`` (so the launch's
            CUPTI kernel record is found by its correlation id, not only by order), and
            :meth:`save` also writes the profiler's Chrome trace beside the capture, once the
            profiler has stopped (``ktrace merge CAPTURE -o out.pftrace`` then merges both: see
            ``ktrace.export.profile``).
        inject: a ``ktrace.inject.Injection``: every traced launch is compiled with the delay
            injection points in and reads this rank's rows of it (set ``inject`` again between
            launches to change the delays: no recompilation). Not with ``flight_recorder`` or CUDA
            graphs.
        probe_cost: what ``ktrace.measure_cost`` measured of the probes' cost on this program
            (``ktrace.cost.ProbeCost``): kept in the capture's metadata (``probe_cost``).

    Leaving the ``with`` block never raises anything but the code's own error. Waits that timed
    out while it was open are kept in the capture (:attr:`RankCapture.timeouts`) and still
    reported by ``heap.check()`` afterwards; the closing calibration runs anyway, and when it
    cannot (a rank is missing, or it fails) the capture's notes say so and which alignment was
    kept. A rank whose code raised inside the block tells the others, which then skip the
    closing calibration at once instead of waiting for it.
    """

    events_per_program: int | None = None
    rank: int | None = None
    world_size: int | None = None
    max_launches: int | None = None
    warmup: int = 0
    launches: list[PendingLaunch] = field(default_factory=list)
    kernels: dict[str, Any] = field(default_factory=dict)
    arena_bytes: int = ARENA_BYTES
    heap: Any = None
    calibration: Any = None
    peer_timeout_s: float = PEER_TIMEOUT_S
    run_id: str | None = None
    flight_recorder: Any = False
    _flight: Any = field(default=None, repr=False)
    profiler: Any = None
    auto: Any = None
    _auto: Any = field(default=None, repr=False)
    _own_heap: bool = field(default=False, repr=False)
    graph_ring: int = 256
    inject: Any = None
    probe_cost: Any = None
    _inject_tables: dict = field(default_factory=dict, repr=False)
    _graphs: list = field(default_factory=list, repr=False)  # ktrace.graphs.recorder.GraphLaunch, in capture order
    _calib: dict = field(default_factory=dict, repr=False)
    _notes: list = field(default_factory=list, repr=False)
    _timeouts: dict | None = field(default=None, repr=False)
    _timeouts_base: tuple = field(default=(0, 0), repr=False)
    _arenas: dict[int, list] = field(default_factory=dict, repr=False)
    started_ns: int = 0
    closed: bool = False
    _warned_full: bool = False

    def __post_init__(self):
        if self.events_per_program is not None and self.events_per_program <= 0:
            raise ValueError(f"events_per_program must be positive, got {self.events_per_program}")
        if not (isinstance(self.warmup, int) and self.warmup >= 0):
            raise ValueError(f"warmup must be a count of launches >= 0, got {self.warmup!r}")
        if not self.peer_timeout_s > 0:
            raise ValueError(f"peer_timeout_s must be positive, got {self.peer_timeout_s}")
        if isinstance(self.graph_ring, bool) or not isinstance(self.graph_ring, int) or self.graph_ring < 1:
            raise ValueError(f"graph_ring must be a positive int, got {self.graph_ring!r}")
        if self.rank is None or self.world_size is None:
            r, w = _dist_rank_world()
            self.rank = r if self.rank is None else self.rank
            self.world_size = w if self.world_size is None else self.world_size
        if self.inject is not None and self.flight_recorder:
            raise ValueError("inject: delays are injected into dense captures, not with flight_recorder")
        if self.auto not in (None, False):
            from .auto.config import config_of

            self._auto = config_of(self.auto)
        if self.heap is not None:
            # a heap may span one node only (SymmetricHeap(group=node_group)): the capture's rank
            # is the process's rank in the world, which the clock calibration spans
            self.rank, self.world_size = _dist_rank_world() if _is_dist() else (self.heap.rank, self.heap.world_size)

    # context manager -------------------------------------------------------------------------
    def _open(self):
        self.started_ns = time.time_ns()
        if self.run_id is None:
            self.run_id = _run_id()
        register_process(self.heap.group if self.heap is not None else None)
        if self.flight_recorder and self._flight is None:
            from .flight.recorder import FlightConfig, Recorder

            cfg = self.flight_recorder if isinstance(self.flight_recorder, FlightConfig) else FlightConfig()
            try:
                self._flight = Recorder(self, cfg).start()
            except Exception as e:  # traced as usual then, in device arenas, with no watchdog
                self._flight = None
                self._note(f"the flight recorder could not start ({e}); launches are traced without it")
        return self

    def __enter__(self) -> "Session":
        self._open()
        if self._auto is not None:
            self._start_auto()
            self._calibration_heap()
        if self.heap is not None:
            if _graph_capture_underway():  # (the calibration's kernels would be captured into the user's graph)
                self._note("the capture was opened while a CUDA graph was being captured: the ranks' clocks were not "
                           "calibrated when it opened")
            else:
                count, described = self.heap.timeouts()  # (earlier ones: not this capture's)
                self._timeouts_base = (count, len(described))
                self._calibrate("before")
        _stack().append(self)
        _count_open(+1)
        return self

    def __exit__(self, exc_type, exc, tb):
        st = _stack()
        if st and st[-1] is self:
            st.pop()
            _count_open(-1)
        if self._auto is not None and not any(getattr(x, "_auto", None) is not None for x in st):
            route_auto_launches(_env_session is not None and _env_session._auto is not None)
        if exc_type is None and _graph_capture_underway():
            # nothing that waits for the device may run inside the user's graph capture: the
            # capture is closed (and calibrated) by the first of to_capture/save/gather after it
            self._note("the capture was left while a CUDA graph was being captured: no closing clock calibration; "
                       "its buffers were read when it was saved")
            return False
        if exc_type is not None:
            self._leave()
            return False
        if self.heap is not None:
            try:
                self._sync()  # the code's own kernels: a fault of theirs surfaces here, as its error
            except BaseException:
                self._leave()
                raise
            self._record_timeouts()
            self._calibrate("after")
        self.close()
        return False

    def _start_auto(self) -> None:
        """Route launches of kernels not written for ktrace to their traced copies while this
        capture is open (``ktrace.auto``)."""
        route_auto_launches(True)

    @property
    def auto_config(self):
        """The ``ktrace.auto.config.AutoConfig`` of a capture with ``auto``, else None."""
        return self._auto

    def before_auto_launch(self, args, kwargs) -> None:
        """Before a kernel not written for ktrace is launched traced: a capture over several ranks
        given no heap makes a small one of its own at its first such launch and calibrates the
        clocks over it (collective: every rank launches the same kernels in the same order)."""
        if self.heap is None and not self._own_heap and self._calib == {}:
            self._calibration_heap(device_of(args, kwargs))
            if self.heap is not None:
                self._calibrate("before")

    def _calibration_heap(self, device=None) -> None:
        """A small heap of ktrace's own to calibrate the ranks' clocks over, for an ``auto``
        capture over several ranks that was given none (collective: every rank calls it at the
        same point; the ranks meet first, within ``peer_timeout_s``)."""
        if self.heap is not None or self._own_heap or not _is_dist():
            return
        import torch
        import torch.distributed as dist

        if dist.get_world_size() < 2 or not torch.cuda.is_available():
            return
        self._own_heap = True  # (tried once, whatever happens)
        from .auto.addresses import suppressed
        from .captures.gather import arrive
        from .shmem import SymmetricHeap

        dev = torch.device("cuda", torch.cuda.current_device() if device is None else int(getattr(device, "index", device)))
        key = (id(dist.group.WORLD), dev.index)
        heap = _calibration_heaps.get(key)
        if heap is None:  # (one per process and device, made collectively once and reused by later captures)
            arrival = arrive("capture.auto-heap", group=None, timeout_s=self.peer_timeout_s)
            if not arrival.complete:
                self._note(f"no heap to calibrate the clocks over: {arrival.describe()}; ranks stay on their own clocks")
                return
            try:
                with suppressed():  # (ktrace's own memory: not a space the kernels signal through)
                    heap = SymmetricHeap(size_bytes=CALIBRATION_HEAP_BYTES, device=dev)
            except Exception as e:
                self._note(f"the heap to calibrate the clocks over could not be made ({e}); ranks stay on their own clocks")
                return
            _calibration_heaps[key] = heap
        self.heap = heap
        self.rank, self.world_size = _dist_rank_world()

    def _sync(self) -> None:
        import torch

        if self.heap.device.type == "cuda":
            torch.cuda.synchronize(self.heap.device)

    def _leave(self) -> None:
        """On the way out with the code's error: tell the other ranks (they skip the closing
        calibration rather than wait for this rank) and keep what was recorded, raising nothing."""
        if self.heap is not None:
            self._calibrate("after", leaving=True)
        try:
            self.close()
        except Exception as e:  # (the device may be in the state that caused the error)
            log.error("[rank %s] ktrace: the capture's buffers could not be copied after the error: %s", self.rank, e)

    def _note(self, text: str) -> None:
        text = " ".join(str(text).split())
        self._notes.append(text)
        log.error("[rank %s] ktrace: %s", self.rank, text)

    def _record_timeouts(self) -> None:
        """Keep the waits that timed out while the capture was open (the heap keeps them too)."""
        try:
            count, described = self.heap.timeouts()
        except Exception as e:
            self._note(f"the heap's timed-out waits could not be read: {e}")
            return
        base_count, base_described = self._timeouts_base
        if count >= base_count:  # (else the code cleared them inside the block: all are new)
            count, described = count - base_count, described[base_described:]
        self._timeouts = {
            "count": int(count),
            "waits": [{k: v for k, v in dataclasses.asdict(t).items() if k != "rank"} for t in described],
        }
        if count:
            log.warning("[rank %s] ktrace: %d wait(s) timed out during the capture; kept in it and for heap.check()",
                        self.rank, count)

    def _calibrate(self, phase: str, *, leaving: bool = False) -> None:
        """Clock calibration against the reference rank (collective), when a heap was given. The
        ranks meet first, within ``peer_timeout_s``; a calibration that cannot run or fails is
        noted in the capture, with the alignment kept, and never raises."""
        if self.heap is None:
            return
        from .captures.gather import arrive

        # (over every rank: between nodes the calibration chains hosts outside the heap's group)
        arrival = arrive(f"capture.{phase}", group=None, timeout_s=self.peer_timeout_s, leaving=leaving)
        if leaving:
            return
        if not arrival.complete:
            self._note(f"{_PHASE_WORDS[phase]} clock calibration not run: {arrival.describe()}; {self._kept_alignment(phase)}")
            return
        try:
            from .clock.calibrate import calibrate

            self._sync()
            self._calib[phase] = calibrate(self.heap, phase, self.calibration)
        except Exception as e:
            self._note(f"{_PHASE_WORDS[phase]} clock calibration did not complete ({e}); {self._kept_alignment(phase)}")

    def _kept_alignment(self, phase: str) -> str:
        if phase == "before":
            return "alignment: the closing calibration's alone (offset only, no drift), if it runs"
        if "before" in self._calib:
            return "alignment kept: the opening calibration's (offset only, no drift)"
        return "no calibration kept: this rank stays on its own clock (not aligned)"

    # recording -------------------------------------------------------------------------------
    def new_launch(self, kernel, grid: tuple[int, int, int], capacity: int, device: int, lanes: tuple = (),
                   meta: dict | None = None):
        """A buffer for one traced launch of ``kernel`` (a ``ktrace.traced.Traced``): a zeroed
        slice of a device arena, a slice of the flight recorder's ring arena (its ``gate`` says
        ring mode), or, for a launch captured into a CUDA graph, a stage and the commit to launch
        after the kernel (``after``). None when the launch is to run untraced (the capture is
        full, or the graph capture cannot take a traced launch)."""
        torch = require_torch()

        if self.closed:
            raise RuntimeError("this ktrace capture is closed; open a new one")
        if self.max_launches is not None and len(self.launches) >= self.max_launches:
            if not self._warned_full:
                log.warning("[rank %s] ktrace: capture holds max_launches=%d; later launches run untraced", self.rank, self.max_launches)
                self._warned_full = True
            return None
        # a program of several lanes is that many virtual programs (``ktrace.schema``'s Lanes)
        grid = schema.virtual_grid(grid, max(1, len(lanes)))
        n_prog = grid[0] * grid[1] * grid[2]
        from .graphs import recorder as graphs

        if graphs.capturing(device):
            return self._graph_launch(kernel, grid, capacity, device, lanes, meta)
        graphs.prepare(device)  # (what a later graph capture will need, made while none is underway)
        if self._flight is not None:
            return self._ring_launch(kernel, grid, n_prog, device, meta)
        words = (schema.buffer_bytes(n_prog, capacity) + 7) // 8
        pre = schema.INJECT_WORDS if self.inject is not None else 0  # (the delay table, before the buffer)
        words += pre
        stream = torch.cuda.current_stream(device)
        arenas = self._arenas.setdefault(device, [])
        if not arenas or arenas[-1].used + words > arenas[-1].tensor.numel():
            size = max(self.arena_bytes // 8, words)
            t = torch.zeros(size, dtype=torch.int64, device=f"cuda:{device}")
            ev = torch.cuda.Event()
            ev.record(stream)
            arenas.append(_Arena(tensor=t, used=0, ready=ev, stream=stream.cuda_stream))
        ar = arenas[-1]
        if stream.cuda_stream != ar.stream and stream.cuda_stream not in ar.waited:
            stream.wait_event(ar.ready)  # a launch on another stream must not overtake the zeroing
            ar.waited.add(stream.cuda_stream)
        off = ar.used
        ar.used += -(-words // _ALIGN_WORDS) * _ALIGN_WORDS
        if pre:  # (copied on the launch's stream for every launch, so a baseline's work is a delay's)
            ar.tensor[off:off + pre].copy_(self._inject_table(device))
            off, words = off + pre, words - pre
        pl = PendingLaunch(
            index=len(self.launches),
            kernel=kernel.name,
            grid=grid,
            capacity=capacity,
            device=device,
            host_ns=time.time_ns(),
            buffer=ar.tensor[off : off + words],
            arena=len(arenas) - 1,
            offset=off,
            stream=stream.cuda_stream,
            lanes=tuple(lanes),
            meta=dict(meta or {}, **({"inject": self.inject.to_meta()} if pre else {})),
            injected=bool(pre),
        )
        self.launches.append(pl)
        self.kernels.setdefault(kernel.name, kernel)
        return pl

    def _inject_table(self, device: int):
        """This rank's delay table on ``device``, kept per content: a launch copies it device to
        device (a copy from the host would wait for the work queued before it, with the host)."""
        tab = self.inject.table(int(self.rank))
        key = (device, tab.tobytes())
        have = self._inject_tables.get(key)
        if have is None:
            import torch

            have = self._inject_tables[key] = torch.from_numpy(tab).to(f"cuda:{device}")
        return have

    def _ring_launch(self, kernel, grid: tuple[int, int, int], n_prog: int, device: int, meta: dict | None = None):
        """A launch in ring mode: its buffer is a slice of the flight recorder's pinned arena."""
        import torch

        index = len(self.launches)
        buf = self._flight.new_buffer(index, n_prog)
        if buf is None:
            if not self._warned_full:
                log.warning("[rank %s] ktrace: the flight recorder's arena is full; later launches run untraced", self.rank)
                self._warned_full = True
            return None
        slots = self._flight.config.slots
        pl = PendingLaunch(index=index, kernel=kernel.name, grid=grid, capacity=slots, device=device, host_ns=time.time_ns(),
                           buffer=buf, stream=torch.cuda.current_stream(device).cuda_stream, gate=schema.ring_gate(slots),
                           meta=dict(meta or {}))
        self.launches.append(pl)
        self.kernels.setdefault(kernel.name, kernel)
        return pl

    def _graph_launch(self, kernel, grid: tuple[int, int, int], capacity: int, device: int, lanes: tuple,
                      meta: dict | None = None):
        """A launch captured into a CUDA graph: a stage and a replay ring (``ktrace.graphs``), or
        None (the launch then runs untraced in the graph) when it cannot be traced there without
        risking the user's capture. Never raises."""
        from .graphs import recorder as graphs

        gate = schema.ring_gate(self._flight.config.slots) if self._flight is not None else capacity
        warm = getattr(kernel, "warm", None)
        why = graphs.refusal(device) or (None if warm is None or (device, gate) in warm else
                                         "it was not launched traced before the graph capture (its traced binary would be "
                                         "loaded inside the capture): launch it once inside `ktrace.capture()` first (the "
                                         "warm-up), with the same events per program")
        if why:
            graphs.warn_once(("untraced", kernel.name, device, gate, why), f"{kernel.name}, captured into a CUDA graph, runs untraced "
                             f"there: {why}")
            return None
        try:
            gl = graphs.GraphLaunch.create(len(self._graphs), kernel.name, grid, capacity, device, lanes, self.graph_ring,
                                           flight=self._flight)
        except Exception as e:  # (the user's capture must go on: the launch runs untraced in it)
            self._note(f"a launch of {kernel.name} captured into a CUDA graph runs untraced: {e}")
            return None
        gl.launch_meta = dict(meta or {})  # (what each of its replays' launch records keeps besides)
        self._graphs.append(gl)
        self.kernels.setdefault(kernel.name, kernel)
        return _GraphPending(buffer=gl.stage, gate=gl.gate, after=gl.commit, number=len(self._graphs) - 1)

    def drain_replays(self) -> int:
        """Make the replays recorded so far of this capture's launches captured into CUDA graphs
        into launches, and free their ring slots for later replays.

        The ring of each such launch is copied to the host on the current stream, after the work
        queued there: call it on the stream the graphs are replayed on (the current one, unless
        you chose another), e.g. every few hundred replays, so that the ring (``graph_ring``
        replays) never overwrites one not taken yet. Replays overwritten before they were taken
        are counted (:meth:`graph_summaries`, and the capture's notes).

        Returns:
            The replays made into launches by this call.
        """
        if self.closed:
            raise RuntimeError("this ktrace capture is closed")
        if _graph_capture_underway():
            raise RuntimeError("drain_replays waits for the device: call it after the CUDA graph capture has ended")
        return self._take_replays()

    def graph_summaries(self) -> list[dict]:
        """Per launch captured into a CUDA graph (in capture order): its kernel, grid, replays
        counted on the device so far (as of the last drain or close), those recorded as launches,
        those overwritten in the ring before they were taken, and the ring's size."""
        return [gl.summary() for gl in self._graphs]

    def _take_replays(self) -> int:
        """The replays the rings hold that were not taken yet, as launches numbered after the
        launches so far, in the order their first events ran on the device (``ktrace.graphs.ring``)."""
        if not self._graphs:
            return 0
        from .graphs import ring as gring

        got = []
        for gl in self._graphs:
            taken = gl.take(gl.read())
            dense = gl.dense(taken, _dense_header(gl.device, gl.capacity, gl.grid, gl.lanes))
            cap = int(schema.unpack_header(dense[0])["capacity"]) if len(dense) else gl.capacity
            got.append((gl, taken.replays, dense, cap, gring.first_ticks(dense, math.prod(gl.grid), cap)))
        which, pos = gring.replay_order([g[4] for g in got])
        room = len(which) if self.max_launches is None else max(0, min(len(which), self.max_launches - len(self.launches)))
        for k in range(len(which)):  # (one per launch made: no per-event work)
            gl, replays, dense, cap, _ = got[which[k]]
            if k >= room:
                gl.not_kept += 1
                continue
            j = int(pos[k])
            self.launches.append(PendingLaunch(index=len(self.launches), kernel=gl.kernel, grid=gl.grid, capacity=cap,
                                               device=gl.device, host_ns=0, buffer=None, stream=gl.stream, raw=dense[j],
                                               lanes=gl.lanes, graph={"capture": gl.number, "replay": int(replays[j])},
                                               meta=dict(getattr(gl, "launch_meta", {}))))
            gl.kept += 1
        if room < len(which) and not self._warned_full:
            log.warning("[rank %s] ktrace: capture holds max_launches=%d; %d replay(s) not kept", self.rank, self.max_launches,
                        len(which) - room)
            self._warned_full = True
        return room

    def _note_graphs(self) -> None:
        """One note per launch captured into a CUDA graph: what became of its replays."""
        for gl in self._graphs:
            s = gl.summary()
            lost = s["overwritten"] + s["torn"]
            text = (f"{s['kernel']} captured into a CUDA graph (capture {s['capture']}): {s['replays']} replay(s), "
                    f"{s['recorded']} recorded as launches")
            if lost:
                text += (f", {lost} overwritten in its ring of {s['ring_slots']} before they were taken (drain_replays more "
                         "often, or raise graph_ring)")
            if s["not_kept"]:
                text += f", {s['not_kept']} not kept (max_launches)"
            self._notes.append(text)
            (log.warning if lost or s["not_kept"] else log.info)("[rank %s] ktrace: %s", self.rank, text)

    def reuse_buffers(self) -> None:
        """Forget the launches recorded so far and hand their buffers out again, not zeroed (what
        they hold is never read): a capture opened only to time traced launches (``ktrace.cost``)
        allocates its arenas once. Call it with the device done with those launches."""
        self.launches.clear()
        for arenas in self._arenas.values():
            for ar in arenas:
                ar.used = 0

    def close(self) -> None:
        """Wait for the device, then copy each arena to the host once and release it; the replays
        of launches captured into CUDA graphs become launches."""
        if self.closed:
            return
        if _graph_capture_underway():
            raise RuntimeError("a ktrace capture cannot be closed while a CUDA graph is being captured (closing waits for "
                               "the device): save it after the graph capture has ended")
        self.closed = True
        if self._flight is not None:
            self._flight.stop()
        if not self.launches and not self._graphs:
            return
        import torch

        for dev in sorted({pl.device for pl in self.launches} | {gl.device for gl in self._graphs}):
            torch.cuda.synchronize(dev)
        self._take_replays()
        self._note_graphs()
        for pl in self.launches:
            if pl.raw is None and pl.gate:  # ring mode: unrolled (or streamed) into the dense layout
                pl.raw, pl.buffer = self._flight.final_raw(pl), None
                pl.capacity = int(schema.unpack_header(pl.raw)["capacity"])
        host = {
            (dev, i): ar.tensor[: ar.used].cpu().numpy().view(np.uint8)
            for dev, arenas in self._arenas.items()
            for i, ar in enumerate(arenas)
        }
        self._arenas.clear()
        for pl in self.launches:
            if pl.raw is None:
                n_prog = pl.grid[0] * pl.grid[1] * pl.grid[2]
                start = pl.offset * 8
                raw = host[(pl.device, pl.arena)][start : start + schema.buffer_bytes(n_prog, pl.capacity)].copy()
                hdr = _dense_header(pl.device, pl.capacity, pl.grid, pl.lanes)
                raw[: schema.HEADER_BYTES] = np.frombuffer(hdr.to_bytes(), np.uint8)
                pl.raw = raw
                pl.buffer = None

    # results ---------------------------------------------------------------------------------
    def region_names(self) -> dict[int, str]:
        """Names of the regions the recorded events use (the scan of the kernels' sources also
        finds docstrings and messages: only ids that occur in a record are kept)."""
        from .decode import DecodeError, decode_buffer

        names: dict[int, str] = {}
        for k in self.kernels.values():
            names.update(regions.scan_kernel(k.jit_fn))
        names.update(regions.table())
        used: set[int] = set()
        for pl in self.launches:
            if pl.raw is None:
                continue
            try:
                used.update(np.unique(decode_buffer(pl.raw).events["region"]).tolist())
            except DecodeError:  # kept whole: the capture file reports the bad buffer on reading
                return names
        return {k: v for k, v in names.items() if k in used}

    def to_capture(self) -> Capture:
        """This rank's capture (``ktrace.captures.Capture``)."""
        self.close()
        warm = self._warmup_launches()
        devices = sorted({pl.device for pl in self.launches})
        if not devices and self.heap is not None and self.heap.device.type == "cuda":
            devices = [self.heap.device.index]
        rc = RankCapture(
            rank=int(self.rank),
            device=device_info(devices[0]) if devices else {},
            clock_samples=self._clock_samples(),
            notes=list(self._notes),
            timeouts=self._timeouts,
            mappings=self._mappings(),
            launches=[
                Launch(
                    index=pl.index,
                    kernel=pl.kernel,
                    grid=pl.grid,
                    capacity=pl.capacity,
                    raw=pl.raw,
                    host_ns=pl.host_ns,
                    stream=pl.stream,
                    meta={"device": pl.device, **({"lanes": list(pl.lanes)} if pl.lanes else {}),
                          **({"ring_slots": pl.gate - schema.RING_GATE} if pl.gate else {}),
                          **({"graph": dict(pl.graph)} if pl.graph else {}), **({"warmup": True} if i in warm else {}),
                          **pl.meta},
                )
                for i, pl in enumerate(self.launches)
            ],
        )
        if self.run_id is None:
            self.run_id = _run_id()
        return Capture(world_size=int(self.world_size), ranks={int(self.rank): rc}, regions=self.region_names(),
                       run_id=self.run_id, meta=self._meta())

    def _mappings(self) -> list:
        """This process's table of mappings, when a launch recorded raw addresses (``ktrace.auto``)."""
        if not any(pl.meta.get("addresses") for pl in self.launches):
            return []
        from .auto.addresses import check_table, table

        return check_table(table(), max(int(self.world_size), 1 + max((m["owner"] for m in table()), default=0)))

    def _warmup_launches(self) -> set:
        """Positions in :attr:`launches` of each kernel's first :attr:`warmup` launches."""
        seen: dict = {}
        out = set()
        for i, pl in enumerate(self.launches):
            k = seen[pl.kernel] = seen.get(pl.kernel, 0) + 1
            if k <= self.warmup:
                out.add(i)
        return out

    def _meta(self) -> dict:
        """What reports need beyond the events: where in the kernels' sources each region is
        recorded (``regions.source_table``) and, with a heap, its allocations (flags are then
        named by allocation and index instead of heap offset)."""
        meta: dict = {"sources": regions.source_table([k.jit_fn for k in self.kernels.values()])}
        if self.probe_cost is not None:  # (a ktrace.cost.ProbeCost, or its figures)
            from .probe_cost import check_probe_cost

            pc = self.probe_cost
            meta["probe_cost"] = check_probe_cost(pc.to_meta() if hasattr(pc, "to_meta") else dict(pc))
        if any(pl.meta.get("addresses") for pl in self.launches):  # (the spaces' names, for naming flags)
            from .auto.addresses import table

            meta["spaces"] = {str(m["space"]): m["name"] for m in table() if m.get("name")}
        for k in self.kernels.values():  # (kernels traced without edits: where their probes' regions are)
            for name, where in getattr(k, "region_sources", {}).items():
                have = meta["sources"].setdefault(str(regions.register(name)), [])
                have.extend(w for w in where if w not in have)
        if self.heap is not None:
            from .shmem.symmetric import allocations_meta

            meta["heap"] = {"allocations": allocations_meta(self.heap.allocations)}
        return meta

    def _clock_samples(self) -> dict | None:
        from .clock.paths import rank_samples

        return rank_samples(self._calib, int(self.rank))

    def gather(self, dst: int = 0) -> Capture | None:
        """Collect every rank's capture on rank ``dst`` (collective), with the clock model fitted.

        The ranks meet first, within ``peer_timeout_s``: when one is missing (dead, or late),
        the others go on without it and ``dst`` gets a capture marked partial whose notes name
        the missing ranks (``ktrace.captures.gather.gather``).

        Returns:
            The merged, aligned capture on ``dst``; None on the other ranks (and on every rank
            when ``dst`` itself is missing: save each rank's own capture then).
        """
        from .captures.gather import gather
        from .clock.model import attach_clock

        merged = gather(self.to_capture(), dst=dst, timeout_s=self.peer_timeout_s)
        if merged is not None:
            try:
                attach_clock(merged)
            except ValueError as e:  # kept, on the ranks' own clocks: the report says so
                log.error("[rank %s] ktrace: the clock calibration samples cannot be fitted (%s); ranks left unaligned", self.rank, e)
        return merged

    def events(self) -> np.ndarray:
        """Every event of every launch of this session (``schema.EVENT_DTYPE``, raw ticks)."""
        return self.to_capture().events()

    def save(self, path, *, compress: bool | str = False) -> "os.PathLike":
        """Write this rank's capture file; with a profiler (``capture(profiler=prof)``) that has
        stopped, its Chrome trace too, as ``<path without suffix>.kineto.json.gz`` beside it,
        named in the capture's metadata (``profile``) so that ``ktrace merge`` finds it."""
        cap = self.to_capture()
        if self.profiler is not None:
            cap.meta["profile"] = {str(self.rank): self._save_profile(path)}
        return write_capture(path, cap, compress=compress)

    def _save_profile(self, path) -> str:
        """Export the profiler's Chrome trace (gzipped) beside ``path``; returns its file name."""
        import gzip
        import tempfile
        from pathlib import Path

        path = Path(path)
        out = path.with_name(path.name.rsplit(".", 1)[0] + ".kineto.json.gz")
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d) / "trace.json"
            try:
                self.profiler.export_chrome_trace(str(tmp))
            except Exception as e:  # (e.g. still recording: export needs a stopped profiler)
                raise RuntimeError(f"the profiler's trace could not be exported ({e}): save the capture after the "
                                   "profiler's `with` block has closed") from None
            with open(tmp, "rb") as src, gzip.open(out, "wb") as dst:
                dst.write(src.read())
        return out.name


def _dense_header(device: int, capacity: int, grid: tuple, lanes: tuple) -> schema.Header:
    """The header the host writes over a dense launch buffer of ``device`` (the device never writes it)."""
    info = device_info(device)
    return schema.Header(timer=schema.TimerKind[info["timer"]], tick_hz=info["tick_hz"], capacity=capacity,
                         n_programs=math.prod(grid), grid=tuple(grid), lanes=max(1, len(lanes)))


def _graph_capture_underway() -> bool:
    """Whether the current CUDA stream is being captured into a graph (False without torch or CUDA)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return False
    return bool(torch.cuda.is_current_stream_capturing())


def capture(**kwargs) -> Session:
    """Open a capture session: ``with ktrace.capture() as cap: ...`` (see :class:`Session`)."""
    return Session(**kwargs)


def _is_dist() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_initialized()


def _dist_rank_world() -> tuple[int, int]:
    """This process's ``(rank, world_size)``: the process group's when one is initialised, else
    what torchrun or ``srun`` put in the environment (:func:`ktrace.dist_env.rank_env`), else (0, 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    from .dist_env import rank_env

    re = rank_env()
    return (re.rank, re.world_size) if re is not None else (0, 1)
