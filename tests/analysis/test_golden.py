"""The analyses give the results recorded in ``golden_report.json`` (see ``make_golden.py``).

Every table of every report (all rows, by digest), the findings' text and the summary of each
CONSTRUCTED case must match exactly: a rewrite for speed may not change any result.
"""

from __future__ import annotations

import orjson
import pytest

from . import make_golden

_GOLDEN = orjson.loads(make_golden.GOLDEN.read_bytes())
_NOW: dict = {}


def _now() -> dict:
    if not _NOW:
        _NOW.update(make_golden.results())
    return _NOW


def test_golden_covers_every_case():
    assert sorted(_GOLDEN) == sorted(list(make_golden.cases()) + ["diff"])


@pytest.mark.parametrize("case", sorted(_GOLDEN))
def test_same_results_as_recorded(case):
    want, got = _GOLDEN[case], _now()[case]
    assert got["summary"] == want["summary"]
    for tname, t in want["tables"].items():
        assert got["tables"][tname] == t, (
            f"{case}: table {tname!r} changed (python tests/analysis/make_golden.py --dump DIR to see it)")
    assert sorted(got["tables"]) == sorted(want["tables"])
    assert [f["text"] for f in got["findings"]] == [f["text"] for f in want["findings"]]
    assert got["findings"] == want["findings"]


@pytest.fixture(params=["small-blocks", "narrow-keys", "large-paths"])
def general_paths(request, monkeypatch):
    """The code paths that large or unusual captures take, forced on the small cases: blocks of a
    few workgroups (span lookups, leaf spans), integer keys too narrow to pack (the sorts and
    searches fall back to row-wise ones), and the paths taken only by long arrays (packed sorts,
    selection for few groups)."""
    from ktrace import keys
    from ktrace.analysis import spans

    if request.param == "small-blocks":
        monkeypatch.setattr(spans, "BLOCK_EVENTS", 40)
    elif request.param == "narrow-keys":
        monkeypatch.setattr(keys, "KEY_LIMIT", 1 << 8)
    else:
        monkeypatch.setattr(keys, "LARGE", 0)
    return request.param


def test_general_paths_give_the_same_results(general_paths):
    got = make_golden.results()
    for case, want in _GOLDEN.items():
        assert got[case]["summary"] == want["summary"], f"{general_paths}: {case}"
        for tname, t in want["tables"].items():
            assert got[case]["tables"][tname] == t, f"{general_paths}: {case}: table {tname!r} changed"
        assert got[case]["findings"] == want["findings"], f"{general_paths}: {case}"


def test_unsorted_table_gives_the_same_results():
    """A table handed over in another row order is sorted first: the same report as the sorted one."""
    import numpy as np

    from ktrace.analysis import build_report

    src = make_golden.cases()["jitter"]
    shuffled = src.events[np.random.default_rng(3).permutation(src.events.size)]
    rep = build_report(make_golden._trace(shuffled, 4))
    for tname, t in _GOLDEN["jitter"]["tables"].items():
        rows = make_golden._full(rep.tables[tname])
        assert {"rows": len(rows), "sha256": make_golden._digest(rows)} == t, tname


def test_one_worker_gives_the_same_results():
    """The analyses run one after another (``workers=1``) give what two threads give."""
    from ktrace.analysis import ReportConfig

    got = make_golden.results(config=ReportConfig(workers=1))
    for case, want in _GOLDEN.items():
        assert got[case]["tables"] == want["tables"], case
        assert got[case]["findings"] == want["findings"], case


def _tables_of(rep) -> dict:
    out = {}
    for tname, t in rep.tables.items():
        rows = make_golden._full(t)
        out[tname] = {"rows": len(rows), "sha256": make_golden._digest(rows)}
    return out


def _as_capture(table):
    from ktrace.analysis import scenario as S

    return S.to_capture(table, regions=S.REGIONS)


@pytest.mark.parametrize("case", ["late-20us", "skewed-work", "skipped-two", "launches-late", "jitter", "counter",
                                  "low-expected"])
def test_capture_path_gives_the_same_results(case):
    """The same constructed table encoded into event buffers (a ``Capture``): the columns decoded
    straight from the buffers give every table and finding of the aligned-table path."""
    from ktrace.analysis import build_report, prepare

    tr = prepare(_as_capture(make_golden.cases()[case].events), name="constructed")
    assert tr._events is None  # no aligned table was built
    rep = build_report(tr)
    assert _tables_of(rep) == _GOLDEN[case]["tables"]
    assert [f["text"] for f in make_golden.report_json(rep)["findings"]] == [f["text"] for f in _GOLDEN[case]["findings"]]


def test_capture_with_launches_out_of_order_gives_the_same_results():
    """Launches listed out of order in a capture: the rows are sorted (whole-table path), same report."""
    from ktrace.analysis import build_report, prepare

    cap = _as_capture(make_golden.cases()["launches-late"].events)
    for rc in cap.ranks.values():
        rc.launches.reverse()
    tr = prepare(cap)
    assert tr._events is not None
    assert _tables_of(build_report(tr)) == _GOLDEN["launches-late"]["tables"]


def test_event_table_of_a_prepared_capture(tmp_path):
    """``Trace.events`` of a trace prepared from a capture (or its file) is the aligned table,
    built on first use; a file changed since raises."""
    import numpy as np

    from ktrace.analysis import AnalysisError, prepare
    from ktrace.events import aligned_events
    from ktrace.captures.file import write_capture

    cap = make_golden.cases()["synth-capture"]
    want = aligned_events(cap)
    tr = prepare(cap)
    assert tr.n_events == want.size and tr._events is None
    assert np.array_equal(tr.events, want)
    for c in ("rank", "program", "kind", "region", "start_ns", "end_ns"):
        assert np.array_equal(tr.column(c), want[c]), c
    path = tmp_path / "c.ktrace"
    write_capture(path, cap)
    tr = prepare(path)
    from ktrace.captures.synth import constructed_capture

    write_capture(path, constructed_capture(world_size=3, programs=5, iters=3)[0])
    with pytest.raises(AnalysisError, match="changed since it was prepared"):
        tr.events
    write_capture(path, _as_capture(make_golden.cases()["late-20us"].events))  # 4 ranks: not on this clock model
    with pytest.raises(AnalysisError, match="cannot rebuild the event table"):
        tr.events
    write_capture(path, cap)
    assert np.array_equal(tr.events, want)
