"""The flight recorder's host side: ring buffers in pinned host memory, the watchdog, live dumps.

``ktrace.capture(flight_recorder=True)`` (or a :class:`FlightConfig`) makes a :class:`Recorder`
for the session. When the capture opens it

* allocates one arena of pinned host memory (``FlightConfig.arena_bytes``), which the device
  writes through its mapped address and the host reads as a numpy array: each traced launch
  gets a zeroed slice of it in ``schema``'s ring layout, and its kernel runs in ring mode;
* measures where the device timer stands against the host clock (a one-program kernel spins on
  a pinned word, the host sets it and reads back the timer it stored), so that a dump knows the
  device time of its own moment;
* starts the watchdog thread and, in the main thread, routes ``SIGUSR1`` to it (Python's wakeup
  file descriptor: the signal's C handler writes to a pipe the watchdog reads, so a dump does not
  wait for the main thread, which may be blocked in ``torch.cuda.synchronize()`` for ever);
* registers the process (pid, rank, run id) for ``ktrace dump``.

Everything a dump needs from CUDA exists before the first launch: a dump reads pinned memory
and writes a file, with no CUDA call (creating a CUDA stream while a kernel spins blocks the host;
a synchronising call would wait for ever). The flag's value in a dump is the value the waiting
lane last read from it, which the lane writes into its NOW slot whenever it changes; with the
capture's heap (``ktrace.capture(heap=...)``) a dump also reads each waited-on flag from the heap
itself: 4-byte copies on a stream made when the capture opens (copy engines, no SM: they run
beside a kernel that holds every SM), waited for at most ``copy_timeout_s``.

The watchdog dumps when no lane of any launch has written a record for ``stall_s`` seconds while
some lane is in a wait (a finished kernel leaves no lane waiting), once per stall; ``SIGUSR1``
dumps at once. A dump is an ordinary capture file (``ktrace-live-<run>-rank<r>-<n>.ktrace``)
marked ``meta["live"]``; the kernel keeps running.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import regions, schema
from . import ring
from .registry import REGISTRY_ENV, RegistryError, registry_dir  # noqa: F401  (REGISTRY_ENV: where it was defined before)

log = logging.getLogger("ktrace")

_ALIGN = 256
#: At most this many distinct flags are read from the heap per dump (4 bytes each).
HEAP_READS = 1024


@dataclass(frozen=True)
class FlightConfig:
    """How a capture records in ring mode and when it dumps.

    Args:
        slots: records each lane keeps (a power of two; older ones are overwritten and counted).
        stall_s: the watchdog dumps after this long with no new record while a lane waits.
        poll_s: how often the watchdog looks.
        out_dir: where dumps are written (default: the current directory).
        arena_bytes: pinned host memory allocated when the capture opens (launches that do not
            fit in it run untraced, with a warning: nothing is allocated while kernels run).
        on_signal: dump on ``SIGUSR1`` (needs the capture to be opened in the main thread).
        registry: where to register for ``ktrace dump`` (default :func:`registry_dir`).
        placement: where the rings live: ``"pinned"`` (host memory the device writes over the
            bus and the host reads with no CUDA call) or ``"device"`` (device memory: cheaper for
            kernels of many programs, docs/flight.md; the watchdog and the dumps copy it to a
            pinned buffer on a stream made when the capture opens, ``cudaMemcpyAsync`` + an
            event polled with a time limit).
        copy_timeout_s: with ``"device"``, how long a dump waits for that copy.
        stream_dir: stream (placement ``"pinned"`` only): a thread drains every lane's new records
            every ``stream_poll_s`` into spill files in this folder (``ktrace.flight.stream``), and
            the capture is made from them when it closes: a kernel of any length whole, with an
            exact count per lane of what the drain could not keep up with.
        stream_poll_s: how often the drain looks.
    """

    slots: int = 256
    stall_s: float = 10.0
    poll_s: float = 0.1
    out_dir: str = "."
    arena_bytes: int = 16 << 20
    on_signal: bool = True
    registry: str | None = None
    placement: str = "pinned"
    copy_timeout_s: float = 2.0
    stream_dir: str | None = None
    stream_poll_s: float = 0.002

    def __post_init__(self):
        if self.placement not in ("pinned", "device"):
            raise ValueError(f"placement must be 'pinned' or 'device', got {self.placement!r}")
        if self.stream_dir is not None and self.placement != "pinned":
            raise ValueError("streaming drains rings in pinned host memory: placement must be 'pinned'")
        schema.ring_gate(self.slots)  # a power of two
        if not self.stall_s > 0 or not self.poll_s > 0:
            raise ValueError(f"stall_s and poll_s must be positive, got {self.stall_s}, {self.poll_s}")
        if self.arena_bytes < 4096:
            raise ValueError(f"arena_bytes must be at least 4096, got {self.arena_bytes}")


@dataclass
class RingLaunch:
    """Where one ring-mode launch lies in the pinned arena."""

    offset: int  # bytes into the arena
    nbytes: int
    n_programs: int
    slots: int


@dataclass
class RingDumped:
    """What a dump says of a launch captured into a CUDA graph (``ktrace.graphs``)."""

    index: int
    kernel: str
    grid: tuple
    host_ns: int
    stream: int
    device: int


class Recorder:
    """A session's flight recorder (made by ``ktrace.session.Session`` when asked for one)."""

    def __init__(self, session, config: FlightConfig):
        self.session = session
        self.config = config
        self.rings: dict[int, RingLaunch] = {}  # launch index -> its ring
        #: launches captured into CUDA graphs (``ktrace.graphs``): capture number -> (the ring every
        #: replay writes, byte offset of the replay count the commit kernel stores)
        self.graph_rings: dict[int, tuple[RingLaunch, int]] = {}
        self.dumps: list[Path] = []
        self._used = 0
        self._arena = None  # the rings: a pinned (or device) torch tensor (uint8)
        self._host = None  # numpy view of the pinned arena (or of the device arena's pinned copy)
        self._staging = None  # placement "device": the pinned copy, its stream and event
        self._side = None
        self._copied = None
        self._copied_ns = 0
        self._final = False  # placement "device": the copy after the kernels ended is made
        self._drains: dict = {}  # streaming: launch index -> (RingDrain, spill file path)
        self._drain_thread: threading.Thread | None = None
        self._drained = False
        #: streaming: records taken and lost in all, drains made, the longest drain (s)
        self.stream_stats = {"taken": 0, "lost": 0, "drains": 0, "longest_drain_s": 0.0}
        self._device: dict = {}
        self._tick_hz = 1_000_000_000
        self._clock: tuple[int, int, int] | None = None  # (device ticks, host ns, bound ns)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pipe: tuple[int, int] | None = None
        self._old_signal = None
        self._old_wakeup = -1
        self._lock = threading.Lock()
        self._registered: Path | None = None

    # opening ---------------------------------------------------------------------------------
    def start(self) -> "Recorder":
        import torch

        from ..device import device_info

        dev = torch.cuda.current_device()
        self._device = device_info(dev)
        self._tick_hz = int(self._device.get("tick_hz") or 1_000_000_000)
        if self.config.placement == "device":
            # every CUDA object the copies need, made now: a stream created while a kernel spins
            # blocks the host
            self._arena = torch.zeros(self.config.arena_bytes, dtype=torch.uint8, device=f"cuda:{dev}")
            self._staging = torch.zeros(self.config.arena_bytes, dtype=torch.uint8, pin_memory=True)
            self._side = torch.cuda.Stream(dev)
            self._copied = torch.cuda.Event()
            with torch.cuda.stream(self._side):
                self._staging[:16].copy_(self._arena[:16], non_blocking=True)  # (first use: the host allocator's event)
                self._copied.record(self._side)
            torch.cuda.synchronize(dev)
            self._host = self._staging.numpy()
        else:
            self._arena = torch.zeros(self.config.arena_bytes, dtype=torch.uint8, pin_memory=True)
            self._host = self._arena.numpy()
        heap = getattr(self.session, "heap", None)
        if heap is not None and getattr(heap, "device", None) is not None and heap.device.type == "cuda":
            # the flags' reads at a dump: a pinned landing area, a stream and an event, made now
            self._flag_host = torch.zeros(HEAP_READS, dtype=torch.int32, pin_memory=True)
            self._flag_side = self._side if self._staging is not None else torch.cuda.Stream(dev)
            self._flag_done = torch.cuda.Event()
            self._heap_bytes = heap.buffer.view(torch.uint8)
        self._clock = _device_clock(dev)
        return self._run()

    def _run(self) -> "Recorder":
        """Route the signal, register, start the watchdog (the arena and the clock exist)."""
        self._install_signal()
        self._register()
        self._thread = threading.Thread(target=self._watch, name="ktrace-flight", daemon=True)
        self._thread.start()
        if self.config.stream_dir is not None:
            Path(self.config.stream_dir).mkdir(parents=True, exist_ok=True)
            self._drain_thread = threading.Thread(target=self._drain_loop, name="ktrace-flight-drain", daemon=True)
            self._drain_thread.start()
        log.info("[rank %s] ktrace flight recorder: %d slots per lane, dump after %.1f s without progress%s",
                 self.session.rank, self.config.slots, self.config.stall_s,
                 f", or on kill -USR1 {os.getpid()}" if self._pipe else "")
        return self

    def new_buffer(self, launch_index: int, n_programs: int):
        """A zeroed ring buffer for a launch (a view of the pinned arena), or None when the arena is full."""
        import torch

        r = self._carve(launch_index, n_programs)
        return None if r is None else self._arena[r.offset : r.offset + r.nbytes].view(torch.int64)

    def _carve(self, launch_index: int, n_programs: int) -> RingLaunch | None:
        r = self._carve_ring(n_programs)
        if r is not None:
            self.rings[launch_index] = r
        return r

    def _carve_ring(self, n_programs: int, extra: int = 0) -> RingLaunch | None:
        """A zeroed ring buffer (and ``extra`` zeroed bytes after it, 256-byte aligned)."""
        slots = self.config.slots
        nbytes = schema.ring_buffer_bytes(n_programs, slots)
        start = -(-self._used // _ALIGN) * _ALIGN
        end = start + (-(-nbytes // _ALIGN) * _ALIGN + extra if extra else nbytes)
        if end > self._host.nbytes:
            return None
        self._used = end
        if self._staging is None:
            self._host[start:end] = 0
        return RingLaunch(start, nbytes, n_programs, slots)

    def new_graph_buffer(self, number: int, n_programs: int):
        """For launch ``number`` captured into a CUDA graph (``ktrace.graphs``): the ring buffer
        every replay writes (an int64 view of the arena) and the int64 word where the commit
        kernel stores the replays completed, or None when the arena is full. A dump shows the
        replay in progress (the commit kernel resets the heads and NOW slots after each)."""
        import torch

        r = self._carve_ring(n_programs, extra=8)
        if r is None:
            return None
        at = r.offset + -(-r.nbytes // _ALIGN) * _ALIGN
        self.graph_rings[number] = (r, at)
        return self._arena[r.offset : r.offset + r.nbytes].view(torch.int64), self._arena[at : at + 8].view(torch.int64)

    # reading ---------------------------------------------------------------------------------
    def refresh(self, timeout_s: float | None = None) -> bool:
        """Placement ``"device"``: copy the rings to the pinned buffer on the recorder's own stream
        and wait for it (polling its event) at most ``timeout_s``; False if it did not complete.
        Placement ``"pinned"``: nothing to do (True)."""
        if self._staging is None:
            return True
        import torch

        n = self._used
        if n == 0:
            return True
        with torch.cuda.stream(self._side):
            self._staging[:n].copy_(self._arena[:n], non_blocking=True)
            self._copied.record(self._side)
        end = time.monotonic() + (self.config.copy_timeout_s if timeout_s is None else timeout_s)
        while not self._copied.query():
            if time.monotonic() > end:
                return False
            time.sleep(0.0005)
        self._copied_ns = time.time_ns()
        return True

    def read_flags(self, offsets) -> tuple[dict, str]:
        """The int32 values at these heap offsets (this rank's heap) now, read on the recorder's
        own stream (4-byte copies to pinned memory) and waited for at most ``copy_timeout_s``.

        Returns ``(values, how)``: offset -> value for those read, and what happened in words
        ("read", or why not: no heap given to the capture, the copy did not complete, ...)."""
        if getattr(self, "_flag_host", None) is None:
            return {}, "no heap was given to the capture"
        import torch

        offs = sorted({int(o) for o in offsets if 0 <= int(o) <= self._heap_bytes.numel() - 4})[:HEAP_READS]
        if not offs:
            return {}, "no flag to read"
        dst = self._flag_host.view(torch.uint8)
        with torch.cuda.stream(self._flag_side):
            for i, o in enumerate(offs):
                dst[4 * i : 4 * i + 4].copy_(self._heap_bytes[o : o + 4], non_blocking=True)
            self._flag_done.record(self._flag_side)
        end = time.monotonic() + self.config.copy_timeout_s
        while not self._flag_done.query():
            if time.monotonic() > end:
                return {}, f"the heap read did not complete within {self.config.copy_timeout_s} s"
            time.sleep(0.0005)
        vals = self._flag_host.numpy()[: len(offs)].tolist()
        return dict(zip(offs, vals)), "read"

    def _ring_bytes(self, r: RingLaunch) -> np.ndarray:
        return np.array(self._host[r.offset : r.offset + r.nbytes])  # a copy: the device keeps writing

    def _all_rings(self) -> list[RingLaunch]:
        return list(self.rings.values()) + [r for r, _ in list(self.graph_rings.values())]

    def heads(self) -> np.ndarray:
        """Every lane's head (records written in all), all launches in order (then the rings of
        launches captured into CUDA graphs)."""
        parts = []
        for r in self._all_rings():
            h0 = r.offset + schema.heads_offset(r.n_programs, r.slots)
            parts.append(self._host[h0 : h0 + 4 * r.n_programs].view("<u4").astype(np.int64))
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def waiting(self) -> int:
        """Lanes in a wait now (their NOW slot filled), all launches."""
        n = 0
        for r in self._all_rings():
            n0 = r.offset + schema.now_offset(r.n_programs, r.slots)
            now = self._host[n0 : n0 + r.n_programs * schema.NOW_BYTES].view(schema.NOW_DTYPE)
            n += int(np.count_nonzero(now["since"]))
        return n

    def ticks_at(self, host_ns: int) -> int:
        """The device timer (raw ticks) at host time ``host_ns``, from the opening measurement."""
        dev, host, _ = self._clock or (0, host_ns, 0)
        return int(dev + (host_ns - host) * self._tick_hz // 1_000_000_000)

    # streaming ---------------------------------------------------------------------------------
    def _drain_loop(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            self.drain_once()
            self._stop.wait(max(self.config.stream_poll_s - (time.monotonic() - t), 0.0))

    def drain_once(self) -> int:
        """Take every lane's new records into the spill files; the number taken."""
        from .stream import RingDrain, segments_bytes

        t = time.monotonic()
        n = 0
        for idx, r in list(self.rings.items()):
            got = self._drains.get(idx)
            if got is None:
                s = self.session
                got = self._drains[idx] = (RingDrain(r.n_programs, r.slots),
                                           Path(self.config.stream_dir) / f"ktrace-stream-{_safe(str(s.run_id))}-rank{s.rank}-l{idx}.spill")
            d, path = got
            h0 = r.offset + schema.heads_offset(r.n_programs, r.slots)
            heads = self._host[h0 : h0 + 4 * r.n_programs].view("<u4")
            rec = self._host[r.offset + schema.HEADER_BYTES : h0].view(schema.RECORD_DTYPE).reshape(r.n_programs, r.slots)
            lost0 = int(d.lost.sum())
            segs = d.drain(heads, rec)
            if segs:
                with open(path, "ab") as f:
                    f.write(segments_bytes(segs))
            n += sum(len(r) for _, _, r in segs)
            self.stream_stats["lost"] += int(d.lost.sum()) - lost0
        self.stream_stats["taken"] += n
        self.stream_stats["drains"] += 1
        self.stream_stats["longest_drain_s"] = max(self.stream_stats["longest_drain_s"], time.monotonic() - t)
        return n

    def final_raw(self, pl) -> np.ndarray:
        """The dense buffer of a finished ring launch (after the device was synchronised)."""
        r = self.rings[pl.index]
        if self.config.stream_dir is not None:
            from .stream import SPILL_DTYPE, assemble, iter_spill, rows

            if not self._drained:  # the last records, once the kernels have ended
                self.drain_once()
                self._drained = True
            d, path = self._drains[pl.index]
            got = rows(iter_spill(np.fromfile(path, np.uint8))) if path.exists() else np.zeros(0, SPILL_DTYPE)
            raw, _ = assemble(got, r.n_programs, d.lost, self._header(pl, r))
            return raw
        if self._staging is not None and not self._final:
            self._final = self.refresh(timeout_s=60.0)
        rec, heads, _ = ring.split_ring(self._ring_bytes(r), r.n_programs, r.slots)
        raw, _ = ring.unroll(rec, heads, self._header(pl, r))
        return raw

    def _header(self, pl, r: RingLaunch) -> schema.Header:
        # (a launch traced per lane says its lanes, as a dense buffer's header does: the capture
        # names them, and readers check the two agree)
        return schema.Header(timer=schema.TimerKind[self._device.get("timer", "UNKNOWN")], tick_hz=self._tick_hz,
                             capacity=r.slots, n_programs=r.n_programs, grid=pl.grid, lanes=max(1, len(getattr(pl, "lanes", ()) or ())))

    # dumping ---------------------------------------------------------------------------------
    def dump(self, reason: str) -> Path | None:
        """Write a live capture of every ring launch as it is now; never raises (logs instead)."""
        with self._lock:
            try:
                return self._dump(reason)
            except Exception as e:  # a watchdog must not die, nor kill the process it watches
                log.error("[rank %s] ktrace flight recorder: the %s dump failed: %s", self.session.rank, reason, e)
                return None

    def _dump(self, reason: str) -> Path:
        from ..captures.file import Capture, Launch, RankCapture, write_capture

        s = self.session
        fresh = self.refresh()
        host_ns = time.time_ns() if fresh or self._staging is None else self._copied_ns
        ticks = self.ticks_at(host_ns)
        launches, used = [], set()
        for pl, r, extra in self._dumped(s):
            rec, heads, now = ring.split_ring(self._ring_bytes(r), r.n_programs, r.slots)
            raw, lost = ring.unroll(rec, heads, self._header(pl, r), now=now, dump_ticks=ticks)
            waits = ring.open_waits(now)
            used.update(np.unique(raw[schema.HEADER_BYTES : schema.dropped_offset(r.n_programs, r.slots + 2)]
                                  .view(schema.RECORD_DTYPE)["tag"] >> schema.REGION_SHIFT).tolist())
            live = {
                "reason": reason,  # (also per launch: dumps of several ranks merged keep each rank's)
                "dump_ticks": ticks,
                "dump_ns": host_ns,  # (the host time of this dump: a merged capture keeps it per launch)
                "ring_slots": r.slots,
                "heads": heads.astype(np.int64).tolist(),
                "lost": lost.tolist(),
                "started": (now["started"] != 0).astype(np.int8).tolist(),
                "open_waits": [{k: int(w[k]) for k in ring.OPEN_WAIT_DTYPE.names} for w in waits],
            }
            launches.append(Launch(index=pl.index, kernel=pl.kernel, grid=pl.grid, capacity=r.slots + 2, raw=raw,
                                   host_ns=pl.host_ns, stream=pl.stream, meta={"device": pl.device, "live": live, **extra}))
        # the waited-on flags as the heap holds them now (after the rings: a flag set since a
        # lane's last read shows here first)
        values, how = self.read_flags(w["flag"] for ln in launches for w in ln.meta["live"]["open_waits"])
        for ln in launches:
            for w in ln.meta["live"]["open_waits"]:
                if w["flag"] in values:
                    w["heap_value"] = int(values[w["flag"]])
        names: dict[int, str] = {}
        for k in list(s.kernels.values()):
            names.update(regions.scan_kernel(k.jit_fn))
        names.update(regions.table())
        n = len(self.dumps) + 1
        _, _, bound = self._clock or (0, 0, -1)
        meta = s._meta()
        meta["live"] = {"reason": reason, "dump_ns": host_ns, "pid": os.getpid(), "sequence": n,
                        "clock_bound_ns": bound, "stall_s": self.config.stall_s,
                        "placement": self.config.placement, "heap_read": how}
        notes = [f"live dump ({reason}) taken while the kernels ran: open waits end at the dump"]
        if not fresh:
            notes.append(f"the copy of the rings from device memory did not complete within {self.config.copy_timeout_s} s: "
                         f"this dump holds the last copy that did, {(time.time_ns() - self._copied_ns) / 1e9:.1f} s old")
        rc = RankCapture(rank=int(s.rank), device=dict(self._device), launches=launches, notes=notes)
        cap = Capture(world_size=int(s.world_size), ranks={int(s.rank): rc},
                      regions={k: v for k, v in names.items() if k in used}, run_id=s.run_id, meta=meta)
        out = Path(self.config.out_dir) / f"ktrace-live-{s.run_id}-rank{s.rank}-{n}.ktrace"
        out.parent.mkdir(parents=True, exist_ok=True)
        write_capture(out, cap)
        self.dumps.append(out)
        log.warning("[rank %s] ktrace flight recorder: %s dump written to %s (%d lanes waiting)",
                    s.rank, reason, out, sum(len(ln.meta["live"]["open_waits"]) for ln in launches))
        return out

    def _dumped(self, s):
        """``(launch, ring, extra meta)`` of what a dump holds: the ring launches, then the replay
        in progress of each launch captured into a CUDA graph, numbered after them (its meta
        ``graph``: which captured launch, and the replay: those completed before it)."""
        out = [(pl, self.rings[pl.index], {}) for pl in list(s.launches) if pl.index in self.rings]
        nxt = max((pl.index for pl in s.launches), default=-1) + 1
        for gl in list(getattr(s, "_graphs", [])):
            got = self.graph_rings.get(gl.number)
            if got is None:
                continue
            r, at = got
            replay = int(self._host[at : at + 8].view("<i8")[0])
            pl = RingDumped(index=nxt, kernel=gl.kernel, grid=gl.grid, host_ns=gl.host_ns, stream=gl.stream, device=gl.device)
            out.append((pl, r, {"graph": {"capture": gl.number, "replay": replay}}))
            nxt += 1
        return out

    # the watchdog ----------------------------------------------------------------------------
    def _watch(self) -> None:
        cfg = self.config
        last = None
        since = time.monotonic()
        dumped = warned = False
        while not self._stop.is_set():
            if self._pipe is not None:
                try:
                    ready, _, _ = select.select([self._pipe[0]], [], [], cfg.poll_s)
                except (OSError, ValueError):
                    ready = []
                if ready:
                    try:
                        got = os.read(self._pipe[0], 64)
                    except OSError:
                        got = b""
                    if int(signal.SIGUSR1) in got:
                        self.dump("signal")
            else:
                self._stop.wait(cfg.poll_s)
            if self._stop.is_set():
                break
            with self._lock:
                copied = self.refresh()
            if not copied:
                if not warned:
                    log.warning("[rank %s] ktrace flight recorder: the copy of the rings from device memory did not complete "
                                "within %.1f s; the watchdog waits for one that does", self.session.rank, cfg.copy_timeout_s)
                    warned = True
                continue
            heads = self.heads()
            t = time.monotonic()
            if last is None or heads.shape != last.shape or (heads != last).any():
                last, since, dumped = heads, t, False
            elif not dumped and t - since >= cfg.stall_s and self.waiting():
                dumped = True
                self.dump("watchdog")

    # signal ----------------------------------------------------------------------------------
    def _install_signal(self) -> None:
        if not self.config.on_signal:
            return
        if threading.current_thread() is not threading.main_thread():
            log.warning("ktrace flight recorder: the capture was opened outside the main thread: no dump on SIGUSR1")
            return
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        try:
            old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError as e:
            os.close(r)
            os.close(w)
            log.warning("ktrace flight recorder: no dump on SIGUSR1 (%s)", e)
            return
        if old_fd != -1:  # someone else's (an event loop's): keep theirs, no signal dumps
            signal.set_wakeup_fd(old_fd)
            os.close(r)
            os.close(w)
            log.warning("ktrace flight recorder: the process already has a signal wakeup fd: no dump on SIGUSR1")
            return
        self._old_signal = signal.signal(signal.SIGUSR1, _noop_handler)
        self._pipe = (r, w)

    def _restore_signal(self) -> None:
        if self._pipe is None:
            return
        try:
            signal.signal(signal.SIGUSR1, self._old_signal if self._old_signal is not None else signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
        except ValueError:  # (closed from another thread: leave the handler, it does nothing)
            pass

    # registry --------------------------------------------------------------------------------
    def _register(self) -> None:
        from .registry import register

        s = self.session
        d = Path(self.config.registry) if self.config.registry else registry_dir()
        try:
            self._registered = register(d, str(s.run_id), int(s.rank), str(Path(self.config.out_dir).resolve()))
        except (OSError, RegistryError) as e:
            log.warning("ktrace flight recorder: could not register for `ktrace dump` in %s: %s", d, e)

    # closing ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the watchdog, restore the signal, unregister (the arena stays for :meth:`final_raw`)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * self.config.poll_s + 1)
        if self._drain_thread is not None:
            self._drain_thread.join(timeout=10)
            self._drain_thread = None
        self._restore_signal()
        if self._pipe is not None:
            for fd in self._pipe:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._pipe = None
        if self._registered is not None:
            from .registry import unregister

            unregister(self._registered)
            self._registered = None


def _noop_handler(signum, frame) -> None:
    """SIGUSR1's Python handler: the dump is made by the watchdog thread (woken through the pipe)."""


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "run"


def _device_clock(device: int, timeout_s: float = 10.0) -> tuple[int, int, int]:
    """``(device ticks, host ns, bound ns)``: the device timer and the host clock at one moment.

    A one-program kernel spins on a pinned word; the host sets it and polls for the timer the
    kernel then stores (both in pinned memory): the host times bracket the read.
    """
    import torch

    from .device import clock_probe

    words = torch.zeros(4, dtype=torch.int64, pin_memory=True)
    w = words.numpy()
    clock_probe[(1,)](words)
    time.sleep(0.01)  # (the kernel is spinning by now; if not, the bound says so)
    h0 = time.time_ns()
    w[0] = 1
    end = time.monotonic() + timeout_s
    while w[1] == 0 and time.monotonic() < end:
        pass
    h1 = time.time_ns()
    torch.cuda.synchronize(device)
    if w[1] == 0:
        raise RuntimeError("ktrace flight recorder: the device clock probe did not answer")
    return int(w[1]), (h0 + h1) // 2, (h1 - h0 + 1) // 2
