"""torch.einsum over the engine's ops: operands are contracted left to right, each pair as one
batched matrix product (permute and reshape to [batch, kept, contracted] x [batch, contracted,
kept]), so the gradient is the products' and every product runs in the matrix library."""
import string as _string

from . import _C


def _parse(equation, operands):
    equation = equation.replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise _C.Error(f"einsum: the equation has {len(terms)} operands, {len(operands)} given")
    used = {c for c in equation if c.isalpha()}
    free = [c for c in _string.ascii_letters if c not in used]
    ellipsis_rank = max([op.ndim - len(t.replace("...", "")) for t, op in zip(terms, operands)
                         if "..." in t] + [0])
    ellipsis = "".join(free[:ellipsis_rank])
    expanded = []
    for t, op in zip(terms, operands):
        if "..." in t:
            rank = op.ndim - len(t.replace("...", ""))
            t = t.replace("...", ellipsis[ellipsis_rank - rank:])
        if len(t) != op.ndim or not all(c.isalpha() for c in t):
            raise _C.Error(f"einsum: subscripts '{t}' do not match an operand of rank {op.ndim}")
        if len(set(t)) != len(t):
            raise _C.Error(f"einsum: subscript repeated in one operand ('{t}'): diagonals are "
                           "not supported")
        expanded.append(t)
    if arrow:
        out = out.replace("...", ellipsis)
    else:
        letters = "".join(expanded)
        out = ellipsis + "".join(sorted(c for c in set(letters)
                                        if letters.count(c) == 1 and c not in ellipsis))
    if len(set(out)) != len(out) or any(c not in "".join(expanded) for c in out):
        raise _C.Error(f"einsum: output subscripts '{out}' must be distinct and appear in an "
                       "operand")
    return expanded, out


def _sizes(terms, operands):
    sizes = {}
    for t, op in zip(terms, operands):
        for c, n in zip(t, op.shape):
            if sizes.get(c, 1) not in (1, n) and n != 1:
                raise _C.Error(f"einsum: subscript '{c}' has sizes {sizes[c]} and {n}")
            sizes[c] = max(sizes.get(c, 1), n)
    return sizes


def _sum_out(term, x, keep):
    """x with the letters of ``term`` that are not in ``keep`` summed away."""
    dims = [i for i, c in enumerate(term) if c not in keep]
    if not dims:
        return term, x
    return "".join(c for c in term if c in keep), x.sum(dims)


def _arrange(term, x, order, sizes):
    """x with its letters in ``order`` (missing ones as size 1), broadcast to ``sizes``."""
    x = x.permute([term.index(c) for c in order if c in term]) if term else x
    present = [c for c in order if c in term]
    shape = []
    for c in order:
        shape.append(x.shape[present.index(c)] if c in term else 1)
    x = x.reshape(*shape) if shape else x
    return x.expand(*[sizes[c] for c in order]) if order else x


def _contract(ta, a, tb, b, keep, sizes):
    ta, a = _sum_out(ta, a, set(tb) | keep)
    tb, b = _sum_out(tb, b, set(ta) | keep)
    batch = [c for c in ta if c in tb and c in keep]
    contracted = [c for c in ta if c in tb and c not in keep]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]

    def product(letters):
        n = 1
        for c in letters:
            n *= sizes[c]
        return n

    a = _arrange(ta, a, batch + left + contracted, sizes).reshape(
        product(batch), product(left), product(contracted))
    b = _arrange(tb, b, batch + contracted + right, sizes).reshape(
        product(batch), product(contracted), product(right))
    out = a.matmul(b).reshape(*[sizes[c] for c in batch + left + right])
    return "".join(batch + left + right), out


def einsum(equation, *operands):
    """As torch.einsum: explicit (``"bij,bjk->bik"``) and implicit output, ``...``, size-1
    broadcasting and sums over letters that leave; a letter repeated inside one operand (a
    diagonal) is not supported."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    terms, out = _parse(equation, operands)
    sizes = _sizes(terms, operands)
    term, x = terms[0], operands[0]
    for k in range(1, len(terms)):
        later = set(out).union(*terms[k + 1:])
        term, x = _contract(term, x, terms[k], operands[k], later, sizes)
    term, x = _sum_out(term, x, set(out))
    return _arrange(term, x, list(out), sizes) if out else x
