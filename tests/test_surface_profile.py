"""``ktrace merge --with-profile``: every class of profiler trace an attacker or a careless user
could give it, run as real ``ktrace`` processes under an address-space limit.

The profiles are the real fixture's (``tests/fixtures/profile``: an H100 run, ``torch.profiler``
CPU + CUDA) with one thing changed each: gzip bombs and corrupt deflate streams, devices and
FIFOs, times that are not a profiler's (negative, 10^12 µs among 4.7*10^12, ``true``, past 64
bits), integers past what they may be, and a capture that names a profile outside its folder.
Each must be refused in one line naming the file, exit status 2, no output written, memory below
the stated bound (a gzipped profile: what its stored bytes may inflate to, 256x). Counts are
printed with ``-s`` (``[profile] N cases: ...``).
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import orjson
import pytest

from .surface_kit import Surface, say_counts

pytest.importorskip("perfetto")

FIX = Path(__file__).resolve().parent / "fixtures" / "profile"
CAPTURE = FIX / "step.ktrace"
PROFILE = FIX / "step.kineto.json.gz"
S = Surface("profile")


_say_counts = say_counts(S)


@pytest.fixture(scope="module")
def doc() -> dict:
    return json.loads(gzip.decompress(PROFILE.read_bytes()))


@pytest.fixture()
def cap(tmp_path) -> Path:
    """The capture, without the profile it names beside it (each case gives its own)."""
    return Path(shutil.copy(CAPTURE, tmp_path / "step.ktrace"))


def _first(d: dict, cat: str | None = None) -> int:
    return next(i for i, e in enumerate(d["traceEvents"]) if e.get("ph") == "X" and (cat is None or e.get("cat") == cat))


def _edit(doc: dict, fn) -> dict:
    d = copy.deepcopy(doc)
    fn(d)
    return d


def _set(key, value, cat=None):
    def fn(d):
        d["traceEvents"][_first(d, cat)][key] = value
    return fn


def _arg(key, value):
    def fn(d):
        d["traceEvents"][_first(d, "kernel")]["args"][key] = value
    return fn


def _merge(tmp: Path, cap: Path, prof, cls: str, fault: str, *, names=None, size: int = 0, raw: bytes | None = None, hashed=True):
    out = tmp / "o.pftrace"
    p = tmp / "p.json" if prof is None else prof
    if raw is not None:
        p.write_bytes(raw)
    S.refused(tmp, ["merge", cap, "--with-profile", p, "-o", out], names=str(names or p), fault=fault, cls=cls,
              inputs=[cap, p] if p.is_file() and hashed else [cap], size=size)
    assert not out.exists()


def test_times_that_are_not_a_profilers_are_refused(tmp_path, cap, doc):
    i = _first(doc)
    cases = {
        "ts -10^15 µs": (_set("ts", -1e15), f"event {i}: ts -1e+15 µs is outside"),
        "ts 10^12 µs among 4.7*10^12": (_set("ts", 1e12), "days from the others"),
        "ts true": (_set("ts", True), f"event {i}: ts is true, not a number"),
        "ts a string": (_set("ts", "4706829164718"), f"event {i}: ts is \"4706829164718\", not a number"),
        "ts null": (_set("ts", None), f"event {i}: ts is null, not a number"),
        "ts missing": (lambda d: d["traceEvents"][_first(d)].pop("ts"), f"event {i}: ts is null"),
        "ts past 64 bits": (_set("ts", 18446744073709551616), "is outside"),
        "ts 10^300": (_set("ts", 1e300), "is outside"),
        "dur negative": (_set("dur", -5), f"event {i}: dur -5 µs is outside"),
        "dur 10^300": (_set("dur", 1e300), "dur 1e+300 µs is outside"),
        "dur a list": (_set("dur", [1]), "dur is [1], not a number"),
        "correlation 2^64-1": (_arg("correlation", 2**64 - 1), "args.correlation is 18446744073709551615, not an integer"),
        "correlation 1.5": (_arg("correlation", 1.5), "args.correlation is 1.5, not an integer"),
        "device a string": (_arg("device", "0"), "args.device is \"0\", not an integer"),
        "stream true": (_arg("stream", True), "args.stream is true, not an integer"),
        "rank true": (lambda d: d.update(distributedInfo={"rank": True}), "distributedInfo.rank is true, not a rank"),
        "rank -1": (lambda d: d.update(distributedInfo={"rank": -1}), "distributedInfo.rank is -1, not a rank"),
        "rank 2^40": (lambda d: d.update(distributedInfo={"rank": 2**40}), "not a rank"),
        "rank 5 of a 1-rank capture": (lambda d: d.update(distributedInfo={"rank": 5}), "the profile of rank 5, which the capture does not hold"),
        "traceEvents an object": (lambda d: d.update(traceEvents={"a": 1}), "no traceEvents"),
        "no profiler events": (lambda d: d.update(traceEvents=[{"ph": "M"}]), "holds no profiler events"),
    }
    for cls, (fn, fault) in cases.items():
        data = json.dumps(_edit(doc, fn)).encode()
        _merge(tmp_path, cap, None, cls, fault, raw=data, size=len(data))


def _deep_fault(raw: bytes) -> str:
    """What a profile nested past any sane depth is refused as: orjson 3.9 and later stop at a
    depth of 1,024 (not a JSON trace), earlier releases parse it (it holds no events)."""
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "not a JSON trace"
    return "holds no profiler events"


def test_files_that_are_not_profiles(tmp_path, cap, doc):
    deep = b"[" * 100_000 + b"]" * 100_000
    for cls, raw, fault in (("not JSON", b"{\"traceEvents\": [", "not a JSON trace"), ("not UTF-8", b"\xff\xfe{}", "not a JSON trace"),
                            ("nested 100,000 deep", deep, _deep_fault(deep)),
                            ("an int past 64 bits at the top", b"1" + b"0" * 30, "no traceEvents")):
        _merge(tmp_path, cap, None, cls, fault, raw=raw)
    for special, fault in ((Path("/dev/zero"), "is a device"), (tmp_path, "is a folder"), (tmp_path / "nope.json", "no such")):
        _merge(tmp_path, cap, special, f"not a file: {special.name if special.name != tmp_path.name else 'a folder'}", fault)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    _merge(tmp_path, cap, fifo, "not a file: a FIFO", "is a FIFO")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate((1 << 30) + 1)  # (sparse: claims 1 GiB, refused by its size before a byte is read)
    _merge(tmp_path, cap, big, "larger than a profile may be", "more than the 1073741824 a profile may hold", hashed=False)


def test_gzip_bombs_and_damaged_streams(tmp_path, cap, doc):
    body = json.dumps(doc).encode()
    # a valid profile followed by 100 MB of blanks, gzipped to ~100 KB: refused at 256x its stored size
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(body[:-1])
        blanks = b" " * (1 << 20)
        for _ in range(100):
            f.write(blanks)
        f.write(body[-1:])
    n = bomb.stat().st_size
    assert n < 1 << 20
    _merge(tmp_path, cap, bomb, "gzip bomb (blanks, 1000x)", f"256x its {n} stored bytes", size=128 * n)
    # a gzip of zeros: not even JSON, refused before it is parsed
    zeros = tmp_path / "zeros.json.gz"
    with gzip.open(zeros, "wb", compresslevel=9) as f:
        for _ in range(64):
            f.write(bytes(1 << 20))
    n = zeros.stat().st_size
    _merge(tmp_path, cap, zeros, "gzip bomb (zeros)", "inflates to more than", size=128 * n)
    good = gzip.compress(body)
    _merge(tmp_path, cap, tmp_path / "t.json.gz", "gzip truncated", "ends early", raw=good[: len(good) // 2])
    bad = bytearray(good)
    for k in range(40, 60):
        bad[k] ^= 0x5A
    _merge(tmp_path, cap, tmp_path / "c.json.gz", "gzip corrupt deflate", "corrupt gzip data", raw=bytes(bad))
    crc = bytearray(good)
    crc[-8] ^= 0xFF
    _merge(tmp_path, cap, tmp_path / "crc.json.gz", "gzip CRC wrong", "corrupt gzip data", raw=bytes(crc))


def _with_named(cap: Path, named) -> None:
    """The capture file with ``meta["profile"]`` replaced (what capture(profiler=...) records)."""
    z = zipfile.ZipFile(io.BytesIO(cap.read_bytes()))
    files = {n: z.read(n) for n in z.namelist()}
    meta = json.loads(files["ktrace.json"])
    meta["meta"]["profile"] = named
    files["ktrace.json"] = json.dumps(meta).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as w:
        for n, b in files.items():
            w.writestr(n, b)
    cap.write_bytes(out.getvalue())


def test_profiles_a_capture_names_must_lie_beside_it(tmp_path, cap, doc):
    secret = tmp_path.parent / f"{tmp_path.name}-secret.json"
    secret.write_text(json.dumps(doc))
    try:
        for cls, named, fault in (("named ../", {"0": f"../{secret.name}"}, "not a file beside it"),
                                  ("named absolute", {"0": str(secret)}, "not a file beside it"),
                                  ("named a list", ["x"], "not a table of rank -> file name"),
                                  ("named rank not a number", {"x": "p.json"}, "not a table of rank -> file name")):
            _with_named(cap, named)
            out = tmp_path / "o.pftrace"
            S.refused(tmp_path, ["merge", cap, "--with-profile", "-o", out], names=str(cap), fault=fault, cls=f"capture: {cls}",
                      inputs=[cap, secret])
        two = [tmp_path / "a.json", tmp_path / "b.json"]
        for p in two:
            p.write_text(json.dumps(doc))
        S.refused(tmp_path, ["merge", cap, "--with-profile", *two, "-o", tmp_path / "o.pftrace"], names=str(two[1]),
                  fault="a profile more than the capture has ranks", cls="more profiles than ranks", inputs=[cap, *two])
    finally:
        secret.unlink()


def test_names_reach_the_trace_escaped_and_a_good_profile_merges(tmp_path, cap, doc):
    evil = "\x1b]52;c;SGk=\x07\x1b[2Jk"

    def fn(d):
        for e in d["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") == "cpu_op":
                e["name"] = e["name"] + evil
            if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
                e["args"]["name"] = str(e["args"].get("name")) + evil
            if e.get("ph") == "X" and e.get("cat") == "cpu_op" and isinstance(e.get("pid"), int):
                e["pid"] = f"{e['pid']}:{evil}"
    p = tmp_path / "evil.json"
    p.write_text(json.dumps(_edit(doc, fn)))
    out = tmp_path / "o.pftrace"
    r = S.ok(tmp_path, ["merge", cap, "--with-profile", p, "-o", out], cls="names with escapes: merged, escaped", inputs=[cap, p])
    data = out.read_bytes()
    assert b"\x1b]52" not in data and b"\x1b[2J" not in data and b"\\x1b]52" in data and "\x1b" not in r.stdout + r.stderr
    g = tmp_path / "good.json.gz"
    shutil.copy(PROFILE, g)
    r = S.ok(tmp_path, ["merge", cap, "--with-profile", g, "-o", out], cls="the fixture's profile: merged", inputs=[cap, g])
    assert "6 traced launches matched to their CUPTI kernels by correlation" in r.stdout
