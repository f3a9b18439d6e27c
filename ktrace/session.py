"""Host side: event buffers, the ``@ktrace.trace`` decorator and capture sessions.

Usage::

    @ktrace.trace(events_per_program=4)
    @triton.jit
    def copy(x, y, n, BLOCK: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
        ...

    copy[grid](x, y, n, BLOCK=1024)          # untraced: exactly the plain Triton launch

    with ktrace.capture() as cap:             # traced: buffers allocated, launches recorded
        copy[grid](x, y, n, BLOCK=1024)
    cap.events()                              # numpy table (schema.EVENT_DTYPE)
    cap.save("run.ktrace")

Setting the environment variable ``KTRACE=1`` traces every launch of every traced kernel in
the process and writes ``$KTRACE_OUT`` (default ``ktrace-rank<r>.ktrace``) at exit.

Each traced launch gets its own zeroed device buffer, carved from arenas of ``ARENA_BYTES``
that are zeroed once when allocated: a launch adds no memset and no host-to-device copy.
Buffers stay on the device until the session ends; then each arena is copied to the host once.
"""

from __future__ import annotations

import ast
import atexit
import dataclasses
import functools
import inspect
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

log = logging.getLogger("ktrace")

#: Default event slots per program when a kernel's decorator does not say.
DEFAULT_EVENTS_PER_PROGRAM = 16
#: Launch buffers are carved from zeroed arenas of this size (one memset per arena, not per launch).
ARENA_BYTES = 64 << 20
#: A traced launch's profiler range is named ``ktrace <kernel> #<launch index>`` (``capture(profiler=)``).
PROFILE_RANGE_PREFIX = "ktrace "
_ALIGN_WORDS = 32  # 256-byte alignment of each launch buffer inside an arena

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
    """The innermost open capture session of this thread, else the env-var session, else None."""
    st = getattr(_state, "stack", None)
    if st:
        return st[-1]
    if _env_on():
        return _get_env_session()
    return None


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


