"""The command line on bad input and in pipes: one line naming the file and what is wrong, exit
status 2, nothing written, no traceback; parts of different runs refused; an output that is an
input refused; a closed pipe ends quietly; ``ktrace report`` with no capture does what
``ktrace/data/README.md`` says.

The cases the fault report listed run as real processes (``python -m ktrace.cli``), so that
nothing but the one line can reach the terminal.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ktrace.captures import merge_captures, read_capture, write_capture
from ktrace.captures.file import Capture
from ktrace.captures.synth import constructed_capture
from ktrace.cli import main
from ktrace.demo import bundled_capture

ROOT = Path(__file__).resolve().parents[1]


def _ktrace(*args, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "ktrace.cli", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _flip(src: Path, dst: Path, at: int, bit: int = 0x10) -> Path:
    data = bytearray(src.read_bytes())
    data[at] ^= bit
    dst.write_bytes(bytes(data))
    return dst


def _data_offset(path: Path, member: str) -> tuple[int, int]:
    """Where a member's (compressed) data starts in the file, and its length."""
    info = zipfile.ZipFile(path).getinfo(member)
    head = path.read_bytes()[info.header_offset : info.header_offset + 30]
    return info.header_offset + 30 + int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little"), info.compress_size


@pytest.fixture()
def runs(tmp_path):
    """Per-rank files of two runs (A and B) of one constructed 2-rank capture."""
    cap, _ = constructed_capture(world_size=2, programs=2, iters=1, seed=9)
    out = {}
    for run in ("A", "B"):
        for r, rc in cap.ranks.items():
            out[f"{run}{r}"] = write_capture(tmp_path / f"run{run}_r{r}.ktrace",
                                             Capture(world_size=2, ranks={r: rc}, regions=cap.regions, run_id=f"run-{run}"))
    return out


def _one_line(p: subprocess.CompletedProcess, starts: str, *has: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
    assert p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(starts), lines
    for h in has:
        assert h in lines[0], lines[0]


def test_the_reported_cases_end_in_one_line_and_status_2(tmp_path, runs):
    bundled = bundled_capture("skip")
    at, n = _data_offset(bundled, "r0/l0.bin")
    lzma_flip = _flip(bundled, tmp_path / "lzma_flip.ktrace", at + n // 2)
    directory = bundled.read_bytes().find(b"PK\x01\x02")
    dir_flip = _flip(bundled, tmp_path / "dir_flip.ktrace", directory + 6, 0xB0)  # its "version needed"
    _one_line(_ktrace("info", lzma_flip, cwd=tmp_path), "ktrace info: ", str(lzma_flip), "rank 0 launch 0", "LZMA")
    _one_line(_ktrace("report", "-q", lzma_flip, cwd=tmp_path), "ktrace report: ", str(lzma_flip), "damaged")
    _one_line(_ktrace("info", dir_flip, cwd=tmp_path), "ktrace info: ", str(dir_flip), "zip directory")
    # two runs: refused, naming both files and both runs; nothing written
    mixed = _ktrace("merge", runs["A0"], runs["B1"], "-o", tmp_path / "mixed.json", cwd=tmp_path)
    _one_line(mixed, "ktrace merge: ", str(runs["A0"]), "run-A", str(runs["B1"]), "run-B", "--allow-mixed-runs")
    assert not (tmp_path / "mixed.json").exists()
    # the output is an input
    same = _ktrace("merge", runs["A0"], runs["A1"], "-o", runs["A0"], cwd=tmp_path)
    _one_line(same, "ktrace merge: ", "is the input")
    assert read_capture(runs["A0"]).ranks.keys() == {0}
    # a buffer damaged in an uncompressed file: named as such, not as calibration samples
    at, _ = _data_offset(runs["A1"], "r1/l0.bin")
    bad = _flip(runs["A1"], tmp_path / "stored_flip.ktrace", at + 100, 0x04)
    p = _ktrace("merge", runs["A0"], bad, "-o", tmp_path / "m.ktrace", cwd=tmp_path)
    _one_line(p, "ktrace merge: ", str(bad), "rank 1 launch 0: buffer is damaged")
    assert "clock calibration samples" not in p.stderr and not (tmp_path / "m.ktrace").exists()


def test_output_to_a_closed_pipe_ends_quietly(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for cmd in (["report", "-q", bundled_capture("skip")], ["info", bundled_capture("skip")]):
        p = subprocess.Popen([sys.executable, "-m", "ktrace.cli", *map(str, cmd)], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdout.close()  # what `| head -1` does once it has its line (here: before the first)
        err = p.stderr.read().decode()
        assert p.wait(timeout=300) == 141 and err == "", (cmd, err)


def test_mixed_runs_merge_only_when_allowed_and_say_so(runs, tmp_path, capsys, caplog):
    assert main(["merge", str(runs["A0"]), str(runs["B1"]), "-o", str(tmp_path / "m.ktrace"), "--allow-mixed-runs"]) == 0
    m = read_capture(tmp_path / "m.ktrace")
    assert m.run_id == "run-A+run-B" and "parts of 2 different runs merged on request" in m.notes[0]
    # once merged, a mixed capture is still no part of run A
    with pytest.raises(Exception, match="parts of different runs"):
        merge_captures([m, read_capture(runs["A0"])], world_size=3)
    # same run: merged, its id kept
    assert main(["merge", str(runs["A0"]), str(runs["A1"]), "-o", str(tmp_path / "a.ktrace")]) == 0
    assert read_capture(tmp_path / "a.ktrace").run_id == "run-A"
    capsys.readouterr()
    assert main(["info", str(tmp_path / "a.ktrace")]) == 0
    assert "run run-A" in capsys.readouterr().out


def test_files_without_a_run_id_merge_as_before_with_a_warning(tmp_path, capsys, caplog):
    cap, _ = constructed_capture(world_size=2, programs=2, iters=1, seed=9)
    files = [str(write_capture(tmp_path / f"old{r}.ktrace", Capture(world_size=2, ranks={r: rc}, regions=cap.regions)))
             for r, rc in cap.ranks.items()]
    assert main(["merge", *files, "-o", str(tmp_path / "m.json")]) == 0
    assert "ranks 0-1 of 2" in capsys.readouterr().out
    assert "no run id (written by an older ktrace)" in caplog.text


def test_report_with_no_capture_analyses_the_bundled_one(capsys):
    assert main(["report", "-q", "--max-findings", "2"]) == 0
    out, err = capsys.readouterr()
    assert "analysing the bundled example" in err and str(bundled_capture()) in err
    assert out.strip()


def test_report_and_diff_name_the_damaged_file_and_refuse_to_overwrite_it(tmp_path, capsys):
    bundled = bundled_capture("skip")
    at, n = _data_offset(bundled, "r1/l0.bin")
    bad = _flip(bundled, tmp_path / "b.ktrace", at + n // 3)
    assert main(["diff", "-q", str(bundled), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ktrace diff: {bad}: rank 1 launch 0") and len(err.splitlines()) == 1, err
    assert main(["demo", str(bad), "--out", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ktrace demo: {bad}: rank 1 launch 0") and len(err.splitlines()) == 1, err
    good = tmp_path / "good.ktrace"
    good.write_bytes(bundled.read_bytes())
    assert main(["report", "-q", str(good), "--html", str(good)]) == 2
    assert "is the input" in capsys.readouterr().err and good.read_bytes() == bundled.read_bytes()
