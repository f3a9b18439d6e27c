"""The report on the one-GPU scenario captures (producer and consumer programs of one rank,
recorded on an H100: ``tests/fixtures/scenarios/w1_*``, see its README): the first finding names
the injected cause, at the level of the agent (rank, program) that caused it, with the rounds
(tiles) and the magnitude within 10 %, and prices it within 10 % of the time injected; the
healthy captures say nothing is wrong. What was injected is read from each capture's
``.scenario.json``, written by the recording script."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ktrace.analysis import build_report
from viewers.text import render_text

SCEN = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios"
W1 = sorted(p.name[: -len(".scenario.json")] for p in SCEN.glob("w1_*.scenario.json"))
REPORTS: dict = {}


def _report(name: str):
    if name not in REPORTS:
        REPORTS[name] = build_report(SCEN / f"{name}.ktrace")
    return REPORTS[name]


def _injected(name: str) -> dict:
    return json.loads((SCEN / f"{name}.scenario.json").read_text())["injected"]


def _within(got: float, want: float, rel: float = 0.1) -> bool:
    return abs(got - want) <= rel * want


def _per_launch(f) -> float:
    return f.data["saving_ns"] / f.data["n_launches"]


def test_the_one_gpu_scenarios_are_here():
    assert {"w1_handoff_healthy", "w1_handoff_late_tiles", "w1_handoff_heavy", "w1_handoff_skip", "w1_handoff_late_start",
            "w1_counter_healthy", "w1_counter_late"} <= set(W1)


@pytest.mark.parametrize("name", [n for n in W1 if _injected(n)["kind"] == "none"])
def test_healthy_says_nothing_is_wrong(name):
    rep = _report(name)
    assert rep.summary["healthy"] and rep.summary["verdict"].startswith("Nothing is wrong"), render_text(rep)
    assert rep.summary["world_size"] == 1


@pytest.mark.parametrize("name", [n for n in W1 if _injected(n)["kind"] == "late_notifies"])
def test_held_tiles_named_by_program_rounds_and_hold(name):
    """Program P of the only rank held tiles T back D each: the first finding says so (the counter
    capture too: its waits, on a counter three producers add to, are released in the replay by
    the add that completed them)."""
    inj, rep = _injected(name), _report(name)
    f = rep.findings[0]
    assert f.kind == "late_notifies" and f.severity == "warning", render_text(rep)
    assert f.data["rank"] == inj["rank"] and f.data["programs"] == inj["programs"]
    assert f.data["rounds"] == inj["tiles"]
    assert _within(f.data["magnitude_ns"], inj["delay_ns"]), f.text
    assert _within(_per_launch(f), inj["injected_ns"]), f.text
    assert f.text.startswith(f"rank {inj['rank']} program {inj['program']} notified late")
    rounds = "rounds " + "-".join(str(t) for t in (inj["tiles"][0], inj["tiles"][-1]))
    assert rounds in f.text and "40.0 µs each" in f.text


def test_heavy_program_named_with_its_extra_work():
    name = "w1_handoff_heavy"
    inj, rep = _injected(name), _report(name)
    f = rep.findings[0]
    assert f.kind == "uneven_work" and f.severity == "warning", render_text(rep)
    assert f.data["programs"] == {inj["rank"]: [inj["program"]]} and f.data["region"] == inj["region"]
    assert _within(f.data["magnitude_ns"], inj["injected_ns"]), f.text  # the extra work per launch
    assert _within(_per_launch(f), inj["injected_ns"]), f.text
    assert f"rank {inj['rank']} program {inj['program']} worked" in f.text and "(handoff producers)" in f.text


def test_late_program_start_named():
    name = "w1_handoff_late_start"
    inj, rep = _injected(name), _report(name)
    f = rep.findings[0]
    assert f.kind == "late_start" and f.severity == "warning", render_text(rep)
    assert f.data["rank"] == inj["rank"] and f.data["programs"] == inj["programs"]
    assert _within(f.data["magnitude_ns"], inj["injected_ns"]), f.text
    assert _within(_per_launch(f), inj["injected_ns"]), f.text
    assert f.text.startswith(f"rank {inj['rank']} program {inj['program']} started late")


def test_skipped_notify_hang_names_the_programs_and_the_tile():
    """Program 4 never signals tile 10: program 5 gives up at its bound (5 ms). The producer
    program is named (it released the consumer's other waits), with what it was doing: nothing (it
    had ended), not "itself stuck waiting"."""
    name = "w1_handoff_skip"
    inj, rep = _injected(name), _report(name)
    f = rep.findings[0]
    assert f.kind == "hang" and f.severity == "error", render_text(rep)
    assert f.data["programs"] == [inj["program"]] and f.data["round"] == inj["tile"]
    assert f.data["senders"] == [inj["producer_program"]] and not f.data["stuck"]
    assert _within(f.data["waited_ns"], inj["injected_ns"]) and _within(_per_launch(f), inj["injected_ns"]), f.text
    assert re.search(rf"rank 0 program {inj['program']} \(SM \d+\) waited \(its wait of round {inj['tile']} there\)", f.text)
    assert f"rank 0 program {inj['producer_program']} (which released its other waits) was not waiting" in f.text
    assert "stuck" not in f.text


@pytest.mark.parametrize("name", W1)
def test_no_rank_sentences_at_one_rank(name):
    """At one rank nothing is said to cross ranks, and no rank is compared with another."""
    text = render_text(_report(name))
    assert "crosses ranks" not in text and "other ranks" not in text and "launched late" not in text, text
