"""Gather every rank's capture to one rank through ``torch.distributed`` (torch imported lazily),
and find out first, within a bound, which ranks are there to take part.

A collective with a rank that died (or raised and left) never completes: NCCL waits for the
process group's timeout, typically ten minutes, and may then abort the process. So before any
collective at the edges of a capture, the ranks meet at a rendezvous point in the process
group's store (:func:`arrive`): each says it is there, and all of them agree, through one
compare-and-set, on who came within the bound (``Arrival``). Only a complete arrival goes on to
collectives; otherwise the ranks go on without them, with what they have.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass

from .file import Capture, CaptureError, capture_from_bytes, capture_to_bytes, merge_captures
from .identity import store_prefix

log = logging.getLogger("ktrace")

#: How long a rank waits at a rendezvous point for the others (seconds), unless told otherwise.
PEER_TIMEOUT_S = 120.0

_seq: dict[tuple[str, str], int] = {}
_registered: set[tuple[str, int]] = set()


@dataclass(frozen=True)
class Arrival:
    """Who came to one rendezvous point, as every rank that got a verdict sees it.

    Attributes:
        world_size: ranks of the group.
        absent: ranks that did not arrive within the bound (dead, or late).
        dead: those of ``absent`` whose process was seen gone (same host only).
        leaving: ranks that arrived saying they leave (their own code raised).
        error: why the store could not be used (nothing is known then), else empty.
        timeout_s: the bound that applied.
        key: where in the store later steps of this meeting keep their keys.
    """

    world_size: int
    absent: tuple[int, ...] = ()
    dead: tuple[int, ...] = ()
    leaving: tuple[int, ...] = ()
    error: str = ""
    timeout_s: float = 0.0
    key: str = ""

    @property
    def complete(self) -> bool:
        """Every rank is here and stays: collectives over the group can go ahead."""
        return not (self.absent or self.leaving or self.error)

    def describe(self) -> str:
        """Who is missing and why, in words (empty when complete)."""
        if self.error:
            return f"the ranks could not meet ({self.error})"
        parts = []
        for r in self.absent:
            why = "its process is gone" if r in self.dead else f"dead, or late by more than {self.timeout_s:g} s"
            parts.append(f"rank {r} did not arrive ({why})")
        parts += [f"rank {r} left with an error" for r in self.leaving]
        return "; ".join(parts)


def _group_name(group) -> str:
    import torch.distributed as dist

    g = group if group is not None else dist.group.WORLD
    return str(getattr(g, "group_name", None) or "world")


def _store():
    from .identity import default_store

    store = default_store()
    if store is None:
        raise RuntimeError("torch.distributed has no rendezvous store")
    return store


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def register_process(group=None) -> None:
    """Put this rank's host and process id in the store, once, so that the others can tell at a
    rendezvous point that its process is gone instead of waiting their whole bound. Does nothing
    without ``torch.distributed``; never raises."""
    dist = sys.modules.get("torch.distributed")  # (not imported: no process group to tell)
    try:
        if dist is None or not (dist.is_available() and dist.is_initialized()):
            return
        gname, store = _group_name(group), _store()
        if (gname, id(store)) in _registered:
            return
        store.set(f"{store_prefix()}pid/{gname}/{dist.get_rank(group)}", f"{socket.gethostname()}\t{os.getpid()}")
        _registered.add((gname, id(store)))
    except Exception as e:  # (best effort: without it, a dead rank costs the whole bound)
        log.debug("ktrace: could not register this process in the store: %s", e)


def _dead(store, gname: str, ranks: list[int]) -> list[int]:
    host = socket.gethostname()
    out = []
    for r in ranks:
        key = f"{store_prefix()}pid/{gname}/{r}"
        if not store.check([key]):
            continue
        h, _, pid = store.get(key).decode().partition("\t")
        if h == host and pid.isdigit() and not _alive(int(pid)):
            out.append(r)
    return out


def arrive(tag: str, *, group=None, timeout_s: float = PEER_TIMEOUT_S, leaving: bool = False) -> Arrival:
    """Meet the other ranks of ``group`` at rendezvous point ``tag`` (every rank calls it, in the
    same order, like a collective, but it never waits past ``timeout_s``).

    Each rank puts a key in the process group's store and waits until every rank's key is
    there, a rank says it leaves, every missing rank's process is seen gone, or ``timeout_s``
    has passed; the first rank to decide writes the verdict with a compare-and-set, and every
    rank returns that one verdict. A rank that arrives after the verdict gets it too (and finds
    itself absent in it). Without ``torch.distributed`` (one process) the arrival is complete.

    Args:
        tag: names the meeting point (calls with one tag are numbered, so each call is a new one).
        group: the process group (default: the world).
        timeout_s: how long to wait for the others.
        leaving: this rank only says it is here and leaving (its code raised): it does not wait.

    Returns:
        :class:`Arrival`; never raises (a store that cannot be used gives ``error``).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return Arrival(world_size=1)
    me, world = dist.get_rank(group), dist.get_world_size(group)
    if world == 1:
        return Arrival(world_size=1)
    try:
        store = _store()
        gname = _group_name(group)
        n = _seq[(gname, tag)] = _seq.get((gname, tag), 0) + 1
        base = f"{store_prefix()}arrive/{gname}/{tag}/{n}"
        register_process(group)
        store.set(f"{base}/{me}", "leaving" if leaving else "here")
        if leaving:
            return Arrival(world_size=world, leaving=(me,), timeout_s=timeout_s, key=base)
        verdict = f"{base}/verdict"
        deadline = time.monotonic() + timeout_s
        seen: dict[int, bytes] = {}
        delay = 0.001
        while True:
            if store.check([verdict]):
                return _verdict(store.get(verdict), world, timeout_s, base)
            for r in range(world):
                if r not in seen and store.check([f"{base}/{r}"]):
                    seen[r] = store.get(f"{base}/{r}")
            missing = [r for r in range(world) if r not in seen]
            going = [r for r, v in seen.items() if v == b"leaving"]
            dead = _dead(store, gname, missing) if missing else []
            timed_out = time.monotonic() > deadline
            if not missing or going or len(dead) == len(missing) or timed_out:
                # (a rank leaving decides it at once: those not here yet are not late, and get
                # this verdict when they come)
                absent = missing if timed_out or not going else dead
                proposal = json.dumps({"absent": absent, "dead": dead, "leaving": sorted(going)})
                return _verdict(store.compare_set(verdict, "", proposal), world, timeout_s, base)
            time.sleep(delay)
            delay = min(2 * delay, 0.05)
    except Exception as e:  # the store is gone (its host rank died) or refuses: nothing is known
        return Arrival(world_size=world, error=" ".join(f"{type(e).__name__}: {e}".split()), timeout_s=timeout_s)


