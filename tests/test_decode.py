"""Decoding real event buffers recorded on an H200 (tests/fixtures/probes_gpu.ktrace, remade by
``python -m tests.fixtures.make_probe_fixture``), and the decoder's behaviour on corrupt bytes."""

from pathlib import Path

import numpy as np
import pytest

from ktrace import schema
from ktrace.decode import DecodeError, decode_buffer
from ktrace.io.capture_file import read_capture
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
    """Random byte changes, truncations and splices of real buffers: the decoder either returns
    a table or raises DecodeError, never anything else."""
    rng = np.random.default_rng(1234)
    outcomes = {"ok": 0, "error": 0}
    for i in range(3000):
        raw = real_raw[i % len(real_raw)].copy()
        op = i % 4
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
    assert outcomes["ok"] > 0 and outcomes["error"] > 0, outcomes


def test_decode_columns_and_split_match_decode_buffer(real_raw):
    """Several buffers of one layout decoded together (what the trace writers do): the same
    rows, fields and headers as decoding each alone; a bad one is named, with its own message."""
    from ktrace.decode import COLUMNS, BufferDecodeError, decode_columns, decode_split

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
        records = np.concatenate([np.frombuffer(b, schema.RECORD_DTYPE, count=P * C, offset=64) for b in bufs])
        _, counts2, cols2 = decode_split([b[:64].tobytes() for b in bufs], records, [b[64 + P * C * 32 :].tobytes() for b in bufs],
                                         ("program", "arg2"))
        assert counts2.tolist() == counts.tolist() and set(cols2) == {"kind", "flags", "start", "end", "program", "arg2"}
        assert np.array_equal(cols2["arg2"], table["arg2"]) and np.array_equal(cols2["program"], table["program"])
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
