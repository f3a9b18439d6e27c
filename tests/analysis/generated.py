"""What a report of a generated case (``ktrace.captures.generate``) must say, judged against the
cause the generator put in: the checks of ``test_generated.py``, callable on one seed.

``python -m tests.analysis.generated SEED [SEED ...]`` prints a case, its report's first findings
and what is wrong with them (what to run on the seed a failing test prints).
"""

from __future__ import annotations

import re
import sys
import traceback
from pathlib import Path

from ktrace.analysis import build_report, report_json
from viewers.text import render_text
from ktrace.captures import write_capture
from ktrace.captures.generate import Case, draw

from .claims import Raw, check

#: The finding kind that names each injected cause.
FINDING_OF = {"straggler": "straggler", "held": "late_notifies", "heavy": "uneven_work", "late_launch": "late_launch",
              "slow_link": "slow_link", "hang": "hang"}
#: A stated magnitude agrees with the injected one within this share.
REL = 0.10
#: The first finding's saving (its replay without the cause) agrees with the time the cause put
#: into the simulated launches within this share.
SAVING_REL = 0.25


def _close(got, want, rel: float = REL) -> bool:
    return got is not None and abs(float(got) - float(want)) <= rel * abs(float(want))


def judge(case: Case, doc: dict) -> list[str]:
    """What the report's document ``doc`` gets wrong about ``case`` (empty: nothing)."""
    inj, s = case.injected, case.shape
    findings = doc["findings"]
    causes = [f for f in findings if f["kind"] in FINDING_OF.values() or f["kind"] in ("late_start", "uneven_ranks")]
    bad = [f"a list left empty in: {f['text'][:160]}" for f in findings if re.search(r"\(ranks \)|ranks \)|programs \)", f["text"])]
    if s.cold > 1:  # a cold first launch is warm-up, never a cause
        bad += [f"a cause in the warm-up launch only: {f['text'][:160]}" for f in causes
                if set(_launches(f)) <= {0} and s.launches > 1]
    if inj.kind == "healthy":
        loud = [f for f in findings if f["severity"] in ("error", "warning")]
        if not doc["summary"]["healthy"] or loud:
            bad.append("a healthy case is not said to be healthy: " + (loud[0]["text"][:300] if loud else doc["summary"]["verdict"]))
        return bad
    want = FINDING_OF[inj.kind]
    if not findings or findings[0]["kind"] != want:
        first = findings[0]["text"][:300] if findings else "no finding"
        return bad + [f"the first finding is not {want}: {first}"]
    f = findings[0]
    d = f["data"]
    if inj.kind == "hang":
        got = (d.get("producer"), d.get("consumer"), d.get("programs"), d.get("round"))
        if got != (inj.rank, inj.consumer, list(inj.consumer_programs), inj.consumer_round):
            bad.append(f"hang: (producer, consumer, programs, round) {got}, injected "
                       f"{(inj.rank, inj.consumer, list(inj.consumer_programs), inj.consumer_round)}")
    elif inj.kind == "heavy":
        if {int(k): v for k, v in d.get("programs", {}).items()} != {inj.rank: list(inj.programs)}:
            bad.append(f"heavy: programs {d.get('programs')}, injected rank {inj.rank} programs {list(inj.programs)}")
    else:
        if d.get("rank") != inj.rank:
            bad.append(f"{want}: rank {d.get('rank')}, injected {inj.rank}")
        if inj.kind in ("straggler", "held"):
            if d.get("programs") != list(inj.programs):
                bad.append(f"{want}: programs {d.get('programs')}, injected {list(inj.programs)}")
            if d.get("rounds") != list(inj.rounds):
                bad.append(f"{want}: rounds {d.get('rounds')}, injected {list(inj.rounds)}")
            lanes = d.get("lanes") or []
            if inj.lane >= 0 and lanes != [inj.lane]:
                bad.append(f"{want}: lanes {lanes}, injected lane {inj.lane}")
        if inj.kind == "slow_link" and d.get("consumer") != inj.consumer:
            bad.append(f"slow_link: consumer {d.get('consumer')}, injected {inj.consumer}")
    if not _close(d.get("magnitude_ns"), inj.magnitude_ns):
        bad.append(f"{want}: magnitude {d.get('magnitude_ns')}, injected {inj.magnitude_ns:.0f}")
    if case.injected_ns > 0 and not _close(d.get("saving_ns"), case.injected_ns, SAVING_REL):
        bad.append(f"{want}: saving {d.get('saving_ns')}, the cause put in {case.injected_ns:.0f}")
    return bad


def _launches(f) -> list[int]:
    for c in f["claims"]:
        if "launches" in c["values"] and isinstance(c["values"]["launches"], list):
            return c["values"]["launches"]
    return [-1]


def run_case(seed: int, folder: Path) -> tuple[Case, list[str], dict | None]:
    """Draw, write, report and judge one case: ``(case, what is wrong, the report's document)``."""
    case = draw(seed)
    path = folder / f"generated_{seed}.ktrace"
    write_capture(path, case.capture)
    try:
        doc = report_json(build_report(str(path)))
    except Exception:  # the report must never crash: say how it did
        return case, ["the report crashed:\n" + traceback.format_exc()], None
    bad = judge(case, doc)
    raw = Raw(path, leave_out=doc["summary"].get("warmup_launches", []))
    claims = [(f"finding {i} ({f['kind']})", c) for i, f in enumerate(doc["findings"], 1) for c in f["claims"]]
    claims += [("summary", c) for c in doc["summary"]["claims"]]
    bad += [f"false claim, {where}: {c['kind']} {c['agents'][:3]}: {msg}" for where, c in claims for msg in check(raw, c)]
    path.unlink()
    return case, bad, doc


def main(argv: list[str]) -> int:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for s in argv:
            case, bad, doc = run_case(int(s), Path(tmp))
            print(case.describe())
            if doc is not None:
                print(render_text(doc))
            print("\n".join(bad) or "OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
