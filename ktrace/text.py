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
