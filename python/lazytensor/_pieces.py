"""torch's ops that cut a tensor into pieces, rearrange them or keep a triangle of it: split,
chunk, unbind, repeat, flip, roll, tril, triu. Views, gathers and masks over the engine's ops,
with their gradients."""
import builtins as _builtins

from . import _C
from ._C import Tensor


def split(tensor, split_size_or_sections, dim=0):
    """As torch.split: views of ``split_size`` elements along ``dim`` (the last may be shorter),
    or of the listed sizes, which must add up to the dim's size."""
    size = tensor.shape[dim]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0:
            raise ValueError(f"split: split_size must be positive, got {step}")
        sections = [_builtins.min(step, size - start) for start in range(0, size, step)] or [0]
    else:
        sections = [int(s) for s in split_size_or_sections]
        if _builtins.sum(sections) != size or _builtins.any(s < 0 for s in sections):
            raise _C.Error(f"split: sections {sections} do not add up to dim {dim}'s size {size}")
    pieces, start = [], 0
    for length in sections:
        pieces.append(tensor.narrow(dim, start, length))
        start += length
    return tuple(pieces)


def chunk(tensor, chunks, dim=0):
    """As torch.chunk: at most ``chunks`` views of ceil(size / chunks) elements along ``dim``."""
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    size = tensor.shape[dim]
    return split(tensor, _builtins.max(1, -(-size // chunks)), dim) if size else (tensor,)


def unbind(tensor, dim=0):
    """As torch.unbind: the slices along ``dim``, without it."""
    return tuple(tensor.select(dim, i) for i in range(tensor.shape[dim]))


def repeat(tensor, *sizes):
    """As torch.Tensor.repeat: the tensor tiled sizes[d] times along each dim (leading sizes
    add dims)."""
    if len(sizes) == 1 and not isinstance(sizes[0], int):
        sizes = tuple(sizes[0])
    if len(sizes) < tensor.ndim:
        raise _C.Error(f"repeat: {len(sizes)} sizes for a tensor of {tensor.ndim} dims")
    shape = [1] * (len(sizes) - tensor.ndim) + list(tensor.shape)
    # Each dim d becomes (sizes[d], shape[d]): the copies outside, the elements inside.
    interleaved, expanded = [], []
    for times, size in zip(sizes, shape):
        interleaved += [1, size]
        expanded += [times, size]
    tiled = tensor.reshape(*interleaved).expand(*expanded)
    return tiled.reshape(*[times * size for times, size in zip(sizes, shape)])


def flip(tensor, dims):
    """As torch.flip: the elements in reverse order along each of ``dims``."""
    from . import arange
    out = tensor
    for dim in ([dims] if isinstance(dims, int) else dims):
        n = out.shape[dim]
        out = out.index_select(dim, arange(n - 1, -1, -1)) if n > 1 else out
    return out


def roll(tensor, shifts, dims=None):
    """As torch.roll: elements shifted along ``dims`` (the flattened tensor when None), those
    that leave one end coming back at the other."""
    from . import cat
    if dims is None:
        return roll(tensor.reshape(-1), shifts, 0).reshape(*tensor.shape)
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(shifts) != len(dims):
        raise _C.Error(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    out = tensor
    for shift, dim in zip(shifts, dims):
        n = out.shape[dim]
        if n == 0 or shift % n == 0:
            continue
        k = shift % n
        out = cat([out.narrow(dim, n - k, k), out.narrow(dim, 0, n - k)], dim)
    return out


def outside_triangle(rows, cols, diagonal=0, lower=True):
    """True where a [rows, cols] matrix's element lies outside its lower (or upper) triangle
    from the ``diagonal``-th diagonal: col - row > diagonal (lower) or < diagonal (upper). A
    causal attention mask is outside_triangle(T, T)."""
    from . import arange
    row = arange(rows, dtype=_C.dtype.float64).reshape(rows, 1)
    col = arange(cols, dtype=_C.dtype.float64).reshape(1, cols)
    return (col - row).gt(diagonal) if lower else (col - row).lt(diagonal)


def _triangle(tensor, diagonal, lower, op):
    if tensor.ndim < 2:
        raise _C.Error(f"{op}: needs a tensor of at least 2 dims, got {tensor.ndim}")
    outside = outside_triangle(tensor.shape[-2], tensor.shape[-1], diagonal, lower)
    return tensor.masked_fill(outside, 0)


def tril(tensor, diagonal=0):
    """As torch.tril: zeros above the ``diagonal``-th diagonal of the last two dims."""
    return _triangle(tensor, diagonal, True, "tril")


def triu(tensor, diagonal=0):
    """As torch.triu: zeros below the ``diagonal``-th diagonal of the last two dims."""
    return _triangle(tensor, diagonal, False, "triu")


def attach():
    for fn in (split, chunk, unbind, repeat, flip, roll, tril, triu):
        setattr(Tensor, fn.__name__, fn)