@dataclass
class _GraphPending:
    """What a launch captured into a CUDA graph gets: the stage, the gate, and the commit to
    capture after the kernel (``ktrace.graphs.recorder.GraphLaunch``)."""

    buffer: Any
    gate: int
    after: Callable[[], None]


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
            from .auto import hooks

            hooks.set_dispatch(_auto_dispatch if _env_session is not None and _env_session._auto is not None else None)
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
        from .auto import hooks

        hooks.install()
        hooks.set_dispatch(_auto_dispatch)

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
    def _new_launch(self, kernel: "TracedKernel", grid: tuple[int, int, int], capacity: int, device: int, lanes: tuple = (),
                    meta: dict | None = None):
        torch = _torch()

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
            meta=dict(meta or {}),
        )
        self.launches.append(pl)
        self.kernels.setdefault(kernel.name, kernel)
        return pl

    def _ring_launch(self, kernel: "TracedKernel", grid: tuple[int, int, int], n_prog: int, device: int, meta: dict | None = None):
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

    def _graph_launch(self, kernel: "TracedKernel", grid: tuple[int, int, int], capacity: int, device: int, lanes: tuple,
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
        return _GraphPending(buffer=gl.stage, gate=gl.gate, after=gl.commit)

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


# ---------------------------------------------------------------------------------------------
# the decorator
# ---------------------------------------------------------------------------------------------


def _grid3(g) -> tuple[int, int, int]:
    if isinstance(g, int):
        g = (g,)
    g = tuple(int(x) for x in g)
    if not 1 <= len(g) <= 3 or any(x < 0 for x in g):
        raise ValueError(f"bad launch grid {g}")
    return (g + (1, 1))[:3]  # type: ignore[return-value]


def _global_name(mod) -> str:
    """The name under which a prepared kernel's module sees a probe module (set in its globals)."""
    return "_" + mod.__name__.replace(".", "_") + "_"


class KernelShapeError(TypeError):
    """A kernel ``@ktrace.trace`` cannot end with a flush of its tracer (an early ``return``)."""


def _init_module(node, g: dict):
    """The probe module whose ``init`` ``node`` calls, as the kernel's names resolve it, if that
    module supports deferred records (``__ktrace_deferrable__``: it has ``init_deferred`` and
    ``finish``; ``ktrace.language`` does, and a module of probes for another DSL may); else None."""
    import sys

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


class TracedKernel:
    """A ``@triton.jit`` kernel that records events when a capture is active.

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
        #: (device, KTRACE) of the traced launches made outside any CUDA graph capture in this
        #: process: their binary is loaded, so a capture may launch it (``Session._graph_launch``)
        self.warm: set = set()
        self._sig = inspect.signature(jit_fn.fn)
        functools.update_wrapper(self, jit_fn.fn)
        regions.scan_kernel(jit_fn)

    def __getattr__(self, name):  # .fn, .cache, .warmup, ... of the jit function
        return getattr(self.__dict__["jit_fn"], name)

    def __getitem__(self, grid):
        return functools.partial(self._launch, grid)

    def run(self, *args, grid, **kwargs):
        return self._launch(grid, *args, **kwargs)

    def _arguments(self, args, kwargs) -> dict:
        """The launch's arguments by name (parameters' defaults filled in; launch options such as
        ``num_warps`` kept too), as a grid function or ``events_per_program`` gets them."""
        params = self._sig.parameters
        try:
            bound = self._sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in params})
        except TypeError as e:
            raise TypeError(f"{self.name}: {e}") from None
        bound.apply_defaults()
        meta = dict(bound.arguments)
        meta.update({k: v for k, v in kwargs.items() if k not in params})
        return meta

    #: what each launch's record keeps besides (``AutoTraced``: the addresses are raw)
    _launch_meta: dict = {}

    def _extra_kwargs(self, session) -> dict:
        """Launch arguments a traced launch passes besides the buffer and the gate."""
        return {}

    def _untraced(self, grid, args, kwargs):
        return self.jit_fn[grid](*args, **kwargs)

    def _launch(self, grid, *args, **kwargs):
        if _compiling():
            # torch.compile (Dynamo) traces this call: with no capture open anywhere the kernel as
            # written (not the copy prepared for deferred records: the same binary when off) is
            # compiled into the caller's graph, as without the decorator; with one open it is left
            # out (a graph break) and runs here at every call, traced (the global read is guarded:
            # opening or closing a capture recompiles the caller)
            if not _TRACING:
                return getattr(self.jit_fn, "ktrace_original", self.jit_fn)[grid](*args, **kwargs)
            return _outside_compiled_graph()(self, grid, args, kwargs)
        return self._launch_now(grid, args, kwargs)

    def _launch_now(self, grid, args, kwargs):
        session = active_session()
        if session is None or "KTRACE" in kwargs:
            return self._untraced(grid, args, kwargs)
        # the launch's arguments by name, for a grid or a slot count given as a function of them
        # (bound only then: binding costs about as much as the rest of a traced launch's host work)
        meta = self._arguments(args, kwargs) if callable(grid) or callable(self.events_per_program) else None
        g = _grid3(grid(meta) if callable(grid) else grid)
        cap = session.events_per_program or (
            self.events_per_program(meta) if callable(self.events_per_program) else self.events_per_program
        )
        cap = int(cap)
        if cap <= 0:
            raise ValueError(f"{self.name}: events per program must be positive, got {cap}")
        device = _device_of(args, kwargs)
        extra = {"lanes": self.lanes} if self.lanes else {}
        if self._launch_meta:
            extra["meta"] = self._launch_meta
        pl = session._new_launch(self, g, cap, device, **extra) if g[0] * g[1] * g[2] > 0 else None
        if pl is None:
            return self._untraced(grid, args, kwargs)
        gate = getattr(pl, "gate", 0) or cap
        kwargs = dict(kwargs, ktrace_buf=pl.buffer, KTRACE=gate, **self._extra_kwargs(session))
        if self.lanes:
            kwargs["KTRACE_LANES"] = len(self.lanes)
        after = getattr(pl, "after", None)  # a launch captured into a CUDA graph: its commit follows it
        if getattr(session, "profiler", None) is not None:  # a named range around the launch: its CUPTI record by correlation
            import torch

            label = f"graph capture {len(session._graphs) - 1}" if after is not None else f"#{pl.index}"
            with torch.profiler.record_function(f"{PROFILE_RANGE_PREFIX}{self.name} {label}"):
                out = self.jit_fn[grid](*args, **kwargs)
        else:
            out = self.jit_fn[grid](*args, **kwargs)
        if after is not None:
            after()
        else:
            self.warm.add((device, gate))
        return out


def _compiling() -> bool:
    """Whether torch.compile is tracing the caller (False when torch is not imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


_OUTSIDE: list = []


def _outside_compiled_graph():
    """:meth:`TracedKernel._launch_now` behind ``torch.compiler.disable``: called from code
    torch.compile traces, it runs at every call instead of being compiled (made on first use)."""
    if not _OUTSIDE:
        _OUTSIDE.append(sys.modules["torch"].compiler.disable(lambda tk, grid, args, kwargs: tk._launch_now(grid, args, kwargs)))
    return _OUTSIDE[0]


def _torch():
    """torch, or an ImportError that says which install records captures."""
    try:
        import torch
    except ImportError:
        raise ImportError("recording a capture needs torch and triton: pip install 'ktrace[gpu]' (analysing, merging "
                          "and viewing captures does not)") from None
    return torch


def _device_of(args, kwargs) -> int:
    torch = _torch()

    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and a.is_cuda:
            return a.device.index if a.device.index is not None else torch.cuda.current_device()
    return torch.cuda.current_device()


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


# ---------------------------------------------------------------------------------------------
# kernels traced without edits (ktrace.auto)
# ---------------------------------------------------------------------------------------------

#: Bytes of the heap an ``auto`` capture over several ranks makes to calibrate the clocks over
#: (each calibration takes 256 of them: thousands of captures per process).
CALIBRATION_HEAP_BYTES = 1 << 20
_calibration_heaps: dict = {}  # (process group, device) -> the heap
_auto_lock = threading.Lock()
_auto_kernels: dict = {}  # id(original jit function) -> (original, AutoTraced | None)
_auto_said: set = set()  # (kernel, line) limits already logged


class AutoTraced(TracedKernel):
    """A kernel not written for ktrace, launched as its traced copy (``ktrace.auto.prepare``).

    Its launches record raw addresses (``meta["addresses"] == "raw"``): the collector maps them
    through each rank's table of mappings (``ktrace.auto.addresses``). A copy that Triton cannot
    compile is dropped with one line, and the kernel runs as written, untraced, from then on.
    """

    _launch_meta = {"addresses": "raw", "auto": True}

    def __init__(self, prepared, config):
        self.__dict__["jit_fn"] = prepared.jit
        self.original = prepared.original
        self.prepared = prepared
        self.config = config
        self.events_per_program = config.events_per_program
        self.name = prepared.original.__name__
        self.lanes = ()
        self.warm = set()  # (as TracedKernel's: traced launches made outside a CUDA graph capture)
        self._sig = inspect.signature(prepared.jit.fn)
        self.region_sources = prepared.source_lines()
        self.broken = False
        for name in self.region_sources:
            regions.register(name)

    def _extra_kwargs(self, session) -> dict:
        return {"KTRACE_WAIT_NS": int(self.config.wait_timeout_ns)}

    def _untraced(self, grid, args, kwargs):
        from .auto import hooks

        with hooks.quiet():
            return self.original[grid](*args, **kwargs)

    def _launch(self, grid, *args, **kwargs):
        if self.broken:
            return self._untraced(grid, args, kwargs)
        session = active_session()
        n_before = len(session.launches) if session is not None else 0
        try:
            return super()._launch(grid, *args, **kwargs)
        except Exception as e:
            if type(e).__name__ != "CompilationError":
                raise
            self.broken = True
            if session is not None and len(session.launches) > n_before:
                del session.launches[n_before:]  # (its buffer stays unused in the arena)
            log.warning("[rank %s] ktrace: the traced copy of %s does not compile (%s); it runs untraced",
                        getattr(session, "rank", "?"), self.name, " ".join(str(e).split())[:300])
            return self._untraced(grid, args, kwargs)


def _auto_dispatch(jit_fn, grid, args, kwargs):
    """The launch hook's dispatcher (``ktrace.auto.hooks``): a kernel an open ``auto`` capture
    traces is launched as its traced copy; any other launch goes as written."""
    from .auto import hooks

    session = active_session()
    cfg = getattr(session, "_auto", None)
    if cfg is None:
        return hooks.PASS
    traced = _auto_traced(jit_fn, cfg, session)
    if traced is None:
        return hooks.PASS
    if session.heap is None and not session._own_heap and session._calib == {}:
        session._calibration_heap(_device_of(args, kwargs))
        if session.heap is not None:
            session._calibrate("before")
    with hooks.quiet():
        return traced._launch(grid, *args, **kwargs)


def _auto_traced(jit_fn, cfg, session):
    """The kernel's :class:`AutoTraced` (made once per kernel and config), or None when it cannot be
    prepared (said once, in one line)."""
    from .auto.prepare import prepare
    from .auto.transform import Refused

    key = (id(jit_fn), cfg)
    hit = _auto_kernels.get(key)  # (the launch path: one lookup, no lock, when the kernel was seen)
    if hit is not None and hit[0] is jit_fn:
        return hit[1]
    with _auto_lock:
        if "ktrace_buf" in jit_fn.arg_names or (jit_fn.__module__ or "").startswith("ktrace.") or not cfg.matches(jit_fn):
            _auto_kernels[key] = (jit_fn, None)  # (instrumented by hand, ktrace's own, or not asked for)
            return None
        rank = getattr(session, "rank", "?")
        try:
            p = prepare(jit_fn)
        except Refused as e:
            log.warning("[rank %s] ktrace: kernel %s is not traced: %s", rank, jit_fn.__name__, e)
            _auto_kernels[key] = (jit_fn, None)
            return None
        for line in p.limits():
            if (jit_fn.__name__, line) not in _auto_said:
                _auto_said.add((jit_fn.__name__, line))
                log.warning("[rank %s] ktrace: %s: %s", rank, jit_fn.__name__, line)
        traced = AutoTraced(p, cfg)
        _auto_kernels[key] = (jit_fn, traced)
        return traced
