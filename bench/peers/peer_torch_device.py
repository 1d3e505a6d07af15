"""The lazytensor engine as a PyTorch device (lazytensor_torch): the HF AdamW loop, unchanged,
on tensors on device "lazytensor", cut with lazytensor_torch.mark_step() after each step (as
torch-xla's loop is cut with torch_xla.sync()); transfers and compiles from its counters.
Variant: the scalar policy (argument, cached, uncached, constant)."""
from common import peer_main, time_steps


def run(variant, params, grads, hp, steps, fetch):
    import torch

    import lazytensor_torch as ltt
    from torch_hf import hf_adamw_step

    ltt.set_scalar_policy(variant)
    dev = "lazytensor"
    ps = [torch.from_numpy(p).to(dev) for p in params]
    gs = [torch.from_numpy(g).to(dev) for g in grads]
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]
    ltt.mark_step()
    ltt.wait_device_ops()

    def step(t):
        hf_adamw_step(ps, gs, ms, vs, t, hp)
        ltt.mark_step()
        ltt.wait_device_ops()

    names = ("TransferToDeviceSync", "TransferToDeviceAsync", "UncachedCompile",
             "CachedCompile", "Fallback", "ExecuteComputation")

    def counters():
        return {n: ltt.metrics.counter_value(n) for n in names}

    with torch.no_grad():
        seconds, delta = time_steps(step, steps, counters)
    return {"step_seconds": seconds, "counters": delta,
            "version": f"lazytensor-torch (torch {torch.__version__})",
            "transfers": delta.get("TransferToDeviceSync", 0),
            "compiles": {"uncached": delta.get("UncachedCompile", 0),
                         "cached": delta.get("CachedCompile", 0)},
            "notes": "transfers = TransferToDeviceSync",
            "params": [p.cpu().numpy() for p in ps] if fetch else None}


if __name__ == "__main__":
    peer_main(run)
