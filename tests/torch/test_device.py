"""The device as PyTorch code sees it: factories, `.to()`, printing, reading values, seeding,
the scalar rule (CPU numbers are kernel arguments), and the automatic cut after a step."""

import os
import subprocess
import sys

import pytest
import torch

import lazytensor_torch as ltt

from conftest import DEVICE, Counters


def test_factories_and_copies_round_trip_every_dtype():
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32,
                  torch.int64, torch.bool, torch.uint8):
        x = (torch.randn(3, 5) * 50).to(dtype)
        d = x.to(DEVICE)
        assert d.device == torch.device("lazytensor:0") and d.dtype == dtype
        assert torch.equal(d.cpu(), x)
    assert torch.equal(torch.ones(2, 3, device=DEVICE).cpu(), torch.ones(2, 3))
    assert torch.equal(torch.arange(7, device=DEVICE).cpu(), torch.arange(7))
    assert torch.equal(torch.full((2,), 3.5, device=DEVICE).cpu(), torch.full((2,), 3.5))
    assert torch.zeros(4, device="lazytensor").tolist() == [0.0] * 4


def test_arithmetic_matches_the_cpu_with_pytorchs_type_promotion():
    a, b = torch.randn(4, 3), torch.randn(3)
    ints = torch.randint(-5, 5, (4, 3))
    da, db, dints = a.to(DEVICE), b.to(DEVICE), ints.to(DEVICE)
    cases = [
        (lambda x, y, i: x + y * 2, "broadcast"),
        (lambda x, y, i: (x - 0.5) / (y.abs() + 1), "numbers"),
        (lambda x, y, i: 1 - x, "rsub"),
        (lambda x, y, i: i * 3 + 1, "integer"),
        (lambda x, y, i: i / 2, "true division of integers"),
        (lambda x, y, i: torch.where(x > 0, x, y), "where"),
        (lambda x, y, i: x.addcmul(x, x, value=0.3).addcdiv(x, y.abs() + 1, value=-2), "addc"),
        (lambda x, y, i: x.exp().log().clamp(-1, 1).tanh().sigmoid().rsqrt(), "unary"),
        (lambda x, y, i: torch.maximum(x, y) - torch.minimum(i, y), "maximum, minimum"),
        # A c10::Scalar ranks below a rank-0 tensor: f32 stays f32 (the autograd formulas and
        # the list ops call these overloads).
        (lambda x, y, i: torch.ops.aten.mul.Scalar(x.sum(), 0.5), "rank 0 times a Scalar"),
        (lambda x, y, i: torch.ops.aten.add.Scalar(i[0, 0], 2), "integer plus a Scalar"),
    ]
    for f, name in cases:
        want, got = f(a, b, ints), f(da, db, dints).cpu()
        assert got.dtype == want.dtype, name
        torch.testing.assert_close(got, want, msg=name)


def test_printing_shows_values_and_device():
    text = repr(torch.tensor([1.5, -2.0], device=DEVICE))
    assert "1.5000" in text and "device='lazytensor:0'" in text


def test_cpu_numbers_are_kernel_arguments():
    x = torch.randn(8, device=DEVICE)
    ltt.mark_step()
    for value in (0.25, 0.75):  # the first run may compile; later values must not
        with Counters() as c:
            y = x * torch.tensor(value) + value  # a CPU rank-0 tensor and a Python number
            y.mul_(value).sum().item()
        assert c["TransferToDeviceSync"] == 0 and c["TransferToDeviceAsync"] == 0
    assert c["UncachedCompile"] == 0


def test_manual_seed_makes_dropout_repeat():
    x = torch.ones(1000, device=DEVICE)
    torch.manual_seed(3)
    a = torch.nn.functional.dropout(x, 0.5).cpu()
    torch.manual_seed(3)
    b = torch.nn.functional.dropout(x, 0.5).cpu()
    c = torch.nn.functional.dropout(x, 0.5).cpu()
    assert torch.equal(a, b) and not torch.equal(b, c)
    assert 400 < int((a == 0).sum()) < 600 and set(a.unique().tolist()) == {0.0, 2.0}


def test_optimizer_step_cuts_the_graph():
    p = torch.nn.Parameter(torch.randn(4, device=DEVICE))
    opt = torch.optim.SGD([p], lr=0.1)
    before = ltt.metrics.counter_value("MarkStep")
    (p * p).sum().backward()
    opt.step()
    assert ltt.metrics.counter_value("MarkStep") == before + 1


