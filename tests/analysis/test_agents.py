"""Held-back notifies judged per agent, whatever the ranks do (CONSTRUCTED event tables:
``ktrace.analysis.scenario``, no GPU recorded them)."""

from __future__ import annotations

import numpy as np
import numpy.lib.recfunctions as rfn

from ktrace.analysis import Trace, scenario
from ktrace.analysis.stalls import notify_holds
from ktrace.analysis.trace import agent_keys, agent_of
from ktrace.schema import EventKind

D = 30_000


def _hold_tiles(ev: np.ndarray, tiles: set, ranks: set) -> np.ndarray:
    """Every notify of those tiles on those ranks starts ``D`` later, and so does everything its
    program records after it (a producer that spun before notifying)."""
    ev = np.sort(ev, order=["rank", "launch", "program", "slot"])
    out = ev.copy()
    shift = np.zeros(ev.size, np.int64)
    held = (ev["kind"] == EventKind.NOTIFY) & np.isin(ev["arg3"], list(tiles)) & np.isin(ev["rank"], list(ranks))
    key = ev["rank"].astype(np.int64) * 1000 + ev["program"]
    for k in np.unique(key).tolist():
        rows = np.flatnonzero(key == k)
        shift[rows] = np.cumsum(held[rows]) * D
        # (the notify itself moves: its own hold counts from the event before it)
    for c in ("start_ns", "end_ns", "start", "end"):
        out[c] = ev[c] + shift
    return out


def _trace(ev: np.ndarray, world: int) -> Trace:
    return Trace(events=ev, regions=scenario.REGIONS, world_size=world,
                 kernels={(r, 0): "a2a_constructed" for r in range(world)}, source="constructed")


def test_every_rank_late_on_the_same_tiles_is_still_late():
    """Both ranks hold tiles 1 and 4 back: no rank is late against the other, every program is
    against its own other rounds."""
    ev = _hold_tiles(scenario.build(scenario.Scenario(world=2, programs=4, iters=6)), {1, 4}, {0, 1})
    h = notify_holds(_trace(ev, 2))
    n = np.flatnonzero(ev["kind"] == EventKind.NOTIFY)
    late = np.isin(ev["arg3"][n], [1, 4])
    assert (np.abs(h["held_excess_ns"][late] - D) <= 0.05 * D).all(), h["held_excess_ns"][late]
    assert (np.nan_to_num(h["held_excess_ns"][~late]) < 1_000).all()


def test_a_rank_late_on_every_tile_is_late_against_its_peers():
    """One rank holds every notify back: its programs' own rounds agree, the role's do not."""
    ev = _hold_tiles(scenario.build(scenario.Scenario(world=4, programs=4, iters=3)), {0, 1, 2}, {2})
    h = notify_holds(_trace(ev, 4))
    mine = h["rank"] == 2
    assert (np.abs(h["held_excess_ns"][mine] - D) <= 0.05 * D).all()
    assert (np.nan_to_num(h["held_excess_ns"][~mine]) < 1_000).all()


def test_lanes_are_agents_when_the_events_say_so():
    """A capture whose events carry a lane column: (rank, launch, program, lane) are distinct agents,
    and a lane's held rounds are judged against that lane's own."""
    ev = scenario.build(scenario.Scenario(world=2, programs=2, iters=4))
    t0 = _trace(ev, 2)
    rows = t0.rows_of(EventKind.NOTIFY)
    assert (agent_keys(t0, agent_of(t0, rows))[:, 3] == 0).all()  # no lane column: lane 0
    lane = np.arange(ev.size) % 2  # (alternate rows: every program gets both lanes)
    if "lane" in ev.dtype.names:  # (the event dtype carries lanes: every row lane 0 so far)
        ev2 = ev.copy()
        ev2["lane"] = lane
    else:
        ev2 = rfn.append_fields(ev, "lane", lane.astype(np.int32), usemask=False)
    t = _trace(ev2, 2)
    rows = t.rows_of(EventKind.NOTIFY)
    keys = agent_keys(t, agent_of(t, rows))
    assert set(keys[:, 3].tolist()) == {0, 1}
    assert (keys[:, :3] == t.wg_keys[t.wg[rows]]).all()
    # two lanes of one program are two agents
    assert np.unique(agent_of(t, rows)).size > np.unique(t.wg[rows]).size
