#!/usr/bin/env python3
"""How ktrace's traces read in the real Perfetto: every bundled capture, both formats.

For each capture in ``ktrace/data`` this writes the Perfetto (``.pftrace``) and Chrome JSON
(``.json``) traces with ``ktrace merge`` and the report with ``ktrace report --json``, imports each
trace into Perfetto's own trace processor (:mod:`ktrace.testing.perfetto`) and opens it in the
Perfetto UI in headless Chromium, then prints:

- the import errors and the ``stats`` rows of severity error / data_loss;
- slices in the trace processor vs slices written vs the capture's events;
- flows (arrows) in the trace processor vs notify->wait pairs written vs pairs in the capture;
- flows written backwards (the wait's slice starts before the notify's slice) or starting at
  the same nanosecond, and flows the trace processor kept backwards;
- waits with a duration (timeouts among them), and those of them whose arrow does not end where
  they ended (on the wait itself or on the ``acquired`` mark at its end); arrows that end on
  zero-length waits and on ``acquired`` marks;
- the process / thread order the UI shows;
- whether the report's links and ``ktrace open --finding`` windows land in the UI (the UI
  ignores a window that is not inside the trace; one link per trace is followed in the UI).

It reports; it does not fail on findings (exit 1 only when the real Perfetto cannot run here)::

    python scripts/perfetto_check.py               # all bundled captures
    python scripts/perfetto_check.py skewed --keep out/   # one capture, keep the files
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import re
import sys
import tempfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ktrace.cli import main as ktrace_main  # noqa: E402
from ktrace.testing.perfetto import PerfettoUnavailable, TraceProcessorHost, ui_unavailable_reason  # noqa: E402
from viewers.perfetto_open import finding_windows  # noqa: E402

DATA = ROOT / "ktrace" / "data"


def _ktrace(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = ktrace_main(list(argv))
    if rc:
        raise SystemExit(f"ktrace {' '.join(argv)}: exit {rc}")
    return out.getvalue()


# ---- what the files hold (read without the trace processor) --------------------------------

def _facts(slices: int, out_at: dict, in_at: list, marks: set) -> dict:
    """Pairs (flow id started and ended), backward pairs, and pairs that end on an ``acquired`` mark."""
    pairs = [(fid, t_in) for fid, t_in, _ in in_at if fid in out_at]
    backward = sum(1 for fid, t_in in pairs if t_in < out_at[fid])
    same_time = sum(1 for fid, t_in in pairs if t_in == out_at[fid])
    to_marks = sum(1 for fid, _, key in in_at if fid in out_at and key in marks)
    return {"slices": slices, "pairs": len(pairs), "backward": backward, "same_time": same_time, "to_marks": to_marks}


def json_facts(path: Path) -> dict:
    """Slices, notify->wait pairs and backward pairs written in a Chrome JSON trace."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.load(f)
    out_at, in_at, marks, n = {}, [], set(), 0
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") not in ("X", "i", "I", "B"):
            continue
        n += 1
        ts = round(float(e["ts"]) * 1000)
        if e.get("bind_id") is not None:
            if e.get("flow_out"):
                out_at[e["bind_id"]] = ts
            if e.get("flow_in"):
                in_at.append((e["bind_id"], ts, i))
        if e.get("name") == "acquired":
            marks.add(i)
    facts = _facts(n, out_at, in_at, marks)
    facts["other"] = {k: doc.get("otherData", {}).get(k) for k in ("events", "flows")}
    return facts


