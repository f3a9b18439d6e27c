"""One table of what the probes cost and how the report's predictions held, from the captures
under a folder (``ktrace run --verify`` and ``make_scenario_captures --verify`` write them).

    python scripts/cost_table.py DIR [OUT.md]

Each capture's ``probe_cost`` and ``verify`` rows (checked on reading) become rows: the capture,
its ranks, the probe cost, the finding, the delay injected, predicted, measured, the measurement's
95 % interval and whether the prediction holds (inside it, or within 10 %). The device is named.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ktrace.captures import CaptureError, read_capture
from ktrace.probe_cost import within_spread
from ktrace.text import fmt_ns, printable


def rows(folder: Path) -> tuple[list[str], list[str]]:
    out, devices = [], set()
    for path in sorted(folder.rglob("*.ktrace")):
        try:
            cap = read_capture(path)
        except CaptureError as e:
            out.append(f"| {path.name} | unreadable: {printable(str(e))[:120]} |||||||||")
            continue
        meta = cap.meta or {}
        name = printable(meta.get("scenario") or meta.get("kernel") or path.stem)
        pc = meta.get("probe_cost")
        cost = f"{100 * (pc['ratio'] - 1):+.2f} % [{100 * (pc['lo'] - 1):+.2f}, {100 * (pc['hi'] - 1):+.2f}], {pc['steps']} each" if pc else "-"
        if pc:
            devices.add(pc["device"])
        ver = meta.get("verify") or []
        if not ver:
            out.append(f"| {name} | {cap.world_size} | {cost} | (no prediction checked) | | | | | |")
        for r in ver:
            devices.add(r["device"])
            out.append(f"| {name} | {cap.world_size} | {cost} | {printable(r['finding'])} ({printable(str(r.get('kind', '')))}, "
                       f"{printable(r['site'])}) | {fmt_ns(r['delay_ns'])} | {fmt_ns(r['predicted_ns'])} | {fmt_ns(r['measured_ns'])} | "
                       f"[{fmt_ns(r['lo_ns'])}, {fmt_ns(r['hi_ns'])}] | {'yes' if within_spread(r) else 'NO'} |")
    return out, sorted(devices)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    body, devices = rows(Path(argv[0]))
    text = "\n".join([f"Devices: {', '.join(printable(d) for d in devices) or '?'}", "",
                      "| capture | ranks | probe cost (traced/untraced - 1, 95 % interval) | finding (kind, site) | injected "
                      "| predicted | measured | measured 95 % | within? |",
                      "|---|---|---|---|---|---|---|---|---|", *body]) + "\n"
    if len(argv) > 1:
        Path(argv[1]).write_text(text)
    print(text)
    held = sum(r.endswith("| yes |") for r in body)
    checked = held + sum(r.endswith("| NO |") for r in body)
    print(f"predictions within the measured spread or 10 %: {held} of {checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
