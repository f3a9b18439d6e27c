"""``--suite anatomy``: the pipeline's traced variants decoded launch by launch: where a tile's time goes."""

from __future__ import annotations

from . import cases as K
from . import common as C

#: ``--suite anatomy``: the pipeline's traced variants whose records show where a tile's time goes.
ANATOMY_VARIANTS = {
    "notifies": {"NOTIFIES": True},
    "signals": {"WAITS": True, "NOTIFIES": True},
    "all": {"WAITS": True, "NOTIFIES": True, "SPANS": 1},
    "notifies + spans": {"NOTIFIES": True, "SPANS": 1},
}


def anatomy_case(dist, H, heap, tiles: int, tile_elems: int, launches: int, case: str, pair: int = 1) -> list[dict]:
    """Launch each of ``ANATOMY_VARIANTS`` ``launches`` times in a random order, decode every
    buffer, and take per launch the medians over tiles of: the producer's period (its NOTIFY
    starts, tile to tile), its release (NOTIFY end - start: the barrier is before, the fence and
    the atomic between), its put (the producer's span, where recorded); the consumer's flag latency
    (WAIT end - the same tile's NOTIFY end), its copy (its span, or the next WAIT's start - this
    WAIT's end) and the launch's span (last event end - first start). Rows: the median over
    launches of each."""
    import random
    import statistics

    import numpy as np
    import torch

    from ktrace.schema import EventKind

    n = tiles * tile_elems
    src = torch.randn(n, device=dist.device)
    out = torch.empty(n, dtype=torch.float32, device=dist.device)
    launchers, P = K.pipeline_launchers(dist, heap, ANATOMY_VARIANTS, tiles, tile_elems, case, pair, src, out, C.Epochs())
    per: dict = {name: [] for name in launchers}
    order = [name for name in launchers for _ in range(launches)]
    random.Random(1234).shuffle(order)
    for name in list(launchers) + order:  # (a first launch of each, not kept: compiles)
        fn, buf, slots = launchers[name]
        buf.zero_()
        fn()
        torch.cuda.synchronize()
        per[name].append(C.decode(buf, P, slots).events)
    heap.check()
    rows = []
    med = lambda x: float(np.median(x)) if len(x) else float("nan")  # noqa: E731
    for name, evs in per.items():
        m: dict = {k: [] for k in ("period", "release", "put", "flag_latency", "copy", "launch")}
        sms: set = set()
        for ev in evs[1:]:
            nt = ev[(ev["kind"] == EventKind.NOTIFY) & (ev["program"] == 0)]
            wt = ev[(ev["kind"] == EventKind.WAIT) & (ev["program"] == pair)]
            sp0 = ev[(ev["kind"] == EventKind.SPAN) & (ev["program"] == 0)]
            sp1 = ev[(ev["kind"] == EventKind.SPAN) & (ev["program"] == pair)]
            sms.add(tuple(sorted({(int(p), int(h)) for p, h in zip(ev["program"], ev["hw"])})))
            m["period"].append(med(np.diff(nt["start"])))
            m["release"].append(med(nt["end"] - nt["start"]))
            if len(sp0):
                m["put"].append(med(sp0["end"] - sp0["start"]))
            if len(wt) == len(nt) == tiles:
                m["flag_latency"].append(med(wt["end"] - nt["end"]))
            if len(sp1):
                m["copy"].append(med(sp1["end"] - sp1["start"]))
            elif len(wt) == tiles:
                m["copy"].append(med(wt["start"][1:] - wt["end"][:-1]))
            m["launch"].append(float(ev["end"].max() - ev["start"].min()))
        rows.append({"case": case, "variant": name, "launches": len(evs) - 1, "sms": sorted(sms),
                     **{f"{k}_ns": (statistics.median(v) if v else None) for k, v in m.items()}})
    return rows


def rows(dist, H, reps: int, warmup: int) -> list[dict]:
    """Two pipeline shapes, the consumer on programs 1, 2, 7 and 66, 30 launches of each variant
    (``reps`` and ``warmup`` are not used: every launch is decoded, none timed)."""
    heap = K.heap_for(dist, H)
    return [r for t, e in ((8, 65536), (32, 8192)) for pair in (1, 2, 7, 66) for r in
            anatomy_case(dist, H, heap, t, e, 30, f"pipeline {t} x {e // 1024}K fp32, consumer {pair}, anatomy", pair)]
