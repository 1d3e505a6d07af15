"""torch.nn.functional's names over the engine's ops."""
from .._C import (  # noqa: F401
    cross_entropy,
    embedding,
    gelu,
    layer_norm,
    linear,
    log_softmax,
    mse_loss,
    softmax,
)
from .._C import dropout as _dropout
from .._C._activations import *  # noqa: F401,F403 (the activations of elementwise_ops.def)


def dropout(input, p=0.5, training=True):
    return _dropout(input, p, training)


def relu(input):
    return input.relu()


def tanh(input):
    return input.tanh()


def sigmoid(input):
    return input.sigmoid()
