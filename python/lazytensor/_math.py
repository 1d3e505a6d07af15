"""torch's math names that are compositions of the engine's ops: square, log1p, std, isnan,
isinf, isfinite."""
from ._C import Tensor


def square(input):
    return input * input


def log1p(input):
    """log(1 + x), accurate for tiny x: log(u) * x / (u - 1) with u = 1 + x, which cancels the
    rounding of u (Goldberg's identity); x itself where u rounds to 1."""
    from . import where
    u = input + 1.0
    return where(u.eq(1.0), input, u.log() * input / (u - 1.0))


def std(input, dim=None, unbiased=True, keepdim=False, correction=None):
    """The standard deviation: the square root of var (``correction=0`` is ``unbiased=False``)."""
    if correction is not None:
        unbiased = correction != 0
    return input.var(dim, unbiased, keepdim).sqrt()


def isnan(input):
    return input.ne(input)


def isinf(input):
    return input.abs().eq(float("inf"))


def isfinite(input):
    """Neither NaN nor infinite: x - x is 0 exactly then, NaN otherwise."""
    return (input - input).eq(0.0)


def attach():
    for fn in (square, log1p, std, isnan, isinf, isfinite):
        setattr(Tensor, fn.__name__, fn)
