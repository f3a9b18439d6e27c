"""Hostile files and first steps: every class of bad input and interruption the command line can
meet, run as real ``ktrace`` processes under a memory limit and a timeout, with every input
hashed before and after.

Each case is a crafted file (or option, or signal) and the command it is given to. What every
refused case must show: exit status != 0, one line on stderr naming the file and the fault, no
traceback, no input changed, no output or temporary left behind, peak memory (RSS of the process
and of its workers) below :data:`BASE_RSS` plus twice the input's size, and the process under an
address-space limit of :data:`AS_LIMIT` (``resource.setrlimit`` in the child: a file that claims
2^31 ranks would need gigabytes). Cases that must succeed (a name full of escape sequences, a
launch with impossible times among real ones) say what they print instead.

Classes: (1) bounded by the file, not by its claims; (2) outputs that cannot hurt inputs;
(3) a clean terminal; (4) impossible events refused or flagged; (5) newcomer paths. The counts
are printed with ``-s`` (``[hostile] N cases, N passed``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ktrace import schema
from ktrace.captures import capture_to_bytes, read_capture, write_capture
from ktrace.captures.synth import constructed_capture, replicated
from ktrace.decode import head_bytes, split_head
from ktrace.demo import bundled_capture

from .surface_kit import RUNNER as _RUNNER

ROOT = Path(__file__).resolve().parents[1]
#: The address space a ktrace process may take in these tests (what a 6.6 GB claim would pass).
AS_LIMIT = 3 << 30
#: Peak RSS of the interpreter with numpy, orjson, matplotlib and ktrace's analysis loaded: the
#: stated constant the memory check adds to twice the input's size (the cases here peak at 35-150 MB).
BASE_RSS = 200 << 20
TIMEOUT = 60


_COUNTS = {"cases": 0, "passed": 0, "max_rss": 0}


def _env(tmp: Path) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), KT_AS=str(AS_LIMIT),
                KT_RSS=str(tmp / ".rss"), TMPDIR=str(tmp), PYTHONIOENCODING="utf-8")


def _ktrace(tmp: Path, *args, timeout: float = TIMEOUT, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """``ktrace ARGS`` in a process with the address-space limit; ``.rss`` is its peak RSS."""
    p = subprocess.run([sys.executable, "-c", _RUNNER, *map(os.fsdecode, args)], cwd=tmp, env={**_env(tmp), **(env or {})},
                       capture_output=True, timeout=timeout, **kw)
    p.stdout, p.stderr = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    rss = tmp / ".rss"
    p.rss = int(rss.read_text()) if rss.exists() else 0
    _COUNTS["max_rss"] = max(_COUNTS["max_rss"], p.rss)
    with contextlib.suppress(FileNotFoundError):
        rss.unlink()
    return p


def _digest(paths) -> dict:
    out = {}
    for p in paths:
        p = Path(p)
        out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
    return out


def _listing(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} - {".rss"}


def _refused(tmp: Path, args, *, names: str, fault: str, inputs=(), size: int = 0, env=None) -> subprocess.CompletedProcess:
    """Run a case that must be refused, and check everything a refusal must be."""
    _COUNTS["cases"] += 1
    before, files = _digest(inputs), _listing(tmp)
    p = _ktrace(tmp, *args, env=env)
    lines = p.stderr.splitlines()
    assert p.returncode not in (0, None) and p.returncode < 128, (args, p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and len(lines) == 1, (args, p.stderr[-3000:])
    assert names in lines[0] and fault in lines[0], (args, lines[0], names, fault)
    assert "out of memory" not in lines[0], lines[0]
    assert not any(c in lines[0] for c in "\x1b\x07\r"), lines[0]
    assert _digest(inputs) == before, "an input changed"
    assert _listing(tmp) == files, f"left behind: {_listing(tmp) - files}"
    assert p.rss < BASE_RSS + 2 * size, (args, p.rss / 1e6)
    _COUNTS["passed"] += 1
    return p


def _ok(tmp: Path, args, *, inputs=(), size: int = 0, status: int = 0) -> subprocess.CompletedProcess:
    """Run a case that must succeed (status ``status``), inputs unchanged, memory bounded."""
    _COUNTS["cases"] += 1
    before = _digest(inputs)
    p = _ktrace(tmp, *args)
    assert p.returncode == status and "Traceback" not in p.stderr, (args, p.returncode, p.stderr[-3000:])
    assert _digest(inputs) == before
    assert p.rss < BASE_RSS + 2 * size, (args, p.rss / 1e6)
    _COUNTS["passed"] += 1
    return p


@pytest.fixture(scope="module", autouse=True)
def _say_counts():
    yield
    print(f"\n[hostile] {_COUNTS['cases']} cases, {_COUNTS['passed']} passed; peak RSS of any ktrace process "
          f"{_COUNTS['max_rss'] / 1e6:.0f} MB (limit: {BASE_RSS / 1e6:.0f} MB + 2x its input)")


# ---------------------------------------------------------------------------------------------
# crafting
# ---------------------------------------------------------------------------------------------


def _base(n_launches: int = 2):
    cap, _ = constructed_capture(world_size=2, programs=4, iters=2, seed=5)
    cap = replicated(cap, n_launches) if n_launches > 1 else cap
    cap.run_id = "hostile-run"
    return cap


def _members(data: bytes) -> tuple[dict, dict]:
    z = zipfile.ZipFile(io.BytesIO(data))
    files = {n: z.read(n) for n in z.namelist()}
    return json.loads(files.pop("ktrace.json")), files


def _zip(meta, files: dict, *, meta_raw: bytes | None = None, compression=zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as z:
        for n, b in files.items():
            z.writestr(n, b)
        z.writestr("ktrace.json", meta_raw if meta_raw is not None else json.dumps(meta))
    return out.getvalue()


def _crafted(tmp: Path, name: str, edit_meta=None, *, cap=None, meta_raw=None) -> Path:
    meta, files = _members(capture_to_bytes(cap or _base()))
    if edit_meta:
        edit_meta(meta)
    p = tmp / name
    p.write_bytes(_zip(meta, files, meta_raw=meta_raw))
    return p


def _records(ln) -> tuple[np.ndarray, np.ndarray]:
    """A writable copy of a launch's buffer, and its records (a view into the copy)."""
    raw = np.array(ln.raw, dtype=np.uint8).reshape(-1)
    h, kept = split_head(raw)
    n = h.n_programs * h.capacity if kept is None else int(kept.sum())
    return raw, np.frombuffer(raw.data, schema.RECORD_DTYPE, count=n, offset=head_bytes(h))


