"""Host clocks: what disciplines them (read, never required), and a simulated skew for tests.

Between nodes, ktrace chains each GPU to its host's wall clock and each host to the reference
host (``ktrace.clock.calibrate``). The host timestamps are ``time.time_ns()``
(``CLOCK_REALTIME``), the clock that PTP (``ptp4l`` + ``phc2sys``) and NTP daemons (``chronyd``,
``ntpd``, ``systemd-timesyncd``) discipline: on disciplined hosts the offset and drift between
hosts are small to begin with, and the measured exchange tells how small. The bound a capture
states always comes from that measurement; what :func:`host_clock_state` reads (PTP devices,
time daemons running, the kernel's own synchronisation flags and error estimates, chrony's
tracking report when ``chronyc`` answers) is recorded beside it so that a reader can judge the
hosts. Nothing here needs privileges, and anything unreadable is left out.

:class:`HostClockSkew` is the simulation hook: it adds a known offset and drift to one rank's
host timestamps during calibration, as if that rank's node had its own, wrong, host clock.

Standard library only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

log = logging.getLogger("ktrace")

#: Time daemons looked for among the running processes (by their command name).
TIME_DAEMONS = ("ptp4l", "phc2sys", "ts2phc", "chronyd", "ntpd", "systemd-timesyncd", "timemaster")
#: Environment variable of the simulation hook: ``rank=R,offset_ns=N,drift_ppm=P[,origin_ns=T]``.
SKEW_ENV = "KTRACE_CLOCK_SKEW"

_STA_UNSYNC = 0x0040
_STA_NANO = 0x2000


@dataclass(frozen=True)
class HostClockSkew:
    """A simulated host clock for one rank: ``t + offset_ns + drift_ppm * 1e-6 * (t - origin_ns)``.

    Used to prove the host chain on one machine: every host timestamp that rank's calibration
    takes (host anchors, the GPU<->host exchange, the host exchange) goes through :meth:`apply`,
    so its "node" has a host clock off by a known amount. Captures record the skew, and the clock
    model's notes say that the run was a simulation.

    Args:
        rank: the global rank whose host timestamps are skewed.
        offset_ns: the skew at ``origin_ns``.
        drift_ppm: how fast the skewed clock runs against the true one (parts per million).
        origin_ns: the instant (true host ns) at which the skew is ``offset_ns``; give every
            rank the same value (e.g. rank 0's ``time.time_ns()``, shared).
    """

    rank: int
    offset_ns: int
    drift_ppm: float = 0.0
    origin_ns: int = field(default_factory=time.time_ns)

    def __post_init__(self):
        if self.rank < 0:
            raise ValueError(f"HostClockSkew: rank must be >= 0, got {self.rank}")
        if not abs(self.drift_ppm) < 1e5:
            raise ValueError(f"HostClockSkew: drift_ppm must be finite and below 1e5, got {self.drift_ppm}")

    def skew_at(self, true_ns: int) -> float:
        """How far the skewed clock reads ahead of the true one at ``true_ns`` (ns)."""
        return self.offset_ns + self.drift_ppm * 1e-6 * (int(true_ns) - self.origin_ns)

    def apply(self, true_ns: int) -> int:
        """The skewed clock's reading at true host time ``true_ns``."""
        return int(true_ns) + int(round(self.skew_at(true_ns)))

    def to_dict(self) -> dict:
        return {"rank": self.rank, "offset_ns": self.offset_ns, "drift_ppm": self.drift_ppm, "origin_ns": self.origin_ns}

    @classmethod
    def parse(cls, text: str) -> "HostClockSkew":
        """From ``"rank=1,offset_ns=3000000,drift_ppm=50[,origin_ns=T]"`` (``$KTRACE_CLOCK_SKEW``).

        Raises:
            ValueError: a malformed text (the message quotes it).
        """
        kw: dict = {}
        try:
            for part in text.split(","):
                key, _, val = part.strip().partition("=")
                key = key.strip()
                if key in ("rank", "offset_ns", "origin_ns"):
                    kw[key] = int(float(val))
                elif key == "drift_ppm":
                    kw[key] = float(val)
                else:
                    raise ValueError(f"unknown field {key!r}")
            return cls(**kw)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{SKEW_ENV}={text!r}: expected rank=R,offset_ns=N,drift_ppm=P[,origin_ns=T] ({e})") from None


def skew_from_env(environ: Mapping[str, str] | None = None) -> HostClockSkew | None:
    """The :class:`HostClockSkew` of ``$KTRACE_CLOCK_SKEW``, or None when it is unset."""
    env = os.environ if environ is None else environ
    text = env.get(SKEW_ENV, "").strip()
    return HostClockSkew.parse(text) if text else None


def host_clock(skew: HostClockSkew | None = None, rank: int | None = None) -> Callable[[], int]:
    """The host clock this rank's calibration reads: ``time.time_ns``, or its skewed version when
    ``skew`` names ``rank``."""
    if skew is None or rank is None or int(rank) != skew.rank:
        return time.time_ns
    return lambda: skew.apply(time.time_ns())


# ---------------------------------------------------------------------------------------------
# what disciplines this host's clock
# ---------------------------------------------------------------------------------------------


class _Timex(ctypes.Structure):
    # struct timex of Linux (LP64): natural alignment gives the kernel's padding; the tail is
    # reserved space the kernel may write.
    _fields_ = [
        ("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long), ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long), ("status", ctypes.c_int), ("constant", ctypes.c_long),
        ("precision", ctypes.c_long), ("tolerance", ctypes.c_long), ("time_sec", ctypes.c_long),
        ("time_usec", ctypes.c_long), ("tick", ctypes.c_long), ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int), ("stabil", ctypes.c_long), ("jitcnt", ctypes.c_long), ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long), ("tai", ctypes.c_int), ("_reserved", ctypes.c_int * 16),
    ]


