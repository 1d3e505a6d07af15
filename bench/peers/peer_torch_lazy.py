"""PyTorch's own Lazy Tensor Core (TorchScript backend, torch._lazy): the HF AdamW loop
on device "lazy", cut with mark_step() after each step. Needs a torch that ships
torch._lazy (Debian's 1.13 does)."""
from common import peer_main, time_steps


def run(variant, params, grads, hp, steps, fetch):
    import torch
    import torch._lazy
    import torch._lazy.metrics as metrics
    import torch._lazy.ts_backend
    from torch_hf import hf_adamw_step, use_all_cores

    threads = use_all_cores(torch)
    torch._lazy.ts_backend.init()
    dev = "lazy"
    ps = [torch.from_numpy(p).to(dev) for p in params]
    gs = [torch.from_numpy(g).to(dev) for g in grads]
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]
    # Materialize the uploads and zeros now, so step 1 traces only the optimizer.
    torch._lazy.mark_step()
    torch._lazy.wait_device_ops()

    def step(t):
        hf_adamw_step(ps, gs, ms, vs, t, hp)
        torch._lazy.mark_step()
        torch._lazy.wait_device_ops()

    def counters():
        return {n: metrics.counter_value(n) for n in metrics.counter_names()}

    with torch.no_grad():
        seconds, delta = time_steps(step, steps, counters)
    return {"step_seconds": seconds, "version": torch.__version__, "counters": delta,
            # A new scalar value misses LTC's device-data cache and is uploaded.
            "transfers": delta.get("DeviceDataCacheMiss", 0),
            "compiles": {"uncached": delta.get("UncachedCompile", 0),
                         "cached": delta.get("CachedCompile", 0)},
            "notes": f"{threads}; transfers = DeviceDataCacheMiss (scalar uploads)",
            "params": [p.cpu().numpy() for p in ps] if fetch else None}


if __name__ == "__main__":
    peer_main(run)