def _edited(edit, launches=((0, 0),)) -> object:
    """The base capture with ``edit(records, raw)`` applied to the buffers of ``launches`` (rank, i)."""
    cap = _base()
    for r, i in launches:
        ln = cap.ranks[r].launches[i]
        raw, rec = _records(ln)
        edit(rec, raw)
        ln.raw = raw
        ln._decoded.clear()
    return cap


def _used(rec) -> np.ndarray:
    k = rec["tag"] & 0xF
    return (k != 0) & (k != schema.EventKind.DETAIL)


# ---------------------------------------------------------------------------------------------
# 1. bounded by the file, not by its claims
# ---------------------------------------------------------------------------------------------


CLAIMS = {
    "world_2e31": (lambda m: m.update(world_size=2**31), "world_size 2147483648 is outside"),
    "world_zero": (lambda m: m.update(world_size=0), "world_size 0 is outside"),
    "rank_2e40": (lambda m: m["ranks"][0].update(rank=2**40), "a rank 1099511627776 is outside"),
    "rank_twice": (lambda m: m["ranks"][1].update(rank=0), "rank 0 is listed twice"),
    "launch_index_2e40": (lambda m: m["ranks"][0]["launches"][0].update(index=2**40), "a launch index 1099511627776"),
    "launch_twice": (lambda m: m["ranks"][0]["launches"][1].update(index=0), "lists a launch index twice"),
    "grid_2e46": (lambda m: m["ranks"][0]["launches"][0].update(grid=[2**31 - 1, 65535, 1]), "programs, more than"),
    "grid_float": (lambda m: m["ranks"][0]["launches"][0].update(grid=[1.5, 1, 1]), "not an integer"),
    "capacity_2e40": (lambda m: m["ranks"][0]["launches"][0].update(capacity=2**40), "capacity 1099511627776 is outside"),
    "records_beyond": (lambda m: m["ranks"][0]["launches"][0].update(records=2**40), "corrupt capture metadata"),
    "bytes_6gib": (lambda m: m["ranks"][0]["launches"][0].update(bytes=6 << 30), "corrupt capture metadata"),
    "tick_1hz_device": (lambda m: m["ranks"][0]["device"].update(tick_hz=1), "device tick_hz 1 is outside"),
    "region_id_2e40": (lambda m: m["regions"].update({str(2**40): "x"}), "a region id"),
    "grid_string": (lambda m: m["ranks"][0]["launches"][0].update(grid="AAAA"), "grid is"),
}


