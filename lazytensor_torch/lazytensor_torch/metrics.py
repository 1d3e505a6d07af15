"""The engine's counters and timers, as torch-xla's ``torch_xla.debug.metrics``: ``MarkStep``,
``CachedCompile``, ``UncachedCompile``, ``TransferToDeviceSync``, ``TransferToDeviceAsync``,
``TransferFromDevice``, ``ExecuteComputation``, ..., plus ``Fallback`` (aten ops run through the
CPU fallback) and one counter per fallen-back op (``aten::<name>``)."""

import torch as _torch


def counter_value(name):
    """The counter's value; 0 for a counter never touched."""
    return int(_torch.ops.lazytensor_torch.counter_value(name))


def counter_names():
    return list(_torch.ops.lazytensor_torch.counter_names())


def fallback_counts():
    """{aten op name: calls} for the ops that ran through the CPU fallback."""
    return {name: counter_value(name) for name in counter_names()
            if name.startswith("aten::") and counter_value(name) > 0}


def report():
    """A readable table of every counter and timer touched so far."""
    return _torch.ops.lazytensor_torch.report()


def reset():
    """Sets every counter and timer back to zero."""
    _torch.ops.lazytensor_torch.reset_metrics()
