"""One trace of a PyTorch profiler run and a ktrace capture of the same run.

``torch.profiler`` (Kineto) writes a Chrome JSON trace: complete events (``"ph": "X"``, ``ts`` and
``dur`` in µs) for CPU operators (``cpu_op``, ``user_annotation``), CUDA runtime and driver calls
(``cuda_runtime``, ``cuda_driver``: ``args.correlation``) on the host's threads, and CUPTI's GPU
records (``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``gpu_user_annotation``: ``args.device``,
``args.stream``, ``args.correlation``) on ``pid`` = device, ``tid`` = stream. :func:`read_profile`
reads one such file into columns.

Alignment (:func:`align`). Each traced launch of a rank is paired with its CUPTI kernel record:
by correlation where the capture was recorded with ``ktrace.capture(profiler=prof)`` (the launch's
profiler range ``ktrace <kernel> #<index>`` holds the driver call that launched it), else by name
and order (the k-th traced launch of a kernel is the k-th CUPTI record of that name); the pairing
must map each of the capture's streams to one CUDA stream of the profile. The ktrace events of a
launch ran inside its kernel, so each pair says where the profile's clock puts the launch: the
offsets ``kernel start - first event start`` .. ``kernel end - last event end``, whose middle is
the pair's estimate. Over a rank's pairs an offset and a drift are fitted (least squares; the
offset alone over less than :data:`MIN_DRIFT_SPAN_NS`): CUPTI's timestamps and the GPU's timer
drift apart (+18 ppm on the H100 of the fixture). The alignment's bound is the residual: the
largest distance of a pair's estimate from the fit. ``outside_ns`` says by how much any launch's
events still stick out of its kernel record after the shift (0 when every one is inside).
Files that do not belong together (other kernels, other counts, launches
that cannot sit inside their kernels) raise :class:`ProfileMismatch`, one line.

Writing (:func:`write_merged`): the capture's Perfetto trace (``ktrace.export.perfetto``) with the
profile's events added on the same clock, the capture's (each rank's profile shifted by its
offset): per rank, the CUDA stream that ran the traced launches is the rank's ``kernels`` track
(its CUPTI records, the ktrace slice of each traced launch nested inside its kernel's slice,
the workgroup lanes right below); other streams and the host's threads (operators, runtime calls,
with an arrow from each launch call to its kernel) are processes of their own.

Needs numpy, orjson and perfetto; never torch.
"""

from __future__ import annotations

import gzip
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from ..text import printable, ranges_text

log = logging.getLogger("ktrace")

#: Profiler events on the GPU side (``pid`` = device, ``tid`` = stream).
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
#: Profiler events on the host's threads.
CPU_CATS = ("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver")
#: A traced launch's profiler range (``ktrace.capture(profiler=...)``): ``ktrace <kernel> #<index>``.
RANGE_PREFIX = "ktrace "
#: Drift is fitted (besides the offset) only over traced launches at least this far apart (ns).
MIN_DRIFT_SPAN_NS = 1_000_000
#: Largest profile read (bytes, inflated): a profiler trace of more would not open in the UI either.
MAX_PROFILE_BYTES = 1 << 30
#: Largest ratio of a gzipped profile's inflated size to its stored size (a profiler's JSON
#: compresses 10-20x; a file that inflates more is refused once it has, before it is parsed, so
#: what a gzipped profile costs is bounded by 256x its stored size).
MAX_INFLATION = 256
#: Chunk in which a gzipped profile is inflated.
_CHUNK = 1 << 20
#: Largest time span of a profile's events (µs): a day (profilers record seconds to minutes).
MAX_SPAN_US = 86_400 * 1e6
#: Largest event time (µs): 2^62 ns, past any clock a profiler uses (epoch µs are ~1.8e15).
MAX_TS_US = float(1 << 62) / 1000
#: Largest integer argument (device, stream, correlation) or pid taken as it is.
_MAX_ARG = 1 << 62


class ProfileMismatch(ValueError):
    """A profile that does not belong to the capture (one line says why)."""


@dataclass
class Profile:
    """One profiler trace as columns (times in ns on the profile's clock).

    ``cat``/``name``: per event; ``pid``/``tid``: as the file says; ``start_ns``/``end_ns``;
    ``device``/``stream``/``correlation``: ``args`` (-1 where absent).
    """

    path: str
    rank: int | None
    cat: np.ndarray
    name: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    process_names: dict = field(default_factory=dict)
    thread_names: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(self.cat.size)


