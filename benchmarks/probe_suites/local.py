"""``--suite local``: the ping-pong between two programs of one GPU, in one process (also what ncu profiles)."""

from __future__ import annotations

from ktrace import schema

from . import common as C
from .diag import DIAG_VARIANTS
from .handoff import PINGPONG_VARIANTS

def local_case(reps: int, variants: dict, rounds: int = 500) -> list[dict]:
    """Ping-pong between programs 0 and 1 of one launch on one GPU (no NVLink): a hand-off is an
    L2 round trip, the probes' share is larger; one process, no peer (also for ``ncu``)."""
    import torch

    import handoff_kernels as hk
    from ktrace.shmem.codes import ERROR_BLOCK_BYTES

    dev = torch.device("cuda")
    err = torch.zeros(ERROR_BLOCK_BYTES // 4 + 64, dtype=torch.int32, device=dev)
    bases = torch.tensor([err.data_ptr()], dtype=torch.int64, device=dev)
    flag = torch.zeros(64, dtype=torch.int32, device=dev)[32:]
    scratch = torch.zeros(16, dtype=torch.int64, device=dev)
    ep = C.Epochs()
    fns = {}
    for name, sw in variants.items():
        k, sw = C.kernel_for(hk.pingpong, sw)
        slots = max(1, rounds * C.slots_per_round(sw))
        buf = None if not C.is_traced(name, sw) else torch.zeros((schema.buffer_bytes(2, slots) + 7) // 8, dtype=torch.int64, device=dev)
        extra = {} if buf is None else {"ktrace_buf": buf, "KTRACE": slots}

        def fn(sw=sw, extra=extra, k=k):
            k[(2,)](flag, scratch, rounds, ep.next(), 0, 0, 0, bases, LOCAL=True, **sw, **extra, num_warps=4)

        fns[name] = fn
    t = C.median_times(fns, reps, 3)
    torch.cuda.synchronize()
    if int(err[0].item()):
        raise SystemExit("local ping-pong: a wait timed out")
    if int(flag[0].item()) != ep.epoch * rounds:
        raise SystemExit(f"local ping-pong: flag {int(flag[0].item())}, expected {ep.epoch * rounds}")
    rows = []
    u = t["untraced"]["median_us"]
    for name in variants:
        m = t[name]["median_us"]
        rows.append({"case": f"local ping-pong x{rounds}", "variant": name, "median_us": m, "p10_us": t[name]["p10_us"], "p90_us": t[name]["p90_us"],
                     "handoffs": 2 * rounds, "ratio": m / u, "extra_ns_per_handoff": 1000.0 * (m - u) / (2 * rounds)})
    return rows


def rows(reps: int) -> list[dict]:
    """The ping-pong's probe variants, then its raw-operation diagnostics."""
    return local_case(reps, PINGPONG_VARIANTS) + local_case(reps, DIAG_VARIANTS)