def _kernel_discipline() -> dict | None:
    """``adjtimex`` read-only (modes 0, allowed to any user): whether the kernel considers the clock
    synchronised, and the maximum and estimated errors the time daemon last gave it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        tx = _Timex()
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    return {
        "synchronised": not (tx.status & _STA_UNSYNC),
        "state": int(state),  # TIME_OK 0 ... TIME_ERROR 5
        "maxerror_ns": int(tx.maxerror) * 1000,
        "esterror_ns": int(tx.esterror) * 1000,
        "freq_ppm": tx.freq / 65536.0,  # scaled ppm (16-bit fraction)
    }


def _ptp_devices() -> list[dict]:
    out = []
    for dev in sorted(glob.glob("/dev/ptp*")):
        name = os.path.basename(dev)
        entry = {"device": dev}
        try:
            with open(f"/sys/class/ptp/{name}/clock_name") as f:
                entry["clock_name"] = f.read().strip()
        except OSError:
            pass
        out.append(entry)
    return out


def _daemons() -> list[str]:
    found = set()
    for comm in glob.glob("/proc/[0-9]*/comm"):
        try:
            with open(comm) as f:
                name = f.read().strip()
        except OSError:
            continue
        if name in TIME_DAEMONS:
            found.add(name)
    return sorted(found)


def _chrony_tracking(timeout_s: float) -> dict | None:
    """``chronyc -c -n tracking`` when chronyc is installed and chronyd answers within the bound."""
    exe = shutil.which("chronyc")
    if exe is None:
        return None
    try:
        res = subprocess.run([exe, "-c", "-n", "tracking"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    f = res.stdout.strip().split(",")
    if res.returncode != 0 or len(f) < 14:
        return None
    try:
        return {
            "reference": f[1], "stratum": int(f[2]), "system_offset_ns": float(f[4]) * 1e9,
            "rms_offset_ns": float(f[6]) * 1e9, "freq_ppm": float(f[7]), "skew_ppm": float(f[9]),
            "root_delay_ns": float(f[10]) * 1e9, "root_dispersion_ns": float(f[11]) * 1e9, "leap": f[13],
        }
    except ValueError:
        return None


_STATE: dict | None = None


def host_clock_state(*, refresh: bool = False, chrony_timeout_s: float = 1.0) -> dict:
    """What disciplines this host's wall clock, as far as an unprivileged process can read it.

    Read once per process (``refresh`` reads again). Never raises.

    Returns:
        ``{"clock": "CLOCK_REALTIME", "sync": ..., "daemons": [...], "ptp_devices": [...],
        "kernel": {...} | None, "chrony": {...} | None}``: ``sync`` is ``"ptp"`` when ``ptp4l`` or
        ``phc2sys`` runs (or chrony follows a PTP hardware clock), else the NTP daemon's name, else
        ``"none seen"``.
    """
    global _STATE
    if _STATE is not None and not refresh:
        return dict(_STATE)
    try:
        daemons = _daemons()
        chrony = _chrony_tracking(chrony_timeout_s) if "chronyd" in daemons else None
        ptp = _ptp_devices()
        if {"ptp4l", "phc2sys", "ts2phc"} & set(daemons) or (chrony and chrony["reference"].upper().startswith("PHC")):
            sync = "ptp"
        else:
            sync = next((d for d in ("chronyd", "ntpd", "systemd-timesyncd") if d in daemons), "none seen")
        state = {"clock": "CLOCK_REALTIME", "sync": sync, "daemons": daemons, "ptp_devices": ptp,
                 "kernel": _kernel_discipline(), "chrony": chrony}
    except Exception as e:  # (never in the way of a capture)
        log.debug("ktrace: host clock state unreadable: %s", e)
        state = {"clock": "CLOCK_REALTIME", "sync": "unknown", "error": str(e)}
    _STATE = state
    return dict(state)


def describe_host_clock(state: Mapping | None) -> str:
    """One phrase for a recorded :func:`host_clock_state`: "ptp (ptp4l, phc2sys), synchronised,
    kernel estimated error 1 µs"."""
    if not state:
        return "not recorded"
    words = [str(state.get("sync", "unknown"))]
    if state.get("daemons"):
        words[0] += f" ({', '.join(state['daemons'])})"
    k = state.get("kernel") or {}
    if k:
        words.append("synchronised" if k.get("synchronised") else "NOT synchronised")
        if k.get("synchronised") and k.get("esterror_ns") is not None:
            words.append(f"kernel estimated error {k['esterror_ns'] / 1000:.0f} µs")
    c = state.get("chrony") or {}
    if c:
        words.append(f"chrony root dispersion {c.get('root_dispersion_ns', float('nan')) / 1000:.1f} µs")
    return ", ".join(words)