def _inflate(p: Path, stored: int) -> bytes:
    """A gzipped file's content, inflated in chunks and refused as soon as it passes
    :data:`MAX_PROFILE_BYTES` or :data:`MAX_INFLATION` times its stored size."""
    import zlib

    limit = min(MAX_PROFILE_BYTES, MAX_INFLATION * max(stored, 1) + _CHUNK)
    out = bytearray()
    try:
        with gzip.open(p, "rb") as f:
            while True:
                c = f.read(min(_CHUNK, limit + 1 - len(out)))
                if not c:
                    break
                out += c
                if len(out) > limit:
                    raise ProfileMismatch(f"{p}: inflates to more than {limit} bytes ({'the most a profile may hold' if limit == MAX_PROFILE_BYTES else f'{MAX_INFLATION}x its {stored} stored bytes'}): not read")
    except (zlib.error, gzip.BadGzipFile) as e:
        raise ProfileMismatch(f"{p}: corrupt gzip data ({' '.join(str(e).split())[:100]})") from None
    except EOFError:
        raise ProfileMismatch(f"{p}: its gzip data ends early (a truncated file)") from None
    return bytes(out)


def _load(path: str | os.PathLike) -> dict:
    """The profile's JSON (gzipped or not): a regular file, its size bounded (inflated in chunks)."""
    from ..fileio import InputError, regular_input

    p = Path(path)
    try:
        regular_input(p, "profiler trace")  # (a device or a FIFO would be read for ever)
        size = p.stat().st_size
        with open(p, "rb") as f:
            magic = f.read(2)
        if magic == b"\x1f\x8b":
            data = _inflate(p, size)
        else:
            if size > MAX_PROFILE_BYTES:
                raise ProfileMismatch(f"{p}: {size} bytes, more than the {MAX_PROFILE_BYTES} a profile may hold: not read")
            with open(p, "rb") as f:
                data = f.read(MAX_PROFILE_BYTES + 1)
        doc = orjson.loads(data)
    except InputError as e:
        raise ProfileMismatch(str(e)) from None
    except OSError as e:
        raise ProfileMismatch(f"{p}: cannot be read ({e.strerror or e})") from None
    except orjson.JSONDecodeError as e:
        raise ProfileMismatch(f"{p}: not a JSON trace ({' '.join(str(e).split())[:120]})") from None
    if isinstance(doc, list):  # (the Chrome format allows a bare array of events)
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ProfileMismatch(f"{p}: not a Chrome JSON trace (no traceEvents)")
    return doc


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int_arg(args, key, where: str = "", i: int = -1) -> int:
    """An integer argument of an event (-1 when absent); one that is not an integer in range is
    refused (ProfileMismatch naming the event), never read as another value."""
    v = args.get(key) if isinstance(args, dict) else None
    if v is None:
        return -1
    if not _is_num(v) or (isinstance(v, float) and not v.is_integer()) or not -1 <= v <= _MAX_ARG:
        raise ProfileMismatch(f"{where}: event {i}: args.{key} is {orjson.dumps(v)[:40].decode(errors='replace')}, not an integer "
                              f"in -1..2^62")
    return int(v)


def _pid(v) -> int:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and -_MAX_ARG <= v <= _MAX_ARG else -1


def _times(keep: list, index: list, path) -> tuple[np.ndarray, np.ndarray]:
    """The kept events' start and end (ns), every ``ts`` and ``dur`` checked: numbers, not booleans,
    finite, ``0 <= ts <= MAX_TS_US``, ``0 <= dur``, all within :data:`MAX_SPAN_US` of each other."""
    bad = next((k for k, e in enumerate(keep) if not (_is_num(e["ts"]) and _is_num(e["dur"]))), None)
    if bad is not None:
        e = keep[bad]
        key = "ts" if not _is_num(e["ts"]) else "dur"
        raise ProfileMismatch(f"{path}: event {index[bad]}: {key} is {orjson.dumps(e[key])[:40].decode(errors='replace')}, not a number")
    ts = np.array([e["ts"] for e in keep], np.float64)
    dur = np.array([e["dur"] for e in keep], np.float64)
    for what, v, lo, hi in (("ts", ts, 0.0, MAX_TS_US), ("dur", dur, 0.0, MAX_SPAN_US)):
        out = ~((v >= lo) & (v <= hi))  # (NaN fails too)
        if out.any():
            k = int(np.argmax(out))
            raise ProfileMismatch(f"{path}: event {index[k]}: {what} {v[k]:g} µs is outside {lo:g}..{hi:g}: not a profiler's time")
    end = ts + dur
    lo, hi = float(ts.min()), float(end.max())
    if hi - lo > MAX_SPAN_US:
        mid = float(np.median(ts))
        k = int(np.argmax(np.maximum(np.abs(ts - mid), np.abs(end - mid))))
        raise ProfileMismatch(f"{path}: its events span {(hi - lo) / 86_400e6:.1f} days, more than a profile records (event "
                              f"{index[k]} at ts {ts[k]:.0f} µs is {abs(ts[k] - mid) / 86_400e6:.1f} days from the others): not read")
    # µs with 3 decimals: round to whole ns (a float64 of ~1e12 µs holds them to ~0.1 ns)
    start = np.rint(ts * 1000.0).astype(np.int64)
    return start, start + np.rint(dur * 1000.0).astype(np.int64)


