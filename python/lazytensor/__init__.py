"""lazytensor: a lazy-tensor engine with PyTorch's API.

Ops are recorded into a graph instead of being run; ``lt.mark_step()`` cuts the graph, compiles
it once (cached by its structure) and runs it asynchronously while Python traces the next step.
Reading values (``item()``, ``numpy()``, ``tolist()``, ``str()``) waits for them.
"""
import os as _os
import sys as _sys

# How long the library threads wait awake when idle (the `lazytensor` command's reasons, in
# tools/main.cpp): the kernels run on oneDNN's OpenMP workers, which libgomp's default keeps
# spinning for about 3 ms after each product or launch, and OMP_WAIT_POLICY=PASSIVE puts to
# sleep (a wake-up of about 50 us before every launch); 30,000 turns of libgomp's wait loop keep
# them awake between launches only. OpenBLAS's thread server (f64 products, and bf16 ones where
# oneDNN has no bf16 kernel) yields for about 0.1 s after each product; 2^18 cycles (about
# 0.1 ms) still keeps its threads awake between back-to-back products. Both libraries read their
# setting once, as they load: so before any import that may load them (NumPy's BLAS can), and
# with effect only if nothing loaded them yet. They are the process's settings, so other OpenMP
# and OpenBLAS libraries loaded later wait the same way; a value the user set (for libgomp,
# either of its variables) is kept.
if "OMP_WAIT_POLICY" not in _os.environ:
    _os.environ.setdefault("GOMP_SPINCOUNT", "30000")
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "18")

import builtins as _builtins  # noqa: E402 (after the OpenMP setting, as all below)
import functools as _functools  # noqa: E402
import operator as _operator  # noqa: E402
import threading as _threading  # noqa: E402

import numpy as _np  # noqa: E402

from . import _C  # noqa: E402
from ._C import (  # noqa: E402, F401 (re-exported)
    Error,
    GeneratorState,
    IndexError,  # noqa: A004 (a lazytensor.Error that is also the builtin IndexError)
    Tensor,
    as_strided,
    as_strided_scatter,
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
    distributed,
    dtype,
    embedding,
    erf,
    front_end,
    generator_state,
    get_autocast_dtype,
    is_autocast_enabled,
    make_autocast_copies,
    is_grad_enabled,
    kernel_cache_dir,
    kernel_cache_entries,
    kernel_compiler,
    kernel_isa,
    last_recompile_reason,
    last_step_stats,
    live_ir_nodes,
    log_softmax,
    manual_seed,
    mark_step,
    matmul,
    matmul_isa,
    matmul_library,
    metrics,
    on_step_failure,
    promote_types,
    reset_peak_device_memory,
    row_groups,
    symbolic_sizes,
    safetensors,
    scalar_policy,
    set_auto_cut_nodes,
    set_compile_cache_size,
    set_data_cache_size,
    set_num_threads,
    get_num_threads,
    device_kinds,
    set_debug,
    set_device_memory_limit,
    set_front_end,
    set_trace_location_provider,
    set_generator_state,
    set_graph_warn_nodes,
    set_kernel_cache_bytes,
    set_kernel_cache_dir,
    set_kernel_compiler,
    set_max_kernel_ops,
    set_row_groups,
    set_symbolic_sizes,
    set_scalar_policy,
    set_special_scalars,
    set_tiered_compilation,
    softmax,
    special_scalars,
    stochastic_round,
    text,
    tiered_compilation,
    wait_device_ops,
    wait_kernel_compiles,
    where,
)
from ._device import backends, check_device as _check_device, cuda, device, mps  # noqa: E402,F401
from ._device import get_default_device, set_default_device  # noqa: E402,F401
from ._selection import ValuesIndices as _ValuesIndices  # noqa: E402

float32 = dtype.float32
float64 = dtype.float64
bfloat16 = dtype.bfloat16
float16 = dtype.float16
uint8 = dtype.uint8
int32 = dtype.int32
int64 = dtype.int64
bool = dtype.bool  # noqa: A001 (as torch.bool)
float = float32  # noqa: A001
double = float64
long = int64
int = int32  # noqa: A001

_NUMPY_OF = {float32: _np.float32, float64: _np.float64, int32: _np.int32, int64: _np.int64,
             bool: _np.bool_, float16: _np.float16, uint8: _np.uint8}


_builtin_int = _builtins.int
_builtin_bool = _builtins.bool


