"""lt.autocast from Python: bf16 products with float32 sums against NumPy over the rounded
operands, the context manager's nesting and decorator forms, and a layer trained under it."""
import numpy as np
import pytest

import lazytensor as lt


def bf16(x):
    """x (float32 values) rounded to bfloat16, nearest even, back in float64."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def sum_error_bound(x, y):
    """How far float32 arithmetic may put x @ y from the exact product: n roundings of
    float32 times the sum of the products' magnitudes, the bound for any order of summing n
    products, at its largest entry. A tolerance relative to the result alone fails wherever
    the products cancel to near zero."""
    x, y = np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(y, np.float64))
    return x.shape[-1] * 2.0**-24 * (x @ y).max()


def test_matmul_and_linear_use_bf16_operands_and_float32_sums(rng):
    a = rng.standard_normal((9, 33)).astype(np.float32)
    w = rng.standard_normal((7, 33)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    g = rng.standard_normal((9, 7)).astype(np.float32)
    x = lt.tensor(a, requires_grad=True)
    weight = lt.tensor(w, requires_grad=True)
    with lt.autocast("cpu", dtype=lt.bfloat16):
        assert lt.is_autocast_enabled() and lt.get_autocast_dtype() == lt.bfloat16
        product = x @ weight.t()
        y = lt.nn.functional.linear(x, weight, lt.tensor(b))
    assert not lt.is_autocast_enabled()
    assert product.dtype == lt.float32 and y.dtype == lt.float32
    want = bf16(a) @ bf16(w).T
    bound = sum_error_bound(bf16(a), bf16(w).T)
    np.testing.assert_allclose(product.numpy(), want, rtol=0, atol=bound)
    np.testing.assert_allclose(y.numpy(), want + b, rtol=2.0**-23, atol=bound)
    (y * lt.tensor(g)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), bf16(g) @ bf16(w), rtol=0,
                               atol=sum_error_bound(bf16(g), bf16(w)))
    np.testing.assert_allclose(weight.grad.numpy(), bf16(g).T @ bf16(a), rtol=0,
                               atol=sum_error_bound(bf16(g).T, bf16(a)))
    # The rounding shows: far from the float32 product.
    assert np.abs(product.numpy() - a.astype(np.float64) @ w.T).max() > 1e-3


def test_nesting_decorator_and_refused_dtypes(rng):
    a = lt.tensor(rng.standard_normal((4, 6)).astype(np.float32))
    m = lt.tensor(rng.standard_normal((6, 3)).astype(np.float32))
    cast = lt.autocast(dtype=lt.bfloat16)
    with cast:
        with lt.autocast(enabled=False):
            assert not lt.is_autocast_enabled()
            exact = a @ m
        with cast:  # the same object, entered again inside itself
            assert lt.is_autocast_enabled()
        assert lt.is_autocast_enabled()
    assert not lt.is_autocast_enabled()
    np.testing.assert_allclose(exact.numpy(), a.numpy().astype(np.float64) @ m.numpy(), rtol=0,
                               atol=sum_error_bound(a.numpy(), m.numpy()))

    @lt.autocast()
    def product(x, y):
        assert lt.is_autocast_enabled()
        return x @ y

    np.testing.assert_allclose(product(a, m).numpy(), bf16(a.numpy()) @ bf16(m.numpy()),
                               rtol=0, atol=sum_error_bound(bf16(a.numpy()), bf16(m.numpy())))
    assert not lt.is_autocast_enabled()
    with pytest.raises(lt.Error, match="AutocastGuard"):
        lt.autocast(dtype=lt.float16)
    with pytest.raises(lt.Error, match="autocast"):
        lt.autocast("cuda")


def test_a_layer_trains_under_autocast_like_float32(rng):
    x = rng.standard_normal((32, 16)).astype(np.float32)
    target = rng.standard_normal((32, 4)).astype(np.float32)

    def train(enabled):
        lt.manual_seed(5)
        layer = lt.nn.Linear(16, 4)
        opt = lt.optim.AdamW(layer.parameters(), lr=1e-2)
        losses = []
        for _ in range(20):
            opt.zero_grad()
            with lt.autocast(enabled=enabled):
                out = layer(lt.tensor(x))
            loss = ((out - lt.tensor(target)) ** 2).mean()
            loss.backward()
            opt.step()
            lt.mark_step()
            losses.append(loss.item())
        return np.array(losses)

    fp32, autocast = train(False), train(True)
    assert autocast[-1] < autocast[0] * 0.9
    np.testing.assert_allclose(autocast, fp32, rtol=1e-2)
    assert not np.array_equal(autocast, fp32), "autocast changed no loss"


def test_decorated_function_from_threads_restores_each_threads_state():
    import threading
    seen, errors = [], []

    @lt.autocast()
    def inside():
        seen.append(lt.is_autocast_enabled())

    def worker():
        try:
            for _ in range(50):
                inside()
                if lt.is_autocast_enabled():
                    errors.append("left on")
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and all(seen) and len(seen) == 200
    assert not lt.is_autocast_enabled()
