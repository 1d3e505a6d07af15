"""The torch-xla 1.13 report's repro, in Python: HuggingFace's AdamW update, written as
transformers 4.6 writes it, under each of lazytensor's scalar policies.

torch-xla 1.13 uploaded every non-trivial Python number of this update (``1 - beta1``,
``value=-step_size``, ...) to the device synchronously, every step. Under ``uncached`` lazytensor
does the same, to show the cost; under ``argument`` (the default) a number is a kernel argument:
no upload and no recompile, whatever its value.

    python examples/python/scalar_transfer_repro.py [--tensors 40] [--size 262144] [--steps 10]
"""
import argparse
import math
import time

import lazytensor as lt


def hf_adamw_step(p, grad, exp_avg, exp_avg_sq, step, lr, beta1=0.9, beta2=0.999, eps=1e-6,
                  weight_decay=0.01):
    """transformers.AdamW.step for one parameter (correct_bias=True)."""
    exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    denom = exp_avg_sq.sqrt().add_(eps)
    bias_correction1 = 1.0 - beta1 ** step
    bias_correction2 = 1.0 - beta2 ** step
    step_size = lr * math.sqrt(bias_correction2) / bias_correction1
    p.addcdiv_(exp_avg, denom, value=-step_size)
    p.add_(p, alpha=-lr * weight_decay)


def run(policy, params, grads, steps):
    lt.set_scalar_policy(policy)
    exp_avgs = [lt.zeros(*p.shape) for p in params]
    exp_avg_sqs = [lt.zeros(*p.shape) for p in params]
    lt.mark_step()
    lt.wait_device_ops()
    lt.metrics.reset()
    times = []
    for step in range(1, steps + 1):
        lr = 1e-3 * min(1.0, step / 4)  # a warm-up: a new learning rate every step
        start = time.perf_counter()
        for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
            hf_adamw_step(p, g, m, v, step, lr)
        lt.mark_step()
        lt.wait_device_ops()
        times.append(time.perf_counter() - start)
        if step == 1:
            lt.wait_kernel_compiles()  # later steps run native kernels, not the interpreter
    counter = lt.metrics.counter_value
    later = sorted(times[1:])
    return {
        "policy": policy,
        "median_ms": 1e3 * later[len(later) // 2],
        "sync_uploads_per_step": counter("TransferToDeviceSync") / steps,
        "compiles_after_step_1": counter("UncachedCompile") - (1 if counter("UncachedCompile") else 0),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=40)
    parser.add_argument("--size", type=int, default=1 << 18, help="elements per tensor")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    lt.manual_seed(0)
    params = [lt.randn(args.size) for _ in range(args.tensors)]
    grads = [lt.randn(args.size) * 1e-2 for _ in range(args.tensors)]
    lt.mark_step()
    rows = [run(policy, params, grads, args.steps)
            for policy in ("argument", "cached", "uncached", "constant")]
    lt.set_scalar_policy("argument")
    base = rows[0]["median_ms"]
    print(f"HF AdamW, {args.tensors} tensors x {args.size} floats, {args.steps} steps, lr warm-up")
    print(f"{'policy':<10} {'step (ms)':>10} {'vs argument':>12} {'sync uploads/step':>18} "
          f"{'compiles after step 1':>22}")
    for r in rows:
        print(f"{r['policy']:<10} {r['median_ms']:>10.2f} {r['median_ms'] / base - 1:>+11.1%} "
              f"{r['sync_uploads_per_step']:>18.1f} {r['compiles_after_step_1']:>22d}")


if __name__ == "__main__":
    main()
