"""torch.nn.functional's names over the engine's ops."""
from .. import _C
from .._C import (  # noqa: F401
    embedding,
    gelu,
    layer_norm,
    linear,
    log_softmax,
    mse_loss,
    softmax,
)
from .._C import cross_entropy as _cross_entropy
from .._C import dropout as _dropout
from .._C._activations import *  # noqa: F401,F403 (the activations of elementwise_ops.def)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """As torch.nn.functional.cross_entropy over class ids: logits [N, C] (or [C]) and ids [N].
    With ``label_smoothing`` e the target is (1 - e) on the class and e / C spread over all C
    classes: the loss is (1 - e) times the class's loss plus e times the mean over the classes
    of -log_softmax. Class weights, probabilities as targets and the legacy size_average/reduce
    are not supported."""
    if weight is not None or size_average is not None or reduce is not None:
        raise _C.Error("cross_entropy: weight, size_average and reduce are not supported")
    if not 0.0 <= label_smoothing <= 1.0:
        raise _C.Error(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if label_smoothing == 0.0:
        return _cross_entropy(input, target, ignore_index, reduction)
    nll = _cross_entropy(input, target, ignore_index, "none")
    kept = target.ne(ignore_index).to(nll.dtype)
    smooth = -input.log_softmax(-1).mean(-1) * kept
    loss = nll * (1.0 - label_smoothing) + smooth * label_smoothing
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / kept.sum()
    raise _C.Error(f"cross_entropy: unknown reduction '{reduction}'")


def dropout(input, p=0.5, training=True):
    return _dropout(input, p, training)


def relu(input):
    return input.relu()


def tanh(input):
    return input.tanh()


def sigmoid(input):
    return input.sigmoid()


def silu(input):
    """x * sigmoid(x) (SiLU, Swish)."""
    return input * input.sigmoid()


def one_hot(tensor, num_classes=-1):
    """As torch.nn.functional.one_hot: int64 [..., num_classes] with a 1 at each id (ids read
    on the host only when num_classes is -1, to find the largest)."""
    from .. import arange, float64, int64
    if num_classes < 0:
        num_classes = int(tensor.to(float64).max().item()) + 1
    return tensor.unsqueeze(-1).eq(arange(num_classes)).to(int64)


def pad(input, pad, mode="constant", value=0.0):
    """As torch.nn.functional.pad in "constant" mode: ``pad`` lists (before, after) counts from
    the last dim backwards; negative counts crop."""
    from .. import cat, full
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r} (only 'constant' so far)")
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: {len(pad)} counts do not fit a tensor of {input.ndim} dims")
    out = input
    for k in range(len(pad) // 2):
        dim, before, after = input.ndim - 1 - k, pad[2 * k], pad[2 * k + 1]
        if before < 0:
            out = out.narrow(dim, -before, out.shape[dim] + before)
        if after < 0:
            out = out.narrow(dim, 0, out.shape[dim] + after)
        pieces = []
        for count in (before, None, after):
            if count is None:
                pieces.append(out)
            elif count > 0:
                shape = list(out.shape)
                shape[dim] = count
                pieces.append(full(shape, value, dtype=out.dtype))
        out = cat(pieces, dim) if len(pieces) > 1 else out
    return out


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2 over the trailing normalized_shape) + eps) * weight."""
    dims = list(range(-len(tuple(normalized_shape)), 0))
    eps = _EPSILON[input.dtype.name] if eps is None else eps
    out = input * ((input * input).mean(dims, keepdim=True) + eps).rsqrt()
    return out if weight is None else out * weight


# Machine epsilon per floating dtype (torch.finfo(dtype).eps).
_EPSILON = {"float32": 2.0 ** -23, "float64": 2.0 ** -52, "bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}


def nll_loss(input, target, ignore_index=-100, reduction="mean"):
    """As torch.nn.functional.nll_loss over log-probabilities [N, C] and targets [N]."""
    # An ignored target matches no class: its row of the one-hot mask is zeros.
    picked = (input * one_hot(target, input.shape[-1]).to(input.dtype)).sum(-1)
    keep = target.ne(ignore_index).to(input.dtype)
    losses = -picked * keep
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / keep.sum()


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None):
    """As torch.nn.functional.scaled_dot_product_attention: softmax(q k^T * scale + mask) v over
    [..., L, E] queries and [..., S, E] keys and values. A bool mask keeps where it is True; a
    float mask is added. Dropout on the attention weights with dropout_p (always on, as
    torch's)."""
    import math
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query.matmul(key.transpose(-2, -1)) * scale
    if is_causal:
        from .._pieces import outside_triangle
        scores = scores.masked_fill(outside_triangle(query.shape[-2], key.shape[-2]),
                                    float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype.name == "bool":
            scores = scores.masked_fill(attn_mask.to(scores.dtype).eq(0), float("-inf"))
        else:
            scores = scores + attn_mask
    weights = scores.softmax(-1)
    if dropout_p > 0:
        weights = dropout(weights, dropout_p, True)
    return weights.matmul(value)
