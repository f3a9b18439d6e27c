"""Text that several layers write the same way: durations, rank and program lists.

The analyses, the reports (terminal and HTML) and the command line all format through here, so
a duration reads the same everywhere.
"""

from __future__ import annotations

import math


def fmt_ns(ns) -> str:
    """A duration in words: 850 ns, 40.3 µs, 3.10 ms, 2.05 s ("?" for None or NaN)."""
    if ns is None:
        return "?"
    ns = float(ns)
    if not math.isfinite(ns):
        return "?"
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


#: The one definition and label of each count and time that several commands print (``info``,
#: ``report``, ``diff``, ``merge``, the HTML, the report JSON, the Parquet manifest): the JSON key
#: (the report summary's, the diff summary's, the manifest's ``summary``) -> (label, definition).
#: Text and HTML print ``label`` (with the definition where the figure first appears); the
#: figures themselves come from one function each (``ktrace.captures.launch_count``,
#: ``ktrace.analysis.causes.kernel_time_total``, the waits table), never computed again.
MEASURES: dict[str, tuple[str, str]] = {
    "launches": ("launches", "a launch: one kernel launch, on every rank that ran it"),
    "events": ("events", "records decoded from the capture, every rank and launch"),
    "kernel_time_ns": ("kernel time", "launch durations summed: each launch from its first event to its last, over every rank"),
    "waits": ("waits", "traced spin-lock waits, every rank"),
    "wait_ns": ("wait time", "the waits' durations summed"),
}
#: The per-rank measures of ``ktrace diff`` (``ktrace.analysis.compare.diff_ranks``), in words:
#: ``extent`` is not the kernel time (:data:`MEASURES`, over every rank) but one rank's share of it;
#: ``wait time`` sums the same waits as the report's.
RANK_MEASURES = {"extent": "the rank's first event to its last", "wait time": "its waits' durations summed",
                 "busy": "its workgroups' busy time summed"}


def count_text(key: str, n: int) -> str:
    """A count with its label: ``count_text("launches", 2)`` -> "2 launches" (one: "1 launch")."""
    label = MEASURES[key][0]
    if n == 1:
        label = label[:-2] if label.endswith("ches") else label[:-1]
    return f"{n:,} {label}"


def kernel_time_value(ns, launches: int | None = None) -> str:
    """The kernel time with its definition: "52.0 µs (launch durations summed, 26.0 µs per launch)"."""
    per = f", {fmt_ns(ns / launches)} per launch" if launches and launches > 1 and ns is not None else ""
    return f"{fmt_ns(ns)} (launch durations summed{per})"


def kernel_time_text(ns, launches: int | None = None) -> str:
    """The kernel time with its label: "kernel time 52.0 µs (launch durations summed, ...)"."""
    return f"{MEASURES['kernel_time_ns'][0]} {kernel_time_value(ns, launches)}"


def kernel_time_change_text(a_ns, b_ns, a_launches: int, b_launches: int) -> str:
    """``diff``'s first line, the same words as the report's: the kernel time of A and B, and per
    launch (the captures may hold different numbers of launches; the change is per launch)."""
    pa = a_ns / a_launches if a_launches else None
    pb = b_ns / b_launches if b_launches else None
    ch = f" ({100 * (pb - pa) / pa:+.1f}% per launch)" if pa and pb is not None else ""
    return (f"{MEASURES['kernel_time_ns'][0]} (launch durations summed): {fmt_ns(a_ns)} over {count_text('launches', a_launches)}"
            f" -> {fmt_ns(b_ns)} over {count_text('launches', b_launches)}; per launch {fmt_ns(pa)} -> {fmt_ns(pb)}{ch}")


def diff_headline(s) -> str:
    """``diff``'s first line (text and HTML) from its summary: A's and B's kernel time and wait
    time, labelled and defined as the report's (:data:`MEASURES`)."""
    (la, lb), (ka, kb), (na, nb), (wa, wb) = s["launches"], s["kernel_time_ns"], s["waits"], s["wait_ns"]
    kt = kernel_time_change_text(ka, kb, la, lb)
    wt = MEASURES["wait_ns"][0]
    return (f"{kt[0].upper()}{kt[1:]}. {wt[0].upper()}{wt[1:]}: {fmt_ns(wa)} ({count_text('waits', na)}) -> "
            f"{fmt_ns(wb)} ({count_text('waits', nb)}).")


def ranks_text(ranks) -> str:
    """``[0, 1, 3]`` -> "ranks 0, 1, 3"; one rank -> "rank 2"."""
    rs = sorted({int(x) for x in ranks})
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return "ranks " + ", ".join(str(x) for x in rs)


def programs_text(progs, shown: int = 8) -> str:
    """``[3]`` -> "program 3"; many -> "programs 1, 2, 5 and 9 more" (the first ``shown``)."""
    ps = sorted({int(p) for p in progs})
    if len(ps) == 1:
        return f"program {ps[0]}"
    head = ", ".join(str(p) for p in ps[:shown])
    return f"programs {head}" + (f" and {len(ps) - shown} more" if len(ps) > shown else "")


def ranges_text(values, min_run: int = 2) -> str:
    """``[0, 1, 2, 3, 7, 9, 10]`` -> "0-3, 7, 9-10" (sorted, duplicates dropped); runs of fewer
    than ``min_run`` consecutive values are listed one by one (``min_run=3``: "0-3, 7, 9, 10")."""
    vs = sorted({int(v) for v in values})
    out, i = [], 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        if j - i + 1 >= max(min_run, 2):
            out.append(f"{vs[i]}-{vs[j]}")
        else:
            out.extend(str(v) for v in vs[i : j + 1])
        i = j + 1
    return ", ".join(out)


#: Characters that must not reach a terminal raw: C0 controls (ESC, BEL, CR, LF, ...), DEL, the C1
#: controls (CSI, OSC, ... as single code points) and Unicode's line/paragraph separators and
#: bidirectional overrides (which reorder what a line shows).
_UNSAFE = {c: None for c in (*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F),
                             *range(0x2066, 0x206A))}


def _escape(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


_ESCAPES = {c: _escape(chr(c)) for c in _UNSAFE}


def printable(s) -> str:
    """``s`` as text that is safe on a terminal and in a one-line message: every control character
    (escape sequences, newlines, carriage returns, bells, bidirectional overrides) written as a
    visible escape (``\\x1b``, ``\\n``'s ``\\x0a``), and bytes that are not UTF-8 (a file name's,
    as Python keeps them: surrogates) as ``\\xNN``. Names from a capture file go through here
    wherever they are printed: a file is data, never an instruction to the terminal."""
    s = str(s)
    if s.isprintable() and s.isascii():
        return s
    s = s.translate(_ESCAPES)
    if any(0xD800 <= ord(c) <= 0xDFFF for c in s):  # undecodable bytes of a file name (surrogateescape)
        s = "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else (_escape(c) if 0xD800 <= ord(c) <= 0xDFFF else c)
                    for c in s)
    return s
