"""The report as a typed, versioned document: what every renderer of a report needs, and nothing else.

A report is computed (``ktrace.analysis.report.build_report``: a ``Report``, holding the trace
and the analyses' tables) and then assembled into a :class:`ReportDocument`
(``ktrace.analysis.assemble``): its :class:`Summary`, its :class:`Finding` list (each with its
text, short label, time range, Perfetto link, the data behind it and its :class:`Claim` list),
its :class:`Table` map (the first rows of each) and its :class:`Views` (the few arrays the HTML
plots draw: one launch's workgroups, waits and notifies, the busy and wait heat maps, the
wait-time histogram). :func:`dump` turns a document into the JSON ``ktrace report --json``
writes, :func:`load` reads one back (from a file, its text, its parsed content, or a ``Report``),
checking what a reader acts on.

The text, the HTML page, the Perfetto links and ``ktrace open --finding`` are all made from the
document (``viewers/``): renderers import this module and nothing else of ``ktrace.analysis``,
and never see the trace or the causal model.

The schema is :data:`FORMAT` at :data:`VERSION`: a change to what a field means, or a field
taken away, is a new version; :func:`load` refuses a version it does not read.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

#: The document's format name and version (written as ``format`` and ``version``).
FORMAT, VERSION = "ktrace-report", 2
#: Largest report file :func:`load` reads.
MAX_REPORT_BYTES = 64 << 20
#: Times in a report are ns since the capture's first event: beyond this they span no trace.
MAX_REPORT_NS = 1 << 62
#: Severities of a finding, most urgent first.
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Claim:
    """One thing a finding's text states, as data: what kind of statement, about which agents,
    with which numbers (``tests/analysis/test_claims.py`` checks each against the raw events).

    Attributes:
        kind: the statement (``held_back``, ``started_late``, ``never_sent``, ...; the claim
            kinds are listed in ``docs/analyses.md``).
        agents: the agents it names, ``(rank, launch, program, lane)`` each (-1: any).
        values: its numbers and names (ns, counts, region names, event rows).
    """

    kind: str
    agents: tuple | list = ()
    values: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "agents": [list(a) for a in self.agents], "values": dict(self.values)}

    @classmethod
    def from_dict(cls, d: dict) -> Claim:
        agents = d.get("agents") or []
        return cls(str(d.get("kind", "")), [list(a) for a in agents if isinstance(a, (list, tuple))]
                   if isinstance(agents, list) else [], dict(d.get("values") or {}) if isinstance(d.get("values"), dict) else {})


@dataclass
class Finding:
    """One thing the report wants the reader to know.

    Attributes:
        kind: a root cause (``hang``, ``late_launch``, ``late_notifies``, ``uneven_work``,
            ``uneven_ranks``, ``slow_link``: ``ktrace.analysis.causes``), ``lane_holdup`` (the partition
            of a kernel traced per lane that kept the others waiting), or ``critical_path``,
            ``overlap``, ``capture`` (information).
        severity: ``error`` (a hang), ``warning`` (a cause that would save at least
            ``CauseConfig.min_share`` of the capture's kernel time) or ``info``.
        cost_ns: for a cause, the time a replay of the capture without it saves (launch
            durations summed; how findings are ranked); else what it accounts for.
        text: the finding in plain words.
        ranks: the ranks involved.
        start_ns, end_ns: the time range to look at, relative to the capture's first event.
        data: the numbers behind the text.
        label: a few words naming it (lists, plots).
        claims: every statement of ``text`` as data (:class:`Claim`); a test checks each against
            the capture's raw events.
        perfetto: the Perfetto UI link to its range (set when the document is assembled:
            ``ktrace.links.perfetto_link``), or None.
    """

    kind: str
    severity: str
    cost_ns: float
    text: str
    ranks: tuple[int, ...] = ()
    start_ns: int | None = None
    end_ns: int | None = None
    data: dict = field(default_factory=dict)
    label: str = ""
    claims: list = field(default_factory=list)
    perfetto: str | None = None

    def to_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "cost_ns": self.cost_ns, "text": self.text,
                "label": self.label or self.kind, "ranks": list(self.ranks), "start_ns": self.start_ns,
                "end_ns": self.end_ns, "perfetto": self.perfetto,
                "claims": jsonable([c.to_dict() if isinstance(c, Claim) else c for c in self.claims]),
                "data": jsonable(self.data)}


def _omitted_when_none():
    """A :class:`Summary` field written only when it holds something."""
    return field(default=None, metadata={"omit_none": True})


@dataclass
class Summary:
    """The headline numbers of a report (the counts and times under ``ktrace.text.MEASURES``'
    keys), its verdict, and how its waits were accounted for.

    Attributes:
        source: what was analysed (a file, or ``<capture>``).
        world_size, ranks: the run's world size and the ranks the capture holds.
        launches, kernels, events, workgroups: what was analysed (warm-up launches left out).
        kernel_time_ns: the launches' durations summed.
        waits, wait_ns: the completed waits and their time.
        producer_late_ns, signal_latency_ns: the waits' time split: their producer's lateness,
            the signal's trip.
        link_ns, unexplained_ns: of the signal latency, what the calibrated link explains and
            what nothing does.
        waits_released, timeouts: waits matched to their notify; waits that gave up.
        clock, clock_bound_ns, clock_bounds: how the ranks' clocks were aligned, and how well.
        partial: ranks of the run are missing.
        trace_end_ns: where the traces end (their time 0 is the capture's first event).
        sampled_launches: ``[launches replayed, launches]``.
        warmup_launches: launches left out as warm-up.
        healthy, verdict: whether nothing is wrong, and the report's first line.
        waits_unreleased, waits_release_untraced, waits_unmatched: completed waits with no
            captured notify; those on mbarriers whose releases the probe density leaves out;
            those not matched to one notify of several on their flag.
        release_untraced_ns, waits_notify_untraced, notify_untraced_kernels: (only when there
            are some) the time of waits whose release the probe density does not record, the
            flag waits whose sender recorded no notify, and the senders' kernels.
        measured: (only when the capture holds them) the probes' measured cost, the findings
            that save no more than it, the predictions checked on the GPU (``ktrace.probe_cost``).
        claims: the statements the summary's wait accounting makes (:class:`Claim`).
    """

    source: str = ""
    world_size: int = 0
    ranks: list = field(default_factory=list)
    launches: int = 0
    kernels: list = field(default_factory=list)
    events: int = 0
    workgroups: int = 0
    kernel_time_ns: float | None = None
    waits: int = 0
    wait_ns: float = 0.0
    producer_late_ns: float = 0.0
    signal_latency_ns: float = 0.0
    link_ns: float = 0.0
    unexplained_ns: float = 0.0
    waits_released: int = 0
    timeouts: int = 0
    clock: str | None = None
    clock_bound_ns: float | None = None
    clock_bounds: str | None = None
    partial: bool = False
    trace_end_ns: int | None = None
    sampled_launches: list = field(default_factory=lambda: [0, 0])
    warmup_launches: list = field(default_factory=list)
    healthy: bool = True
    verdict: str = ""
    waits_unreleased: int = 0
    waits_release_untraced: int = 0
    waits_unmatched: int = 0
    release_untraced_ns: float | None = _omitted_when_none()
    waits_notify_untraced: int | None = _omitted_when_none()
    notify_untraced_kernels: list | None = _omitted_when_none()
    measured: dict | None = _omitted_when_none()
    claims: list = field(default_factory=list)

    def to_dict(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = [c.to_dict() if isinstance(c, Claim) else c for c in v] if f.name == "claims" else v
        return jsonable(out)

    # read as its JSON object reads (``summary["waits"]``, ``"release_untraced_ns" in summary``)
    def __getitem__(self, key: str):
        if key not in self:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        f = _SUMMARY_FIELDS.get(key) if isinstance(key, str) else None
        return f is not None and not (getattr(self, key) is None and f.metadata.get("omit_none"))

    def get(self, key: str, default=None):
        """The value under ``key`` as the JSON object has it, else ``default``."""
        return self[key] if key in self else default

    @classmethod
    def from_dict(cls, d: dict) -> Summary:
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["claims"] = [Claim.from_dict(c) for c in kw.get("claims") or [] if isinstance(c, dict)]
        return cls(**kw)


_SUMMARY_FIELDS = {f.name: f for f in dataclasses.fields(Summary)}


@dataclass
class Table:
    """One of a report's tables: its first rows (biggest first), its columns, how many rows it has.

    Attributes:
        rows_total: the rows the analysis made.
        columns: the column names (unit-suffixed: ``wait_ns``, ``bytes``).
        rows: the first ``ReportConfig.max_rows`` rows, as records (NaN as None).
    """

    rows_total: int
    columns: list[str]
    rows: list[dict]

    def to_dict(self) -> dict:
        return {"rows_total": self.rows_total, "columns": self.columns, "rows": self.rows}

    @classmethod
    def from_dict(cls, d: dict) -> Table:
        rows = [r for r in d.get("rows") or [] if isinstance(r, dict)] if isinstance(d.get("rows"), list) else []
        cols = d.get("columns") if isinstance(d.get("columns"), list) else []
        n = d.get("rows_total")
        return cls(n if isinstance(n, int) and not isinstance(n, bool) else len(rows), [str(c) for c in cols], rows)


class Lazy(Mapping):
    """A mapping whose values are made on first use (a report's tables and views: those a
    renderer does not show are never made).

    Args:
        makers: name -> a function of no arguments that makes the value.
        done: values made already (they come first, in their order).
        heads: name -> ``fn(n)``: ``(rows, the first n rows)`` of a table made without the rest
            (:meth:`head`; a report's document holds only the first rows of each table).
        workers: threads :meth:`make_all` makes the values not made yet with (numpy works without
            the interpreter lock).
    """

    def __init__(self, makers: Mapping[str, Callable[[], object]], done: Mapping | None = None,
                 heads: Mapping[str, Callable[[int], tuple]] | None = None, workers: int = 1):
        self._done = dict(done or {})
        self._makers = {k: v for k, v in makers.items() if k not in self._done}
        self._heads = dict(heads or {})
        self._order = list(self._done) + list(self._makers)
        self.workers = workers

    def __getitem__(self, name: str):
        if name not in self._done:
            if name not in self._makers:
                raise KeyError(name)
            self._done[name] = self._makers.pop(name)()
        return self._done[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def computed(self) -> list[str]:
        """The names whose values are made so far."""
        return [k for k in self._order if k in self._done]

    def head(self, name: str, n: int) -> tuple[int, object]:
        """``(rows, first n rows)`` of a table: the same as ``t.size, t[:n]`` of the whole table,
        made without the rest where the table has a head maker and is not made yet."""
        if name not in self._done and name in self._heads:
            return self._heads[name](n)
        t = self[name]
        return int(t.size), t[:n]

    def make_all(self) -> Lazy:
        """Every value made (by :attr:`workers` threads at once); returns this mapping."""
        todo = [k for k in self._order if k not in self._done]
        if self.workers > 1 and len(todo) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                got = {k: pool.submit(self._makers[k]) for k in todo}
                made = {k: f.result() for k, f in got.items()}
            for k in todo:
                self._makers.pop(k)
                self._done[k] = made[k]
        for k in todo:
            self[k]
        return self


#: The views a document holds, in order.
VIEW_NAMES = ("launch", "heat", "wait_hist", "findings")


class Views(Lazy):
    """The few arrays the HTML plots draw, by name (:data:`VIEW_NAMES`; each ``{}`` when there is
    nothing to draw).

    Attributes:
        launch: one launch (the first finding's, else the longest): ``launch``, ``role``,
            ``workgroups`` and ``waits`` (columns ``rank``, ``program``, ``start_ns``, ``end_ns``;
            waits also ``late``), and for small grids ``notifies`` (``rank``, ``program``,
            ``start_ns``); times in ns since the capture's first event.
        heat: mean busy and wait time per workgroup per rank and program: ``ranks``,
            ``n_programs``, ``bins``, ``busy_us`` and ``wait_us`` (rank x bin).
        wait_hist: wait times per rank on log-spaced bins: ``edges`` and per rank ``counts``,
            ``positive``, ``waits``.
        findings: the picture of each of the first findings, by its index as a string: its
            launch as swimlanes, the culprit's marks and the arrows to the waits it caused
            (``analysis.finding_view``).
    """

    def __init__(self, makers: Mapping[str, Callable[[], dict]]):
        super().__init__({k: makers[k] for k in VIEW_NAMES if k in makers})

    @property
    def launch(self) -> dict:
        return self.get("launch") or {}

    @property
    def heat(self) -> dict:
        return self.get("heat") or {}

    @property
    def wait_hist(self) -> dict:
        return self.get("wait_hist") or {}

    @property
    def findings(self) -> dict:
        return self.get("findings") or {}


@dataclass
class ReportDocument:
    """A report, closed: all a renderer reads (see the module's docstring).

    Attributes:
        source: what was analysed.
        origin_ns: the capture's first event (absolute, common clock): every other time counts
            from it, as the traces do.
        summary: the headline numbers and the verdict.
        findings: hangs first, then by the time they would save.
        tables: name -> :class:`Table` (made on first use when assembled from a ``Report``).
        views: what the plots draw.
        trace_url: where the capture's trace is served (the links load it), or None.
        live: a live dump's wait-for graph (``ktrace.analysis.live``), or None.
        format, version: :data:`FORMAT` and :data:`VERSION`.
    """

    source: str
    origin_ns: int
    summary: Summary
    findings: list[Finding]
    tables: Mapping[str, Table] = field(default_factory=dict)
    views: Views = field(default_factory=lambda: Views({}))
    trace_url: str | None = None
    live: dict | None = None
    format: str = FORMAT
    version: int = VERSION

    def document(self) -> ReportDocument:
        return self


def dump(doc) -> dict:
    """A report document (anything :func:`load` takes) as JSON-ready data: what ``ktrace report
    --json`` writes (numpy values as Python ones, non-finite floats as None)."""
    doc = load(doc)
    out = {"format": doc.format, "version": doc.version, "source": doc.source, "origin_ns": doc.origin_ns,
           "trace_url": doc.trace_url, "summary": doc.summary.to_dict(),
           "views": {k: doc.views[k] for k in doc.views},
           "findings": [f.to_dict() for f in doc.findings],
           "tables": {k: t.to_dict() for k, t in _made(doc.tables).items()}}
    if doc.live is not None:
        out["live"] = doc.live
    return out


def _made(m: Mapping) -> Mapping:
    """``m`` with every value made (a :class:`Lazy` one by its threads)."""
    return m.make_all() if isinstance(m, Lazy) else m


def jsonable(x):
    """``x`` with numpy values as Python ones, tuples as lists and non-finite floats as None."""
    t = type(x)
    if t is list or t is tuple:
        # (a finding's claims hold lists of 100,000s of plain numbers: those are copied, not walked)
        if all(type(v) in _PLAIN for v in x):
            return list(x)
        return [jsonable(v) for v in x]
    if t in _PLAIN:
        return x
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


#: Types :func:`jsonable` returns as they are (floats are not: a non-finite one becomes None).
_PLAIN = frozenset((int, str, bool, type(None)))


# ---------------------------------------------------------------------------------------------
# reading a document
# ---------------------------------------------------------------------------------------------


def _time(v, what: str, where: str) -> int | None:
    """A time of the document (ns, an integer within what a trace spans), or None."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError(f"{where}: {what} is {json.dumps(v)[:40]}, not a time in ns")
    if not -MAX_REPORT_NS <= v <= MAX_REPORT_NS:
        raise ValueError(f"{where}: {what} {v:.0f} is outside what a trace spans")
    return int(v)


def _read(path: str | os.PathLike) -> object:
    """The parsed content of a report file: a regular file of at most :data:`MAX_REPORT_BYTES`."""
    from ..fileio import InputError, regular_input

    where = str(path)
    try:
        p = regular_input(path, "report")
        size = p.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise ValueError(f"{p}: {size} bytes, more than a report holds ({MAX_REPORT_BYTES}): not read")
        with open(p, "rb") as f:
            return _parse(f.read(MAX_REPORT_BYTES + 1), where)
    except InputError as e:
        raise ValueError(str(e)) from None
    except OSError as e:
        raise ValueError(f"{where}: cannot read it: {e.strerror or e}") from None


def _parse(text: bytes | str, where: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # (JSON, UTF-8; nesting past the parser's depth)
        raise ValueError(f"{where}: not a JSON report ({' '.join(str(e).split())[:120]})") from None


def _finding(f: dict, i: int, where: str) -> Finding:
    start = _time(f.get("start_ns"), f"finding {i}'s start_ns", where)
    end = _time(f.get("end_ns"), f"finding {i}'s end_ns", where)
    if start is not None and end is not None and end < start:
        raise ValueError(f"{where}: finding {i} ends ({end} ns) before it starts ({start} ns)")
    ranks = f.get("ranks") or []
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 1 << 31 for r in ranks):
        raise ValueError(f"{where}: finding {i}'s ranks are not a list of rank numbers")
    claims = f.get("claims") if isinstance(f.get("claims"), list) else []
    kind = str(f.get("kind", "?"))
    label = f.get("label")
    return Finding(kind, str(f.get("severity", "info")), f.get("cost_ns", 0.0), str(f.get("text", "")), tuple(ranks), start, end,
                   f.get("data") if isinstance(f.get("data"), dict) else {}, label if isinstance(label, str) else "",
                   [Claim.from_dict(c) for c in claims if isinstance(c, dict)],
                   f.get("perfetto") if isinstance(f.get("perfetto"), str) else None)


def from_dict(rep, where: str | None = None) -> ReportDocument:
    """A report document from its parsed JSON, checked for what a reader acts on: its format and
    version, its findings (objects; their ``start_ns``/``end_ns`` times in ns or null,
    ``start_ns <= end_ns``; their ``ranks`` rank numbers) and its summary (an object; its
    ``trace_end_ns`` a time >= 0). Tables and views that are not objects are left out.

    Raises:
        ValueError: one line, naming ``where`` (default: the document's source, else "report").
    """
    if where is None:
        where = str(rep.get("source") or "report") if isinstance(rep, dict) else "report"
    if not isinstance(rep, dict) or rep.get("format") != FORMAT:
        raise ValueError(f"{where}: not a ktrace report (ktrace report --json FILE)")
    if "version" in rep and rep["version"] != VERSION:
        raise ValueError(f"{where}: a ktrace report of version {json.dumps(rep['version'])[:20]}: this ktrace reads version "
                         f"{VERSION} (remake it with ktrace report --json)")
    findings = rep.get("findings")
    if findings is None:
        findings = []
    if not isinstance(findings, list) or not all(isinstance(f, dict) for f in findings):
        raise ValueError(f"{where}: its findings are not a list of objects")
    found = [_finding(f, i, where) for i, f in enumerate(findings, 1)]
    summary = rep.get("summary") or {}
    if not isinstance(summary, dict):
        raise ValueError(f"{where}: its summary is not an object")
    end = _time(summary.get("trace_end_ns"), "the summary's trace_end_ns", where)
    if end is not None and end < 0:
        raise ValueError(f"{where}: the summary's trace_end_ns {end} is negative")
    s = Summary.from_dict(summary)
    s.trace_end_ns = end
    tables = rep.get("tables") if isinstance(rep.get("tables"), dict) else {}
    views = rep.get("views") if isinstance(rep.get("views"), dict) else {}
    origin = rep.get("origin_ns")
    return ReportDocument(
        source=str(rep.get("source") or where), origin_ns=origin if isinstance(origin, int) else 0, summary=s, findings=found,
        tables={k: Table.from_dict(t) for k, t in tables.items() if isinstance(t, dict)},
        views=Views({k: (lambda v=v: v) for k, v in views.items() if isinstance(v, dict)}),
        trace_url=rep.get("trace_url") if isinstance(rep.get("trace_url"), str) else None,
        live=rep.get("live") if isinstance(rep.get("live"), dict) else None)


def load(src) -> ReportDocument:
    """A report document, from any of:

    - a :class:`ReportDocument` (returned as it is);
    - a computed report (``ktrace.analysis.report.Report``: its ``document()``);
    - a report file's path (``str`` or path-like): a regular file of at most
      :data:`MAX_REPORT_BYTES` (``ktrace report --json FILE`` writes one);
    - its bytes, or its parsed content (a dict).

    What is read from a file, bytes or dict is checked as :func:`from_dict` says.

    Raises:
        ValueError: one line, naming the file (or the document's source).
    """
    if isinstance(src, ReportDocument):
        return src
    if hasattr(src, "document"):
        return src.document()
    if isinstance(src, (str, os.PathLike)):
        return from_dict(_read(src), str(src))
    if isinstance(src, (bytes, bytearray)):
        return from_dict(_parse(bytes(src), "report"))
    return from_dict(src)


__all__ = ["FORMAT", "MAX_REPORT_BYTES", "SEVERITIES", "VERSION", "VIEW_NAMES", "Claim", "Finding", "Lazy", "ReportDocument",
           "Summary", "Table", "Views", "dump", "from_dict", "jsonable", "load"]