def read_profile(path: str | os.PathLike) -> Profile:
    """Read a ``torch.profiler`` Chrome JSON trace (``.json`` or ``.json.gz``).

    Complete events (``ph == "X"``) of the CPU and GPU categories are kept; the thread and
    process names come from the metadata events; what else it holds is counted in ``skipped``
    by category. The rank comes from ``distributedInfo.rank`` when the profiler wrote it.

    Raises:
        ProfileMismatch: not a readable profiler trace.
    """
    doc = _load(path)
    evs = doc["traceEvents"]
    index = [i for i, e in enumerate(evs) if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in GPU_CATS + CPU_CATS]
    keep = [evs[i] for i in index]
    skipped: dict = {}
    pnames, tnames = {}, {}
    for e in evs:  # (metadata and what is left out: a small part of a profile)
        if not isinstance(e, dict):
            continue
        if e.get("ph") == "M":
            a = e.get("args") or {}
            if e.get("name") == "process_name" and isinstance(a, dict):
                pnames[printable(str(e.get("pid")))] = printable(str(a.get("name", "")))
            elif e.get("name") == "thread_name" and isinstance(a, dict):
                tnames[(printable(str(e.get("pid"))), printable(str(e.get("tid"))))] = printable(str(a.get("name", "")))
        elif not (e.get("ph") == "X" and e.get("cat") in GPU_CATS + CPU_CATS):
            k = printable(str(e.get("cat") or e.get("ph")))[:80]
            skipped[k] = skipped.get(k, 0) + 1
    if not keep:
        raise ProfileMismatch(f"{path}: holds no profiler events (CPU operators, CUDA calls or kernels)")
    for e in keep:  # (absent: null, said as such)
        e.setdefault("ts", None)
        e.setdefault("dur", None)
    start, end = _times(keep, index, path)
    args = [e.get("args") for e in keep]
    device = np.array([_int_arg(a, "device", path, i) for a, i in zip(args, index)], np.int64)
    stream = np.array([_int_arg(a, "stream", path, i) for a, i in zip(args, index)], np.int64)
    # GPU events without these arguments (gpu_user_annotation) say them as their pid and tid
    gpu = np.array([e["cat"] in GPU_CATS for e in keep])
    pid_i = np.array([_pid(e.get("pid")) for e in keep], np.int64)
    tid_i = np.array([_pid(e.get("tid")) for e in keep], np.int64)
    device = np.where(gpu & (device < 0), pid_i, device)
    stream = np.where(gpu & (stream < 0), tid_i, stream)
    rank = None
    di = doc.get("distributedInfo")
    if isinstance(di, dict) and di.get("rank") is not None:
        r = di.get("rank")
        if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < 1 << 16:
            raise ProfileMismatch(f"{path}: distributedInfo.rank is {orjson.dumps(r)[:40].decode(errors='replace')}, not a rank")
        rank = r
    return Profile(
        path=str(path), rank=rank,
        cat=np.array([e["cat"] for e in keep], dtype=object), name=np.array([printable(str(e.get("name", ""))) for e in keep], dtype=object),
        pid=np.array([printable(str(e.get("pid"))) for e in keep], dtype=object),
        tid=np.array([printable(str(e.get("tid"))) for e in keep], dtype=object),
        start_ns=start, end_ns=end,
        device=device, stream=stream,
        correlation=np.array([_int_arg(a, "correlation", path, i) for a, i in zip(args, index)], np.int64),
        process_names=pnames, thread_names=tnames, skipped=skipped)


