"""Decoding real event buffers recorded on an H200 (tests/fixtures/probes_gpu.ktrace, remade by
``python -m tests.fixtures.make_probe_fixture``), and the decoder's behaviour on corrupt bytes."""

from pathlib import Path

import numpy as np
import pytest

from ktrace import schema
from ktrace.decode import DecodeError, count_kinds, decode_buffer, decode_columns, pack_buffer
from ktrace.captures.file import read_capture
from ktrace.schema import EventFlag, EventKind

FIXTURE = Path(__file__).parent / "fixtures" / "probes_gpu.ktrace"


@pytest.fixture(scope="module")
def cap():
    return read_capture(FIXTURE)


def _launch(cap, kernel):
    (ln,) = [ln for ln in cap.ranks[0].launches if ln.kernel == kernel]
    return ln


def test_fixture_is_a_real_gpu_capture(cap):
    dev = cap.ranks[0].device
    assert dev["vendor"] == "nvidia" and "H200" in dev["name"] and dev["timer"] == "NV_GLOBALTIMER"
    assert [ln.kernel for ln in cap.ranks[0].launches] == ["copy_kernel", "shape_kernel", "wait_layout_kernel", "overflow_kernel"]


def test_copy_kernel_one_span_per_program(cap):
    d = _launch(cap, "copy_kernel").decode(0)
    ev = d.events
    assert d.written == 5 and d.dropped == 0
    assert (ev["kind"] == EventKind.SPAN).all() and list(ev["program"]) == list(range(5))
    assert (ev["arg0"] == ev["program"]).all() and (ev["arg1"] == 4096).all()
    assert (ev["end"] >= ev["start"]).all()
    assert cap.region_name(int(ev["region"][0])) == "copy"


def test_shape_kernel_counts_nesting_and_counter_values(cap):
    ev = _launch(cap, "shape_kernel").decode(0).events
    rid = {v: k for k, v in cap.regions.items()}
    for p in range(37):
        e = ev[ev["program"] == p]
        k = p % 4 + 1
        assert len(e) == 2 * k + 2
        inner = e[(e["kind"] == EventKind.SPAN) & (e["region"] == rid["inner"])]
        outer = e[(e["kind"] == EventKind.SPAN) & (e["region"] == rid["outer"])]
        assert len(inner) == k and len(outer) == 1
        assert (inner["start"] >= outer["start"][0]).all() and (inner["end"] <= outer["end"][0]).all()
        (c,) = e[e["kind"] == EventKind.COUNTER]
        assert c["arg0"] == p * 2**33 + 7


def test_wait_records_fold_their_detail(cap):
    ev = _launch(cap, "wait_layout_kernel").decode(0).events
    w = ev[ev["kind"] == EventKind.WAIT]
    assert len(w) == 6 and (w["arg2"] == 1 << 40).all() and (w["arg4"] == -5).all()
    assert list((w["flags"] & EventFlag.TIMEOUT) != 0) == [bool(p % 2) for p in w["program"]]


def test_overflow_drop_counts(cap):
    d = _launch(cap, "overflow_kernel").decode(0)
    # 5 marks and one two-slot wait into 3 slots: 3 marks kept; 2 marks and the wait dropped
    assert d.written == 4 * 3 and list(d.dropped_per_program) == [3, 3, 3, 3]
    assert d.header.capacity == 3 and d.header.dropped == 12


