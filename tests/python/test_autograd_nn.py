"""Autograd, modules and optimizers from Python: gradients against finite differences (and
PyTorch where it is installed), training steps without recompiles."""
import numpy as np
import pytest

import lazytensor as lt


def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_gradients_match_finite_differences(rng):
    x0 = rng.standard_normal((3, 4))
    w0 = rng.standard_normal((5, 4))
    targets = rng.integers(0, 5, 3)

    def loss_of(x, w):
        logits = lt.tensor(x, dtype=lt.float64) @ lt.tensor(w, dtype=lt.float64).t()
        h = lt.nn.functional.gelu(logits).tanh()
        return lt.nn.functional.cross_entropy(h, lt.tensor(targets))

    x = lt.tensor(x0, dtype=lt.float64, requires_grad=True)
    w = lt.tensor(w0, dtype=lt.float64, requires_grad=True)
    h = lt.nn.functional.gelu(x @ w.t()).tanh()
    loss = lt.nn.functional.cross_entropy(h, lt.tensor(targets))
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), numeric_grad(lambda v: loss_of(v, w0).item(), x0),
                               rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(w.grad.numpy(), numeric_grad(lambda v: loss_of(x0, v).item(), w0),
                               rtol=1e-5, atol=1e-8)


def test_grad_accumulates_clears_and_no_grad(rng):
    x = lt.tensor(rng.standard_normal(4), requires_grad=True)
    assert x.is_leaf and x.requires_grad and x.grad is None
    (x * 2.0).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(4, 5.0))
    x.grad = None
    assert x.grad is None
    with lt.no_grad():
        y = x * 2.0
    assert not y.requires_grad
    assert lt.is_grad_enabled()

    @lt.no_grad()
    def f(v):
        return v * 2.0

    assert not f(x).requires_grad
    (g,) = lt.grad((x * x).sum(), [x])
    np.testing.assert_allclose(g.numpy(), 2 * x.detach().numpy())


def test_backward_is_traced_not_run(rng):
    x = lt.tensor(rng.standard_normal((8, 8)), requires_grad=True)
    lt.mark_step()
    before = lt.metrics.counter_value("ExecuteComputation")
    (x @ x).sum().backward()
    assert x.grad.is_pending
    assert lt.metrics.counter_value("ExecuteComputation") == before


def test_modules_register_parameters_and_switch_modes():
    class Net(lt.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = lt.nn.Embedding(10, 8, padding_idx=0)
            self.layers = lt.nn.ModuleList([lt.nn.Linear(8, 8), lt.nn.Linear(8, 8, bias=False)])
            self.norm = lt.nn.LayerNorm(8)
            self.drop = lt.nn.Dropout(0.1)

        def forward(self, ids):
            h = self.embed(ids)
            for layer in self.layers:
                h = lt.nn.functional.gelu(layer(h))
            return self.drop(self.norm(h))

    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["embed.weight", "layers.0.weight", "layers.0.bias", "layers.1.weight",
                     "norm.weight", "norm.bias"]
    assert all(p.requires_grad and p.is_leaf for p in net.parameters())
    assert isinstance(net.embed.weight, lt.nn.Parameter)
    np.testing.assert_array_equal(net.embed.weight[0].numpy(), np.zeros(8))
    net.eval()
    assert not net.drop.training
    ids = lt.tensor([[1, 2, 0]])
    np.testing.assert_array_equal(net(ids).numpy(), net(ids).numpy())  # no dropout in eval
    state = net.state_dict()
    other = Net()
    other.load_state_dict(state)
    np.testing.assert_array_equal(other.layers[0].weight.numpy(), net.layers[0].weight.numpy())
    with pytest.raises(lt.Error, match="shape"):
        other.load_state_dict({**state, "norm.bias": lt.zeros(9)})


def test_training_a_small_model_converges_without_recompiles(rng):
    x = rng.standard_normal((64, 6)).astype(np.float32)
    labels = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    model = lt.nn.Sequential(lt.nn.Linear(6, 16), lt.nn.GELU(), lt.nn.Linear(16, 2))
    opt = lt.optim.AdamW(model.parameters(), lr=3e-2)
    schedule = lt.optim.get_linear_schedule_with_warmup(opt, 5, 80)
    xs, ys = lt.tensor(x), lt.tensor(labels)
    lt.mark_step()
    losses = []
    for step in range(80):
        loss = lt.nn.functional.cross_entropy(model(xs), ys)
        opt.zero_grad()
        loss.backward()
        lt.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        lt.mark_step()
        if step == 1:
            compiles = lt.metrics.counter_value("UncachedCompile")
        losses.append(loss)
    assert lt.metrics.counter_value("UncachedCompile") == compiles
    first, last = losses[0].item(), losses[-1].item()
    assert last < 0.5 * first


def test_adamw_flavours_match_their_formulas(rng):
    p0 = rng.standard_normal(5)
    g0 = rng.standard_normal(5)
    for flavor, eps, wd in [("torch", 1e-8, 1e-2), ("huggingface", 1e-6, 0.1)]:
        p = lt.tensor(p0, dtype=lt.float64, requires_grad=True)
        opt = lt.optim.AdamW([p], lr=0.1, flavor=flavor, weight_decay=wd)
        p.grad = lt.tensor(g0, dtype=lt.float64)
        opt.step()
        lt.mark_step()
        m, v = 0.1 * g0, 0.001 * g0 * g0
        step_size = 0.1 * np.sqrt(1 - 0.999) / (1 - 0.9)
        if flavor == "torch":
            want = p0 * (1 - 0.1 * wd) - step_size * m / (np.sqrt(v) + eps * np.sqrt(1 - 0.999))
        else:
            want = p0 - step_size * m / (np.sqrt(v) + eps)
            want = want - 0.1 * wd * want
        np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-9, atol=1e-12,
                                   err_msg=flavor)


