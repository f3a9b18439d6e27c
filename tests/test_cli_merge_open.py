"""``ktrace merge`` and ``ktrace open`` (the server binds 127.0.0.1 only; serves until stopped, or idle)."""

import http.client
import importlib.util
import json
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import ktrace
from ktrace.cli import main
from ktrace.captures import read_capture, write_capture
from ktrace.captures.file import Capture
from ktrace.captures.synth import constructed_capture
from viewers import serve_trace
from viewers.perfetto_open import UI_BUILD_ENV, UiBuild, UiBuildNotFound, find_ui_build, finding_windows, open_trace


@pytest.fixture()
def rank_files(tmp_path):
    cap, _ = constructed_capture(world_size=2, programs=2, iters=1, seed=9)
    return [str(write_capture(tmp_path / f"r{r}.ktrace", Capture(world_size=2, ranks={r: rc}, regions=cap.regions)))
            for r, rc in cap.ranks.items()]


@pytest.mark.parametrize("out,fmt", [("m.ktrace", "ktrace"), ("m.pftrace", "perfetto"), ("m.json", "chrome"), ("m.json.gz", "chrome")])
def test_merge_by_suffix(rank_files, tmp_path, capsys, out, fmt):
    assert main(["merge", *rank_files, "-o", str(tmp_path / out)]) == 0
    said = capsys.readouterr().out
    assert f": {fmt}, ranks 0-1 of 2" in said and "clock pingpong+drift" in said
    if fmt == "ktrace":
        assert sorted(read_capture(tmp_path / out).ranks) == [0, 1]


def test_merge_errors(rank_files, tmp_path, capsys):
    assert main(["merge", *rank_files, "-o", str(tmp_path / "x.txt")]) == 2
    assert "cannot tell the format" in capsys.readouterr().err
    bad = tmp_path / "bad.ktrace"
    bad.write_bytes(b"garbage")
    assert main(["merge", rank_files[0], str(bad), "-o", str(tmp_path / "y.json")]) == 2
    assert "not a ktrace capture file" in capsys.readouterr().err
    # one rank only: a partial trace, said so
    assert main(["merge", rank_files[0], "-o", str(tmp_path / "z.json")]) == 0
    assert "PARTIAL: ranks 1 missing" in capsys.readouterr().out
    assert json.loads((tmp_path / "z.json").read_bytes())["otherData"]["partial"] is True


def test_server_serves_one_file_on_loopback_with_cors(tmp_path):
    f = tmp_path / "t.json"
    f.write_bytes(b'{"traceEvents":[]}')
    (tmp_path / "secret.txt").write_text("no")
    srv = serve_trace(f, port=0)
    try:
        assert srv.httpd.server_address[0] == "127.0.0.1"
        assert srv.ui_url.startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(srv.url.replace("t.json", "secret.txt"), timeout=5)
        assert e.value.code == 404
        assert not srv.fetched.is_set()
        with urllib.request.urlopen(srv.url, timeout=5) as r:
            assert r.read() == f.read_bytes()
            assert r.headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
        assert srv.wait(5)
    finally:
        srv.stop()


def test_open_serves_until_stopped_and_stops_when_idle(tmp_path):
    f = tmp_path / "t.pftrace"
    f.write_bytes(b"\x0a\x00")
    said, stop, result = [], threading.Event(), []

    def run():
        result.append(open_trace(f, port=0, browser=False, echo=said.append, stop=stop))

    th = threading.Thread(target=run)
    th.start()
    for _ in range(100):
        if said:
            break
        time.sleep(0.05)
    url = said[0].split("url=")[-1]
    for _ in range(3):  # reloads and several links: every fetch is answered
        with urllib.request.urlopen(url, timeout=5) as r:
            assert r.read() == f.read_bytes()
    time.sleep(0.3)
    assert th.is_alive()  # still serving after the fetches
    stop.set()
    th.join(5)
    assert result == [True]
    assert open_trace(f, port=0, browser=False, timeout=0.2, echo=said.append) is False
    assert "no request for 0.2 s" in said[-1]
    assert main(["open", str(tmp_path / "missing.json"), "--no-browser"]) == 2


@pytest.fixture()
def ui_build(tmp_path):
    """A stand-in Perfetto UI build: index.html naming its version folder, a bundle, a wasm."""
    d = tmp_path / "ui"
    (d / "v9.9-abc").mkdir(parents=True)
    (d / "index.html").write_text("""<body data-perfetto_version='{"stable":"v9.9-abc"}'>ui</body>""")
    (d / "v9.9-abc" / "frontend_bundle.js").write_text("//js")
    (d / "v9.9-abc" / "trace_processor.wasm").write_bytes(b"\0asm")
    (tmp_path / "secret.txt").write_text("no")
    return d


