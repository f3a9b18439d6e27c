"""Flight-recorder dumps and Gluon lane tables: every field of a dump's or a lane table's
metadata an attacker or a damaged file could change, run as real ``ktrace`` processes.

The files are the real fixtures (``tests/fixtures/flight_dump_h100.ktrace``: a hang dumped on an
H100; ``tests/fixtures/gluon/gluon_gemm_slow_loader.ktrace``: a warp-specialized GEMM traced per
lane on an H100) with one thing changed each, through ``ktrace.captures`` (the metadata) or in
the buffer's bytes (a header's lane count, an open wait's start). What every refused case must
show: one line naming the file (and the rank and launch), exit status 2, no traceback, no input
changed, and no figure printed from what was refused (no "waited for 1,795,575,845 s", no
negative wait, no "-5 older records", no DEADLOCK of lanes the launch does not have, no lane
verdict from names that do not match the buffer). Counts are printed with ``-s``
(``[flight+lanes] N cases: ...``).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from ktrace import schema
from ktrace.captures import read_capture, write_capture
from ktrace.decode import head_bytes, split_head

from .surface_kit import Surface, say_counts

FIX = Path(__file__).resolve().parent / "fixtures"
DUMP = FIX / "flight_dump_h100.ktrace"
LANES = FIX / "gluon" / "gluon_gemm_slow_loader.ktrace"
S = Surface("flight+lanes")
EVIL = "\x1b]52;c;SGk=\x07\x1b[2J\rFORGED"


_say_counts = say_counts(S)


def _records(ln) -> tuple[np.ndarray, np.ndarray]:
    """A writable copy of a launch's buffer and its record slots (a view into the copy)."""
    raw = np.array(ln.raw, dtype=np.uint8).reshape(-1)
    h, kept = split_head(raw)
    n = h.n_programs * h.capacity if kept is None else int(kept.sum())
    return raw, np.frombuffer(raw.data, schema.RECORD_DTYPE, count=n, offset=head_bytes(h))


def _set_raw(ln, raw) -> None:
    ln.raw = raw
    ln._decoded.clear()


def _hung(cap):
    """The dump's launch with the open waits (launch 1), its ``live`` table."""
    ln = cap.ranks[0].launches[1]
    return ln, ln.meta["live"]


def _open_starts(cap, value: int) -> None:
    """The open waits' start in the buffer (not only in the metadata)."""
    ln, _ = _hung(cap)
    raw, rec = _records(ln)
    kind, flags = rec["tag"] & 0xF, (rec["tag"] >> schema.KIND_BITS) & 0xF
    rec["t0"][(kind == schema.EventKind.WAIT) & ((flags & schema.EventFlag.OPEN) != 0)] = value
    _set_raw(ln, raw)


def _live(**over):
    def edit(cap):
        _hung(cap)[1].update(over)
    return edit


def _wait(k: int = 0, **over):
    def edit(cap):
        _hung(cap)[1]["open_waits"][k].update(over)
    return edit


def _consistent_since(value: int, host_ns: int | None = None):
    def edit(cap):
        ln, live = _hung(cap)
        for w in live["open_waits"]:
            w["since"] = value
        _open_starts(cap, value)
        if host_ns is not None:
            ln.host_ns = host_ns
    return edit


def _200k_programs(cap):
    _, live = _hung(cap)
    w = live["open_waits"][0]
    live["open_waits"] = [dict(w, program=p) for p in (1, 199_999)]


