"""Integer and bool arithmetic in the engine's kernels, with PyTorch's promotion rules, against
NumPy: ids + 1, (x == 5).sum(), //, %, the bitwise and logical ops, and div's rounding modes."""
import numpy as np
import pytest

import lazytensor as lt


@pytest.fixture
def rng():
    seed = np.random.SeedSequence().entropy % 2**32
    print(f"numpy seed {seed}")
    return np.random.default_rng(seed)


def _pair(rng, shape=(7, 13)):
    a = rng.integers(-1000, 1000, size=shape)
    b = rng.integers(1, 10, size=shape) * rng.choice([-1, 1], size=shape)
    return a, b


@pytest.mark.parametrize("dtype", [lt.int64, lt.int32])
def test_integer_operators_match_numpy(rng, dtype):
    a, b = _pair(rng)
    np_dtype = np.int64 if dtype == lt.int64 else np.int32
    a, b = a.astype(np_dtype), b.astype(np_dtype)
    ta, tb = lt.tensor(a, dtype=dtype), lt.tensor(b, dtype=dtype)
    cases = {
        "add": (ta + tb, a + b), "sub": (ta - tb, a - b), "mul": (ta * tb, a * b),
        "floordiv": (ta // tb, a // b), "mod": (ta % tb, a % b),
        "and": (ta & tb, a & b), "or": (ta | tb, a | b), "xor": (ta ^ tb, a ^ b),
        "invert": (~ta, ~a), "neg": (-ta, -a), "abs": (abs(ta), np.abs(a)),
        "number": (3 - ta * 2 + 1, 3 - a * 2 + 1), "floordiv_number": (ta // -3, a // -3),
        "mod_number": (ta % 7, a % 7), "pow": ((ta % 5) ** 3, (a % 5) ** 3),
        "maximum": (lt.maximum(ta, tb), np.maximum(a, b)),
        "where": (lt.where(ta > 0, ta, tb), np.where(a > 0, a, b)),
    }
    for name, (got, want) in cases.items():
        assert got.dtype == dtype, name
        np.testing.assert_array_equal(got.numpy(), want, err_msg=name)


def test_reductions_count_in_int64_and_means_are_refused(rng):
    a, _ = _pair(rng)
    t = lt.tensor(a)
    assert t.sum().dtype == lt.int64 and t.sum().item() == a.sum()
    np.testing.assert_array_equal(t.sum(1).numpy(), a.sum(1))
    np.testing.assert_array_equal(t.max(1).values.numpy(), a.max(1))
    np.testing.assert_array_equal(t.argmax(1).numpy(), a.argmax(1))
    assert (t == int(a[0, 0])).sum().item() == (a == a[0, 0]).sum()
    with pytest.raises(lt.Error, match="mean: expected a floating-point tensor, got i64"):
        t.mean()


def test_a_python_float_makes_an_integer_op_floating_as_in_pytorch(rng):
    a, b = _pair(rng)
    ta, tb = lt.tensor(a), lt.tensor(b)
    for got, want in ((ta * 0.5, a * 0.5), (ta / tb, a / b), (ta / 4, a / 4), (1.5 + ta, 1.5 + a),
                      ((ta % 3).exp(), np.exp(a % 3)), ((ta % 4) ** 0.5, (a % 4) ** 0.5)):
        assert got.dtype == lt.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    assert (ta < 2.5).dtype == lt.bool
    np.testing.assert_array_equal((ta < 2.5).numpy(), a < 2.5)


def test_in_place_integer_ops_keep_their_dtype_or_are_refused():
    i = lt.arange(4)
    i += 1
    i *= 3
    i //= 2
    assert i.tolist() == [1, 3, 4, 6] and i.dtype == lt.int64
    for update in (lambda t: t.add_(0.5), lambda t: t.div_(2), lambda t: t.lerp_(t, 0.5)):
        with pytest.raises(lt.Error):
            update(i)
    assert i.tolist() == [1, 3, 4, 6]


def test_bool_arithmetic_as_in_pytorch(rng):
    x = rng.standard_normal((5, 9))
    y = rng.standard_normal((5, 9))
    m, n = lt.tensor(x > 0), lt.tensor(y > 0)
    assert m.sum().dtype == lt.int64 and m.sum().item() == (x > 0).sum()
    for got, want in ((m & n, (x > 0) & (y > 0)), (m | n, (x > 0) | (y > 0)),
                      (m ^ n, (x > 0) ^ (y > 0)), (~m, ~(x > 0)), (m * n, (x > 0) & (y > 0)),
                      (m + n, (x > 0) | (y > 0)),
                      (lt.logical_and(m, n), np.logical_and(x > 0, y > 0)),
                      (lt.logical_or(m, lt.tensor(y)), np.logical_or(x > 0, y != 0)),
                      (lt.logical_not(lt.tensor(x).gt(0.5)), ~(x > 0.5)),
                      (m.logical_xor(n), (x > 0) ^ (y > 0))):
        assert got.dtype == lt.bool
        np.testing.assert_array_equal(got.numpy(), want)
    counts = m * 2 + 1
    assert counts.dtype == lt.int64
    np.testing.assert_array_equal(counts.numpy(), (x > 0) * 2 + 1)
    assert m.max().item() == (x > 0).max()


@pytest.mark.parametrize("floating", [False, True])
def test_div_rounding_modes_match_numpy(rng, floating):
    a, b = _pair(rng)
    if floating:
        a, b = a / 8.0, b / 4.0  # exact in binary: quotients on a whole number stay on it
    ta, tb = lt.tensor(a), lt.tensor(b)
    np.testing.assert_allclose(lt.div(ta, tb, rounding_mode="floor").numpy(), np.floor_divide(a, b))
    np.testing.assert_allclose(ta.div(tb, rounding_mode="trunc").numpy(), np.trunc(a / b))
    np.testing.assert_allclose(ta.div(3, rounding_mode="trunc").numpy(), np.trunc(a / 3),
                               rtol=1e-6)
    np.testing.assert_allclose(lt.remainder(ta, tb).numpy(), np.remainder(a, b),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="rounding_mode"):
        ta.div(tb, rounding_mode="round")


def test_integer_division_by_zero_is_defined_not_a_crash():
    a = lt.tensor([7, -7, 0])
    zero = lt.zeros(3, dtype=lt.int64)
    assert (a // zero).tolist() == [0, 0, 0]
    assert (a % zero).tolist() == [7, -7, 0]
    floating = (a.float() // 0).numpy()
    assert floating[0] == np.inf and floating[1] == -np.inf and np.isnan(floating[2])


def test_a_generation_loop_appends_ids_without_leaving_int64():
    idx = lt.zeros(1, 1, dtype=lt.int64)
    for _ in range(5):
        nxt = (idx[:, -1:] + 1) % 4
        idx = lt.cat([idx, nxt], 1)
    assert idx.dtype == lt.int64
    assert idx.tolist() == [[0, 1, 2, 3, 0, 1]]
    assert (idx == 0).sum().item() == 2


def test_numbers_an_integer_dtype_cannot_hold_compare_as_numbers():
    ids = lt.tensor([1, 2, 3])
    assert (ids < float("inf")).tolist() == [True, True, True]
    assert (ids < 1e20).tolist() == [True, True, True]
    assert (ids > -1e20).tolist() == [True, True, True]
    assert (ids == 2.5).tolist() == [False, False, False]
    assert lt.tensor([True, False]).eq(2).tolist() == [False, False]
    assert ids.clamp(max=float("inf")).dtype == lt.float32
    assert ids.clamp(max=2).tolist() == [1, 2, 2]
    with pytest.raises(lt.Error, match="1e\\+20 is not a value of i64"):
        ids.add_(1e20)


def test_bool_numbers_keep_bool_tensors_bool_and_floats_promote():
    m = lt.tensor([True, False])
    for got, want in ((m & True, [True, False]), (m | False, [True, False]),
                      (m ^ True, [False, True]), (m + True, [True, True]),
                      (m.add(m), [True, False]), (True * m, [True, False])):
        assert got.dtype == lt.bool and got.tolist() == want
    ids = lt.tensor([1, 2, 3])
    assert (ids + True).tolist() == [2, 3, 4] and (ids + True).dtype == lt.int64
    assert lt.where(ids > 1, ids, 0.5).tolist() == [0.5, 2.0, 3.0]
    assert ids.pow(0.5).dtype == lt.float32 and ids.pow(2).tolist() == [1, 4, 9]
    codes = lt.tensor([3, 4], dtype=lt.uint8)
    assert (codes == 3).tolist() == [True, False]


def test_min_of_integers_and_bool():
    assert lt.tensor([7, -3, 5]).min().item() == -3
    values, indices = lt.tensor([[7, -3], [2, 9]]).min(1)
    assert values.tolist() == [-3, 2] and indices.tolist() == [1, 0]
    smallest = lt.tensor([True, False]).min()
    assert smallest.dtype == lt.bool and not smallest.item()
