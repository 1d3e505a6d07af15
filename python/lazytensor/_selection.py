"""Sorting, selection and sampling on the device (sampling needs no host round trip per token):
sort, argsort, topk, take_along_dim/gather, cumsum, min, multinomial and randperm, with
PyTorch's signatures and named results."""
from . import _C
from ._C import Tensor


class ValuesIndices(tuple):
    """(values, indices), also by name, as torch.return_types' pairs."""

    __slots__ = ()

    def __new__(cls, values, indices):
        return super().__new__(cls, (values, indices))

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])


class SortResult(ValuesIndices):
    """(values, indices), also by name, as torch.return_types.sort."""

    __slots__ = ()


class TopKResult(ValuesIndices):
    """(values, indices), also by name, as torch.return_types.topk."""

    __slots__ = ()


class MinResult(ValuesIndices):
    """(values, indices), also by name, as torch.return_types.min."""

    __slots__ = ()


def argsort(input, dim=-1, descending=False, stable=False):
    """As torch.argsort: the positions that sort ``input`` along ``dim``. Always stable (equal
    elements keep their order), so ``stable`` changes nothing; NaN sorts above every number."""
    return _C._argsort(input, dim, descending)


def sort(input, dim=-1, descending=False, stable=False):
    """As torch.sort: (values, indices), stable; the values carry gradients."""
    indices = _C._argsort(input, dim, descending)
    return SortResult(_C._take_along_dim(input, indices, dim), indices)


def topk(input, k, dim=-1, largest=True, sorted=True):
    """As torch.topk: the k largest (or smallest) elements along ``dim``, largest (smallest)
    first, and their positions; ties keep their order. Differentiable in the values."""
    dim = dim % max(input.ndim, 1)
    size = input.shape[dim] if input.ndim else 1
    if not 0 <= k <= size:
        raise _C.Error(f"topk: k = {k} is out of range for dim {dim} of size {size}")
    indices = _C._argsort(input, dim, largest)
    if input.ndim:
        indices = indices.narrow(dim, 0, k)
    return TopKResult(_C._take_along_dim(input, indices, dim), indices)


def take_along_dim(input, indices, dim):
    """As torch.take_along_dim: the elements at ``indices`` along ``dim``."""
    return _C._take_along_dim(input, indices, dim)


def gather(input, dim, index):
    """As torch.gather, for an index whose other dims are the input's."""
    return _C._take_along_dim(input, index, dim)


def cumsum(input, dim, dtype=None):
    """As torch.cumsum: running sums along ``dim`` (floating values accumulated in f64, integer
    and bool ones in i64)."""
    x = input if dtype is None else input.to(dtype)
    return _C._cumsum(x, dim)


def minimum_of(self, dim=None, keepdim=False):
    """The smallest element, or with ``dim`` the (values, indices) along it (first position on
    ties), as torch.min: the largest of the negated values, negated back; integers and bool
    negate with ~, which never overflows (-x - 1, logical not)."""
    from ._tensor_methods import FLOATING_DTYPES
    floating = self.dtype in FLOATING_DTYPES

    def negate(t):
        return -t if floating else ~t

    if dim is None:
        return negate(negate(self).max())
    values, indices = negate(self).max(dim, keepdim)
    return MinResult(negate(values), indices)


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


def randperm(n, dtype=None, device=None, requires_grad=False, generator=None):
    """As torch.randperm: a random permutation of 0..n-1 (int64), the order of n uniform draws
    from the engine's generator."""
    from . import _check_device, int64, rand
    if generator is not None:
        raise _C.Error("randperm: generator= is not supported (lazytensor.manual_seed seeds "
                       "the engine's generator)")
    _check_device(device, "randperm")
    order = _C._argsort(rand(n, dtype=_C.dtype.float64), 0, False)
    return order if dtype in (None, int64) else order.to(dtype)


def attach():
    Tensor.min = minimum_of
    Tensor.topk = topk
    Tensor.sort = sort
    Tensor.argsort = argsort
    Tensor.cumsum = cumsum
    Tensor.take_along_dim = take_along_dim
    Tensor.gather = gather
    Tensor.multinomial = multinomial
