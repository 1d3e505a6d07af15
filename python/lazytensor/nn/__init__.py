"""Modules with torch.nn's names: parameters registered by assignment, train()/eval(),
named_parameters(), state_dict()/load_state_dict()."""
import math
from collections import OrderedDict

from .. import _C
from .._C import Tensor
from . import functional, utils  # noqa: F401
from .parameter import Parameter


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        params, modules = self.__dict__.get("_parameters"), self.__dict__.get("_modules")
        if isinstance(value, Parameter):
            modules.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            params.pop(name, None)
            modules[name] = value
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
        self._modules.pop(name, None)
        object.__delattr__(self, name)

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

    def named_parameters(self, prefix=""):
        """Each parameter once, under the first name it is met by (tied weights are one)."""
        seen = set()
        for module_name, module in self.named_modules(prefix):
            for name, p in module._parameters.items():
                if p is not None and id(p) not in seen:
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

    def state_dict(self):
        return OrderedDict((name, p.detach()) for name, p in self.named_parameters())

    def load_state_dict(self, state, strict=True):
        """Copies ``state``'s tensors into the parameters of the same names, after checking every
        shape (nothing is changed when one does not fit). Returns (missing, unexpected)."""
        own = dict(self.named_parameters())
        missing = [n for n in own if n not in state]
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
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True):
        super().__init__()
        from .. import ones, zeros
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.weight = Parameter(ones(*self.normalized_shape)) if elementwise_affine else None
        self.bias = Parameter(zeros(*self.normalized_shape)) if elementwise_affine else None

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
    def __init__(self, ignore_index=-100, reduction="mean"):
        super().__init__()
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, input, target):
        return _C.cross_entropy(input, target, self.ignore_index, self.reduction)


class MSELoss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return _C.mse_loss(input, target, self.reduction)
