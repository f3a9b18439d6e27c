"""``ktrace merge`` and ``ktrace open`` (the server binds 127.0.0.1 only and stops by itself)."""

import json
import threading
import urllib.error
import urllib.request

import pytest

from ktrace.cli import main
from ktrace.captures import read_capture, write_capture
from ktrace.captures.file import Capture
from ktrace.captures.synth import constructed_capture
from viewers import serve_trace
from viewers.perfetto_open import open_trace


@pytest.fixture()
def rank_files(tmp_path):
    cap, _ = constructed_capture(world_size=2, programs=2, iters=1, seed=9)
    return [str(write_capture(tmp_path / f"r{r}.ktrace", Capture(world_size=2, ranks={r: rc}, regions=cap.regions)))
            for r, rc in cap.ranks.items()]


@pytest.mark.parametrize("out,fmt", [("m.ktrace", "ktrace"), ("m.pftrace", "perfetto"), ("m.json", "chrome"), ("m.json.gz", "chrome")])
def test_merge_by_suffix(rank_files, tmp_path, capsys, out, fmt):
    assert main(["merge", *rank_files, "-o", str(tmp_path / out)]) == 0
    said = capsys.readouterr().out
    assert f": {fmt}, ranks [0, 1] of 2" in said and "clock pingpong+drift" in said
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
    assert "PARTIAL: ranks [1] missing" in capsys.readouterr().out
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


def test_open_stops_after_the_fetch_and_on_timeout(tmp_path):
    f = tmp_path / "t.pftrace"
    f.write_bytes(b"\x0a\x00")
    said = []

    def fetch_when_printed(msg):
        said.append(msg)
        url = msg.split("url=")[-1] if "url=" in msg else None
        if url:
            threading.Thread(target=lambda: urllib.request.urlopen(url, timeout=5).read(), daemon=True).start()

    assert open_trace(f, port=0, browser=False, timeout=10, linger=0.1, echo=fetch_when_printed) is True
    assert open_trace(f, port=0, browser=False, timeout=0.2, echo=said.append) is False
    assert "no request" in said[-1]
    assert main(["open", str(tmp_path / "missing.json"), "--no-browser"]) == 2
