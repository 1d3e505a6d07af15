"""PyTorch eager: the HF AdamW loop, or torch.optim.AdamW with foreach/fused kernels.

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
    return {"step_seconds": seconds, "version": torch.__version__,
            "notes": threads,
            "params": [p.numpy() for p in ps] if fetch else None}


if __name__ == "__main__":
    peer_main(run)
