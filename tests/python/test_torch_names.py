"""PyTorch's names that GPT scripts use, against NumPy: devices and factories' keywords, torch.cuda
and torch.backends, inference_mode, split/chunk/unbind/tril/triu, buffers, Module.apply/to,
ModuleDict, nn.init, and the functional ops made of the engine's (silu, one_hot, pad, rms_norm,
nll_loss, scaled_dot_product_attention)."""
import math

import numpy as np
import pytest

import lazytensor as lt
import lazytensor.nn as nn
import lazytensor.nn.functional as F


@pytest.fixture
def rng():
    seed = np.random.SeedSequence().entropy % 2**32
    print(f"numpy seed {seed}")
    return np.random.default_rng(seed)


def test_factories_take_device_and_refuse_a_device_that_is_not_here():
    for make in (lambda d: lt.zeros(2, 3, device=d), lambda d: lt.ones(2, device=d),
                 lambda d: lt.empty(4, device=d), lambda d: lt.full((2,), 7.0, device=d),
                 lambda d: lt.arange(3, device=d), lambda d: lt.tensor([1, 2], device=d),
                 lambda d: lt.rand(2, device=d), lambda d: lt.randn(2, device=d),
                 lambda d: lt.zeros_like(lt.ones(2), device=d),
                 lambda d: lt.randn_like(lt.ones(2), device=d)):
        for device in ("cpu", "cpu:0", lt.device("cpu"), None):
            make(device)
        with pytest.raises(lt.Error, match="'cuda' is not available"):
            make("cuda")
    assert lt.empty(2, 2).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert lt.full_like(lt.ones(2), 3.0, dtype=lt.float64).dtype == lt.float64
    assert lt.arange(3, dtype=lt.float32, requires_grad=True).requires_grad
    assert lt.ones(2).to(lt.device("cpu")).tolist() == [1.0, 1.0]
    with pytest.raises(lt.Error, match="to: 'cuda:0' is not available"):
        lt.ones(2).to("cuda:0")


def test_device_names_the_default_device_and_no_other():
    # Tensors are made on the thread's default device: device= names it, or is refused.
    with pytest.raises(lt.Error, match="zeros: device 'cpu:1' is not the default device, cpu:0"):
        lt.zeros(2, device="cpu:1")
    with pytest.raises(lt.Error, match="to: the tensor is on cpu:0, not 'cpu:1'"):
        lt.ones(2).to("cpu:1")
    try:
        lt.set_default_device("cpu:1")
        assert lt.zeros(2, device="cpu:1").device == "cpu:1"
        assert lt.arange(3, device=lt.device("cpu", 1)).to("cpu:1").tolist() == [0, 1, 2]
        with pytest.raises(lt.Error, match="randn: device 'cpu' is not the default device, cpu:1"):
            lt.randn(2, device="cpu")
    finally:
        lt.set_default_device("cpu")


def test_device_objects_compare_and_print_as_torch_devices():
    assert str(lt.device("cpu")) == "cpu" and str(lt.device("cpu", 1)) == "cpu:1"
    assert lt.device("cpu:1") == lt.device("cpu", 1) == "cpu:1"
    assert lt.device("cpu").type == "cpu" and lt.device("cpu").index is None
    assert repr(lt.device("cpu:2")) == "device(type='cpu', index=2)"
    with pytest.raises(lt.Error, match="'mps' is not available"):
        lt.device("mps")


def test_cuda_is_not_available_and_backends_flags_are_accepted():
    assert lt.cuda.is_available() is False and lt.cuda.device_count() == 0
    assert lt.mps.is_available() is False
    device = "cuda" if lt.cuda.is_available() else "cpu"  # what GPT scripts write
    assert lt.zeros(1, device=device).tolist() == [0.0]
    lt.backends.cuda.matmul.allow_tf32 = True
    lt.backends.cudnn.allow_tf32 = True
    lt.backends.cudnn.benchmark = True
    assert lt.backends.cuda.matmul.allow_tf32 is True