def test_offline_server_serves_the_ui_build_and_nothing_else(tmp_path, ui_build):
    f = tmp_path / "t.json"
    f.write_bytes(b'{"traceEvents":[]}')
    build = UiBuild.at(ui_build)
    assert build.version == "v9.9-abc" and build.trace_processor_wasm.is_file()
    with serve_trace(f, port=0, ui_build=build) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        assert srv.ui_url == f"{base}/#!/?url={base}/trace/t.json"
        assert srv.ui_link(window=(5, 9)).endswith("&visStart=5&visEnd=9")
        with urllib.request.urlopen(base + "/", timeout=5) as r:
            assert b"v9.9-abc" in r.read()
        with urllib.request.urlopen(base + "/v9.9-abc/trace_processor.wasm", timeout=5) as r:
            assert r.headers["Content-Type"] == "application/wasm"
        with urllib.request.urlopen(srv.url, timeout=5) as r:
            assert r.read() == f.read_bytes()
        for path in ("/../secret.txt", "/v9.9-abc/../../secret.txt", "/%2e%2e/secret.txt", "/trace/secret.txt", "/trace/../t.json"):
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
            conn.request("GET", path)
            assert conn.getresponse().status == 404, path
            conn.close()


def test_find_ui_build(monkeypatch, tmp_path, ui_build):
    monkeypatch.setenv(UI_BUILD_ENV, str(ui_build))
    assert find_ui_build().source == UI_BUILD_ENV
    monkeypatch.setenv(UI_BUILD_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(UiBuildNotFound, match="not a Perfetto UI build"):
        find_ui_build()
    monkeypatch.delenv(UI_BUILD_ENV)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UiBuildNotFound, match=r"ktrace\[offline\]"):
        find_ui_build()


def test_finding_windows_are_the_report_ranges_clamped_to_the_trace():
    rep = {"format": "ktrace-report", "summary": {"trace_end_ns": 10_000},
           "findings": [{"start_ns": 100, "end_ns": 5_000}, {"start_ns": 300, "end_ns": 300}, {"start_ns": 9_990, "end_ns": 12_000},
                        {"start_ns": None, "end_ns": None, "kind": "hang", "text": "no range"}, {"start_ns": 2_000, "end_ns": 12_000}]}
    # clamped to the trace; a range under 1 µs widened to 1 µs, kept inside
    assert finding_windows(rep)[1] == (100, 5_000) and finding_windows(rep)[2] == (0, 1_000)
    assert finding_windows(rep)[3] == (9_000, 10_000)  # 9,990 .. 10,000 is 10 ns: widened, within the trace
    assert finding_windows(rep)[5] == (2_000, 10_000)  # cut at the trace's end
    with pytest.raises(ValueError, match="no time range"):
        finding_windows(rep, 4)
    with pytest.raises(ValueError, match="no finding 9"):
        finding_windows(rep, 9)


@pytest.fixture(scope="module")
def skewed_trace_and_report(tmp_path_factory):
    d = tmp_path_factory.mktemp("open_finding")
    cap = str(Path(ktrace.__file__).parent / "data" / "a2a_skewed_4xh200.ktrace")
    trace, rep = d / "skewed.pftrace", d / "skewed.report.json"
    assert main(["merge", cap, "-o", str(trace)]) == 0
    assert main(["report", cap, "--json", str(rep), "-q"]) == 0
    return trace, rep


def test_cli_open_at_a_finding_offline(monkeypatch, capsys, ui_build, skewed_trace_and_report):
    trace, rep = skewed_trace_and_report
    report = json.loads(rep.read_text())
    capsys.readouterr()
    monkeypatch.setenv(UI_BUILD_ENV, str(ui_build))
    base = ["open", str(trace), "--port", "0", "--no-browser", "--timeout", "0.2"]
    assert main([*base, "--offline", "--report", str(rep), "--finding", "1"]) == 1  # nothing fetched it
    link = capsys.readouterr().out.splitlines()[1].strip()
    # the same window as the report's own link for that finding (both count ns from the capture's first event)
    want = re.search(r"[?&](visStart=\d+&visEnd=\d+)$", report["findings"][0]["perfetto"]).group(1)
    assert link.startswith("http://127.0.0.1:") and "/#!/?url=http://127.0.0.1:" in link
    assert "&" + want + "&startupCommands=" in link  # (and the ranks listed in order)
    assert main([*base, "--online", "--report", str(rep)]) == 1  # a link per finding that has a range
    out = capsys.readouterr().out
    ranged = [n + 1 for n, f in enumerate(report["findings"]) if f["start_ns"] is not None]
    assert [int(m) for m in re.findall(r"^  finding (\d+): https://ui\.perfetto\.dev/", out, re.M)] == ranged
    no_range = next(n + 1 for n, f in enumerate(report["findings"]) if f["start_ns"] is None)
    for extra, said in ((["--finding", "1"], "needs --report"), (["--report", str(rep), "--finding", "99"], "no finding 99"),
                        (["--report", str(rep), "--finding", str(no_range)], "has no time range"),
                        (["--report", str(trace), "--finding", "1"], "")):
        assert main([*base, *extra]) == 2
        assert said in capsys.readouterr().err
    monkeypatch.setenv(UI_BUILD_ENV, str(ui_build.parent / "nowhere"))
    assert main([*base, "--offline"]) == 2
    assert "--offline: " in capsys.readouterr().err
