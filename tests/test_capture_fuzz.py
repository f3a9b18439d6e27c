"""Fuzzed damage to capture files: truncation and flipped bits at random offsets, in every way
the writer compresses (stored, deflate, LZMA) and in bzip2 members (which readers read too),
spread over each member's header and data, the zip directory and its end record.

Every damaged file must either read back exactly as the undamaged one (the byte hit something
no reader uses, e.g. a timestamp) or raise :class:`CaptureError` with one line naming the file,
through the API (``read_capture``, ``Capture.events``, ``analysis.prepare``, the trace writers)
and through the CLI (``ktrace info``: exit status 2, one line on stderr, no traceback). Nothing
may decode into other events.

Seeded; ``KTRACE_FUZZ_CASES`` sets the cases per compression mode (default 64) and
``KTRACE_FUZZ_SEED`` the seed (default 1234), e.g. ``KTRACE_FUZZ_CASES=5000 python3 -m pytest -q
tests/test_capture_fuzz.py -s`` (the counts are printed with ``-s``).
"""

from __future__ import annotations

import collections
import io
import os
import random
import struct
import zipfile

import numpy as np
import pytest

from ktrace.captures import CaptureError, capture_to_bytes, read_capture, write_capture
from ktrace.captures.synth import constructed_capture
from ktrace.cli import main

CASES = int(os.environ.get("KTRACE_FUZZ_CASES", "64"))
SEED = int(os.environ.get("KTRACE_FUZZ_SEED", "1234"))

#: How each mode's file is made: the writer's own modes, and bzip2 (members recompressed).
MODES = {"stored": False, "deflate": "deflate", "lzma": "lzma", "bzip2": None}


def _recompress(data: bytes, compression: int) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as z:
        for info in src.infolist():
            z.writestr(info.filename, src.read(info))
    return out.getvalue()


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """mode -> (the file's bytes, its contents as a reader writes them back, its events)."""
    cap, _ = constructed_capture(world_size=2, programs=3, iters=2, round_trips=64, seed=21)
    cap.run_id = "fuzz-run"
    d = tmp_path_factory.mktemp("fuzz-originals")
    out = {}
    for mode, compress in MODES.items():
        if compress is None:
            data = _recompress(write_capture(d / "s.ktrace", cap).read_bytes(), zipfile.ZIP_BZIP2)
        else:
            data = write_capture(d / f"{mode}.ktrace", cap, compress=compress).read_bytes()
        p = d / f"o-{mode}.ktrace"
        p.write_bytes(data)
        back = read_capture(p)
        out[mode] = (data, _contents(back), back.events())
    return out


def _contents(cap) -> dict[str, bytes]:
    """What a capture holds, as the members of the file it writes (their zip headers aside)."""
    zf = zipfile.ZipFile(io.BytesIO(capture_to_bytes(cap)))
    return {name: zf.read(name) for name in zf.namelist()}


def _regions(data: bytes) -> list[tuple[str, int, int]]:
    """(what, start, end) of each part of a zip: members' local headers and data, the
    directory, the end record."""
    zf = zipfile.ZipFile(io.BytesIO(data))
    parts = []
    for info in zf.infolist():
        n_name, n_extra = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
        start = info.header_offset + 30 + n_name + n_extra
        parts.append((f"{info.filename} header", info.header_offset, start))
        parts.append((f"{info.filename} data", start, start + info.compress_size))
    end = data.rfind(b"PK\x05\x06")
    cd = struct.unpack("<I", data[end + 16 : end + 20])[0]
    parts += [("zip directory", cd, end), ("zip end record", end, len(data))]
    return [p for p in parts if p[2] > p[1]]


def _damaged(data: bytes, rng: random.Random, k: int, regions) -> tuple[str, bytes]:
    if k % 4 == 3:
        cut = rng.randrange(len(data))
        return f"truncated to {cut} bytes", data[:cut]
    what, a, b = regions[(k - k // 4) % len(regions)]  # every part in turn
    at = rng.randrange(a, b)
    bit = 1 << rng.randrange(8)
    out = bytearray(data)
    out[at] ^= bit
    return f"bit {bit:#x} of byte {at} ({what}) flipped", bytes(out)


@pytest.mark.parametrize("mode", list(MODES))
def test_damaged_captures_raise_capture_error_or_read_back_unchanged(mode, originals, tmp_path, capsys):
    from ktrace.analysis import prepare
    from ktrace.export import write_chrome_json

    data, clean, events = originals[mode]
    rng = random.Random(f"{SEED}-{mode}")
    regions = _regions(data)
    counts: collections.Counter = collections.Counter()
    path = tmp_path / "damaged.ktrace"
    for k in range(CASES):
        how, bad = _damaged(data, rng, k, regions)
        path.write_bytes(bad)
        case = f"{mode}, case {k}: {how}"
        kind = "truncation" if how.startswith("truncated") else "flip"
        try:
            cap = read_capture(path)
            got = cap.events()
        except CaptureError as e:
            msg = str(e)
            assert "\n" not in msg and msg.startswith(str(path)), f"{case}: {msg!r}"
            counts[f"{kind}: CaptureError"] += 1
            api_error = True
        else:
            # nothing invented: read back exactly as the undamaged file, events and metadata
            assert np.array_equal(got, events), f"{case}: other events decoded"
            assert _contents(cap) == clean, f"{case}: other contents read"
            counts[f"{kind}: read back unchanged"] += 1
            api_error = False
        if k % 8 == 0:  # the other ways in: the analyses' reader and a trace writer
            for call in (lambda: prepare(path), lambda: write_chrome_json(read_capture(path), tmp_path / "t.json", workers=1)):
                try:
                    call()
                except CaptureError as e:
                    assert api_error and "\n" not in str(e), f"{case}: {e}"
                else:
                    assert not api_error, f"{case}: read elsewhere although damaged"
            assert api_error != (tmp_path / "t.json").exists(), f"{case}: a trace written from a damaged capture"
            (tmp_path / "t.json").unlink(missing_ok=True)
        capsys.readouterr()
        rc = main(["info", str(path)])
        out, err = capsys.readouterr()
        if api_error:
            assert rc == 2 and out == "" and len(err.splitlines()) == 1, f"{case}: exit {rc}, stderr {err!r}"
            assert err.startswith(f"ktrace info: {path}") and "Traceback" not in err, f"{case}: {err!r}"
        else:
            assert rc == 0 and err == "", f"{case}: exit {rc}, stderr {err!r}"
    assert counts["flip: CaptureError"] > 0 and counts["truncation: CaptureError"] > 0, counts
    with capsys.disabled():
        print(f"\n[fuzz] {mode}: {CASES} cases (seed {SEED}): " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
