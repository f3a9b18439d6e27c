"""Device facts: what a capture records about a GPU, and the rate of its timer.

What a rank's capture says about its device (:func:`device_info`) and how fast its timer
ticks (:func:`resolve_tick_hz`, :func:`arch_tick_hz`) are decided here and nowhere else: the
session records them, the symmetric heap converts wait bounds with them, the clock model reads
them back from saved captures. Importing this module pulls in neither torch nor triton
(:func:`device_info` imports torch when called).
"""

from __future__ import annotations

import functools
import logging
from typing import Mapping

from . import schema
from .schema import TimerKind

log = logging.getLogger("ktrace")

#: hipDeviceGetAttribute's attribute for the wall-clock (``s_memrealtime``) rate, in kHz.
_HIP_ATTR_WALLCLOCK_RATE = 10_016


def arch_tick_hz(arch: str, *, warn: bool = True) -> int:
    """The ``s_memrealtime`` rate of an AMD architecture (``gfx942`` -> 100 MHz, ``gfx90a`` ->
    25 MHz); the timer kind's default, with a warning, for an architecture not known here."""
    arch = str(arch).split(":")[0]
    hz = schema.AMD_WALLCLOCK_HZ.get(arch)
    if hz is None:
        hz = schema.DEFAULT_TICK_HZ[TimerKind.AMD_MEMREALTIME]
        if warn:
            log.warning("unknown s_memrealtime rate for architecture %r; assuming %d Hz", arch, hz)
    return hz


def amd_wallclock_hz(index: int, arch: str) -> int:
    """``hipDeviceAttributeWallClockRate`` of device ``index`` in Hz; the architecture's known
    rate (:func:`arch_tick_hz`) when the attribute reads 0 or HIP cannot be asked."""
    rate_khz = 0
    try:
        import ctypes

        lib = ctypes.CDLL("libamdhip64.so")
        val = ctypes.c_int(0)
        if lib.hipDeviceGetAttribute(ctypes.byref(val), _HIP_ATTR_WALLCLOCK_RATE, index) == 0:
            rate_khz = int(val.value)
    except OSError:
        pass
    return rate_khz * 1000 if rate_khz > 0 else arch_tick_hz(arch)


@functools.lru_cache(maxsize=None)
def device_info(index: int) -> dict:
    """What a capture records about CUDA/HIP device ``index``: name, vendor, arch, SM count,
    timer kind and its rate (Hz), uuid. Imports torch."""
    import torch

    props = torch.cuda.get_device_properties(index)
    is_hip = bool(getattr(torch.version, "hip", None))
    if is_hip:
        arch = str(getattr(props, "gcnArchName", "gfx")).split(":")[0]
        timer = TimerKind.AMD_MEMREALTIME
        tick_hz = amd_wallclock_hz(index, arch)
    else:
        arch = f"sm_{props.major}{props.minor}"
        timer = TimerKind.NV_GLOBALTIMER
        tick_hz = schema.DEFAULT_TICK_HZ[timer]
    return {
        "index": index,
        "name": props.name,
        "vendor": "amd" if is_hip else "nvidia",
        "arch": arch,
        "sm_count": props.multi_processor_count,
        "timer": timer.name,
        "tick_hz": tick_hz,
        "uuid": str(getattr(props, "uuid", "")),
    }


def timer_hz(index: int) -> int:
    """The timer rate of device ``index`` (Hz)."""
    return int(device_info(index)["tick_hz"])


def resolve_tick_hz(device: Mapping | None, header_hz: int | None = None) -> int:
    """The tick rate of a rank's timer, from what its capture recorded.

    The device's own rate when it reported one; for AMD ``s_memrealtime`` the known rate of the
    architecture when the device attribute read 0; else the event buffer header's rate; else
    the timer kind's default.

    Args:
        device: a rank capture's ``device`` dict (keys ``tick_hz``, ``vendor``, ``arch``, ``timer``).
        header_hz: the tick rate an event buffer header of this rank carries, if any.
    """
    device = device or {}
    hz = int(device.get("tick_hz") or 0)
    if hz > 0:
        return hz
    timer = str(device.get("timer", ""))
    if device.get("vendor") == "amd" or timer == TimerKind.AMD_MEMREALTIME.name:
        arch = str(device.get("arch", "")).split(":")[0]
        if arch in schema.AMD_WALLCLOCK_HZ or not header_hz:
            return arch_tick_hz(arch)
        return int(header_hz)
    if header_hz:
        return int(header_hz)
    return schema.DEFAULT_TICK_HZ[TimerKind.NV_GLOBALTIMER]
