"""``--suite small``: where a few-microsecond launch's probe cost goes (``handoff_kernels.burst``)."""

from __future__ import annotations

from ktrace import schema

from . import common as C

#: ``--suite small``: variants of ``handoff_kernels.burst`` (name -> switches). Every variant writes
#: the same output; ``KTRACE``: slots per program of a traced launch (two, as ``burst``'s hand-made
#: record assumes); the buffer is one of two, the same for every variant that names it: ``near``,
#: carved from the output's own allocation right after it, or ``far``, 32 MiB into an allocation
#: of its own.
SMALL_VARIANTS = {
    "untraced": {},
    "untraced (twin)": {},
    "on, no probe": {"KTRACE": 2, "BUF": "near"},
    "span": {"SPANS": 1, "KTRACE": 2, "BUF": "near"},
    "span, far buffer": {"SPANS": 1, "KTRACE": 2, "BUF": "far"},
    "by hand, lane at the start": {"MANUAL": 2, "BUF": "near"},
    "by hand, lane at the end": {"MANUAL": 1, "BUF": "near"},
    "by hand, lane at the end, far": {"MANUAL": 1, "BUF": "far"},
    "by hand, grid read at the start": {"MANUAL": 3, "BUF": "near"},
    "by hand, stored at the start": {"MANUAL": 4, "BUF": "near"},
    "by hand, lane at the end, no store": {"MANUAL": 5, "BUF": "near"},
    "timer reads only": {"TIMERS": True},
}


#: (programs, bf16 elements per program): a 4 KiB launch (the 4 KiB all-reduce's grid at one rank),
#: and one program per SM moving 1 MiB.
SMALL_SHAPES = [(4, 512), (0, 4096)]


def small_case(dist, H, programs: int, block: int, reps: int, warmup: int) -> list[dict]:
    """Fixed costs of a traced launch of a few microseconds (``handoff_kernels.burst``: each program
    copies one block, with or without one span): the kernel as ``@ktrace.trace`` prepares it and as
    written, the same record made by hand with its lane's address computed before or after the
    copy, each into a buffer next to the output or far from it, the span's timer reads alone.
    Every output is checked, every record decoded."""
    import torch

    import handoff_kernels as hk

    P = programs or torch.cuda.get_device_properties(dist.device).multi_processor_count
    n = P * block
    case = f"small: {P} programs x {block} bf16"
    x = torch.randn(n, device=dist.device).to(torch.bfloat16)
    scratch = torch.zeros(16, dtype=torch.int64, device=dist.device)
    nb = schema.buffer_bytes(P, 2)
    at = -(-n * 2 // 256) * 256
    whole = torch.zeros(at + nb, dtype=torch.uint8, device=dist.device)  # the output, then the near buffer
    y = whole[: n * 2].view(torch.bfloat16)
    far = torch.zeros(64 << 20, dtype=torch.uint8, device=dist.device)
    bufs = {"near": whole[at : at + nb].view(torch.int64), "far": far[32 << 20 : (32 << 20) + nb].view(torch.int64)}
    launchers, spans = {}, {}
    for name, sw in SMALL_VARIANTS.items():
        sw = dict(sw)
        slots, buf = sw.pop("KTRACE", 0), bufs.get(sw.pop("BUF", ""))
        k, sw = C.kernel_for(hk.burst, sw) if slots else (hk.burst, sw)
        kw = {} if buf is None else {"ktrace_buf": buf, **({"KTRACE": slots} if slots else {})}

        def fn(k=k, sw=sw, kw=kw):
            k[(P,)](x, y, n, scratch, BLOCK=block, **sw, **kw, num_warps=8)

        launchers[name] = (fn, buf, 2 if buf is not None else 0)
        spans[name] = bool(sw.get("SPANS")) or sw.get("MANUAL", 0) in (1, 2, 3, 4)
    rows = C.time_case(dist, H, case, launchers, reps, warmup, 20, 1)
    for name, (fn, buf, _) in launchers.items():
        C.launch_fresh(H, fn, buf, y)
        if not torch.equal(y, x):
            raise SystemExit(f"{case}/{name}: the copy differs from its source")
        if buf is not None:
            C.check_records(f"{case}/{name}", buf, P, 2, P if spans[name] else 0, 0)
    return rows  # (one "hand-off" per launch: the extra ns are per launch)


def rows(dist, H, reps: int, warmup: int) -> list[dict]:
    return [r for p, b in SMALL_SHAPES for r in small_case(dist, H, p, b, reps, warmup)]
