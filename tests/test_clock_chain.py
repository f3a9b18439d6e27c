"""Clocks across nodes, on CONSTRUCTED calibration samples (known clocks, known noise).

Two "nodes" of two ranks each: GPU clocks with the offsets and drifts measured on H200s, host
clocks that disagree by seconds and drift by tens of ppm, round trips with exponential noise.
The fit must recover every rank's map within the bound it states, name each rank's path, and
the causality check must not call a pair violated within those bounds. Also: the legs' algebra,
the path plan, the per-rank sample layout, node names, host clock state and the simulated skew.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from ktrace.captures.synth import constructed_capture
from ktrace.clock import ClockModel, RankClock, check_causality, fit_clock
from ktrace.clock.hostclock import HostClockSkew, describe_host_clock, host_clock, host_clock_state, skew_from_env
from ktrace.clock.model import Leg, fit_anchor_leg, fit_pingpong
from ktrace.clock.paths import plan_paths, rank_samples
from ktrace.dist_env import node_name
from ktrace.events import aligned_events

BASE = 1_700_000_000_000_000_000  # constructed_capture's default epoch (true ns)
T_START = BASE + 1_000_000
GAP = 4_000_000_000  # the closing calibration, 4 s after the opening one
OFFSETS = [0, -64_000, 1_160_000, 25_000]
DRIFTS = [0.0, 10.7, -8.0, 3.0]
HOST_A = 5_000_000  # node A's host clock: true + 5 ms (constructed_capture's host offset)
HOST_B = 2_345_678_901  # node B's host clock: true + 2.35 s ...
HOST_B_PPM = 37.0  # ... running 37 ppm fast
NODES = ["nodeA", "nodeA", "nodeB", "nodeB"]


def _dev(r, t):
    t = np.asarray(t, dtype=np.int64)
    d = t + OFFSETS[r] + np.rint((t - BASE).astype(np.float64) * DRIFTS[r] * 1e-6).astype(np.int64)
    return (d // 32) * 32


def _host(node, t):
    t = np.asarray(t, dtype=np.int64)
    if node == "nodeA":
        return t + HOST_A
    return t + HOST_B + np.rint((t - BASE).astype(np.float64) * HOST_B_PPM * 1e-6).astype(np.int64)


def _ntp(rng, a_clock, b_clock, t0, n, fwd, noise, step):
    """t1/t4 on clock a, t2/t3 on clock b: one-way trips of ``fwd`` plus exponential noise."""
    tau = t0 + np.arange(n, dtype=np.int64) * step
    f = fwd + rng.exponential(noise, n).astype(np.int64)
    b = fwd + rng.exponential(noise, n).astype(np.int64)
    g = 200 + rng.integers(0, 100, n)
    return {"t1": a_clock(tau).tolist(), "t2": b_clock(tau + f).tolist(), "t3": b_clock(tau + f + g).tolist(),
            "t4": a_clock(tau + f + g + b).tolist()}


def _anchor(rng, r, node, t0, n=32):
    tau = t0 + np.arange(n, dtype=np.int64) * 30_000
    lo = 4_000 + rng.exponential(6_000, n).astype(np.int64)
    hi = 4_000 + rng.exponential(6_000, n).astype(np.int64)
    return {"host_before_ns": _host(node, tau - lo).tolist(), "dev_ticks": _dev(r, tau).tolist(),
            "host_after_ns": _host(node, tau + hi).tolist()}


def chain_capture(seed=11, *, pinned=True, skew_host_exchange_ns=0):
    """Four ranks on two nodes with every kind of calibration sample, CONSTRUCTED.

    Rank 0 (reference) and rank 1 on node A (ping-pong); rank 2 leads node B (host chain) and rank
    3 ping-pongs against rank 2. ``pinned=False`` leaves out the GPU<->host exchange (host
    anchors serve). ``skew_host_exchange_ns`` corrupts the host exchange (the fit cannot know).
    """
    rng = np.random.default_rng(seed)
    cap, truth = constructed_capture(world_size=4, offsets_ns=OFFSETS, drift_ppm=DRIFTS, seed=seed)
    phases = (("before", T_START - 30_000_000), ("after", T_START + GAP))
    for r in range(4):
        node = NODES[r]
        cs = {"reference_rank": 0, "node": node, "pingpong": [], "host_anchors": [], "gpu_host": [], "host_exchange": [],
              "host_clock": {"clock": "CLOCK_REALTIME", "sync": "ptp", "daemons": ["phc2sys", "ptp4l"],
                             "kernel": {"synchronised": True, "esterror_ns": 1000}}}
        for ph, t0 in phases:
            cs["host_anchors"].append(dict(_anchor(rng, r, node, t0 + 5_000_000), phase=ph))
            if r == 1:
                cs["pingpong"].append(dict(_ntp(rng, lambda t: _dev(0, t), lambda t: _dev(1, t), t0, 2000, 600, 400, 5000),
                                           ref_rank=0, peer=1, phase=ph))
            if r == 3:
                cs["pingpong"].append(dict(_ntp(rng, lambda t: _dev(2, t), lambda t: _dev(3, t), t0, 2000, 600, 400, 5000),
                                           ref_rank=2, peer=3, phase=ph))
            if pinned and r in (0, 2):
                cs["gpu_host"].append(dict(_ntp(rng, lambda t, n=node: _host(n, t), lambda t, r=r: _dev(r, t), t0 + 12_000_000,
                                                1000, 900, 700, 8000), phase=ph, transport="pinned"))
            if r == 2:
                hx = _ntp(rng, lambda t: _host("nodeA", t), lambda t: _host("nodeB", t), t0 + 20_000_000, 200, 20_000,
                          15_000, 100_000)
                hx["t2"] = (np.array(hx["t2"]) + skew_host_exchange_ns).tolist()
                hx["t3"] = (np.array(hx["t3"]) + skew_host_exchange_ns).tolist()
                cs["host_exchange"].append(dict(hx, ref_rank=0, peer=2, phase=ph, transport="gloo"))
        cs["host_anchor"] = {k: v for k, v in cs["host_anchors"][0].items() if k != "phase"}
        cap.ranks[r].clock_samples = cs
    return cap, truth


def _rank_errors(cap, truth, model):
    """Each rank's median error against the truth, relative to rank 0's (ns)."""
    ev = aligned_events(cap, model)
    errs = []
    for r in range(4):
        e = ev[ev["rank"] == r]
        errs.append(float(np.median(e["start_ns"] - truth["true_start_ns"][r])))
    return [x - errs[0] for x in errs]


# ---------------------------------------------------------------------------------------------
# the whole chain
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "anchors"])
def test_chain_recovers_every_rank_within_its_bound(pinned):
    cap, truth = chain_capture(pinned=pinned)
    model = fit_clock(cap)
    methods = {r: rc.method for r, rc in model.ranks.items()}
    assert methods == {0: "reference", 1: "pingpong+drift", 2: "host-chain", 3: "pingpong+host-chain"}, methods
    assert model.method == "mixed:host-chain,pingpong+drift,pingpong+host-chain" and model.aligned
    errs = _rank_errors(cap, truth, model)
    print(f"\n[{'pinned' if pinned else 'anchors'}] " + "; ".join(
        f"rank {r} {model.rank(r).method}: error {errs[r]:.0f} ns, bound {model.rank(r).error_bound_ns:.0f} ns" for r in range(1, 4)))
    for r in (1, 2, 3):
        assert abs(errs[r]) <= model.rank(r).error_bound_ns, (r, errs[r], model.rank(r))
    # GPU drifts recovered through the chain (relative to rank 0's GPU)
    for r in (1, 2, 3):
        assert abs(model.rank(r).drift_ppm - DRIFTS[r]) < 0.05 + 2 * model.rank(r).error_bound_ns / GAP * 1e6
    # the host leg: node B's host against node A's, at the pivot
    rc2 = model.rank(2)
    host_true = (HOST_B - HOST_A) + HOST_B_PPM * 1e-6 * ((rc2.pivot_ns - HOST_A) - BASE)
    host_bound = next(b for name, b in rc2.legs if name.startswith("host nodeB vs nodeA (gloo)"))
    print(f"host offset injected {host_true:.0f} ns, recovered {rc2.host_offset_ns:.0f} ns (bound {host_bound:.0f} ns); drift "
          f"{HOST_B_PPM} ppm, recovered {rc2.host_drift_ppm:.3f} ppm")
    assert abs(rc2.host_offset_ns - host_true) <= host_bound
    assert abs(rc2.host_drift_ppm - HOST_B_PPM) <= 2 * host_bound / GAP * 1e6
    assert model.rank(3).host_offset_ns == pytest.approx(rc2.host_offset_ns) and math.isnan(model.rank(1).host_offset_ns)
    # bounds: legs sum to the stated bound; a chain's bound is looser than a ping-pong's
    for r in (2, 3):
        rc = model.rank(r)
        assert rc.error_bound_ns == pytest.approx(sum(b for _, b in rc.legs), rel=1e-9)
    kind = "pinned" if pinned else "launch"
    assert [n for n, _ in model.rank(3).legs] == [f"gpu-host r0 ({kind})", "host nodeB vs nodeA (gloo)", f"gpu-host r2 ({kind})",
                                                  "pingpong r2-r3"]
    assert model.rank(1).error_bound_ns < 1_000 < model.rank(2).error_bound_ns < model.rank(3).error_bound_ns
    # the host clocks' state is in the notes
    assert any(n.startswith("node nodeB: host clock ptp (phc2sys, ptp4l), synchronised") for n in model.notes), model.notes


def test_pinned_exchange_bounds_tighter_than_launch_anchors():
    a = fit_clock(chain_capture(pinned=True)[0]).rank(2).error_bound_ns
    b = fit_clock(chain_capture(pinned=False)[0]).rank(2).error_bound_ns
    assert a < b, (a, b)


def test_a_wrong_host_exchange_shows_beyond_the_bound():
    """The check can fail: 300 µs of error the host exchange cannot see lands outside the bound."""
    cap, truth = chain_capture(skew_host_exchange_ns=300_000)
    model = fit_clock(cap)
    errs = _rank_errors(cap, truth, model)
    assert abs(errs[2]) > model.rank(2).error_bound_ns and abs(errs[3]) > model.rank(3).error_bound_ns
    assert abs(errs[1]) <= model.rank(1).error_bound_ns  # node A is untouched


def test_preferences_pick_each_path():
    cap, truth = chain_capture()
    anchors = fit_clock(cap, prefer="host-anchor")
    assert {r: rc.method for r, rc in anchors.ranks.items() if r} == {1: "host-anchor", 2: "host-anchor", 3: "host-anchor"}
    # host anchors assume one host clock: node B lands off by the hosts' 2.35 s, and says its bound is unknown
    assert abs(_rank_errors(cap, truth, anchors)[2]) > 2e9
    assert math.isnan(anchors.rank(2).error_bound_ns) and math.isfinite(anchors.rank(1).error_bound_ns)
    assert any("rank 2: aligned through host time only, taking node nodeB's host clock" in n for n in anchors.notes)
    chain = fit_clock(cap, prefer="host-chain")
    # rank 1 shares the reference's host: its chain is its own anchors and the reference's GPU<->host leg
    assert chain.rank(1).method == "host-chain"
    assert [n for n, _ in chain.rank(1).legs] == ["gpu-host r0 (pinned)", "gpu-host r1 (launch)"]
    assert math.isnan(chain.rank(1).host_offset_ns)
    assert chain.rank(1).error_bound_ns > fit_clock(cap).rank(1).error_bound_ns
    assert abs(_rank_errors(cap, truth, chain)[1]) <= chain.rank(1).error_bound_ns
    with pytest.raises(ValueError, match="prefer"):
        fit_clock(cap, prefer="nearest")


def test_causality_tolerates_within_the_chain_bound_and_not_beyond():
    cap, _ = chain_capture()
    model = fit_clock(cap)
    ev = aligned_events(cap, model)
    rep = check_causality(ev, model)
    assert rep.n_pairs == 4 * 4 * 3 and rep.ok
    pairs = rep.pairs
    b = model.error_bounds_ns(4)
    assert np.allclose(pairs["tolerance_ns"], b[pairs["notify_rank"]] + b[pairs["wait_rank"]])
    # move rank 2 back in time: a pair whose wait now ends before its notify, but within the two
    # ranks' bounds, is no violation; beyond them it is
    tol_21 = model.rank(2).error_bound_ns + model.rank(1).error_bound_ns
    for violated in (False, True):
        lag = pairs["lag_ns"][(pairs["wait_rank"] == 2) & (pairs["notify_rank"] == 1)].min()
        shift = int(lag + (tol_21 * 0.5 if not violated else tol_21 * 1.5))
        moved = ev.copy()
        on2 = moved["rank"] == 2
        moved["start_ns"][on2] -= shift
        moved["end_ns"][on2] -= shift
        got = check_causality(moved, model)
        sel = (got.pairs["wait_rank"] == 2) & (got.pairs["notify_rank"] == 1)
        assert got.pairs["lag_ns"][sel].min() < 0
        assert bool(got.pairs["violation"][sel].any()) == violated, (shift, tol_21)


def test_chain_model_survives_the_file_and_old_models_still_read():
    import orjson

    cap, _ = chain_capture()
    model = fit_clock(cap)
    d = orjson.loads(orjson.dumps(model.to_dict()))
    again = ClockModel.from_dict(d)
    assert again.rank(3).legs == model.rank(3).legs and again.rank(2).host_offset_ns == pytest.approx(model.rank(2).host_offset_ns)
    assert again.rank(2).error_bound_ns == pytest.approx(model.rank(2).error_bound_ns)
    assert math.isnan(again.rank(1).host_offset_ns)
    # written for readers of the file: each rank's bound, and which ranks are aligned to what
    assert d["ranks"][2]["bound_ns"] == pytest.approx(model.rank(2).error_bound_ns)
    assert d["summary"].startswith("rank 0 reference; rank 1 pingpong+drift within ") and "rank 2 host-chain within" in d["summary"]
    # a model stored before the chain (no node, legs, host fields, bound or summary) reads as before
    for r in d["ranks"]:
        for k in ("node", "legs", "host_offset_ns", "host_drift_ppm", "bound_ns"):
            r.pop(k)
    d.pop("summary")
    old = ClockModel.from_dict(d)
    assert old.rank(2).legs == () and old.rank(2).node == "" and math.isnan(old.rank(2).host_offset_ns)
    assert old.rank(2).error_bound_ns == pytest.approx(model.rank(2).error_bound_ns)  # (rtt and residual are sums)


def test_old_captures_fit_as_before():
    """A capture of the single-node layout (no node, no host exchange) fits to the same maps as
    before the chain existed: ping-pong against the reference, host anchor for the common clock."""
    cap, truth = constructed_capture(world_size=3, offsets_ns=[0, 40_000, -7_000], drift_ppm=[0, 2.0, -1.0], seed=4)
    model = fit_clock(cap)
    assert [rc.method for _, rc in sorted(model.ranks.items())] == ["reference", "pingpong+drift", "pingpong+drift"]
    assert all(rc.legs == () and rc.node == "" for rc in model.ranks.values())
    assert model.bounds_text().startswith("rank 0 reference; ranks 1-2 pingpong+drift within ")


def test_report_text_names_paths_and_bounds():
    from ktrace.analysis import build_report
    from viewers.text import render_text

    cap, _ = chain_capture()
    cap.clock = fit_clock(cap).to_dict()
    text = render_text(build_report(cap))
    line = next(x for x in text.splitlines() if x.startswith("Clock:"))
    print("\n" + line)
    assert "rank 0 reference" in line and "rank 2 host-chain within" in line and "rank 3 pingpong+host-chain within" in line


# ---------------------------------------------------------------------------------------------
# legs
# ---------------------------------------------------------------------------------------------


def test_legs_compose_and_invert_exactly():
    a = Leg("a", t0_ns=BASE, offset_int_ns=-BASE + 12_345, offset_frac_ns=0.25, drift=11e-6, rtt_ns=100.0, residual_ns=5.0)
    b = Leg("b", t0_ns=12_000, offset_int_ns=BASE + 7, offset_frac_ns=-0.4, drift=-3e-6, rtt_ns=40.0, residual_ns=1.0)
    ab = a.then(b)
    for x in (BASE - 10**9, BASE, BASE + 3 * 10**9):
        y = x + a.offset_at(x)
        z = y + b.offset_at(round(y)) + b.drift * (y - round(y))
        assert x + ab.offset_at(x) == pytest.approx(z, abs=1e-3)
        back = a.inverse()
        assert round(y) + back.offset_at(round(y)) + back.drift * (y - round(y)) == pytest.approx(x, abs=1e-3)
    assert ab.bound_ns == pytest.approx(a.bound_ns + b.bound_ns) and ab.inverse().bound_ns == ab.bound_ns
    ident = a.then(a.inverse())
    assert abs(ident.offset_ns) < 1e-6 and abs(ident.drift) < 1e-15


def test_anchor_leg_fits_drift_across_phases_and_bounds_by_half_the_bracket():
    rng = np.random.default_rng(3)
    hb_off = 123_456_789

    def anchors(t0, ph):
        tau = t0 + np.arange(32, dtype=np.int64) * 20_000
        lo, hi = 3_000 + rng.integers(0, 9_000, 32), 3_000 + rng.integers(0, 9_000, 32)
        dev = tau - hb_off - np.rint((tau - BASE) * 9e-6).astype(np.int64)  # the device runs 9 ppm slow
        return {"phase": ph, "host_before_ns": (tau - lo).tolist(), "dev_ticks": dev.tolist(), "host_after_ns": (tau + hi).tolist()}

    leg = fit_anchor_leg([anchors(BASE, "before"), anchors(BASE + GAP, "after")], 10**9)
    assert leg.phases == ("before", "after") and leg.n_kept == 16
    assert abs(leg.drift * 1e6 - 9.0) < 2 * leg.bound_ns / GAP * 1e6
    dev_mid = BASE + GAP // 2 - hb_off - round(GAP / 2 * 9e-6)
    assert abs(leg.offset_at(dev_mid) - (BASE + GAP // 2 - dev_mid)) <= leg.bound_ns
    one = fit_anchor_leg([anchors(BASE, "before")], 10**9)
    assert one.drift == 0.0
    with pytest.raises(ValueError, match="no host anchors"):
        fit_anchor_leg([], 10**9)


def test_host_exchange_fit_recovers_offset_and_drift_from_constructed_stamps():
    rng = np.random.default_rng(9)
    before = dict(_ntp(rng, lambda t: _host("nodeA", t), lambda t: _host("nodeB", t), BASE, 200, 25_000, 20_000, 100_000), phase="before")
    after = dict(_ntp(rng, lambda t: _host("nodeA", t), lambda t: _host("nodeB", t), BASE + GAP, 200, 25_000, 20_000, 100_000),
                 phase="after")
    f = fit_pingpong([before, after], 10**9, 10**9)
    leg = Leg.from_fit("host", f)
    t = BASE + HOST_A + GAP // 2  # on node A's host clock
    truth = (HOST_B - HOST_A) + HOST_B_PPM * 1e-6 * (t - HOST_A - BASE)
    assert abs(leg.offset_at(t) - truth) <= leg.bound_ns
    assert abs(leg.drift * 1e6 - HOST_B_PPM) <= 2 * leg.bound_ns / (GAP - 20_000_000) * 1e6


# ---------------------------------------------------------------------------------------------
# the plan, the samples a rank keeps, node names, host clocks
# ---------------------------------------------------------------------------------------------


def test_plan_two_nodes_one_world_heap():
    nodes = ["a"] * 4 + ["b"] * 4
    world = [tuple(range(8))] * 8
    p = plan_paths(nodes, 0, world)
    assert p.pingpong == ((0, 1), (0, 2), (0, 3), (4, 5), (4, 6), (4, 7))
    assert p.chained == (4,) and p.gpu_host == (0, 4) and p.checks == ()
    assert [p.path(r) for r in range(8)] == ["reference"] + ["pingpong"] * 3 + ["host-chain"] + ["pingpong+host-chain"] * 3
    # the reference need not be the first rank of its node
    q = plan_paths(nodes, 5, world)
    assert q.node_ref == (0, 0, 0, 0, 5, 5, 5, 5) and q.chained == (0,) and (5, 4) in q.pingpong


def test_plan_heaps_per_node_and_simulated_nodes():
    nodes = ["a", "a", "b", "b"]
    heaps = [(0, 1), (0, 1), (2, 3), (2, 3)]
    p = plan_paths(nodes, 0, heaps, crosscheck=True)
    assert p.pingpong == ((0, 1), (2, 3)) and p.chained == (2,) and p.checks == ()  # (no heap crosses nodes)
    sim = plan_paths(["sim0", "sim1"], 0, [(0, 1), (0, 1)], crosscheck=True)
    assert sim.pingpong == () and sim.chained == (1,) and sim.gpu_host == (0, 1) and sim.checks == ((0, 1),)
    assert sim.path(1) == "host-chain" and sim.multi_node
    one = plan_paths(["h"] * 3, 0, [(0, 1, 2)] * 3, crosscheck=True)
    assert one.pingpong == ((0, 1), (0, 2)) and not one.multi_node and one.checks == () and one.gpu_host == ()
    # a rank its heap does not connect to its node's reference chains on its own
    orphan = plan_paths(["h", "h", "h"], 0, [(0, 1), (0, 1), (2,)])
    assert orphan.pingpong == ((0, 1),) and orphan.chained == () and orphan.gpu_host == (0, 2) and orphan.path(2) == "host-chain"
    with pytest.raises(ValueError):
        plan_paths(["a"], 3, [(0,)])


def test_rank_samples_layout():
    anchor = {"host_before_ns": [1], "dev_ticks": [2], "host_after_ns": [3]}
    old = {"before": {"samples": [{"ref_rank": 0, "peer": 1, "phase": "before", "t1": [0], "t2": [0], "t3": [0], "t4": [0]}],
                      "anchors": {0: anchor, 1: anchor}}}
    assert rank_samples(old, 1) == {"pingpong": old["before"]["samples"], "host_anchor": anchor}
    assert rank_samples({"before": {"samples": [], "anchors": {}}}, 0) == {"pingpong": [], "host_anchor": None}
    assert rank_samples({}, 0) is None
    new = {ph: {"samples": [], "anchors": {1: anchor}, "gpu_host": {"phase": ph, "t1": [1]}, "rank": 1, "node": "b",
                "host_exchange": [{"ref_rank": 0, "peer": 1, "phase": ph}], "reference_rank": 0, "path": "host-chain",
                "cost_ns": {"plan": 5}, "notes": [f"{ph}: a note"], "edge_ticks": 10 if ph == "before" else 20,
                "host_skew": {"rank": 1, "offset_ns": 7}}
           for ph in ("after", "before")}
    got = rank_samples(new, 1)
    assert [a["phase"] for a in got["host_anchors"]] == ["before", "after"] and got["host_anchor"] == anchor
    assert [g["phase"] for g in got["gpu_host"]] == ["before", "after"] and len(got["host_exchange"]) == 2
    assert got["node"] == "b" and got["reference_rank"] == 0 and got["path"] == "host-chain" and got["edges"] == {"before": 10, "after": 20}
    assert got["notes"] == ["before: a note", "after: a note"] and got["host_skew"]["offset_ns"] == 7
    assert got["cost_ns"] == {"before": {"plan": 5}, "after": {"plan": 5}}


def test_node_names():
    assert node_name({}) == node_name({"RANK": "3", "WORLD_SIZE": "4"})  # the host name
    assert node_name({"KTRACE_NODE": "sim{rank}", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == "sim3"
    assert node_name({"KTRACE_NODE": "n{local_rank}"}, rank=5, local_rank=2) == "n2"
    assert node_name({"KTRACE_NODE": "rack7"}) == "rack7"
    assert node_name({}, template="sim{rank}", rank=1) == "sim1"
    with pytest.raises(ValueError, match="only"):
        node_name({"KTRACE_NODE": "{host}"}, rank=0)


def test_host_clock_skew_and_state():
    sk = HostClockSkew(rank=1, offset_ns=3_000_000, drift_ppm=50.0, origin_ns=BASE)
    assert sk.apply(BASE) == BASE + 3_000_000 and sk.apply(BASE + 10**9) == BASE + 10**9 + 3_050_000
    assert HostClockSkew.parse("rank=1, offset_ns=3e6, drift_ppm=50, origin_ns=1700000000000000000") == sk
    assert skew_from_env({"KTRACE_CLOCK_SKEW": "rank=2,offset_ns=-5,drift_ppm=0"}).rank == 2 and skew_from_env({}) is None
    with pytest.raises(ValueError, match="KTRACE_CLOCK_SKEW"):
        HostClockSkew.parse("rank=1,offset=3")
    now = time.time_ns()
    clk = host_clock(HostClockSkew(rank=1, offset_ns=3_000_000, drift_ppm=50.0, origin_ns=now), 1)
    assert 2_900_000 < clk() - time.time_ns() < 3_100_000  # skewed
    assert host_clock(sk, 0) is host_clock(None, 1)  # untouched ranks read time.time_ns
    st = host_clock_state(refresh=True)
    assert st["clock"] == "CLOCK_REALTIME" and "sync" in st
    print("\nthis host's clock:", describe_host_clock(st))
    assert describe_host_clock(None) == "not recorded"


def test_samples_marked_check_are_not_used_unless_asked():
    cap, truth = chain_capture()
    # give rank 2 a (CONSTRUCTED) check ping-pong against rank 0: the simulation's ground truth
    rng = np.random.default_rng(1)
    cs = cap.ranks[2].clock_samples
    cs["pingpong"] = [dict(_ntp(rng, lambda t: _dev(0, t), lambda t: _dev(2, t), t0, 2000, 600, 400, 5000), ref_rank=0, peer=2,
                           phase=ph, check=True) for ph, t0 in (("before", T_START - 30_000_000), ("after", T_START + GAP))]
    assert fit_clock(cap).rank(2).method == "host-chain"
    truth_model = fit_clock(cap, prefer="pingpong")
    assert truth_model.rank(2).method == "pingpong+drift" and truth_model.rank(3).method == "pingpong+drift"
    assert [n for n, _ in truth_model.rank(3).legs] == ["pingpong r0-r2", "pingpong r2-r3"]
    assert abs(_rank_errors(cap, truth, truth_model)[2]) <= truth_model.rank(2).error_bound_ns


def test_rank_clock_fields_have_defaults():
    rc = RankClock(rank=0, tick_hz=10**9, pivot_dev_ns=0, pivot_ns=0)
    assert rc.node == "" and rc.legs == () and math.isnan(rc.host_offset_ns) and rc.error_bound_ns == 0.0


def test_gpu_host_kernel_compiles_to_acquire_loads_and_a_release_store():
    """The GPU side of the pinned-memory exchange: system-scope acquire reads of the host's word,
    a plain release store back (no atomic: PCIe hosts need not support them), two timer reads."""
    from ktrace.clock.calibrate import _gpu_host_kernel
    from ktrace.testing.compile import TARGETS, compile_asm

    asm = compile_asm(_gpu_host_kernel, {"flags": "*i32", "out": "*i64", "rounds": "i32"}, {"TIMEOUT_NS": 10**10},
                      TARGETS["sm_90"], num_warps=1)
    assert "ld.acquire.sys.global.b32" in asm and "st.release.sys.global.b32" in asm
    assert asm.count("%globaltimer") >= 3 and "atom." not in asm