@dataclass
class RankAlignment:
    """How one rank's profile sits on the capture's clock.

    Profile time = common time + ``offset_ns`` + ``drift_ppm`` * 1e-6 * (common time - ``t0_ns``).
    ``residual_ns``: the alignment's bound, the largest distance between a traced launch's place
    under this model and where its CUPTI kernel record puts it (the middle of the offsets that
    put its events inside the kernel). ``outside_ns``: the most any traced launch's events stick
    out of its kernel record after the shift (0: every one inside). ``kernel_rows``: per traced
    launch (``launch_index``), its kernel's row in the profile; ``streams``: the capture's stream
    -> the profile's CUDA stream; ``stream``: that of the first launch.
    """

    rank: int
    offset_ns: int
    drift_ppm: float
    t0_ns: int
    residual_ns: int
    outside_ns: int
    launches: int
    matched_by: str
    kernel_rows: np.ndarray
    streams: dict
    device: int
    #: the traced launches' indices (in order, as ``kernel_rows``), and the profile's stream of the first
    launch_index: list = field(default_factory=list)
    stream: int = -1

    def describe(self) -> str:
        inside = ("every traced launch inside its CUPTI kernel record" if self.outside_ns == 0
                  else f"launches stick out of their kernel records by up to {self.outside_ns} ns")
        return (f"rank {self.rank}: {self.launches} traced launches matched to their CUPTI kernels by {self.matched_by}; "
                f"drift {self.drift_ppm:+.1f} ppm, bound ±{self.residual_ns} ns (residual); {inside}")

    def to_common(self, t: np.ndarray) -> np.ndarray:
        """Profile times (ns) on the capture's common clock."""
        d = self.drift_ppm * 1e-6
        x = t - self.offset_ns - self.t0_ns
        return self.t0_ns + np.rint(x / (1.0 + d)).astype(np.int64)

    def to_json(self) -> dict:
        return {"rank": self.rank, "offset_ns": self.offset_ns, "drift_ppm": self.drift_ppm, "t0_ns": self.t0_ns,
                "residual_ns": self.residual_ns, "outside_ns": self.outside_ns, "launches": self.launches,
                "matched_by": self.matched_by, "device": self.device, "streams": {str(k): v for k, v in self.streams.items()}}


def _by_correlation(prof: Profile, launches: list) -> np.ndarray | None:
    """Kernel rows of the launches by their profiler ranges (``ktrace <kernel> #<index>``): the
    launch call inside the range (on its thread), and the kernel of its correlation id, of the
    launch's kernel name. None unless every launch is found so, exactly once.

    Vectorised: a launch's range holds one traced launch and ranges do not overlap on a thread,
    so each launch call falls in the range (if any) that starts last before it.
    """
    is_ann = (prof.cat == "user_annotation") & np.char.startswith(prof.name.astype(str), RANGE_PREFIX)
    ann = np.flatnonzero(is_ann)
    if ann.size == 0:
        return None
    # (the profile's names are read through printable: the capture's are compared the same way)
    want = {f"{RANGE_PREFIX}{printable(ln.kernel)} #{ln.index}": i for i, ln in enumerate(launches)}
    launch_of_ann = np.array([want.get(n, -1) for n in prof.name[ann].tolist()], np.int64)
    kern = np.flatnonzero(prof.cat == "kernel")
    calls = np.flatnonzero(np.isin(prof.cat, ("cuda_runtime", "cuda_driver")) & np.isin(prof.correlation, prof.correlation[kern])
                           & (prof.correlation >= 0))
    if calls.size == 0:
        return None
    # one key per thread; ranges sorted by (thread, start), calls looked up in them
    _, thread = np.unique((prof.pid.astype(str) + "\x1f" + prof.tid.astype(str)).astype(str), return_inverse=True)
    thread = thread.reshape(-1).astype(np.int64)
    span = int(prof.end_ns.max() - prof.start_ns.min()) + 1
    t0 = int(prof.start_ns.min())
    akey = thread[ann] * span + (prof.start_ns[ann] - t0)
    o = np.argsort(akey, kind="stable")
    ann, akey, launch_of_ann = ann[o], akey[o], launch_of_ann[o]
    ckey = thread[calls] * span + (prof.start_ns[calls] - t0)
    j = np.searchsorted(akey, ckey, side="right") - 1
    ok = j >= 0
    j = np.maximum(j, 0)
    ok &= (thread[ann[j]] == thread[calls]) & (prof.end_ns[calls] <= prof.end_ns[ann[j]]) & (launch_of_ann[j] >= 0)
    # the kernel of each call's correlation id, of the launch's kernel name
    ko = np.argsort(prof.correlation[kern], kind="stable")
    kc = prof.correlation[kern][ko]
    krow = kern[ko][np.minimum(np.searchsorted(kc, prof.correlation[calls]), kc.size - 1)]
    names = np.array([printable(ln.kernel) for ln in launches], dtype=object)
    ok &= prof.name[krow] == names[launch_of_ann[j]]
    li, kr = launch_of_ann[j][ok], krow[ok]
    if li.size != len(launches) or np.unique(li).size != len(launches):
        return None
    rows = np.full(len(launches), -1, np.int64)
    rows[li] = kr
    return rows


