"""Tensor methods of PyTorch's that are one or two of the engine's ops: new_* factories,
uniform_/normal_, masked_fill_, expand_as/view_as, any/all, and torch.outer."""
from ._C import Tensor, dtype

FLOATING_DTYPES = (dtype.float32, dtype.float64, dtype.bfloat16, dtype.float16)


def is_floating_point(self):
    return self.dtype in FLOATING_DTYPES


def _new(make):
    def method(self, *size, dtype=None, device=None, requires_grad=False):
        from . import _check_device
        _check_device(device, "new_tensor")
        if len(size) == 1 and isinstance(size[0], (list, tuple)):
            size = tuple(size[0])
        out = make(size, self.dtype if dtype is None else dtype)
        return out.requires_grad_() if requires_grad else out
    return method


def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    from . import full
    return full(tuple(size), fill_value, dtype=self.dtype if dtype is None else dtype,
                device=device, requires_grad=requires_grad)


def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    from . import tensor
    return tensor(data, dtype=self.dtype if dtype is None else dtype, device=device,
                  requires_grad=requires_grad)


def uniform_(self, a=0.0, b=1.0):
    from .nn.init import uniform_ as fill
    return fill(self, a, b)


def normal_(self, mean=0.0, std=1.0):
    from .nn.init import normal_ as fill
    return fill(self, mean, std)


def masked_fill_(self, mask, value):
    return self.copy_(self.masked_fill(mask, value))


def expand_as(self, other):
    return self.expand(*other.shape)


def view_as(self, other):
    return self.view(*other.shape)


def any(self, dim=None, keepdim=False):
    """Whether any element (along ``dim``) is nonzero, as bool."""
    nonzero = self.ne(0).sum() if dim is None else self.ne(0).sum(dim, keepdim)
    return nonzero.gt(0)


def all(self, dim=None, keepdim=False):
    """Whether every element (along ``dim``) is nonzero, as bool."""
    zero = self.eq(0).sum() if dim is None else self.eq(0).sum(dim, keepdim)
    return zero.eq(0)


def outer(input, vec2):
    """The outer product of two vectors, as torch.outer (RoPE's positions x frequencies)."""
    return input.reshape(-1, 1) * vec2.reshape(1, -1)


def attach():
    from . import empty, ones, zeros
    Tensor.new_zeros = _new(lambda size, dtype: zeros(*size, dtype=dtype))
    Tensor.new_ones = _new(lambda size, dtype: ones(*size, dtype=dtype))
    Tensor.new_empty = _new(lambda size, dtype: empty(*size, dtype=dtype))
    for fn in (new_full, new_tensor, uniform_, normal_, masked_fill_, expand_as, view_as, any, all,
               outer, is_floating_point):
        setattr(Tensor, fn.__name__, fn)
