"""sort, argsort, topk, take_along_dim/gather, cumsum and randperm on the device, against NumPy
(stable sorts, NaN last ascending and first descending, as PyTorch's)."""
import numpy as np
import pytest

import lazytensor as lt


@pytest.fixture
def rng():
    seed = np.random.SeedSequence().entropy % 2**32
    print(f"numpy seed {seed}")
    return np.random.default_rng(seed)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_and_argsort_match_a_stable_numpy_sort(rng, dim):
    x = rng.integers(-3, 4, size=(9, 17)).astype(np.float32) / 2  # many ties
    x[2, 3] = np.nan
    t = lt.tensor(x)
    order = np.argsort(x, axis=dim, kind="stable")
    np.testing.assert_array_equal(lt.argsort(t, dim).numpy(), order)
    values, indices = t.sort(dim)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, order, dim))
    np.testing.assert_array_equal(indices.numpy(), order)
    # Descending: NaN first, ties still in order of position.
    descending = np.argsort(-np.nan_to_num(x, nan=np.inf), axis=dim, kind="stable")
    result = lt.sort(t, dim=dim, descending=True)
    np.testing.assert_array_equal(result.indices.numpy(), descending)


def test_topk_take_along_dim_and_gather(rng):
    x = rng.standard_normal((4, 50)).astype(np.float32)
    t = lt.tensor(x)
    values, indices = t.topk(5)
    want = np.argsort(-x, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(indices.numpy(), want)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, want, 1))
    smallest = lt.topk(t, 3, dim=0, largest=False)
    np.testing.assert_array_equal(smallest.indices.numpy(), np.argsort(x, 0, kind="stable")[:3])
    picks = rng.integers(0, 50, size=(4, 7))
    np.testing.assert_array_equal(t.gather(1, lt.tensor(picks)).numpy(),
                                  np.take_along_axis(x, picks, 1))
    np.testing.assert_array_equal(lt.take_along_dim(t, lt.tensor(picks), 1).numpy(),
                                  np.take_along_axis(x, picks, 1))
    with pytest.raises(lt.Error, match="topk: k = 51"):
        t.topk(51)


def test_sorted_values_and_running_sums_carry_gradients(rng):
    x = rng.standard_normal((3, 6))
    w = lt.tensor(x, dtype=lt.float64, requires_grad=True)
    weights = rng.standard_normal((3, 6))
    loss = (w.sort(1).values * lt.tensor(weights)).sum() + (w.cumsum(1) * lt.tensor(weights)).sum()
    loss.backward()
    order = np.argsort(x, 1, kind="stable")
    want = np.zeros_like(x)
    np.put_along_axis(want, order, weights, 1)
    want += np.flip(np.cumsum(np.flip(weights, 1), 1), 1)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-12)


def test_cumsum_matches_numpy_in_every_dtype(rng):
    x = rng.standard_normal((5, 300)).astype(np.float32)
    np.testing.assert_allclose(lt.tensor(x).cumsum(1).numpy(), np.cumsum(x.astype(np.float64), 1),
                               rtol=1e-5, atol=1e-5)
    ids = rng.integers(-10**12, 10**12, size=(40,))
    got = lt.tensor(ids).cumsum(0)
    assert got.dtype == lt.int64
    np.testing.assert_array_equal(got.numpy(), np.cumsum(ids))
    mask = x[0] > 0
    assert lt.cumsum(lt.tensor(mask), 0).tolist() == np.cumsum(mask).tolist()
    assert lt.tensor(x).cumsum(0, dtype=lt.float64).dtype == lt.float64


def test_randperm_is_a_permutation_from_the_engine_generator():
    lt.manual_seed(3)
    a = lt.randperm(100)
    lt.manual_seed(3)
    b = lt.randperm(100)
    assert a.dtype == lt.int64
    assert sorted(a.tolist()) == list(range(100))
    assert a.tolist() == b.tolist()
    assert a.tolist() != list(range(100))
    assert lt.randperm(10, dtype=lt.int32).dtype == lt.int32


def test_take_along_dim_refuses_positions_outside_the_row():
    t = lt.tensor([[1, 2], [3, 4]])
    with pytest.raises(IndexError, match="take_along_dim: index 2"):
        lt.take_along_dim(t, lt.tensor([[2], [0]]), 1)
    computed = lt.tensor([[1], [0]]) * 2  # ids computed on the device: checked as they are read
    with pytest.raises(lt.Error, match="out of range"):
        lt.take_along_dim(t, computed, 1).tolist()


def test_cumsum_gradient_sums_from_the_end_without_cancelling():
    x = lt.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    x.cumsum(0).backward(lt.tensor([1e8, 1.0, 1.0, 1.0]))
    # Each position's gradient sums the upstream from there on: a total less a prefix would
    # lose the small terms next to 1e8 in f32.
    assert x.grad.tolist()[1:] == [3.0, 2.0, 1.0]


def test_integers_above_2_to_53_sort_in_their_own_type():
    big = 2**53
    t = lt.tensor([big + 1, big, big + 3, -big - 1])
    assert t.sort().values.tolist() == [-big - 1, big, big + 1, big + 3]
    assert t.argsort(descending=True).tolist() == [2, 0, 1, 3]