def fit_with_adamw(start, target, precision, dtype, lr, steps):
    """Fits w (from `start`, in `dtype`) to `target` by mean squared error under AdamW with the
    given state precision; returns the last loss, the optimizer's state and w."""
    w = lt.tensor(start).to(dtype).requires_grad_()
    t = lt.tensor(target).to(dtype)
    opt = lt.optim.AdamW([w], lr=lr, weight_decay=0.0, precision=precision)
    for _ in range(steps):
        loss = ((w - t) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        lt.mark_step()
    return float(loss), opt.state_of(0, 0), w


def test_adamw_precisions_keep_their_state_and_track_fp32(rng):
    start = rng.uniform(0.5, 1.0, 2048).astype(np.float32)
    target = rng.uniform(0.5, 1.0, 2048).astype(np.float32)

    def fit(precision, dtype):
        return fit_with_adamw(start, target, precision, dtype, lr=1e-3, steps=200)

    initial = float(np.mean((start - target) ** 2))
    fp32, _, _ = fit("fp32", lt.float32)
    mixed, mixed_state, w = fit("mixed", lt.bfloat16)
    assert mixed_state["master"].dtype == lt.float32 and mixed_state["exp_avg"].dtype == lt.float32
    np.testing.assert_array_equal(w.detach().float().numpy(),
                                  mixed_state["master"].to(lt.bfloat16).float().numpy())
    bf16, bf16_state, _ = fit("bf16", lt.bfloat16)
    assert bf16_state["exp_avg_sq"].dtype == lt.bfloat16 and "master" not in bf16_state
    # 200 steps of about lr each close most of the gaps, not those over 0.2: the loss ends near
    # 0.19 of where it began (0.186-0.2 over a dozen seeds), so the bar sits well above that.
    assert fp32 < 0.3 * initial
    assert abs(mixed - fp32) < 0.1 * fp32 + 1e-5
    assert abs(bf16 - fp32) < 0.1 * fp32 + 1e-5
    with pytest.raises(lt.Error, match="mixed"):
        lt.optim.AdamW([lt.zeros(3, requires_grad=True)], precision="mixed")
    with pytest.raises(lt.Error, match="precision"):
        lt.optim.AdamW([lt.zeros(3, requires_grad=True)], precision="fp8")


def test_adamw_8bit_keeps_codes_per_row_and_tracks_fp32(rng):
    start = rng.standard_normal((16, 512)).astype(np.float32)
    target = rng.standard_normal((16, 512)).astype(np.float32)

    def fit(precision, dtype):
        return fit_with_adamw(start, target, precision, dtype, lr=3e-2, steps=60)[:2]

    initial = float(np.mean((start - target) ** 2))
    fp32, _ = fit("fp32", lt.float32)
    eight, state = fit("8bit", lt.bfloat16)
    assert state["exp_avg"].dtype == lt.uint8 and state["exp_avg_sq"].dtype == lt.uint8
    assert state["exp_avg_absmax"].shape == (16, 1)
    assert fp32 < 0.5 * initial
    assert abs(eight - fp32) < 0.1 * fp32


def test_stochastic_round_is_unbiased():
    x = lt.full((20000,), 1.0 + 3 * 2.0 ** -10)
    r = lt.stochastic_round(x).float().numpy()
    assert r.dtype == np.float32 and set(np.unique(r)) <= {1.0, 1.0 + 2.0 ** -7}
    assert abs(np.mean(r == 1.0 + 2.0 ** -7) - 0.375) < 0.02


def test_gradients_match_pytorch_on_a_small_model(rng):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed in this environment")
    x = rng.standard_normal((4, 6))
    w1, b1 = rng.standard_normal((8, 6)), rng.standard_normal(8)
    w2 = rng.standard_normal((3, 8))
    t = rng.integers(0, 3, 4)
    ours = [lt.tensor(a, dtype=lt.float64, requires_grad=True) for a in (w1, b1, w2)]
    loss = lt.nn.functional.cross_entropy(
        lt.nn.functional.linear(lt.nn.functional.gelu(
            lt.nn.functional.linear(lt.tensor(x, dtype=lt.float64), ours[0], ours[1])), ours[2]),
        lt.tensor(t))
    loss.backward()
    theirs = [torch.tensor(a, requires_grad=True) for a in (w1, b1, w2)]
    ref = torch.nn.functional.cross_entropy(
        torch.nn.functional.linear(torch.nn.functional.gelu(
            torch.nn.functional.linear(torch.tensor(x), theirs[0], theirs[1])), theirs[2]),
        torch.tensor(t))
    ref.backward()
    assert abs(loss.item() - ref.item()) < 1e-12
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)
