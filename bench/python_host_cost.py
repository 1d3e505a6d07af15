"""Host cost of tracing from Python: the HuggingFace AdamW loop (transformers 4.6's
AdamW.step, 8 tensor ops per parameter) over BERT's parameters, written once and run by
lazytensor, the lazytensor PyTorch device (torch-lt: lazytensor_torch), PyTorch eager and
torch-xla, each in the Python that has it.

    python bench/python_host_cost.py --framework lazytensor|torch-lt|torch|xla [--model bert-base]

Prints one JSON line: the median time per step spent in the Python loop (tracing for
lazytensor and torch-xla; dispatch *and* computation for eager PyTorch, which runs each op as
it is called), per op, the whole step's time with its execution (mark_step and a wait at the
end of each step for the lazy frameworks), and the time per step of a loop that does not wait
between steps (tracing overlaps execution). With --one-element every tensor has one element,
so that eager PyTorch's loop time is its dispatch alone. bench/peers/python_host_cost.sh runs
all of them.
"""
import argparse
import json
import math
import statistics
import time

OPS_PER_PARAM = 8


def bert_shapes(hidden, intermediate, layers, vocab=30522, positions=512):
    shapes = [(vocab, hidden), (positions, hidden), (2, hidden), (hidden,), (hidden,)]
    for _ in range(layers):
        for _ in range(4):  # query, key, value, attention output
            shapes += [(hidden, hidden), (hidden,)]
        shapes += [(hidden,), (hidden,), (intermediate, hidden), (intermediate,),
                   (hidden, intermediate), (hidden,), (hidden,), (hidden,)]
    shapes += [(hidden, hidden), (hidden,)]  # pooler
    return shapes


MODELS = {"bert-base": (768, 3072, 12), "bert-large": (1024, 4096, 24), "tiny": (64, 256, 2)}


def hf_adamw_step(p, grad, exp_avg, exp_avg_sq, step, lr, beta1=0.9, beta2=0.999, eps=1e-6,
                  weight_decay=0.01):
    exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    denom = exp_avg_sq.sqrt().add_(eps)
    step_size = lr * math.sqrt(1.0 - beta2 ** step) / (1.0 - beta1 ** step)
    p.addcdiv_(exp_avg, denom, value=-step_size)
    p.add_(p, alpha=-lr * weight_decay)


def compare_with_cpp(params, grads, exp_avgs, exp_avg_sqs, steps, rounds):
    """Per-step times of the Python-written update and of the C++ optimizer's (the same graph:
    one launch), each run `steps` steps without waits, in alternating rounds."""
    import lazytensor as lt
    for p, g in zip(params, grads):
        p.requires_grad_()
        p.grad = g
    optimizer = lt.optim.AdamW(params, lr=1e-4, weight_decay=0.01, flavor="huggingface")
    for _ in range(2):  # compile the C++ optimizer's graph
        optimizer.step()
        lt.mark_step()
    lt.wait_device_ops()
    python_ms, cpp_ms = [], []
    step = 10_000
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            step += 1
            with lt.no_grad():  # as transformers' AdamW.step
                for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
                    hf_adamw_step(p, g, m, v, step, 1e-4)
            lt.mark_step()
        lt.wait_device_ops()
        python_ms.append(1e3 * (time.perf_counter() - start) / steps)
        python_launches = lt.last_step_stats()["launches"]
        start = time.perf_counter()
        for _ in range(steps):
            optimizer.step()
            lt.mark_step()
        lt.wait_device_ops()
        cpp_ms.append(1e3 * (time.perf_counter() - start) / steps)
        cpp_launches = lt.last_step_stats()["launches"]
    return {"python_step_ms": python_ms, "cpp_step_ms": cpp_ms,
            "median_ratio": statistics.median(p / c for p, c in zip(python_ms, cpp_ms)),
            "launches": [python_launches, cpp_launches]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", required=True, choices=["lazytensor", "torch-lt", "torch", "xla"])
    ap.add_argument("--model", default="bert-base", choices=sorted(MODELS))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--against-cpp", type=int, default=0, metavar="ROUNDS",
                    help="lazytensor: also time the same update traced by the C++ optimizer "
                         "(lt.optim.AdamW, HuggingFace flavour), in alternating rounds")
    ap.add_argument("--one-element", action="store_true",
                    help="every tensor of one element: eager PyTorch's time is then its dispatch")
    args = ap.parse_args()
    shapes = bert_shapes(*MODELS[args.model])
    if args.one_element:
        shapes = [(1,)] * len(shapes)

    if args.framework == "lazytensor":
        import lazytensor as lt
        version = "lazytensor"
        zeros = lambda s: lt.zeros(*s)  # noqa: E731
        randn = lambda s: lt.randn(*s)  # noqa: E731
        cut, wait = lt.mark_step, lt.wait_device_ops
    else:
        import torch
        version = f"torch {torch.__version__}"
        device = "cpu"
        if args.framework == "xla":
            import torch_xla
            import torch_xla.core.xla_model as xm
            version = f"torch_xla {torch_xla.__version__}"
            device = xm.xla_device()
            cut, wait = xm.mark_step, lambda: xm.wait_device_ops()
        elif args.framework == "torch-lt":
            import lazytensor_torch as ltt
            version = f"lazytensor_torch (torch {torch.__version__})"
            device = "lazytensor"
            cut, wait = ltt.mark_step, ltt.wait_device_ops
        else:
            cut, wait = (lambda: None), (lambda: None)
        zeros = lambda s: torch.zeros(s, device=device)  # noqa: E731
        randn = lambda s: torch.randn(s, device=device)  # noqa: E731

    params = [randn(s) for s in shapes]
    grads = [randn(s) * 1e-2 for s in shapes]
    exp_avgs = [zeros(s) for s in shapes]
    exp_avg_sqs = [zeros(s) for s in shapes]
    cut()
    wait()
    loop_seconds, step_seconds = [], []
    for step in range(1, args.steps + 1):
        lr = 1e-4 * min(1.0, step / 4)
        start = time.perf_counter()
        for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
            hf_adamw_step(p, g, m, v, step, lr)
        traced = time.perf_counter()
        cut()
        wait()
        loop_seconds.append(traced - start)
        step_seconds.append(time.perf_counter() - start)
    # Steady state as a training loop runs it: no wait between steps, so tracing a step overlaps
    # the execution of the one before.
    start = time.perf_counter()
    for step in range(args.steps + 1, 2 * args.steps + 1):
        for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
            hf_adamw_step(p, g, m, v, step, 1e-4)
        cut()
    wait()
    pipelined = (time.perf_counter() - start) / args.steps
    against_cpp = None
    if args.against_cpp and args.framework == "lazytensor":
        against_cpp = compare_with_cpp(params, grads, exp_avgs, exp_avg_sqs, args.steps,
                                       args.against_cpp)
    ops = OPS_PER_PARAM * len(shapes)
    later = loop_seconds[2:]  # the first steps compile
    print(json.dumps({
        "framework": args.framework, "version": version, "model": args.model,
        "one_element": args.one_element,
        "tensors": len(shapes), "ops_per_step": ops,
        "loop_ms": 1e3 * statistics.median(later),
        "us_per_op": 1e6 * statistics.median(later) / ops,
        "step_ms": 1e3 * statistics.median(step_seconds[2:]),
        "pipelined_step_ms": 1e3 * pipelined,
        **({"against_cpp": against_cpp} if against_cpp else {}),
    }))


if __name__ == "__main__":
    main()
