"""The host chain's exchanges for real, on the CPU: processes over gloo on this machine.

1. The host exchange itself (``ktrace.clock.calibrate.host_exchange``), three processes: rank 1's
   host timestamps carry an injected offset and drift (``HostClockSkew``), rank 2's none; the fit
   of each rank's exchange must recover what was injected (and nothing for rank 2) within the
   bound the fit states.
2. A rehearsal of the multi-GPU simulation (``tests/multigpu/test_clock_chain.py``) with the
   device parts stood in by CONSTRUCTED device clocks: two processes, each its own "node"
   (``node="sim{rank}"``), a capture session with a host-backed heap, the real plan, host
   exchange, per-rank sample layout, gather and fit; the stand-in ping-pong recorded as a check is
   the ground truth. Everything but the GPU kernels runs as it will on the GPUs.
"""

from __future__ import annotations

import time
import traceback

import numpy as np
import pytest

from tests.gloo_ranks import finish, init, spawn

INJECT_OFFSET_NS = 3_700_000
INJECT_DRIFT_PPM = 200.0
PHASE_GAP_S = 1.0


# ---------------------------------------------------------------------------------------------
# 1. the host exchange
# ---------------------------------------------------------------------------------------------


def _exchange_worker(rank: int, world: int, port: int, q, origin: int) -> None:
    out: dict = {"rank": rank}
    try:
        init(rank, world, port)
        from ktrace.clock.calibrate import host_exchange, host_group
        from ktrace.clock.hostclock import HostClockSkew, host_clock

        skew = HostClockSkew(rank=1, offset_ns=INJECT_OFFSET_NS, drift_ppm=INJECT_DRIFT_PPM, origin_ns=origin)
        clock = host_clock(skew, rank)
        got = []
        for ph in ("before", "after"):
            t = time.perf_counter_ns()
            s = host_exchange(0, [1, 2], ph, rounds=200, clock=clock, group=host_group())
            out[f"{ph}_s"] = (time.perf_counter_ns() - t) / 1e9
            if s is not None:
                got.append(s)
            if ph == "before":
                time.sleep(PHASE_GAP_S)
        out["samples"] = got
    except BaseException:
        out["error"] = traceback.format_exc()
    finish(out, q)


@pytest.fixture(scope="module")
def exchanged():
    origin = time.time_ns()
    return origin, spawn(_exchange_worker, 3, origin, timeout_s=240)


def test_host_exchange_recovers_the_injected_offset_and_drift(exchanged):
    from ktrace.clock.hostclock import HostClockSkew
    from ktrace.clock.model import Leg, fit_pingpong

    origin, outs = exchanged
    skew = HostClockSkew(rank=1, offset_ns=INJECT_OFFSET_NS, drift_ppm=INJECT_DRIFT_PPM, origin_ns=origin)
    assert outs[0]["samples"] == []  # the reference keeps none: each peer keeps the whole exchange
    print()
    for r in (1, 2):
        ss = outs[r]["samples"]
        assert [s["phase"] for s in ss] == ["before", "after"] and all(s["peer"] == r and s["ref_rank"] == 0 for s in ss)
        assert all(len(s[k]) == 200 for s in ss for k in ("t1", "t2", "t3", "t4")) and ss[0]["transport"] == "gloo"
        leg = Leg.from_fit(f"host r{r}", fit_pingpong(ss, 10**9, 10**9))
        t = leg.t0_ns  # on rank 0's (true) host clock
        true_off = skew.skew_at(t) if r == 1 else 0.0
        true_ppm = INJECT_DRIFT_PPM if r == 1 else 0.0
        gap = min(ss[1]["t1"]) - max(ss[0]["t4"])
        drift_bound = 2 * leg.bound_ns / gap * 1e6
        print(f"rank {r}: injected offset {true_off:.0f} ns, drift {true_ppm:.1f} ppm; recovered {leg.offset_ns:.0f} ns "
              f"(error {leg.offset_ns - true_off:.0f} ns, bound {leg.bound_ns:.0f} ns), {leg.drift * 1e6:.2f} ppm "
              f"(bound {drift_bound:.2f} ppm); round trips kept up to {leg.rtt_ns / 1e3:.1f} µs, smallest "
              f"{leg.rtt_min_ns / 1e3:.1f} µs; {outs[r]['before_s'] * 1e3:.0f} ms per phase")
        assert abs(leg.offset_ns - true_off) <= leg.bound_ns
        assert abs(leg.drift * 1e6 - true_ppm) <= drift_bound
    # the check can fail: rank 1's exchange read as if nothing were injected is off by the skew
    leg1 = Leg.from_fit("host r1", fit_pingpong(outs[1]["samples"], 10**9, 10**9))
    assert abs(leg1.offset_ns) > 10 * leg1.bound_ns


# ---------------------------------------------------------------------------------------------
# 2. the simulation, rehearsed with stand-in devices
# ---------------------------------------------------------------------------------------------

#: CONSTRUCTED device clocks of the stand-in GPUs: ``true + offset + ppm * (true - origin)``.
DEV_OFFSET_NS = [-40_000_000_000, 1_160_000]
DEV_PPM = [0.0, 10.7]
SKEW_OFFSET_NS = 3_000_000
SKEW_PPM = 50.0