def _by_order(prof: Profile, launches: list, where: str) -> np.ndarray:
    """Kernel rows of the launches by name and order: the k-th traced launch of a kernel is the
    k-th CUPTI record of that name (by start)."""
    kern = np.flatnonzero(prof.cat == "kernel")
    rows = np.full(len(launches), -1, np.int64)
    names = np.array([printable(ln.kernel) for ln in launches], dtype=object)
    for name in dict.fromkeys(names.tolist()):
        mine = np.flatnonzero(names == name)
        recs = kern[prof.name[kern] == name]
        recs = recs[np.argsort(prof.start_ns[recs], kind="stable")]
        if recs.size != mine.size:
            raise ProfileMismatch(f"{where}: the capture has {mine.size} traced launch(es) of {name} but the profile "
                                  f"{recs.size} kernel record(s) of that name: not the same run (or the profiler did not "
                                  "cover the whole capture)")
        rows[mine] = recs
    return rows


def align(prof: Profile, rank: int, launches: list, common: list[tuple[int, int]], where: str) -> RankAlignment:
    """Pair each traced launch of ``rank`` with its CUPTI kernel record and fit the offset.

    Args:
        prof: the rank's profile.
        rank: the rank.
        launches: its ``Launch`` objects, in order.
        common: per launch, ``(first event start, last event end)`` on the common clock.
        where: how the files are named in messages.

    Raises:
        ProfileMismatch: the files do not belong together (one line).
    """
    if not launches:
        raise ProfileMismatch(f"{where}: rank {rank} of the capture has no traced launches to align")
    rows = _by_correlation(prof, launches)
    how = "correlation (profiler ranges)"
    if rows is None:
        rows, how = _by_order(prof, launches, where), "name and order"
    # one CUDA stream of the profile per stream of the capture, and one device
    streams: dict = {}
    for ln, r in zip(launches, rows.tolist()):
        s = int(prof.stream[r])
        if streams.setdefault(int(ln.stream), s) != s:
            raise ProfileMismatch(f"{where}: rank {rank}'s launches on one stream match kernels on CUDA streams "
                                  f"{streams[int(ln.stream)]} and {s} of the profile: not the same run")
    if len(set(streams.values())) != len(streams):
        raise ProfileMismatch(f"{where}: rank {rank}'s launches on different streams match kernels of one CUDA stream of the profile")
    devices = np.unique(prof.device[rows])
    if devices.size != 1:
        raise ProfileMismatch(f"{where}: rank {rank}'s launches match kernels on devices {devices.tolist()} of the profile")
    cap_dev = {(ln.meta or {}).get("device") for ln in launches} - {None}
    if cap_dev and cap_dev != {int(devices[0])}:
        raise ProfileMismatch(f"{where}: rank {rank} ran on device {sorted(cap_dev)} but its kernels in the profile on device {int(devices[0])}")
    a = np.array([c[0] for c in common], np.int64)
    b = np.array([c[1] for c in common], np.int64)
    s, e = prof.start_ns[rows], prof.end_ns[rows]
    lo, hi = s - a, e - b  # each launch: the offsets that put its events inside its kernel
    mid = (lo + hi) // 2
    t0 = int(a.min())
    t = (a - t0).astype(np.float64)
    o0 = int(np.median(mid))
    y = (mid - o0).astype(np.float64)
    drift = 0.0
    if t.max() - t.min() >= MIN_DRIFT_SPAN_NS and np.unique(t).size >= 2:  # offset + drift, least squares
        drift, c = np.polyfit(t, y, 1)
    else:
        c = float(np.median(y))
    fit = o0 + np.rint(c + drift * t).astype(np.int64)
    residual = int(np.abs(mid - fit).max())
    outside = np.maximum(np.maximum(lo - fit, fit - hi), 0)
    too_long = (b - a) > (e - s)
    # events that cannot sit inside their kernel even alone, or a fit that leaves a launch out of
    # its kernel by more than the kernel lasts: these are not records of the same launches
    worst = int(np.argmax(outside))
    if too_long.any() or outside[worst] > max(1000, int((e - s)[worst])):
        i = int(np.flatnonzero(too_long)[0]) if too_long.any() else worst
        raise ProfileMismatch(f"{where}: rank {rank} launch {launches[i].index} ({launches[i].kernel}) recorded events over "
                              f"{int(b[i] - a[i])} ns but its CUPTI kernel record lasts {int(e[i] - s[i])} ns"
                              + ("" if too_long.any() else f", and the clock fit leaves it {int(outside[i])} ns outside")
                              + ": not the same launches")
    return RankAlignment(rank=rank, offset_ns=int(o0 + round(c)), drift_ppm=float(drift * 1e6), t0_ns=t0, residual_ns=residual,
                         outside_ns=int(outside.max()), launches=len(launches),
                         matched_by=how, kernel_rows=rows, streams=streams, device=int(devices[0]),
                         launch_index=[int(ln.index) for ln in launches], stream=streams[int(launches[0].stream)])


