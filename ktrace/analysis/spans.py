"""Span lookups within a workgroup: the span enclosing an event, the span that ran just before it,
and how much of a stretch of time a workgroup spent in any region (:func:`coverage`).

Every lookup stays within one workgroup (rank, launch, program), so it runs on blocks of whole
workgroups (:func:`workgroup_blocks`) whose temporaries stay small and are reused; within a
block, spans are ordered once on a packed (workgroup, time) key and each query is one binary
search. Keys too wide to pack take a general path with the same answers.
"""

from __future__ import annotations

import numpy as np

from .. import keys
from ..keys import argsort_stable, lexorder
from ..schema import EventKind
from .intervals import last_at_or_before, segmented_cummax, segmented_cumsum
from .trace import Trace

#: Span lookups and leaf detection run on blocks of about this many events (whole workgroups:
#: the answers never cross one), so that their temporaries stay small and are reused.
BLOCK_EVENTS = 1 << 20


def workgroup_blocks(trace: Trace, size: int | None = None) -> np.ndarray:
    """Row boundaries ``[0, ..., n]`` cutting the events into blocks of whole workgroups of
    about ``size`` (default :data:`BLOCK_EVENTS`) events."""
    n = trace.n_events
    size = BLOCK_EVENTS if size is None else size
    if n <= size:
        return np.array([0, n], np.int64)
    first = workgroup_starts(trace)
    at = np.searchsorted(first, np.arange(size, n, size))
    cuts = first[at[at < first.size]]
    return np.unique(np.concatenate([[0], cuts, [n]]))


def workgroup_starts(trace: Trace) -> np.ndarray:
    """The first row of each workgroup (cached)."""
    return trace.cached(("wg_first",), lambda: np.flatnonzero(np.r_[True, trace.wg[1:] != trace.wg[:-1]]))


