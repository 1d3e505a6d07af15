"""The seed's workload through PyTorch itself: HuggingFace's AdamW step exactly as transformers
4.x wrote it (Python numbers through mul_, add_(alpha=), addcmul_(value=), addcdiv_(value=)),
a new learning rate every step. On the lazytensor device the numbers are kernel arguments: no
upload and no compile after the first steps. Under the `uncached` policy every number is
uploaded synchronously, torch-xla 1.13's regression."""

import math

import pytest
import torch

import lazytensor_torch as ltt

from conftest import DEVICE, Counters

# A BERT's parameter shapes, two layers of a narrow model (all shapes a BERT step has).
HIDDEN, FFN, VOCAB, POSITIONS = 64, 256, 500, 128


def bert_shapes(layers=2):
    shapes = [(VOCAB, HIDDEN), (POSITIONS, HIDDEN), (2, HIDDEN), (HIDDEN,), (HIDDEN,)]
    for _ in range(layers):
        for _ in range(4):
            shapes += [(HIDDEN, HIDDEN), (HIDDEN,)]
        shapes += [(HIDDEN,), (HIDDEN,), (FFN, HIDDEN), (FFN,), (HIDDEN, FFN), (HIDDEN,),
                   (HIDDEN,), (HIDDEN,)]
    return shapes


def hf_adamw_step(params, state, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01):
    """transformers 4.x `AdamW.step` (correct_bias=True), per parameter, as it was written."""
    for p in params:
        grad = p.grad.data
        st = state.setdefault(id(p), {})
        if len(st) == 0:
            st["step"] = 0
            st["exp_avg"] = torch.zeros_like(p.data)
            st["exp_avg_sq"] = torch.zeros_like(p.data)
        exp_avg, exp_avg_sq = st["exp_avg"], st["exp_avg_sq"]
        beta1, beta2 = betas
        st["step"] += 1
        exp_avg.mul_(beta1).add_(grad, alpha=(1.0 - beta1))
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denom = exp_avg_sq.sqrt().add_(eps)
        bias_correction1 = 1.0 - beta1 ** st["step"]
        bias_correction2 = 1.0 - beta2 ** st["step"]
        step_size = lr * math.sqrt(bias_correction2) / bias_correction1
        p.data.addcdiv_(exp_avg, denom, value=-step_size)
        if weight_decay > 0.0:
            p.data.add_(p.data, alpha=(-lr * weight_decay))


def make_params(device, seed):
    g = torch.Generator().manual_seed(seed)
    params = []
    for shape in bert_shapes():
        p = torch.randn(shape, generator=g).to(device).requires_grad_()
        p.grad = (torch.randn(shape, generator=g) * 0.01).to(device)
        params.append(p)
    return params


def lr_at(step):
    return 1e-3 * (0.9 + 0.37 * math.sin(step))  # a new value every step


def run(device, steps, seed, per_step=None):
    params = make_params(device, seed)
    state = {}
    for step in range(1, steps + 1):
        with Counters() as c:
            hf_adamw_step(params, state, lr_at(step))
            for p in params:
                p.grad.mul_(0.97)  # the next step's gradient, made on the device
            if device == DEVICE:
                ltt.mark_step()
                ltt.wait_device_ops()
        if per_step is not None:
            per_step.append(c)
    return [p.detach().cpu() for p in params]


def test_matches_eager_cpu_and_uploads_and_compiles_nothing_after_the_first_steps():
    seed = torch.seed() % 2**31
    per_step = []
    got = run(DEVICE, 20, seed, per_step)
    want = run("cpu", 20, seed)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-7)
    for step, c in enumerate(per_step, start=1):
        if step >= 2:
            assert c["TransferToDeviceSync"] == 0, f"step {step} uploaded a number"
            assert c["Fallback"] == 0, f"step {step}: {ltt.metrics.fallback_counts()}"
        if step >= 3:
            assert c["UncachedCompile"] == 0, f"step {step} compiled"
            assert c["CachedCompile"] == 1 and c["ExecuteComputation"] >= 1


def test_uncached_policy_reproduces_the_seed_regression():
    ltt.set_scalar_policy("uncached")
    per_step = []
    run(DEVICE, 4, 1, per_step)
    for step, c in enumerate(per_step, start=1):
        assert c["TransferToDeviceSync"] >= 1, f"step {step} uploaded no number"