def _sizes(size):
    """Sizes as PyTorch's factories take them: zeros(2, 3) or zeros((2, 3)); ints only."""
    if len(size) == 1 and not hasattr(size[0], "__index__"):
        size = size[0]
    return [_operator.index(s) for s in size]


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A tensor holding a copy of ``data`` (a number, nested lists, a NumPy array or a tensor).

    As torch.tensor: Python floats become float32 and ints int64 unless ``dtype`` is given.
    """
    _check_device(device, "tensor")
    if isinstance(data, Tensor):
        t = data.detach().clone()
        return _finish(t if dtype is None else t.to(dtype), requires_grad)
    array = _np.asarray(data)
    if array.dtype.kind not in "fiub":
        raise TypeError(f"tensor: cannot make a tensor of {array.dtype} values")
    if array.dtype.kind == "u" and array.size and array.max() > _np.iinfo(_np.int64).max:
        raise OverflowError("tensor: a value does not fit in int64")
    if dtype is not None:
        if dtype == bfloat16:
            return _finish(_C._from_array(_np.require(array, _np.float32, "C")).to(dtype),
                           requires_grad)
        array = array.astype(_NUMPY_OF[dtype], copy=False)
    elif not isinstance(data, (_np.ndarray, _np.generic)):
        if array.dtype == _np.float64:
            array = array.astype(_np.float32)
        elif array.dtype.kind in "iu":
            array = array.astype(_np.int64)
    if (array.dtype.kind == "u" and array.dtype != _np.uint8) or array.dtype in (_np.int8, _np.int16):
        array = array.astype(_np.int64)
    return _finish(_C._from_array(_np.require(array, requirements="C")), requires_grad)


def from_numpy(array):
    """A tensor with a copy of ``array``'s values, keeping its dtype."""
    return _C._from_array(_np.require(array, requirements="C"))


def from_dlpack(ext_tensor):
    """A tensor over a DLPack producer's memory (torch.Tensor, NumPy array, ...): in place when it
    is C-contiguous host memory, else a copy in C order."""
    try:
        return _C.from_dlpack(ext_tensor)
    except Error as e:
        if "not C-contiguous" not in str(e):
            raise
    return tensor(_np.from_dlpack(ext_tensor))


# Factories take PyTorch's keywords: dtype=, device= (the default device: see lazytensor.device)
# and requires_grad=.

def zeros(*size, dtype=float32, device=None, requires_grad=False):
    _check_device(device, "zeros")
    return _finish(_C.zeros(_sizes(size), dtype), requires_grad)


def ones(*size, dtype=float32, device=None, requires_grad=False):
    _check_device(device, "ones")
    return _finish(_C.ones(_sizes(size), dtype), requires_grad)


def empty(*size, dtype=float32, device=None, requires_grad=False):
    """As torch.empty; its values are zeros here (an engine value is never uninitialized)."""
    _check_device(device, "empty")
    return _finish(_C.zeros(_sizes(size), dtype), requires_grad)


def full(size, fill_value, dtype=float32, device=None, requires_grad=False):
    _check_device(device, "full")
    return _finish(_C.full(_sizes((size,)), fill_value, dtype), requires_grad)


def _like(op, t, dtype, device, requires_grad, make):
    _check_device(device, op)
    return _finish(make(list(t.shape), t.dtype if dtype is None else dtype), requires_grad)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return _like("zeros_like", t, dtype, device, requires_grad, _C.zeros)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    """As torch.empty_like; zeros here."""
    return _like("empty_like", t, dtype, device, requires_grad, _C.zeros)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return _like("ones_like", t, dtype, device, requires_grad, _C.ones)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    return _like("full_like", t, dtype, device, requires_grad,
                 lambda shape, kind: _C.full(shape, fill_value, kind))


def rand_like(t, dtype=None, device=None, requires_grad=False):
    return _like("rand_like", t, dtype, device, requires_grad, _C.rand)


def randn_like(t, dtype=None, device=None, requires_grad=False):
    return _like("randn_like", t, dtype, device, requires_grad, _C.randn)


def randint(low, high=None, size=None, dtype=None, device=None, requires_grad=False):
    """As torch.randint: integers uniform in [low, high) (int64 unless ``dtype``), from the
    engine's generator. ``randint(high, size)`` counts from 0."""
    _check_device(device, "randint")
    if size is None:
        low, high, size = 0, low, high
    if high <= low:
        raise Error(f"randint: high ({high}) must be above low ({low})")
    draws = (_C.rand(_sizes((size,)), float64) * (high - low)).to(int64).to(float64) + low
    return _finish(draws.to(int64 if dtype is None else dtype), requires_grad)


