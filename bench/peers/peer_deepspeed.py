"""DeepSpeed's CPU optimizer (deepspeed.ops.adam.DeepSpeedCPUAdam, the one ZeRO-Offload runs):
a C++ op, JIT-built with ninja on first use (bench/peers/setup.sh builds it beforehand), that
steps one tensor per call with AVX-512/AVX2 intrinsics and OpenMP.

Variants: fp32 (fp32 params, grads and moments); bf16 (bf16 params and grads, fp32 moments:
fp32_optimizer_states=True, the default); bf16-states (bf16 moments too:
fp32_optimizer_states=False). bf16 parameters are updated in fp32 registers and stored back
rounded to nearest: there is no fp32 master copy. adamw_mode=True is decoupled weight decay,
applied as torch.optim.AdamW does, a different update than HF's: timed only.
"""
import os
import sys

from common import peer_main, time_steps


def run(variant, params, grads, hp, steps, fetch):
    # ninja from PyPI lives beside this Python; the JIT build looks for it on PATH.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    import torch
    import deepspeed
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    from deepspeed.ops.op_builder import CPUAdamBuilder
    from torch_hf import use_all_cores

    threads = use_all_cores(torch)

    dtypes = {"fp32": (torch.float32, True), "bf16": (torch.bfloat16, True),
              "bf16-states": (torch.bfloat16, False)}
    if variant not in dtypes:
        raise ValueError(f"unknown variant {variant}")
    dtype, fp32_states = dtypes[variant]
    ps = [torch.from_numpy(p).to(dtype) for p in params]  # fp32: shares the arrays
    for p, g in zip(ps, grads):
        p.grad = torch.from_numpy(g).to(dtype)
    opt = DeepSpeedCPUAdam(ps, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                           weight_decay=hp["weight_decay"], bias_correction=True,
                           adamw_mode=True, fp32_optimizer_states=fp32_states)

    def step(t):
        opt.step()

    with torch.no_grad():
        seconds, _ = time_steps(step, steps)
    # What ran, read back rather than assumed: the op's SIMD flag and the state's dtype.
    simd = CPUAdamBuilder().simd_width().replace("-D__", "").replace("__", "") or "scalar"
    param_dtype, state_dtype = (str(d).replace("torch.", "")
                                for d in (ps[0].dtype, opt.state[ps[0]]["exp_avg"].dtype))
    notes = (f"{threads} (OpenMP); cpu_adam op built for {simd}; params and grads "
             f"{param_dtype}, moments {state_dtype}")
    return {"step_seconds": seconds,
            "version": f"{deepspeed.__version__} (torch {torch.__version__})",
            "notes": notes,
            "params": [p.float().numpy() for p in ps] if fetch else None}


if __name__ == "__main__":
    peer_main(run)
