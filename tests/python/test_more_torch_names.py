"""More of PyTorch's names that GPT scripts use, against NumPy: einsum, set_num_threads, the
new_* factories and small Tensor methods, cross_entropy's label smoothing, and
clip_grad_norm_'s error_if_nonfinite."""
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


@pytest.mark.parametrize("equation, shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("ij->ji", [(3, 4)]),
    ("bij->j", [(2, 3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("bij,bjk,k->bi", [(2, 3, 4), (2, 4, 5), (5,)]),
    ("bij,jk->bik", [(1, 3, 4), (4, 2)]),
])
def test_einsum_matches_numpy_with_gradients(rng, equation, shapes):
    arrays = [rng.standard_normal(s) for s in shapes]
    tensors = [lt.tensor(a, dtype=lt.float64, requires_grad=True) for a in arrays]
    got = lt.einsum(equation, *tensors)
    want = np.einsum(equation, *arrays)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    if got.ndim:
        upstream = rng.standard_normal(want.shape)
        (got * lt.tensor(upstream, dtype=lt.float64)).sum().backward()
    else:
        upstream = 1.0
        got.backward()
    # d/dA of sum(einsum(A, ...) * U) by central differences on one element of each operand.
    for k, a in enumerate(arrays):
        plus, minus = [x.copy() for x in arrays], [x.copy() for x in arrays]
        index = tuple(s // 2 for s in a.shape)
        plus[k][index] += 1e-6
        minus[k][index] -= 1e-6
        numeric = ((np.einsum(equation, *plus) - np.einsum(equation, *minus)) * upstream).sum()
        np.testing.assert_allclose(tensors[k].grad.numpy()[index], numeric / 2e-6, rtol=1e-5,
                                   atol=1e-7)


def test_einsum_refuses_what_it_cannot_do():
    with pytest.raises(lt.Error, match="diagonals"):
        lt.einsum("ii->i", lt.ones(3, 3))
    with pytest.raises(lt.Error, match="2 operands, 1 given"):
        lt.einsum("ij,jk->ik", lt.ones(3, 3))
    with pytest.raises(lt.Error, match="sizes 3 and 4"):
        lt.einsum("ij,jk->ik", lt.ones(2, 3), lt.ones(4, 2))


def test_set_num_threads_changes_threads_not_results(rng):
    before = lt.get_num_threads()
    x = lt.tensor(rng.standard_normal((200, 300)).astype(np.float32))
    results = []
    for threads in (1, before):
        lt.set_num_threads(threads)
        assert lt.get_num_threads() == threads
        results.append((x.exp() / x.exp().sum(1, keepdim=True)).numpy())
    np.testing.assert_array_equal(results[0], results[1])
    with pytest.raises(lt.Error, match="positive"):
        lt.set_num_threads(0)


def test_new_factories_and_small_methods(rng):
    t = lt.ones(2, 3, dtype=lt.float64)
    assert t.new_zeros(4).dtype == lt.float64 and t.new_zeros((2, 2)).shape == (2, 2)
    assert t.new_ones(2, dtype=lt.int64).tolist() == [1, 1]
    assert t.new_full((2,), 7.0).tolist() == [7.0, 7.0]
    assert t.new_tensor([1.5, 2]).dtype == lt.float64
    assert t.new_empty(3).shape == (3,)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    m = x > 0
    got = lt.tensor(x)
    got.masked_fill_(lt.tensor(m), 0.0)
    np.testing.assert_array_equal(got.numpy(), np.where(m, 0, x))
    assert lt.tensor(x).expand_as(lt.ones(2, 3, 4)).shape == (2, 3, 4)
    assert lt.tensor(x).view_as(lt.ones(12)).shape == (12,)
    np.testing.assert_array_equal(lt.tensor(m).any(1).numpy(), m.any(1))
    np.testing.assert_array_equal(lt.tensor(m).all(0).numpy(), m.all(0))
    assert lt.tensor(m).any().item() == m.any()
    v, w = rng.standard_normal(5), rng.standard_normal(3)
    np.testing.assert_allclose(lt.outer(lt.tensor(v), lt.tensor(w)).numpy(), np.outer(v, w),
                               rtol=1e-6)
    u = lt.empty(1000).uniform_(-2, 3).numpy()
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.2
    n = lt.empty(4000).normal_(1.0, 2.0).numpy()
    assert abs(n.mean() - 1.0) < 0.2 and abs(n.std() - 2.0) < 0.2


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_label_smoothing_matches_numpy(rng, reduction):
    logits = rng.standard_normal((6, 5))
    target = rng.integers(0, 5, size=6)
    target[2] = -100
    e = 0.1
    log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    kept = target != -100
    nll = -log_softmax[np.arange(6), np.where(kept, target, 0)] * kept
    loss = (1 - e) * nll + e * -log_softmax.mean(1) * kept
    want = {"mean": loss.sum() / kept.sum(), "sum": loss.sum(), "none": loss}[reduction]
    got = F.cross_entropy(lt.tensor(logits, dtype=lt.float64), lt.tensor(target),
                          reduction=reduction, label_smoothing=e)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)
    module = nn.CrossEntropyLoss(reduction=reduction, label_smoothing=e)
    np.testing.assert_allclose(module(lt.tensor(logits, dtype=lt.float64), lt.tensor(target))
                               .numpy(), want, rtol=1e-10)


def test_clip_grad_norm_error_if_nonfinite_changes_nothing():
    p = lt.ones(3, requires_grad=True)
    (p * lt.tensor([1.0, float("inf"), 2.0])).sum().backward()
    before = p.grad.numpy().copy()
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(p.grad.numpy(), before)
    q = lt.ones(2, requires_grad=True)
    (q * 3.0).sum().backward()
    norm = nn.utils.clip_grad_norm_([q], 1.0, error_if_nonfinite=True, foreach=True)
    assert norm.item() == pytest.approx(np.sqrt(18))
    with pytest.raises(lt.Error, match="norm_type"):
        nn.utils.clip_grad_norm_([q], 1.0, norm_type=1.0)


def test_device_kinds_and_the_default_device():
    kinds = {k["name"]: k for k in lt.device_kinds()}
    assert list(kinds) == ["cpu", "cuda", "opencl"]
    assert kinds["cpu"]["available"]
    for name in ("cuda", "opencl"):
        if kinds[name]["available"]:
            # An available device takes the tensors made after it is chosen.
            try:
                lt.set_default_device(name)
                x = lt.arange(4.0) * 2
                assert x.device == f"{name}:0"
                assert x.tolist() == [0.0, 2.0, 4.0, 6.0]
            finally:
                lt.set_default_device("cpu")
        else:
            with pytest.raises(lt.Error, match=f"{name}:0 is unavailable"):
                lt.set_default_device(name)
    assert lt.get_default_device() == "cpu:0"
    try:
        lt.set_default_device("cpu:1")
        assert lt.zeros(2).device == "cpu:1"
    finally:
        lt.set_default_device("cpu")
    assert lt.zeros(2).device == "cpu:0"
