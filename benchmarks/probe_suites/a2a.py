"""``--suite a2a``: the MoE all-to-all (GPU MODE shape) with controls, split into dispatch and combine."""

from __future__ import annotations

from . import common as C

def rows(dist, H, reps: int, warmup: int, baseline: bool) -> list[dict]:
    """The all-to-all (gpumode shape) with controls: an untraced twin (A/A), traced at its default
    density, traced into one slot per program (every probe runs, every record is counted
    dropped), only the dispatch or only the combine traced, each call split into dispatch and
    combine by CUDA events; a fresh random order each repetition. Runs at one rank too (under
    ``ktrace.testing.launch -n 1``: the all-to-all sends to itself)."""
    import torch
    import torch.distributed as tdist

    from instrumented_kernels.all_to_all import baseline as a2a_base
    from instrumented_kernels.all_to_all.kernel import MoEAllToAll, MoEConfig
    from instrumented_kernels.all_to_all.reference import check_combine, expert_scales, generate_input

    W, r = dist.world_size, dist.rank
    sh = {"max_tokens": 256, "hidden": 7168, "num_experts": 256, "topk": 8}
    cfg = MoEConfig(**sh)
    plan = MoEAllToAll(H.heap(MoEAllToAll.heap_bytes(cfg, W)), cfg)
    seed = H.fresh_seed(dist)
    inp = generate_input(r, W, seed, device=dist.device, **sh)
    scales_all = expert_scales(seed, cfg.num_experts, cfg.hidden, dist.device)
    scales = scales_all[r * plan.EL : (r + 1) * plan.EL].contiguous()
    sd, sc = plan.slots("dispatch"), plan.slots("combine")
    bufs = {k: (H.trace_buffer(plan.nprog, n_d, dist.device), H.trace_buffer(plan.nprog, n_c, dist.device), n_d, n_c)
            for k, n_d, n_c in (("traced", sd, sc), ("traced, 1 slot", 1, 1), ("traced dispatch only", sd, sc), ("traced combine only", sd, sc))}
    outs = {}

    def variant(name):
        out = outs.setdefault(name, H.poison(torch.empty_like(inp["x"])))
        kw_d, kw_c = {}, {}
        if name in bufs:
            bd, bc, n_d, n_c = bufs[name]
            kw_d, kw_c = {"ktrace_buf": bd, "ktrace_slots": n_d}, {"ktrace_buf": bc, "ktrace_slots": n_c}
            if name == "traced dispatch only":
                kw_c = {}
            if name == "traced combine only":
                kw_d = {}
        return (lambda: plan.dispatch(inp["x"], inp["topk_idx"], inp["topk_w"], inp["m"], **kw_d)), (lambda: plan.combine(scales, out, **kw_c))

    names = ["untraced", "untraced (twin)", "traced", "traced, 1 slot", "traced dispatch only", "traced combine only"]
    fns = {n: variant(n) for n in names}
    if baseline:
        fns["baseline"] = (lambda: a2a_base.dispatch_combine(inp, scales, r, W, plan.EL), lambda: None)
        names.append("baseline")
    for d, c in fns.values():
        d()
        c()
    torch.cuda.synchronize()
    plan.heap.check()
    for n in outs:
        check_combine(outs[n], inp, scales_all, rank=r)
    batch = 10
    token = torch.zeros(1, device=dist.device)
    samples = {n: ([], []) for n in names}

    def one(n, ev=None):
        torch.cuda._sleep(C.HOLD_CYCLES)
        tdist.all_reduce(token)
        d, c = fns[n]
        for _ in range(batch):
            if ev is not None:
                ev.append(torch.cuda.Event(enable_timing=True))
                ev[-1].record()
            d()
            if ev is not None:
                ev.append(torch.cuda.Event(enable_timing=True))
                ev[-1].record()
            c()
        if ev is not None:
            ev.append(torch.cuda.Event(enable_timing=True))
            ev[-1].record()

    for w in range(warmup):
        for i in range(len(names)):
            one(names[(w + i) % len(names)])
    torch.cuda.synchronize()
    tdist.barrier()
    recs = {n: [] for n in names}
    for order in H.run_orders(names, reps):  # a fresh random order each repetition
        for n in order:
            ev = []
            one(n, ev)
            recs[n].append(ev)
    torch.cuda.synchronize()
    for n in names:
        for ev in recs[n]:
            disp = sum(ev[2 * k].elapsed_time(ev[2 * k + 1]) for k in range(batch)) * 1000 / batch
            tot = ev[0].elapsed_time(ev[-1]) * 1000 / batch
            samples[n][0].append(disp)
            samples[n][1].append(tot)
    t = torch.tensor([samples[n][0] for n in names] + [samples[n][1] for n in names], dtype=torch.float64, device=dist.device)
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    t = t.tolist()
    k = len(names)
    rows = []
    tot_u, disp_u = t[k], t[0]
    for i, n in enumerate(names):
        tot, disp = t[k + i], t[i]
        comb = [a - b for a, b in zip(tot, disp)]
        comb_u = [a - b for a, b in zip(tot_u, disp_u)]
        q = lambda xs: H._quantiles(xs)  # noqa: E731
        row = {"case": "all-to-all gpumode", "variant": n, "median_us": q(tot)[0], "p10_us": q(tot)[1], "p90_us": q(tot)[2],
               "dispatch_us": q(disp)[0], "combine_us": q(comb)[0]}
        if i:
            row["ratio"], row["ratio_p10"], row["ratio_p90"] = q([a / b for a, b in zip(tot, tot_u)])
            row["dispatch_ratio"] = q([a / b for a, b in zip(disp, disp_u)])[0]
            row["combine_ratio"] = q([a / b for a, b in zip(comb, comb_u)])[0]
        rows.append(row)
    return rows
