"""Traces that stay openable: a selection of a capture, or a trace split into parts with an index.

The Perfetto UI holds a trace in its WebAssembly heap (a few GB at most) and fails near 1 GB of
Chrome JSON; 10 M events are already 0.7–0.9 GB of protobuf. So a capture too large for one
trace is written as parts (:func:`write_split`): runs of launches — the same launch indices
of every rank, since the ranks of a step run its launches together and its notify -> wait
pairs stay within them — each part under a size budget, and, where one run of launches is
still too large, groups of ranks of it. An index file names each part's file, ranks, launches,
time range and events. Every part counts time from the *whole* capture's first event, so a
report's finding ranges (which do too) hold in every part; :func:`part_for` finds the part of a
finding, which ``ktrace open INDEX --report R --finding N`` opens.

:func:`select` keeps part of a capture for one trace: some ranks, some launches, or the
launches that overlap a time window.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from ..captures.file import Capture, RankCapture
from ..clock.model import clock_model_of
from ..events import iter_batches, launch_refs, record_slots
from .formats import formats, split_names

log = logging.getLogger("ktrace")

INDEX_FORMAT = "ktrace-trace-index"


def parse_ints(text: str | None, upper: int | None = None) -> list[int] | None:
    """``"0-3,7"`` -> ``[0, 1, 2, 3, 7]`` (None for None). ValueError on anything else.

    Args:
        text: the list.
        upper: the largest value that can mean anything (a capture's last rank or launch): ranges
            are cut there, so ``0-10000000000`` costs what ``0-upper`` does. Without it, a range
            may hold at most a million values.
    """
    if text is None:
        return None
    out: list[int] = []
    if len(str(text)) > 10_000:
        raise ValueError(f"{str(text)[:40]!r}...: a list of {len(str(text))} characters is too long")
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"{text!r}: give numbers and ranges, like 0-3,7") from None
        if b < a or a < 0:
            raise ValueError(f"{text!r}: {part} is not a range of non-negative numbers")
        if upper is not None:
            b = min(b, upper)
        elif b - a >= 1 << 20:
            raise ValueError(f"{text!r}: {part} holds more than a million values")
        out.extend(range(a, b + 1))
    if not out:
        raise ValueError(f"{text!r} names nothing" + (f" up to {upper} (the largest there is)" if upper is not None else ""))
    return sorted(set(out))


def parse_window(text: str | None) -> tuple[int, int] | None:
    """``"START:END"`` in µs since the capture's first event -> ns. ValueError when malformed."""
    if text is None:
        return None
    try:
        a, b = (float(x) for x in str(text).split(":"))
    except ValueError:
        raise ValueError(f"--window wants START:END in µs since the capture's first event, got {text!r}") from None
    if not (math.isfinite(a) and math.isfinite(b)) or max(abs(a), abs(b)) > 1e12:
        raise ValueError(f"--window {text!r}: give finite times in µs (at most 1e12)")
    if not b > a:
        raise ValueError(f"--window {text!r}: the end must come after the start")
    return int(a * 1000), int(b * 1000)


def launch_times(capture, model=None) -> tuple[dict[tuple[int, int], tuple[int, int]], int]:
    """Each launch's first start and last end on the common clock, and the capture's first
    event (one read of the times of every event; nothing else is decoded)."""
    model = model or clock_model_of(capture)
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for refs, b in iter_batches(capture, model, ("start_ns", "end_ns")):
        for k, li in enumerate(b.launches):
            a, e = int(b.offsets[k]), int(b.offsets[k + 1])
            if e > a:
                out[(b.rank, refs[li][1].index)] = (int(b.cols["start_ns"][a:e].min()), int(b.cols["end_ns"][a:e].max()))
    base = min((t0 for t0, _ in out.values()), default=0)
    return out, base


def select(capture: Capture, *, ranks=None, launches=None, window: tuple[int, int] | None = None, base_ns: int | None = None) -> Capture:
    """The part of a capture a trace is written for.

    Args:
        capture: the capture.
        ranks: the ranks to keep (default all).
        launches: the launch indices to keep, on every kept rank (default all).
        window: keep only the launches that overlap ``(start, end)`` ns since the capture's
            first event (whole launches are kept).
        base_ns: the capture's first event on the common clock, if known (else read).

    Raises:
        ValueError: the selection keeps nothing (the message says what the capture has).
    """
    keep_r = sorted(capture.ranks) if ranks is None else [r for r in sorted(set(ranks)) if r in capture.ranks]
    if not keep_r:
        raise ValueError(f"no rank selected: the capture has ranks {sorted(capture.ranks)}")
    want_l = None if launches is None else set(int(x) for x in launches)
    times, base = (launch_times(capture) if window is not None else ({}, 0))
    if window is not None and base_ns is not None:
        base = int(base_ns)
    sel: dict[int, RankCapture] = {}
    for r in keep_r:
        rc = capture.ranks[r]
        lns = [ln for ln in rc.launches if want_l is None or ln.index in want_l]
        if window is not None:
            lo, hi = base + window[0], base + window[1]
            lns = [ln for ln in lns if (r, ln.index) in times and times[(r, ln.index)][1] >= lo and times[(r, ln.index)][0] <= hi]
        if lns:
            sel[r] = RankCapture(rank=r, device=rc.device, launches=lns, clock_samples=rc.clock_samples, notes=list(rc.notes),
                                 timeouts=rc.timeouts, mappings=list(rc.mappings))
    if not sel:
        n_l = sorted({ln.index for rc in capture.ranks.values() for ln in rc.launches})
        raise ValueError(f"the selection keeps no launch (the capture has ranks {sorted(capture.ranks)}, launches "
                         f"{n_l[0]}..{n_l[-1]} per rank)" if n_l else "the capture has no launch")
    model = clock_model_of(capture)
    what = {"ranks": sorted(sel), "launches": None if launches is None else sorted(want_l), "window_ns": list(window) if window else None}
    return Capture(world_size=capture.world_size, ranks=sel, regions=dict(capture.regions), clock=model.to_dict(), partial=capture.partial,
                   created_ns=capture.created_ns, meta={**capture.meta, "selection": what}, run_id=capture.run_id,
                   notes=list(capture.notes))


@dataclass
class Part:
    """One part of a split trace (see :func:`write_split`)."""

    file: str
    ranks: list[int]
    launches: list[int]
    start_ns: int = 0
    end_ns: int = 0
    events: int = 0
    flows: int = 0
    bytes: int = 0
    #: whether other parts hold the same launches on other ranks (notify -> wait arrows between
    #: the two are not drawn)
    rank_split: bool = False

    def holds(self, start_ns: int, end_ns: int, ranks=()) -> bool:
        return self.start_ns <= start_ns and end_ns <= self.end_ns and set(ranks) <= set(self.ranks)


def plan_parts(capture: Capture, budget_events: int) -> list[tuple[list[int], list[int]]]:
    """``(ranks, launch indices)`` of each part: runs of launch indices (every rank's launches of
    those indices) of at most ``budget_events`` event slots; a launch index whose launches hold
    more is split into groups of ranks."""
    slots: dict[int, dict[int, int]] = {}
    for r, ln in launch_refs(capture):
        slots.setdefault(ln.index, {})[r] = slots.setdefault(ln.index, {}).get(r, 0) + record_slots(ln)
    parts: list[tuple[list[int], list[int]]] = []
    cur: list[int] = []
    cur_n = 0
    for li in sorted(slots):
        n = sum(slots[li].values())
        if n > budget_events:  # this launch index alone is too large: ranks in groups
            if cur:
                parts.append((sorted(capture.ranks), cur))
                cur, cur_n = [], 0
            group: list[int] = []
            g_n = 0
            for r in sorted(slots[li]):
                if group and g_n + slots[li][r] > budget_events:
                    parts.append((group, [li]))
                    group, g_n = [], 0
                group.append(r)
                g_n += slots[li][r]
            parts.append((group, [li]))
            continue
        if cur and cur_n + n > budget_events:
            parts.append((sorted(capture.ranks), cur))
            cur, cur_n = [], 0
        cur.append(li)
        cur_n += n
    if cur:
        parts.append((sorted(capture.ranks), cur))
    return parts


def _part_name(path: Path, k: int, n: int) -> Path:
    name = path.name
    for suffix in sorted((e for f in formats().values() if f.split for e in f.extensions), key=len, reverse=True):
        if name.endswith(suffix):
            return path.with_name(f"{name[: -len(suffix)]}.part{k + 1:0{max(3, len(str(n)))}d}{suffix}")
    return path.with_name(f"{name}.part{k + 1:03d}")


def index_path(path: str | os.PathLike) -> Path:
    """Where the index of a split trace written to ``path`` goes: ``<name>.index.json``, the whole
    name kept (``out.pftrace.index.json``, ``out.json.index.json``), so that split traces of one
    stem in two formats never share an index."""
    p = Path(path)
    return p.with_name(p.name + ".index.json")


def write_split(capture: Capture, path: str | os.PathLike, fmt: str, *, part_bytes: int | None = None, workers: int | None = None) -> Path:
    """Write ``capture`` as parts of at most about ``part_bytes`` each, and their index.

    Args:
        capture: the capture.
        path: the trace's name: parts are ``<stem>.part001<suffix>``, ..., the index
            ``<name>.index.json`` (``out.pftrace.index.json``).
        fmt: a format that splits (``ktrace.export.formats``: ``perfetto``, ``chrome``).
        part_bytes: the budget of one part (default: the format's ``part_bytes``; its events are at
            most this over the format's ``bytes_per_event``: ``ktrace.export.formats``).
        workers: worker processes per part.

    Returns:
        The index's path.
    """
    from .plan import plan_trace

    from ..fileio import OutputError, atomic_folder, write_bytes

    form = formats().get(fmt)
    if form is None or form.split is None:
        raise ValueError(f"a trace is split into {' or '.join(split_names())} parts, not {fmt!r}")
    part_bytes = int(part_bytes or form.part_bytes)
    budget = max(1, part_bytes // form.bytes_per_event)
    path = Path(path)
    model = clock_model_of(capture)
    _, base = launch_times(capture, model)
    groups = plan_parts(capture, budget)
    write = form.write
    parts: list[Part] = []
    # every part is written into a temporary folder next to the output and moved out only once all
    # are complete, the index last: an interrupted split leaves nothing, and an index never names
    # a part that is not whole
    with atomic_folder(path) as tmp_dir:
        for k, (ranks, launches) in enumerate(groups):
            sub = select(capture, ranks=ranks, launches=launches)
            plan = plan_trace(sub, model, workers=workers, base_ns=base)
            f = _part_name(path, k, len(groups))
            write(sub, tmp_dir / f.name, plan=plan, workers=workers)
            starts = [lp.start_ns for lp in plan.launches if lp.n_events]
            ends = [lp.end_ns for lp in plan.launches if lp.n_events]
            parts.append(Part(file=f.name, ranks=sorted(sub.ranks), launches=sorted(launches),
                              start_ns=(min(starts) - base) if starts else 0, end_ns=(max(ends) - base) if ends else 0,
                              events=plan.n_events, flows=plan.n_flows, bytes=(tmp_dir / f.name).stat().st_size,
                              rank_split=sorted(ranks) != sorted(capture.ranks)))
            log.info("wrote part %d of %d: %s (%d events, %.1f MB)", k + 1, len(groups), f, plan.n_events, parts[-1].bytes / 1e6)
        for p in parts:
            try:
                os.replace(tmp_dir / p.file, path.parent / p.file)
            except OSError as e:
                raise OutputError(e.errno, f"cannot write {path.parent / p.file}: {e.strerror or e}") from None
    idx = index_path(path)
    doc = {"format": INDEX_FORMAT, "version": 1, "trace_format": fmt, "time_base": "ns since the capture's first event",
           "base_ns": base, "world_size": capture.world_size, "run_id": capture.run_id, "part_bytes": part_bytes,
           "parts": [p.__dict__ for p in parts]}
    write_bytes(idx, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return idx


def estimate_bytes(capture: Capture, fmt: str) -> int:
    """About how large ``capture``'s trace in ``fmt`` would be: its events counted by kind (from
    every buffer's tags, about a twentieth of a decode), times what each kind costs in ``fmt`` (its
    writer's ``bytes_by_kind``: ``ktrace.export.formats``); 0 for a format that declares none."""
    from ..captures.file import read_buffers
    from ..decode import DecodeError, count_kinds, count_kinds_of
    from ..events import make_batches

    form = formats().get(fmt)
    if form is None or form.bytes_by_kind is None:
        return 0
    per_kind, per_launch = form.bytes_by_kind
    refs = launch_refs(capture)
    kinds = np.zeros(16, np.int64)
    for batch in make_batches(refs):
        bufs = read_buffers([refs[li][1] for li in batch], verify=False)
        try:  # (the batch's record slots counted together)
            kinds += count_kinds_of(bufs)
            continue
        except (DecodeError, ValueError):
            pass
        for li, buf in zip(batch, bufs):
            try:
                c = count_kinds(buf)
            except DecodeError:  # (writing it says what is wrong)
                c = np.zeros(16, np.int64)
                c[1] = record_slots(refs[li][1])
            kinds += c
    return int(sum(int(n) * b for n, b in zip(kinds[1:6], per_kind)) + per_launch * len(refs))


#: Largest trace index read (an index of ~100,000 parts).
MAX_INDEX_BYTES = 64 << 20


def read_index(path: str | os.PathLike) -> tuple[dict, list[Part]]:
    """A split trace's index and its parts (files relative to the index's folder resolved).

    Every part is checked before it is used: a file name inside the index's folder (no folder,
    no ``..``, not absolute, a regular file there, not a link out of it), ranks and launches as
    lists of integers, times as integers. Raises ValueError, one line naming the index.
    """
    from ..fileio import InputError, regular_input

    p = Path(path)
    try:
        regular_input(p, "trace index")
        if p.stat().st_size > MAX_INDEX_BYTES:
            raise ValueError(f"{p}: {p.stat().st_size} bytes, more than a trace index holds ({MAX_INDEX_BYTES})")
        doc = orjson.loads(p.read_bytes())
    except InputError as e:
        raise ValueError(str(e)) from None
    except (OSError, orjson.JSONDecodeError) as e:
        raise ValueError(f"{p}: not a readable trace index ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != INDEX_FORMAT:
        raise ValueError(f"{p}: not a ktrace trace index (ktrace merge ... --split writes one)")
    folder = p.parent.resolve()
    items = doc.get("parts") or []
    if not isinstance(items, list) or len(items) > 1 << 20:
        raise ValueError(f"{p}: its parts are not a list")
    parts = []
    for i, x in enumerate(items):
        try:
            parts.append(_checked_part(x, folder))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{p}: part {i + 1}: {e}") from None
    return doc, parts


def _ints(v, what: str, lo: int = 0, hi: int = (1 << 63) - 1, *, nonempty: bool = False) -> list[int]:
    if not isinstance(v, list) or (nonempty and not v) or len(v) > 1 << 24 or not all(
            isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi for x in v):
        raise ValueError(f"{what} is not a list of integers in {lo}..{hi}")
    return v


def _checked_part(x, folder: Path) -> Part:
    """One part entry of an index, checked (see :func:`read_index`); its file as a path in ``folder``."""
    from ..text import printable

    if not isinstance(x, dict):
        raise ValueError("not an object")
    name = x.get("file")
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"file {printable(str(name))[:80]} is not a file name in the index's folder: refused")
    f = folder / name
    real = Path(os.path.realpath(f))
    if real.parent != folder or not real.is_file():
        raise ValueError(f"file {printable(name)[:80]} is not a regular file in the index's folder: refused")
    ints = {k: x.get(k, 0) for k in ("start_ns", "end_ns", "events", "flows", "bytes")}
    for k, v in ints.items():
        if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 63) <= v < 1 << 63:
            raise ValueError(f"{k} is not an integer")
    return Part(file=str(f), ranks=_ints(x.get("ranks"), "ranks", 0, (1 << 31) - 1, nonempty=True),
                launches=_ints(x.get("launches"), "launches", 0, (1 << 31) - 1, nonempty=True), rank_split=bool(x.get("rank_split")),
                **ints)


def part_for(parts: list[Part], start_ns: int, end_ns: int, ranks=()) -> Part:
    """The part that holds a time range (and ranks); else the part that overlaps it most.

    Raises:
        ValueError: no part overlaps the range.
    """
    for part in parts:
        if part.holds(start_ns, end_ns, ranks):
            return part

    def overlap(part: Part) -> int:
        return max(0, min(end_ns, part.end_ns) - max(start_ns, part.start_ns)) + (1 if set(ranks) & set(part.ranks) else 0)

    best = max(parts, key=overlap, default=None)
    if best is None or overlap(best) == 0:
        raise ValueError(f"no part of the trace holds {start_ns}..{end_ns} ns")
    return best


__all__ = ["Part", "estimate_bytes", "index_path", "parse_ints", "parse_window", "part_for", "plan_parts",
           "read_index", "select", "write_split"]
