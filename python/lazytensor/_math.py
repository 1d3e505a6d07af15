"""torch's math names that are compositions of the engine's ops: square, log1p, std, isnan,
isinf, isfinite, the logical ops, and div's rounding modes."""
from ._C import Tensor, dtype as _dtype

_true_divide = Tensor.div


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


def _as_bool(input):
    return input if input.dtype == _dtype.bool else input.ne(0)


def logical_not(input):
    return _as_bool(input).bitwise_not()


def logical_and(input, other):
    return _as_bool(input).bitwise_and(_as_bool(other))


def logical_or(input, other):
    return _as_bool(input).bitwise_or(_as_bool(other))


def logical_xor(input, other):
    return _as_bool(input).bitwise_xor(_as_bool(other))


def div(input, other, *, rounding_mode=None):
    """torch.div: true division, or with ``rounding_mode`` "floor" Python's //, and "trunc" the
    quotient rounded toward zero (the floor, one more where the signs differ and it is not
    exact)."""
    if rounding_mode is None:
        return _true_divide(input, other)
    if rounding_mode == "floor":
        return input.floor_divide(other)
    if rounding_mode == "trunc":
        floor = input.floor_divide(other)
        inexact = input.remainder(other).ne(0)
        signs_differ = input.lt(0).bitwise_xor(other < 0 if not isinstance(other, Tensor)
                                               else other.lt(0))
        return floor + inexact.bitwise_and(signs_differ).to(floor.dtype)
    raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but "
                     f"found '{rounding_mode}'")


def attach():
    for fn in (square, log1p, std, isnan, isinf, isfinite, logical_not, logical_and, logical_or,
               logical_xor, div):
        setattr(Tensor, fn.__name__, fn)
