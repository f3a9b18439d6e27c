"""Multi-GPU tier: the Gluon communication partition across ranks (``ktrace.shmem.gluon``).

    python -m ktrace.testing.launch -n 2 -- python -m pytest -m multigpu tests/multigpu/test_gluon_multigpu.py

Each rank's communication partition notifies the next rank's flags; its default partition waits
for the previous rank's last round. The merged capture pairs every wait with the previous rank's
notify (rule 1, across ranks) and no release comes after the wait it ended on the common clock.
"""

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.multigpu


def test_gluon_notify_wait_pair_across_ranks(tmp_path):
    from instrumented_kernels import harness as H
    from ktrace.pairing import pair_table
    from ktrace.events import aligned_events
    from tests import gluon_probe_kernels as gpk

    import ktrace

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU per rank")
    d = H.setup()
    if d.world_size < 2:
        pytest.skip("needs 2+ ranks")
    heap = H.heap(1 << 16)
    progs, rounds = 4, 5
    fl = heap.zeros(progs, dtype=torch.int32)
    k = ktrace.trace(gpk.flag_kernel, events_per_program=32, lanes=(gpk._waiter, gpk._comm))
    nxt, prev = (heap.rank + 1) % heap.world_size, (heap.rank - 1) % heap.world_size
    with ktrace.capture(heap=heap) as cap:
        k[(progs,)](fl, heap.rank, nxt, prev, heap.bases, rounds, num_warps=4)
    torch.cuda.synchronize()
    heap.check()
    assert fl.tolist() == [rounds] * progs
    merged = cap.gather()
    if d.rank == 0:
        ev = aligned_events(merged)
        n, w, _, unmatched = pair_table(ev)
        assert unmatched == 0 and n.size == progs * d.world_size
        assert ((ev["rank"][n] + 1) % d.world_size == ev["rank"][w]).all()
        assert (ev["start_ns"][n] <= ev["end_ns"][w]).all()


def test_gluon_gemm_all_scatter_at_n_ranks():
    """Every rank computes its rows and ends with all of C (vs torch); every wait pairs: the
    mbarrier ones inside their programs, the flag ones with the notify of the rank named."""
    from instrumented_kernels import harness as H
    from instrumented_kernels.gluon_gemm import reference as R
    from instrumented_kernels.gluon_gemm.scatter import GluonGemmScatter
    from ktrace.events import aligned_events
    from ktrace.pairing import pair_table

    import ktrace

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU per rank")
    d = H.setup()
    if d.world_size < 2:
        pytest.skip("needs 2+ ranks")
    M, N, K = 512, 512, 1024
    heap = H.heap(d.world_size * M * N * 2 + (1 << 20))
    plan = GluonGemmScatter(heap, M, N, K, programs=8)
    mine = R.generate_input(d.rank, d.world_size, 10 + d.rank, M, N, K)["A"]  # this rank's rows
    B = R.generate_input(0, 1, 10, M, N, K)["B"]  # the same on every rank
    H.poison(plan.C)
    heap.barrier()
    with ktrace.capture(heap=heap) as cap:
        C = plan(mine, B, traced=True)
    torch.cuda.synchronize()
    heap.check()
    want = torch.cat([R.generate_input(q, d.world_size, 10 + q, M, N, K)["A"].float() @ B.float() for q in range(d.world_size)])
    H.check_close("gluon gemm all-scatter", C, want, tol=R.TOL, rank=d.rank)
    merged = cap.gather()
    if d.rank == 0:
        ev = aligned_events(merged)
        n, w, _, unmatched = pair_table(ev)
        assert unmatched == 0
        assert (ev["start_ns"][n] <= ev["end_ns"][w]).all()
