"""Links into the Perfetto UI: the window a link opens, and the rank order it lists.

The report's document (``ktrace.analysis.document``: a link per finding), the trace writers
(``ktrace.export``: the process names these links find) and the viewers (``ktrace open``'s links)
all make their links here, so that a link made by any of them opens the same window with the
ranks in the same order. Times are ns since the capture's first event, the time base of both
trace formats ktrace writes.
"""

from __future__ import annotations

import json
import urllib.parse

#: The Perfetto UI on the web.
PERFETTO_UI = "https://ui.perfetto.dev"
#: A finding's range shorter than this is widened to it (around its middle) in a link: the UI
#: opens only a window of positive length.
MIN_LINK_NS = 1_000
#: The workspace a link opens, listing the ranks in rank order (:func:`ui_startup_commands`).
RANKS_WORKSPACE = "ranks in order"
#: What every rank's process name in a ktrace trace starts with (``rank 3 · H100 ...``).
RANK_PROCESS_PREFIX = "rank {rank} · "


def ui_startup_commands(ranks) -> list[dict]:
    """Perfetto UI startup commands (a link's ``startupCommands``) that open the trace in a
    workspace listing the ranks in rank order, each with all its tracks.

    The UI lists processes by how much they hold (slice count first; v52's process ordering
    reads nothing a trace can set), so the default workspace shows the busiest rank first. The
    commands are the UI's own, from its allow-list for links: make a workspace, copy each
    rank's process into it in turn, switch to it.
    """
    cmds = [{"id": "dev.perfetto.CreateWorkspace", "args": [RANKS_WORKSPACE]}]
    cmds += [{"id": "dev.perfetto.CopyTracksToWorkspaceByRegex",
              "args": ["^" + RANK_PROCESS_PREFIX.format(rank=int(r)), RANKS_WORKSPACE]} for r in sorted(ranks)]
    return cmds + [{"id": "dev.perfetto.SwitchWorkspace", "args": [RANKS_WORKSPACE]}]


def link_range(start_ns: int, end_ns: int, trace_end_ns: int | None = None) -> tuple[int, int]:
    """The window a link opens for a finding's range (ns since the capture's first event, the
    traces' time 0): the range itself, clamped to the trace ``[0, trace_end_ns]`` (the Perfetto
    UI ignores a window that reaches outside the trace); a range shorter than
    :data:`MIN_LINK_NS` is widened to it around its middle, within the trace."""
    end = None if trace_end_ns is None else max(int(trace_end_ns), 1)
    lo, hi = max(int(start_ns), 0), int(end_ns)
    if end is not None:
        lo, hi = min(lo, end), min(hi, end)
    if hi - lo < MIN_LINK_NS:
        mid = (lo + hi) // 2
        lo, hi = mid - MIN_LINK_NS // 2, mid + MIN_LINK_NS // 2
        if lo < 0:
            lo, hi = 0, hi - lo
        if end is not None and hi > end:
            lo, hi = max(lo - (hi - end), 0), end
    return lo, max(hi, lo + 1)


def ui_link(ui: str = PERFETTO_UI, trace_url: str | None = None, window: tuple[int, int] | None = None, ranks=None) -> str:
    """A Perfetto UI link: ``ui`` loading ``trace_url`` (when given) showing ``window`` (trace
    ns, as it is), listing ``ranks`` in rank order (only with a trace to list them in)."""
    args = {}
    if trace_url:
        args["url"] = trace_url
    if window is not None:
        args["visStart"], args["visEnd"] = str(int(window[0])), str(int(window[1]))
    if trace_url and ranks:
        args["startupCommands"] = json.dumps(ui_startup_commands(ranks), separators=(",", ":"), ensure_ascii=False)
    return f"{ui}/#!/" + (("?" + urllib.parse.urlencode(args, safe=":/")) if args else "")


def perfetto_link(start_ns: int | None, end_ns: int | None, trace_url: str | None = None, trace_end_ns: int | None = None,
                  ranks=None, ui: str = PERFETTO_UI) -> str:
    """A Perfetto UI link that opens ``trace_url`` (when given) showing [start, end].

    The range is in ns since the capture's first event, which is the time base of both trace
    formats ktrace writes, so the UI's ``visStart``/``visEnd`` take it as it is
    (:func:`link_range` clamps it to the trace). With ``ranks``, the link also lists them in
    rank order (:func:`ui_startup_commands`). Without ``trace_url`` the link opens the UI only;
    ``ktrace open TRACE --finding N`` serves the trace and opens the finding's range.
    """
    window = link_range(start_ns, end_ns, trace_end_ns) if start_ns is not None and end_ns is not None else None
    return ui_link(ui, trace_url, window, ranks)


__all__ = ["MIN_LINK_NS", "PERFETTO_UI", "RANKS_WORKSPACE", "RANK_PROCESS_PREFIX", "link_range", "perfetto_link",
           "ui_link", "ui_startup_commands"]