def test_decode_is_vectorised_over_a_big_buffer():
    """A 1M-slot buffer built by tiling the real copy records decodes in well under a second."""
    import time

    raw = np.asarray(read_capture(FIXTURE).ranks[0].launches[0].raw)
    rec = np.frombuffer(raw, schema.RECORD_DTYPE, count=5 * 4, offset=64)
    rec = rec[(rec["tag"] & 0xF) != 0]
    assert len(rec) == 5
    P, C = 1 << 18, 4
    big = np.zeros(schema.buffer_bytes(P, C), np.uint8)
    big[:64] = np.frombuffer(schema.Header(timer=schema.TimerKind.NV_GLOBALTIMER, tick_hz=10**9, capacity=C, n_programs=P, grid=(P, 1, 1)).to_bytes(), np.uint8)
    recs = np.frombuffer(big, schema.RECORD_DTYPE, count=P * C, offset=64).copy()
    recs[:] = np.resize(rec, P * C)
    big[64 : 64 + recs.nbytes] = recs.view(np.uint8)
    t = time.perf_counter()
    d = decode_buffer(big)
    assert d.written == P * C
    assert time.perf_counter() - t < 2.0


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_raw():
    return [np.asarray(ln.raw).copy() for ln in read_capture(FIXTURE).ranks[0].launches]


def test_truncated_buffers_are_reported(real_raw):
    raw = real_raw[1]
    for n in (0, 3, 63, 64, 100, len(raw) - 1):
        with pytest.raises(DecodeError, match="truncated|shorter"):
            decode_buffer(raw[:n])


def test_foreign_and_newer_buffers_are_reported(real_raw):
    raw = real_raw[0].copy()
    raw[:4] = np.frombuffer(b"\x7fELF", np.uint8)
    with pytest.raises(DecodeError, match="not a ktrace event buffer"):
        decode_buffer(raw)
    raw = real_raw[0].copy()
    raw[4:6] = np.frombuffer(np.uint16(schema.FORMAT_VERSION + 1).tobytes(), np.uint8)
    with pytest.raises(DecodeError, match="newer"):
        decode_buffer(raw)


def test_corrupt_records_are_reported(real_raw):
    raw = real_raw[2].copy()  # wait_layout: event + DETAIL pairs
    rec = np.frombuffer(raw, schema.RECORD_DTYPE, offset=64, count=6 * 8).copy()
    bad = rec.copy()
    bad["tag"][1] = (int(bad["tag"][1]) & 0xFFFFFFF0) | 9  # unknown kind 9
    raw2 = raw.copy(); raw2[64 : 64 + bad.nbytes] = bad.view(np.uint8)
    with pytest.raises(DecodeError, match="unknown kind 9"):
        decode_buffer(raw2)
    bad = rec.copy()
    bad["tag"][0] = int(bad["tag"][0]) & ~(int(EventFlag.DETAIL) << 4) & 0xFFFFFFFF  # event no longer owns its DETAIL
    raw2 = raw.copy(); raw2[64 : 64 + bad.nbytes] = bad.view(np.uint8)
    with pytest.raises(DecodeError, match="DETAIL record"):
        decode_buffer(raw2)


