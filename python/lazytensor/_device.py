"""Devices as PyTorch scripts name them: ``device=`` on factories, ``torch.device``,
``torch.cuda.is_available()`` and the ``torch.backends`` flags that GPT scripts set.

The engine's devices are CPU devices (``cpu``, ``cpu:1``, ...) and, where a driver is installed,
``opencl``; a script that asks for CUDA when it is available, as most do, finds it is not and
stays on the CPU. Tensors are made on the thread's default device (``set_default_device``):
``device=`` names it, and naming another raises lazytensor.Error (copies between devices are not
supported yet).
"""
import types as _types

from . import _C


def _unavailable_reason(kind):
    """Why this machine cannot run device kind ``kind`` (device_kinds' reason), or None."""
    for k in _C.device_kinds():
        if k["name"] == kind:
            return None if k["available"] else k["reason"]
    return "lazytensor has no such device; its kinds are cpu, cuda and opencl"


class device:
    """torch.device: a device's type and index; ``device("cpu")``, ``device("cpu", 1)``,
    ``device("cpu:1")``, ``device("opencl")``. A kind this machine cannot run raises
    lazytensor.Error with the reason."""

    __slots__ = ("type", "index")

    def __init__(self, type, index=None):  # noqa: A002 (torch.device's argument names)
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        text = str(type)
        if ":" in text:
            if index is not None:
                raise ValueError(f"device: type {text!r} has an index already")
            text, _, number = text.partition(":")
            index = int(number)
        reason = None if text == "cpu" else _unavailable_reason(text)
        if reason is not None:
            raise _C.Error(f"device: '{type}' is not available ({reason})")
        if index is not None and index < 0:
            raise ValueError(f"device: index {index} is negative")
        object.__setattr__(self, "type", text)
        object.__setattr__(self, "index", index)

    def __setattr__(self, name, value):
        raise AttributeError("device is immutable")

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type={self.type!r}" + ("" if self.index is None else f", index={self.index}") + ")"

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))


def check_device(value, op, tensor_device=None):
    """Refuses a device that is not where ``op`` makes its tensors, the thread's default device
    (or, for a copy, the device the tensor is on), naming the op; None passes, and so does "cpu"
    for cpu:0."""
    if value is None:
        return
    try:
        asked = device(value)
    except _C.Error as e:
        raise _C.Error(f"{op}: {str(e).removeprefix('device: ')}") from None
    where = f"{asked.type}:{asked.index or 0}"
    if tensor_device is not None:
        if where != str(tensor_device):
            raise _C.Error(f"{op}: the tensor is on {tensor_device}, not '{asked}': copies "
                           "between devices are not supported yet")
        return
    default = _C._default_device()
    if where != default:
        raise _C.Error(f"{op}: device '{asked}' is not the default device, {default}, where "
                       "tensors are made: choose it with lazytensor.set_default_device (copies "
                       "between devices are not supported yet)")


def set_default_device(device):
    """As torch.set_default_device: the device factories create tensors on, for this thread
    ("cpu", "cpu:1"; an unavailable kind raises lt.Error with the reason device_kinds gives)."""
    _C._set_default_device(str(device) if not isinstance(device, str) else device)


def get_default_device():
    """As torch.get_default_device."""
    return device(_C._default_device())


def _false(*args, **kwargs):
    return False


# torch.cuda as a script asks it: no CUDA device here.
cuda = _types.ModuleType("lazytensor.cuda", "No CUDA device: is_available() is False.")
cuda.is_available = _false
cuda.is_bf16_supported = _false
cuda.device_count = lambda: 0
cuda.synchronize = lambda device=None: _C.wait_device_ops()
cuda.manual_seed = cuda.manual_seed_all = lambda seed: None

mps = _types.ModuleType("lazytensor.mps", "No Apple GPU: is_available() is False.")
mps.is_available = _false


class _Flags(_types.SimpleNamespace):
    """Settings that mean nothing to the engine, accepted so that scripts that set them run:
    TF32 and cuDNN choices concern NVIDIA GPUs."""


# torch.backends: the flags GPT scripts set before training. No-ops (docs/python.md).
backends = _types.ModuleType("lazytensor.backends", "torch.backends' flags, accepted as no-ops.")
backends.cuda = _Flags(matmul=_Flags(allow_tf32=False, allow_bf16_reduced_precision_reduction=True,
                                     allow_fp16_reduced_precision_reduction=True),
                       is_built=_false, enable_flash_sdp=lambda enabled: None,
                       enable_mem_efficient_sdp=lambda enabled: None,
                       enable_math_sdp=lambda enabled: None)
backends.cudnn = _Flags(allow_tf32=False, benchmark=False, deterministic=False, enabled=True,
                        is_available=_false)
backends.mps = _Flags(is_available=_false, is_built=_false)
