"""The _foreach_* family on the device: the same values as on the CPU, no CPU fallback, no
upload for the numbers, and an in-place list op that fails changes no tensor of the list."""

import pytest
import torch

import lazytensor_torch as ltt
from conftest import DEVICE, Counters

SHAPES = [(3, 5), (7,), (2, 3, 4), ()]


def lists(count, seed, positive=False):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        ts = [torch.randn(s, generator=g, dtype=torch.float32) for s in SHAPES]
        out.append([t.abs() + 0.5 for t in ts] if positive else ts)
    return out


def on_device(ts):
    return [t.to(DEVICE) for t in ts]


# name -> (call on lists, how many input lists, inputs positive)
CASES = {
    "add.Scalar": (lambda a: torch._foreach_add(a, 0.25), 1, False),
    "add.List alpha": (lambda a, b: torch._foreach_add(a, b, alpha=-0.5), 2, False),
    "add.ScalarList": (lambda a: torch._foreach_add(a, [1.0, 2.0, -3.0, 0.5]), 1, False),
    "add.Tensor": (lambda a: torch._foreach_add(a, torch.tensor(1.5), alpha=2), 1, False),
    "sub.List": (lambda a, b: torch._foreach_sub(a, b, alpha=3), 2, False),
    "sub.Scalar": (lambda a: torch._foreach_sub(a, 0.125), 1, False),
    "mul.Scalar": (lambda a: torch._foreach_mul(a, 0.9), 1, False),
    "mul.List": (lambda a, b: torch._foreach_mul(a, b), 2, False),
    "mul.ScalarList": (lambda a: torch._foreach_mul(a, [0.5, 2.0, 3.0, -1.0]), 1, False),
    "mul.Tensor": (lambda a: torch._foreach_mul(a, torch.tensor(0.3)), 1, False),
    "div.List": (lambda a, b: torch._foreach_div(a, b), 2, True),
    "div.Scalar": (lambda a: torch._foreach_div(a, 7.0), 1, False),
    "maximum.List": (lambda a, b: torch._foreach_maximum(a, b), 2, False),
    "minimum.Scalar": (lambda a: torch._foreach_minimum(a, 0.1), 1, False),
    "clamp_min.Scalar": (lambda a: torch._foreach_clamp_min(a, -0.2), 1, False),
    "clamp_max.ScalarList": (lambda a: torch._foreach_clamp_max(a, [0.0, 0.1, 0.2, 0.3]), 1, False),
    "addcmul.Scalar": (lambda a, b, c: torch._foreach_addcmul(a, b, c, value=0.001), 3, False),
    "addcdiv.ScalarList": (
        lambda a, b, c: torch._foreach_addcdiv(a, b, c, [-0.1, 0.2, 0.3, 0.4]), 3, True),
    "addcdiv.Tensor": (lambda a, b, c: torch._foreach_addcdiv(
        a, b, c, torch.tensor([-0.1, 0.2, 0.3, 0.4])), 3, True),
    "lerp.Scalar": (lambda a, b: torch._foreach_lerp(a, b, 0.1), 2, False),
    "pow.Scalar": (lambda a: torch._foreach_pow(a, 2.0), 1, True),
    "sqrt": (lambda a: torch._foreach_sqrt(a), 1, True),
    "neg": (lambda a: torch._foreach_neg(a), 1, False),
    "reciprocal": (lambda a: torch._foreach_reciprocal(a), 1, True),
    "exp": (lambda a: torch._foreach_exp(a), 1, False),
    "sign": (lambda a: torch._foreach_sign(a), 1, False),
    "norm": (lambda a: torch._foreach_norm(a), 1, False),
    "norm inf": (lambda a: torch._foreach_norm(a, float("inf")), 1, False),
    "max": (lambda a: torch._foreach_max(a[:3]), 1, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_list_ops_match_the_cpu_without_fallback(case):
    op, arity, positive = CASES[case]
    cpu = lists(arity, seed=hash(case) % 1000, positive=positive)
    expected = op(*cpu)
    with Counters() as c:
        got = op(*[on_device(ts) for ts in cpu])
        got = [t.cpu() for t in got]
    assert c["Fallback"] == 0
    for e, g in zip(expected, got, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", ["add_.List", "mul_.Scalar", "addcmul_.Scalar", "lerp_.Scalar",
                                  "sqrt_", "zero_", "copy_", "div_.ScalarList", "maximum_.List"])
def test_in_place_list_ops_write_every_tensor_and_their_views(case):
    ops = {
        "add_.List": lambda a, b: torch._foreach_add_(a, b, alpha=0.5),
        "mul_.Scalar": lambda a, b: torch._foreach_mul_(a, 0.9),
        "addcmul_.Scalar": lambda a, b: torch._foreach_addcmul_(a, b, b, value=1e-3),
        "lerp_.Scalar": lambda a, b: torch._foreach_lerp_(a, b, 0.1),
        "sqrt_": lambda a, b: torch._foreach_sqrt_(a),
        "zero_": lambda a, b: torch._foreach_zero_(a),
        "copy_": lambda a, b: torch._foreach_copy_(a, b),
        "div_.ScalarList": lambda a, b: torch._foreach_div_(a, [2.0, 3.0, 4.0, 5.0]),
        "maximum_.List": lambda a, b: torch._foreach_maximum_(a, b),
    }
    a, b = lists(2, seed=7, positive=True)
    bases = [torch.rand(2, *s) + 0.5 for s in SHAPES]
    expected_bases = [t.clone() for t in bases]
    ops[case]([t[1] for t in expected_bases], [t.clone() for t in b])
    device_bases = on_device(bases)
    with Counters() as c:
        # The list holds views (row 1 of each base): the writes must reach the bases.
        ops[case]([t[1] for t in device_bases], on_device(b))
        got = [t.cpu() for t in device_bases]
    assert c["Fallback"] == 0
    for e, g in zip(expected_bases, got, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6)


def test_a_failing_in_place_list_op_changes_no_tensor():
    floats = torch.arange(4.0).to(DEVICE)
    ints = torch.arange(3).to(DEVICE)
    with pytest.raises(RuntimeError, match="_foreach_add_.*can't be cast"):
        torch._foreach_add_([floats, ints], 0.5)  # 0.5 cannot be added into integers in place
    assert floats.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert ints.cpu().tolist() == [0, 1, 2]
    with pytest.raises(RuntimeError, match="one length"):
        torch._foreach_mul_([floats, floats], [1.0, 2.0, 3.0])
    assert floats.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_list_with_a_cpu_tensor_is_an_error_that_changes_nothing():
    on_device_ = torch.ones(3).to(DEVICE)
    on_cpu = torch.ones(3)
    with pytest.raises(RuntimeError, match="expected a tensor on the lazytensor device"):
        torch._foreach_mul_([on_device_, on_cpu], 2.0)
    assert on_device_.cpu().tolist() == [1.0, 1.0, 1.0]
    assert on_cpu.tolist() == [1.0, 1.0, 1.0]


def test_adamw_foreach_and_clip_grad_norm_match_the_cpu_with_nothing_uploaded():
    torch.manual_seed(3)
    cpu_params = [torch.nn.Parameter(torch.randn(s)) for s in [(16, 8), (8,), (4, 4, 2)]]
    dev_params = [torch.nn.Parameter(p.detach().to(DEVICE)) for p in cpu_params]
    opts = [torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=True, amsgrad=True)
            for ps in (cpu_params, dev_params)]
    for step in range(4):
        grads = [torch.randn_like(p) for p in cpu_params]
        for params, opt in zip((cpu_params, dev_params), opts):
            for p, g in zip(params, grads):
                p.grad = g.to(p.device)
            with Counters() as c:
                torch.nn.utils.clip_grad_norm_(params, max_norm=0.5, foreach=True)
                opt.param_groups[0]["lr"] = 1e-2 / (step + 1)  # a new number every step
                opt.step()
            if params is dev_params:
                ltt.wait_device_ops()
                assert c["Fallback"] == 0
                assert c["TransferToDeviceSync"] == 0
                if step >= 2:
                    assert c["UncachedCompile"] == 0
    for p, q in zip(cpu_params, dev_params):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