def launch_spans(capture, model=None) -> dict[int, list[tuple[int, int]]]:
    """Per rank, per launch: (first event start, last event end) on the common clock."""
    from ..clock.model import clock_model_of
    from ..events import launch_refs, make_batches, read_batch

    model = model or clock_model_of(capture)
    refs = launch_refs(capture)
    out: dict[int, list] = {r: [] for r in capture.ranks}
    got: dict[int, tuple[int, int]] = {}
    for bt in make_batches(refs):
        b = read_batch(refs, bt, model, ("start_ns", "end_ns"))
        for j, li in enumerate(bt):
            lo, hi = int(b.offsets[j]), int(b.offsets[j + 1])
            got[li] = (int(b.cols["start_ns"][lo:hi].min()), int(b.cols["end_ns"][lo:hi].max())) if hi > lo else None
    for li, (r, _) in enumerate(refs):
        out[r].append(got[li])
    return out


def profiles_of(capture, paths: list | None, capture_path: str | os.PathLike | None = None) -> dict[int, Profile]:
    """The profile of each rank: the files given (their rank from the file, else by order of the
    capture's ranks), else those the capture names (``capture(profiler=...)``, beside it)."""
    if not paths:
        paths = named_profiles(capture, capture_path)
    profs = [read_profile(p) for p in paths]
    ranks = sorted(capture.ranks)
    if len(profs) > len(ranks):
        raise ProfileMismatch(f"{paths[len(ranks)]}: a profile more than the capture has ranks ({len(profs)} profiles for "
                              f"{len(ranks)} rank(s))")
    out: dict[int, Profile] = {}
    for i, p in enumerate(profs):
        r = p.rank if p.rank is not None else ranks[i]
        if r not in capture.ranks:
            raise ProfileMismatch(f"{p.path}: the profile of rank {r}, which the capture does not hold (ranks {ranges_text(ranks)})")
        if r in out:
            raise ProfileMismatch(f"{p.path}: a second profile of rank {r} (also {out[r].path})")
        out[r] = p
    return out


def named_profiles(capture, capture_path: str | os.PathLike | None) -> list[str]:
    """The profiles a capture names (``capture(profiler=...)``): files beside it, by rank. A name
    must be a plain file name (the capture says where its profile is, never a path elsewhere)."""
    named = (capture.meta or {}).get("profile")
    where = str(capture_path) if capture_path is not None else "the capture"
    if not named or capture_path is None:
        raise ProfileMismatch(f"{where}: no profile given (--with-profile KINETO.json) and the capture names none")
    if not isinstance(named, dict) or not all(isinstance(k, str) and k.isdigit() and len(k) < 6 and isinstance(v, str) for k, v in named.items()):
        raise ProfileMismatch(f"{where}: the profiles it names are not a table of rank -> file name")
    bad = next((v for v in named.values() if not v or v in (".", "..") or "/" in v or "\\" in v or "\0" in v), None)
    if bad is not None:
        raise ProfileMismatch(f"{where}: it names the profile {printable(bad)[:80]!r}, not a file beside it: not read")
    base = Path(capture_path).parent
    return [str(base / named[k]) for k in sorted(named, key=int)]


