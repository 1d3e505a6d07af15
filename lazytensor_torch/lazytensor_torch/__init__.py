"""The lazytensor engine as a PyTorch device named ``lazytensor``.

After ``pip install``, ``import torch`` alone makes the device usable (PyTorch loads the
``torch.backends`` entry point): ``torch.ones(3, device="lazytensor")``, ``model.to("lazytensor")``.
Ops on the device are traced into the engine's graph, not run; reading a value (``.item()``,
``.cpu()``, ``print``) computes what it needs, and :func:`mark_step` cuts the graph, as
torch-xla's ``xm.mark_step()`` does. By default the graph is also cut after each
``optimizer.step()`` (``LT_AUTO_MARK_STEP=optimizer``; ``none`` turns it off).

Python numbers reach the device's kernels as arguments (the scalar policy ``argument``): a new
learning rate every step uploads nothing and compiles nothing.
"""

import os as _os

import torch as _torch

from . import metrics
from ._device import DEVICE_NAME, _register

__all__ = [
    "DEVICE_NAME",
    "mark_step",
    "wait_device_ops",
    "set_scalar_policy",
    "scalar_policy",
    "manual_seed",
    "start_profiler",
    "write_profile",
    "device",
    "metrics",
]

_register()


def mark_step():
    """Cuts the graph: every pending computation on the device is compiled (or found in the
    compile cache) and launched. Returns without waiting for the device."""
    _torch.ops.lazytensor_torch.mark_step()


def wait_device_ops():
    """Blocks until everything launched on the device has finished."""
    _torch.ops.lazytensor_torch.wait_device_ops()


def set_scalar_policy(policy):
    """How Python numbers reach the device: ``"argument"`` (a kernel argument, the default),
    ``"cached"`` (device data cached by value), ``"uncached"`` (uploaded synchronously on every
    use: torch-xla 1.13's regression) or ``"constant"`` (baked into the graph: a recompile per
    new value)."""
    _torch.ops.lazytensor_torch.set_scalar_policy(policy)


def scalar_policy():
    return _torch.ops.lazytensor_torch.scalar_policy()


def manual_seed(seed):
    """Seeds the device's generator (dropout, ``rand``); ``torch.manual_seed`` calls it too."""
    _torch.ops.lazytensor_torch.manual_seed(int(seed) % 2**53)


def start_profiler():
    """Starts recording the engine's timeline: traces, compiles, transfers, each launch."""
    _torch.ops.lazytensor_torch.start_profiler()


def write_profile(path):
    """Stops recording and writes the timeline as Chrome trace-event JSON (Perfetto,
    chrome://tracing; bench/profile_step.py sums its launches by kind)."""
    _torch.ops.lazytensor_torch.write_profile(str(path))


def device(index=0):
    """``torch.device("lazytensor", index)``: there is one device, index 0."""
    return _torch.device(DEVICE_NAME, index)


def _install_step_hook():
    mode = _os.environ.get("LT_AUTO_MARK_STEP", "optimizer")
    if mode == "optimizer":
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(_cut_after_step)
    elif mode not in ("none", "0", "off"):
        raise ValueError(
            f"LT_AUTO_MARK_STEP={mode!r}: expected 'optimizer' (cut the graph after each "
            "optimizer.step() on the device) or 'none'")


def _cut_after_step(optimizer, args, kwargs):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.device.type == DEVICE_NAME:
                mark_step()
                return


_install_step_hook()
