"""A ktrace capture inside the PyTorch profiler's timeline (``ktrace merge --with-profile``).

The fixture (``tests/fixtures/profile/``, remade by ``tests/fixtures/make_profile_fixture.py``) is a
real run on an H100: three steps of a small model (linear, ReLU) calling two traced Triton kernels,
recorded by ``torch.profiler`` (CPU + CUDA) and ``ktrace.capture(profiler=prof)`` at once. Checked:
the pairing of each traced launch with its CUPTI kernel record (by correlation and, without the
profiler ranges, by name and order: the same records), the fitted clock (every launch inside its
kernel record, the residual stated), refusals of files that do not belong together (one line,
exit status 2), and the merged trace in Perfetto's own trace processor (every traced event inside
its CUPTI kernel's slice: SQL) and in the real UI (screenshots kept in ``tests/artifacts/``).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import ktrace
from ktrace.captures import read_capture
from ktrace.cli import main
from ktrace.export.profile import ProfileMismatch, align_capture, launch_spans, profiles_of, read_profile
from ktrace.testing.perfetto import TraceProcessorHost, ui_unavailable_reason, unavailable_reason

FIX = Path(__file__).resolve().parent / "fixtures" / "profile"
CAPTURE = FIX / "step.ktrace"
PROFILE = FIX / "step.kineto.json.gz"
DATA = Path(ktrace.__file__).parent / "data"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts" / "perfetto"


def _profiles():
    cap = read_capture(CAPTURE)
    return cap, profiles_of(cap, None, CAPTURE)


def _without(prof, rows):
    """The profile without the events at ``rows``."""
    keep = np.ones(prof.size, bool)
    keep[rows] = False
    return dataclasses.replace(prof, **{f.name: getattr(prof, f.name)[keep] for f in dataclasses.fields(prof)
                                        if isinstance(getattr(prof, f.name), np.ndarray)})


def test_fixture_is_small_and_names_its_profile():
    assert CAPTURE.stat().st_size + PROFILE.stat().st_size < 200_000
    cap = read_capture(CAPTURE)
    assert cap.meta["profile"] == {"0": PROFILE.name}  # written by ktrace.capture(profiler=prof).save
    assert [ln.kernel for ln in cap.ranks[0].launches] == ["copy_kernel", "shape_kernel"] * 3


def test_each_launch_pairs_with_its_cupti_kernel_and_sits_inside_it():
    cap, profs = _profiles()
    prof = profs[0]
    al = align_capture(cap, profs)[0]
    assert al.matched_by.startswith("correlation") and al.launches == 6
    # the pairs: each launch's kernel record has its name, one per launch, in launch order
    assert prof.name[al.kernel_rows].tolist() == [ln.kernel for ln in cap.ranks[0].launches]
    assert np.all(np.diff(prof.start_ns[al.kernel_rows]) > 0)
    # after the fit, every launch's events lie inside its kernel record: checked here directly
    spans = launch_spans(cap)[0]
    a = al.to_common(prof.start_ns[al.kernel_rows])
    b = al.to_common(prof.end_ns[al.kernel_rows])
    first = np.array([s[0] for s in spans])
    last = np.array([s[1] for s in spans])
    assert al.outside_ns == 0 and np.all(first >= a) and np.all(last <= b)
    # the stated bound is the residual of the launches' middles about the fit, and small against
    # the kernels (~1.2-1.6 µs)
    mid_k = (a + b) // 2
    mid_e = (first + last) // 2
    off = (mid_k - mid_e) - np.median(mid_k - mid_e)
    assert 0 <= al.residual_ns < 200
    assert np.abs(off).max() <= 2 * al.residual_ns + 64  # (launch-to-first-probe lags differ per kernel)
    assert "bound ±" in al.describe() and "every traced launch inside" in al.describe()


def test_order_matching_finds_the_same_kernels():
    """Without the profiler ranges (a capture made without ``profiler=``), name and order per
    stream pair the same records."""
    cap, profs = _profiles()
    by_corr = align_capture(cap, profs)[0]
    prof = profs[0]
    stripped = _without(prof, np.flatnonzero(prof.cat == "user_annotation"))
    by_order = align_capture(cap, {0: stripped})[0]
    assert by_order.matched_by == "name and order"
    assert stripped.correlation[by_order.kernel_rows].tolist() == prof.correlation[by_corr.kernel_rows].tolist()
    assert by_order.residual_ns == by_corr.residual_ns


def test_files_that_do_not_belong_together_are_refused():
    cap, profs = _profiles()
    prof = profs[0]
    al = align_capture(cap, profs)[0]
    stripped = _without(prof, np.flatnonzero(prof.cat == "user_annotation"))
    # a kernel record missing
    k = np.flatnonzero((stripped.cat == "kernel") & (stripped.name == "copy_kernel"))[1]
    with pytest.raises(ProfileMismatch, match="3 traced launch.*2 kernel record"):
        align_capture(cap, {0: _without(stripped, [k])})
    # one launch's kernel 5 µs later than the run puts it: no clock puts it inside
    moved = dataclasses.replace(prof, start_ns=prof.start_ns.copy(), end_ns=prof.end_ns.copy())
    r = al.kernel_rows[3]
    moved.start_ns[r] += 5000
    moved.end_ns[r] += 5000
    with pytest.raises(ProfileMismatch, match="launch 3 .*outside"):
        align_capture(cap, {0: moved})


def test_cli_refuses_in_one_line(tmp_path, capsys):
    out = tmp_path / "x.pftrace"
    # another capture (4 ranks of a MoE all-to-all) with this profile
    assert main(["merge", str(DATA / "a2a_skewed_4xh200.ktrace"), "-o", str(out), "--with-profile", str(PROFILE)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "moe_dispatch" in err and "not the same run" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["merge", str(CAPTURE), "-o", str(out), "--with-profile", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not a JSON trace" in err
    assert main(["merge", str(CAPTURE), "-o", str(tmp_path / "x.json"), "--with-profile"]) == 2
    assert ".pftrace" in capsys.readouterr().err
    assert not out.exists()


def test_profile_of_a_rank_from_its_file(tmp_path):
    """A profile that says its rank (``distributedInfo``) is that rank's; one of a rank the
    capture lacks is refused."""
    doc = json.loads(gzip.decompress(PROFILE.read_bytes()))
    doc["distributedInfo"] = {"rank": 3, "world_size": 4}
    p = tmp_path / "r3.json"
    p.write_text(json.dumps(doc))
    assert read_profile(p).rank == 3
    with pytest.raises(ProfileMismatch, match="rank 3"):
        profiles_of(read_capture(CAPTURE), [str(p)])


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "step.pftrace"
    assert main(["merge", str(CAPTURE), "-o", str(out), "--with-profile"]) == 0
    return out


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"Perfetto's trace processor cannot run here: {unavailable_reason()}")
def test_trace_processor_finds_every_traced_event_inside_its_cupti_kernel(merged):
    cap = read_capture(CAPTURE)
    n_events = sum(ln.decode(0).written for ln in cap.ranks[0].launches)
    n_counters = int((cap.events()["kind"] == ktrace.schema.EventKind.COUNTER).sum())
    prof = read_profile(PROFILE)
    with TraceProcessorHost() as host:
        t = host.load(merged)
        assert t.problems() == []
        kernels = t.query("select id, ts, dur, extract_arg(arg_set_id, 'debug.ktrace_launch') l, track_id from slice "
                          "where category = 'kernel' and name in ('copy_kernel', 'shape_kernel') and l is not null order by l")
        assert [k["l"] for k in kernels] == list(range(6))
        # every ktrace slice (launches, spans, marks) of launch L lies inside L's CUPTI kernel slice
        rows = t.query("""
            with k as (select ts, dur, extract_arg(arg_set_id, 'debug.ktrace_launch') l from slice
                       where category = 'kernel' and l is not null),
                 e as (select s.ts, s.dur, extract_arg(s.arg_set_id, 'debug.launch') l from slice s
                       where extract_arg(s.arg_set_id, 'debug.launch') is not null)
            select count(*) n, sum(e.ts >= k.ts and e.ts + e.dur <= k.ts + k.dur) inside
            from e join k using (l)""")[0]
        assert rows["n"] == n_events - n_counters + 6 and rows["inside"] == rows["n"]
        # each launch's ktrace slice is a child of its CUPTI kernel slice, on one track
        nested = t.query("select count(*) n from slice c join slice p on c.parent_id = p.id where c.category = 'kernel' "
                         "and p.category = 'kernel' and extract_arg(p.arg_set_id, 'debug.ktrace_launch') = "
                         "extract_arg(c.arg_set_id, 'debug.launch')")[0]["n"]
        assert nested == 6
        # the profiler's side: every kernel, operator and CUDA call a slice; an arrow from each
        # launch call to its kernel
        n_prof = t.query("select count(*) n from slice where extract_arg(arg_set_id, 'debug.launch') is null")[0]["n"]
        assert n_prof == prof.size
        arrows = t.query("select count(*) n from flow f join slice a on f.slice_out = a.id join slice b on f.slice_in = b.id "
                         "where a.name like 'cu%Launch%' and b.category = 'kernel'")[0]["n"]
        assert arrows == int((prof.cat == "kernel").sum())


@pytest.mark.skipif(ui_unavailable_reason() is not None, reason=f"the Perfetto UI cannot run here: {ui_unavailable_reason()}")
def test_ui_shows_the_lanes_under_their_kernel(merged):
    from ktrace.testing.perfetto import PerfettoUI

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with PerfettoUI(width=1600, height=1000) as ui:
        st = ui.open(merged)
        assert st.trace_type == "proto" and st.loading_errors == () and st.import_errors == 0
        names = [t.name for t in st.tracks]
        rank = next(t for t in st.tracks if t.name.startswith("rank 0 · NVIDIA"))
        host = next(t for t in st.tracks if "profiler" in t.name and "python" in t.name)
        stream = rank.children[0].name
        assert stream.startswith("stream 7 · CUPTI kernels + ktrace launches (aligned ±"), names
        assert [c.name.split()[:2] for c in rank.children[1:4]] == [["r0", "p0"], ["r0", "p1"], ["r0", "p2"]]
        k = ui.sql("select id, ts, dur from slice where name = 'copy_kernel' and category = 'kernel' "
                   "and extract_arg(arg_set_id, 'debug.ktrace_launch') = 2")[0]
        # the kernel, its ktrace slice and the workgroups' spans under it
        ui.open(merged, window=(k["ts"] - 300, k["ts"] + k["dur"] + 300))
        ui.expand([rank.name])
        ui.show_sidebar(False)
        st = ui.select_slice(k["id"])
        assert st.selection["event"] == k["id"] and len(st.flows) == 1 and st.flows[0]["begin"]["name"].startswith("cuLaunchKernel")
        ui.screenshot(ARTIFACTS / "profile_kernel_lanes.png")
        # the step around it: the host thread's operators and launch calls, the arrow to the kernel
        st = ui.open(merged, window=(k["ts"] - 600_000, k["ts"] + 900_000))
        ui.collapse()
        st = ui.expand([host.name])
        assert [t.name for t in st.tracks if t.expanded] == [host.name]
        ui.show_sidebar(False)
        ui.select_slice(k["id"])
        ui.screenshot(ARTIFACTS / "profile_step.png")


def test_capture_with_a_profiler_saves_its_trace_beside_it(tmp_path):
    """``ktrace.capture(profiler=prof)`` then ``save``: the capture names the profiler's trace,
    written beside it once the profiler has stopped (here a CPU-only profiler: no launches)."""
    torch = pytest.importorskip("torch")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with ktrace.capture(profiler=prof) as cap:
            torch.ones(8).sum()
    cap.save(tmp_path / "run.ktrace")
    assert read_capture(tmp_path / "run.ktrace").meta["profile"] == {"0": "run.kineto.json.gz"}
    doc = json.loads(gzip.decompress((tmp_path / "run.kineto.json.gz").read_bytes()))
    assert any(e.get("name") == "aten::sum" for e in doc["traceEvents"])