@pytest.mark.parametrize("imports", [
    "import torch",
    # PyTorch calls the entry point while lazytensor_torch is still half imported.
    "import lazytensor_torch as ltt; import torch",
    "import torch; import lazytensor_torch as ltt",
])
def test_the_device_loads_whatever_is_imported_first(imports):
    # The torch.backends entry point (installed packages only: skipped for a build tree).
    from importlib.metadata import entry_points
    if not any(e.name == "lazytensor" for e in entry_points(group="torch.backends")):
        pytest.skip("lazytensor-torch is not installed (its entry point is not registered)")
    code = f"{imports}; print(torch.ones(2, device='lazytensor').sum().item())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2.0"


@pytest.mark.parametrize("case", [
    "cross_entropy_none", "cross_entropy_sum", "cross_entropy_1d", "gelu_tanh", "layer_norm_plain",
    "log_softmax", "nll_and_another_use", "logsumexp", "logsumexp_kept", "embedding_padding",
    "gather", "index_pair", "addmm_scaled", "norms"])
def test_nn_ops_and_their_gradients_match_the_cpu(case):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(torch.seed() % 2**31)
    x = torch.randn(6, 5, generator=g)
    ids = torch.randint(0, 5, (6,), generator=g)
    ids[2] = -100
    table = torch.randn(7, 4, generator=g)
    fns = {
        "cross_entropy_none": lambda x, t, i: F.cross_entropy(x, i.clamp(min=0), reduction="none"),
        "cross_entropy_sum": lambda x, t, i: F.cross_entropy(x, i, reduction="sum"),
        "cross_entropy_1d": lambda x, t, i: F.cross_entropy(x[0], i[0]),
        "gelu_tanh": lambda x, t, i: F.gelu(x, approximate="tanh"),
        "layer_norm_plain": lambda x, t, i: F.layer_norm(x, (5,)),
        "log_softmax": lambda x, t, i: F.log_softmax(x, 0) * F.softmax(x, 1),
        # The log-probabilities' gradient is the NLL's plus another: not the NLL's alone.
        "nll_and_another_use": lambda x, t, i: (lambda lp: F.nll_loss(lp, i) + lp * 0.5)(
            F.log_softmax(x, 1)),
        "logsumexp": lambda x, t, i: torch.logsumexp(x * 30, 1),
        "logsumexp_kept": lambda x, t, i: torch.logsumexp(x, (0, 1), keepdim=True),
        "embedding_padding": lambda x, t, i: F.embedding(i.clamp(min=0), t, padding_idx=3) * 2,
        "gather": lambda x, t, i: torch.gather(x, 1, i.clamp(min=0)[:, None].expand(6, 3)),
        "index_pair": lambda x, t, i: t[i.clamp(min=0), 1:][:, None] * x[i.clamp(min=0), :3],
        "addmm_scaled": lambda x, t, i: torch.addmm(x[:4, :4], t[:4], t[:4].t(), beta=0.5,
                                                     alpha=-2.0),
        "norms": lambda x, t, i: torch.stack([torch.linalg.vector_norm(x, ord) for ord in
                                              (2, 1, float("inf"), 3)]),
    }
    f = fns[case]
    results = []
    for device in ("cpu", DEVICE):
        xd = x.to(device).detach().requires_grad_()
        td = table.to(device).detach().requires_grad_()
        with Counters() as c:
            out = f(xd, td, ids.to(device))
            # A random upstream gradient, the same on both devices (with ones, some gradients,
            # such as layer norm's, are zero up to rounding).
            upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
            out.backward(upstream.to(device))
        grads = [t.grad.cpu() if t.grad is not None else None for t in (xd, td)]
        results.append((out.detach().cpu(), grads))
    assert c["Fallback"] == 0, ltt.metrics.fallback_counts()
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for gg, wg in zip(got_grads, want_grads):
        assert (gg is None) == (wg is None)
        if wg is not None:
            torch.testing.assert_close(gg, wg, rtol=1e-5, atol=1e-5)


def test_a_bad_index_is_an_error_naming_the_op_and_changes_nothing():
    weight = torch.randn(5, 3).to(DEVICE)
    before = weight.cpu()
    with pytest.raises(RuntimeError, match="embedding"):
        torch.nn.functional.embedding(torch.tensor([1, 7]).to(DEVICE), weight)
    torch.testing.assert_close(weight.cpu(), before, rtol=0, atol=0)
    out = torch.nn.functional.embedding(torch.tensor([1, 4]).to(DEVICE), weight)  # goes on
    torch.testing.assert_close(out.cpu(), before[[1, 4]], rtol=0, atol=0)


def test_attention_over_narrow_interleaved_heads_matches_the_cpu():
    # Heads of 6 elements interleaved in each row: a batched layout that oneDNN accepts and then
    # fails to run inside PyTorch's process; the engine computes such products another way.
    x = torch.randn(2, 8, 12)
    def attention(t):
        q = t.view(2, 8, 2, 6).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q) + q @ q.transpose(-1, -2)[..., :6]
    torch.testing.assert_close(attention(x.to(DEVICE)).cpu(), attention(x))
