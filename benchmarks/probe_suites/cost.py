"""``--suite cost``: cycles and ns per probe in a loop of 1000 (one program, one GPU)."""

from __future__ import annotations

from ktrace import schema

def rows() -> list[dict]:
    """Cycles and ns per probe in a loop of 1000 (one program of 4 warps, records kept)."""
    import torch

    import handoff_kernels as hk

    n = 1000
    dev = torch.device("cuda")
    out = torch.zeros(4, dtype=torch.int64, device=dev)
    buf = torch.zeros((schema.buffer_bytes(1, 2 * n) + 7) // 8, dtype=torch.int64, device=dev)
    rows = []
    names = {0: "empty loop", 1: "timer read", 2: "mark", 3: "span (begin + end)", 4: "counter", 5: "wait record", 6: "notify record"}
    for kind, name in names.items():
        res = []
        for _ in range(5):
            hk.probe_cost[(1,)](out, n, KIND=kind, ktrace_buf=buf, KTRACE=2 * n, num_warps=4)
            torch.cuda.synchronize()
            res.append((int(out[0]) / n, int(out[1]) / n))
        res.sort()
        rows.append({"case": "probe in a loop", "variant": name, "cycles": res[2][0], "ns": res[2][1]})
    return rows
