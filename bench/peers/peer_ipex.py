"""Intel Extension for PyTorch: the optimizer as ipex.optimize(model, optimizer=...,
dtype=..., fuse_update_step=True, weights_prepack=False) returns it. Each tensor is the weight
of its own torch.nn.Embedding: IPEX converts a parameter for bf16 training only by the class
of the module that holds it (Linear, Embedding, convolutions, ...; a BERT's LayerNorm
parameters would stay fp32), and Embedding weights are not repacked, so every tensor is
converted, as in the other bf16 rows, and keeps its plain layout.

IPEX's fused CPU update steps cover SGD, Adagrad, Adam, Lamb and Lars, not AdamW (its fused
AdamW kernel is XPU only; optim/_optimizer_utils.py): asked to fuse torch.optim.AdamW on the
CPU it keeps torch's own AdamW step and, in bf16, wraps it in its non-fused master-weight
step (fp32 master copies, bf16 gradients cast to fp32, weights synced back to bf16). So the
variants are:
  adamw-fp32, adamw-bf16: torch.optim.AdamW through ipex.optimize (what IPEX does for AdamW);
  adam-fp32, adam-bf16: torch.optim.Adam, IPEX's fused step (torch_ipex.adam_fused_step), in
    bf16 with the split master weight: the fp32 master kept as the bf16 weight (top half)
    and a bf16 trail (bottom half), moments fp32. Adam's weight decay is L2 (added to the
    gradient), not decoupled: a third algorithm, timed with the same hyperparameters.
None is HF's update: timed only. The notes say which step ran, read back from the optimizer.
"""
from common import peer_main, time_steps


def run(variant, params, grads, hp, steps, fetch):
    import torch
    import intel_extension_for_pytorch as ipex
    from torch_hf import use_all_cores

    threads = use_all_cores(torch)

    algorithms = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    algorithm, _, precision = variant.partition("-")
    if algorithm not in algorithms or precision not in dtypes:
        raise ValueError(f"unknown variant {variant}")
    dtype = dtypes[precision]

    model = torch.nn.ModuleList()
    for p in params:
        holder = torch.nn.Embedding(1, 1)
        holder.weight = torch.nn.Parameter(torch.from_numpy(p))  # shares the array
        model.append(holder)
    model.train()
    opt = algorithms[algorithm](model.parameters(), lr=hp["lr"],
                                betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                                weight_decay=hp["weight_decay"])
    model, opt = ipex.optimize(model, optimizer=opt, dtype=dtype, inplace=True,
                               weights_prepack=False, fuse_update_step=True,
                               split_master_weight_for_bf16=dtype is torch.bfloat16)
    ps = list(model.parameters())  # bf16: the model's bf16 weights, which take the gradients
    for p, g in zip(ps, grads):
        p.grad = torch.from_numpy(g).to(p.dtype)

    def step(t):
        opt.step()

    with torch.no_grad():
        seconds, _ = time_steps(step, steps)

    # What ran, read back: the step function IPEX installed, the weights' and moments' dtypes
    # and how the fp32 master is kept.
    fn = getattr(opt.step, "__func__", opt.step)
    attrs = list(getattr(opt, "params_attr", {}).values())
    if any(getattr(a, "parameter_trail", None) is not None for a in attrs):
        master = "fp32 master split as bf16 weight + bf16 trail"
    elif any(getattr(a, "master_parameter", None) is not None for a in attrs):
        master = "fp32 master copies"
    else:
        master = "no master copy"
    moments = next(iter(opt.state.values()))["exp_avg"].dtype

    def name(d):
        return str(d).replace("torch.", "")

    notes = (f"{threads}; step {fn.__module__}.{fn.__qualname__} of {type(opt).__name__}; "
             f"IPEX fused step: {'yes' if getattr(opt, 'fused', False) is True else 'no'}; "
             f"weights and grads {name(ps[0].dtype)}, moments {name(moments)}, {master}")
    return {"step_seconds": seconds,
            "version": f"{ipex.__version__} (torch {torch.__version__})",
            "notes": notes,
            "params": [p.float().numpy() for p in ps] if fetch else None}


if __name__ == "__main__":
    peer_main(run)
