"""PyTorch 2 torch.compile (Dynamo + Inductor's C++ CPU backend) of the whole AdamW step
over all tensors, two ways of passing the step's scalars:

  hf:          HF's code as written; the step number t is a Python int. When t first
               changes Dynamo recompiles once with t symbolic (one compile in the timed
               steps), and Inductor then evaluates the bias-corrected step size inside the
               kernels.
  size-tensor: the step size is computed on the host (as HF does) and passed as a 0-d
               tensor, so the graph never changes; p -= size * m / denom replaces
               addcdiv_ because addcdiv_'s value must be a Python number.
"""
from common import peer_main, step_size, time_steps


def run(variant, params, grads, hp, steps, fetch):
    import torch
    import torch._dynamo.utils
    from torch_hf import hf_adamw_step, use_all_cores

    def size_tensor_step(ps, gs, ms, vs, size, hp):
        beta1, beta2 = hp["beta1"], hp["beta2"]
        for p, g, m, v in zip(ps, gs, ms, vs):
            m.mul_(beta1).add_(g, alpha=1.0 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
            denom = v.sqrt().add_(hp["eps"])
            p.sub_(size * m / denom)
            p.add_(p, alpha=-hp["lr"] * hp["weight_decay"])

    threads = use_all_cores(torch)
    ps = [torch.from_numpy(p) for p in params]
    gs = [torch.from_numpy(g) for g in grads]
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]
    if variant == "hf":
        compiled = torch.compile(hf_adamw_step)

        def step(t):
            compiled(ps, gs, ms, vs, t, hp)
    elif variant == "size-tensor":
        compiled = torch.compile(size_tensor_step)
        size = torch.zeros((), dtype=torch.float32)

        def step(t):
            size.fill_(step_size(hp, t))
            compiled(ps, gs, ms, vs, size, hp)
    else:
        raise ValueError(f"unknown variant {variant}")
    graphs = torch._dynamo.utils.counters["stats"]

    def counters():
        return {"unique_graphs": graphs["unique_graphs"]}

    with torch.no_grad():
        seconds, delta = time_steps(step, steps, counters)
    return {"step_seconds": seconds, "version": torch.__version__, "counters": delta,
            # Dynamo counts graphs it compiled, not cache hits.
            "compiles": {"uncached": delta.get("unique_graphs", 0), "cached": None},
            "notes": f"{threads}; compiles = new Dynamo graphs",
            "params": [p.numpy() for p in ps] if fetch else None}


if __name__ == "__main__":
    peer_main(run)
