"""Tensors from Python: creation, NumPy round trips, operators and ops against NumPy."""
import math

import numpy as np
import pytest

import lazytensor as lt


def close(t, expected, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(t.numpy(), expected, rtol=rtol, atol=atol)


def test_tensor_from_lists_follows_torch_default_dtypes():
    assert lt.tensor([1.5, 2.0]).dtype == lt.float32
    assert lt.tensor([1, 2]).dtype == lt.int64
    assert lt.tensor([True, False]).dtype == lt.bool
    assert lt.tensor(3.0).shape == ()
    assert lt.tensor([[1, 2, 3]], dtype=lt.float64).dtype == lt.float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_numpy_round_trip_keeps_values_and_dtype(rng, dtype):
    a = (rng.standard_normal((3, 5)) * 10).astype(dtype)
    t = lt.tensor(a)
    back = t.numpy()
    assert back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert t.tolist() == a.tolist()


def test_non_contiguous_arrays_are_copied_in_order(rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_array_equal(lt.tensor(a.T).numpy(), a.T)
    np.testing.assert_array_equal(lt.tensor(a[:, ::2]).numpy(), a[:, ::2])


def test_bfloat16_reads_back_as_float32(rng):
    a = rng.standard_normal(16).astype(np.float32)
    t = lt.tensor(a, dtype=lt.bfloat16)
    assert t.dtype == lt.bfloat16
    np.testing.assert_allclose(t.numpy(), a, rtol=2**-8)


def test_float16_round_trips_and_rounds_every_result(rng):
    a = (rng.standard_normal(64) * 100).astype(np.float16)
    t = lt.tensor(a)
    assert t.dtype == lt.float16
    back = t.numpy()
    assert back.dtype == np.float16
    np.testing.assert_array_equal(back, a)
    b = (rng.standard_normal(64)).astype(np.float16)
    # NumPy computes float16 ops in float32 and rounds each result, as lazytensor does.
    np.testing.assert_array_equal((t * lt.tensor(b) + 1.0).numpy(), a * b + np.float16(1.0))
    np.testing.assert_array_equal(lt.tensor(a, dtype=lt.float32).half().numpy(), a)
    assert np.isinf(lt.tensor([70000.0]).half().numpy()[0])


def test_factories(rng):
    assert lt.zeros(2, 3).shape == (2, 3)
    assert lt.zeros((2, 3)).shape == (2, 3)
    np.testing.assert_array_equal(lt.ones(4).numpy(), np.ones(4, np.float32))
    np.testing.assert_array_equal(lt.full((2, 2), 7.5).numpy(), np.full((2, 2), 7.5, np.float32))
    np.testing.assert_array_equal(lt.arange(5).numpy(), np.arange(5))
    assert lt.arange(5).dtype == lt.int64
    np.testing.assert_allclose(lt.arange(0, 1, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    lt.manual_seed(7)
    u = lt.rand(1000).numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.05
    lt.manual_seed(7)
    np.testing.assert_array_equal(lt.rand(1000).numpy(), u)
    n = lt.randn(4000).numpy()
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1


BINARY = [
    ("+", np.add), ("-", np.subtract), ("*", np.multiply), ("/", np.divide),
]


@pytest.mark.parametrize("op,ref", BINARY)
def test_binary_operators_broadcast_like_numpy(rng, op, ref):
    a = rng.standard_normal((3, 1, 4)).astype(np.float32)
    b = rng.uniform(0.5, 2, (5, 1)).astype(np.float32)
    s = float(rng.uniform(0.5, 2))
    ta, tb = lt.tensor(a), lt.tensor(b)
    f = {"+": lambda x, y: x + y, "-": lambda x, y: x - y,
         "*": lambda x, y: x * y, "/": lambda x, y: x / y}[op]
    close(f(ta, tb), ref(a, b))
    close(f(ta, s), ref(a, s))
    close(f(s, tb), ref(s, b))


def test_unary_ops_and_methods_match_numpy(rng):
    a = rng.uniform(0.1, 3, (4, 5)).astype(np.float32)
    t = lt.tensor(a)
    close(-t, -a)
    close(t ** 2.5, a ** 2.5, rtol=1e-5)
    close(t.sqrt(), np.sqrt(a))
    close(t.rsqrt(), 1 / np.sqrt(a))
    close(t.exp(), np.exp(a))
    close(t.log(), np.log(a))
    close(t.tanh(), np.tanh(a))
    close(t.sigmoid(), 1 / (1 + np.exp(-a)))
    close((t - 1.5).relu(), np.maximum(a - 1.5, 0))
    close((t - 1.5).abs(), np.abs(a - 1.5))
    close((t - 1.5).sign(), np.sign(a - 1.5))
    close(t.clamp(0.5, 2.0), np.clip(a, 0.5, 2.0))
    close(t.clamp(min=1.0), np.maximum(a, 1.0))
    close(t.clamp(max=1.0), np.minimum(a, 1.0))
    close(lt.erf(t), np.vectorize(math.erf)(a), rtol=1e-5)
    angles = rng.uniform(-1000, 1000, (4, 5)).astype(np.float32)
    close(lt.tensor(angles).sin(), np.sin(angles), rtol=1e-6, atol=1e-6)
    close(lt.cos(lt.tensor(angles)), np.cos(angles), rtol=1e-6, atol=1e-6)


def test_torch_keyword_arguments(rng):
    a, b, c = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3))
    c = np.abs(c) + 0.5
    ta, tb, tc = lt.tensor(a), lt.tensor(b), lt.tensor(c)
    close(ta.add(tb, alpha=0.5), a + 0.5 * b)
    close(ta.sub(tb, alpha=2), a - 2 * b)
    close(ta.addcmul(tb, tc, value=0.1), a + 0.1 * b * c)
    close(ta.addcdiv(tb, tc, value=-0.3), a - 0.3 * b / c)
    close(ta.lerp(tb, 0.25), a + 0.25 * (b - a))
    with pytest.raises(TypeError):
        ta.add(tb, 0.5)  # alpha is keyword-only, as in torch


def test_in_place_ops_return_self_and_reach_aliases(rng):
    a, b, c = (rng.uniform(0.5, 2, (6,)).astype(np.float32) for _ in range(3))
    t = lt.tensor(a)
    alias = t
    r = t.mul_(0.9).addcmul_(lt.tensor(b), lt.tensor(c), value=0.1)
    assert r is t
    t += 1.0
    t -= lt.tensor(b)
    assert t is alias
    expected = a * np.float32(0.9) + np.float32(0.1) * b * c + 1 - b
    close(alias, expected)
    t.zero_()
    close(alias, np.zeros(6))


def test_comparisons_give_bool_tensors(rng):
    a = rng.standard_normal(20).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)
    ta, tb = lt.tensor(a), lt.tensor(b)
    for got, want in [(ta < tb, a < b), (ta <= tb, a <= b), (ta > 0.0, a > 0),
                      (ta >= tb, a >= b), (ta == ta, a == a), (ta != tb, a != b)]:
        assert got.dtype == lt.bool
        np.testing.assert_array_equal(got.numpy(), want)


def test_reductions_match_numpy(rng):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    t = lt.tensor(a)
    close(t.sum(), a.sum(), rtol=1e-5, atol=1e-5)
    close(t.sum(1), a.sum(1), atol=1e-5)
    close(t.sum((0, 2), keepdim=True), a.sum((0, 2), keepdims=True), atol=1e-5)
    close(t.mean(-1), a.mean(-1))
    close(t.amax(1), a.max(1))
    values, indices = t.max(2)
    close(values, a.max(2))
    np.testing.assert_array_equal(indices.numpy(), a.argmax(2))
    np.testing.assert_array_equal(t.max(dim=0).indices.numpy(), a.argmax(0))
    np.testing.assert_array_equal(t.argmax().numpy(), a.argmax())
    close(t.norm(), np.linalg.norm(a), rtol=1e-5)
    close(t.var(1), a.var(1, ddof=1), rtol=1e-4)
    assert math.isclose(t.sum().item(), float(a.astype(np.float64).sum()), rel_tol=1e-5, abs_tol=1e-5)


def test_matmul_and_nn_ops_match_numpy(rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    ta, tw, tb = lt.tensor(a), lt.tensor(w), lt.tensor(b)
    close(ta @ tw.t(), a @ w.T, atol=1e-5)
    close(lt.nn.functional.linear(ta, tw, tb), a @ w.T + b, atol=1e-5)
    e = np.exp(a - a.max(-1, keepdims=True))
    close(lt.softmax(ta, -1), e / e.sum(-1, keepdims=True))
    close(ta.log_softmax(-1), np.log(e / e.sum(-1, keepdims=True)), atol=1e-5)
    close(lt.logsumexp(ta, -1), np.log(np.exp(a.astype(np.float64)).sum(-1)), atol=1e-5)
    close(ta.logsumexp((0, 2), keepdim=True),
          np.log(np.exp(a.astype(np.float64)).sum((0, 2), keepdims=True)), atol=1e-5)
    mu, var = a.mean(-1, keepdims=True), a.var(-1, keepdims=True)
    close(lt.nn.functional.layer_norm(ta, [4]), (a - mu) / np.sqrt(var + 1e-5), atol=1e-5)
    close(lt.cat([ta, ta], 1), np.concatenate([a, a], 1))
    close(lt.where(ta > 0, ta, lt.zeros(1)), np.where(a > 0, a, 0))


def test_views_and_indexing_match_numpy(rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    t = lt.tensor(a)
    close(t.reshape(3, 8), a.reshape(3, 8))
    close(t.view(-1), a.reshape(-1))
    close(t.transpose(0, 1), a.T)
    close(t.T, a.T)
    close(t.permute(1, 0), a.T)
    close(t.unsqueeze(0).squeeze(0), a)
    close(t[1], a[1])
    close(t[-1, 2:5], a[-1, 2:5])
    close(t[:, ::2], a[:, ::2])
    close(t[None, ..., 1], a[None, ..., 1])
    close(t[lt.tensor([3, 0])], a[[3, 0]])
    close(t.narrow(1, 1, 3), a[:, 1:4])
    with pytest.raises(IndexError):
        t[4]


def test_shape_dtype_device_and_len():
    t = lt.zeros(2, 3, dtype=lt.float64)
    assert t.shape == (2, 3) and t.size() == (2, 3) and t.size(-1) == 3
    assert t.dim() == 2 and t.ndim == 2 and t.numel() == 6 and len(t) == 2
    assert t.dtype == lt.float64 and t.device == "cpu:0"
    assert t.long().dtype == lt.int64 and t.float().dtype == lt.float32


def test_repr_never_waits_and_str_shows_values():
    t = lt.ones(2) * 3
    assert "pending" in repr(t)
    assert t.is_pending
    assert "3." in str(t)


def test_errors_raise_lt_error_with_the_engine_message():
    assert issubclass(lt.Error, RuntimeError)
    with pytest.raises(lt.Error, match="matmul"):
        lt.zeros(2, 3) @ lt.zeros(2, 3)
    with pytest.raises(lt.Error, match="reshape"):
        lt.zeros(6).reshape(4, 2)
    with pytest.raises(lt.Error, match="item"):
        lt.zeros(3).item()


def test_failed_in_place_op_leaves_the_tensor_as_it_was(rng):
    a = rng.standard_normal(4).astype(np.float32)
    t = lt.tensor(a)
    with pytest.raises(lt.Error):
        t.add_(lt.zeros(5))
    close(t, a)


def test_item_float_int_bool():
    assert lt.tensor(2.5).item() == 2.5
    assert isinstance(lt.tensor(3).item(), int)
    assert float(lt.tensor([1.5])) == 1.5
    assert int(lt.tensor(7)) == 7
    assert bool(lt.tensor(1.0)) and not bool(lt.tensor(0.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.bool_])
def test_dlpack_both_ways_without_a_copy(rng, dtype):
    a = (rng.standard_normal((4, 5)) * 10).astype(dtype)
    t = lt.from_dlpack(a)
    assert t.dtype == lt.tensor(a).dtype and t.shape == a.shape
    back = np.from_dlpack(t)
    np.testing.assert_array_equal(back, a)
    assert np.shares_memory(back, a)  # NumPy -> lazytensor -> NumPy, one buffer throughout


def test_dlpack_memory_is_never_written_by_the_engine(rng):
    a = rng.standard_normal(6)
    t = lt.from_dlpack(a)
    t.add_(1.0)
    lt.mark_step()
    np.testing.assert_array_equal(a, a.copy())
    np.testing.assert_allclose(t.numpy(), a + 1)
    exported = np.from_dlpack(t)
    t.mul_(2.0)
    lt.mark_step()
    np.testing.assert_allclose(exported, a + 1)  # a snapshot of the value it was taken from
    np.testing.assert_allclose(t.numpy(), (a + 1) * 2)


def test_dlpack_of_a_pending_tensor_computes_it(rng):
    a = rng.standard_normal(8).astype(np.float32)
    t = lt.tensor(a) * 3.0
    assert t.is_pending
    np.testing.assert_allclose(np.from_dlpack(t), a * 3, rtol=1e-6)


def test_dlpack_import_of_a_strided_array_is_a_copy_in_order(rng):
    a = rng.standard_normal((4, 6))
    with pytest.raises(lt.Error, match="contiguous"):
        lt._C.from_dlpack(a[:, ::2])  # the in-place import refuses; lt.from_dlpack copies
    t = lt.from_dlpack(a[:, ::2])
    np.testing.assert_array_equal(t.numpy(), a[:, ::2])


def test_dlpack_with_torch(rng):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed in this environment")
    x = torch.randn(3, 4)
    t = lt.from_dlpack(x)
    np.testing.assert_array_equal(t.numpy(), x.numpy())
    y = torch.from_dlpack(lt.tensor(x.numpy()) * 2.0)
    assert torch.equal(y, x * 2)
    b = torch.randn(5).to(torch.bfloat16)
    assert lt.from_dlpack(b).dtype == lt.bfloat16
    assert torch.equal(torch.from_dlpack(lt.from_dlpack(b)), b)
    h = torch.randn(5).to(torch.float16)
    assert lt.from_dlpack(h).dtype == lt.float16
    assert torch.equal(torch.from_dlpack(lt.from_dlpack(h) * 2.0), h * 2)


def test_softplus_matches_numpy_and_its_gradient_is_the_sigmoid_below_the_threshold():
    rng = np.random.default_rng()
    a = rng.uniform(-40, 40, size=(5, 7))
    x = lt.tensor(a, requires_grad=True)
    close(lt.nn.functional.softplus(x), np.where(a > 20, a, np.log1p(np.exp(a))), rtol=1e-5)
    y = lt.nn.functional.softplus(x, beta=2.0, threshold=5.0)
    close(y, np.where(2 * a > 5, a, np.log1p(np.exp(2 * a)) / 2), rtol=1e-5)
    y.sum().backward()
    close(x.grad, np.where(2 * a > 5, 1.0, 1 / (1 + np.exp(-2 * a))), rtol=1e-5)


def test_as_strided_and_its_scatter_match_numpy_windows():
    rng = np.random.default_rng()
    x = rng.standard_normal((4, 5)).astype(np.float32)
    window = np.lib.stride_tricks.as_strided(x.reshape(-1)[2:], (3, 2), (6 * 4, 2 * 4))
    got = lt.as_strided(lt.tensor(x), [3, 2], [6, 2], 2)
    np.testing.assert_array_equal(got.numpy(), window)
    src = rng.standard_normal((3, 2)).astype(np.float32)
    want = x.copy().reshape(-1)
    for i in range(3):
        for j in range(2):
            want[2 + 6 * i + 2 * j] = src[i, j]
    got = lt.as_strided_scatter(lt.tensor(x), lt.tensor(src), [3, 2], [6, 2], 2)
    np.testing.assert_array_equal(got.numpy(), want.reshape(4, 5))


def test_index_add_adds_rows_at_their_positions():
    rng = np.random.default_rng()
    x = rng.standard_normal((4, 3)).astype(np.float32)
    src = rng.standard_normal((5, 3)).astype(np.float32)
    ids = np.array([1, 3, 1, 0, 1])
    want = x.astype(np.float64).copy()
    np.add.at(want, ids, 2.0 * src)
    got = lt.tensor(x).index_add(0, lt.tensor(ids), lt.tensor(src), alpha=2.0)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
