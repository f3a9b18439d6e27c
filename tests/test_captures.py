"""Capture files: round trip, merge, and bad-file handling (CONSTRUCTED captures, ktrace.captures.synth)."""

import zipfile

import numpy as np
import orjson
import pytest

from ktrace.decode import decode_buffer, pack_buffer
from ktrace.schema import packed_counts_bytes
from ktrace.captures import CaptureError, capture_from_bytes, capture_to_bytes, merge_captures, read_capture, write_capture
from ktrace.captures.file import Capture
from ktrace.captures.synth import constructed_capture


def _split(cap):
    return [Capture(world_size=cap.world_size, ranks={r: rc}, regions=cap.regions) for r, rc in cap.ranks.items()]


def test_round_trip_and_bytes(tmp_path):
    cap, _ = constructed_capture(world_size=2, seed=1)
    p = write_capture(tmp_path / "a.ktrace", cap)
    back = read_capture(p)
    assert sorted(back.ranks) == [0, 1] and back.regions == cap.regions and not back.partial
    for r in (0, 1):
        # stored packed: the device buffer without the slots no program reached
        assert np.array_equal(back.ranks[r].launches[0].raw, pack_buffer(cap.ranks[r].launches[0].raw))
        assert back.ranks[r].launches[0].raw.nbytes < cap.ranks[r].launches[0].raw.nbytes
        assert back.ranks[r].clock_samples == cap.ranks[r].clock_samples
    assert np.array_equal(back.events(), cap.events())
    again = capture_from_bytes(capture_to_bytes(cap))
    assert np.array_equal(again.events(), cap.events())


def test_merged_ranks_get_the_clock_fitted_from_every_ranks_samples(tmp_path):
    from ktrace.clock import attach_clock

    cap, _ = constructed_capture(world_size=3, seed=2)
    files = [write_capture(tmp_path / f"r{c.ranks.keys().__iter__().__next__()}.ktrace", c) for c in _split(cap)]
    merged = merge_captures(read_capture(f) for f in files)
    assert merged.clock is None and not merged.partial  # merging fits nothing
    model = attach_clock(merged)
    assert merged.clock == model.to_dict()
    assert merged.clock["method"] == "pingpong+drift" and len(merged.clock["ranks"]) == 3
    with pytest.raises(CaptureError, match="more than one"):
        merge_captures([read_capture(files[0]), read_capture(files[0])])


def test_missing_rank_warns_and_marks_partial(tmp_path, caplog):
    cap, _ = constructed_capture(world_size=3, seed=2)
    parts = _split(cap)
    merged = merge_captures(parts[:2])
    assert merged.partial and merged.missing_ranks == [2]
    assert "partial" in caplog.text and "ranks 2 of 3 are missing" in caplog.text
    back = read_capture(write_capture(tmp_path / "p.ktrace", merged))
    assert back.partial and back.missing_ranks == [2]


