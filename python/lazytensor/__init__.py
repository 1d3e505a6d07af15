"""lazytensor: a lazy-tensor engine with PyTorch's API.

Ops are recorded into a graph instead of being run; ``lt.mark_step()`` cuts the graph, compiles
it once (cached by its structure) and runs it asynchronously while Python traces the next step.
Reading values (``item()``, ``numpy()``, ``tolist()``, ``str()``) waits for them.
"""
import builtins as _builtins

import numpy as _np

from . import _C
from ._C import (  # noqa: F401 (re-exported)
    Error,
    GeneratorState,
    Tensor,
    bmm,
    cat,
    clear_compile_caches,
    compile_cache_entries,
    data,
    compile_cache_size,
    compiles_per_step,
    data_cache_size,
    debug,
    device_memory_stats,
    dtype,
    embedding,
    erf,
    from_dlpack,
    generator_state,
    is_grad_enabled,
    kernel_cache_dir,
    kernel_cache_entries,
    kernel_compiler,
    last_recompile_reason,
    last_step_stats,
    live_ir_nodes,
    log_softmax,
    manual_seed,
    mark_step,
    matmul,
    metrics,
    promote_types,
    reset_peak_device_memory,
    row_groups,
    safetensors,
    scalar_policy,
    set_auto_cut_nodes,
    set_compile_cache_size,
    set_data_cache_size,
    set_debug,
    set_device_memory_limit,
    set_generator_state,
    set_grad_enabled,
    set_graph_warn_nodes,
    set_kernel_cache_bytes,
    set_kernel_cache_dir,
    set_kernel_compiler,
    set_max_kernel_ops,
    set_row_groups,
    set_scalar_policy,
    set_special_scalars,
    set_tiered_compilation,
    softmax,
    special_scalars,
    text,
    tiered_compilation,
    wait_device_ops,
    wait_kernel_compiles,
    where,
    zeros_like,
)

float32 = dtype.float32
float64 = dtype.float64
bfloat16 = dtype.bfloat16
float16 = dtype.float16
int32 = dtype.int32
int64 = dtype.int64
bool = dtype.bool  # noqa: A001 (as torch.bool)
float = float32  # noqa: A001
double = float64
long = int64
int = int32  # noqa: A001

_NUMPY_OF = {float32: _np.float32, float64: _np.float64, int32: _np.int32, int64: _np.int64,
             bool: _np.bool_}


_builtin_int = _builtins.int


def _sizes(size):
    """Sizes as PyTorch's factories take them: zeros(2, 3) or zeros((2, 3))."""
    if len(size) == 1 and not isinstance(size[0], _builtin_int):
        return [_builtin_int(s) for s in size[0]]
    return [_builtin_int(s) for s in size]


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(data, dtype=None, requires_grad=False):
    """A tensor holding a copy of ``data`` (a number, nested lists, a NumPy array or a tensor).

    As torch.tensor: Python floats become float32 and ints int64 unless ``dtype`` is given.
    """
    if isinstance(data, Tensor):
        t = data.detach().clone()
        return _finish(t if dtype is None else t.to(dtype), requires_grad)
    array = _np.asarray(data)
    if dtype is not None:
        if dtype in (bfloat16, float16):
            return _finish(_C._from_array(_np.require(array, _np.float32, "C")).to(dtype),
                           requires_grad)
        array = array.astype(_NUMPY_OF[dtype], copy=False)
    elif not isinstance(data, _np.ndarray):
        if array.dtype == _np.float64:
            array = array.astype(_np.float32)
        elif array.dtype.kind in "iu":
            array = array.astype(_np.int64)
    if array.dtype.kind == "u" or array.dtype == _np.int8 or array.dtype == _np.int16:
        array = array.astype(_np.int64)
    elif array.dtype == _np.float16:
        array = array.astype(_np.float32)
    return _finish(_C._from_array(_np.require(array, requirements="C")), requires_grad)


def from_numpy(array):
    """A tensor with a copy of ``array``'s values, keeping its dtype."""
    return _C._from_array(_np.require(array, requirements="C"))


def zeros(*size, dtype=float32, requires_grad=False):
    return _finish(_C.zeros(_sizes(size), dtype), requires_grad)


def ones(*size, dtype=float32, requires_grad=False):
    return _finish(_C.ones(_sizes(size), dtype), requires_grad)


def full(size, fill_value, dtype=float32, requires_grad=False):
    return _finish(_C.full(_sizes((size,)), fill_value, dtype), requires_grad)


def ones_like(t, dtype=None):
    return _C.ones(list(t.shape), t.dtype if dtype is None else dtype)


def full_like(t, fill_value, dtype=None):
    return _C.full(list(t.shape), fill_value, t.dtype if dtype is None else dtype)


