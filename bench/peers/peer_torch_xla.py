"""torch-xla on its PJRT CPU device: the HF AdamW loop cut with torch_xla.sync() (the new
name of torch_xla.sync()) after each step; transfers and compiles come from
torch_xla.debug.metrics."""
import os

from common import peer_main, time_steps


def run(variant, params, grads, hp, steps, fetch):
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    from torch_hf import hf_adamw_step

    dev = torch_xla.device()
    ps = [torch.from_numpy(p).to(dev) for p in params]
    gs = [torch.from_numpy(g).to(dev) for g in grads]
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]
    torch_xla.sync()
    xm.wait_device_ops()

    def step(t):
        hf_adamw_step(ps, gs, ms, vs, t, hp)
        torch_xla.sync()
        xm.wait_device_ops()

    def counters():
        out = {n: met.counter_value(n) for n in met.counter_names()}
        # Timers are metrics; their sample counts say how often each happened.
        for name in ("TransferToDeviceTime", "CompileTime", "ExecuteTime"):
            data = met.metric_data(name)
            out[name + ".samples"] = data[0] if data else 0
        return out

    with torch.no_grad():
        seconds, delta = time_steps(step, steps, counters)
    return {"step_seconds": seconds, "counters": delta,
            "version": f"{torch_xla.__version__} (torch {torch.__version__})",
            "transfers": delta.get("TransferToDeviceTime.samples", 0),
            "compiles": {"uncached": delta.get("UncachedCompile", 0),
                         "cached": delta.get("CachedCompile", 0)},
            "notes": "transfers = TransferToDeviceTime samples",
            "params": [p.cpu().numpy() for p in ps] if fetch else None}


if __name__ == "__main__":
    peer_main(run)
