"""The torch + NCCL baseline: dispatch and combine with ``torch.distributed.all_to_all_single``.

The usual PyTorch formulation: one row per (token, expert) pair, sorted by destination rank;
the split sizes are exchanged first (an all-to-all of counts, read on the host), then rows and
their metadata go out, the experts' stand-in runs on the received rows, the results come back
with the reversed splits, and ``index_add_`` sums them into their tokens.
"""

from __future__ import annotations


def dispatch_combine(inp: dict, scales_local, rank: int, world_size: int, experts_per_rank: int, group=None):
    """One MoE step with the baseline; returns the (M, D) output (rows ``t < m`` are valid)."""
    import torch
    import torch.distributed as dist

    x, idx, w, m = inp["x"], inp["topk_idx"], inp["topk_w"], inp["m"]
    M, D = x.shape
    K = idx.shape[1]
    flat = idx[:m].reshape(-1).long()
    dst = flat // experts_per_rank
    order = torch.argsort(dst, stable=True)
    send_counts = torch.bincount(dst, minlength=world_size)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    counts = torch.stack([send_counts, recv_counts]).cpu()
    send_split, recv_split = counts[0].tolist(), counts[1].tolist()
    tok = order // K
    send_x = x[tok]
    meta = torch.stack([(flat[order] % experts_per_rank).float(), w[:m].reshape(-1)[order], tok.float()], dim=1)
    n_recv = sum(recv_split)
    recv_x = torch.empty(n_recv, D, dtype=x.dtype, device=x.device)
    recv_meta = torch.empty(n_recv, 3, dtype=torch.float32, device=x.device)
    dist.all_to_all_single(recv_x, send_x, recv_split, send_split, group=group)
    dist.all_to_all_single(recv_meta, meta, recv_split, send_split, group=group)
    y = (recv_x.float() * scales_local[recv_meta[:, 0].long()] * recv_meta[:, 1:2]).to(x.dtype)
    back = torch.empty_like(send_x)
    dist.all_to_all_single(back, y, send_split, recv_split, group=group)
    out = torch.zeros(M, D, dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, back.float())
    return out.to(x.dtype)