def rand(*size, dtype=float32, device=None, requires_grad=False):
    """Uniform [0, 1) values from the engine's counter-based generator (lt.manual_seed)."""
    _check_device(device, "rand")
    return _finish(_C.rand(_sizes(size), dtype), requires_grad)


def randn(*size, dtype=float32, device=None, requires_grad=False):
    """Standard normal values from the engine's generator (lt.manual_seed)."""
    _check_device(device, "randn")
    return _finish(_C.randn(_sizes(size), dtype), requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    """As torch.arange: int64 when start, end and step are ints, float32 otherwise."""
    _check_device(device, "arange")
    if dtype is None:
        ints = all(isinstance(v, _builtin_int) for v in (start, end if end is not None else 0, step))
        dtype = int64 if ints else float32
    return _finish(_C.arange(start, end, step, dtype), requires_grad)


class no_grad:
    """Context manager (and decorator, with or without parentheses) under which no op is
    recorded for autograd."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)  # @lt.no_grad without parentheses

    def __enter__(self):
        self._previous = is_grad_enabled()
        _C.set_grad_enabled(False)

    def __exit__(self, *exc):
        _C.set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        wrapper.__name__ = getattr(fn, "__name__", "wrapper")
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        return wrapper


class inference_mode(no_grad):
    """As torch.inference_mode: no_grad (the engine keeps no version counters to skip)."""

    def __new__(cls, mode=True):
        if callable(mode):
            return cls()(mode)  # @lt.inference_mode without parentheses
        return super().__new__(cls)

    def __init__(self, mode=True):
        self._mode = mode

    def __enter__(self):
        self._previous = is_grad_enabled()
        _C.set_grad_enabled(self._previous and not self._mode)


class set_grad_enabled:
    """Sets grad mode now (as a function), or for a with-block (as a context manager, restoring
    the previous mode on exit), as torch.set_grad_enabled."""

    def __init__(self, mode):
        self._previous = is_grad_enabled()
        _C.set_grad_enabled(_builtins.bool(mode))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C.set_grad_enabled(self._previous)
        return False


class autocast:
    """Context manager (and decorator), as torch.autocast("cpu", dtype=torch.bfloat16): the
    matrix products traced inside (matmul, bmm, linear and the layers built on them) multiply
    bf16 copies of their float32 operands, sum in float32 and give float32 results; every other
    op keeps its operands' dtype. Unlike torch.autocast, a product's result is float32, not
    bfloat16 (the ops after it run fused with it in float32). A parameter's bf16 copy is kept
    and made again, inside the optimizer's update kernel, when the parameter is written.
    ``enabled=False`` (or dtype float32) turns autocast off inside an autocast region."""

    def __init__(self, device_type="cpu", dtype=None, enabled=True):
        if device_type != "cpu":
            raise Error(f"autocast: lazytensor's device is 'cpu', not {device_type!r}")
        self._dtype = (bfloat16 if dtype is None else dtype) if enabled else float32
        _C._AutocastScope(self._dtype)  # refuses a dtype autocast has no products for, now
        # A scope per entry, per thread: one object may be entered again while inside itself,
        # and from several threads (a decorated function), each restoring its own state.
        self._local = _threading.local()

    def __enter__(self):
        scope = _C._AutocastScope(self._dtype)
        scope.enter()
        if not hasattr(self._local, "scopes"):
            self._local.scopes = []
        self._local.scopes.append(scope)
        return self

    def __exit__(self, *exc):
        self._local.scopes.pop().exit()
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapper


class enable_grad(no_grad):
    """Context manager (and decorator) that records ops for autograd again."""

    def __enter__(self):
        self._previous = is_grad_enabled()
        _C.set_grad_enabled(True)


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
    """t[...] with ints, slices, None, Ellipsis, 1-D integer tensors and lists of ints (as
    x[:, [-1], :]), as views."""
    if not isinstance(index, tuple):
        index = (index,)
    index = tuple(_list_index(i, self, index[:d]) for d, i in enumerate(index))
    if _builtins.sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if _builtins.sum(1 for i in index if isinstance(i, Tensor)) > 1:
        raise IndexError("indexing with more than one tensor is not supported yet")
    if any(isinstance(i, (_builtin_bool, _np.bool_)) for i in index):
        raise IndexError("boolean indices are not supported yet")
    specified = _builtins.sum(1 for i in index if i is not None and i is not Ellipsis)
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


def _list_index(i, tensor, before):
    """A list of ints as the index tensor it stands for; negative entries count from the end of
    the dim they index (found when no Ellipsis comes before the list)."""
    if not isinstance(i, list):
        return i
    if not all(isinstance(k, _builtin_int) for k in i):
        raise IndexError("a list index must hold ints")
    if any(k < 0 for k in i):
        if any(b is Ellipsis for b in before):
            raise IndexError("negative entries of a list index after '...' are not supported")
        dim = _builtins.sum(1 for b in before if b is not None)
        size = tensor.shape[dim]
        if any(k < -size for k in i):
            raise IndexError(f"index {_builtins.min(i)} is out of range for dim {dim} of size {size}")
        i = [k % size for k in i]
    return _C._from_array(_np.asarray(i, dtype=_np.int64))


def _window(shape, index):
    """The sizes, strides and offset, in the elements of a contiguous tensor of ``shape``, of
    what ``t[index]`` selects (ints, slices, None and Ellipsis)."""
    if not isinstance(index, tuple):
        index = (index,)
    strides, stride = [], 1
    for size in reversed(shape):
        strides.insert(0, stride)
        stride *= size
    specified = _builtins.sum(1 for i in index if i is not None and i is not Ellipsis)
    if specified > len(shape):
        raise IndexError(f"too many indices for a tensor of rank {len(shape)}")
    sizes, out_strides, offset, dim = [], [], 0, 0
    for i in index:
        if i is Ellipsis:
            for _ in range(len(shape) - specified):
                sizes.append(shape[dim])
                out_strides.append(strides[dim])
                dim += 1
        elif i is None:
            sizes.append(1)
            out_strides.append(0)
        elif isinstance(i, slice):
            start, stop, step = i.indices(shape[dim])
            if step <= 0:
                raise ValueError("slices need a positive step")
            sizes.append(_builtins.max(0, -(-(stop - start) // step)))
            out_strides.append(strides[dim] * step)
            offset += start * strides[dim]
            dim += 1
        else:
            try:
                k = i.__index__()
            except AttributeError:
                raise IndexError(f"assignment through index {i!r} is not supported (ints, "
                                 "slices, None, ... and a boolean mask of the tensor's shape are)") from None
            if k < -shape[dim] or k >= shape[dim]:
                raise IndexError(f"index {k} is out of range for dim {dim} of size {shape[dim]}")
            offset += (k % shape[dim]) * strides[dim]
            dim += 1
    for d in range(dim, len(shape)):
        sizes.append(shape[d])
        out_strides.append(strides[d])
    return sizes, out_strides, offset


def _setitem(self, index, value):
    """t[index] = value, in place, as a traced op: ints, slices, None and ``...`` select a window
    that takes ``value`` (a number or a tensor that broadcasts to it); a boolean tensor of t's
    shape selects the elements that take it (masked assignment)."""
    if isinstance(index, Tensor) and index.dtype == bool:
        if tuple(index.shape) != tuple(self.shape):
            raise IndexError(f"a boolean mask of shape {tuple(index.shape)} for a tensor of shape "
                             f"{tuple(self.shape)} (it must be the tensor's)")
        updated = where(index, value, self)
    else:
        sizes, strides, offset = _window(list(self.shape), index)
        src = value if isinstance(value, Tensor) else full(sizes, value, dtype=self.dtype)
        if tuple(src.shape) != tuple(sizes):
            src = src.expand(*sizes)
        updated = as_strided_scatter(self, src, sizes, strides, offset)
    try:
        self.copy_(updated)
    except Error as e:
        raise Error(f"t[...] = value: {e}") from None


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


class MaxResult(_ValuesIndices):
    """t.max(dim): (values, indices), also by name, as torch.return_types.max."""

    __slots__ = ()


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


_engine_to = Tensor.to
_device_type = device


def _to(self, *args, dtype=None, device=None, copy=False, non_blocking=False,
        memory_format=None):
    """t.to(dtype), t.to("cpu"), t.to(other): the dtype changes; the device must be the tensor's
    own (``non_blocking`` and ``memory_format`` change nothing here)."""
    for a in args:
        if isinstance(a, _C.dtype):
            dtype = a
        elif isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, (str, _device_type)):
            device = a
        else:
            raise TypeError(f"to: unexpected argument {a!r}")
    _check_device(device, "to", self.device)
    if dtype is None or dtype == self.dtype:
        return self.clone() if copy else self
    return _engine_to(self, dtype)


def _format(self, spec):
    """f"{loss:.4f}": a one-element tensor formats as its value (waits for it)."""
    if self.numel() == 1:
        return format(self.item(), spec)
    return format(str(self), spec)


def _cpu(self):
    """The tensor itself: CPU devices are the only ones."""
    return self


def _pin_memory(self):
    """The tensor itself: a CPU device's memory is the host's."""
    return self


def _index_value(self):
    if self.numel() != 1 or self.dtype not in (int64, int32):
        raise TypeError("only integer tensors of a single element can be used as an index")
    return self.item()


Tensor.__getitem__ = _index
Tensor.__setitem__ = _setitem
Tensor.__repr__ = _repr
Tensor.__str__ = _str
Tensor.__array__ = _array
Tensor.__iter__ = _iter
Tensor.tolist = _tolist
Tensor.type_as = _type_as
Tensor.max = _max
Tensor.to = _to
Tensor.cpu = _cpu
Tensor.pin_memory = _pin_memory
Tensor.__format__ = _format
Tensor.__index__ = _index_value
# NumPy on the left of an operator defers to the tensor's reflected operator instead of
# turning the tensor into an array (which would leave autograd and wait for the device).
Tensor.__array_ufunc__ = None


def where(condition, input, other):
    """torch.where; input and other may be numbers (a float one with an integer or bool tensor
    makes the result float32, as PyTorch's promotion does)."""
    like = input if isinstance(input, Tensor) else other if isinstance(other, Tensor) else None
    kind = like.dtype if like is not None else float32
    if any(isinstance(v, _builtins.float) for v in (input, other)) and \
            kind not in _FLOATING_DTYPES:
        kind = float32

    def as_tensor(v):
        return v if isinstance(v, Tensor) else _C.full([], _builtins.float(v), kind)

    return _C.where(condition, as_tensor(input), as_tensor(other))


def stack(tensors, dim=0):
    """torch.stack: the tensors joined along a new dim."""
    tensors = list(tensors)
    if not tensors:
        raise Error("stack: expects a non-empty list of tensors")
    if dim < 0:
        dim += tensors[0].ndim + 1
    return cat([t.unsqueeze(dim) for t in tensors], dim)


def _method_as_function(name):
    def function(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)
    function.__name__ = name
    function.__doc__ = f"torch.{name}: the same as Tensor.{name}."
    return function


for _name in _C._unary_functions + (
              "sum", "mean", "amax", "argmax", "norm", "var", "logsumexp", "clamp", "pow",
              "maximum", "minimum", "lerp", "addcmul", "addcdiv", "reshape", "flatten", "transpose",
              "add", "sub", "mul", "floor_divide", "remainder", "bitwise_and", "bitwise_or",
              "bitwise_xor", "bitwise_not",
              "permute", "unsqueeze", "squeeze", "narrow", "select", "index_select",
              "masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "clone", "detach"):
    globals()[_name] = _method_as_function(_name)

from ._math import div, isfinite, isinf, isnan, log1p, square, std  # noqa: E402
from ._math import logical_and, logical_not, logical_or, logical_xor  # noqa: E402
from ._math import attach as _attach_math  # noqa: E402
from ._pieces import chunk, flip, repeat, roll, split, tril, triu, unbind  # noqa: E402
from ._selection import argsort, cumsum, gather, multinomial, randperm, sort  # noqa: E402
from ._selection import take_along_dim, topk  # noqa: E402
from ._selection import attach as _attach_selection  # noqa: E402
from ._einsum import einsum  # noqa: E402
from ._tensor_methods import FLOATING_DTYPES as _FLOATING_DTYPES, outer  # noqa: E402
from ._tensor_methods import attach as _attach_tensor_methods  # noqa: E402
from .serialization import load, save  # noqa: E402
from ._pieces import attach as _attach_pieces  # noqa: E402

_attach_pieces()
_attach_math()
_attach_selection()
_attach_tensor_methods()

from . import nn, optim  # noqa: E402  (they use the names above)
from . import amp  # noqa: E402

cuda.amp = amp

_PACKAGE_DIR = _os.path.dirname(_os.path.abspath(__file__))


def _traced_at():
    """The innermost frame outside this package: where the user's code called the op (asked
    per op only while LT_DEBUG is on, for recompile reasons)."""
    frame = _sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""


set_trace_location_provider(_traced_at)

# `from lazytensor import *` must not shadow Python's builtins (bool, int, float, sum, abs, ...).
__all__ = [name for name in dir()
           if not name.startswith("_") and not hasattr(_builtins, name) and name not in
           ("double", "long")]
