"""The bundled real captures, ``ktrace demo`` and the CPU side of ``ktrace run``: its checks
before any GPU work, its refusal without enough GPUs (exit 2, one line), its launch through
torchrun, and the analysis it does once the ranks have written their capture."""

from __future__ import annotations

import argparse
import json
import shutil

import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

from ktrace import demo, run
from ktrace.captures import read_capture

PACKAGE_DATA_LIMIT = 2_000_000  # bytes: every file of ktrace/data together
CAPTURE_LIMIT = 500_000  # bytes: one bundled capture


def _parser():
    p = argparse.ArgumentParser(prog="ktrace")
    sub = p.add_subparsers(dest="cmd")
    demo.register(sub)
    run.register(sub)
    return p


def _call(argv):
    args = _parser().parse_args(argv)
    return args.func(args)


def _cpu_only():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the no-GPU refusal cannot be seen here")


@pytest.mark.parametrize("name", sorted(demo.BUNDLED))
def test_bundled_captures_are_real_small_and_described(name):
    path = demo.bundled_capture(name)
    assert path.stat().st_size <= CAPTURE_LIMIT
    cap = read_capture(path)
    sc = demo.scenario(name)
    if name == "byok":  # a kernel traced without edits (tests/fixtures/byok's plain_straggler_w4)
        assert sc["style"] == "plain" and sc["fault"] == "straggler" and sc["world_size"] == cap.world_size == 4
        assert all("H100" in rc.device["name"] and rc.mappings for rc in cap.ranks.values())
        assert all(ln.meta.get("addresses") == "raw" for rc in cap.ranks.values() for ln in rc.launches)
        assert sc["description"].startswith("ring_plain")
        return
    assert sc["kernel"] == "all_to_all" and sc["world_size"] == cap.world_size == 4
    assert sorted(cap.ranks) == [0, 1, 2, 3] and not cap.partial
    assert all("H200" in rc.device["name"] for rc in cap.ranks.values())
    assert all(rc.clock_samples for rc in cap.ranks.values()), "recorded with clock calibration"
    assert {ln.kernel for rc in cap.ranks.values() for ln in rc.launches} == {"moe_dispatch", "moe_combine"}
    assert sc["fault"]["skip_rank"] >= 0 if name == "skip" else sc["fault"]["skip_rank"] == -1


def test_package_data_stays_small():
    total = sum(p.stat().st_size for p in demo.DATA_DIR.iterdir() if p.is_file())
    assert total <= PACKAGE_DATA_LIMIT, f"ktrace/data holds {total:,} bytes"
    assert demo.BUNDLED_CAPTURE == demo.bundled_capture("skewed")


def test_unknown_bundled_name_is_a_clear_error():
    with pytest.raises(demo.DemoError, match="no bundled capture 'nope'; there are: skewed"):
        demo.bundled_capture("nope")