@pytest.mark.parametrize("case", sorted(CLAIMS))
def test_claims_are_checked_before_anything_is_sized_by_them(tmp_path, case):
    edit, fault = CLAIMS[case]
    f = _crafted(tmp_path, f"{case}.ktrace", edit)
    for cmd in (["info", f], ["report", "-q", f], ["merge", f, "-o", tmp_path / "out.json"]):
        _refused(tmp_path, cmd, names=str(f), fault=fault, inputs=[f], size=f.stat().st_size)


def test_the_largest_world_size_allowed_costs_what_the_file_holds(tmp_path):
    """A 2-rank file that says its world had 2^16 ranks (the most a file may say): read, reported
    and written with the missing ranks said as ranges, and no table of 2^16 x 2^16 pairs."""
    f = _crafted(tmp_path, "world_1m.ktrace", lambda m: m.update(world_size=1 << 16))
    size = f.stat().st_size
    p = _ok(tmp_path, ["info", f], inputs=[f], size=size)
    assert "PARTIAL: ranks 2-65535 missing" in p.stdout
    p = _ok(tmp_path, ["report", "-q", f], inputs=[f], size=size)
    assert "missing ranks 2-65535" in p.stderr
    p = _ok(tmp_path, ["merge", f, "-o", tmp_path / "w.pftrace"], inputs=[f], size=size)
    assert "ranks 2-65535 missing" in p.stdout


def test_ints_beyond_64_bits_and_non_numbers_in_metadata(tmp_path):
    meta, files = _members(capture_to_bytes(_base()))
    raw = json.dumps(meta).replace(f'"created_ns": {meta["created_ns"]}', '"created_ns": 1' + "0" * 30).encode()
    f = tmp_path / "bigint.ktrace"
    f.write_bytes(_zip(None, files, meta_raw=raw))
    _refused(tmp_path, ["info", f], names=str(f), fault="corrupt capture metadata", inputs=[f], size=f.stat().st_size)
    raw = json.dumps(meta).replace('"world_size": 2', '"world_size": 2e300').encode()
    f2 = tmp_path / "float_world.ktrace"
    f2.write_bytes(_zip(None, files, meta_raw=raw))
    _refused(tmp_path, ["report", "-q", f2], names=str(f2), fault="world_size", inputs=[f2], size=f2.stat().st_size)


def _deflated_member(z: zipfile.ZipFile, name: str, n: int, head: bytes = b"") -> None:
    """A member of ``n`` bytes (``head`` then zeros), deflated, written in chunks (the test itself
    never holds it)."""
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    with z.open(info, "w", force_zip64=True) as w:
        w.write(head)
        left = n - len(head)
        chunk = bytes(1 << 20)
        while left > 0:
            w.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)


def test_zip_bombs_are_refused_before_they_are_inflated(tmp_path):
    meta, files = _members(capture_to_bytes(_base(1)))
    # a buffer whose metadata and zip entry both claim 100 MB, deflated ~1000x: refused by ratio
    lm = meta["ranks"][0]["launches"][0]
    n = 64 + 3_276_800 * 32 + 4  # a dense buffer of 1 program x 3,276,800 slots
    lm.update(grid=[1, 1, 1], capacity=3_276_800, bytes=n, layout="dense", records=0)
    f = tmp_path / "bomb_buffer.ktrace"
    with zipfile.ZipFile(f, "w") as z:
        for name, b in files.items():
            if name != lm["file"]:
                z.writestr(name, b)
        _deflated_member(z, lm["file"], n)
        z.writestr("ktrace.json", json.dumps(meta))
    assert f.stat().st_size < 1 << 20
    for cmd in (["info", f], ["report", "-q", f], ["merge", f, "-o", tmp_path / "o.pftrace"]):
        _refused(tmp_path, cmd, names=str(f), fault="more than 256x", inputs=[f], size=f.stat().st_size)
    # metadata padded to 200 MB of blanks: refused by its size limit, before inflating
    meta, files = _members(capture_to_bytes(_base(1)))
    f = tmp_path / "bomb_meta.ktrace"
    body = json.dumps(meta).encode()
    with zipfile.ZipFile(f, "w") as z:
        for name, b in files.items():
            z.writestr(name, b)
        info = zipfile.ZipInfo("ktrace.json")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as w:
            w.write(body[:-1])
            blanks = b" " * (1 << 20)
            for _ in range(200):
                w.write(blanks)
            w.write(body[-1:])
    _refused(tmp_path, ["info", f], names=str(f), fault="more than the 67108864 it may hold", inputs=[f], size=f.stat().st_size)


