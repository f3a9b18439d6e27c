"""All-reduce (sum): inputs, the float32 torch reference, and the check.

``generate_input(rank, world_size, seed, n, dtype)`` is deterministic in its arguments and is
generated on the GPU (Philox), so every rank can rebuild every other rank's input: the reference
needs no communication.
"""

from __future__ import annotations

from instrumented_kernels import harness as H


def _gen(seed: int, rank: int, device):
    import torch

    g = torch.Generator(device=device)
    g.manual_seed((seed * 1_000_003 + rank * 7919 + 17) & 0x7FFF_FFFF_FFFF)
    return g


def generate_input(rank: int, world_size: int, seed: int, n: int, dtype: str = "bfloat16", device="cuda"):
    """Rank ``rank``'s input: ``n`` standard normal values rounded to ``dtype``."""
    import torch

    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world size {world_size}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return torch.randn(n, generator=_gen(seed, rank, device), device=device, dtype=torch.float32).to(getattr(torch, dtype))


def reference(world_size: int, seed: int, n: int, dtype: str = "bfloat16", device="cuda"):
    """The sum over ranks of every rank's input, in float32."""
    import torch

    acc = torch.zeros(n, dtype=torch.float32, device=device)
    for r in range(world_size):
        acc += generate_input(r, world_size, seed, n, dtype, device).float()
    return acc


def check(out, world_size: int, seed: int, n: int, dtype: str = "bfloat16", tol: float = 1e-2, rank: int | None = None) -> float:
    """Raise ``harness.MismatchError`` unless ``out`` matches the reference; returns the error."""
    return H.check_close("all_reduce", out, reference(world_size, seed, n, dtype, out.device), tol, rank)
