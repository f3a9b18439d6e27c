"""``ktrace.capture(warmup=N)`` on a GPU: each kernel's first N launches are traced and marked as
warm-up in the capture (its file keeps the mark), and the report leaves them out."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import ktrace  # noqa: E402
from ktrace.analysis import build_report, report_json  # noqa: E402
from ktrace.captures import read_capture, write_capture  # noqa: E402
from tests import probe_kernels as pk  # noqa: E402

pytestmark = pytest.mark.gpu


def test_capture_marks_warmup_launches_and_the_report_leaves_them_out(tmp_path):
    n, B = 8192, 1024
    x = torch.randn(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    with ktrace.capture(warmup=1) as cap:
        for _ in range(3):
            pk.copy_kernel[(n // B,)](x, y, n, BLOCK=B)
        pk.shape_kernel[(3,)](torch.empty(3, device="cuda"))
        pk.copy_kernel[(n // B,)](x, y, n, BLOCK=B)
    torch.testing.assert_close(y, x)
    c = cap.to_capture()
    marks = [bool((ln.meta or {}).get("warmup")) for ln in c.ranks[0].launches]
    assert marks == [True, False, False, True, False]  # (each kernel's first launch)
    path = write_capture(tmp_path / "warm.ktrace", c)
    assert [bool((ln.meta or {}).get("warmup")) for ln in read_capture(path).ranks[0].launches] == marks
    doc = report_json(build_report(str(path)))
    assert doc["summary"]["warmup_launches"] == [0, 3] and doc["summary"]["launches"] == 3
    assert any(f["kind"] == "warmup" and "the capture marks them as warm-up" in f["text"] for f in doc["findings"])
