"""Outputs go only where asked: ``ktrace export``'s output folder and the outputs of ``merge`` and
``report``, given the folders and links an attacker or a careless user could give them, a full
disk and interruptions, run as real ``ktrace`` processes.

What is checked: an output folder that is a link, a file, or a folder holding anything but an
earlier export of ktrace's (a user's own ``manifest.json`` is not one) is refused in one line
naming it, before anything is written; an export is written whole through a temporary folder and
renamed into place (nothing partial, whether the disk fills or the process is interrupted, and an
earlier export left whole when the new one fails); a full disk names the table that failed, not
the capture; an output that is a symbolic link is replaced, never written through. Counts are
printed with ``-s`` (``[export] N cases: ...``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ktrace.captures import write_capture
from ktrace.captures.synth import constructed_capture

from .surface_kit import RUNNER, TIMEOUT, Surface, digest, env_for, listing, say_counts

pytest.importorskip("pyarrow")

S = Surface("export")
TABLES = {"events.parquet", "waits.parquet", "workgroups.parquet", "causes.parquet", "findings.parquet", "manifest.json"}


_say_counts = say_counts(S)


@pytest.fixture(scope="module")
def cap_file(tmp_path_factory) -> Path:
    cap, _ = constructed_capture(world_size=2, programs=4, iters=2, seed=5)
    return write_capture(tmp_path_factory.mktemp("export_src") / "c.ktrace", cap)


def _earlier_export(tmp: Path, cap_file: Path, name: str = "prev") -> Path:
    out = tmp / name
    S.ok(tmp, ["export", cap_file, out], cls="export: into a new folder", inputs=[cap_file])
    assert {p.name for p in out.iterdir()} == TABLES
    assert json.loads((out / "manifest.json").read_bytes())["format"] == "ktrace-parquet"
    return out


def test_output_folders_that_are_not_ktrace_exports_are_refused(tmp_path, cap_file):
    prev = _earlier_export(tmp_path, cap_file)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"keep me")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = []
    (tmp_path / "link_empty").symlink_to(empty)
    cases.append(("out a link to an empty folder", tmp_path / "link_empty", "symbolic link"))
    (tmp_path / "link_prev").symlink_to(prev)
    cases.append(("out a link to an export", tmp_path / "link_prev", "symbolic link"))
    cases.append(("out a file", secret, "is a file"))
    for cls, content, fault in (("a user's manifest.json", b'{"project": "mine", "files": {}}', "not a ktrace export's manifest"),
                                ("a manifest that is not JSON", b"\xff\xfe", "not a ktrace export's manifest"),
                                ("a manifest that is a list", b"[]", "not a ktrace export's manifest")):
        d = tmp_path / cls.replace(" ", "_").replace("'", "")
        d.mkdir()
        (d / "manifest.json").write_bytes(content)
        (d / "events.parquet").write_bytes(b"user data")
        cases.append((f"out holds {cls}", d, "manifest.json"))
    d = tmp_path / "notes"
    shutil.copytree(prev, d)
    (d / "notes.txt").write_text("mine")
    cases.append(("out an export plus a user's file", d, "notes.txt"))
    d = tmp_path / "linked_table"
    shutil.copytree(prev, d)
    (d / "events.parquet").unlink()
    (d / "events.parquet").symlink_to(secret)
    cases.append(("out an export whose table is a link", d, "events.parquet, a symbolic link"))
    d = tmp_path / "sub"
    shutil.copytree(prev, d)
    (d / "more").mkdir()
    cases.append(("out an export plus a folder", d, "more, a folder"))
    d = tmp_path / "fifo"
    shutil.copytree(prev, d)
    (d / "waits.parquet").unlink()
    os.mkfifo(d / "waits.parquet")
    cases.append(("out an export whose table is a FIFO", d, "waits.parquet, a file that ktrace export does not write"))
    d = tmp_path / "bigmanifest"
    d.mkdir()
    with open(d / "manifest.json", "wb") as f:
        f.truncate(2 << 20)
    cases.append(("out holds a 2 MB manifest", d, "not a ktrace export's manifest"))
    d = tmp_path / "holds_capture"
    d.mkdir()
    shutil.copy(cap_file, d / "c.ktrace")
    cases.append(("out holds the capture", d, "c.ktrace"))
    for cls, out, fault in cases:
        inputs = [cap_file, secret, *(p for p in Path(out).rglob("*") if p.is_file() and not p.is_symlink())] if Path(out).is_dir() else [cap_file, secret]
        S.refused(tmp_path, ["export", cap_file, out], names=str(out), fault=fault, cls=cls, inputs=inputs)
    assert secret.read_bytes() == b"keep me"


def test_exports_replace_only_earlier_exports_whole(tmp_path, cap_file):
    prev = _earlier_export(tmp_path, cap_file)
    before = digest(prev.iterdir())
    (prev / "manifest.json").write_bytes((prev / "manifest.json").read_bytes().replace(b'"version": 1', b'"version": 1, "old": 1'))
    S.ok(tmp_path, ["export", cap_file, prev], cls="export: over an earlier export", inputs=[cap_file])
    assert {p.name for p in prev.iterdir()} == TABLES and b'"old"' not in (prev / "manifest.json").read_bytes()
    assert digest(prev.iterdir()).keys() == before.keys()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".ktrace-tmp-")]
    empty = tmp_path / "empty"
    empty.mkdir()
    S.ok(tmp_path, ["export", cap_file, empty], cls="export: into an empty folder", inputs=[cap_file])
    assert {p.name for p in empty.iterdir()} == TABLES and (empty.stat().st_mode & 0o777) == 0o777 & ~_umask()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_a_full_disk_names_the_table_and_leaves_nothing(tmp_path, cap_file):
    full = {"KT_FSIZE": str(8 << 10)}  # (a disk that is full after 8 KiB: events.parquet fills it)
    p = S.refused(tmp_path, ["export", cap_file, tmp_path / "new"], names=str(tmp_path / "new" / "events.parquet"),
                  fault="File too large", cls="full disk: a new export", inputs=[cap_file], env=full)
    assert str(cap_file) not in p.stderr
    prev = _earlier_export(tmp_path, cap_file)
    files = digest(prev.iterdir())
    p = S.refused(tmp_path, ["export", cap_file, prev], names=str(prev), fault="File too large",
                  cls="full disk: over an earlier export", inputs=[cap_file, *prev.iterdir()], env=full)
    assert str(cap_file) not in p.stderr and digest(prev.iterdir()) == files


def _tmpfs_namespace(mount_at: Path) -> list[str] | None:
    if shutil.which("unshare") is None:
        return None
    cmd = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", 'mount -t tmpfs -o size=8k tmpfs "$0" && exec "$@"',
           str(mount_at)]
    try:
        ok = subprocess.run([*cmd, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return cmd if ok else None


def test_no_space_left_on_a_real_file_system(tmp_path, cap_file):
    """ENOSPC from an 8 KiB tmpfs mounted in a mount namespace of the child's own."""
    disk = tmp_path / "disk"
    disk.mkdir()
    ns = _tmpfs_namespace(disk)
    if ns is None:
        pytest.skip("no unprivileged mount namespace here (unshare --user --mount); the RLIMIT_FSIZE case covers a full disk")
    p = S.refused(tmp_path, ["export", cap_file, disk / "out"], names=str(disk / "out"), fault="No space left on device",
                  cls="ENOSPC (tmpfs)", inputs=[cap_file], prefix=ns)
    assert str(cap_file) not in p.stderr and ".parquet" in p.stderr


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_export_leaves_nothing(tmp_path, sig, status):
    cap, _ = constructed_capture(world_size=4, programs=256, iters=48, seed=5)
    src = write_capture(tmp_path / "big.ktrace", cap)
    before, files = digest([src]), listing(tmp_path)
    pr = subprocess.Popen([sys.executable, "-c", RUNNER, "export", str(src), str(tmp_path / "out")], cwd=tmp_path, env=env_for(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    t0 = time.monotonic()
    while not any(n.startswith(".ktrace-tmp-") for n in os.listdir(tmp_path)):  # (the temporary folder: the write has begun)
        if pr.poll() is not None or time.monotonic() - t0 > TIMEOUT:
            pytest.fail(f"the export ended before it could be interrupted: {pr.returncode} {pr.stderr.read()[-500:]}")
        time.sleep(0.005)
    time.sleep(0.2)
    os.killpg(pr.pid, sig) if sig == signal.SIGINT else pr.send_signal(sig)
    _, err = pr.communicate(timeout=TIMEOUT)
    if pr.returncode == 0:  # (it finished before the signal: then whole, in place, nothing else left)
        assert {p.name for p in (tmp_path / "out").iterdir()} == TABLES and listing(tmp_path) - files == {"out", *(f"out/{t}" for t in TABLES)}
        pytest.skip("the export finished before the signal took effect (its output whole)")
    assert pr.returncode == status and b"Traceback" not in err, (pr.returncode, err[-2000:])
    assert digest([src]) == before and listing(tmp_path) == files, listing(tmp_path) - files
    S.counted(f"interrupted: {signal.Signals(sig).name}")


def test_outputs_that_are_links_are_replaced_never_written_through(tmp_path, cap_file):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"keep me")
    for cls, args in (("merge -o a link", ["merge", cap_file, "-o"]), ("report --json a link", ["report", "-q", cap_file, "--json"])):
        link = tmp_path / "out.json"
        link.symlink_to(secret)
        S.ok(tmp_path, [*args, link], cls=cls, inputs=[cap_file, secret])
        assert not link.is_symlink() and link.stat().st_size > 100 and secret.read_bytes() == b"keep me"
        link.unlink()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "o.json"
    link.symlink_to(fifo)
    S.refused(tmp_path, ["merge", cap_file, "-o", link], names=str(link), fault="symbolic link to a device or FIFO",
              cls="merge -o a link to a FIFO", inputs=[cap_file])
    S.refused(tmp_path, ["report", "-q", cap_file, "--json", link], names=str(link), fault="symbolic link to a device or FIFO",
              cls="report --json a link to a FIFO", inputs=[cap_file])
