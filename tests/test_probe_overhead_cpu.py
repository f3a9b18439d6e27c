"""benchmarks/probe_overhead.py's bookkeeping and options, each suite run by its module
(``benchmarks/probe_suites``), and the pipeline's controls as compiled (CPU: no kernel runs here)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_overhead as po  # noqa: E402
from probe_suites import phase  # noqa: E402


def _rows(times: dict, handoffs: int = 1000) -> list[dict]:
    return [{"case": "ping-pong x500, phase sweep", "variant": v, "median_us": t, "handoffs": handoffs} for v, t in times.items()]


def test_phase_variants_cover_every_kind_and_delay():
    v = phase.sweep_variants([0, 50])
    assert v["untraced"] == {"DELAY": 0} and v["untraced @50"] == {"DELAY": 50}
    assert v["signals @0"] == {"WAITS": True, "NOTIFIES": True, "DELAY": 0}
    assert len(v) == 2 * 5


def test_phase_rows_average_over_delays():
    """A probe that moves the hand-off by +60 ns at one delay and -20 ns at the other costs +20 ns
    on average; the ratio is of the summed times."""
    delays = [0, 50]
    times = {"untraced": 1000.0, "untraced @50": 1100.0}
    for k in ("waits", "notifies", "signals", "all"):
        times[f"{k} @0"] = 1060.0  # +60 ns per hand-off (1000 hand-offs)
        times[f"{k} @50"] = 1080.0  # -20 ns
    out = {r["variant"]: r for r in phase.mean_over_delays(_rows(times), delays)}
    assert set(out) == {"waits", "notifies", "signals", "all"}
    s = out["signals"]
    assert s["extra_ns_per_handoff"] == pytest.approx(20.0)
    assert s["ratio"] == pytest.approx((1060 + 1080) / (1000 + 1100))
    assert (s["extra_ns_min"], s["extra_ns_max"]) == (pytest.approx(-20.0), pytest.approx(60.0))  # the range over delays
    assert s["case"].endswith("mean over delays")


def test_phase_rows_refuse_a_missing_delay():
    times = {"untraced": 1000.0, "signals @0": 1010.0}
    with pytest.raises(KeyError):
        phase.mean_over_delays(_rows(times), [0, 50])


@pytest.mark.parametrize("argv, says", [
    (["--suite", "handoff", "--parts", "pipeline,pingpomg"], "--parts: unknown ['pingpomg']"),
    (["--suite", "handoff", "--shapes", "8x"], "--shapes wants TILESxELEMS"),
    (["--suite", "handoff", "--shapes", "8x8192x2"], "--shapes wants TILESxELEMS"),
    (["--suite", "handoff", "--shapes", "0x8192"], "--shapes wants TILESxELEMS"),
])
def test_a_bad_selection_is_refused_before_anything_runs(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        po.main(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_each_suite_is_run_by_its_module(monkeypatch, capsys, tmp_path):
    """The command routes every suite to its module's ``rows`` (stand-ins here: no GPU), with the
    arguments that suite takes, and writes what they return."""
    import importlib

    import torch

    from instrumented_kernels import harness as H

    calls = []
    for name in po.SUITES:
        mod = importlib.import_module(f"probe_suites.{name}")
        if name == "copy":
            monkeypatch.setattr(mod, "main", lambda a: calls.append(("copy", a.reps, a.warmup)) or 0)
            continue
        monkeypatch.setattr(mod, "rows", lambda *a, _n=name: calls.append((_n, tuple(x for x in a if x is not H and not hasattr(x, "world_size"))))
                            or [{"case": _n, "variant": "untraced", "median_us": 1.0, "p10_us": 1.0, "p90_us": 1.0}])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "stand-in")
    monkeypatch.setattr(H, "device_name", lambda: "stand-in")
    for var in ("RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    assert po.main([]) == 0 and calls == [("copy", 200, 20)]
    calls.clear()
    out = tmp_path / "rows.json"
    assert po.main(["--suite", "handoff,phase,anatomy,diag,notify,small,hook", "--hook", "m:f", "--reps", "7", "--quick",
                    "--parts", "pingpong", "--json", str(out)]) == 0
    assert [c[0] for c in calls] == ["handoff", "phase", "anatomy", "diag", "notify", "small", "hook"]
    assert calls[0][1] == (7, 5, True, ("pingpong",), None) and calls[1][1] == (7, 5)
    assert calls[6][1] == ("m:f", 7, 5)  # (the hook gets its module:function first)
    assert [r["case"] for r in json.loads(out.read_text())["rows"]] == [c[0] for c in calls]
    calls.clear()
    assert po.main(["--suite", "local,cost", "--reps", "9"]) == 0 and calls == [("local", (9,)), ("cost", ())]
    with pytest.raises(SystemExit, match="a2a needs 2 ranks"):
        po.main(["--suite", "a2a"])
    assert "stand-in" in capsys.readouterr().out


def test_the_pipeline_span_controls_compile_to_what_they_say():
    """``SIDE`` keeps one program's spans (its region's tag is in the PTX, the other's is not);
    ``TIMERS`` keeps the spans' timer reads and records nothing (neither tag, more reads than untraced)."""
    pytest.importorskip("triton")
    import handoff_kernels as hk

    import ktrace
    from ktrace import regions, schema
    from ktrace.testing.compile import TARGETS, compile_asm

    sig = {"src": "*fp32", "dst": "*fp32", "out": "*fp32", "flags": "*i32", "tiles": "i32", "tile_elems": "i32", "epoch": "i32",
           "rank": "i32", "peer": "i32", "heap_bases": "*i64", "ktrace_buf": "*i64"}
    base = {"BLOCK": 512, "BACKOFF": 0, "CHECK": 1, "PAIR": 1, "WAITS": False, "NOTIFIES": False, "SPANS": 1, "KTRACE": 64,
            "SIDE": 3, "TIMERS": False}
    tag = {n: str(int(schema.EventKind.SPAN) | (regions.register(n) << schema.REGION_SHIFT)) for n in ("put", "take")}
    prep = ktrace.trace(hk.pipeline).jit_fn
    seen = {}
    for name, sw in {"both": {}, "producer": {"SIDE": 1}, "consumer": {"SIDE": 2}, "timers": {"TIMERS": True},
                     "off": {"KTRACE": 0}}.items():
        ptx = compile_asm(prep, sig, {**base, **sw}, TARGETS["sm_90"], num_warps=4)
        seen[name] = (tag["put"] in ptx, tag["take"] in ptx, ptx.count("%globaltimer"))
    assert seen["both"][:2] == (True, True) and seen["producer"][:2] == (True, False) and seen["consumer"][:2] == (False, True)
    # (untraced, the waits' timeout still reads the timer: the control's reads come on top)
    assert seen["off"][:2] == (False, False) and seen["timers"][:2] == (False, False) and seen["timers"][2] > seen["off"][2]