def pftrace_facts(path: Path) -> dict:
    """Slices, notify->wait pairs and backward pairs written in a Perfetto protobuf trace."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    t = Trace()
    t.ParseFromString(path.read_bytes())
    names: dict[tuple[int, int], str] = {}
    out_at, in_at, marks, n = {}, [], set(), 0
    for i, p in enumerate(t.packet):
        for e in p.interned_data.event_names:
            names[(p.trusted_packet_sequence_id, e.iid)] = e.name
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        if te.type == TrackEvent.TYPE_SLICE_END:
            continue
        n += 1
        name = te.name if te.HasField("name") else names.get((p.trusted_packet_sequence_id, te.name_iid), "")
        if name == "acquired":
            marks.add(i)
        for fid in te.flow_ids:
            out_at[fid] = p.timestamp
        for fid in te.terminating_flow_ids:
            in_at.append((fid, p.timestamp, i))
    return _facts(n, out_at, in_at, marks)


# ---- what the trace processor makes of them ----------------------------------------------------

def tp_facts(t) -> dict:
    """Stats, slices, flows, backward flows kept, and waits without an arrow, from the trace processor."""
    if any("Unknown trace type" in e for e in t.import_errors):
        return {"problems": t.problems()}
    flow_stats = t.query("select name, severity, value from stats where value != 0 and name glob '*flow*' "
                         "and severity not in ('error', 'data_loss')")
    # a wait's arrow ends on the wait itself or on the `acquired` mark at its end (moved later by
    # shift_ns where the clocks put the wait's end before its notify's start)
    waits = t.query("""
        with w as (
          select s.id, s.dur, s.category = 'wait,timeout' timeout,
                 exists (select 1 from flow f where f.slice_in = s.id)
                 or exists (select 1 from slice a join flow f on f.slice_in = a.id
                            where a.track_id = s.track_id and a.name = 'acquired' and a.ts >= s.ts + s.dur
                              and a.ts - (s.ts + s.dur) = (select int_value from args where arg_set_id = a.arg_set_id
                                                           and key in ('args.shift_ns', 'debug.shift_ns'))) arrow
          from slice s where s.category glob 'wait*' and s.name != 'acquired' and s.dur > 0)
        select count(*) n, coalesce(sum(dur), 0) dur, coalesce(sum(timeout), 0) timeouts,
               coalesce(sum(not arrow), 0) bare, coalesce(sum(case when not arrow then dur end), 0) bare_dur,
               coalesce(sum(not arrow and timeout), 0) bare_timeouts from w""")[0]
    zero = t.scalar("select count(*) from flow f join slice s on f.slice_in = s.id "
                    "where s.category glob 'wait*' and s.name != 'acquired' and s.dur = 0")
    to_marks = t.scalar("select count(*) from flow f join slice s on f.slice_in = s.id where s.name = 'acquired'")
    return {
        "problems": t.problems(),
        "flow_stats": flow_stats,
        "slices": t.scalar("select count(*) from slice"),
        "flows": t.scalar("select count(*) from flow"),
        "backward_kept": t.scalar("select count(*) from flow f join slice a on f.slice_out = a.id "
                                  "join slice b on f.slice_in = b.id where b.ts < a.ts"),
        "waits": waits,
        "flows_to_zero_waits": zero,
        "flows_to_marks": to_marks,
    }


# ---- what the UI shows ---------------------------------------------------------------------------

def _numeric_order(names: list[str]) -> str:
    nums = [int(m.group(1)) for n in names if (m := re.match(r"(?:r\d+ )?p(\d+)\b", n))]
    if not nums:
        return "no program tracks"
    for a, b in zip(nums, nums[1:]):
        if b < a:
            return f"NO (p{a} before p{b})"
    return "yes"


def _lands(window: tuple[int, int], bounds: tuple[int, int]) -> bool:
    return window[0] < window[1] and bounds[0] <= window[0] and window[1] <= bounds[1]


def ui_facts(ui, trace: Path, report: dict, report_path: Path, shots: Path | None) -> dict:
    """Process / thread order, bounds, the flows panel, and whether report links and ``ktrace open`` windows land.

    With ``shots``, screenshots of the collapsed and expanded trace and of a selected notify's
    arrows are written there.
    """
    state = ui.open(trace)
    ui.show_sidebar(False)
    stem = trace.name.replace(".", "_")
    if shots:
        ui.screenshot(shots / f"{stem}_collapsed.png")
        ui.expand()
        ui.screenshot(shots / f"{stem}_expanded.png")
    fan = ui.sql("select s.id, count(*) n from slice s join flow f on f.slice_out = s.id group by s.id order by n desc, s.id limit 1")
    panel = None
    if fan:
        sel = ui.select_slice(fan[0]["id"])
        if shots:
            ui.screenshot(shots / f"{stem}_notify_selected.png")
        if sel.flows:
            end = sel.flows[0]["end"]
            panel = (len(sel.flows), fan[0]["n"], end["name"], end["thread"], end["process"])
    links = [(n + 1, f) for n, f in enumerate(report["findings"]) if f.get("perfetto")]
    link_windows = {}
    for n, f in links:
        q = parse_qs(urlsplit(f["perfetto"]).fragment.partition("?")[2])
        if "visStart" in q and "visEnd" in q:
            link_windows[n] = (int(q["visStart"][0]), int(q["visEnd"][0]))
    open_windows = finding_windows(report_path)
    followed = None
    if link_windows:  # follow one report link in the UI (its visStart/visEnd, served trace)
        n, w = next(iter(link_windows.items()))
        shown = ui.open(trace, window=w).visible
        followed = (n, w, shown)
    opened = None
    if open_windows:
        n, w = next(iter(open_windows.items()))
        opened = (n, w, ui.open(trace, window=w).visible)
    return {
        "bounds": state.bounds, "title": state.title,
        "processes": [p.name for p in state.tracks],
        "children": {p.name: [c.name for c in p.children] for p in state.tracks},
        "links_land": sum(_lands(w, state.bounds) for w in link_windows.values()), "links": len(link_windows),
        "open_land": sum(_lands(w, state.bounds) for w in open_windows.values()), "open": len(open_windows),
        "followed": followed, "opened": opened, "panel": panel,
    }


# ---- printing ------------------------------------------------------------------------------------

def _us(ns) -> str:
    return f"{ns / 1000:,.1f} µs"


def print_trace(fmt: str, written: dict, tp: dict, ui: dict | None, cap: dict) -> None:
    print(f"  -- {fmt}")
    problems = tp.get("problems") or []
    print("     import errors / error+data_loss stats: " + ("none" if not problems else ""))
    for p in problems:
        print(f"       {p}")
    if "slices" not in tp:
        return
    for s in tp["flow_stats"]:
        print(f"     flow stat ({s['severity']}): {s['name']} = {s['value']}")
    print(f"     slices: {tp['slices']:,} in the trace processor, {written['slices']:,} written; capture events "
          f"{cap['events']:,} (difference {tp['slices'] - cap['events']:+,})")
    other = written.get("other")
    said = f" (the writer's otherData: events {other['events']}, flows {other['flows']})" if other else ""
    print(f"     flows: {tp['flows']:,} in the trace processor vs {written['pairs']:,} notify->wait pairs written"
          f" vs {cap['pairs']:,} in the capture{said}; missing {written['pairs'] - tp['flows']:,}")
    print(f"     flows written backwards (wait slice starts before its notify slice): {written['backward']:,}; at the same "
          f"ns as its notify: {written['same_time']:,}; kept backwards by the trace processor: {tp['backward_kept']:,}")
    w = tp["waits"]
    print(f"     waits with a duration: {w['n']:,} ({_us(w['dur'])}; {w['timeouts']:,} of them timed out); without an "
          f"arrow ending where they ended: {w['bare']:,} ({_us(w['bare_dur'])}; {w['bare_timeouts']:,} of them timed out)")
    print(f"     arrows ending on 'acquired' marks: {tp['flows_to_marks']:,} ({written['to_marks']:,} written); on "
          f"zero-length waits: {tp['flows_to_zero_waits']:,}")
    if ui is None:
        return
    print(f"     UI: trace bounds {ui['bounds'][0]} .. {ui['bounds'][1]} ({_us(ui['bounds'][1] - ui['bounds'][0])})")
    print("     UI process order: " + " | ".join(ui["processes"]))
    for name, kids in list(ui["children"].items())[:1] + list(ui["children"].items())[-1:]:
        head = ", ".join(kids[:8]) + (f", ... ({len(kids)} tracks)" if len(kids) > 8 else "")
        print(f"     UI '{name}' children: {head}; programs in numeric order: {_numeric_order(kids)}")
    if ui["panel"]:
        drawn, n, name, thread, process = ui["panel"]
        print(f"     UI arrows of the notify with most flows: {drawn} drawn of its {n}; the flows panel names an end "
              f"'{name}' on thread '{thread}', process '{process}'")
    print(f"     report links that land (window inside the trace): {ui['links_land']} of {ui['links']}")
    if ui["followed"]:
        n, w, shown = ui["followed"]
        print(f"       followed finding {n}'s link {w[0]}..{w[1]}: the UI shows {shown[0]}..{shown[1]} "
              f"({'landed' if tuple(shown) == tuple(w) else 'IGNORED'})")
    print(f"     ktrace open --finding windows that land: {ui['open_land']} of {ui['open']}")
    if ui["opened"]:
        n, w, shown = ui["opened"]
        print(f"       opened finding {n} at {w[0]}..{w[1]}: the UI shows {shown[0]}..{shown[1]} "
              f"({'landed' if tuple(shown) == tuple(w) else 'IGNORED'})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("captures", nargs="*", help="bundled capture names (skewed, skip, ...) or .ktrace files (default: all bundled)")
    ap.add_argument("--keep", metavar="DIR", help="write traces, reports and UI screenshots here (default: a temporary folder, no screenshots)")
    ap.add_argument("--no-ui", action="store_true", help="skip the UI (Chromium) part")
    args = ap.parse_args(argv)
    caps = [Path(c) if c.endswith(".ktrace") else DATA / f"a2a_{c}_4xh200.ktrace" for c in args.captures] or sorted(DATA.glob("*.ktrace"))
    try:
        host = TraceProcessorHost()
    except PerfettoUnavailable as e:
        print(f"perfetto_check: the trace processor cannot run here: {e}", file=sys.stderr)
        return 1
    ui = None
    reason = "--no-ui" if args.no_ui else ui_unavailable_reason()
    if reason is None:
        from ktrace.testing.perfetto import PerfettoUI

        ui = PerfettoUI()
    with host, (ui or contextlib.nullcontext()), tempfile.TemporaryDirectory() as tmp:
        out = Path(args.keep or tmp)
        out.mkdir(parents=True, exist_ok=True)
        print(f"Perfetto trace processor {host.version}; UI: {ui.build.version + ' in ' + ui.browser.version if ui else 'not run (' + reason + ')'}")
        for cap in caps:
            stem = cap.name.removesuffix(".ktrace")
            rep_path = out / f"{stem}.report.json"
            _ktrace("report", str(cap), "--json", str(rep_path), "-q")
            report = json.loads(rep_path.read_text())
            s = report["summary"]
            capf = {"events": int(s["events"]), "pairs": int(s.get("waits_released", 0))}
            print(f"\n== {stem}: {capf['events']:,} events, {s['waits']:,} waits, {capf['pairs']:,} notify->wait pairs, "
                  f"{len(report['findings'])} findings")
            for fmt, suffix, facts in (("perfetto (.pftrace)", ".pftrace", pftrace_facts), ("chrome json (.json)", ".json", json_facts)):
                trace = out / f"{stem}{suffix}"
                _ktrace("merge", str(cap), "-o", str(trace))
                loaded = host.load(trace)
                tp = tp_facts(loaded)
                loaded.close()
                shots = out if args.keep else None
                print_trace(fmt, facts(trace), tp, ui_facts(ui, trace, report, rep_path, shots) if ui else None, capf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