def _verdict(raw, world: int, timeout_s: float, base: str) -> Arrival:
    v = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    return Arrival(world_size=world, absent=tuple(v["absent"]), dead=tuple(v["dead"]), leaving=tuple(v["leaving"]),
                   timeout_s=timeout_s, key=base)


def gather(capture: Capture, *, dst: int = 0, group=None, timeout_s: float = PEER_TIMEOUT_S) -> Capture | None:
    """Collect per-rank captures on rank ``dst`` (every rank of ``group`` calls it).

    The ranks first meet (:func:`arrive`, bounded by ``timeout_s``). When all are there, each
    sends the bytes of its capture file (``gather_object``) and ``dst`` merges them
    (:func:`ktrace.captures.merge_captures`: the clock model is fitted by the caller,
    ``ktrace.clock.attach_clock``). When a rank is missing (dead, or late past the bound), no
    collective is attempted: the ranks that came hand their bytes to ``dst`` through the
    process group's store, and ``dst`` merges what it got into a capture marked partial whose
    notes name the missing ranks and why. A rank whose bytes do not read back is left out with
    a warning, the result marked partial too.

    Args:
        capture: this rank's capture (e.g. ``session.to_capture()``).
        dst: the rank that receives the merged capture.
        group: the process group (default: the world).
        timeout_s: how long to wait for the other ranks to arrive.

    Returns:
        The merged capture on ``dst``; None on the other ranks, and on every rank when ``dst``
        itself is missing (each rank's own capture is then all there is: save it).

    Raises:
        RuntimeError: ``torch.distributed`` is not initialised.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("ktrace.captures.gather.gather needs torch.distributed to be initialised")
    me = dist.get_rank(group)
    world = dist.get_world_size(group)
    payload = capture_to_bytes(capture)
    arrival = arrive("gather", group=group, timeout_s=timeout_s)
    if not arrival.complete:
        return _gather_partial(capture, payload, arrival, me, dst, world, timeout_s)
    received = [None] * world if me == dst else None
    dist.gather_object(payload, received, dst=dst, group=group)
    if me != dst:
        return None
    return _merge_received(capture, list(enumerate(received)), me, world)


def _merge_received(capture: Capture, received: list[tuple[int, bytes]], me: int, world: int, notes: list[str] = ()) -> Capture:
    caps = []
    for r, data in received:
        try:
            caps.append(capture_from_bytes(data, name=f"rank {r}'s capture"))
        except CaptureError as e:
            log.warning("[rank %d] ktrace gather: %s; left out", me, e)
    merged = merge_captures(caps, world_size=max(world, capture.world_size))
    merged.notes += [n for n in notes if n not in merged.notes]
    return merged


def _gather_partial(capture: Capture, payload: bytes, arrival: Arrival, me: int, dst: int, world: int,
                    timeout_s: float) -> Capture | None:
    """Gather without collectives, after a rank failed to arrive (see :func:`gather`)."""
    why = arrival.describe()
    if arrival.error:
        log.error("[rank %d] ktrace gather: %s; %s", me, why,
                  "the merged capture holds this rank only" if me == dst else "this rank's capture is not gathered")
        return _merge_received(capture, [(me, payload)], me, world, [f"gathering on rank {dst}: {why}"]) if me == dst else None
    if me in arrival.absent:
        log.error("[rank %d] ktrace gather: this rank arrived after the others stopped waiting for it: its capture is "
                  "not in the merged one (save it on its own: cap.save(path))", me)
        return None
    if dst in arrival.absent:
        log.error("[rank %d] ktrace gather: rank %d, which merges, is missing (%s): no merged capture; save each "
                  "rank's own capture instead (cap.save(path))", me, dst, why)
        return None
    store = _store()
    if me != dst:
        store.set(f"{arrival.key}/bytes/{me}", payload)
        log.warning("[rank %d] ktrace gather: %s; this rank's capture goes to rank %d through the store", me, why, dst)
        return None
    log.error("[rank %d] ktrace gather: %s; merging the ranks that came: the capture is partial", me, why)
    wanted = [r for r in range(world) if r not in arrival.absent + arrival.leaving and r != me]
    received, deadline = [(me, payload)], time.monotonic() + timeout_s
    while wanted and time.monotonic() < deadline:
        for r in [r for r in wanted if store.check([f"{arrival.key}/bytes/{r}"])]:
            received.append((r, store.get(f"{arrival.key}/bytes/{r}")))
            store.delete_key(f"{arrival.key}/bytes/{r}")
            wanted.remove(r)
        time.sleep(0.01)
    notes = [f"gathering on rank {dst}: {why}"]
    if wanted:
        notes.append(f"gathering on rank {dst}: rank(s) {wanted} arrived but their captures did not come within {timeout_s:g} s")
        log.error("[rank %d] ktrace gather: %s", me, notes[-1])
    return _merge_received(capture, sorted(received), me, world, notes)