def test_inference_mode_is_no_grad_and_decorates():
    w = lt.ones(2, requires_grad=True)
    with lt.inference_mode():
        assert not lt.is_grad_enabled()
        assert not (w * 2).requires_grad
    assert lt.is_grad_enabled()
    with lt.inference_mode(False):
        assert lt.is_grad_enabled()

    @lt.inference_mode()
    def f():
        return lt.is_grad_enabled()

    @lt.inference_mode
    def g():
        return lt.is_grad_enabled()

    assert f() is False and g() is False and lt.is_grad_enabled()


@pytest.mark.parametrize("size,dim", [(7, 0), (3, 1), (10, 1)])
def test_split_chunk_and_unbind_match_numpy(rng, size, dim):
    a = rng.standard_normal((5, 10)).astype(np.float32)
    x = lt.tensor(a)
    want = [a.take(range(s, min(s + size, a.shape[dim])), axis=dim)
            for s in range(0, a.shape[dim], size)]
    got = lt.split(x, size, dim)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)
    sections = x.split([2, 3, 5], dim=1)
    np.testing.assert_array_equal(sections[1].numpy(), a[:, 2:5])
    with pytest.raises(lt.Error, match="do not add up"):
        x.split([2, 3], dim=1)
    chunks = x.chunk(3, dim=1)  # 10 in chunks of 4: 4, 4, 2 (as torch.chunk)
    assert [c.shape[1] for c in chunks] == [4, 4, 2]
    rows = x.unbind(0)
    assert len(rows) == 5
    np.testing.assert_array_equal(rows[3].numpy(), a[3])


