from .._C import Tensor


class Parameter(Tensor):
    """A tensor that a Module registers as a parameter: a leaf that requires grad (as
    torch.nn.Parameter). It holds the same value as ``data``, cut off from autograd."""

    def __init__(self, data, requires_grad=True):
        super().__init__(data.detach())
        self.requires_grad_(requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)
