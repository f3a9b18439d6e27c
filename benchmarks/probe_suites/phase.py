"""``--suite phase``: the ping-pong's polling-phase sweep (each probe kind and its own untraced run at
25 extra delays after each wait) and per kind the cost averaged over the delays."""

from __future__ import annotations

from . import cases as K

#: The probe kinds of the polling-phase sweep.
PHASE_KINDS = {"waits": {"WAITS": True}, "notifies": {"NOTIFIES": True}, "signals": {"WAITS": True, "NOTIFIES": True},
               "all": {"WAITS": True, "NOTIFIES": True, "SPANS": 1, "MARKS": True}}


def variant_name(kind: str, delay: int) -> str:
    """A sweep variant's name; the untraced one at no delay is "untraced" (the case's reference)."""
    return "untraced" if kind == "untraced" and delay == 0 else f"{kind} @{delay}"


def sweep_variants(delays) -> dict:
    """The ping-pong's polling-phase sweep: each probe kind at each extra delay (SM cycles) between
    a wait and the next notify, with its own untraced reference."""
    return {variant_name(k, d): {**sw, "DELAY": d} for d in delays for k, sw in {"untraced": {}, **PHASE_KINDS}.items()}


#: Extra cycles of the phase sweep: 0 to 1,200 in steps of 50 (past two flag reads at ~1.9 GHz).
PHASE_DELAYS = list(range(0, 1201, 50))


def mean_over_delays(rows: list[dict], delays) -> list[dict]:
    """Each sweep row's cost against its own delay's untraced run (set in place: ratio of the
    medians, ns per hand-off), and per probe kind the cost averaged over the delays (the rows
    returned: ns per hand-off and ratio of the summed times). A ping-pong's hand-off moves by whole
    flag reads with the path's length, so one delay measures where the step falls, and the mean
    over a range of delays measures the path."""
    by = {r["variant"]: r for r in rows}
    for kind in ("untraced", *PHASE_KINDS):
        for d in delays:
            r, u = by[variant_name(kind, d)], by[variant_name("untraced", d)]
            r["extra_ns_per_handoff"] = 1000.0 * (r["median_us"] - u["median_us"]) / r["handoffs"]
            r["ratio"] = r["median_us"] / u["median_us"]
            r.pop("ratio_p10", None)  # (the paired percentiles were against the delay-0 run)
            r.pop("ratio_p90", None)
    out = []
    for kind in PHASE_KINDS:
        runs = [(by[variant_name(kind, d)], by[variant_name("untraced", d)]) for d in delays]
        diffs = [r["extra_ns_per_handoff"] for r, _ in runs]
        ratio = sum(r["median_us"] for r, _ in runs) / sum(u["median_us"] for _, u in runs)
        out.append({"case": rows[0]["case"] + ", mean over delays", "variant": kind, "median_us": float("nan"), "p10_us": float("nan"),
                    "p90_us": float("nan"), "handoffs": rows[0]["handoffs"], "ratio": ratio, "extra_ns_min": min(diffs), "extra_ns_max": max(diffs),
                    "extra_ns_per_handoff": sum(diffs) / len(diffs)})
    return out


def rows(dist, H, reps: int, warmup: int) -> list[dict]:
    """The sweep's rows (each against its own delay's untraced run), then per kind the mean over the delays."""
    rounds = 200 if dist.world_size > 1 else 500
    out = K.pingpong_case(dist, H, K.heap_for(dist, H), sweep_variants(PHASE_DELAYS), rounds, reps, warmup, f"ping-pong x{rounds}, phase sweep")
    return out + mean_over_delays(out, PHASE_DELAYS)