def rank_launch_starts(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(first rows, ranks, launches)`` of the (rank, launch) groups of rows, in table order
    (from the workgroups: no pass over the rank and launch columns)."""
    if trace.n_events == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    k = trace.wg_keys
    ch = np.r_[True, (k[1:, 0] != k[:-1, 0]) | (k[1:, 1] != k[:-1, 1])]
    return workgroup_starts(trace)[ch], k[ch, 0], k[ch, 1]


def _per_block(trace: Trace, rows: np.ndarray, fn) -> np.ndarray:
    """``fn(rows, spans)`` on each block of whole workgroups (``rows`` and the spans in it, both
    sorted); the answers (event rows or -1) in the order of ``rows``."""
    rows = np.asarray(rows, np.int64)
    spans = trace.rows_of(EventKind.SPAN)
    if rows.size == 0 or spans.size == 0:
        return np.full(rows.size, -1, np.int64)
    srt = rows.size < 2 or bool((rows[1:] >= rows[:-1]).all())
    o = None if srt else argsort_stable(rows)
    rs = rows if srt else rows[o]
    bounds = workgroup_blocks(trace)
    qb = np.searchsorted(rs, bounds)
    sb = np.searchsorted(spans, bounds)
    out = np.full(rows.size, -1, np.int64)
    for k in range(bounds.size - 1):
        if qb[k + 1] > qb[k] and sb[k + 1] > sb[k]:
            out[qb[k] : qb[k + 1]] = fn(rs[qb[k] : qb[k + 1]], spans[sb[k] : sb[k + 1]])
    if srt:
        return out
    back = np.empty(rows.size, np.int64)
    back[o] = out
    return back


def _pack_pair(trace: Trace, spans: np.ndarray, rows: np.ndarray, t_spans: np.ndarray, t_rows: np.ndarray):
    """Packed (workgroup, time) keys of spans and queries of one block, or None when too wide."""
    wg = trace.wg
    w0 = int(wg[spans[0]]) if spans[0] < rows[0] else int(wg[rows[0]])
    w1 = max(int(wg[spans[-1]]), int(wg[rows[-1]]))
    lo = min(int(t_spans.min()), int(t_rows.min()))
    size = max(int(t_spans.max()), int(t_rows.max())) - lo + 1
    if size * (w1 - w0 + 1) >= keys.KEY_LIMIT:
        return None
    return (wg[spans] - w0) * size + (t_spans - lo), (wg[rows] - w0) * size + (t_rows - lo)


def enclosing_span(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For each event row, the row of the span of the same workgroup that encloses it, or -1.

    The innermost candidate is the span that started last before the event; if that span ended
    before the event ended (spans may overlap freely), the enclosing span that started earliest
    among those still open is taken instead (the outermost).

    Per block of whole workgroups, spans are ordered by (workgroup, start, longest first, row)
    and each query is one binary search.
    """
    return _per_block(trace, rows, lambda r, sp: _enclosing_block(trace, r, sp))


def _enclosing_block(trace: Trace, rows: np.ndarray, spans: np.ndarray) -> np.ndarray:
    s, e, wg = trace.column("start_ns"), trace.column("end_ns"), trace.wg
    keys = _pack_pair(trace, spans, rows, s[spans], s[rows])
    if keys is None:
        return _enclosing_span_merged(trace, rows, spans)
    ks, kq = keys
    o = lexorder(ks, -e[spans])
    srows = spans[o]
    ks = ks[o]
    # per position, the latest span at or before it with the largest end in its workgroup
    packed = _pack_by_group(wg[srows] - int(wg[srows[0]]), e[srows])
    if packed is None:
        return _enclosing_span_merged(trace, rows, spans)
    run = np.maximum.accumulate(packed)
    best = np.maximum.accumulate(np.where(packed == run, np.arange(srows.size), -1))
    del run, packed
    p = np.searchsorted(ks, kq, side="right") - 1
    valid = p >= 0
    pc = np.maximum(p, 0)
    cand = srows[pc]
    valid &= wg[cand] == wg[rows]
    contains = valid & (e[cand] >= e[rows]) & (cand != rows)
    res = np.where(contains, cand, -1)
    need = valid & ~contains
    if need.any():
        ni = np.flatnonzero(need)
        brow = srows[best[pc[ni]]]
        q = rows[ni]
        res[ni] = np.where((e[brow] >= e[q]) & (brow != q), brow, -1)
    return res


def _pack_by_group(group: np.ndarray, value: np.ndarray) -> np.ndarray | None:
    """``group * range + value`` (int64) for a nondecreasing group column, None if too wide."""
    lo = int(value.min())
    size = int(value.max()) - lo + 1
    if size * (int(group.max()) + 1) >= keys.KEY_LIMIT:
        return None
    return group * size + (value - lo)


def _enclosing_span_merged(trace: Trace, rows: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """:func:`enclosing_span` for times too wide for packed keys: one sort of spans and queries together."""
    rows = np.asarray(rows, np.int64)
    wg, s, e = trace.wg, trace.column("start_ns"), trace.column("end_ns")
    # one ordering of spans and queries by (workgroup, start; spans before queries at a tie,
    # longer spans first)
    n_s = spans.size
    allr = np.concatenate([spans, rows])
    typ = np.concatenate([np.zeros(n_s, np.int64), np.ones(rows.size, np.int64)])
    neg_end = -e[allr]
    order = np.lexsort((neg_end, typ, s[allr], wg[allr]))
    is_span = typ[order] == 0
    pos = np.arange(order.size)
    last_span = np.maximum.accumulate(np.where(is_span, pos, -1))
    # the running maximum end among spans so far (per workgroup: reset by comparing workgroups)
    sorted_rows = allr[order]
    sorted_wg = wg[sorted_rows]
    q_at = np.flatnonzero(~is_span)
    q_rows = sorted_rows[q_at]
    cand_pos = last_span[q_at]
    valid = cand_pos >= 0
    cand_rows = np.where(valid, sorted_rows[np.maximum(cand_pos, 0)], -1)
    valid &= sorted_wg[np.maximum(cand_pos, 0)] == wg[q_rows]
    contains = valid & (e[np.maximum(cand_rows, 0)] >= e[q_rows]) & (cand_rows != q_rows)
    res = np.where(contains, cand_rows, -1)
    # fallback: the span with the largest end among spans started so far in the workgroup
    need = valid & ~contains
    if need.any():
        span_end = np.where(is_span, e[sorted_rows], np.iinfo(np.int64).min)
        # segment-wise running argmax of end: encode (workgroup, end) so that a new workgroup resets
        wg_change = np.r_[True, sorted_wg[1:] != sorted_wg[:-1]]
        seg = np.cumsum(wg_change) - 1
        # rank of end within everything, so (seg, end-rank) fits one int64 key
        end_rank = np.argsort(np.argsort(span_end, kind="stable"), kind="stable")
        key = np.where(is_span, seg * (order.size + 1) + end_rank, -1)
        run = np.maximum.accumulate(key)
        best_pos_key = run[q_at[need]]
        same_seg = (best_pos_key >= 0) & (best_pos_key // (order.size + 1) == seg[q_at[need]])
        # turn the end rank back into a position
        pos_of_rank = np.empty(order.size, np.int64)
        pos_of_rank[end_rank] = np.arange(order.size)
        bpos = pos_of_rank[np.where(same_seg, best_pos_key % (order.size + 1), 0)]
        brow = sorted_rows[bpos]
        ok = same_seg & (e[brow] >= e[q_rows[need]]) & (brow != q_rows[need])
        res_need = np.where(ok, brow, -1)
        res[np.flatnonzero(need)] = res_need
    # queries were visited in sorted order; put the answers back in the order asked
    back = np.empty(rows.size, np.int64)
    back[order[~is_span] - n_s] = res
    return back


def preceding_span(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For each event row, the row of the span of the same workgroup that ended last at or before
    the event started (what the program was doing just before), or -1 (the latest row among
    spans that ended at the same time)."""
    return _per_block(trace, rows, lambda r, sp: _preceding_block(trace, r, sp))


def _preceding_block(trace: Trace, rows: np.ndarray, spans: np.ndarray) -> np.ndarray:
    s, e, wg = trace.column("start_ns"), trace.column("end_ns"), trace.wg
    keys = _pack_pair(trace, spans, rows, e[spans], s[rows])
    if keys is None:
        return _preceding_span_merged(trace, rows, spans)
    ks, kq = keys
    o = argsort_stable(ks)
    srows = spans[o]
    p = np.searchsorted(ks[o], kq, side="right") - 1
    crow = srows[np.maximum(p, 0)]
    return np.where((p >= 0) & (wg[crow] == wg[rows]), crow, -1)


def _preceding_span_merged(trace: Trace, rows: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """:func:`preceding_span` for times too wide for packed keys."""
    wg, s, e = trace.wg, trace.column("start_ns"), trace.column("end_ns")
    n_s = spans.size
    allr = np.concatenate([spans, rows])
    t = np.concatenate([e[spans], s[rows]])
    typ = np.concatenate([np.zeros(n_s, np.int64), np.ones(rows.size, np.int64)])
    order = np.lexsort((typ, t, wg[allr]))
    is_span = typ[order] == 0
    pos = np.arange(order.size)
    last = np.maximum.accumulate(np.where(is_span, pos, -1))
    q = np.flatnonzero(~is_span)
    cand = last[q]
    sorted_rows = allr[order]
    crow = sorted_rows[np.maximum(cand, 0)]
    ok = (cand >= 0) & (wg[crow] == wg[sorted_rows[q]])
    res = np.where(ok, crow, -1)
    back = np.empty(rows.size, np.int64)
    back[order[q] - n_s] = res
    return back


def coverage(trace: Trace, wgs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For the workgroups ``wgs`` (trace ids), the union of each one's spans, waits and notifies as
    disjoint blocks: ``(wg, start, end, covered time before the block within the workgroup)``,
    sorted by (wg, start); times relative to the capture's first event.

    Within a workgroup events are recorded when they end, so its rows are in order of end time:
    a running minimum of starts from the right finds where one block ends and the next begins,
    in one pass (no sort)."""
    def build():
        z = np.zeros(0, np.int64)
        u = np.unique(np.asarray(wgs, np.int64))
        if u.size == 0 or trace.n_events == 0:
            return z, z, z, z
        first = workgroup_starts(trace)
        lo = first[u]
        hi = np.where(u + 1 < first.size, first[np.minimum(u + 1, first.size - 1)], trace.n_events)
        cnt = hi - lo
        rows = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt) + np.repeat(lo, cnt)
        kind = trace.column("kind")[rows]
        sel = rows[(kind == int(EventKind.SPAN)) | (kind == int(EventKind.WAIT)) | (kind == int(EventKind.NOTIFY))]
        if sel.size == 0:
            return z, z, z, z
        g = trace.wg[sel]
        s = trace.column("start_ns")[sel] - trace.origin_ns
        e = trace.column("end_ns")[sel] - trace.origin_ns
        # suffix minimum of starts within each workgroup (reversed segmented cummax of -start)
        gr = g[::-1]
        sufmin = -segmented_cummax(-s[::-1], gr)[::-1]
        last = np.r_[g[1:] != g[:-1], True]
        nxt_min = np.r_[sufmin[1:], 0]
        brk = last | (e < nxt_min)  # no later event of the workgroup starts before this one ends
        new = np.r_[True, brk[:-1]]
        first = np.flatnonzero(new)
        b_s = np.minimum.reduceat(s, first)
        b_e = np.maximum.reduceat(e, first)
        b_g = g[first]
        length = b_e - b_s
        before = segmented_cumsum(length, b_g) - length
        return b_g.astype(np.int64), b_s.astype(np.int64), b_e.astype(np.int64), before.astype(np.int64)

    return build()


def covered(blocks, g: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time covered by the blocks of workgroup ``g`` up to time ``t`` (vectorised)."""
    bg, bs, be, before = blocks
    k = last_at_or_before(bg, bs, g, t)
    kc = np.maximum(k, 0)
    return np.where(k >= 0, before[kc] + np.clip(t - bs[kc], 0, be[kc] - bs[kc]) if bg.size else 0, 0)
