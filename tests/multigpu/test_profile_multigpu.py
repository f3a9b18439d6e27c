"""Multi-GPU tier: the PyTorch profiler's timeline of every rank with the capture inside it.

Each rank runs a short token ring (``test_alignment.ring_kernel``) between two torch ops, under
``torch.profiler`` and ``ktrace.capture(heap=heap, profiler=prof)``, and saves its capture and its
profile; rank 0 merges all of them (``ktrace merge r*.ktrace --with-profile r*.kineto.json.gz``)
and checks in Perfetto's trace processor that every rank's traced launch lies inside its CUPTI
kernel slice, each rank aligned with its own bound.

    python -m ktrace.testing.launch -n 2 -- python -m pytest -m multigpu tests/multigpu/test_profile_multigpu.py -q -s
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest

import ktrace

pytestmark = pytest.mark.multigpu


def test_every_rank_inside_its_profilers_kernels(heap, dist_env, capsys):
    import torch

    from ktrace.cli import main

    from test_alignment import ring_kernel  # (this folder is on the path: pytest puts it there)

    rank, world = dist_env
    if world < 2:
        pytest.skip("needs two ranks")
    flags = heap.zeros(1, dtype=torch.int32, name="profile.ring.flags")
    x = torch.randn(256, 256, device=heap.device)
    heap.barrier()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        with ktrace.capture(heap=heap, profiler=prof) as cap:
            for _ in range(2):
                y = x @ x
                ring_kernel[(1,)](flags, 50, rank, world, heap.bases, num_warps=1)
                flags.zero_()
                heap.barrier()
                y.relu_()
        torch.cuda.synchronize()
    heap.check()
    out = Path(os.environ.get("KTRACE_TEST_OUT", tempfile.gettempdir())) / f"ktrace-profile-{cap.run_id}"
    out.mkdir(parents=True, exist_ok=True)
    cap.save(out / f"r{rank}.ktrace")
    heap.barrier()
    if rank != 0:
        return
    caps = [str(out / f"r{r}.ktrace") for r in range(world)]
    profiles = [str(out / f"r{r}.kineto.json.gz") for r in range(world)]
    merged = out / "merged.pftrace"
    assert main(["merge", *caps, "--with-profile", *profiles, "-o", str(merged)]) == 0
    text = capsys.readouterr().out
    print(text)
    bounds = [int(b) for b in re.findall(r"bound ±(\d+) ns", text)]
    assert len(bounds) == world and "every traced launch inside" in text
    from ktrace.testing.perfetto import TraceProcessorHost, unavailable_reason

    if unavailable_reason() is not None:
        pytest.skip(f"Perfetto's trace processor cannot run here: {unavailable_reason()}")
    with TraceProcessorHost() as host:
        t = host.load(merged)
        assert t.problems() == []
        rows = t.query("""
            with k as (select ts, dur, upid, extract_arg(s.arg_set_id, 'debug.ktrace_launch') l from slice s
                       join thread_track tt on s.track_id = tt.id join thread using (utid)
                       where s.category = 'kernel' and l is not null),
                 e as (select s.ts, s.dur, upid, extract_arg(s.arg_set_id, 'debug.launch') l from slice s
                       join thread_track tt on s.track_id = tt.id join thread using (utid)
                       where extract_arg(s.arg_set_id, 'debug.launch') is not null)
            select count(*) n, sum(e.ts >= k.ts and e.ts + e.dur <= k.ts + k.dur) inside from e join k using (upid, l)""")[0]
        assert rows["n"] > 0 and rows["inside"] == rows["n"]
