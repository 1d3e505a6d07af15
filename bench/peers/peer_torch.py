"""PyTorch eager: the HF AdamW loop, or torch.optim.AdamW with foreach/fused kernels, the
fused one also on bf16 parameters, gradients and moments (variant fused-bf16).

torch.optim.AdamW is decoupled weight decay (Loshchilov & Hutter), a different update than
HF's, so its variants are timed only.
"""
from common import peer_main, time_steps


def run(variant, params, grads, hp, steps, fetch):
    import torch
    from torch_hf import hf_adamw_step, use_all_cores

    threads = use_all_cores(torch)

    ps = [torch.from_numpy(p) for p in params]  # shares the arrays: no extra copy
    gs = [torch.from_numpy(g) for g in grads]
    bf16 = variant.endswith("-bf16")
    if bf16:
        # Parameters and gradients rounded to bf16 once, here; there is no fp32 master copy.
        ps = [p.to(torch.bfloat16) for p in ps]
        gs = [g.to(torch.bfloat16) for g in gs]
        variant = variant[:-len("-bf16")]
    if variant == "hf":
        ms = [torch.zeros_like(p) for p in ps]
        vs = [torch.zeros_like(p) for p in ps]

        def step(t):
            hf_adamw_step(ps, gs, ms, vs, t, hp)
    elif variant in ("foreach", "fused"):
        for p, g in zip(ps, gs):
            p.grad = g
        opt = torch.optim.AdamW(ps, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]),
                                eps=hp["eps"], weight_decay=hp["weight_decay"],
                                **{variant: True})

        def step(t):
            opt.step()
    else:
        raise ValueError(f"unknown variant {variant}")

    with torch.no_grad():
        seconds, _ = time_steps(step, steps)
    notes = threads
    if bf16:
        # torch keeps the moments in the parameter's dtype: read back, not assumed.
        moments = ms[0].dtype if variant == "hf" else opt.state[ps[0]]["exp_avg"].dtype
        notes += f"; bf16 params and grads, moments {str(moments).replace('torch.', '')}"
    return {"step_seconds": seconds, "version": torch.__version__,
            "notes": notes,
            "params": [p.float().numpy() for p in ps] if fetch else None}


if __name__ == "__main__":
    peer_main(run)
