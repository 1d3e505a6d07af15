"""torch.nn.init's initializers: each fills a tensor in place (under no_grad) from the engine's
generator and returns it."""
import math

from .. import _C


def _fill(tensor, value):
    from .. import no_grad
    with no_grad():
        tensor.copy_(value.to(tensor.dtype))
    return tensor


def _fans(tensor):
    if tensor.ndim < 2:
        raise ValueError("fan in and fan out need a tensor of at least 2 dims")
    receptive = math.prod(tensor.shape[2:]) if tensor.ndim > 2 else 1
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def uniform_(tensor, a=0.0, b=1.0):
    from .. import rand
    return _fill(tensor, rand(*tensor.shape) * (b - a) + a)


def normal_(tensor, mean=0.0, std=1.0):
    from .. import randn
    return _fill(tensor, randn(*tensor.shape) * std + mean)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """Normal values, those outside [a, b] drawn again: 12 rounds on the device, after which an
    element still outside (odds below 1e-15 for the default bounds) is clamped into them."""
    from .. import randn, where
    x = randn(*tensor.shape) * std + mean
    for _ in range(12):
        outside = (x - (a + b) / 2).abs().gt((b - a) / 2)
        x = where(outside, randn(*tensor.shape) * std + mean, x)
    return _fill(tensor, x.clamp(a, b))


def constant_(tensor, val):
    from .. import full
    return _fill(tensor, full(list(tensor.shape), val, dtype=tensor.dtype))


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain=1.0):
    fan_in, fan_out = _fans(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0):
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _gain(nonlinearity, a):
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        return math.sqrt(2.0 / (1 + a * a))
    if nonlinearity in ("linear", "sigmoid", "conv1d", "conv2d", "conv3d"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    fan_in, fan_out = _fans(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    bound = _gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    fan_in, fan_out = _fans(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    return normal_(tensor, 0.0, _gain(nonlinearity, a) / math.sqrt(fan))