def test_handoff_table_lines_up_runs_by_case_and_variant(tmp_path, capsys):
    import handoff_table as ht

    def write(name, world, rows):
        p = tmp_path / name
        p.write_text(json.dumps({"device": "x", "world_size": world, "rows": rows}))
        return str(p)

    two = write("p2.json", 2, [
        {"case": "ping-pong x200", "variant": "untraced", "median_us": 600.0},
        {"case": "ping-pong x200", "variant": "signals", "median_us": 603.0, "ratio": 1.005, "extra_ns_per_handoff": 7.5},
        {"case": "pipeline 8 x 8K fp32", "variant": "spans, consumer only", "median_us": 46.0, "ratio": 1.0101, "extra_ns_per_handoff": -3.2},
    ])
    one = write("p1.json", 1, [{"case": "ping-pong x500", "variant": "signals", "median_us": 1.0, "ratio": 0.9987, "extra_ns_per_handoff": -1.6}])
    assert ht.main(["2 ranks=" + two, "1 rank=" + one, "--cases", "ping-pong;pipeline 8 x 8K fp32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| case | variant | 2 ranks | 1 rank |"
    assert lines[2:] == ["| ping-pong | signals | 1.0050, +8 ns | 0.9987, -2 ns |",
                         "| pipeline 8 x 8K fp32 | spans, consumer only | 1.0101, -3 ns | - |"]
    with pytest.raises(SystemExit) as e:
        ht.main([two])
    assert e.value.code == 2 and "TITLE=FILE.json" in capsys.readouterr().err


def test_sass_loops_finds_the_loops_with_sixteen_loads():
    import sass_loops

    body = "\n".join(f"        /*{0x100 + 16 * i:04x}*/                   LDG.E R{i}, desc[UR4][R2.64] ;" for i in range(16))
    text = (".L_x_3:\n" + body + "\n        /*0300*/                   IADD3 R1, R1, 0x1, RZ ;\n"
            "        /*0310*/              @!P0 BRA `(.L_x_3) ;\n"
            ".L_x_4:\n        /*0320*/                   LDG.E R1, desc[UR4][R2.64] ;\n        /*0330*/                   BRA `(.L_x_4) ;\n"
            "        /*0340*/                   BRA `(.L_x_9) ;\n.L_x_9:\n        /*0350*/                   EXIT ;\n")
    assert sass_loops.copy_loops(text) == [18]
    assert sass_loops.copy_loops(text, loads=1) == [2]