def test_fuzz_decoder_raises_only_decode_error(real_raw):
    """Random byte changes, truncations and splices of real buffers, dense and packed: the
    decoder either returns a table or raises DecodeError, never anything else; and decoding
    with the writers' batch decoder agrees (the same rows, or an error)."""
    rng = np.random.default_rng(1234)
    outcomes = {"ok": 0, "error": 0}
    packed = [pack_buffer(r) for r in real_raw]
    for i in range(3000):
        raw = (real_raw if i % 2 else packed)[(i // 2) % len(real_raw)].copy()
        op = (i // 2) % 4
        if op == 0:  # flip random bytes anywhere
            idx = rng.integers(0, len(raw), size=rng.integers(1, 9))
            raw[idx] = rng.integers(0, 256, size=idx.size)
        elif op == 1:  # damage the header only
            idx = rng.integers(0, 64, size=rng.integers(1, 4))
            raw[idx] = rng.integers(0, 256, size=idx.size)
        elif op == 2:  # truncate
            raw = raw[: rng.integers(0, len(raw))]
        else:  # random garbage after a valid header
            raw[64:] = rng.integers(0, 256, size=len(raw) - 64)
        try:
            d = decode_buffer(raw)
            assert d.written == len(d.events)
            outcomes["ok"] += 1
        except DecodeError as e:
            assert str(e)
            outcomes["error"] += 1
            with pytest.raises(DecodeError):
                decode_columns([raw])
        else:
            _, counts, cols = decode_columns([raw])
            assert counts.tolist() == [d.written] and np.array_equal(cols["start"], d.events["start"])
    assert outcomes["ok"] > 0 and outcomes["error"] > 0, outcomes


def test_packed_buffers_decode_to_the_same_events(real_raw):
    """The packed layout (what capture files store) keeps each program's slots up to its last
    non-empty one: smaller, and the same events, dropped counts and kind counts."""
    for raw in real_raw:
        packed = pack_buffer(raw)
        dense, pk = decode_buffer(raw), decode_buffer(packed)
        assert pk.header.packed and not dense.header.packed
        assert packed.nbytes <= raw.nbytes + schema.packed_counts_bytes(pk.header.n_programs)  # (a full buffer: its counts more)
        assert np.array_equal(dense.events, pk.events) and np.array_equal(dense.dropped_per_program, pk.dropped_per_program)
        assert (pk.header.written, pk.header.dropped) == (dense.header.written, dense.header.dropped)
        assert np.array_equal(count_kinds(raw), count_kinds(packed))
        assert np.array_equal(pack_buffer(packed), packed)  # packed already: as it is
    # the launches of the fixture leave slots unused: packing cuts them
    assert sum(pack_buffer(r).nbytes for r in real_raw) < sum(r.nbytes for r in real_raw)


def test_bad_packed_buffers_are_reported(real_raw):
    raw = real_raw[2]
    packed = pack_buffer(raw)
    P, C = decode_buffer(raw).header.n_programs, decode_buffer(raw).header.capacity
    kept = packed[64 : 64 + 4 * P].view("<u4")
    bad = packed.copy()
    bad[64:68] = np.frombuffer(np.uint32(C + 1).tobytes(), np.uint8)  # more slots than the program has
    with pytest.raises(DecodeError, match="more than its"):
        decode_buffer(bad)
    bad = packed.copy()
    bad[64:68] = np.frombuffer(np.uint32(int(kept[0]) + 1).tobytes(), np.uint8)  # counts that need more bytes
    with pytest.raises(DecodeError, match="truncated"):
        decode_buffer(bad[: len(packed)])
    for n in (70, 64 + schema.packed_counts_bytes(P) + 40, len(packed) - 1):
        with pytest.raises(DecodeError, match="truncated|shorter"):
            decode_buffer(packed[:n])
    bad = packed.copy()
    bad[4:6] = np.frombuffer(np.uint16(1).tobytes(), np.uint8)  # a version-1 header has no packed layout
    with pytest.raises(DecodeError, match="layout 1 in a version-1 header"):
        decode_buffer(bad)
    bad = packed.copy()
    bad[11] = 7  # (the layout byte)
    with pytest.raises(DecodeError, match="unknown buffer layout 7"):
        decode_buffer(bad)


def test_decode_columns_and_split_match_decode_buffer(real_raw):
    """Several buffers of one layout decoded together (what the trace writers do): the same
    rows, fields and headers as decoding each alone; a bad one is named, with its own message."""
    from ktrace.decode import COLUMNS, BufferDecodeError, decode_columns, pack_buffer

    rng = np.random.default_rng(7)
    for raw in real_raw:
        alone = decode_buffer(raw)
        P, C = alone.header.n_programs, alone.header.capacity
        # copies with events removed at random (emptied slots), so the launches differ
        bufs = [raw]
        for _ in range(2):
            b = raw.copy()
            rec = b[64 : 64 + P * C * 32].view(schema.RECORD_DTYPE)
            kind = rec["tag"] & 0xF
            gone = np.flatnonzero((kind != 0) & (kind != EventKind.DETAIL) & (rng.random(P * C) < 0.3))
            gone = gone[(rec["tag"][gone] >> 4 & EventFlag.DETAIL) == 0]  # (events with a DETAIL keep it)
            rec[gone] = 0
            bufs.append(b)
        expect = [decode_buffer(b) for b in bufs]
        heads, counts, cols = decode_columns(bufs)
        assert counts.tolist() == [d.written for d in expect]
        assert [(h.written, h.dropped, h.grid) for h in heads] == [(d.written, d.dropped, d.header.grid) for d in expect]
        table = np.concatenate([d.events for d in expect])
        for c in COLUMNS:
            assert np.array_equal(cols[c], table[c]), c
        # packed (as capture files store them): the same rows; ``index`` points into the records returned
        packed = [pack_buffer(b) for b in bufs]
        _, counts2, cols2, rec2 = decode_columns(packed, ("program", "slot", "arg2", "index"), records=True)
        assert counts2.tolist() == counts.tolist() and set(cols2) == {"kind", "flags", "start", "end", "program", "slot", "arg2", "index"}
        for c in ("arg2", "program", "slot", "start"):
            assert np.array_equal(cols2[c], table[c]), c
        assert np.array_equal(rec2["t0"][cols2["index"]].view(np.int64), table["start"])
        with pytest.raises(ValueError, match="different layouts"):
            decode_columns([bufs[0], packed[0]])
    # the second of three buffers is corrupt: named by its index, with its own message
    raw = real_raw[2]
    bad = raw.copy()
    bad[64 + 16] = (bad[64 + 16] & 0xF0) | 9  # first record: unknown kind 9
    with pytest.raises(DecodeError, match="unknown kind 9") as alone:
        decode_buffer(bad)
    with pytest.raises(BufferDecodeError) as got:
        decode_columns([raw, bad, raw])
    assert got.value.index == 1 and str(got.value) == str(alone.value)
    with pytest.raises(ValueError, match="different layouts"):
        decode_columns([real_raw[0], real_raw[1]])


def test_screen_batch_is_each_buffer_screened_alone(real_raw):
    """The counts and verdicts of launches screened together (one layout, or several) are those
    of each screened alone; a zeroed launch is named, a buffer that does not decode raises its
    own error."""
    from ktrace.decode import screen_batch, screen_counts

    zeroed = real_raw[1].copy()
    P, C = decode_buffer(zeroed).header.n_programs, decode_buffer(zeroed).header.capacity
    rec = zeroed[64 : 64 + P * C * 32].view(schema.RECORD_DTYPE)
    rec["t0"][(rec["tag"] & 0xF) != 0] = 0
    rec["t1"][(rec["tag"] & 0xF) != 0] = 0
    peer = real_raw[2].copy()  # a wait naming peer 9 of a world of 2
    rec = peer[64:].view(np.uint8)[: (peer.size - 64) // 32 * 32].view(schema.RECORD_DTYPE)
    rec["arg0"][np.flatnonzero((rec["tag"] & 0xF) == EventKind.WAIT)[:1]] = 9
    packed = [pack_buffer(b) for b in real_raw]
    for batch in ([real_raw[1], zeroed, real_raw[1]], [packed[0], packed[0]], packed, real_raw + [zeroed, peer]):
        alone = [screen_counts(b, 2) for b in batch]
        got = screen_batch(batch, 2)
        assert [c.tolist() for c, _ in got] == [c.tolist() for c, _ in alone]
        assert [w for _, w in got] == [w for _, w in alone]
    assert screen_counts(zeroed, 2)[1].startswith("every one of its") and "peer 9" in screen_counts(peer, 2)[1]
    bad = real_raw[2].copy()
    bad[64 + 16] = (bad[64 + 16] & 0xF0) | 9
    bad[:4] = np.frombuffer(b"\x7fELF", np.uint8)
    with pytest.raises(DecodeError, match="not a ktrace event buffer") as alone:
        decode_buffer(bad)
    with pytest.raises(DecodeError) as got:
        screen_batch([real_raw[2], bad], 2)
    assert str(got.value) == str(alone.value) and type(got.value) is DecodeError
