"""GPU tier: probes record what they should on a real GPU (run with ``pytest -m gpu``)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # collected on CPU machines, skipped there
    pytest.skip("needs a GPU", allow_module_level=True)

import ktrace
from ktrace import schema
from ktrace.decode import decode_buffer
from ktrace.schema import EventFlag, EventKind
from tests import probe_kernels as pk

pytestmark = pytest.mark.gpu
DEV = "cuda"


def _names(cap):
    return cap.to_capture().regions


def test_untraced_launch_records_nothing():
    x = torch.randn(4096, device=DEV)
    y = torch.full_like(x, float("nan"))
    pk.copy_kernel[(4,)](x, y, x.numel(), BLOCK=1024)
    torch.testing.assert_close(y, x)


def test_copy_one_span_per_program_and_launch_bookkeeping():
    n, B = 10_000, 1024
    grid = (triton_cdiv(n, B),)
    x = torch.randn(n, device=DEV)
    y = torch.full_like(x, float("nan"))
    z = torch.full_like(x, float("nan"))
    with ktrace.capture() as cap:
        pk.copy_kernel[grid](x, y, n, BLOCK=B)
        pk.shape_kernel[(3,)](torch.empty(3, device=DEV))
        pk.copy_kernel[lambda meta: (triton_cdiv(meta["n"], meta["BLOCK"]),)](y, z, n, BLOCK=B)
    torch.testing.assert_close(y, x)
    torch.testing.assert_close(z, x)
    c = cap.to_capture()
    launches = c.ranks[0].launches
    assert [ln.kernel for ln in launches] == ["copy_kernel", "shape_kernel", "copy_kernel"]
    assert [ln.index for ln in launches] == [0, 1, 2]
    assert launches[0].grid == (grid[0], 1, 1) and launches[1].grid == (3, 1, 1)
    assert c.ranks[0].device["vendor"] in ("nvidia", "amd")
    ev = c.events()
    first = ev[ev["launch"] == 0]
    assert len(first) == grid[0]
    assert (first["kind"] == EventKind.SPAN).all()
    assert sorted(first["program"]) == list(range(grid[0]))
    assert (first["arg0"] == first["program"]).all() and (first["arg1"] == B * 4).all()
    assert (first["start"] <= first["end"]).all() and (first["start"] > 0).all()
    assert c.region_name(int(first["region"][0])) == "copy"
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    assert (first["hw"] < sm).all()


def triton_cdiv(a, b):
    return (a + b - 1) // b


def test_exact_counts_nesting_counters():
    P = 37
    with ktrace.capture() as cap:
        pk.shape_kernel[(P,)](torch.empty(P, device=DEV))
    ev = cap.events()
    names = _names(cap)
    rid = {v: k for k, v in names.items()}
    for p in range(P):
        e = ev[ev["program"] == p]
        k = p % 4 + 1
        assert len(e) == 2 * k + 2, p  # k inner spans + k marks + outer span + counter
        assert list(e["slot"]) == list(range(len(e)))
        inner = e[(e["kind"] == EventKind.SPAN) & (e["region"] == rid["inner"])]
        outer = e[(e["kind"] == EventKind.SPAN) & (e["region"] == rid["outer"])]
        marks = e[e["kind"] == EventKind.INSTANT]
        ctr = e[e["kind"] == EventKind.COUNTER]
        assert len(inner) == k and len(outer) == 1 and len(marks) == k and len(ctr) == 1
        assert list(inner["arg1"]) == list(range(k)) and (inner["arg0"] == p).all()
        # nesting: every inner span lies within the outer one, and each mark within its inner span
        assert (inner["start"] >= outer["start"][0]).all() and (inner["end"] <= outer["end"][0]).all()
        assert ((marks["start"] >= inner["start"]) & (marks["start"] <= inner["end"])).all()
        assert (inner["start"][1:] >= inner["end"][:-1]).all()  # inner spans are sequential
        assert ctr["arg0"][0] == p * 2**33 + 7
        assert ctr["start"][0] >= outer["end"][0]
        assert (e["start"] <= e["end"]).all()


def test_wait_and_notify_records_carry_all_arguments():
    P = 6
    with ktrace.capture() as cap:
        pk.wait_layout_kernel[(P,)](torch.empty(P, dtype=torch.int32, device=DEV))
    ev = cap.events()
    assert len(ev) == 2 * P
    w = ev[ev["kind"] == EventKind.WAIT]
    nt = ev[ev["kind"] == EventKind.NOTIFY]
    p = w["program"]
    assert list(p) == list(range(P))
    assert (w["arg0"] == p + 1).all() and (w["arg1"] == 1000 + p).all()
    assert (w["arg2"] == 1 << 40).all() and (w["arg3"] == 3 * p).all()
    assert (w["arg4"] == -5).all() and (w["arg5"] == 2).all()
    assert (w["end"] - w["start"] == 64).all()
    timed_out = (w["flags"] & EventFlag.TIMEOUT) != 0
    assert list(timed_out) == [bool(i % 2) for i in range(P)]
    assert (nt["arg0"] == nt["program"] + 2).all() and (nt["arg1"] == 77).all()
    assert (nt["arg2"] == 123456789012).all() and (nt["arg3"] == nt["program"]).all()
    assert list(nt["slot"]) == [2] * P  # wait took slots 0-1, notify 2-3


@pytest.mark.parametrize("deferred", [False, True], ids=["immediate", "deferred"])
@pytest.mark.parametrize("n_marks,cap", [(10, 4), (3, 4), (2, 4), (0, 1), (7, 8)])
def test_overflow_counts_drops_exactly_and_never_writes_past_the_buffer(n_marks, cap, deferred):
    P = 50
    nbytes = schema.buffer_bytes(P, cap)
    canary_words = 4096
    words = (nbytes + 7) // 8
    big = torch.full((words + canary_words,), 0x5A5A5A5A5A5A5A5A, dtype=torch.int64, device=DEV)
    big[:words] = 0
    buf = big[:words]
    out = torch.empty(P, dtype=torch.int32, device=DEV)
    kernel = ktrace.trace(pk.overflow_kernel).jit_fn if deferred else pk.overflow_kernel  # deferred: records flushed by finish
    kernel[(P,)](out, n_marks, ktrace_buf=buf, KTRACE=cap)
    torch.cuda.synchronize()
    assert (big[words:] == 0x5A5A5A5A5A5A5A5A).all(), "wrote past the end of the buffer"
    raw = buf.cpu().numpy().view(np.uint8)[:nbytes].copy()
    hdr = schema.Header(timer=schema.TimerKind.NV_GLOBALTIMER, tick_hz=10**9, capacity=cap, n_programs=P, grid=(P, 1, 1))
    raw[:64] = np.frombuffer(hdr.to_bytes(), np.uint8)
    d = decode_buffer(raw)
    marks_kept = min(n_marks, cap)
    wait_fits = n_marks + 2 <= cap
    per_prog_written = marks_kept + (1 if wait_fits else 0)
    per_prog_dropped = (n_marks - marks_kept) + (0 if wait_fits else 1)
    assert d.written == P * per_prog_written
    assert (d.dropped_per_program == per_prog_dropped).all()
    assert d.dropped == P * per_prog_dropped
    ev = d.events
    marks = ev[ev["kind"] == EventKind.INSTANT]
    assert (marks["arg0"] == marks["slot"]).all() and (marks["arg1"] == marks["program"]).all()
    if wait_fits:
        w = ev[ev["kind"] == EventKind.WAIT]
        assert len(w) == P and (w["arg2"] == 4096 + w["program"] * 8).all()


@pytest.mark.parametrize("deferred", [False, True], ids=["immediate", "deferred"])
def test_relay_wait_then_notify_records_on_one_gpu(deferred):
    """A real wait (flag already set) then a notify, in 40 programs: the WAIT record (kept in
    registers when deferred) lands in slots 0-1, the NOTIFY in 2-3, each from one thread's
    readings (end never before start, the notify after the wait), and the release happened."""
    from ktrace.shmem.codes import ERROR_BLOCK_BYTES

    P = 40
    heap = torch.zeros(ERROR_BLOCK_BYTES // 4 + 2 * P + 64, dtype=torch.int32, device=DEV)
    bases = torch.tensor([heap.data_ptr()], dtype=torch.int64, device=DEV)
    flags = heap[ERROR_BLOCK_BYTES // 4 :]
    flags[0] = 1
    cap = 6
    words = (schema.buffer_bytes(P, cap) + 7) // 8
    big = torch.full((words + 512,), 0x5A5A5A5A5A5A5A5A, dtype=torch.int64, device=DEV)
    big[:words] = 0
    kernel = ktrace.trace(pk.relay_kernel).jit_fn if deferred else pk.relay_kernel
    kernel[(P,)](flags, 0, 0, bases, ktrace_buf=big[:words], KTRACE=cap)
    torch.cuda.synchronize()
    assert int(heap[0]) == 0 and int(flags[1]) == 1
    assert (big[words:] == 0x5A5A5A5A5A5A5A5A).all()
    raw = big[:words].cpu().numpy().view(np.uint8)[: schema.buffer_bytes(P, cap)].copy()
    hdr = schema.Header(timer=schema.TimerKind.NV_GLOBALTIMER, tick_hz=10**9, capacity=cap, n_programs=P, grid=(P, 1, 1))
    raw[:64] = np.frombuffer(hdr.to_bytes(), np.uint8)
    d = decode_buffer(raw)
    assert d.written == 2 * P and d.dropped == 0
    ev = d.events
    w, nt = ev[ev["kind"] == EventKind.WAIT], ev[ev["kind"] == EventKind.NOTIFY]
    assert len(w) == P and len(nt) == P and (w["slot"] == 0).all() and (nt["slot"] == 2).all()
    assert (ev["start"] <= ev["end"]).all()
    assert (np.sort(nt["start"]) >= 0).all() and (nt["start"][np.argsort(nt["program"])] >= w["end"][np.argsort(w["program"])]).all()


def test_env_var_capture(tmp_path, monkeypatch):
    """KTRACE=1 traces without a capture context; the session writes a file at exit."""
    import subprocess
    import sys

    out = tmp_path / "env.ktrace"
    code = (
        "import torch, tests.probe_kernels as pk\n"
        "x = torch.randn(2048, device='cuda'); y = torch.empty_like(x)\n"
        "pk.copy_kernel[(2,)](x, y, 2048, BLOCK=1024)\n"
        "torch.cuda.synchronize(); assert torch.equal(x, y)\n"
    )
    env = dict(__import__("os").environ, KTRACE="1", KTRACE_OUT=str(out))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    c = ktrace.read_capture(out)
    ev = c.events()
    assert len(ev) == 2 and (ev["kind"] == EventKind.SPAN).all()


def test_overflow_is_clean_under_compute_sanitizer_memcheck():
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    tool = shutil.which("compute-sanitizer") or next(
        (str(p) for p in Path("/usr/local/cuda/bin").glob("compute-sanitizer")), None
    )
    if tool is None:
        pytest.skip("compute-sanitizer not installed")
    root = Path(__file__).parents[2]
    r = subprocess.run(
        [tool, "--tool", "memcheck", "--error-exitcode", "1", sys.executable, "-m", "tests.gpu.overflow_memcheck"],
        cwd=root, capture_output=True, text=True, timeout=600, env=dict(os.environ),
    )
    print(r.stdout[-3000:], r.stderr[-3000:])
    assert r.returncode == 0
    assert "ERROR SUMMARY: 0 errors" in r.stdout
    assert "dropped:" in r.stdout


def test_many_launches_across_arenas_and_streams():
    """Small arenas force several of them; launches on a side stream wait for the zeroing."""
    n, B = 8192, 1024
    x = torch.randn(n, device=DEV)
    ys = [torch.full_like(x, float("nan")) for _ in range(12)]
    side = torch.cuda.Stream()
    with ktrace.capture(arena_bytes=4096) as cap:
        for i, y in enumerate(ys):
            if i % 2:
                with torch.cuda.stream(side):
                    pk.copy_kernel[(n // B,)](x, y, n, BLOCK=B)
            else:
                pk.copy_kernel[(n // B,)](x, y, n, BLOCK=B)
    torch.cuda.synchronize()
    for y in ys:
        torch.testing.assert_close(y, x)
    c = cap.to_capture()
    assert len(c.ranks[0].launches) == 12
    for ln in c.ranks[0].launches:
        d = ln.decode(0)
        assert d.written == n // B and d.dropped == 0
        assert sorted(d.events["program"]) == list(range(n // B))
