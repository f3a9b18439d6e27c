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
    from ktrace.analysis import trace as T

    if request.param == "small-blocks":
        monkeypatch.setattr(T, "BLOCK_EVENTS", 40)
    elif request.param == "narrow-keys":
        monkeypatch.setattr(T, "KEY_LIMIT", 1 << 8)
    else:
        monkeypatch.setattr(T, "LARGE", 0)
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
