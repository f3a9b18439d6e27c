"""The report is a closed document: its text and HTML made from the JSON alone are the ones made
from the report itself, and every finding's link and range come with it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ktrace.analysis import build_report, render_text, report_json
from ktrace.analysis.document import link_range, load

ROOT = Path(__file__).resolve().parents[2]
CASES = ["tests/fixtures/scenarios/w1_handoff_late_tiles.ktrace", "tests/fixtures/scenarios/hang.ktrace",
         "ktrace/data/a2a_skewed_4xh200.ktrace"]


@pytest.mark.parametrize("path", CASES)
def test_text_and_html_from_the_json_alone(path):
    from viewers.report import render_html

    rep = build_report(str(ROOT / path))
    doc = orjson.loads(orjson.dumps(report_json(rep)))  # what `ktrace report --json` writes, read back
    assert render_text(doc) == render_text(rep)
    assert render_html(doc) == render_html(rep)
    assert load(doc) is doc
    for f in doc["findings"]:
        assert f["label"] and isinstance(f["claims"], list)
        if f["start_ns"] is not None and f["end_ns"] is not None:
            lo, hi = link_range(f["start_ns"], f["end_ns"], doc["summary"]["trace_end_ns"])
            assert f"visStart={lo}" in f["perfetto"] and f"visEnd={hi}" in f["perfetto"]


def test_not_a_report_document():
    with pytest.raises(ValueError):
        load({"format": "something else"})


def test_the_report_never_builds_the_full_event_table():
    """A report of a capture reads the columns it needs: the full table (every field of every
    event, several times the raw buffers at 10 M events) is never built, JSON and claims included."""
    rep = build_report(str(ROOT / "tests/fixtures/scenarios/w1_handoff_late_tiles.ktrace"))
    report_json(rep)
    render_text(rep)
    assert rep.trace._events is None
