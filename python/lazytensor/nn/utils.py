"""torch.nn.utils.clip_grad_norm_."""
import math

from .. import _C
from .._C import Tensor
from .._C import clip_grad_norm_ as _clip


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients of ``parameters`` in place so that their global L2 norm is at most
    ``max_norm``; returns the norm before clipping as a 0-d tensor (nothing waits for it).
    ``error_if_nonfinite=True`` reads the norm on the host first (the step waits for it) and
    raises, changing nothing, when it is NaN or infinite, as PyTorch does. Only the L2 norm is
    supported; ``foreach`` is accepted (the clipping is one fused launch either way)."""
    if float(norm_type) != 2.0:
        raise _C.Error(f"clip_grad_norm_: norm_type {norm_type} is not supported (only 2.0)")
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if error_if_nonfinite and grads:
        total = sum(g.to(_C.dtype.float64).pow(2).sum() for g in grads).sqrt().item()
        if not math.isfinite(total):
            raise RuntimeError(f"The total norm of order 2.0 for gradients from `parameters` is "
                               f"non-finite ({total}), so it cannot be clipped.")
    return _clip(grads, float(max_norm))