DUMP_CASES = {
    "live a string": (lambda c: _hung(c)[0].meta.update(live="dump"), "live dump table: is not an object"),
    "dump_ticks -1": (_live(dump_ticks=-1), "dump_ticks -1 is outside"),
    "dump_ticks a string": (_live(dump_ticks="1795575845135444277"), "not an integer"),
    "dump_ticks true": (_live(dump_ticks=True), "not an integer"),
    "dump_ticks 2^64-1": (_live(dump_ticks=2**64 - 1), "dump_ticks 18446744073709551615 is outside"),
    "ring_slots 63": (_live(ring_slots=63), "not a power of two"),
    "ring_slots 128": (_live(ring_slots=128), "whose ring the launch's 66 slots hold"),
    "heads short": (_live(heads=[18]), "heads is not a list of 4 integers"),
    "heads -1": (_live(heads=[18, -1, 15, 15]), "heads holds -1"),
    "heads 2^32": (_live(heads=[18, 2**32, 15, 15]), "heads holds 4294967296"),
    "heads a string": (_live(heads=["18", 15, 15, 15]), "heads holds something that is not an integer"),
    "lost -5": (_live(lost=[-5, 0, 0, 0]), "lost holds -5"),
    "lost beyond heads": (_live(lost=[19, 0, 0, 0]), "lane 0 lost 19 records of the 18 it wrote"),
    "lost not the buffer's": (_live(lost=[5, 0, 0, 0]), "the dump says 5 records were overwritten but its buffer counts 0"),
    "started 2": (_live(started=[2, 1, 1, 1]), "started holds 2"),
    "open_waits an object": (_live(open_waits={"program": 1}), "open_waits is not a list"),
    "open wait program 199,999 of 4": (_200k_programs, "program 199999 is outside 0..3"),
    "open waits more than lanes": (lambda c: _hung(c)[1].update(open_waits=_hung(c)[1]["open_waits"] * 2), "at most 4 waits"),
    "open wait twice on a lane": (lambda c: _hung(c)[1]["open_waits"].append(dict(_hung(c)[1]["open_waits"][0])), "lane 1 waits twice"),
    "open wait program -1": (_wait(program=-1), "program -1 is outside"),
    "since 0 (57 years)": (_wait(since=0), "since 0 is outside"),
    "since 1, buffer not": (_wait(since=1), "its buffer holds 3, and they differ (lane 1)"),
    "since after the dump (negative wait)": (_wait(since=1795575845135444277 + 10**9), "is outside 1..1795575845135444277"),
    "since 1 in the buffer too": (_consistent_since(1), "a wait of 1.79558e+09 s at the dump, longer than the launch had run for 4.05"),
    "since 1, launch time unknown": (_consistent_since(1, host_ns=0), "longer than a launch runs for at most 3600 s"),
    "dumped before launched": (lambda c: setattr(_hung(c)[0], "host_ns", 1795575845135800197 + 10**9), "before it was launched"),
    "flag negative": (_wait(flag=-4096), "flag -4096 is outside"),
    "peer 7 of 1 rank": (_wait(peer=7), "peer 7 is outside 0..0"),
    "cmp 9": (_wait(cmp=9), "cmp 9 is not a comparison"),
    "region 2^40": (_wait(region=2**40), "region 1099511627776 is outside"),
    "expected 2^40": (_wait(expected=2**40), "expected 1099511627776 is outside"),
    "seen a string": (_wait(seen="13"), "seen is '13', not an integer"),
    "heap_value a list": (_wait(heap_value=[13]), "heap_value is '[13]', not an integer"),
    "expected not the buffer's": (_wait(expected=15), "they differ (lane 1)"),
    "capture live reason a number": (lambda c: c.meta["live"].update(reason=5), "live reason is not a word"),
    "capture live dump_ns a string": (lambda c: c.meta["live"].update(dump_ns="x"), "dump_ns is 'x', not an integer"),
    "launch meta a list": (lambda c: setattr(_hung(c)[0], "meta", [1]), "meta is a list"),
    "launch device a list": (lambda c: _hung(c)[0].meta.update(device=[0]), "device is [0], not an integer"),
}


def _crafted(tmp: Path, name: str, src: Path, edit) -> Path:
    cap = read_capture(src)
    edit(cap)
    return write_capture(tmp / f"{name.replace(' ', '_').replace('/', '_')[:40]}.ktrace", cap)


def test_dumps_whose_fields_are_not_what_a_dump_writes_are_refused(tmp_path):
    for i, (cls, (edit, fault)) in enumerate(DUMP_CASES.items()):
        f = _crafted(tmp_path, f"d{i}", DUMP, edit)
        p = S.refused(tmp_path, ["report", "-q", f], names=str(f), fault=fault, cls=f"dump: {cls}", inputs=[f], size=f.stat().st_size)
        assert "rank 0 launch 1" in p.stderr or "live reason" in p.stderr or "dump_ns" in p.stderr, p.stderr
    # the same refusal from every command that reads the file
    f = _crafted(tmp_path, "lost", DUMP, _live(lost=[-5, 0, 0, 0]))
    for cmd in (["info", f], ["merge", f, "-o", tmp_path / "o.pftrace"], ["export", f, tmp_path / "x"]):
        S.refused(tmp_path, cmd, names=str(f), fault="lost holds -5", cls=f"dump: -5 lost, {cmd[0]}", inputs=[f])


def test_the_real_dump_and_names_from_it_reach_the_terminal_escaped(tmp_path):
    p = S.ok(tmp_path, ["report", "-q", DUMP], cls="dump: the real one", inputs=[DUMP])
    assert p.stdout.startswith("HUNG at the dump (watchdog): rank 0 programs 1-3 wait on flag 'flags'[0] >= 14 (last read 13; 13 "
                               "in the heap at the dump) from rank 0 program 0, which never sent it"), p.stdout[:400]

    def evil(cap):
        ln, _ = _hung(cap)
        ln.kernel = "handoff" + EVIL
        cap.meta["live"]["reason"] = "watchdog" + EVIL
        cap.meta["heap"] = {"allocations": 5}
        cap.meta["sources"] = {str(k): f"kernel{EVIL}.py:1" for k in cap.regions}

    f = _crafted(tmp_path, "evil", DUMP, evil)
    p = S.ok(tmp_path, ["report", "-q", f], cls="dump: names with escapes, heap table a number", inputs=[f])
    assert "\x1b" not in p.stdout + p.stderr and "\r" not in p.stdout and "\\x1b]52" in p.stdout
    assert "HUNG at the dump (watchdog\\x1b]52" in p.stdout and "+0x1000" in p.stdout  # (the flag by offset: no heap table)
    p = S.ok(tmp_path, ["info", f], cls="dump: info of names with escapes", inputs=[f])
    assert "\x1b" not in p.stdout and "handoff\\x1b]52" in p.stdout