def _stand_in_devices(calibration, rank: int, origin: int) -> None:
    """Replace the calibration's GPU parts by CONSTRUCTED device clocks (exchanges of ~1 µs plus
    exponential noise), keeping their formats and collective behaviour."""
    rng = np.random.default_rng(100 + rank)

    def dev(r, tau):
        tau = np.asarray(tau, dtype=np.int64)
        return tau + DEV_OFFSET_NS[r] + np.rint((tau - origin).astype(np.float64) * DEV_PPM[r] * 1e-6).astype(np.int64)

    def ntp(a_clock, b_clock, n, one_way, noise, rng):
        tau = time.time_ns() + np.arange(n, dtype=np.int64) * 3_000
        f = one_way + rng.exponential(noise, n).astype(np.int64)
        b = one_way + rng.exponential(noise, n).astype(np.int64)
        return {"t1": a_clock(tau).tolist(), "t2": b_clock(tau + f).tolist(), "t3": b_clock(tau + f + 100).tolist(),
                "t4": a_clock(tau + f + 100 + b).tolist()}

    def ping_pong(heap, phase="before", config=None, pairs=None, *, ranks=None, check=False):
        seed = heap.all_gather_object(int(time.time_ns() % 2**31))[0]  # (the same samples on every rank)
        glob = ranks or list(range(heap.world_size))
        out = []
        for i, (a, b) in enumerate(pairs or []):
            r = np.random.default_rng(seed + i)
            s = ntp(lambda t, g=glob[a]: dev(g, t), lambda t, g=glob[b]: dev(g, t), 2000, 700, 300, r)
            s.update(ref_rank=glob[a], peer=glob[b], phase=phase)
            if check:
                s["check"] = True
            out.append(s)
        return out

    def skewed(clock):
        shift = clock() - time.time_ns()
        return lambda t: np.asarray(t, dtype=np.int64) + shift

    def gpu_host_exchange(device=None, phase="before", rounds=1000, *, clock=time.time_ns, timeout_s=10.0):
        s = ntp(skewed(clock), lambda t: dev(rank, t), rounds, 900, 500, rng)
        return dict(s, phase=phase, transport="pinned")

    def host_anchor(device=None, repeats=32, *, clock=time.time_ns):
        host = skewed(clock)
        tau = time.time_ns() + np.arange(repeats, dtype=np.int64) * 30_000
        lo = 5_000 + rng.exponential(5_000, repeats).astype(np.int64)
        hi = 5_000 + rng.exponential(5_000, repeats).astype(np.int64)
        return {"host_before_ns": host(tau - lo).tolist(), "dev_ticks": dev(rank, tau).tolist(), "host_after_ns": host(tau + hi).tolist()}

    calibration.ping_pong = ping_pong
    calibration.gpu_host_exchange = gpu_host_exchange
    calibration.host_anchor = host_anchor
    calibration.device_now = lambda device=None: int(dev(rank, time.time_ns()))


def _rehearsal_worker(rank: int, world: int, port: int, q, origin: int) -> None:
    out: dict = {"rank": rank}
    try:
        init(rank, world, port)
        import ktrace
        import ktrace.clock.calibrate as calibration
        from ktrace.clock.calibrate import CalibrationConfig
        from ktrace.clock.hostclock import HostClockSkew
        from ktrace.shmem import HeapConfig, SymmetricHeap
        from tests import clock_sim

        _stand_in_devices(calibration, rank, origin)
        heap = SymmetricHeap(config=HeapConfig(size_bytes=1 << 20, backing="host"))
        skew = HostClockSkew(rank=1, offset_ns=SKEW_OFFSET_NS, drift_ppm=SKEW_PPM, origin_ns=origin)
        cfg = CalibrationConfig(node="sim{rank}", crosscheck=True, host_skew=skew)
        with ktrace.capture(heap=heap, calibration=cfg) as cap:
            time.sleep(PHASE_GAP_S)
        rc = cap.to_capture().ranks[rank]
        out["notes"] = list(rc.notes)
        out["keys"] = sorted(rc.clock_samples)
        out["path"] = rc.clock_samples.get("path")
        out["cost_ns"] = rc.clock_samples.get("cost_ns")
        merged = cap.gather(dst=0)
        if merged is not None:
            from ktrace.clock import clock_model_of

            model = clock_model_of(merged)
            out["stored"] = {r: rc.method for r, rc in model.ranks.items()}
            out["model_notes"] = list(model.notes)
            out["rows"] = clock_sim.compare(merged, skew)
            out["lines"] = clock_sim.lines(out["rows"])
            out["bad"] = clock_sim.check(out["rows"], injected=True)
    except BaseException:
        out["error"] = traceback.format_exc()
    finish(out, q)


@pytest.fixture(scope="module")
def rehearsed():
    return spawn(_rehearsal_worker, 2, time.time_ns(), timeout_s=240)


def test_rehearsal_of_the_simulation_aligns_through_the_chain(rehearsed):
    r0, r1 = rehearsed[0], rehearsed[1]
    assert r0["notes"] == [] and r1["notes"] == [], (r0["notes"], r1["notes"])
    assert r0["path"] == "reference" and r1["path"] == "host-chain"
    for key in ("edges", "gpu_host", "host_anchors", "host_clock", "node", "reference_rank"):
        assert key in r1["keys"], r1["keys"]
    assert "host_exchange" in r1["keys"] and "host_skew" in r1["keys"]
    assert set(r0["cost_ns"]["before"]) >= {"plan", "pingpong", "pingpong_check", "gpu_host", "anchors", "host_exchange"}
    assert r0["stored"] == {0: "reference", 1: "host-chain"}  # what the gathered capture stores: the chain
    assert any(n.startswith("SIMULATION: rank 1's host timestamps carry an injected offset of 3000000 ns") for n in r0["model_notes"])
    print("\n" + "\n".join(r0["lines"]))
    assert r0["bad"] == [], r0["bad"]
    row = r0["rows"][0]
    assert row["rank"] == 1 and row["window_ns"] > 0.9e9 and row["truth_method"] == "pingpong+drift"
