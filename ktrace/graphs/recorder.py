"""Host side of traced CUDA graph replays: memory, capture detection, the commit, reading back.

A launch made while its stream is captured may not do what an eager launch does: a CUDA call
that waits (an event query, a synchronisation), work submitted to a stream outside the capture,
or a kernel module loaded for the first time can break the user's capture
(``cudaErrorStreamCaptureIsolation``, ``...Unsupported``, ``...Invalidated``). So everything a
captured launch needs that involves the device is made beforehand, outside any capture, by
:func:`prepare` (called at the first traced launch of the process on a device, which the user's
warm-up makes): a stream to allocate on, the commit kernel compiled and loaded, and a zeroed
*stage arena*. A captured launch (:meth:`GraphLaunch.create`) then only

* carves its stage (its buffer, at the fixed address the graph keeps) from the stage arena:
  zeroed before the capture began (``torch.cuda.graph`` synchronises the device when it opens);
  when the arena is full, the stage is allocated and zeroed by a node captured before the kernel
  (torch's ``zero_``, a fill kernel; one more graph node per replay, logged once);
* allocates its replay ring (``ktrace.graphs.ring``: never zeroed, it keys its counts) with the
  prepared stream current, so that it comes from the allocator's ordinary pool, not the graph's
  private one (whose blocks ``torch.compile``'s CUDA graph trees may hand to another graph). The
  allocator may call ``cudaMalloc`` for it, which a capture in the default (global) mode forbids
  to the capturing thread (``cudaErrorStreamCaptureUnsupported``, and the user's capture is
  invalidated): the thread is switched to the relaxed capture mode for that allocation alone, as
  PyTorch does for the graph's own pool (:func:`relaxed_capture_mode`);
* after the traced kernel, captures the commit kernel (``ktrace.graphs.device``) on the same stream.

The memory of a captured launch is kept for the life of the process (:data:`_KEPT`): the graph may
be replayed after the capture that recorded it has closed, and its kernels keep writing there.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import schema
from . import ring as gring

log = logging.getLogger("ktrace")

#: Bytes of each stage arena (zeroed device memory for captured launches' stages), per device.
ARENA_BYTES = 8 << 20
#: Most bytes of one captured launch's replay ring: a launch of a large buffer keeps fewer replays.
RING_BYTES = 256 << 20
_ALIGN_WORDS = gring.ALIGN_WORDS

_lock = threading.Lock()
_PREPARED: dict[int, "_Device"] = {}
#: Every captured launch's memory, for the life of the process (its graph may outlive the capture).
_KEPT: list = []
_warned: set = set()


@dataclass
class _Device:
    stream: Any  # torch.cuda.Stream: allocations made during a capture are made with it current
    arenas: list = field(default_factory=list)  # zeroed int64 tensors the stages are carved from
    used: int = 0  # words handed out of the last arena


def capturing(device: int) -> bool:
    """Whether the current stream of ``device`` is being captured into a CUDA graph."""
    import torch

    if not torch.cuda.is_available():
        return False
    if torch.cuda.current_device() == device:
        return bool(torch.cuda.is_current_stream_capturing())
    with torch.cuda.device(device):
        return bool(torch.cuda.is_current_stream_capturing())


def prepared(device: int) -> bool:
    """Whether :func:`prepare` has run for ``device`` in this process."""
    return device in _PREPARED


def prepare(device: int) -> None:
    """Make what a captured launch on ``device`` will need, outside any capture (once per process
    and device; later calls only add a stage arena when the last one is three quarters used)."""
    import torch

    with _lock:
        d = _PREPARED.get(device)
        if d is not None and (not d.arenas or d.used * 4 < d.arenas[-1].numel() * 3):
            return
        if capturing(device):
            return
        with torch.cuda.device(device):
            if d is None:
                d = _Device(stream=torch.cuda.Stream(device))
                _load_commit(device)
            d.arenas.append(torch.zeros(ARENA_BYTES // 8, dtype=torch.int64, device=f"cuda:{device}"))
            d.used = 0
            _PREPARED[device] = d


def _load_commit(device: int) -> None:
    """Run the commit kernel once on scratch memory: compiled and loaded before any capture
    (every argument that varies is unspecialised and every pointer 16-byte aligned, so a captured
    launch reuses this binary). Queued on the current stream; nothing waits for it (this runs
    inside the user's first traced launch: a synchronisation could wait for anything queued)."""
    import torch

    from .device import COMMIT_BLOCK, replay_commit

    shape = gring.RingShape(ring_slots=2, programs=1, nbytes=64)
    ring = torch.zeros(shape.words, dtype=torch.int64, device=f"cuda:{device}")
    stage = torch.zeros(_ALIGN_WORDS, dtype=torch.int64, device=f"cuda:{device}")
    key = _new_key()
    replay_commit[(1,)](stage, ring, ring[shape.mirror_at:], key, 8, 0, shape.keys_at, shape.slots_at, shape.slot_words,
                        shape.ring_slots, BLOCK=COMMIT_BLOCK)


def _new_key() -> int:
    """A random key in [2**62, 2**63): typed int64 by Triton, whatever its value."""
    return (1 << 62) | secrets.randbits(62)


def _carve(device: int, words: int):
    """A zeroed int64 slice of the device's stage arena, or None when it has no room."""
    d = _PREPARED[device]
    words = -(-words // _ALIGN_WORDS) * _ALIGN_WORDS
    if not d.arenas or d.used + words > d.arenas[-1].numel():
        return None
    t = d.arenas[-1][d.used : d.used + words]
    d.used += words
    return t


#: cuThreadExchangeStreamCaptureMode / hipThreadExchangeStreamCaptureMode's mode (same values in both).
_CAPTURE_MODE_RELAXED = 2
_exchange = None


def _exchange_fn():
    """The driver's ``cuThreadExchangeStreamCaptureMode`` (HIP's on ROCm), or None if not loadable."""
    global _exchange
    if _exchange is None:
        import ctypes

        import torch

        names = (("libamdhip64.so", "hipThreadExchangeStreamCaptureMode") if getattr(torch.version, "hip", None) else
                 ("libcuda.so.1", "cuThreadExchangeStreamCaptureMode"))
        try:
            fn = getattr(ctypes.CDLL(names[0]), names[1])
            fn.argtypes, fn.restype = (ctypes.POINTER(ctypes.c_int),), ctypes.c_int
            _exchange = fn
        except (OSError, AttributeError):
            _exchange = False
    return _exchange or None


@contextlib.contextmanager
def relaxed_capture_mode():
    """This thread in the relaxed stream-capture mode inside the block (then back to its mode):
    an allocation made there may call ``cudaMalloc`` while the user's graph is captured in the
    global mode without invalidating that capture. Raises RuntimeError, calling nothing, when the
    mode cannot be switched (the caller then leaves the launch untraced)."""
    import ctypes

    fn = _exchange_fn()
    if fn is None:
        raise RuntimeError("the stream-capture mode cannot be switched here (no cuThreadExchangeStreamCaptureMode): "
                           "memory for the replays cannot be allocated during the capture")
    mode = ctypes.c_int(_CAPTURE_MODE_RELAXED)
    if fn(ctypes.byref(mode)) != 0:
        raise RuntimeError("the stream-capture mode could not be switched to relaxed")
    try:
        yield
    finally:
        fn(ctypes.byref(mode))  # (back to the mode the thread had)


def refusal(device: int) -> str | None:
    """Why a launch captured now on ``device`` cannot be traced, or None."""
    if device not in _PREPARED:
        return ("nothing was prepared on this device before the graph capture: launch a traced kernel once "
                "(the warm-up) inside `ktrace.capture()` before capturing")
    return None


def warn_once(what: str, text: str) -> None:
    """Log ``text`` once per ``what`` in this process."""
    if what not in _warned:
        _warned.add(what)
        log.warning("ktrace: %s", text)


@dataclass
class GraphLaunch:
    """One traced launch captured into a CUDA graph: its stage, its replay ring, what was taken."""

    number: int  # its order among the session's captured launches
    kernel: str
    grid: tuple  # the grid (virtual grid of a launch traced per lane)
    capacity: int  # event slots per program (ring mode: slots per lane)
    device: int
    stream: int
    lanes: tuple
    gate: int  # the KTRACE value the kernel runs with
    ring_layout: bool  # the stage is a flight-recorder ring buffer (``schema``'s ring layout)
    shape: gring.RingShape
    stage: Any  # int64 tensor: the buffer the graph's kernel writes
    ring: Any  # int64 tensor (``shape.words``)
    mirror: Any  # int64 tensor of one word: replays completed, as the commit kernel stores it
    key: int
    zero_from: int  # words of the stage the commit kernel does not re-zero
    host_ns: int
    memset: bool = False  # the stage is zeroed by a node captured before the kernel (the summary's "memset")
    taken: int = 0  # replays taken so far
    overwritten: int = 0  # replays lost to the ring before they were taken (exact)
    torn: int = 0  # replays whose slot held another replay when read (counted lost)
    kept: int = 0  # replays made into launches
    not_kept: int = 0  # replays taken but not kept (the capture's max_launches)

    @classmethod
    def create(cls, number: int, kernel: str, grid: tuple, capacity: int, device: int, lanes: tuple, ring_slots: int,
               flight=None) -> "GraphLaunch":
        """Allocate a captured launch's stage and ring (the current stream is being captured).

        Args:
            flight: the capture's flight recorder (``ktrace.flight.recorder.Recorder``): the stage is
                then a ring-layout buffer in its pinned arena (live dumps read the replay in
                progress there), else a dense buffer on the device.
        """
        import torch

        from .device import COMMIT_BLOCK

        n_prog = grid[0] * grid[1] * grid[2]
        prep = _PREPARED[device]
        stream = torch.cuda.current_stream(device)
        memset = False
        if flight is not None:
            slots = flight.config.slots
            nbytes = schema.ring_buffer_bytes(n_prog, slots)
            got = flight.new_graph_buffer(number, n_prog)
            if got is None:
                raise MemoryError("the flight recorder's arena is full")
            stage, mirror = got
            gate, zero_from, capacity = schema.ring_gate(slots), schema.heads_offset(n_prog, slots) // 8, slots
        else:
            nbytes = schema.buffer_bytes(n_prog, capacity)
            gate, zero_from, mirror = capacity, 0, None
            words = -(-nbytes // 8)
            stage = _carve(device, words)
            if stage is None:
                with torch.cuda.stream(prep.stream), relaxed_capture_mode():  # (the ordinary pool: see the module docstring)
                    stage = torch.empty(-(-words // _ALIGN_WORDS) * _ALIGN_WORDS, dtype=torch.int64, device=f"cuda:{device}")
                stage.zero_()  # captured: a node zeroing it before the kernel (a fill kernel or a memset), every replay
                memset = True
                warn_once(f"memset{device}", f"the stage arena of device {device} is full: captured launches' buffers are "
                          "zeroed by a node in the graph (one more per replay); raise "
                          "ktrace.graphs.recorder.ARENA_BYTES")
        n_words = -(-nbytes // 8)
        programs = -(-n_words // COMMIT_BLOCK)
        fit = max(1, RING_BYTES // (gring.slot_words(nbytes) * 8))
        if fit < ring_slots:
            warn_once(("ring", kernel, nbytes), f"{kernel}'s buffer is {nbytes / 2**20:.1f} MiB: its replay ring keeps {fit} "
                      f"replays, not {ring_slots} (ktrace.graphs.recorder.RING_BYTES); drain_replays at least that often")
            ring_slots = fit
        shape = gring.RingShape(ring_slots=ring_slots, programs=programs, nbytes=nbytes)
        with torch.cuda.stream(prep.stream), relaxed_capture_mode():
            ring = torch.empty(shape.words, dtype=torch.int64, device=f"cuda:{device}")
        if mirror is None:
            mirror = ring[shape.mirror_at : shape.mirror_at + 1]
        gl = cls(number=number, kernel=kernel, grid=tuple(grid), capacity=capacity, device=device, stream=stream.cuda_stream,
                 lanes=tuple(lanes), gate=gate, ring_layout=flight is not None, shape=shape, stage=stage, ring=ring,
                 mirror=mirror, key=_new_key(), zero_from=zero_from, host_ns=time.time_ns(), memset=memset)
        _KEPT.append((stage, ring, mirror))
        return gl

    def commit(self) -> None:
        """Launch the commit kernel on the current stream (captured right after the traced kernel)."""
        from .device import COMMIT_BLOCK, replay_commit

        s = self.shape
        replay_commit[(s.programs,)](self.stage, self.ring, self.mirror, self.key, -(-s.nbytes // 8), self.zero_from, s.keys_at,
                                     s.slots_at, s.slot_words, s.ring_slots, BLOCK=COMMIT_BLOCK)

    def read(self) -> np.ndarray:
        """The ring's words as they are once the work queued on the current stream has run (a
        copy to the host, stream-ordered: it waits for the replays queued before it)."""
        return self.ring.cpu().numpy()

    def take(self, words: np.ndarray) -> gring.Taken:
        """The replays a copy of the ring holds that were not taken yet; counts what was lost."""
        done, _ = gring.replays_done(words, self.shape, self.key)
        got = gring.take(words, self.shape, done, self.taken)
        self.taken = done
        self.overwritten += got.overwritten
        self.torn += got.torn
        return got

    def dense(self, got: gring.Taken, header: schema.Header) -> np.ndarray:
        """Each replay taken as a dense launch buffer with its header (rows)."""
        if not self.ring_layout:
            return gring.with_header(got.buffers, header)
        ring_header = schema.Header(timer=header.timer, tick_hz=header.tick_hz, capacity=self.capacity,
                                    n_programs=header.n_programs, grid=header.grid, lanes=header.lanes)
        rows = [gring.dense_from_ring_layout(b, ring_header, self.capacity) for b in got.buffers]  # (per replay)
        return np.stack(rows) if rows else np.zeros((0, schema.buffer_bytes(header.n_programs, self.capacity + 2)), np.uint8)

    def summary(self) -> dict:
        """What happened to this launch's replays, for the capture's notes and metadata."""
        return {"capture": self.number, "kernel": self.kernel, "grid": list(self.grid), "replays": self.taken,
                "recorded": self.kept, "overwritten": self.overwritten, "torn": self.torn, "not_kept": self.not_kept,
                "ring_slots": self.shape.ring_slots, "memset": self.memset}
