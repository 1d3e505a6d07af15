"""PyTorch 2 torch.compile (Dynamo + Inductor's C++ CPU backend) of the whole HF AdamW
step over all tensors. The step number t stays a Python int, as in HF's code: when it first
changes, Dynamo recompiles once with t dynamic, so one compile shows in the timed steps."""
from common import peer_main, time_steps


def run(variant, params, grads, hp, steps, fetch):
    import torch
    import torch._dynamo.utils
    from torch_hf import hf_adamw_step, use_all_cores

    threads = use_all_cores(torch)
    ps = [torch.from_numpy(p) for p in params]
    gs = [torch.from_numpy(g) for g in grads]
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]
    compiled = torch.compile(hf_adamw_step)
    graphs = torch._dynamo.utils.counters["stats"]

    def step(t):
        compiled(ps, gs, ms, vs, t, hp)

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