def rand(*size, dtype=float32, requires_grad=False):
    """Uniform [0, 1) values from the engine's counter-based generator (lt.manual_seed)."""
    return _finish(_C.rand(_sizes(size), dtype), requires_grad)


def randn(*size, dtype=float32, requires_grad=False):
    """Standard normal values from the engine's generator (lt.manual_seed)."""
    return _finish(_C.randn(_sizes(size), dtype), requires_grad)


def arange(start, end=None, step=1, dtype=None):
    """As torch.arange: int64 when start, end and step are ints, float32 otherwise."""
    if dtype is None:
        ints = all(isinstance(v, _builtin_int) for v in (start, end if end is not None else 0, step))
        dtype = int64 if ints else float32
    return _C.arange(start, end, step, dtype)


class no_grad:
    """Context manager (and decorator) under which no op is recorded for autograd."""

    def __enter__(self):
        self._previous = is_grad_enabled()
        set_grad_enabled(False)

    def __exit__(self, *exc):
        set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        wrapper.__name__ = getattr(fn, "__name__", "wrapper")
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        return wrapper


class enable_grad(no_grad):
    """Context manager (and decorator) that records ops for autograd again."""

    def __enter__(self):
        self._previous = is_grad_enabled()
        set_grad_enabled(True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=False, allow_unused=False):
    """As torch.autograd.grad: the gradients of ``outputs`` with respect to ``inputs``."""
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    gos = None
    if grad_outputs is not None:
        gos = [grad_outputs] if isinstance(grad_outputs, Tensor) else list(grad_outputs)
    return tuple(_C.grad(outs, ins, gos, retain_graph, allow_unused))


# --- Tensor methods that are simpler in Python --------------------------------------------

def _index(self, index):
    """t[...] with ints, slices, None, Ellipsis and 1-D integer tensors, as views."""
    if not isinstance(index, tuple):
        index = (index,)
    specified = sum(1 for i in index if i is not None and i is not Ellipsis)
    if specified > self.ndim:
        raise IndexError(f"too many indices for a tensor of rank {self.ndim}")
    out, dim = self, 0
    for i in index:
        if i is Ellipsis:
            dim += self.ndim - specified
        elif i is None:
            out = out.unsqueeze(dim)
            dim += 1
        elif isinstance(i, slice):
            start, stop, step = i.indices(out.shape[dim])
            if step <= 0:
                raise ValueError("slices need a positive step")
            out = out.slice(dim, start, max(start, stop), step)
            dim += 1
        elif isinstance(i, Tensor):
            if i.ndim != 1 or i.dtype not in (int64, int32):
                raise IndexError("a tensor index must be a 1-D int64 or int32 tensor")
            out = out.index_select(dim, i)
            dim += 1
        else:
            try:
                k = i.__index__()
            except AttributeError:
                raise TypeError(f"unsupported index {i!r}") from None
            size = out.shape[dim]
            if k < -size or k >= size:
                raise IndexError(f"index {k} is out of range for dim {dim} of size {size}")
            out = out.select(dim, k % size)
    return out


def _repr(self):
    """Shape and dtype; never waits for the device (str() shows values)."""
    state = ", pending" if self.is_pending else ""
    return f"tensor(shape={tuple(self.shape)}, dtype={self.dtype.name}, device='{self.device}'{state})"


def _str(self):
    values = _np.array2string(self.numpy(), separator=", ", prefix="tensor(")
    extra = "" if self.dtype in (float32, int64) else f", dtype={self.dtype.name}"
    if self.requires_grad:
        extra += ", requires_grad=True"
    return f"tensor({values}{extra})"


def _array(self, dtype=None, copy=None):
    array = self.numpy()
    return array if dtype is None else array.astype(dtype)


class MaxResult(tuple):
    """t.max(dim): (values, indices), also by name, as torch.return_types.max."""

    __slots__ = ()

    def __new__(cls, values, indices):
        return super().__new__(cls, (values, indices))

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])


_engine_max = Tensor.max


def _max(self, dim=None, keepdim=False):
    """The largest element, or with ``dim`` the (values, indices) along it."""
    result = _engine_max(self, dim, keepdim)
    return result if dim is None else MaxResult(*result)


def _tolist(self):
    """The values as nested Python lists (waits for them)."""
    return self.numpy().tolist()


def _iter(self):
    return (self[i] for i in range(len(self)))


def _type_as(self, other):
    return self.to(other.dtype)


Tensor.__getitem__ = _index
Tensor.__repr__ = _repr
Tensor.__str__ = _str
Tensor.__array__ = _array
Tensor.__iter__ = _iter
Tensor.tolist = _tolist
Tensor.type_as = _type_as
Tensor.max = _max

from . import nn, optim  # noqa: E402  (they use the names above)

__all__ = [name for name in dir() if not name.startswith("_")]
