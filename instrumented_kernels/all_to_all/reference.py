"""MoE all-to-all: inputs, float32 torch references of dispatch and combine, and the checks.

Inputs are generated on the GPU from ``(seed, rank)`` alone (Philox), so every rank can rebuild
every other rank's tokens and routing: the references need no communication.

Shape parameters (``shapes.json``): ``max_tokens`` (M), ``hidden`` (D), ``num_experts`` (E),
``topk`` (K), ``skew`` (0 = every rank has M tokens; s > 0: rank r has ``round(M (1-s)^r)``,
so low ranks send far more than high ones) and ``dtype``.
"""

from __future__ import annotations

from instrumented_kernels import harness as H


def _gen(seed: int, salt: int, device):
    import torch

    g = torch.Generator(device=device)
    g.manual_seed((seed * 1_000_003 + salt * 7919 + 101) & 0x7FFF_FFFF_FFFF)
    return g


def tokens_of(rank: int, world_size: int, max_tokens: int, skew: float = 0.0) -> int:
    """How many tokens rank ``rank`` holds (``max_tokens`` without skew)."""
    if not 0.0 <= skew < 1.0:
        raise ValueError(f"skew must be in [0, 1), got {skew}")
    return max(1, round(max_tokens * (1.0 - skew) ** rank))


def generate_input(rank: int, world_size: int, seed: int, max_tokens: int, hidden: int, num_experts: int, topk: int,
                   skew: float = 0.0, dtype: str = "bfloat16", device="cuda") -> dict:
    """Rank ``rank``'s tokens and routing.

    Returns:
        ``{"x": (M, D) dtype, "topk_idx": (M, K) int32 (distinct experts per token),
        "topk_w": (M, K) float32 (softmax of normals), "m": tokens in use}``.
    """
    import torch

    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world size {world_size}")
    if num_experts % world_size or topk > num_experts:
        raise ValueError(f"need num_experts % world_size == 0 and topk <= num_experts ({num_experts}, {world_size}, {topk})")
    g = _gen(seed, rank + 1, device)
    M = max_tokens
    x = torch.randn(M, hidden, generator=g, device=device).to(getattr(torch, dtype))
    idx = torch.rand(M, num_experts, generator=g, device=device).topk(topk, dim=1).indices.to(torch.int32).contiguous()
    w = torch.randn(M, topk, generator=g, device=device).softmax(dim=1).contiguous()
    return {"x": x, "topk_idx": idx, "topk_w": w, "m": tokens_of(rank, world_size, max_tokens, skew)}


def expert_scales(seed: int, num_experts: int, hidden: int, device="cuda"):
    """Every expert's stand-in weights: a per-channel scale, (E, D) float32 (the same on every rank)."""
    import torch

    return 1.0 + 0.5 * torch.randn(num_experts, hidden, generator=_gen(seed, 0, device), device=device)


def reference_combine(inp: dict, scales_all):
    """Rows ``t < m`` of the combine output in float32: ``x[t] * sum_k w[t,k] * scale[e[t,k]]``."""
    m = inp["m"]
    idx = inp["topk_idx"][:m].long()
    w = inp["topk_w"][:m]
    scale = (w[:, :, None] * scales_all[idx]).sum(dim=1)
    return inp["x"][:m].float() * scale


def reference_dispatch(rank: int, inputs: list[dict], experts_per_rank: int) -> list[dict]:
    """What ``rank`` receives from each source: tokens (in order), rows, local expert ids and weights."""
    import torch

    out = []
    for inp in inputs:
        m = inp["m"]
        idx = inp["topk_idx"][:m].long()
        here = (idx // experts_per_rank) == rank
        toks = here.any(dim=1).nonzero().flatten()
        eid = torch.where(here, idx - rank * experts_per_rank, -1)[toks].to(torch.int32)
        w = torch.where(here, inp["topk_w"][:m], 0.0)[toks]
        out.append({"tokens": toks.to(torch.int32), "x": inp["x"][toks], "eid": eid, "w": w})
    return out


def check_dispatch(received, expected, rank: int | None = None) -> None:
    """Raise ``harness.MismatchError`` unless the dispatch output equals the reference exactly."""
    import torch

    for src, ((tok, rows, eid, w), ref) in enumerate(zip(received, expected)):
        what = f"rank {rank}: " if rank is not None else ""
        if tok.numel() != ref["tokens"].numel() or not torch.equal(tok, ref["tokens"]):
            raise H.MismatchError(f"{what}dispatch from rank {src}: tokens {tok.tolist()[:16]}... != {ref['tokens'].tolist()[:16]}...")
        if not torch.equal(rows, ref["x"]):
            raise H.MismatchError(f"{what}dispatch from rank {src}: row data differs")
        if not torch.equal(eid, ref["eid"]) or not torch.equal(w, ref["w"]):
            raise H.MismatchError(f"{what}dispatch from rank {src}: expert ids or weights differ")


def check_combine(out, inp: dict, scales_all, tol: float = 1e-2, rank: int | None = None) -> float:
    """Raise ``harness.MismatchError`` unless ``out[:m]`` matches the float32 reference."""
    return H.check_close("moe combine", out[: inp["m"]], reference_combine(inp, scales_all), tol, rank)
