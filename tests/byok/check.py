"""Judge recorded bring-your-own-kernel rings: does the report name what was injected?

For each ``<style>_<fault>_w<W>.ktrace`` (with its ``.scenario.json``, written by
``tests.byok.scenario``)::

    python -m tests.byok.check DIR [DIR ...]

* healthy: the report says nothing is wrong (no error or warning finding);
* straggler: the first finding is the late notifies of the injected rank, programs and tiles
  (its rounds), with a lateness within 10 % of the injected delay;
* skipped signal: the first finding is a hang of the injected consumer program, waiting on the
  injected producer;
* every completed wait is paired with a notify; the kernel's outputs were as expected (checked
  against a torch reference when it ran); and every claim of every finding holds in the raw
  events (``tests/analysis/claims.py``).

Prints one line per capture (its first finding's headline) and exits 1 if any check fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def judge(path: Path) -> tuple[list[str], str]:
    """The problems found with one capture (empty: it passes) and its first finding's text."""
    from ktrace.analysis import build_report, report_json
    from ktrace.captures import read_capture
    from ktrace.events import aligned_events
    from ktrace.pairing import pair_table
    from ktrace.schema import EventKind, is_timeout

    from tests.analysis.claims import Raw, check

    info = json.loads(path.with_suffix(".scenario.json").read_text())
    inj = info["injected"]
    rep = build_report(str(path))
    bad = []
    first = rep.findings[0] if rep.findings else None
    serious = [f for f in rep.findings if f.severity in ("error", "warning")]
    if inj["kind"] is None:
        if not rep.summary.get("healthy") or serious:
            bad.append(f"healthy run not called healthy: {[f.kind for f in serious]}")
    elif first is None:
        bad.append("no finding")
    elif inj["kind"] == "late_notifies":
        d = first.data
        if first.kind != "late_notifies":
            bad.append(f"first finding is {first.kind}, not late_notifies")
        else:
            if d.get("rank") != inj["rank"]:
                bad.append(f"rank {d.get('rank')} named, {inj['rank']} injected")
            if d.get("programs") != inj["programs"]:
                bad.append(f"programs {d.get('programs')} named, {inj['programs']} injected")
            if d.get("rounds") != inj["tiles"]:
                bad.append(f"rounds {d.get('rounds')} named, tiles {inj['tiles']} injected")
            mag = float(d.get("magnitude_ns", 0))
            if abs(mag - inj["delay_ns"]) > 0.1 * inj["delay_ns"]:
                bad.append(f"lateness {mag:.0f} ns named, {inj['delay_ns']} ns injected")
    elif inj["kind"] == "hang":
        d = first.data
        if first.kind != "hang":
            bad.append(f"first finding is {first.kind}, not hang")
        else:
            if (d.get("consumer"), d.get("producer")) != (inj["consumer"], inj["producer"]):
                bad.append(f"consumer/producer {d.get('consumer')}/{d.get('producer')} named, "
                           f"{inj['consumer']}/{inj['producer']} injected")
            if d.get("programs") != [inj["consumer_program"]]:
                bad.append(f"programs {d.get('programs')} named, [{inj['consumer_program']}] injected")
    ev = aligned_events(read_capture(path))
    wait = ev["kind"] == EventKind.WAIT
    timed_out = int((wait & is_timeout(ev["flags"])).sum())
    _, w, _, un_w = pair_table(ev)
    if un_w or w.size != int(wait.sum()) - timed_out:
        bad.append(f"{un_w} completed waits unpaired ({w.size} paired of {int(wait.sum()) - timed_out})")
    if not wait.any():
        bad.append("no wait recorded")
    if inj["kind"] == "hang":  # the skipped signal's wait in every launch (and, at most, the cascade it started)
        at = wait & is_timeout(ev["flags"]) & (ev["rank"] == inj["consumer"]) & (ev["program"] == inj["consumer_program"])
        if int(at.sum()) != info["launches"]:
            bad.append(f"{int(at.sum())} waits of the injected consumer timed out, {info['launches']} expected")
    elif timed_out:
        bad.append(f"{timed_out} waits timed out, none expected")
    from tests.byok.scenario import outputs_as_expected

    spoilt = [c["bad_slots"] for per in info["checks"].values() for c in per]
    if not all(outputs_as_expected(info["fault"], b) for b in spoilt):
        bad.append(f"outputs not as expected: {info.get('checks')}")
    doc = report_json(rep)
    raw = Raw(path, leave_out=doc["summary"].get("warmup_launches", []))
    claims = [c for f in doc["findings"] for c in f["claims"]] + list(doc["summary"]["claims"])
    false = [f"{c['kind']}: {m}" for c in claims for m in check(raw, c)]
    if false:
        bad.append(f"false claims: {false[:3]}")
    head = " ".join(first.text.split())[:160] if first is not None else rep.summary.get("verdict", "")
    skew = []  # per launch, the ranks' first events' spread (how together the launches started)
    for ln in np.unique(ev["launch"]):
        firsts = [ev["start_ns"][(ev["launch"] == ln) & (ev["rank"] == r)].min() for r in np.unique(ev["rank"])]
        skew.append((max(firsts) - min(firsts)) / 1e3)
    head = f"[skew {max(skew):.1f} us] {head}"
    return bad, head


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    paths = sorted(p for d in argv for p in Path(d).glob("*_w*.ktrace"))
    if not paths:
        print("check: no <style>_<fault>_w<W>.ktrace captures in " + " ".join(argv))
        return 1
    failed = 0
    for p in paths:
        try:
            bad, head = judge(p)
        except Exception as e:  # (a crash is a failure of the capture's check, reported as such)
            bad, head = [f"{type(e).__name__}: {e}"], ""
        failed += bool(bad)
        print(f"{'PASS' if not bad else 'FAIL'} {p.name}: {head}" + ("" if not bad else f"  <- {'; '.join(bad)}"), flush=True)
    print(f"check: {len(paths) - failed} of {len(paths)} captures pass")
    return 1 if failed else 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
