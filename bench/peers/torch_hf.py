"""The HF AdamW step as transformers 4.6.0 writes it, shared by the torch-based peers."""
import os

from common import step_size


def hf_adamw_step(params, grads, exp_avgs, exp_avg_sqs, t, hp):
    """One step (t from 1) over all tensors, in place, op for op as AdamW.step()."""
    beta1, beta2 = hp["beta1"], hp["beta2"]
    size = step_size(hp, t)
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        m.mul_(beta1).add_(g, alpha=1.0 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        denom = v.sqrt().add_(hp["eps"])
        p.addcdiv_(m, denom, value=-size)
        p.add_(p, alpha=-hp["lr"] * hp["weight_decay"])


def use_all_cores(torch):
    """Some torch builds default to fewer threads than the cores we may use; the peers all
    get the same cores lazytensor uses."""
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    return f"{torch.get_num_threads()} threads"