def align_capture(capture, profiles: dict[int, Profile], model=None) -> dict[int, RankAlignment]:
    """:func:`align` for every rank that has a profile."""
    spans = launch_spans(capture, model)
    out = {}
    for r, prof in sorted(profiles.items()):
        lns = capture.ranks[r].launches
        keep = [i for i, sp in enumerate(spans[r]) if sp is not None]  # (a launch with no events bounds nothing)
        out[r] = align(prof, r, [lns[i] for i in keep], [spans[r][i] for i in keep], str(prof.path))
    return out


def write_merged(capture, path: str | os.PathLike, profiles: dict[int, Profile], *, model=None, workers: int | None = None) -> tuple[Path, dict]:
    """Write the capture and its ranks' profiles as one Perfetto trace (see the module's docstring).

    Returns:
        The path written and the alignment per rank (:class:`RankAlignment`).

    Raises:
        ProfileMismatch: a profile does not belong to the capture.
    """
    from ..clock.model import clock_model_of
    from .perfetto import PerfettoWriter
    from .plan import plan_trace
    from .writer import write

    model = model or clock_model_of(capture)
    aligned = align_capture(capture, profiles, model)
    for a in aligned.values():
        log.info("profile alignment: %s", a.describe())
    plan = plan_trace(capture, model, workers=workers)
    first = min(int(a.to_common(profiles[r].start_ns).min()) for r, a in aligned.items())
    plan.base_ns = min(plan.base_ns, first)  # time 0: the first event of either
    writer = PerfettoWriter(extra=lambda pl: profile_packets(pl, profiles, aligned))
    return write(capture, path, writer, model=model, plan=plan, workers=workers), aligned


#: Profile tracks' uuids: ``_UUID_BASE | rank << 32 | k`` (ktrace's own are below 2**48).
_UUID_BASE = 1 << 60
#: Flow ids of the launch-call -> kernel arrows: ``_FLOW_BASE | rank << 40 | correlation``.
_FLOW_BASE = 1 << 56
#: The profile's packet sequence.
_PROFILE_SEQ = 0x7F00
#: Thread ids of the profile's tracks (unique in the trace, after ktrace's: ``ktrace.export.layout``).
_TID_BASE = 1_500_000_000
#: Process ids of the profile's processes.
_PID_BASE = 1_000_000