def test_bad_files_give_clear_errors(tmp_path):
    cap, _ = constructed_capture(world_size=1, seed=3)
    good = write_capture(tmp_path / "g.ktrace", cap).read_bytes()
    cases = {
        "missing": (None, "no such capture file"),
        "truncated": (good[: len(good) // 2], "truncated or corrupt"),
        "foreign": (b"\x89PNG\r\n\x1a\n" + b"x" * 100, "not a ktrace capture file"),
        "empty": (b"", "not a ktrace capture file"),
    }
    for name, (data, msg) in cases.items():
        p = tmp_path / f"{name}.ktrace"
        if data is not None:
            p.write_bytes(data)
        with pytest.raises(CaptureError, match=msg):
            read_capture(p)
    # a zip that is not ours, a newer version, a damaged buffer
    with zipfile.ZipFile(tmp_path / "zip.ktrace", "w") as z:
        z.writestr("hello.txt", "hi")
    with pytest.raises(CaptureError, match="no ktrace.json"):
        read_capture(tmp_path / "zip.ktrace")

    def rewrite(name, edit_meta=None, edit_buf=None):
        src = zipfile.ZipFile(tmp_path / "g.ktrace")
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            for info in src.infolist():
                data = src.read(info.filename)
                if info.filename == "ktrace.json" and edit_meta:
                    m = orjson.loads(data)
                    edit_meta(m)
                    data = orjson.dumps(m)
                if info.filename.endswith(".bin") and edit_buf:
                    data = edit_buf(data)
                z.writestr(info.filename, data)
        return tmp_path / name

    with pytest.raises(CaptureError, match="newer than this ktrace reads"):
        read_capture(rewrite("new.ktrace", edit_meta=lambda m: m.update(version=99)))
    # buffers are read (and CRC-checked) on first use: the damage shows there, named
    damaged = read_capture(rewrite("crc.ktrace", edit_buf=lambda b: b[:100] + bytes([b[100] ^ 0xFF]) + b[101:]))
    with pytest.raises(CaptureError, match=r"rank 0 launch 0: buffer is damaged"):
        damaged.events()
    with pytest.raises(CaptureError, match="damaged"):
        damaged.ranks[0].launches[0].decode(0, cache=False)
    with pytest.raises(CaptureError, match="damaged"):  # a size that disagrees is seen at once
        read_capture(rewrite("short.ktrace", edit_buf=lambda b: b[:-1]))
    # the trace writers read each buffer twice, unchecked while planning and checked while
    # writing: damage that still decodes and damage that does not are both reported as damage,
    # and nothing is written
    # (the clock model given: fitting one reads a buffer too)
    from ktrace.clock import clock_model_of
    from ktrace.export import write_chrome_json, write_perfetto

    model = clock_model_of(read_capture(tmp_path / "g.ktrace"))
    g = read_capture(tmp_path / "g.ktrace").ranks[0].launches[0]
    rec0 = 64 + packed_counts_bytes(int(np.prod(g.grid)))  # the first record of the packed buffer
    assert decode_buffer(g.raw).header.packed
    for k, at, bit in ((0, rec0 + 24, 0x01), (1, rec0 + 16, 0x0F)):  # an argument of the first event (decodes); its kind
        cap = read_capture(rewrite(f"w{k}.ktrace", edit_buf=lambda b: b[:at] + bytes([b[at] ^ bit]) + b[at + 1 :]))
        for write, suffix in ((write_chrome_json, ".json"), (write_perfetto, ".pftrace")):
            with pytest.raises(CaptureError, match=r"rank 0 launch 0: buffer is damaged"):
                write(cap, tmp_path / f"w{k}{suffix}", model=model, workers=1)
            assert not (tmp_path / f"w{k}{suffix}").exists()
    with pytest.raises(CaptureError, match="corrupt capture metadata"):
        read_capture(rewrite("meta.ktrace", edit_meta=lambda m: m.pop("world_size")))

    def launch0(**kw):
        return lambda m: m["ranks"][0]["launches"][0].update(kw)

    with pytest.raises(CaptureError, match=r"launch 0: corrupt capture metadata \(layout 'zip'"):
        read_capture(rewrite("layout.ktrace", edit_meta=launch0(layout="zip")))
    with pytest.raises(CaptureError, match="corrupt capture metadata"):  # records that do not fit its size
        read_capture(rewrite("records.ktrace", edit_meta=launch0(records=g.split_sizes()[1] + 1)))
    with pytest.raises(CaptureError, match="not a ktrace capture file"):
        capture_from_bytes(b"nope")


@pytest.mark.parametrize("compress", [False, True, "deflate", "lzma"])
def test_every_compression_reads_back_the_same(tmp_path, compress):
    c, _ = constructed_capture(world_size=2, programs=2, iters=2, seed=5)
    p = write_capture(tmp_path / "c.ktrace", c, compress=compress)
    back = read_capture(p)
    assert np.array_equal(back.events(), c.events())


def test_unknown_compression_is_refused(tmp_path):
    c, _ = constructed_capture(world_size=1, programs=1, iters=1, seed=5)
    with pytest.raises(ValueError, match="compress must be"):
        write_capture(tmp_path / "c.ktrace", c, compress="zstd")


def test_buffers_are_read_on_first_use_from_the_file_that_was_opened(tmp_path):
    cap, _ = constructed_capture(world_size=2, programs=2, iters=2, seed=6)
    p = write_capture(tmp_path / "c.ktrace", cap)
    back = read_capture(p)
    ln = back.ranks[0].launches[0]
    assert "_LazyBuffer" in type(ln.__dict__["_raw"]).__name__  # not read yet
    assert ln.nbytes == pack_buffer(cap.ranks[0].launches[0].raw).nbytes
    # the path is replaced by another capture (a merge written over its input): the buffers
    # still come from the file read_capture opened
    other, _ = constructed_capture(world_size=2, programs=3, iters=1, seed=7)
    write_capture(p, other)
    d = ln.decode(0, cache=False)
    assert "_LazyBuffer" in type(ln.__dict__["_raw"]).__name__  # read for that call only
    assert np.array_equal(d.events, cap.ranks[0].launches[0].decode(0).events)
    assert np.array_equal(back.events(), cap.events())
    assert isinstance(ln.__dict__["_raw"], np.ndarray)  # kept once .raw was used
    # a capture not read yet pickles (and copies) with its buffers' bytes
    import copy
    import pickle

    fresh = read_capture(write_capture(tmp_path / "d.ktrace", cap))
    for c in (pickle.loads(pickle.dumps(fresh)), copy.deepcopy(fresh)):
        assert isinstance(c.ranks[1].launches[0].__dict__["_raw"], np.ndarray)
        assert np.array_equal(c.events(), cap.events())


def test_version_1_files_with_dense_buffers_still_read():
    """Captures written before buffers were packed (version 1; the bundled 4 x H200 captures)
    read as they did: dense buffers, byte for byte as on the device."""
    from pathlib import Path

    import ktrace

    path = Path(ktrace.__file__).parent / "data" / "a2a_skewed_4xh200.ktrace"
    assert orjson.loads(zipfile.ZipFile(path).read("ktrace.json"))["version"] == 1
    cap = read_capture(path)
    ln = cap.ranks[0].launches[0]
    h = decode_buffer(ln.raw).header
    assert not h.packed and ln.nbytes == h.nbytes
    assert cap.events().size > 1000


def test_read_buffers_reads_runs_together_and_checks_each(tmp_path):
    """Buffers read for a writer's batch (several launches at once, with gaps of other launches
    between them) are the stored bytes, each CRC-checked; a damaged one is named."""
    from ktrace.captures.file import read_buffers

    cap, _ = constructed_capture(world_size=2, programs=3, iters=2, seed=8)
    for rc in cap.ranks.values():  # six launches per rank
        rc.launches = [type(rc.launches[0])(index=k, kernel=f"k{k % 2}", grid=rc.launches[0].grid, capacity=rc.launches[0].capacity,
                                            raw=rc.launches[0].raw) for k in range(6)]
    p = write_capture(tmp_path / "b.ktrace", cap)
    back = read_capture(p)
    lns = back.ranks[1].launches[::2] + back.ranks[0].launches[1:2]  # every other launch of rank 1, one of rank 0
    got = read_buffers(lns)
    assert [bytes(b) for b in got] == [bytes(ln.load_raw()) for ln in lns]
    assert all("_LazyBuffer" in type(ln.__dict__["_raw"]).__name__ for ln in lns)  # read for that call only
    # damage the middle one of a run: reported by name when checked, not when not
    data = bytearray(p.read_bytes())
    lb = back.ranks[1].launches[2].__dict__["_raw"]
    at = lb.header_offset + 30 + len("r1/l2.bin") + 70
    data[at] ^= 0xFF
    (tmp_path / "d.ktrace").write_bytes(bytes(data))
    dam = read_capture(tmp_path / "d.ktrace")
    with pytest.raises(CaptureError, match="rank 1 launch 2: buffer is damaged"):
        read_buffers(dam.ranks[1].launches[::2])
    assert len(read_buffers(dam.ranks[1].launches[::2], verify=False)) == 3