def _lanes_case(names, header: int | None = None):
    def edit(cap):
        ln = cap.ranks[0].launches[0]
        if names is None:
            ln.meta.pop("lanes", None)
        else:
            ln.meta["lanes"] = names
        if header is not None:
            raw, _ = _records(ln)
            np.frombuffer(raw.data, schema.HEADER_DTYPE, count=1)["lanes"] = header
            _set_raw(ln, raw)
    return edit


LANE_NAMES = ["mma_partition", "load_partition", "epilogue_partition"]
LANE_CASES = {
    "header 24 lanes, 3 names": (_lanes_case(LANE_NAMES, 24), "names 3 lanes (mma_partition, load_partition, epilogue_partition) "
                                                              "but its buffer's header says 24 lanes per program"),
    "header 3 lanes, 2 names": (_lanes_case(LANE_NAMES[:2]), "names 2 lanes"),
    "header 3 lanes, 4 names": (_lanes_case(LANE_NAMES + ["x"]), "names 4 lanes"),
    "header 1 lane, 3 names": (_lanes_case(LANE_NAMES, 1), "but its buffer's header says 1 lanes per program"),
    "names reordered, header 2": (_lanes_case(LANE_NAMES[::-1], 2), "but its buffer's header says 2 lanes"),
    "a name a number": (_lanes_case(["a", 5, "c"]), "lanes is not a list"),
    "names a string": (_lanes_case("mma"), "lanes is not a list"),
    "names empty": (_lanes_case([]), "lanes is not a list of 1..64 names"),
    "65 names": (_lanes_case([f"l{i}" for i in range(65)]), "lanes is not a list of 1..64 names"),
    "a name of 300 characters": (_lanes_case(["m" * 300, "l", "e"]), "strings of at most 256 characters"),
    "ring_slots 3": (lambda c: c.ranks[0].launches[0].meta.update(ring_slots=3), "ring_slots 3 is not a power of two"),
}


def test_lane_tables_that_do_not_match_their_buffer_are_refused(tmp_path):
    for i, (cls, (edit, fault)) in enumerate(LANE_CASES.items()):
        f = _crafted(tmp_path, f"l{i}", LANES, edit)
        p = S.refused(tmp_path, ["report", "-q", f], names=str(f), fault=fault, cls=f"lanes: {cls}", inputs=[f], size=f.stat().st_size)
        assert "rank 0 launch 0" in p.stderr and "would save" not in p.stdout
    f = _crafted(tmp_path, "l24", LANES, LANE_CASES["header 24 lanes, 3 names"][0])
    for cmd in (["info", f], ["merge", f, "-o", tmp_path / "o.pftrace"]):
        S.refused(tmp_path, cmd, names=str(f), fault="header says 24 lanes", cls=f"lanes: header 24, {cmd[0]}", inputs=[f])


def test_lane_names_reach_the_terminal_and_the_trace_escaped(tmp_path):
    from ktrace.text import printable

    # (-v: every finding in full; the first screen cuts headlines to 100 columns, so a longer name
    # shortens the words after it there)
    p = S.ok(tmp_path, ["report", "-q", "-v", LANES], cls="lanes: the real capture", inputs=[LANES])
    real = p.stdout
    assert "load_partition" in real and "would save 61.8 µs" in real, real[:600]
    f = _crafted(tmp_path, "evil", LANES, _lanes_case([n + EVIL for n in LANE_NAMES]))
    first = S.ok(tmp_path, ["report", "-q", f], cls="lanes: names with escapes, first screen", inputs=[f])
    assert "\x1b" not in first.stdout + first.stderr and "\r" not in first.stdout and "load_partition\\x1b]52" in first.stdout
    p = S.ok(tmp_path, ["report", "-q", "-v", f], cls="lanes: names with escapes", inputs=[f])
    assert "\x1b" not in p.stdout + p.stderr and "\r" not in p.stdout and "load_partition\\x1b]52" in p.stdout
    # the same report, word for word, once the escaped names are read back: names change no figure
    assert p.stdout.replace(printable(EVIL), "").replace(str(f), str(LANES)) == real
    out = tmp_path / "evil.pftrace"
    S.ok(tmp_path, ["merge", f, "-o", out], cls="lanes: names with escapes in the trace", inputs=[f])
    data = out.read_bytes()
    assert b"\x1b]52" not in data and b"\x1b[2J" not in data and b"load_partition\\x1b]52" in data


def test_copies_of_the_fixtures_are_unchanged():
    """The cases edit copies (``read_capture`` then ``write_capture``): the fixtures stay as recorded."""
    for f in (DUMP, LANES):
        cap = read_capture(f)
        assert copy.deepcopy(cap.ranks[0].launches[0].meta) == read_capture(f).ranks[0].launches[0].meta
    S.counted("fixtures untouched")