def profile_packets(plan, profiles: dict[int, Profile], aligned: dict[int, RankAlignment]) -> tuple[dict[int, str], bytes]:
    """The profile's tracks and events as Perfetto packets, on the plan's clock.

    Returns:
        Per rank, the name its ``kernels`` track takes (it holds the traced stream's CUPTI
        records), and the packets.
    """
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (ProcessDescriptor, ThreadDescriptor, Trace, TrackDescriptor,
                                                                     TrackEvent)

    from .layout import lanes_of
    from .perfetto import proc_uuid

    names: dict[int, str] = {}
    trace = Trace()
    ids = {"pid": _PID_BASE, "tid": _TID_BASE}

    def desc(**kw):
        trace.packet.add(trusted_packet_sequence_id=_PROFILE_SEQ, track_descriptor=TrackDescriptor(**kw))

    def new(k):
        ids[k] += 1
        return ids[k]

    events: list[tuple] = []  # (t, order, tie, packet kwargs)
    for r, prof in sorted(profiles.items()):
        al = aligned[r]
        s_t, e_t = al.to_common(prof.start_ns) - plan.base_ns, al.to_common(prof.end_ns) - plan.base_ns
        if (s_t < 0).any():
            raise ProfileMismatch(f"{prof.path}: events before the trace's start after the shift (internal error)")
        traced_stream = al.stream
        is_gpu = np.isin(prof.cat, GPU_CATS)
        # track keys: GPU (device, stream), CPU (pid, tid); the lanes split what does not nest
        # (the separator: a control character, which printable names never hold)
        key_str = np.where(is_gpu, "g" + prof.device.astype(str) + "\x1f" + prof.stream.astype(str),
                           "c" + prof.pid.astype(str) + "\x1f" + prof.tid.astype(str))
        uk, key = np.unique(key_str.astype(str), return_inverse=True)
        key = key.reshape(-1)
        lane = lanes_of(key, s_t, e_t).astype(np.int64)
        main = int(np.searchsorted(uk, f"g{al.device}\x1f{traced_stream}"))
        track_of = (key.astype(np.int64) << 8) | lane
        uuid = np.full(prof.size, 0, np.int64)
        host_proc: dict[str, int] = {}
        gpu_proc = None
        pu = proc_uuid(r)
        for t in np.unique(track_of).tolist():
            k, ln = t >> 8, t & 0xFF
            ks = str(uk[k])
            if k == main and ln == 0:
                u = pu | 1  # the rank's kernels track
                names[r] = (f"stream {traced_stream} · CUPTI kernels + ktrace launches (aligned ±{al.residual_ns} ns)")
            else:
                u = _UUID_BASE | (r << 32) | (k << 8) | ln
                if ks.startswith("g"):
                    if gpu_proc is None:
                        gpu_proc = (new("pid"), _UUID_BASE | (r << 32) | 0xFFFFFF00)
                        desc(uuid=gpu_proc[1], process=ProcessDescriptor(pid=gpu_proc[0], process_name=f"rank {r} · GPU (profiler): other streams and lanes"))
                    dev, stream = ks[1:].split("\x1f")
                    desc(uuid=u, thread=ThreadDescriptor(pid=gpu_proc[0], tid=new("tid"),
                                                         thread_name=f"r{r} GPU {dev} stream {stream}" + (f" lane{ln}" if ln else "")))
                else:
                    hp, ht = ks[1:].split("\x1f")
                    if hp not in host_proc:
                        host_proc[hp] = new("pid")
                        pname = prof.process_names.get(hp) or "host"
                        desc(uuid=_UUID_BASE | (r << 32) | 0xFFFFFE00 | len(host_proc), process=ProcessDescriptor(
                            pid=host_proc[hp], process_name=f"rank {r} · {pname} (pid {hp}, profiler)"))
                    tname = prof.thread_names.get((hp, ht)) or f"thread {ht}"
                    desc(uuid=u, thread=ThreadDescriptor(pid=host_proc[hp], tid=new("tid"),
                                                         thread_name=f"r{r} {tname}" + (f" lane{ln}" if ln else "")))
            uuid[track_of == t] = u
        kernel_of = {int(row): i for i, row in enumerate(al.kernel_rows.tolist())}
        corr_k = set(prof.correlation[prof.cat == "kernel"].tolist()) - {-1}
        calls = np.isin(prof.cat, ("cuda_runtime", "cuda_driver"))
        for i in range(prof.size):  # (the profile's events: already one Python object each in its JSON)
            anns = []
            c = int(prof.correlation[i])
            te = {"type": TrackEvent.TYPE_SLICE_BEGIN if e_t[i] > s_t[i] else TrackEvent.TYPE_INSTANT, "track_uuid": int(uuid[i]),
                  "name": str(prof.name[i]), "categories": [str(prof.cat[i])]}
            if is_gpu[i]:
                anns += [("device", int(prof.device[i])), ("stream", int(prof.stream[i]))]
            if c >= 0:
                anns.append(("correlation", c))
                if prof.cat[i] == "kernel":
                    te["terminating_flow_ids"] = [_FLOW_BASE | (r << 40) | c]
                elif calls[i] and c in corr_k:
                    te["flow_ids"] = [_FLOW_BASE | (r << 40) | c]
            j = kernel_of.get(i)
            if j is not None:
                anns += [("ktrace_launch", int(al.launch_index[j])), ("ktrace_bound_ns", al.residual_ns),
                         ("ktrace_outside_ns", al.outside_ns)]
            te["debug_annotations"] = [{"name": n, "int_value": v} for n, v in anns]
            dur = int(e_t[i] - s_t[i])
            events.append((int(s_t[i]), 1, -dur, te))
            if dur > 0:
                events.append((int(e_t[i]), 0, -int(s_t[i]), {"type": TrackEvent.TYPE_SLICE_END, "track_uuid": int(uuid[i])}))
    events.sort(key=lambda x: (x[0], x[1], x[2]))
    for t, _, _, te in events:
        trace.packet.add(timestamp=t, trusted_packet_sequence_id=_PROFILE_SEQ, track_event=TrackEvent(**te))
    return names, trace.SerializeToString()

