"""PyTorch's behaviour in the details a user hits: optimizer groups, module registration,
indexing limits, dtypes, grad mode, NumPy interplay, DLPack lifetimes."""
import gc
import weakref
from collections import OrderedDict

import numpy as np
import pytest

import lazytensor as lt
import lazytensor.nn as nn


def test_sgd_applies_each_groups_own_settings():
    a = lt.ones(2, requires_grad=True)
    b = lt.ones(2, requires_grad=True)
    opt = lt.optim.SGD([{"params": [a]}, {"params": b, "lr": 1.0}], lr=0.1)
    a.grad, b.grad = lt.ones(2), lt.ones(2)
    opt.step()
    lt.mark_step()
    np.testing.assert_allclose(a.detach().numpy(), [0.9, 0.9])
    np.testing.assert_allclose(b.detach().numpy(), [0.0, 0.0])
    opt.param_groups[0]["momentum"] = 0.5  # switched on after construction, as torch allows
    opt.step()
    lt.mark_step()
    np.testing.assert_allclose(a.detach().numpy(), [0.8, 0.8], rtol=1e-6)


def test_optimizers_refuse_a_bare_tensor_and_repeated_parameters():
    p = lt.ones(3, requires_grad=True)
    with pytest.raises(TypeError):
        lt.optim.SGD(p)
    with pytest.raises(lt.Error, match="more than one"):
        lt.optim.AdamW([p, p])


def test_shared_modules_and_parameters_are_listed_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, lin)
    assert len(list(seq.parameters())) == 2
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias"]


def test_module_attribute_assignment_follows_torch():
    m = nn.Linear(2, 2)
    with pytest.raises(TypeError):
        m.weight = lt.ones(2, 2)  # a plain tensor over a parameter
    m.bias = None
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    outer = nn.Sequential(OrderedDict([("first", nn.Linear(2, 3)), ("second", nn.ReLU())]))
    assert [n for n, _ in outer.named_parameters()] == ["first.weight", "first.bias"]
    assert outer(lt.ones(1, 2)).shape == (1, 3)
    del outer.first
    assert list(outer.parameters()) == []


def test_unsupported_indices_raise_instead_of_guessing():
    t = lt.zeros(2, 3, 4)
    with pytest.raises(IndexError):
        t[lt.tensor([0, 1]), lt.tensor([0, 2])]
    with pytest.raises(IndexError):
        t[True]
    with pytest.raises(IndexError):
        t[..., ...]


def test_keepdim_without_dim_keeps_every_dim(rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    t = lt.tensor(a)
    assert t.sum(keepdim=True).shape == (1, 1)
    # Against float64, with a tolerance on the sum's magnitudes: the mean may cancel to near 0.
    np.testing.assert_allclose(t.mean(keepdim=True).numpy(),
                               a.astype(np.float64).mean(keepdims=True), rtol=0,
                               atol=1e-6 * np.abs(a).mean())
    assert t.amax(keepdim=True).shape == (1, 1)


def test_integers_read_back_exactly():
    big = 2**53 + 1
    t = lt.tensor([big])
    assert t.item() == big and int(t) == big
    assert t.tolist() == [big]
    with pytest.raises(OverflowError):
        lt.tensor(2**63)
    with pytest.raises(lt.Error, match="item"):
        lt.tensor([1, 2]).item()


def test_numpy_scalars_keep_their_dtype_and_stay_on_the_right():
    assert lt.tensor(np.float64(1.5)).dtype == lt.float64
    assert lt.tensor(np.int32(3)).dtype == lt.int32
    t = lt.ones(3)
    for r in (np.float32(0.5) * t, np.float64(2) + t, t * np.float32(3)):
        assert isinstance(r, lt.Tensor)
    assert lt.zeros(np.int64(2), 3).shape == (2, 3)
    assert lt.ones(6).view(np.int64(2), 3).shape == (2, 3)
    with pytest.raises(TypeError):
        lt.zeros(2, 3.5)


def test_grad_assignment_checks_shape_and_dtype():
    p = lt.ones(3, requires_grad=True)
    with pytest.raises(lt.Error, match="grad"):
        p.grad = lt.tensor([5.0])
    with pytest.raises(lt.Error, match="grad"):
        p.grad = lt.ones(3, dtype=lt.float64)
    p.grad = lt.ones(3)
    assert p.grad is not None


def test_grad_mode_context_managers_and_decorators():
    x = lt.ones(2, requires_grad=True)
    with lt.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert lt.is_grad_enabled()
    lt.set_grad_enabled(False)
    assert not lt.is_grad_enabled()
    lt.set_grad_enabled(True)

    @lt.no_grad
    def doubled(v):
        return v * 2

    assert not doubled(x).requires_grad
    with pytest.raises(ValueError):
        with lt.no_grad():
            raise ValueError("inside")
    assert lt.is_grad_enabled()


def test_pow_zero_has_a_zero_gradient_everywhere():
    x = lt.tensor([0.0, 2.0], requires_grad=True)
    (x ** 0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])


def test_torch_conveniences(rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    t = lt.tensor(a)
    loss = t.sum()
    assert abs(float(f"{loss:.3f}") - float(a.sum())) < 2e-3
    assert list(range(lt.tensor(3))) == [0, 1, 2]
    assert t.to("cpu") is t and t.cpu() is t and t.to(lt.float32) is t
    assert t.to(lt.float64).dtype == lt.float64
    with pytest.raises(lt.Error, match="cuda"):
        t.to("cuda")
    assert not lt.tensor(a, requires_grad=True).data.requires_grad
    np.testing.assert_allclose(lt.stack([t, t], 1).numpy(), np.stack([a, a], 1))
    np.testing.assert_allclose(lt.where(t > 0, t, 0.0).numpy(), np.where(a > 0, a, 0))
    np.testing.assert_allclose(lt.exp(t).numpy(), np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(lt.sum(t, 1).numpy(), a.astype(np.float64).sum(1), rtol=0,
                               atol=1e-6 * np.abs(a).sum(1).max())


def test_imported_arrays_are_released_when_the_engine_is_done():
    arrays = [np.full(8, float(i)) for i in range(200)]
    refs = [weakref.ref(a) for a in arrays]
    tensors = [lt.from_dlpack(a) for a in arrays]
    total = lt.stack(tensors).sum()
    del arrays, tensors
    assert total.item() == sum(8.0 * i for i in range(200))
    lt.wait_device_ops()
    lt.from_dlpack(np.ones(1))  # each import also drops what the engine has released
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_from_dlpack_copies_layouts_it_cannot_read_in_place(rng):
    a = rng.standard_normal((4, 6))
    t = lt.from_dlpack(a[:, ::2])
    np.testing.assert_array_equal(t.numpy(), a[:, ::2])
    assert not np.shares_memory(np.from_dlpack(t), a)
