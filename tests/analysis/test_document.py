"""The report is a closed document: its text and HTML made from the JSON alone are the ones made
from the report itself, and every finding's link and range come with it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ktrace.analysis import build_report, report_json
from viewers.text import render_text
from ktrace.analysis.document import FORMAT, VERSION, Claim, Finding, ReportDocument, Summary, dump, load
from ktrace.links import link_range

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
    typed = load(doc)
    assert isinstance(typed, ReportDocument) and isinstance(typed.summary, Summary)
    assert all(isinstance(f, Finding) and all(isinstance(c, Claim) for c in f.claims) for f in typed.findings)
    assert load(typed) is typed
    # one load, one dump: the JSON read back and written again is the same bytes, key order included
    assert orjson.dumps(dump(typed)) == orjson.dumps(doc)
    for f in doc["findings"]:
        assert f["label"] and isinstance(f["claims"], list)
        if f["start_ns"] is not None and f["end_ns"] is not None:
            lo, hi = link_range(f["start_ns"], f["end_ns"], doc["summary"]["trace_end_ns"])
            assert f"visStart={lo}" in f["perfetto"] and f"visEnd={hi}" in f["perfetto"]


def test_not_a_report_document():
    with pytest.raises(ValueError):
        load({"format": "something else"})


def test_a_version_it_does_not_read_is_refused_in_one_line(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(orjson.dumps({"format": FORMAT, "version": VERSION + 1, "findings": []}).decode())
    with pytest.raises(ValueError, match=f"version {VERSION + 1}.*reads version {VERSION}") as e:
        load(str(p))
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_one_schema_version():
    """The version the report writes is the one document module's constant (no second copy)."""
    rep = build_report(str(ROOT / CASES[0]))
    d = report_json(rep)
    assert (d["format"], d["version"]) == (FORMAT, VERSION) and list(d)[:2] == ["format", "version"]


def test_the_report_never_builds_the_full_event_table():
    """A report of a capture reads the columns it needs: the full table (every field of every
    event, several times the raw buffers at 10 M events) is never built, JSON and claims included."""
    rep = build_report(str(ROOT / "tests/fixtures/scenarios/w1_handoff_late_tiles.ktrace"))
    report_json(rep)
    render_text(rep)
    assert rep.trace._events is None
