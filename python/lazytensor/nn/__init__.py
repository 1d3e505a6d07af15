"""Modules with torch.nn's names: parameters registered by assignment, buffers by
register_buffer(), train()/eval(), named_parameters(), state_dict()/load_state_dict(), apply(),
to()."""
import math
from collections import OrderedDict

from .. import _C
from .._C import Tensor
from . import functional, init, utils  # noqa: F401
from .parameter import Parameter


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        params, modules = self.__dict__.get("_parameters"), self.__dict__.get("_modules")
        buffers = self.__dict__.get("_buffers")
        if isinstance(value, Parameter):
            modules.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            params.pop(name, None)
            modules[name] = value
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} as buffer '{name}' "
                                "(a Tensor or None is expected)")
            buffers[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as parameter '{name}' "
                                "(a Parameter or None is expected)")
            params[name] = None
        elif name in modules:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as child module '{name}' "
                                "(a Module or None is expected)")
            modules[name] = None
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        self._parameters.pop(name, None)
        self._buffers.pop(name, None)
        self._modules.pop(name, None)
        object.__delattr__(self, name)

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor the module keeps that is no parameter (a causal mask, running statistics);
        in state_dict() unless ``persistent`` is False."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: '{name}' must be a Tensor or None, "
                            f"got {type(tensor).__name__}")
        if name in self._parameters or name in self._modules:
            raise KeyError(f"register_buffer: '{name}' is already a parameter or module")
        self._buffers[name] = tensor
        (self._non_persistent.discard if persistent else self._non_persistent.add)(name)
        object.__setattr__(self, name, tensor)

    def register_parameter(self, name, param):
        setattr(self, name, param)

    def named_buffers(self, prefix=""):
        for module_name, module in self.named_modules(prefix):
            for name, b in module._buffers.items():
                if b is not None:
                    yield (f"{module_name}.{name}" if module_name else name), b

    def buffers(self):
        return (b for _, b in self.named_buffers())

    def apply(self, fn):
        """Calls ``fn`` on every submodule, children first, then on this module (as torch's)."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args, dtype=None, device=None, **kwargs):
        """module.to(device), .to(dtype), .to(tensor): the default device is where everything is
        already (another raises lazytensor.Error); a floating dtype casts the floating parameters
        and buffers in place."""
        from .. import _check_device, _C as engine
        for a in args:
            if isinstance(a, engine.dtype):
                dtype = a
            elif isinstance(a, Tensor):
                dtype = a.dtype
            else:
                device = a
        _check_device(device, "Module.to")
        if dtype is None:
            return self
        for m in self.modules():
            for name, p in m._parameters.items():
                if p is not None and _floating(p) and p.dtype != dtype:
                    cast = Parameter(p.detach().to(dtype), p.requires_grad)
                    m._parameters[name] = cast
                    object.__setattr__(m, name, cast)
            for name, b in m._buffers.items():
                if b is not None and _floating(b):
                    m._buffers[name] = b.to(dtype)
                    object.__setattr__(m, name, m._buffers[name])
        return self

    def cpu(self):
        return self

    def float(self):
        from .. import float32
        return self.to(float32)

    def bfloat16(self):
        from .. import bfloat16
        return self.to(bfloat16)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_modules(self, prefix="", memo=None):
        """Each module once (a module shared by two parents is listed where first met)."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self):
        return (m for _, m in self.named_modules())

    def children(self):
        return (m for m in self._modules.values() if m is not None)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """Each parameter once, under the first name it is met by (tied weights are one); with
        ``remove_duplicate=False``, under every name it has."""
        seen = set()
        modules = self.named_modules(prefix) if recurse else [(prefix, self)]
        for module_name, module in modules:
            for name, p in module._parameters.items():
                if p is not None and (not remove_duplicate or id(p) not in seen):
                    seen.add(id(p))
                    yield (f"{module_name}.{name}" if module_name else name), p

    def parameters(self):
        return (p for _, p in self.named_parameters())

    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def _persistent_buffers(self):
        for module_name, module in self.named_modules():
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    yield (f"{module_name}.{name}" if module_name else name), b

    def state_dict(self):
        """Parameters (a tied one under each of its names, as torch's) and persistent buffers,
        detached, by name."""
        state = OrderedDict((name, p.detach())
                            for name, p in self.named_parameters(remove_duplicate=False))
        state.update((name, b.detach()) for name, b in self._persistent_buffers())
        return state

    def load_state_dict(self, state, strict=True):
        """Copies ``state``'s tensors into the parameters and persistent buffers of the same
        names, after checking every shape (nothing is changed when one does not fit). A tied
        parameter is found under any of its names (torch's state dicts hold them all). Returns
        (missing, unexpected)."""
        own = dict(self.named_parameters(remove_duplicate=False))
        own.update(self._persistent_buffers())
        found = {id(t) for n, t in own.items() if n in state}
        missing = []
        for name, t in own.items():
            if id(t) not in found:
                missing.append(name)
                found.add(id(t))  # one name for each tensor the state lacks
        unexpected = [n for n in state if n not in own]
        if strict and (missing or unexpected):
            raise _C.Error(f"load_state_dict: missing {missing}, unexpected {unexpected}")
        for name, value in state.items():
            if name in own and tuple(own[name].shape) != tuple(value.shape):
                raise _C.Error(f"load_state_dict: {name} has shape {tuple(own[name].shape)}, "
                               f"the state has {tuple(value.shape)}")
        with _no_grad():
            for name, value in state.items():
                if name in own:
                    own[name].copy_(value if isinstance(value, Tensor) else _tensor(value))
        return missing, unexpected

    def __repr__(self):
        lines = [f"  ({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"

    def extra_repr(self):
        return ""


def _floating(t):
    return t.dtype.name in ("float32", "float64", "bfloat16", "float16")


def _no_grad():
    from .. import no_grad
    return no_grad()


def _tensor(value):
    from .. import tensor
    return tensor(value)


def _uniform(shape, bound):
    from .. import rand
    with _no_grad():
        return rand(*shape) * (2 * bound) - bound


class Linear(Module):
    """y = x W^T + b, initialized as torch.nn.Linear (uniform within 1/sqrt(in_features))."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.weight = Parameter(_uniform((out_features, in_features), bound))
        self.bias = Parameter(_uniform((out_features,), bound)) if bias else None

    def forward(self, x):
        return _C.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """Rows of a [num_embeddings, embedding_dim] table, N(0, 1) initialized; the padding row
    starts at zero and gets no gradient."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None):
        super().__init__()
        from .. import randn
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.padding_idx = padding_idx
        with _no_grad():
            weight = randn(num_embeddings, embedding_dim)
            if padding_idx is not None:
                from .. import arange
                keep = arange(num_embeddings).ne(padding_idx).unsqueeze(1).float()
                weight = weight * keep
        self.weight = Parameter(weight)

    def forward(self, ids):
        return _C.embedding(ids, self.weight, self.padding_idx)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        from .. import ones, zeros
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.weight = Parameter(ones(*self.normalized_shape)) if elementwise_affine else None
        self.bias = (Parameter(zeros(*self.normalized_shape)) if elementwise_affine and bias
                     else None)

    def forward(self, x):
        return _C.layer_norm(x, list(self.normalized_shape), self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return _C.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return _C.gelu(x, self.approximate)


class ReLU(Module):
    def forward(self, x):
        return x.relu()


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


class Sequential(Module):
    """Modules applied in order; given as arguments or as an OrderedDict of named modules."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                setattr(self, name, m)
        else:
            for i, m in enumerate(modules):
                setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)


class ModuleList(Module):
    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module):
        setattr(self, str(len(self._modules)), module)
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __iter__(self):
        return iter(self._modules.values())

    def __len__(self):
        return len(self._modules)


class CrossEntropyLoss(Module):
    def __init__(self, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__()
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        from .functional import cross_entropy
        return cross_entropy(input, target, ignore_index=self.ignore_index,
                             reduction=self.reduction, label_smoothing=self.label_smoothing)


class MSELoss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return _C.mse_loss(input, target, self.reduction)


class Identity(Module):
    """Returns its input (as torch.nn.Identity; constructor arguments are ignored)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.softmax(-1 if self.dim is None else self.dim)


class SiLU(Module):
    def forward(self, x):
        return functional.silu(x)


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing ``normalized_shape`` (as
    torch.nn.RMSNorm; eps=None means the dtype's machine epsilon)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        from .. import ones
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.weight = Parameter(ones(*self.normalized_shape)) if elementwise_affine else None

    def forward(self, x):
        return functional.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class ModuleDict(Module):
    """Child modules by name, as torch.nn.ModuleDict."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules):
        for name, m in (modules.items() if hasattr(modules, "items") else modules):
            setattr(self, name, m)

    def __getitem__(self, name):
        return self._modules[name]

    def __setitem__(self, name, module):
        setattr(self, name, module)

    def __contains__(self, name):
        return name in self._modules

    def __iter__(self):
        return iter(self._modules)

    def __len__(self):
        return len(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()
