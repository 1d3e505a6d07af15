"""torch.nn.utils.clip_grad_norm_."""
from .._C import Tensor
from .._C import clip_grad_norm_ as _clip


def clip_grad_norm_(parameters, max_norm):
    """Scales the gradients of ``parameters`` in place so that their global L2 norm is at most
    ``max_norm``; returns the norm before clipping as a 0-d tensor (nothing waits for it)."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    return _clip(grads, float(max_norm))
