"""topk, min, multinomial and cumsum made of the engine's ops, all on the device (sampling needs
no host round trip per token). topk takes k passes of a max over its input, and cumsum a
product with a triangle of ones: fine for a sampling step's k and a vocabulary's rows, not for
large sorts or long scans, which the engine has no routine for yet."""
import builtins as _builtins

from . import _C
from ._C import Tensor


class ValuesIndices(tuple):
    """(values, indices), also by name, as torch.return_types' pairs."""

    __slots__ = ()

    def __new__(cls, values, indices):
        return super().__new__(cls, (values, indices))

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])


class TopKResult(ValuesIndices):
    """(values, indices), also by name, as torch.return_types.topk."""

    __slots__ = ()


class MinResult(ValuesIndices):
    """(values, indices), also by name, as torch.return_types.min."""

    __slots__ = ()


def _positions(shape, dim):
    """Each element's position along ``dim``, shaped to broadcast against ``shape``."""
    from . import arange
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return arange(shape[dim]).reshape(*view)


def topk(input, k, dim=-1, largest=True, sorted=True):
    """As torch.topk: the k largest (or smallest) elements along ``dim`` and their positions,
    largest first; ties go to the first position. Differentiable in the values."""
    dim = dim % input.ndim
    size = input.shape[dim]
    if not 0 <= k <= size:
        raise _C.Error(f"topk: k = {k} is out of range for dim {dim} of size {size}")
    x = input if largest else -input
    positions = _positions(list(input.shape), dim)
    values, indices = [], []
    for _ in range(k):
        value, index = x.max(dim, True)
        values.append(value)
        indices.append(index)
        x = x.masked_fill(positions.eq(index), float("-inf"))
    from . import cat
    if not values:
        shape = list(input.shape)
        shape[dim] = 0
        from . import int64, zeros
        return TopKResult(zeros(*shape, dtype=input.dtype), zeros(*shape, dtype=int64))
    out = cat(values, dim)
    return TopKResult(out if largest else -out, cat(indices, dim))


def minimum_of(self, dim=None, keepdim=False):
    """The smallest element, or with ``dim`` the (values, indices) along it (first position on
    ties), as torch.min."""
    if dim is None:
        return -((-self).max())
    values, indices = (-self).max(dim, keepdim)
    return MinResult(-values, indices)


def multinomial(input, num_samples, replacement=False, generator=None):
    """As torch.multinomial over the last dim of non-negative weights [..., n]: ``num_samples``
    draws per row, int64. By the Gumbel-max trick: argmax of log(weights) plus Gumbel noise from
    the engine's generator is a draw from the normalized weights; without replacement, the top
    num_samples of the same sum are a draw without replacement."""
    if generator is not None:
        raise _C.Error("multinomial: generator= is not supported (lazytensor.manual_seed seeds "
                       "the engine's generator)")
    from . import cat, rand
    n = input.shape[-1]
    if not replacement and num_samples > n:
        raise _C.Error(f"multinomial: cannot draw {num_samples} samples without replacement "
                       f"from {n} categories")

    def gumbel():
        return -(-(rand(*input.shape, dtype=_C.dtype.float64) + 1e-300).log()).log()

    logits = input.to(_C.dtype.float64).log()
    if replacement or num_samples == 1:
        return cat([(logits + gumbel()).argmax(-1, True) for _ in range(num_samples)], -1)
    return topk(logits + gumbel(), num_samples, -1).indices


def cumsum(input, dim, dtype=None):
    """As torch.cumsum: running sums along ``dim`` (floating dtypes), by a product with a
    triangle of ones (n^2 work for n elements along dim)."""
    from . import ones, triu
    x = input if dtype is None else input.to(dtype)
    dim = dim % x.ndim
    n = x.shape[dim]
    moved = x.transpose(dim, -1) if dim != x.ndim - 1 else x
    summed = moved.matmul(triu(ones(n, n, dtype=x.dtype)))
    return summed.transpose(dim, -1) if dim != x.ndim - 1 else summed


def attach():
    Tensor.min = minimum_of
    Tensor.topk = topk
    Tensor.cumsum = cumsum
    Tensor.multinomial = multinomial
