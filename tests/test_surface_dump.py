"""``ktrace dump`` signals only ktrace's own recording processes: every class of registry, entry
and ``--pid`` an attacker or a careless user could give it, run as real ``ktrace`` processes.

No process outside the test can be signalled: the child's signal calls go through the guard of
``tests/surface_kit.RUNNER`` (logged; held back unless the test allows the target), the cases of
pid 0, -1 and process groups run again in a PID namespace of their own where ``unshare`` works,
and the processes that files name are the test's own canaries, which record any signal they get
(or, for ``sleep``, would die of it). What every refused case must show: exit status 2, one line
naming the folder, entry or option and why, no signal tried, no file changed. Counts are printed
with ``-s`` (``[dump] N cases: ...``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ktrace.flight.registry import ENTRY_FORMAT, MAX_ENTRIES, identity

from .surface_kit import ROOT, Surface, say_counts

S = Surface("dump")

CANARY = r"""
import os, signal, sys, time
got = sys.argv[1]
def note(s, f):
    with open(got, "a") as fh:
        fh.write(f"{s}\n")
for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, note)
if len(sys.argv) > 2:  # a recording's stand-in: registered as the flight recorder registers
    from ktrace.flight.registry import register
    register(sys.argv[2], sys.argv[3], int(sys.argv[4]), "/out\x1b[2J")
