"""Clock model math on CONSTRUCTED calibration data (known offsets, drifts and noise).

Real calibration fixtures recorded on H200s will be added by the lead; these tests check that
the estimator recovers what was put in.
"""

import math

import numpy as np
import pytest

from ktrace.clock import ClockModel, check_causality, fit_clock, ticks_to_ns
from ktrace.device import resolve_tick_hz
from ktrace.events import aligned_events
from ktrace.clock.model import fit_host_anchor, fit_pingpong
from ktrace.captures.synth import constructed_capture


def test_ticks_to_ns_is_exact_for_all_rates():
    t = np.array([0, 1, 12345, 2**40 + 7], np.int64)
    assert ticks_to_ns(t, 1_000_000_000).tolist() == t.tolist()
    assert ticks_to_ns(t, 100_000_000).tolist() == (t * 10).tolist()
    assert ticks_to_ns(t, 25_000_000).tolist() == (t * 40).tolist()
    # a rate that does not divide 1e9: integer floor of t * 1e9 / hz, without overflow
    assert ticks_to_ns(t, 3_000_000).tolist() == [int(x) * 10**9 // 3_000_000 for x in t.tolist()]
    assert ticks_to_ns(7, 100_000_000) == 70
    with pytest.raises(ValueError):
        ticks_to_ns(t, 0)


def test_amd_rate_falls_back_to_the_architecture_when_the_device_reads_zero():
    assert resolve_tick_hz({"vendor": "amd", "arch": "gfx942:sramecc+:xnack-", "tick_hz": 0}) == 100_000_000
    assert resolve_tick_hz({"vendor": "amd", "arch": "gfx90a", "tick_hz": 0}) == 25_000_000
    assert resolve_tick_hz({"vendor": "amd", "arch": "gfx942", "tick_hz": 99_000_000}) == 99_000_000
    assert resolve_tick_hz({"vendor": "nvidia", "tick_hz": 0}, header_hz=None) == 1_000_000_000


def _pp(offset, drift, t0, n, rng, fwd=700, back=700, noise=300, ref_hz=10**9, peer_hz=10**9, phase="before"):
    tau = t0 + np.arange(n, dtype=np.int64) * 3000
    f = fwd + rng.exponential(noise, n)
    b = back + rng.exponential(noise, n)

    def peer(t):
        return (t + offset + drift * (t - t0)) * (peer_hz / 1e9)

    t2 = tau + f
    t3 = t2 + 150
    t4 = t3 + b
    return {"ref_rank": 0, "peer": 1, "phase": phase, "t1": (tau * (ref_hz / 1e9)).astype(np.int64).tolist(),
            "t2": peer(t2).astype(np.int64).tolist(), "t3": peer(t3).astype(np.int64).tolist(),
            "t4": (t4 * (ref_hz / 1e9)).astype(np.int64).tolist()}


def test_pingpong_recovers_offset_and_drift():
    rng = np.random.default_rng(0)
    off, drift = 1_160_000_000, 10.7e-6  # 1.16 ms apart, 10.7 ppm: the worst measured on H200s
    base = 10**12  # (the helper works in float; large epochs are covered by the capture test)
    before = _pp(off, drift, base, 2000, rng)
    after = _pp(off, drift, base, 2000, rng, phase="after")
    # the "after" phase runs 4 s later on the same two clocks
    for k in ("t1", "t4"):
        after[k] = (np.array(after[k]) + 4_000_000_000).tolist()
    for k in ("t2", "t3"):
        after[k] = (np.array(after[k]) + 4_000_000_000 + round(drift * 4e9)).tolist()
    f = fit_pingpong([before, after], 10**9, 10**9)
    assert f.n_kept == 200 and f.n_samples == 4000 and f.phases == ("before", "after")
    truth = off + drift * (f.t0_ns - base)  # the offset at the fit's pivot
    assert abs(f.offset_ns - truth) < 100, (f.offset_ns, truth)
    assert abs(f.drift * 1e6 - 10.7) < 0.05
    assert f.rtt_min_ns >= 1400 and f.residual_ns < 100


def test_pingpong_uses_each_devices_tick_rate():
    rng = np.random.default_rng(1)
    s = [_pp(250_000, 0.0, 10**12, 1000, rng, ref_hz=10**9, peer_hz=100_000_000)]  # MI300-style 100 MHz peer
    f = fit_pingpong(s, 10**9, 100_000_000)
    assert abs(f.offset_ns - 250_000) < 100 and f.drift == 0.0


def test_pingpong_rejects_bad_samples():
    with pytest.raises(ValueError, match="no usable"):
        fit_pingpong([], 10**9, 10**9)
    with pytest.raises(ValueError, match="different lengths"):
        fit_pingpong([{"t1": [1, 2], "t2": [1], "t3": [1], "t4": [1]}], 10**9, 10**9)
    with pytest.raises(ValueError, match="no 't4'"):
        fit_pingpong([{"t1": [1], "t2": [1], "t3": [1]}], 10**9, 10**9)


def test_host_anchor_fit():
    rng = np.random.default_rng(2)
    dev = 10**15 + np.arange(100, dtype=np.int64) * 10_000
    host = dev + 123_456_789
    a = {"host_before_ns": (host - 1000 - rng.integers(0, 5000, 100)).tolist(), "dev_ticks": dev.tolist(),
         "host_after_ns": (host + 1000 + rng.integers(0, 5000, 100)).tolist()}
    h = fit_host_anchor(a, 10**9)
    assert abs(h.host_at(int(dev[50])) - int(host[50])) < 2000 and h.rate == 0.0
    with pytest.raises(ValueError, match="earlier"):
        fit_host_anchor({"host_before_ns": [5], "dev_ticks": [1], "host_after_ns": [4]}, 10**9)


def test_fit_clock_aligns_ranks_of_a_constructed_capture():
    cap, truth = constructed_capture(world_size=4, offsets_ns=[0, -64_000, 1_160_000, 25_000], drift_ppm=[0, 10.7, -8.0, 3.0], seed=5)
    model = fit_clock(cap)
    assert model.method == "pingpong+drift" and model.anchor == "host" and model.reference_rank == 0 and model.aligned
    for r in (1, 2, 3):
        rc = model.rank(r)
        assert abs(rc.drift_ppm - truth["drift_ppm"][r]) < 0.1
        assert rc.residual_ns < 100 and rc.rtt_ns > 0 and rc.n_kept > 0
    ev = aligned_events(cap, model)
    assert ev.dtype.names[-2:] == ("start_ns", "end_ns")
    # relative alignment: each rank's error against the truth agrees across ranks to < 100 ns
    errs = []
    for r in range(4):
        e = ev[ev["rank"] == r]
        errs.append(np.median(e["start_ns"] - truth["true_start_ns"][r] - truth["host_offset_ns"]))
    assert max(errs) - min(errs) < 100, errs
    # absolute: within the host anchor's bound of host wall-clock time
    assert abs(errs[0]) < model.host_bound_ns + 100
    # round trip through the stored dict
    again = ClockModel.from_dict(model.to_dict())
    assert again == model


def test_causality_clean_after_alignment_and_violated_without():
    cap, _ = constructed_capture(world_size=4, offsets_ns=[0, -900_000, 400_000, 1_160_000], drift_ppm=[0, 5, -5, 10], seed=7)
    model = fit_clock(cap)
    ev = aligned_events(cap, model)
    rep = check_causality(ev, model)
    assert rep.n_pairs == 4 * 4 * 3 and rep.unmatched_waits == 0 and rep.unmatched_notifies == 0
    assert rep.ok and rep.worst_lag_ns > 0
    # the same events on their raw device clocks: waits end before their notify begins
    raw = ev.copy()
    raw["start_ns"], raw["end_ns"] = raw["start"], raw["end"]
    bad = check_causality(raw)
    assert bad.n_violations > 0 and bad.worst_lag_ns < -100_000
    # each wait pairs with the notify that wrote its flag and value, from the rank it waited on
    p = rep.pairs
    assert (ev["arg0"][p["wait"]] == p["notify_rank"]).all() and (ev["arg0"][p["notify"]] == p["wait_rank"]).all()
    assert (ev["arg1"][p["notify"]] == ev["arg4"][p["wait"]]).all()


def test_ranks_without_samples_fall_back_and_say_so(caplog):
    cap, _ = constructed_capture(world_size=3, seed=3)
    cap.ranks[2].clock_samples = None
    cap.ranks[1].clock_samples = {"host_anchor": cap.ranks[1].clock_samples["host_anchor"]}
    model = fit_clock(cap)
    assert model.rank(1).method == "host-anchor" and model.rank(2).method == "unaligned"
    assert not model.aligned and model.method.startswith("mixed:")
    assert any("NOT aligned" in n for n in model.notes)
    assert "no clock calibration samples" in caplog.text
    assert math.isnan(model.rank(2).error_bound_ns)
    # the stored form survives a JSON round trip with its NaNs
    import orjson

    assert ClockModel.from_dict(orjson.loads(orjson.dumps(model.to_dict()))).rank(2).method == "unaligned"