def _patch_central(data: bytes, member: str, size: int) -> bytes:
    """The zip with ``member``'s central directory entry claiming ``size`` bytes (both sizes)."""
    out = bytearray(data)
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        n_name = int.from_bytes(data[at + 28 : at + 30], "little")
        if data[at + 46 : at + 46 + n_name].decode() == member:
            out[at + 20 : at + 24] = size.to_bytes(4, "little")
            out[at + 24 : at + 28] = size.to_bytes(4, "little")
        at = data.find(b"PK\x01\x02", at + 4)
    return bytes(out)


def test_a_stored_buffer_claiming_more_than_the_file_holds(tmp_path):
    cap = _base(1)
    meta, files = _members(capture_to_bytes(cap))
    lm = meta["ranks"][0]["launches"][0]
    big = 64 + 4_000_000 * 32 + 4
    lm.update(grid=[1, 1, 1], capacity=4_000_000, bytes=big, layout="dense", records=0)
    f = tmp_path / "lying_directory.ktrace"
    f.write_bytes(_patch_central(_zip(meta, files), lm["file"], big))
    for cmd in (["info", f], ["report", "-q", f]):
        _refused(tmp_path, cmd, names=str(f), fault="past the end of the file", inputs=[f], size=f.stat().st_size)


def test_special_files_are_refused_in_one_line(tmp_path):
    fifo = tmp_path / "pipe.ktrace"
    os.mkfifo(fifo)
    for cmd, target, fault in ((["info", "/dev/zero"], "/dev/zero", "is a device"), (["info", fifo], str(fifo), "is a FIFO"),
                               (["report", "-q", fifo], str(fifo), "is a FIFO"), (["merge", fifo, "-o", tmp_path / "x.json"], str(fifo), "is a FIFO"),
                               (["open", "--no-browser", fifo], str(fifo), "is a FIFO"), (["info", tmp_path], str(tmp_path), "folder")):
        _refused(tmp_path, cmd, names=target, fault=fault)


def test_options_that_claim_too_much(tmp_path):
    f = write_capture(tmp_path / "c.ktrace", _base())
    size = f.stat().st_size
    _refused(tmp_path, ["merge", f, "-o", tmp_path / "o.json", "--world-size", "3000000000"], names="--world-size", fault="outside",
             inputs=[f], size=size)
    _refused(tmp_path, ["merge", f, "-o", tmp_path / "o.json", "--ranks", "0-1e10"], names="0-1e10", fault="give numbers", inputs=[f], size=size)
    _refused(tmp_path, ["merge", f, "-o", tmp_path / "o.json", "--window", "0:inf"], names="--window", fault="finite", inputs=[f], size=size)
    _refused(tmp_path, ["merge", f, "-o", tmp_path / "o.json", "--ranks", "5-7"], names="5-7", fault="names nothing", inputs=[f], size=size)
    _refused(tmp_path, ["open", "--no-browser", "--port", "70000", f], names="--port", fault="outside 0..65535", inputs=[f])
    # a range far beyond the capture is cut at its last rank: no list of 10^10 numbers is made
    p = _ok(tmp_path, ["merge", f, "-o", tmp_path / "o.json", "--ranks", "0-10000000000"], inputs=[f], size=size)
    assert "ranks 0-1 of 2" in p.stdout


def test_a_peer_beyond_the_world_sizes_no_table(tmp_path):
    def peer(rec, raw):
        w = _used(rec) & ((rec["tag"] & 0xF) == schema.EventKind.WAIT)
        rec["arg0"][np.flatnonzero(w)[:5]] = 65536

    one = write_capture(tmp_path / "peer_one.ktrace", _edited(peer))
    p = _ok(tmp_path, ["report", "-q", one], inputs=[one], size=one.stat().st_size)
    warn = [ln for ln in p.stderr.splitlines() if "left out of the analysis" in ln]
    assert len(warn) == 1 and "rank 0 launch 0" in warn[0] and "peer 65536" in warn[0], p.stderr
    every = [(r, i) for r in (0, 1) for i in (0, 1)]
    allbad = write_capture(tmp_path / "peer_all.ktrace", _edited(peer, every))
    _refused(tmp_path, ["report", "-q", allbad], names=str(allbad), fault="every launch has impossible times", inputs=[allbad],
             size=allbad.stat().st_size)