def test_split_pieces_carry_gradients(rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    x = lt.tensor(a, requires_grad=True)
    q, k, v = x.split(2, dim=1)
    (q * 1.0 + k * 2.0 + v * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.repeat([[1.0, 1, 2, 2, 3, 3]], 4, axis=0))


@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_tril_and_triu_match_numpy(rng, diagonal):
    a = rng.standard_normal((2, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(lt.tril(lt.tensor(a), diagonal).numpy(), np.tril(a, diagonal))
    np.testing.assert_array_equal(lt.tensor(a).triu(diagonal).numpy(), np.triu(a, diagonal))
    with pytest.raises(lt.Error, match="at least 2 dims"):
        lt.tril(lt.ones(3))


class WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.register_buffer("mask", lt.tril(lt.ones(4, 4)))
        self.register_buffer("scratch", lt.zeros(2), persistent=False)


def test_buffers_are_in_the_state_dict_unless_not_persistent():
    m = WithBuffers()
    assert [n for n, _ in m.named_buffers()] == ["mask", "scratch"]
    assert list(m.state_dict()) == ["proj.weight", "proj.bias", "mask"]
    other = WithBuffers()
    other.mask = lt.zeros(4, 4)
    other.load_state_dict(m.state_dict())
    np.testing.assert_array_equal(other.mask.numpy(), np.tril(np.ones((4, 4))))
    with pytest.raises(TypeError):
        m.mask = 3
    with pytest.raises(KeyError):
        m.register_buffer("proj", lt.ones(1))


def test_apply_visits_children_first_and_to_casts_floating_state():
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "ReLU", "Linear", "Sequential"]
    m.apply(lambda mod: nn.init.ones_(mod.weight) if isinstance(mod, nn.Linear) else None)
    assert m[2].weight.tolist() == [[1.0, 1.0, 1.0]]
    assert m.to("cpu") is m
    m.to(lt.float64)
    assert {p.dtype for p in m.parameters()} == {lt.float64}
    assert all(p.requires_grad for p in m.parameters())
    with pytest.raises(lt.Error, match="Module.to: 'cuda' is not available"):
        m.to("cuda")


def test_module_dict_identity_softmax_silu():
    d = nn.ModuleDict({"a": nn.Identity(54, unused=1), "b": nn.Softmax(dim=-1)})
    d["c"] = nn.SiLU()
    assert list(d) == ["a", "b", "c"] and "b" in d and len(d) == 3
    x = lt.tensor([[1.0, 2.0], [0.0, -1.0]])
    assert d["a"](x) is x
    np.testing.assert_allclose(d["b"](x).numpy().sum(-1), [1, 1], rtol=1e-6)
    a = x.numpy()
    np.testing.assert_allclose(d["c"](x).numpy(), a / (1 + np.exp(-a)), rtol=1e-6)
    assert len(list(d.parameters())) == 0


def test_init_functions_fill_in_place_with_their_distributions():
    w = lt.zeros(256, 512)
    assert nn.init.uniform_(w, -0.5, 0.25) is w
    a = w.numpy()
    assert a.min() >= -0.5 and a.max() < 0.25 and abs(a.mean() + 0.125) < 0.01
    nn.init.normal_(w, 1.0, 0.02)
    assert abs(w.numpy().mean() - 1.0) < 1e-3 and abs(w.numpy().std() - 0.02) < 1e-3
    nn.init.trunc_normal_(w, 0.0, 1.0, -0.5, 0.5)
    assert abs(w.numpy()).max() <= 0.5 and w.numpy().std() > 0.25
    bound = math.sqrt(6 / (256 + 512))
    nn.init.xavier_uniform_(w)
    assert abs(w.numpy()).max() <= bound and abs(w.numpy()).max() > 0.95 * bound
    nn.init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(w.numpy().std() - math.sqrt(2 / 512)) < 0.01 * math.sqrt(2 / 512) * 10
    nn.init.zeros_(w)
    assert not w.numpy().any()
    nn.init.constant_(w, 3.0)
    assert (w.numpy() == 3.0).all()


def test_one_hot_and_pad_match_numpy(rng):
    ids = rng.integers(0, 6, size=(3, 4))
    np.testing.assert_array_equal(F.one_hot(lt.tensor(ids), 6).numpy(), np.eye(6, dtype=np.int64)[ids])
    assert F.one_hot(lt.tensor([0, 3])).shape == (2, 4)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(F.pad(lt.tensor(a), (1, 2)).numpy(),
                                  np.pad(a, ((0, 0), (0, 0), (1, 2))))
    np.testing.assert_array_equal(F.pad(lt.tensor(a), (0, 1, 2, 0), value=5.0).numpy(),
                                  np.pad(a, ((0, 0), (2, 0), (0, 1)), constant_values=5.0))
    np.testing.assert_array_equal(F.pad(lt.tensor(a), (-1, 0)).numpy(), a[:, :, 1:])


def test_rms_norm_matches_numpy(rng):
    a = rng.standard_normal((3, 8)).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    want = a / np.sqrt((a.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w
    got = F.rms_norm(lt.tensor(a), (8,), lt.tensor(w), 1e-6)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    norm = nn.RMSNorm(8)
    np.testing.assert_allclose(norm(lt.tensor(a)).numpy(),
                               a / np.sqrt((a.astype(np.float64) ** 2).mean(-1, keepdims=True)
                                           + 2.0 ** -23), rtol=1e-5, atol=1e-6)


def test_nll_loss_matches_numpy(rng):
    logits = rng.standard_normal((6, 5))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    target = np.array([1, -100, 4, 0, 2, -100])
    kept = target != -100
    picked = -logp[np.arange(6)[kept], target[kept]]
    x = lt.tensor(logp, dtype=lt.float64)
    np.testing.assert_allclose(F.nll_loss(x, lt.tensor(target)).item(), picked.mean(), rtol=1e-12)
    np.testing.assert_allclose(F.nll_loss(x, lt.tensor(target), reduction="sum").item(),
                               picked.sum(), rtol=1e-12)


def reference_attention(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


def test_scaled_dot_product_attention_matches_numpy(rng):
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    t = [lt.tensor(a, dtype=lt.float64) for a in (q, k, v)]
    np.testing.assert_allclose(F.scaled_dot_product_attention(*t).numpy(),
                               reference_attention(q, k, v), rtol=1e-10)
    np.testing.assert_allclose(F.scaled_dot_product_attention(*t, is_causal=True).numpy(),
                               reference_attention(q, k, v, causal=True), rtol=1e-10)
    mask = rng.random((5, 5)) < 0.7
    mask[:, 0] = True
    np.testing.assert_allclose(
        F.scaled_dot_product_attention(*t, attn_mask=lt.tensor(mask)).numpy(),
        reference_attention(q, k, v, mask=mask), rtol=1e-10)


def test_item_slice_and_masked_assignment_match_numpy(rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x, want = lt.tensor(a), a.copy()
    for index, value in [((0, slice(1, 3)), 5.0), ((slice(None), slice(None), slice(None, None, 2)),
                                                  np.float32([7.0, 8.0])),
                         ((Ellipsis, -1), np.zeros((2, 3), np.float32)), ((1, 2, 3), 9.0),
                         ((None, 0), np.float32(rng.standard_normal(4)))]:
        x[index] = lt.tensor(value) if isinstance(value, np.ndarray) else value
        want[index] = value
        np.testing.assert_array_equal(x.numpy(), want)
    mask = want > 0.5
    x[lt.tensor(mask)] = -1.0
    want[mask] = -1.0
    np.testing.assert_array_equal(x.numpy(), want)
    with pytest.raises(IndexError, match="out of range"):
        x[2] = 0.0
    with pytest.raises(IndexError, match="boolean mask"):
        x[lt.tensor([True, False])] = 0.0


def test_assignment_is_an_in_place_op_and_refused_where_those_are():
    w = lt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(lt.Error, match="leaf tensor that requires grad"):
        w[0] = 1.0
    with pytest.raises(lt.Error, match="in-place ops do not record gradients"):
        (w * 2.0)[1:] = 0.0
    with lt.no_grad():
        w[0] = 5.0
    assert w.tolist() == [5.0, 2.0, 3.0] and w.requires_grad
    with pytest.raises(lt.Error, match="views are not supported"):
        lt.zeros(4)[1:3][0] = 1.0


def test_list_indexing_matches_numpy(rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x = lt.tensor(a)
    np.testing.assert_array_equal(x[:, [-1], :].numpy(), a[:, [-1], :])
    np.testing.assert_array_equal(x[[1, 0]].numpy(), a[[1, 0]])
    np.testing.assert_array_equal(x[None, 1, [0, -1]].numpy(), a[None, 1, [0, -1]])
    with pytest.raises(IndexError, match="out of range"):
        x[:, [-4]]


def test_topk_min_and_cumsum_match_numpy(rng):
    a = rng.standard_normal((3, 7)).astype(np.float32)
    x = lt.tensor(a, requires_grad=True)
    values, indices = lt.topk(x, 3)
    order = np.argsort(-a, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.detach().numpy(), np.take_along_axis(a, order, 1))
    values.sum().backward()
    want = np.zeros_like(a)
    np.put_along_axis(want, order, 1.0, 1)
    np.testing.assert_array_equal(x.grad.numpy(), want)
    smallest = x.detach().topk(2, dim=0, largest=False)
    np.testing.assert_array_equal(smallest.indices.numpy(), np.argsort(a, axis=0, kind="stable")[:2])
    assert x.detach().min().item() == a.min()
    m = x.detach().min(1)
    np.testing.assert_array_equal(m.values.numpy(), a.min(1))
    np.testing.assert_array_equal(m.indices.numpy(), a.argmin(1))
    np.testing.assert_allclose(x.detach().cumsum(1).numpy(), np.cumsum(a, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lt.cumsum(x.detach(), 0).numpy(), np.cumsum(a, 0), rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(lt.Error, match="out of range"):
        lt.topk(x, 8)


def test_multinomial_draws_from_the_normalized_weights():
    lt.manual_seed(11)
    weights = [2.0, 0.0, 5.0, 3.0]  # unnormalized, as torch.multinomial takes them
    draws = lt.multinomial(lt.tensor([weights]).expand(40000, 4), 1)
    assert draws.shape == (40000, 1) and draws.dtype == lt.int64
    counts = np.bincount(draws.numpy().ravel(), minlength=4)
    expected = 40000 * np.array(weights) / sum(weights)
    assert counts[1] == 0
    kept = expected > 0
    chi2 = ((counts[kept] - expected[kept]) ** 2 / expected[kept]).sum()
    assert chi2 < 16.3, (counts, expected)  # 3 degrees of freedom, p = 0.001
    without = lt.multinomial(lt.tensor([[1.0, 1.0, 1.0, 0.0]]).expand(200, 4), 3).numpy()
    assert (np.sort(without, 1) == [0, 1, 2]).all()
    with pytest.raises(lt.Error, match="without replacement"):
        lt.multinomial(lt.ones(1, 3), 4)


def test_what_training_scripts_pass_through_is_accepted():
    model = nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4, bias=False), nn.Linear(4, 1))
    assert model[1].bias is None
    optimizer = lt.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), fused=True,
                               foreach=False)
    with pytest.raises(lt.Error, match="maximize"):
        lt.optim.AdamW(model.parameters(), maximize=True)
    scaler = lt.cuda.amp.GradScaler(enabled=False)
    assert lt.amp.GradScaler is lt.cuda.amp.GradScaler and not scaler.is_enabled()
    with pytest.raises(lt.Error, match="float16"):
        lt.amp.GradScaler(enabled=True)
    x = lt.ones(3, 2).pin_memory().to("cpu", non_blocking=True)
    before = model[0].weight.numpy().copy()
    with lt.amp.autocast(device_type="cpu", dtype=lt.bfloat16):
        loss = (model(x) ** 2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    assert not np.array_equal(model[0].weight.numpy(), before)


def test_repeat_flip_and_roll_match_numpy(rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    x = lt.tensor(a)
    np.testing.assert_array_equal(x.repeat(2, 1, 3).numpy(), np.tile(a, (2, 1, 3)))
    np.testing.assert_array_equal(x.repeat((1, 2)).numpy(), np.tile(a, (1, 2)))
    np.testing.assert_array_equal(lt.flip(x, [0, 1]).numpy(), a[::-1, ::-1])
    np.testing.assert_array_equal(x.flip(1).numpy(), a[:, ::-1])
    np.testing.assert_array_equal(x.roll(1, 1).numpy(), np.roll(a, 1, 1))
    np.testing.assert_array_equal(lt.roll(x, (-1, 2), (0, 1)).numpy(), np.roll(a, (-1, 2), (0, 1)))
    np.testing.assert_array_equal(x.roll(4).numpy(), np.roll(a, 4))
    w = lt.tensor(a, requires_grad=True)
    (w.repeat(3, 1) * lt.tensor(np.arange(18, dtype=np.float32).reshape(6, 3))).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.arange(18).reshape(3, 2, 3).sum(0))


def test_math_compositions_match_numpy(rng):
    a = rng.standard_normal((4, 5))
    x = lt.tensor(a, dtype=lt.float64)
    tiny = np.array([1e-12, -1e-9, 0.5, 3.0])
    np.testing.assert_allclose(lt.log1p(lt.tensor(tiny, dtype=lt.float64)).numpy(), np.log1p(tiny),
                               rtol=1e-15)
    np.testing.assert_allclose(x.square().numpy(), a * a, rtol=1e-15)
    np.testing.assert_allclose(x.std().item(), a.std(ddof=1), rtol=1e-12)
    np.testing.assert_allclose(lt.std(x, 1, correction=0).numpy(), a.std(1), rtol=1e-12)
    special = lt.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    assert special.isnan().tolist() == [False, True, False, False]
    assert lt.isinf(special).tolist() == [False, False, True, True]
    assert special.isfinite().tolist() == [True, False, False, False]


def test_randint_draws_uniform_integers():
    lt.manual_seed(3)
    draws = lt.randint(-3, 4, (70000,), device="cpu").numpy()
    assert draws.dtype == np.int64 and draws.min() == -3 and draws.max() == 3
    counts = np.bincount(draws + 3)
    chi2 = ((counts - 10000) ** 2 / 10000).sum()
    assert chi2 < 22.5, counts  # 6 degrees of freedom, p = 0.001
    assert lt.randint(5, (2, 3)).shape == (2, 3)
    with pytest.raises(lt.Error, match="high"):
        lt.randint(4, 4, (1,))
