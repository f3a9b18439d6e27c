"""Which completed waits no captured notify released, and why: the wait accounting a report's
summary states (and claims).

A completed wait the pairing (``ktrace.pairing``) matched to no notify is one of:

- released by a notify on its flag that was captured, but not matched to one of several (a
  counter fed by several notifies): *unmatched*;
- on an mbarrier none of whose releases its program recorded: the probe density left that side
  out (a kernel's default density), not a release gone missing: *release untraced*;
- on a flag whose sender's launch recorded no flag notify at all (the sender ran: its launch is
  in the capture): a density that records only the waits: *notify untraced*;
- else, released by nothing the capture holds: *unreleased*.

An mbarrier's free pass (phase -1, released by the barrier's initialisation) is none of these.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import stalls
from .. import pairing
from ..keys import group_index
from ..schema import is_local
from .document import Claim
from .findings import MAX_CLAIM_SEGMENTS, event_key
from .trace import Trace


@dataclass
class WaitAccounting:
    """The completed waits no notify was matched to, by why (positions in the waits table).

    Attributes:
        unreleased: released by nothing the capture holds.
        release_untraced: mbarrier waits whose program recorded none of the barrier's releases.
        notify_untraced: flag waits whose sender's launch recorded no flag notify.
        unmatched: waits on a flag whose notifies were captured, not matched to one of them.
        untraced_ns: the time of the waits of ``release_untraced`` and ``notify_untraced``
            (the probe density's, not unexplained).
        notify_untraced_kernels: the kernels of the senders of ``notify_untraced``.
    """

    unreleased: np.ndarray
    release_untraced: np.ndarray
    notify_untraced: np.ndarray
    unmatched: np.ndarray
    untraced_ns: float
    notify_untraced_kernels: list

    def claims(self, trace: Trace, w) -> list[Claim]:
        """What a summary says of these waits, as claims (the events of each, up to
        ``MAX_CLAIM_SEGMENTS`` waits)."""

        def events(pos):
            return event_key(trace, w["row"][pos]) if pos.size <= MAX_CLAIM_SEGMENTS else None

        out = [Claim("without_notify", [], {"waits": int(self.unreleased.size), "events": events(self.unreleased)})]
        for kind, pos in (("release_untraced", self.release_untraced), ("notify_untraced", self.notify_untraced),
                          ("notify_on_flag", self.unmatched)):
            if pos.size:
                out.append(Claim(kind, [], {"waits": int(pos.size), "events": events(pos)}))
        return out


def account_waits(trace: Trace, w) -> WaitAccounting:
    """The completed waits of the waits table ``w`` (``stalls.waits``) that no notify was matched
    to, by why (see the module's docstring)."""
    paired = w["notify_row"] >= 0
    local = is_local(trace.column("flags")[w["row"]])
    free = pairing.free_pass(local, w["expected"])
    unreleased = np.flatnonzero(~paired & ~w["timed_out"] & ~free)
    on_flag = stalls.latest_flag_notify(trace, unreleased) >= 0
    none, unmatched = unreleased[~on_flag], unreleased[on_flag]
    untraced = local[none]  # (only mbarrier waits are asked: most captures have none unreleased)
    untraced[untraced] = ~_barrier_released(trace, w, none[untraced])
    flag_untraced = ~local[none]
    flag_untraced[flag_untraced] = ~_sender_recorded(trace, w, none[flag_untraced])
    untraced_flags = none[flag_untraced]
    none, untraced = none[~untraced & ~flag_untraced], none[untraced]
    off = float(w["wait_ns"][np.r_[untraced, untraced_flags]].sum()) if untraced.size or untraced_flags.size else 0.0
    kernels = sorted({trace.kernels.get((int(r), int(ln)), "?") for r, ln in
                      zip(w["peer"][untraced_flags].tolist(), w["launch"][untraced_flags].tolist())})
    return WaitAccounting(none, untraced, untraced_flags, unmatched, off, kernels)


def _barrier_released(trace: Trace, w, pos: np.ndarray) -> np.ndarray:
    """Per mbarrier wait (positions in ``w``), whether its program recorded any mbarrier release
    (a LOCAL notify) on its barrier in its launch."""
    from ..schema import EventKind, arg_column

    if pos.size == 0:
        return np.zeros(0, bool)
    Nk = EventKind.NOTIFY
    loc = is_local(trace.at(Nk, "flags"))
    if not loc.any():
        return np.zeros(pos.size, bool)
    cols = ("rank", "launch", "program")
    nk = [trace.at(Nk, c)[loc].astype(np.int64) for c in cols] + [trace.at(Nk, arg_column(Nk, "flag"))[loc].astype(np.int64)]
    wk = [np.asarray(w[c])[pos].astype(np.int64) for c in cols] + [np.asarray(w["flag"])[pos].astype(np.int64)]
    inv, _ = group_index(*(np.concatenate([a, b]) for a, b in zip(nk, wk)))
    return np.isin(inv[nk[0].size:], inv[: nk[0].size])


def _sender_recorded(trace: Trace, w, pos: np.ndarray) -> np.ndarray:
    """Per flag wait (positions in ``w``), whether its peer's launch of the same index recorded any
    flag notify, or is not in the capture (then nothing is known of what it recorded)."""
    from ..schema import EventKind

    if pos.size == 0:
        return np.zeros(0, bool)
    Nk = EventKind.NOTIFY
    flag = ~is_local(trace.at(Nk, "flags"))
    peer = np.asarray(w["peer"])[pos].astype(np.int64)
    launch = np.asarray(w["launch"])[pos].astype(np.int64)
    nk = [trace.at(Nk, "rank")[flag].astype(np.int64), trace.at(Nk, "launch")[flag].astype(np.int64)]
    kt = stalls.kernel_time(trace)  # (every (rank, launch) with an event)
    inv, _ = group_index(*(np.concatenate(x) for x in zip(nk, [kt["rank"].astype(np.int64), kt["launch"].astype(np.int64)],
                                                               [peer, launch])))
    a, b = nk[0].size, nk[0].size + kt.size
    return np.isin(inv[b:], inv[:a]) | ~np.isin(inv[b:], inv[a:b])
