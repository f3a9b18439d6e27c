"""The phrases every kind's ``describe`` shares: launches, programs, savings (with their claims).

Each helper that states something returns the claims behind it too, so a kind cannot write a
sentence that is not also data (``Description.claims``).
"""

from __future__ import annotations

import numpy as np

from ...text import fmt_ns, ranges_text, ranks_text
from .model import Cause, Claim, Context


def share_text(saving: float, total: float) -> str:
    """A saving as a share of the capture's kernel time (``ktrace.text.MEASURES``): "19% of its kernel time"."""
    return f"{100 * saving / total:.0f}% of its kernel time" if total > 0 else "of its kernel time"


def launches_text(n: int, of: int) -> str:
    return f"in {n:,} of {of:,} launch{'es' if of != 1 else ''}"


def progs_text(progs, limit: int = 8) -> str:
    """``[5]`` -> "program 5"; ``[2, 3, 4, 5]`` -> "programs 2-5"; many -> the first runs and a count."""
    ps = sorted({int(p) for p in progs})
    if len(ps) == 1:
        return f"program {ps[0]}"
    runs = ranges_text(ps, 3).split(", ")
    if len(runs) <= limit:
        return f"programs {', '.join(runs)}"
    shown = runs[:limit]
    n_shown = sum(int(r.split("-")[1]) - int(r.split("-")[0]) + 1 if "-" in r else 1 for r in shown)
    return f"programs {', '.join(shown)} and {len(ps) - n_shown} more"


def agent_text(rank: int, programs, world_size: int) -> str:
    """"rank 1 program 2" / "rank 0 programs 0-3": the agents a finding names."""
    return f"rank {rank} {progs_text(programs)}"


def agents(rank: int, programs, launch: int = -1, lane: int = 0) -> tuple:
    """Claim agents ``(rank, launch, program, lane)`` of one rank's programs (lane 0: the program
    itself, in a capture of one lane per program)."""
    return tuple((int(rank), int(launch), int(p), int(lane)) for p in sorted({int(p) for p in programs}))


def lane_text(trace, c: Cause, lanes) -> str:
    """" lane 1 (load)": the lane of a cause's programs that is the agent, by its partition's name
    (empty when the programs have one lane)."""
    if not lanes:
        return ""
    from ..lanes import lane_name

    ln = int(lanes[0])
    name = lane_name(trace, c.rank, int(c.launches.min()), ln)
    return f" lane {ln}" + (f" ({name})" if name != f"lane {ln}" else "")


def rounds_claim(kind: str, named: tuple, c: Cause, trace, **more) -> Claim:
    """The claim of a cause about some rounds of one call site (``late_notifies``, ``straggler``:
    their details share these fields)."""
    d = c.detail
    return Claim(kind, named, {"launches": [int(x) for x in c.launches.tolist()], "region": trace.region_name(d.region_id),
                               "region_id": d.region_id, "rounds": list(d.rounds), "n_late": d.n_late,
                               "n_notifies": d.n_notifies, "magnitude_ns": d.magnitude_ns, "max_ns": d.max_ns,
                               "baseline_ns": d.baseline_ns, **more})


def worst_in_first_launch(ctx: Context, c: Cause, all_rows: np.ndarray, rows, value: np.ndarray) -> int | None:
    """The position in ``all_rows`` (sorted event rows, e.g. every notify's) of the cause's row
    (``rows``) with the largest ``value`` in the cause's first launch (what a finding's range
    shows); None when it has none."""
    rows = np.asarray(rows, np.int64)
    if rows.size == 0:
        return None
    pos = np.searchsorted(all_rows, rows)
    in_first = ctx.trace.column("launch")[rows] == int(c.launches.min())
    pos = pos[in_first] if in_first.any() else pos
    return int(pos[np.argmax(value[pos])])


#: Agents a claim lists one by one at most (beyond: the first ones, and ``n_agents`` says how many).
MAX_AGENTS = 2000


def workgroup_agents(wg, ids) -> tuple[tuple, int]:
    """``(agents, how many)`` of workgroups ``ids`` of a workgroups table: ``(rank, launch, program, 0)``
    each, the first :data:`MAX_AGENTS` of them."""
    ids = np.asarray(ids, np.int64)
    k = ids[:MAX_AGENTS]
    return tuple((int(r), int(l), int(p), 0) for r, l, p in zip(wg["rank"][k].tolist(), wg["launch"][k].tolist(),
                                                              wg["program"][k].tolist())), int(ids.size)


def saving_text(c: Cause, what: str, ctx: Context, named: tuple = (),
                why_not: tuple[str, str, dict] = ("other work ends at the same time", "not_shorter", {})
                ) -> tuple[str, list[Claim]]:
    """"<what>, the capture would be X (Y% of its kernel time) shorter per launch" and its
    consequences, with their claims (``named``: the agents the cause is about; ``why_not``: what
    to say, and claim, when it would save nothing)."""
    total = ctx.kernel_time_ns
    n = max(int(c.launches.size), 1)
    per = c.saving_ns / n
    claims = []
    mag = float(getattr(c.detail, "magnitude_ns", 0.0) or 0.0)
    launches = [int(x) for x in c.launches.tolist()]
    if c.saving_ns <= 0:
        text = f"{what}, the capture would not be shorter: {why_not[0]}."
        claims.append(Claim(why_not[1], named, {"launches": launches, "magnitude_ns": mag, **why_not[2]}))
    else:
        text = (f"{what}, the capture would be {fmt_ns(per)} shorter per launch ({fmt_ns(c.saving_ns)} in all, "
                f"{share_text(c.saving_ns, total)})")
        text += "." if c.saving_launches >= n else f"; shorter in {c.saving_launches:,} of those launches."
        claims.append(Claim("saving", named, {"launches": launches, "saving_ns": float(c.saving_ns),
                                              "saving_per_launch_ns": float(per)}))
    if c.waiting_removed_ns > 0 and c.waits_affected:
        text += (f" With it go {fmt_ns(c.waiting_removed_ns)} of waiting by {c.waits_affected:,} waits on "
                 f"{ranks_text(c.waiting_ranks)}.")
        claims.append(Claim("waiting_removed", named, {"waiting_ns": float(c.waiting_removed_ns),
                                                       "waits": int(c.waits_affected),
                                                       "ranks": [int(r) for r in c.waiting_ranks]}))
    if c.sampled and c.sampled < c.launches.size:
        text += f" (Priced by replaying {c.sampled} of its {c.launches.size:,} launches.)"
    if not c.converged:
        text += " (The replay did not settle: an estimate.)"
    return text, claims


__all__ = ["MAX_AGENTS", "agent_text", "agents", "lane_text", "rounds_claim", "worst_in_first_launch", "workgroup_agents", "launches_text", "progs_text", "saving_text", "share_text"]
