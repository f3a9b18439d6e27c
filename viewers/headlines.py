"""One line per finding, made from the report document alone: who, what, how much, what a fix saves.

A report's first screen (HTML and terminal) is the verdict and at most :data:`FIRST` headlines;
each headline is at most :data:`WIDTH` characters: a *what* part (the agent and the size of what it
did, from the finding's label and data) and a *saving* part (the finding's replay: how much shorter
each launch would be without the cause, and its share of the capture's kernel time). Both parts
restate numbers the finding's own text states (and its claims check); nothing here is computed
from the trace.
"""

from __future__ import annotations

from ktrace.text import fmt_ns, printable, ranges_text

#: Headlines on a first screen.
FIRST = 3
#: The longest headline, in characters.
WIDTH = 100
#: Finding kinds that name a root cause (a culprit to draw and a saving to state).
CAUSES = ("hang", "late_launch", "late_start", "late_notifies", "straggler", "uneven_work", "uneven_ranks", "slow_link",
          "lane_holdup")
#: What to do next, per kind (the long form: docs/reading-a-report.md).
NEXT = {
    "hang": "Find why the producer never sent: the notify it skipped, or the wait it is stuck in itself.",
    "late_launch": "Release the ranks together: a device-side barrier last on each stream before the launch.",
    "late_start": "Look at what ran before the late program (SM occupancy, a preceding kernel on its stream).",
    "late_notifies": "Move the notify earlier in the producer, or split the work before it into smaller pieces.",
    "straggler": "Look at the producer's own time: its regions, its SM, what it waited for itself.",
    "uneven_work": "Spread the work items over the workgroups more evenly (or split the heavy ones).",
    "uneven_ranks": "Balance the work between ranks (the routing, the shard sizes).",
    "slow_link": "Check the path between the two GPUs (NVLink, PCIe, host memory) and the flag's placement.",
    "lane_holdup": "Look at the partition that held the others: its own waits and work.",
}


def _pct(share) -> str:
    if share is None:
        return ""
    p = 100.0 * float(share)
    return f" ({p:.0f}%)" if p >= 1 else " (<1%)"


def _what(f: dict) -> str:
    d = f.get("data") or {}
    kind, label = f["kind"], printable(f.get("label") or f["kind"])
    mag = d.get("magnitude_ns")
    if kind == "hang":
        return f"{label} for {fmt_ns(mag)}" if mag else label
    if kind in ("late_launch", "late_start") and mag:
        who = label.rsplit(" launched late", 1)[0].rsplit(" started late", 1)[0]
        verb = "launched" if kind == "late_launch" else "started"
        many = d.get("min_ns") is not None and d.get("max_ns") is not None and d["min_ns"] != d["max_ns"]
        return f"{who} {verb} {fmt_ns(mag)} late" + (" (median)" if many else "")
    if kind == "uneven_work" and d.get("work_ns") and d.get("median_work_ns"):
        progs = d.get("programs") or {}
        n = d.get("n_workgroups")
        if label.startswith("uneven work: "):
            who = label[len("uneven work: "):]
        elif len(progs) == 1:  # one rank: name it (and its programs, when few)
            (r, ps), = progs.items()
            who = f"rank {r} program{'s' if len(ps) > 1 else ''} {ranges_text(ps)}" if len(ps) <= 4 else \
                f"{len(ps):,} workgroups of rank {r}"
        else:
            who = f"{n:,} workgroups" if n else "some workgroups"
        where = f", extra in '{printable(d['region'])}'" if d.get("region") else ""
        return f"{who} worked {d['work_ns'] / d['median_work_ns']:.1f}x the median{where}"
    if kind == "uneven_ranks" and d.get("ratio") and d.get("light_rank") is not None:
        heavy = d.get("heavy") or [d.get("rank")]
        who = "rank " + ", ".join(map(str, heavy)) if len(heavy) <= 3 else f"{len(heavy)} ranks"
        return f"{who} worked {float(d['ratio']):.1f}x rank {d['light_rank']}"
    if kind in ("late_notifies", "straggler", "slow_link") and mag:
        return f"{label} by {fmt_ns(mag)}"
    if kind == "lane_holdup" and d.get("worst_ns") and d.get("waiter"):
        return (f"{printable(d.get('partition') or label)} held up {printable(d['waiter'])} "
                f"{fmt_ns(d['worst_ns'])} (program {d.get('program')}, launch {d.get('launch')})")
    if kind in CAUSES:
        return label
    if kind == "diff":  # a mover of ``ktrace diff``: its text up to the numbers in brackets
        return printable(f.get("text") or "").split(" (")[0].rstrip(".")
    cost = f.get("cost_ns") or 0
    return f"{label}: {fmt_ns(cost)}" if cost and kind != "critical_path" else label


def _saving_ns(f: dict) -> float | None:
    """What the replay prices a cause's fix at per launch (0 for nothing); None for a finding
    without a price (not a cause, or a cause the replay does not price)."""
    d = f.get("data") or {}
    if f["kind"] not in CAUSES or "saving_per_launch_ns" not in d:
        return None
    return d["saving_per_launch_ns"] or 0.0


def _saving(f: dict) -> str:
    s = _saving_ns(f)
    if s is None:
        return ""
    if s <= 0:
        return "a fix would not shorten launches"
    return f"fix saves {fmt_ns(s)} per launch{_pct((f.get('data') or {}).get('share'))}"


def parts(f: dict) -> tuple[str, str]:
    """A finding's headline as (what, saving); together at most :data:`WIDTH` characters."""
    what, saving = _what(f), _saving(f)
    room = WIDTH - (len(saving) + 3 if saving else 0)
    if len(what) > room:
        what = what[: room - 1].rstrip() + "…"
    return what, saving


def headline(f: dict) -> str:
    """A finding (the document's dict) in one line of at most :data:`WIDTH` characters."""
    what, saving = parts(f)
    return f"{what} · {saving}" if saving else what


def _worth_a_headline(f: dict) -> bool:
    """Hangs, warnings, a diff's movers, and root causes whose fix would save time: a cause the
    replay prices at nothing per launch ("a fix would not shorten launches") is left to the full
    list, so a healthy capture's first screen is its verdict."""
    if f["kind"] == "diff" or f["severity"] in ("error", "warning"):
        return True
    if f["kind"] not in CAUSES:
        return False
    s = _saving_ns(f)
    return s is None or s > 0


def first(doc: dict, n: int = FIRST) -> list[dict]:
    """The findings a first screen shows: the first ``n`` worth a headline (hangs first, as the
    report orders them); information such as exposed communication is left to the full list."""
    return [f for f in doc.get("findings") or [] if _worth_a_headline(f)][:n]


__all__ = ["CAUSES", "FIRST", "NEXT", "WIDTH", "first", "headline", "parts"]
