"""Run the overflowing kernel (and a traced copy) so compute-sanitizer can check every access.

    compute-sanitizer --tool memcheck --error-exitcode 1 python -m tests.gpu.overflow_memcheck
"""

import torch

import ktrace
from ktrace import schema
from tests import probe_kernels as pk


def main():
    P, cap = 64, 4
    buf = torch.zeros((schema.buffer_bytes(P, cap) + 7) // 8, dtype=torch.int64, device="cuda")
    out = torch.empty(P, dtype=torch.int32, device="cuda")
    pk.overflow_kernel[(P,)](out, 25, ktrace_buf=buf, KTRACE=cap)  # 25 marks + a wait into 4 slots
    buf.zero_()
    deferred = ktrace.trace(pk.overflow_kernel).jit_fn  # records kept in registers, flushed at the end
    deferred[(P,)](out, 25, ktrace_buf=buf, KTRACE=cap)
    x = torch.randn(50_000, device="cuda")
    y = torch.empty_like(x)
    with ktrace.capture(events_per_program=1) as c:
        pk.shape_kernel[(9,)](torch.empty(9, device="cuda"))  # 4..10 events into 1 slot each
        pk.copy_kernel[(49,)](x, y, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.equal(x, y)
    print("dropped:", sum(ln.decode(0).dropped for ln in c.to_capture().ranks[0].launches))


if __name__ == "__main__":
    main()