# ---------------------------------------------------------------------------------------------
# 2. outputs that cannot hurt inputs
# ---------------------------------------------------------------------------------------------


def test_an_input_named_like_the_outputs_old_temporary_survives(tmp_path):
    src = write_capture(tmp_path / "x.pftrace.tmp", _base())
    _ok(tmp_path, ["merge", src, "-o", tmp_path / "x.pftrace"], inputs=[src], size=src.stat().st_size)
    assert src.exists() and read_capture(src).run_id == "hostile-run"
    _refused(tmp_path, ["merge", src, "-o", src], names=str(src), fault="is the input", inputs=[src])
    _refused(tmp_path, ["merge", src, src, "-o", tmp_path / "two.json"], names=f"rank 0 is in both {src} and {src}",
             fault="appears in more than one capture", inputs=[src])
    assert not any(n.startswith(".ktrace-tmp-") for n in _listing(tmp_path))


def test_two_merges_to_one_output_leave_one_whole_file(tmp_path):
    src = write_capture(tmp_path / "c.ktrace", _base(8))
    out = tmp_path / "same.json"
    for _ in range(3):
        _COUNTS["cases"] += 1
        procs = [subprocess.Popen([sys.executable, "-c", _RUNNER, "merge", str(src), "-o", str(out)], cwd=tmp_path,
                                  env=dict(_env(tmp_path), KT_RSS=str(tmp_path / f".rss{k}")), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for k in range(2)]
        for pr in procs:
            _, err = pr.communicate(timeout=TIMEOUT)
            assert pr.returncode == 0 and b"Traceback" not in err, err
        json.loads(out.read_bytes())  # whole, valid JSON: one writer's complete file
        assert not any(n.startswith(".ktrace-tmp-") for n in os.listdir(tmp_path))
        _COUNTS["passed"] += 1


def _big_capture(tmp: Path) -> Path:
    cap, _ = constructed_capture(world_size=4, programs=256, iters=48, seed=5)
    return write_capture(tmp / "big.ktrace", cap)


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
@pytest.mark.parametrize("split", [False, True])
def test_an_interrupted_write_leaves_nothing_and_says_nothing(tmp_path, sig, status, split):
    src = _big_capture(tmp_path)
    before, files = _digest([src]), _listing(tmp_path)
    out = tmp_path / "out.json"
    args = ["merge", str(src), "-o", str(out)] + (["--split", "--part-mb", "4"] if split else [])
    _COUNTS["cases"] += 1
    pr = subprocess.Popen([sys.executable, "-c", _RUNNER, *args], cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, start_new_session=True)
    t0 = time.monotonic()
    while not any(n.startswith(".ktrace-tmp-") for n in os.listdir(tmp_path)):  # the write has begun
        if pr.poll() is not None or time.monotonic() - t0 > TIMEOUT:
            pytest.fail(f"the write ended before it could be interrupted: {pr.returncode} {pr.stderr.read()[-500:]}")
        time.sleep(0.005)
    time.sleep(0.05 if split else 0.005)  # (into the write: the unsplit file is written in tens of ms)
    # Ctrl-C reaches the whole process group (workers too); SIGTERM the process alone
    os.killpg(pr.pid, sig) if sig == signal.SIGINT else pr.send_signal(sig)
    _, err = pr.communicate(timeout=TIMEOUT)
    if pr.returncode in (0, -sig):  # (it finished between the check and the signal: nothing to judge)
        pytest.skip("the write finished before the signal")
    assert pr.returncode == status and err == b"", (pr.returncode, err[-2000:])
    assert _digest([src]) == before
    if out.exists():  # (the signal came after the output was renamed into place: it must be whole)
        assert isinstance(json.loads(out.read_bytes()), (dict, list)) and not any(
            n.startswith(".ktrace-tmp-") for n in os.listdir(tmp_path))
        pytest.skip("the output was complete and in place before the signal took effect")
    assert _listing(tmp_path) == files, f"left behind: {_listing(tmp_path) - files}"
    _COUNTS["passed"] += 1


def test_outputs_that_cannot_be_written_are_named(tmp_path):
    src = write_capture(tmp_path / "c.ktrace", _base())
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        full = {"KT_FSIZE": str(64 << 10)}  # (a disk that is full after 64 KiB)
        for cmd, name, fault, env in (
            (["report", "-q", src, "--html", tmp_path / "r.html"], "r.html", "File too large", full),
            (["report", "-q", src, "--json", tmp_path / "r.json"], "r.json", "File too large", {"KT_FSIZE": "1024"}),
            (["merge", src, "-o", tmp_path / "m.json"], "m.json", "File too large", full),
            (["merge", src, "-o", tmp_path / "m.pftrace"], "m.pftrace", "File too large", {"KT_FSIZE": "4096"}),
            (["merge", src, "-o", tmp_path / "m.ktrace"], "m.ktrace", "File too large", {"KT_FSIZE": "4096"}),
            (["report", "-q", src, "--html", tmp_path / "nofolder" / "r.html"], "nofolder", "no folder", None),
            (["diff", "-q", src, src, "--json", tmp_path / "nofolder" / "d.json"], "nofolder", "no folder", None),
            (["merge", src, "-o", tmp_path / "nofolder" / "m.json"], "nofolder", "m.json", None),
            (["merge", src, "-o", ro / "m.pftrace"], "m.pftrace", "ermission denied", None),
            (["report", "-q", src, "--html", tmp_path], str(tmp_path), "folder", None),
        ):
            if os.geteuid() == 0 and ro.name in str(cmd[-1]):
                continue  # (root writes into a read-only folder)
            _refused(tmp_path, cmd, names=name, fault=fault, inputs=[src], env=env)
    finally:
        ro.chmod(0o700)


def test_split_traces_of_two_formats_keep_their_own_index(tmp_path):
    src = write_capture(tmp_path / "c.ktrace", _base(4))
    for suffix in (".json", ".pftrace"):
        _ok(tmp_path, ["merge", src, "-o", tmp_path / f"X{suffix}", "--split", "--part-mb", "0.01"], inputs=[src])
    a, b = json.loads((tmp_path / "X.json.index.json").read_bytes()), json.loads((tmp_path / "X.pftrace.index.json").read_bytes())
    assert a["trace_format"] == "chrome" and b["trace_format"] == "perfetto"
    assert all((tmp_path / p["file"]).is_file() for p in a["parts"] + b["parts"])


# ---------------------------------------------------------------------------------------------
# 3. a clean terminal
# ---------------------------------------------------------------------------------------------

EVIL = "\x1b]52;c;SGVsbG8=\x07\x1b[2J\rok\n== FORGED: Nothing is wrong ==\u202e$x^{2$"


def _evil_capture():
    cap = _base()
    for k in list(cap.regions):
        cap.regions[k] = cap.regions[k] + EVIL
    for rc in cap.ranks.values():
        rc.device = dict(rc.device, name="GPU" + EVIL)
        rc.notes = ["note" + EVIL]
        for ln in rc.launches:
            ln.kernel = "kern" + EVIL
    cap.notes = ["capture note" + EVIL]
    cap.run_id = "run" + EVIL
    return cap


def _clean(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\r\u202e"), repr(text[:400])
    assert not any(line.lstrip().startswith("== FORGED") for line in text.splitlines()), text[:2000]


def test_names_from_a_capture_reach_the_terminal_escaped(tmp_path):
    f = write_capture(tmp_path / "evil.ktrace", _evil_capture())
    size = f.stat().st_size
    p = _ok(tmp_path, ["info", f], inputs=[f], size=size)
    _clean(p.stdout + p.stderr)
    assert "\\x1b]52" in p.stdout
    p = _ok(tmp_path, ["report", "-q", f, "--html", tmp_path / "r.html", "--json", tmp_path / "r.json"], inputs=[f], size=size)
    _clean(p.stdout + p.stderr)
    assert "<svg" in (tmp_path / "r.html").read_text()  # (plots drawn with a "$" in a name: mathtext off)
    p = _ok(tmp_path, ["merge", f, "-o", tmp_path / "t.pftrace"], inputs=[f], size=size)
    _clean(p.stdout + p.stderr)
    data = (tmp_path / "t.pftrace").read_bytes()
    assert b"\x1b]52" not in data and b"\\x1b]52" in data and b"\n== FORGED" not in data
    _ok(tmp_path, ["merge", f, "-o", tmp_path / "t.json"], inputs=[f], size=size)
    assert b"\\u001b" not in (tmp_path / "t.json").read_bytes() and b"\x1b" not in (tmp_path / "t.json").read_bytes()


def test_a_file_name_that_is_not_utf8(tmp_path):
    src = write_capture(tmp_path / "ok.ktrace", _base())
    odd = tmp_path / os.fsdecode(b"caf\xff\x1b[2J.ktrace")
    odd.write_bytes(src.read_bytes())
    p = _ok(tmp_path, ["info", odd], inputs=[odd])
    _clean(p.stdout)
    assert "caf\\xff\\x1b[2J.ktrace" in p.stdout
    bad = tmp_path / os.fsdecode(b"bad\xfe.ktrace")
    bad.write_bytes(b"garbage")
    _refused(tmp_path, ["info", bad], names="bad\\xfe.ktrace", fault="not a ktrace capture file", inputs=[bad])


# ---------------------------------------------------------------------------------------------
# 4. impossible events: refused, or flagged and left out
# ---------------------------------------------------------------------------------------------


def _set_time(which, value):
    def edit(rec, raw):
        u = np.flatnonzero(_used(rec))
        rec[which][u[:3]] = value

    return edit


def _set_tick(hz):
    def edit(rec, raw):
        h = np.frombuffer(raw.data, schema.HEADER_DTYPE, count=1)
        h["tick_hz"] = hz

    return edit


IMPOSSIBLE = {
    "start_2e63": (_set_time("t0", 2**63), "has a time of 2^63 ticks or more"),
    "end_sentinel": (_set_time("t1", 2**64 - 1), "has a time of 2^63 ticks or more"),
    "end_before_start": (_set_time("t1", 5), "ends before it starts"),
    "tick_1hz": (_set_tick(1), "tick rate 1 Hz is not a GPU timer's"),
}


@pytest.mark.parametrize("case", sorted(IMPOSSIBLE))
def test_impossible_times_are_refused_naming_the_launch(tmp_path, case):
    edit, fault = IMPOSSIBLE[case]
    f = write_capture(tmp_path / f"{case}.ktrace", _edited(edit))
    for cmd in (["info", f], ["report", "-q", f], ["merge", f, "-o", tmp_path / "o.pftrace"]):
        p = _refused(tmp_path, cmd, names=str(f), fault=fault, inputs=[f], size=f.stat().st_size)
        assert "rank 0" in p.stderr and "launch 0" in p.stderr


def test_zeroed_launches_are_left_out_with_one_line(tmp_path):
    def zero(rec, raw):
        u = _used(rec)
        rec["t0"][u] = 0
        rec["t1"][u] = 0

    f = write_capture(tmp_path / "zeroed.ktrace", _edited(zero, [(1, 0)]))
    p = _ok(tmp_path, ["report", "-q", f], inputs=[f], size=f.stat().st_size)
    warn = [ln for ln in p.stderr.splitlines() if "left out of the analysis" in ln]
    assert len(warn) == 1 and "rank 1 launch 0: every one of its" in warn[0], p.stderr
    assert " s after " not in p.stdout and "Traceback" not in p.stderr
    p = _ok(tmp_path, ["info", f], inputs=[f])
    assert "IMPOSSIBLE times" in p.stdout
    # a stale record among real ones: events spanning hours
    g = write_capture(tmp_path / "stale.ktrace", _edited(_set_time("t0", 1), [(0, 1)]))
    p = _ok(tmp_path, ["report", "-q", g], inputs=[g])
    assert "rank 0 launch 1: its events span" in p.stderr, p.stderr


# ---------------------------------------------------------------------------------------------
# 5. newcomer paths
# ---------------------------------------------------------------------------------------------


def test_first_steps(tmp_path):
    f = write_capture(tmp_path / "c.ktrace", _base())
    _COUNTS["cases"] += 1
    p = _ktrace(tmp_path)
    assert p.returncode == 2 and "usage: ktrace" in p.stderr and p.stdout == ""
    _COUNTS["passed"] += 1
    p = _refused(tmp_path, ["report", "-q", f, "--work-region", "nosuch"], names="nosuch", fault="its regions: ", inputs=[f])
    assert "compute" in p.stderr and "step" in p.stderr
    with socket.socket() as s:  # a busy port: a hint, not an errno
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = _refused(tmp_path, ["open", "--no-browser", "--online", "--port", str(port), f], names=str(port), fault="--port 0",
                     inputs=[f])


def test_open_converts_a_capture_and_removes_its_trace(tmp_path):
    f = write_capture(tmp_path / "c.ktrace", _base())
    files = _listing(tmp_path)
    p = _ok(tmp_path, ["open", "--no-browser", "--online", "--port", "0", "--timeout", "1", f], inputs=[f], status=1)
    assert "/trace/c.pftrace" in p.stdout and "a capture; its Perfetto trace is served" in p.stderr
    assert _listing(tmp_path) == files  # (its temporary folder, under TMPDIR here, is gone)


def test_info_names_the_timed_out_waits_of_the_bundled_hang():
    p = subprocess.run([sys.executable, "-m", "ktrace.cli", "info", str(bundled_capture("skip"))], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=TIMEOUT)
    assert p.returncode == 0
    assert "132 wait(s) TIMED OUT" in p.stdout and "waiting on peer 3" in p.stdout and "the capture shows a hang" in p.stdout


def test_the_split_estimate_is_within_20_percent(tmp_path):
    """On captures the estimate was not fitted on (constructed ones of other shapes)."""
    from ktrace.export import write_trace
    from ktrace.export.split import estimate_bytes

    for seed, (ws, progs, iters) in enumerate([(2, 32, 8), (3, 7, 30), (4, 64, 2)]):
        cap, _ = constructed_capture(world_size=ws, programs=progs, iters=iters, seed=seed)
        cap = replicated(cap, 3)
        for fmt, suffix in (("perfetto", ".pftrace"), ("chrome", ".json")):
            real = write_trace(cap, tmp_path / f"s{seed}{suffix}", workers=1).stat().st_size
            assert abs(estimate_bytes(cap, fmt) / real - 1) < 0.2, (ws, progs, iters, fmt, estimate_bytes(cap, fmt), real)


def test_merge_counts_launches_as_info_and_report_do(tmp_path):
    f = write_capture(tmp_path / "c.ktrace", _base(2))
    p = _ok(tmp_path, ["merge", f, "-o", tmp_path / "m.json"], inputs=[f])
    assert ", 2 launches," in p.stdout  # (2 launches on each of 2 ranks: 4 buffers)
    p = _ok(tmp_path, ["info", f], inputs=[f])
    assert "2 launches (a launch" in p.stdout


def test_the_demos_report_links_carry_its_trace(tmp_path):
    """The demo's HTML and JSON links name where ``ktrace open`` serves the trace (so they open it
    at each finding while it runs), and ``ktrace open`` prints a link per finding from the report
    next to the trace (its own port, online or offline)."""
    p = _ok(tmp_path, ["demo", "--out", tmp_path / "d"])
    assert "the report's links open it at each finding" in p.stdout
    rep = json.loads((tmp_path / "d" / "a2a_skewed_4xh200.report.json").read_bytes())
    links = [f["perfetto"] for f in rep["findings"] if f.get("perfetto")]
    assert links and all("url=http://127.0.0.1:9001/trace/a2a_skewed_4xh200.pftrace&visStart=" in u for u in links), links[:2]
    html = (tmp_path / "d" / "a2a_skewed_4xh200.report.html").read_text()
    assert "url=http://127.0.0.1:9001/trace/a2a_skewed_4xh200.pftrace" in html
    p = _ok(tmp_path, ["open", "--no-browser", "--online", "--port", "0", "--timeout", "0.5", tmp_path / "d" / "a2a_skewed_4xh200.pftrace"],
            status=1)
    said = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("finding ")]
    assert len(said) == len(links) and all("/trace/a2a_skewed_4xh200.pftrace&visStart=" in ln for ln in said), p.stdout


def test_ctrl_c_while_open_converts_a_capture(tmp_path):
    src = _big_capture(tmp_path)
    files = _listing(tmp_path)
    _COUNTS["cases"] += 1
    pr = subprocess.Popen([sys.executable, "-c", _RUNNER, "open", "--no-browser", "--online", "--port", "0", str(src)], cwd=tmp_path,
                          env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    t0 = time.monotonic()
    while not any(n.startswith("ktrace-open-") for n in os.listdir(tmp_path)):  # (its folder, under TMPDIR here)
        if pr.poll() is not None or time.monotonic() - t0 > TIMEOUT:
            pytest.fail(f"open ended before it could be interrupted: {pr.returncode} {pr.stderr.read()[-500:]}")
        time.sleep(0.005)
    time.sleep(0.05)
    os.killpg(pr.pid, signal.SIGINT)
    out, err = pr.communicate(timeout=TIMEOUT)
    assert pr.returncode in (0, 130) and b"Traceback" not in err, (pr.returncode, err[-2000:])  # (0: it was serving: "stopped")
    assert _listing(tmp_path) == files, f"left behind: {_listing(tmp_path) - files}"
    _COUNTS["passed"] += 1