print("ready", flush=True)
time.sleep(120)
"""


_say_counts = say_counts(S)


class Canary:
    """A process of the test that writes down every signal it gets (or a ``sleep``, which dies of one)."""

    def __init__(self, tmp: Path, name: str, register: tuple | None = None, argv=None, user: int | None = None):
        self.got = tmp / f"{name}.got"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        if argv is None:
            argv = [sys.executable, "-c", CANARY, str(self.got), *(map(str, register) if register else ())]
        pre = None
        if user is not None:
            def pre():
                os.setgid(user)
                os.setuid(user)
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True, preexec_fn=pre)
        if argv[0] == sys.executable:
            assert self.p.stdout.readline().strip() == "ready"
        else:
            for _ in range(200):  # (exec'd: its /proc entry shows its own command line)
                who = identity(self.p.pid)
                if who and who.cmdline and who.cmdline[0] == argv[0]:
                    break
                time.sleep(0.01)
        self.pid = self.p.pid

    @property
    def signals(self) -> list[str]:
        return self.got.read_text().split() if self.got.exists() else []

    def untouched(self) -> bool:
        return self.p.poll() is None and not self.got.exists()

    def stop(self) -> None:
        self.p.kill()
        self.p.wait()


def _registry(tmp: Path, name: str = "reg") -> Path:
    reg = tmp / name
    reg.mkdir(mode=0o700)
    return reg


def _entry(reg: Path, run: str, fields: dict, name: str | None = None, **over) -> Path:
    d = reg / run
    d.mkdir(mode=0o700, exist_ok=True)
    doc = {"format": ENTRY_FORMAT, "rank": 0, "run_id": run, "out_dir": "/out", "started_ns": time.time_ns(), **fields, **over}
    f = d / (name or f"rank0-{doc.get('pid')}.json".replace("/", "_"))
    f.write_text(json.dumps(doc))
    f.chmod(0o600)
    return f


def _true(pid: int) -> dict:
    """The fields a forged entry copies from the live process ``pid``."""
    who = identity(pid)
    return {"pid": pid, "starttime": who.starttime, "cmdline": list(who.cmdline)}


def _files(reg: Path) -> list[Path]:
    return [p for p in reg.rglob("*") if p.is_file() and not p.is_symlink()]


def _refuse(tmp, reg, args, names, fault, cls, canaries=(), **kw):
    p = S.refused(tmp, ["dump", *args], names=names, fault=fault, cls=cls, inputs=_files(reg) if reg and reg.exists() else (), **kw)
    assert p.returncode == 2, p.returncode
    for c in canaries:
        assert c.untouched(), (cls, c.signals, c.p.poll())
    return p


# ---------------------------------------------------------------------------------------------
# the registry folder
# ---------------------------------------------------------------------------------------------


def test_registry_folders_that_others_could_write_are_refused(tmp_path):
    can = Canary(tmp_path, "c")
    try:
        good = _registry(tmp_path, "good")
        _entry(good, "run", _true(can.pid))  # (the canary's true identity: signalled only from a safe folder)
        # a link to the folder
        (tmp_path / "link").symlink_to(good)
        _refuse(tmp_path, good, ["--registry", tmp_path / "link"], str(tmp_path / "link"), "symbolic link", "folder: symlink", [can])
        _refuse(tmp_path, good, ["--registry", tmp_path / "link", "--list"], str(tmp_path / "link"), "symbolic link",
                "folder: symlink", [can])
        for mode, word in ((0o777, "mode 777"), (0o770, "mode 770"), (0o722, "mode 722")):
            good.chmod(mode)
            _refuse(tmp_path, good, ["--registry", good], str(good), word, "folder: writable by others", [can])
        good.chmod(0o700)
        # a parent others may write into (not sticky): the folder could be swapped
        open_parent = tmp_path / "open"
        open_parent.mkdir()
        open_parent.chmod(0o777)
        inner = _registry(open_parent, "reg")
        _entry(inner, "run", _true(can.pid))
        _refuse(tmp_path, inner, ["--registry", inner], str(open_parent), "not sticky", "folder: parent writable", [can])
        # a file, not a folder
        (tmp_path / "afile").write_text("{}")
        _refuse(tmp_path, None, ["--registry", tmp_path / "afile"], str(tmp_path / "afile"), "not a folder", "folder: a file", [can])
        # a run folder that is a link, or writable by others
        other = _registry(tmp_path, "elsewhere")
        _entry(other, "run2", _true(can.pid))
        reg = _registry(tmp_path, "reg")
        (reg / "run2").symlink_to(other / "run2")
        _refuse(tmp_path, reg, ["--registry", reg], str(reg / "run2"), "symbolic link", "run folder: symlink", [can])
        shutil.rmtree(reg)
        reg = _registry(tmp_path, "reg")
        _entry(reg, "run3", _true(can.pid)).parent.chmod(0o777)
        _refuse(tmp_path, reg, ["--registry", reg], str(reg / "run3"), "mode 777", "run folder: writable by others", [can])
    finally:
        can.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="making files of another user needs root")
def test_folders_and_entries_of_another_user_are_refused(tmp_path):
    can = Canary(tmp_path, "c")
    try:
        reg = _registry(tmp_path, "theirs")
        f = _entry(reg, "run", _true(can.pid))
        os.chown(reg, 65534, 65534)
        _refuse(tmp_path, reg, ["--registry", reg], str(reg), "belongs to user 65534", "folder: another user's", [can])
        os.chown(reg, 0, 0)
        os.chown(f, 65534, 65534)
        _refuse(tmp_path, reg, ["--registry", reg], str(f), "belongs to user 65534", "entry: another user's", [can])
        # a folder above the registry that another user owns
        up = tmp_path / "up"
        up.mkdir(mode=0o755)
        inner = _registry(up, "reg")
        _entry(inner, "run", _true(can.pid))
        os.chown(up, 65534, 65534)
        _refuse(tmp_path, inner, ["--registry", inner], str(up), "belongs to user 65534", "folder: parent another user's", [can])
        # another user's live process, named with its true identity in our own registry
        other = Canary(tmp_path, "nobody", argv=["sleep", "120"], user=65534)
        try:
            reg2 = _registry(tmp_path, "reg2")
            _entry(reg2, "run", _true(other.pid))
            _refuse(tmp_path, reg2, ["--registry", reg2], f"pid {other.pid}", "belongs to user 65534", "entry: another user's process",
                    [can, other])
        finally:
            other.stop()
    finally:
        can.stop()


# ---------------------------------------------------------------------------------------------
# entries
# ---------------------------------------------------------------------------------------------


def _bad_fields(can_pid: int, true: dict) -> dict:
    """name -> (fields, what the line must say)."""
    return {
        "pid -1": ({**true, "pid": -1}, "pid -1 is outside 1.."),
        "pid 0": ({**true, "pid": 0}, "pid 0 is outside 1.."),
        "pid group": ({**true, "pid": -can_pid}, f"pid {-can_pid} is outside 1.."),
        "pid 2^63": ({**true, "pid": 2**63}, "is outside 1.."),
        "pid 2^31": ({**true, "pid": 2**31}, "pid 2147483648 is outside 1.."),
        "pid float": ({**true, "pid": float(can_pid)}, "not an integer"),
        "pid string": ({**true, "pid": str(can_pid)}, "not an integer"),
        "pid true": ({**true, "pid": True}, "not an integer"),
        "pid missing": ({k: v for k, v in true.items() if k != "pid"}, "pid is null"),
        "starttime wrong": ({**true, "starttime": true["starttime"] + 1}, "is another process now"),
        "starttime missing": ({k: v for k, v in true.items() if k != "starttime"}, "starttime is null"),
        "cmdline wrong": ({**true, "cmdline": ["python3", "train.py"]}, "runs another command"),
        "cmdline string": ({**true, "cmdline": "python3"}, "cmdline is not a list"),
        "rank huge": ({**true, "rank": 2**40}, "rank 1099511627776 is outside"),
        "run_id list": ({**true, "run_id": ["x"]}, "run_id is not a string"),
        "format": ({**true, "format": "other"}, "not a ktrace flight registry entry"),
    }


def test_entries_are_checked_before_any_signal(tmp_path):
    can = Canary(tmp_path, "c")
    try:
        true = _true(can.pid)
        for name, (fields, fault) in _bad_fields(can.pid, true).items():
            reg = _registry(tmp_path, "reg")
            f = _entry(reg, "run", {}, name="rank0.json")
            f.write_text(json.dumps({"format": ENTRY_FORMAT, "rank": 0, "run_id": "run", "out_dir": "/o", "started_ns": 1, **fields}))
            _refuse(tmp_path, reg, ["--registry", reg], str(f), fault, f"entry: {name}", [can])
            shutil.rmtree(reg)
        # not an entry at all
        for name, data, fault in (("not json", b"\x00\xff{", "not JSON"), ("a list", b"[1, 2]", "not a ktrace flight registry entry"),
                                  ("deep", b"[" * 200_000 + b"]" * 200_000, "more than an entry holds"),
                                  ("nested", b"[" * 30_000 + b"]" * 30_000, "not JSON"),
                                  ("huge", b" " * (1 << 20) + b"{}", "more than an entry holds")):
            reg = _registry(tmp_path, "reg")
            f = _entry(reg, "run", {}, name="rank0.json")
            f.write_bytes(data)
            _refuse(tmp_path, reg, ["--registry", reg], str(f), fault, f"entry: {name}", [can])
            shutil.rmtree(reg)
    finally:
        can.stop()


def test_entries_that_are_links_fifos_or_writable_by_others(tmp_path):
    can = Canary(tmp_path, "c")
    try:
        elsewhere = _registry(tmp_path, "elsewhere")
        target = _entry(elsewhere, "run", _true(can.pid))
        reg = _registry(tmp_path, "reg")
        (reg / "run").mkdir(mode=0o700)
        (reg / "run" / "rank0.json").symlink_to(target)
        _refuse(tmp_path, reg, ["--registry", reg], str(reg / "run" / "rank0.json"), "symbolic link", "entry: symlink", [can])
        shutil.rmtree(reg)
        reg = _registry(tmp_path, "reg")
        (reg / "run").mkdir(mode=0o700)
        os.mkfifo(reg / "run" / "rank0.json", 0o600)  # (read, it would block for ever)
        _refuse(tmp_path, reg, ["--registry", reg], str(reg / "run" / "rank0.json"), "not a regular file", "entry: FIFO", [can])
        shutil.rmtree(reg)
        reg = _registry(tmp_path, "reg")
        _entry(reg, "run", _true(can.pid)).chmod(0o666)
        _refuse(tmp_path, reg, ["--registry", reg], str(reg / "run"), "mode 666", "entry: writable by others", [can])
        shutil.rmtree(reg)
        # more entries than a registry holds: refused as a whole, not read one by one for ever
        reg = _registry(tmp_path, "reg")
        (reg / "run").mkdir(mode=0o700)
        for i in range(MAX_ENTRIES + 1):
            (reg / "run" / f"r{i}.json").write_bytes(b"{}")
        _refuse(tmp_path, None, ["--registry", reg], str(reg), f"more than {MAX_ENTRIES} entries", "folder: too many entries", [can])
    finally:
        can.stop()


def test_processes_that_are_not_the_registered_recording_are_never_signalled(tmp_path):
    can = Canary(tmp_path, "c")
    sleeper = Canary(tmp_path, "sleep", argv=["sleep", "120"])
    try:
        # a live process of this user that does not catch SIGUSR1 (it would die of it), named with
        # its true start time and command line
        reg = _registry(tmp_path, "reg")
        _entry(reg, "run", _true(sleeper.pid))
        _refuse(tmp_path, reg, ["--registry", reg], f"pid {sleeper.pid}", "does not catch SIGUSR1", "process: no SIGUSR1 handler",
                [can, sleeper])
        _refuse(tmp_path, reg, ["--registry", reg, "--pid", str(sleeper.pid)], f"--pid {sleeper.pid}", "does not catch SIGUSR1",
                "--pid: no SIGUSR1 handler", [can, sleeper])
        shutil.rmtree(reg)
        # pid 1 under a forged identity, an unregistered process, our own
        reg = _registry(tmp_path, "reg")
        _entry(reg, "run", {"pid": 1, "starttime": 12345, "cmdline": ["init"]})
        fault = "is another process now" if identity(1) and identity(1).uid == os.geteuid() else "belongs to user"
        _refuse(tmp_path, reg, ["--registry", reg], "pid 1", fault, "process: pid 1 forged", [can, sleeper])
        for pid, cls in ((1, "--pid 1"), (can.pid, "--pid: unregistered process"), (os.getpid(), "--pid: the test itself")):
            _refuse(tmp_path, reg, ["--registry", reg, "--pid", str(pid)], f"--pid {pid}", "not a ktrace recording", cls,
                    [can, sleeper])
        for arg, fault in (("0", "not a process id"), ("-1", "not a process id"), (str(-can.pid), "not a process id"),
                           (str(2**63), "not a process id"), (str(2**22 + 1), "not a process id"), ("12abc", "not a process id"),
                           ("1e3", "not a process id")):
            _refuse(tmp_path, reg, ["--registry", reg, "--pid", arg], "--pid", fault, f"--pid {arg if len(arg) < 8 else 'huge'}",
                    [can, sleeper])
    finally:
        can.stop()
        sleeper.stop()


def _pid_namespace() -> list[str] | None:
    cmd = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    if shutil.which("unshare") is None:
        return None
    try:
        ok = subprocess.run([*cmd, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return cmd if ok else None


def test_pids_that_name_groups_or_everyone_in_a_pid_namespace_of_their_own(tmp_path):
    """The cases of pid 0, -1 and -N again, in a PID namespace where the child is pid 1 and sees
    only its own processes: even a signal that got through the guard would reach nothing else."""
    ns = _pid_namespace()
    if ns is None:
        pytest.skip("no unprivileged PID namespace here (unshare --user --pid); the signal guard covers these cases")
    can = Canary(tmp_path, "c")
    try:
        for pid in (0, -1, -2, -can.pid):
            reg = _registry(tmp_path, "reg")
            _entry(reg, "run", {"pid": pid, "starttime": 1, "cmdline": ["x"]})
            _refuse(tmp_path, reg, ["--registry", reg], "", "", f"namespace: pid {pid if pid > -3 else '-N'}", [can], prefix=ns,
                    exact=False)
            shutil.rmtree(reg)
    finally:
        can.stop()


# ---------------------------------------------------------------------------------------------
# what is signalled: the registered recordings, and nothing else
# ---------------------------------------------------------------------------------------------


def test_the_registered_recordings_and_only_they_are_signalled(tmp_path):
    reg = _registry(tmp_path, "reg")
    run = "run\x1b]52;c;SGk=\x07\x1b[2J"
    rec0 = Canary(tmp_path, "rec0", register=(reg, run, 0))
    rec1 = Canary(tmp_path, "rec1", register=(reg, run, 1))
    bystander = Canary(tmp_path, "bystander")
    try:
        # a forged entry in the same run naming the bystander: refused, the others signalled
        _entry(reg, "run_____", {"pid": bystander.pid, "starttime": _true(bystander.pid)["starttime"], "cmdline": ["python3"]},
               run_id=run, name="rank2-forged.json")
        # a stale entry (its process ended)
        _entry(reg, "old", {"pid": 2**22 - 3, "starttime": 1, "cmdline": ["python3"]})
        inputs = _files(reg)
        p = S.ok(tmp_path, ["dump", "--registry", reg, "--list"], cls="--list: names escaped", inputs=inputs)
        assert "run run\\x1b]52;c;SGk=\\x07\\x1b[2J: rank 0 pid" in p.stdout and "\x1b" not in p.stdout + p.stderr
        assert p.stderr.count("\n") == 1 and f"pid {bystander.pid} runs another command" in p.stderr and p.signals == []
        p = S.ok(tmp_path, ["dump", "--registry", reg], cls="signal: the newest run's ranks", inputs=inputs, allow=(rec0.pid, rec1.pid))
        assert sorted(x[1] for x in p.signals) == sorted([rec0.pid, rec1.pid]), p.signals
        assert all(x[2] == 10 for x in p.signals)  # SIGUSR1
        assert f"asked rank 0 (pid {rec0.pid})" in p.stdout and "\x1b" not in p.stdout and "/out\\x1b[2J" in p.stdout
        assert p.stderr.count("\n") == 1 and "not signalled" in p.stderr
        p = S.ok(tmp_path, ["dump", "--registry", reg, "--pid", str(rec1.pid)], cls="signal: --pid of a recording", inputs=inputs,
                 allow=(rec1.pid,))
        assert [x[1] for x in p.signals] == [rec1.pid]
        for _ in range(200):
            if len(rec0.signals) == 1 and len(rec1.signals) == 2:
                break
            time.sleep(0.01)
        assert rec0.signals == ["10"] and rec1.signals == ["10", "10"]
        assert bystander.untouched()
        # --run of a run that has no live process, named with the one that has
        _refuse(tmp_path, reg, ["--registry", reg, "--run", "old"], "--run old", "no running process of that run", "--run: stale",
                [bystander])
    finally:
        for c in (rec0, rec1, bystander):
            c.stop()


def test_the_default_registry_is_made_for_this_user_alone(tmp_path, monkeypatch):
    """The recorder's own registration (``ktrace.flight.registry.register``) makes the folder 0700
    and each entry 0600; a folder of that name made by someone else beforehand is refused."""
    from ktrace.flight.registry import RegistryError, register, registry_dir, scan

    reg = tmp_path / "fresh"
    entry = register(reg, "r1", 3, str(tmp_path))
    assert (reg.stat().st_mode & 0o777, entry.parent.stat().st_mode & 0o777, entry.stat().st_mode & 0o777) == (0o700, 0o700, 0o600)
    found = scan(reg)
    assert [(e.pid, e.rank, e.run_id) for e in found.live] == [] and found.refused  # (this test does not catch SIGUSR1)
    S.counted("register: modes")
    bad = tmp_path / "preexisting"
    bad.mkdir(mode=0o777)
    bad.chmod(0o777)
    with pytest.raises(RegistryError, match="mode 777"):
        register(bad, "r1", 0, ".")
    assert list(bad.iterdir()) == []
    S.counted("register: refuses a folder others may write")
    monkeypatch.delenv("KTRACE_FLIGHT_DIR", raising=False)
    assert registry_dir().name == f"ktrace-flight-{os.geteuid()}"
