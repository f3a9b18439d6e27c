import numpy as np
import pytest

from ktrace import schema
from ktrace.schema import EventFlag, EventKind


def test_layout_sizes_are_the_documented_ones():
    assert schema.HEADER_DTYPE.itemsize == schema.HEADER_BYTES == 64
    assert schema.RECORD_DTYPE.itemsize == schema.DETAIL_DTYPE.itemsize == schema.RECORD_BYTES == 32
    # field offsets the device code relies on (int64 words 0..3 of a record)
    f = schema.RECORD_DTYPE.fields
    assert (f["t0"][1], f["t1"][1], f["tag"][1], f["hw"][1], f["arg0"][1], f["arg1"][1]) == (0, 8, 16, 20, 24, 28)
    d = schema.DETAIL_DTYPE.fields
    assert (d["x0"][1], d["x1"][1], d["x2"][1], d["x3"][1]) == (0, 8, 24, 28)


def test_header_round_trip():
    h = schema.Header(timer=schema.TimerKind.AMD_MEMREALTIME, tick_hz=100_000_000, capacity=12, n_programs=30, grid=(5, 3, 2), written=7, dropped=3)
    raw = h.to_bytes()
    assert len(raw) == 64 and raw[:4] == b"KTRC"
    arr = np.frombuffer(raw, schema.HEADER_DTYPE)[0]
    assert int(arr["capacity"]) == 12 and tuple(arr["grid"]) == (5, 3, 2) and int(arr["tick_hz"]) == 100_000_000
    from ktrace.decode import read_header

    assert read_header(raw) == h


@pytest.mark.parametrize("kind", [k for k in EventKind if k != EventKind.EMPTY])
def test_tag_round_trip(kind):
    for region in (1, 0x123456, schema.REGION_MASK):
        for flags in (0, EventFlag.DETAIL, EventFlag.DETAIL | EventFlag.TIMEOUT):
            t = schema.tag_of(kind, region, flags)
            assert t & 0xF == kind
            assert (t >> 4) & 0xF == flags
            assert t >> schema.REGION_SHIFT == region


def test_region_ids_are_stable_24_bit_and_never_zero():
    assert schema.region_id("copy") == schema.region_id("copy")
    assert schema.region_id("copy") != schema.region_id("copz")
    ids = {schema.region_id(f"r{i}") for i in range(2000)}
    assert all(0 < i <= schema.REGION_MASK for i in ids)
    assert len(ids) == 2000  # no collision among 2000 short names
    with pytest.raises(ValueError):
        schema.region_id("")


def test_header_validation():
    with pytest.raises(ValueError):
        schema.Header(timer=schema.TimerKind.NV_GLOBALTIMER, tick_hz=10**9, capacity=4, n_programs=6, grid=(2, 2, 1))
    with pytest.raises(ValueError):
        schema.Header(timer=schema.TimerKind.NV_GLOBALTIMER, tick_hz=0, capacity=4, n_programs=4, grid=(2, 2, 1))
    assert schema.buffer_bytes(10, 3) == 64 + 10 * 3 * 32 + 10 * 4


def test_unpack_header_reads_what_the_header_dtype_reads():
    """The struct parse of a header (what the decoder uses) and ``HEADER_DTYPE`` agree field by
    field, on random bytes (every field's bit pattern) and on a real header."""
    rng = np.random.default_rng(7)
    h = schema.Header(timer=schema.TimerKind(1), tick_hz=10**9, capacity=8, n_programs=6, grid=(3, 2, 1),
                      written=5, dropped=2, layout=schema.LAYOUT_PACKED)
    bufs = [h.to_array().tobytes()] + [rng.integers(0, 256, schema.HEADER_BYTES, dtype=np.uint8).tobytes() for _ in range(200)]
    for b in bufs:
        want = np.frombuffer(b, schema.HEADER_DTYPE)[0]
        got = schema.unpack_header(b)
        assert list(got) == list(schema.HEADER_DTYPE.names)
        for name in schema.HEADER_DTYPE.names:
            w = want[name]
            assert got[name] == (tuple(int(x) for x in w) if np.ndim(w) else int(w)), name
    assert schema.unpack_header(bufs[0])["grid"] == (3, 2, 1)


def test_ranges_text_lists_runs_shorter_than_min_run_one_by_one():
    from ktrace.text import ranges_text

    v = [10, 9, 0, 1, 2, 3, 7, 3]
    assert ranges_text(v) == "0-3, 7, 9-10"
    assert ranges_text(v, 3) == "0-3, 7, 9, 10"
    assert ranges_text([4, 5, 6], 4) == "4, 5, 6" and ranges_text([], 3) == ""