def test_demo_writes_trace_and_report(tmp_path, capsys):
    out = tmp_path / "demo"
    assert _call(["demo", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    stem = demo.BUNDLED_CAPTURE.name.removesuffix(".ktrace")
    trace, html, js = out / f"{stem}.pftrace", out / f"{stem}.report.html", out / f"{stem}.report.json"
    assert f"ktrace open {trace}" in text
    assert "Bundled capture: all_to_all on 4 x NVIDIA H200" in text and "causes worth fixing" in text
    assert "1. rank 0 launched 11.8 µs late" in text and "Findings (hangs first" not in text  # (the first screen)
    # the trace parses back with Perfetto's own classes and holds every rank's events
    t = Trace()
    t.ParseFromString(trace.read_bytes())
    events = [p for p in t.packet if p.HasField("track_event")]
    assert len(events) > 1000
    names = {p.track_descriptor.process.process_name for p in t.packet if p.HasField("track_descriptor") and p.track_descriptor.HasField("process")}
    assert len(names) == 4, names
    rep = json.loads(js.read_text())
    assert rep["summary"]["world_size"] == 4 and rep["summary"]["events"] == read_capture(demo.BUNDLED_CAPTURE).events().size
    assert rep["findings"], "the skewed all-to-all has findings"
    assert "ktrace report" in html.read_text()


def test_demo_takes_another_bundled_capture_or_a_file(tmp_path, capsys):
    assert _call(["demo", "skip", "--out", str(tmp_path / "a")]) == 0
    assert "hang: rank 0 waited on rank 3" in capsys.readouterr().out
    assert _call(["demo", "skip", "-v", "--out", str(tmp_path / "a")]) == 0
    assert "HANG" in capsys.readouterr().out  # (-v: every finding's paragraph)
    src = tmp_path / "mine.ktrace"
    shutil.copy(demo.bundled_capture("delay20us"), src)
    assert _call(["demo", str(src), "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "mine.pftrace").is_file()


def test_demo_refuses_a_missing_or_broken_file(tmp_path, capsys):
    assert _call(["demo", str(tmp_path / "none.ktrace"), "--out", str(tmp_path)]) == 2
    assert "no such capture file" in capsys.readouterr().err
    bad = tmp_path / "bad.ktrace"
    bad.write_bytes(b"not a capture")
    assert _call(["demo", str(bad), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ktrace demo: ") and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------ run


def test_run_refuses_without_a_gpu(capsys):
    _cpu_only()
    assert _call(["run", "all_to_all", "--nproc", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs 4 GPU(s)" in err[0] and "found none" in err[0] and "ktrace demo" in err[0]


def test_run_refuses_with_fewer_gpus_than_asked(monkeypatch, capsys):
    monkeypatch.setattr(run, "visible_gpus", lambda: (2, "NVIDIA H200"))
    assert _call(["run", "all_to_all", "--nproc", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ktrace run: --nproc 4 needs 4 GPUs, and only 2 (NVIDIA H200) are visible."]
    assert run.refusal(2, (2, "x")) is None


@pytest.mark.parametrize("argv, message", [
    (["nope"], "unknown kernel 'nope'"),
    (["all_to_all", "-s", "hidden=abc"], "hidden='abc': expected int"),
    (["all_to_all", "-s", "width=3"], "all_to_all has no parameter 'width'"),
    (["all_to_all", "-s", "hidden"], "-s wants NAME=VALUE"),
    (["all_to_all", "--nproc", "3"], "num_experts=32 does not split over 3 ranks"),
    (["gemm_rs", "--nproc", "2", "-s", "K=1001"], "K=1001 does not split over 2 ranks"),
    (["all_reduce", "-s", "method=three_shot"], "one of one_shot_push, one_shot, two_shot"),
    (["all_to_all", "--nproc", "4", "--skip", "4:3"], "fault rank 4 is not among the 4 ranks"),
    (["all_to_all", "--nproc", "4", "--delay", "3"], "--delay wants RANK:VALUE"),
    (["all_to_all", "-s", "skew=1.5"], "skew must be in [0, 1)"),
    (["all_to_all", "--nproc", "0"], "--nproc must be a positive int"),
    ([], "name a kernel"),
])
def test_run_checks_its_request_before_any_gpu_work(monkeypatch, capsys, argv, message):
    monkeypatch.setattr(run, "visible_gpus", lambda: pytest.fail("GPUs looked up before the request was checked"))
    assert _call(["run", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_run_config_round_trips_to_the_workers():
    cfg = run.RunConfig(kernel="all_to_all", nproc=4, shape={"skew": 0.0, "max_tokens": 32}, delay_rank=3, delay_ns=20_000)
    back = run.RunConfig.from_json(cfg.to_json())
    assert back == cfg and back.params["skew"] == 0.0 and back.params["hidden"] == 1024
    assert run.RunConfig(kernel="all_to_all", nproc=2, skip_rank=1, skip_notify=128).wait_timeout_ns == 200_000_000
    assert run.RunConfig(kernel="all_to_all", nproc=2).wait_timeout_ns is None


def test_run_list_names_every_kernel_folder(capsys):
    assert _call(["run", "--list"]) == 0
    text = capsys.readouterr().out
    from pathlib import Path

    import instrumented_kernels

    folders = {p.name for p in Path(instrumented_kernels.__path__[0]).iterdir() if (p / "kernel.py").is_file()}
    assert folders == set(run.kernels()) == {p.parent.name for p in Path(instrumented_kernels.__path__[0]).glob("*/run.py")}
    for k in folders:
        assert text.count(f"{k}: ") == 1


def test_run_analyses_what_the_ranks_wrote(monkeypatch, tmp_path, capsys):
    """Everything after the workers: the capture they write is merged, traced and reported."""
    monkeypatch.setattr(run, "visible_gpus", lambda: (4, "NVIDIA H200"))
    seen = {}

    def fake_launch(cfg, timeout_s, rendezvous=None):
        seen["cfg"] = cfg
        shutil.copy(demo.BUNDLED_CAPTURE, cfg.capture_path)
        return run.Launched(True, "ALL RANKS PASSED", (0, 1, 2, 3))

    monkeypatch.setattr(run, "launch_run", fake_launch)
    out = tmp_path / "r"
    out.mkdir()
    assert _call(["run", "all_to_all", "--nproc", "4", "--out", str(out), "-s", "skew=0.5", "--steps", "3"]) == 0
    text = capsys.readouterr().out
    cfg = seen["cfg"]
    assert cfg.params["skew"] == 0.5 and cfg.steps == 3 and cfg.nproc == 4
    assert f"ktrace open {out / 'all_to_all.pftrace'}" in text and "How to read this report" in text
    assert (out / "all_to_all.report.html").is_file()


def test_run_reports_a_failed_rank(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(run, "visible_gpus", lambda: (2, "GPU"))
    monkeypatch.setattr(run, "launch_run", lambda cfg, timeout_s, rendezvous=None: run.Launched(
        False, "rank 1: FAILED with exit status 1", (0, 1)))
    assert _call(["run", "all_reduce", "--nproc", "2", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "rank 1: FAILED" in err and "logs" in err


def test_run_launches_one_worker_per_rank(tmp_path):
    """The real launch, through torchrun: two workers start with the config, meet (gloo), and fail
    clearly on a CPU; the summary names the failing rank with the error its ``@record`` wrote."""
    _cpu_only()
    got = run.launch_run(run.RunConfig(kernel="all_reduce", nproc=2, out=str(tmp_path)), timeout_s=120)
    assert not got.ok and got.ranks == (0, 1)
    assert "through torchrun" in got.summary and "FAILED: rank" in got.summary
    assert "RuntimeError: instrumented kernels need a GPU per rank" in got.summary, got.summary
    assert (tmp_path / "logs" / "torchrun.log").is_file()
    assert np.all([(tmp_path / "logs" / f"rank{r}.log").stat().st_size > 0 for r in range(2)])


@pytest.mark.parametrize("argv, message", [
    (["all_to_all", "--nnodes", "2"], "--nnodes 2 needs a rendezvous every node can reach"),
    (["all_to_all", "--nnodes", "2", "--rdzv-endpoint", "h:29500", "--node-rank", "2"], "--node-rank 2 is not among the 2 node(s)"),
    (["all_to_all", "--nnodes", "3", "--rdzv-endpoint", "h:29500"], "num_experts=32 does not split over 3 ranks"),
    (["all_to_all", "--nnodes", "0"], "--nnodes must be a positive int"),
    (["all_to_all", "--nproc", "2", "--nnodes", "2", "--master-addr", "h", "--skip", "4:1"], "fault rank 4 is not among the 4 ranks"),
])
def test_run_checks_its_nodes_before_any_gpu_work(monkeypatch, capsys, argv, message):
    monkeypatch.setattr(run, "visible_gpus", lambda: pytest.fail("GPUs looked up before the request was checked"))
    assert _call(["run", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_run_on_a_node_without_rank_0_leaves_the_report_to_that_node(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(run, "visible_gpus", lambda: (2, "GPU"))
    seen = {}

    def fake_launch(cfg, timeout_s, rendezvous=None):
        seen["rdzv"] = rendezvous
        return run.Launched(True, "ALL RANKS PASSED", (2, 3))

    monkeypatch.setattr(run, "launch_run", fake_launch)
    argv = ["run", "all_reduce", "--nproc", "2", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "head:29500",
            "--out", str(tmp_path)]
    assert _call(argv) == 0
    out = capsys.readouterr().out
    assert "on 2 GPU(s) on each of 2 nodes" in out and "the node of rank 0 wrote the capture" in out
    assert seen["rdzv"].torchrun_args() == ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "head:29500"]
