"""The output formats' one registry (``ktrace.export.formats``): each format one writer module
declaring its name, extensions, bytes per event and how it splits; ``ktrace merge`` (its
``--format`` choices and the format a name asks for), ``write_trace``, the split traces and
``ktrace open`` read them from it.

The captures are bundled real ones (``tests/fixtures/scenarios``) and, for the split, a
CONSTRUCTED one (``ktrace.captures.synth``).
"""

from __future__ import annotations

import importlib
import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from ktrace.captures import read_capture
from ktrace.cli import build_parser, main
from ktrace.export import write_trace
from ktrace.export.formats import WRITERS, Format, format_of, formats, get, split_names

ROOT = Path(__file__).resolve().parents[1]
CAP = ROOT / "tests/fixtures/scenarios/w1_handoff_skip.ktrace"


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def test_each_format_is_declared_by_one_writer_module():
    fs = formats()
    assert len(fs) == len(WRITERS) and {"ktrace", "perfetto", "chrome"} <= set(fs)
    for mod in WRITERS:
        f = importlib.import_module(mod).FORMAT
        assert isinstance(f, Format) and fs[f.name] is f and callable(f.write) and f.bytes_per_event > 0
    exts = [e for f in fs.values() for e in f.extensions]
    assert len(exts) == len(set(exts)), "two formats claim one extension"
    assert get("perfetto").split and get("chrome").split and get("ktrace").split is None
    with pytest.raises(ValueError, match="unknown format 'nope' \\(ktrace, perfetto, chrome"):
        get("nope")
    with pytest.raises(ValueError, match="cannot tell the format of x.txt"):
        format_of("x.txt")


def test_a_declaration_is_checked():
    with pytest.raises(ValueError, match="extensions"):
        Format(name="bad", extensions=("txt",), write=print, bytes_per_event=1)
    with pytest.raises(ValueError, match="part budget"):
        Format(name="bad", extensions=(".bad",), write=print, bytes_per_event=1, split="launches")


def test_the_cli_format_choices_are_the_registry():
    merge = next(a for a in build_parser()._subparsers._group_actions[0].choices["merge"]._actions
                 if "--format" in a.option_strings)
    assert list(merge.choices) == list(formats())
    rc, _, err = _run(["merge", str(CAP), "-o", "/dev/null", "--format", "nope"])
    assert rc == 2 and "invalid choice: 'nope'" in err and "'perfetto'" in err


@pytest.mark.parametrize("name", list(formats()))
def test_merge_writes_every_registered_format(name, tmp_path):
    """By the output's name and by ``--format``: the file its writer writes, the format named."""
    f = get(name)
    for ext in f.extensions:
        out = tmp_path / f"x{ext}"
        rc, printed, err = _run(["merge", str(CAP), "-o", str(out)])
        assert rc == 0, err
        assert out.stat().st_size > 0 and printed.startswith(f"{out}: {name},")
    forced = tmp_path / "forced.out"
    rc, printed, err = _run(["merge", str(CAP), "-o", str(forced), "--format", name])
    assert rc == 0 and printed.startswith(f"{forced}: {name},"), err
    # the same writer through the library: the same bytes (a capture's zip stamps its members' times)
    again = write_trace(read_capture(CAP), tmp_path / f"again{f.extensions[0]}", name)
    if name != "ktrace":
        assert again.read_bytes() == (tmp_path / f"x{f.extensions[0]}").read_bytes()


@pytest.mark.parametrize("name", split_names())
def test_split_parts_are_sized_by_the_writers_figures(name, tmp_path):
    """A split trace's parts hold at most the budget over the writer's ``bytes_per_event`` events,
    and the size estimate is the writer's ``bytes_by_kind`` applied to the capture's events."""
    from ktrace.captures.synth import constructed_capture
    from ktrace.clock import attach_clock
    from ktrace.export.split import estimate_bytes, read_index, write_split

    cap, _ = constructed_capture(world_size=4, programs=4, iters=2, seed=3, round_trips=50)
    attach_clock(cap)
    f = get(name)
    budget = 120 * f.bytes_per_event  # (a rank's launch holds 50 events: two ranks a part)
    _, parts = read_index(write_split(cap, tmp_path / f"t{f.extensions[0]}", name, part_bytes=budget))
    assert len(parts) > 1 and all(p.events <= budget // f.bytes_per_event for p in parts)
    kinds = {}
    for rc_ in cap.ranks.values():
        for ln in rc_.launches:
            ev = ln.decode(rc_.rank).events
            for k in range(1, 6):
                kinds[k] = kinds.get(k, 0) + int((ev["kind"] == k).sum())
    per_kind, per_launch = f.bytes_by_kind
    want = sum(kinds[k] * per_kind[k - 1] for k in range(1, 6)) + per_launch * sum(len(r.launches) for r in cap.ranks.values())
    assert estimate_bytes(cap, name) == int(want)
    with pytest.raises(ValueError, match="split into perfetto or chrome parts, not 'ktrace'"):
        write_split(cap, tmp_path / "t.ktrace", "ktrace")


def test_open_refuses_a_format_the_ui_does_not_open_in_one_line(tmp_path, monkeypatch):
    """``ktrace open`` converts a capture (the ktrace format: not ``ui``) and serves the others; a
    registered format that is neither is named, not served."""
    from ktrace.export import formats as F

    toy = Format(name="toy", extensions=(".toy",), write=print, bytes_per_event=1, ui=False)
    monkeypatch.setattr(F, "_REGISTRY", {**formats(), "toy": toy})
    bad = tmp_path / "x.toy"
    bad.write_bytes(b"x")
    rc, _, err = _run(["open", str(bad), "--no-browser", "--timeout", "0.1"])
    assert rc == 2 and err.count("\n") == 1 and "a toy file, not a trace the Perfetto UI opens" in err
