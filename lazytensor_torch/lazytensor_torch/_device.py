"""Registration of the ``lazytensor`` device with PyTorch (PrivateUse1, renamed), and the
``torch.lazytensor`` module that PyTorch's device-generic code asks (``is_available``,
``manual_seed_all``, ``synchronize``, ...)."""

import os
import types

import torch

DEVICE_NAME = "lazytensor"


def _load_extension():
    here = os.path.dirname(__file__)
    for name in os.listdir(here):
        if name.startswith("_C") and name.endswith(".so"):
            torch.ops.load_library(os.path.join(here, name))
            return
    raise ImportError(f"lazytensor_torch: the compiled extension _C*.so is missing from {here}")


def _device_module():
    ops = torch.ops.lazytensor_torch
    module = types.ModuleType(f"torch.{DEVICE_NAME}")

    def manual_seed(seed):
        # PyTorch's seeds are 64-bit; the engine's generator keys take 53 bits.
        ops.manual_seed(int(seed) % 2**53)

    def get_rng_state(device=DEVICE_NAME):
        return torch.tensor(list(ops.generator_state()), dtype=torch.int64)

    def set_rng_state(state, device=DEVICE_NAME):
        seed, offset = (int(v) for v in state.tolist())
        ops.set_generator_state(seed, offset)

    def seed():
        value = torch.initial_seed()
        manual_seed(value)
        return value

    module.is_available = lambda: True
    module.is_initialized = lambda: True
    module._is_in_bad_fork = lambda: False
    module._lazy_init = lambda: None
    module.device_count = lambda: 1
    module.current_device = lambda: 0
    module.set_device = lambda device: None
    module.synchronize = lambda device=None: ops.wait_device_ops()
    module.manual_seed = manual_seed
    module.manual_seed_all = manual_seed
    module.seed = seed
    module.seed_all = seed
    module.initial_seed = lambda: int(ops.generator_state()[0])
    module.get_rng_state = get_rng_state
    module.set_rng_state = set_rng_state
    module.get_rng_state_all = lambda: [get_rng_state()]
    module.set_rng_state_all = lambda states: set_rng_state(states[0])
    # torch.autocast("lazytensor") asks which dtypes it may lower to: bf16 (the engine's products
    # have no f16 kernel).
    module.get_amp_supported_dtype = lambda: [torch.bfloat16]
    return module


def _print_from_the_host():
    # Printing formats a tensor with ops of its own (masked_select, max, ...); on a lazy device
    # each would be a graph and a read. PyTorch copies xla and lazy tensors to the CPU first
    # (torch/_tensor_str.py); lazytensor tensors get the same treatment.
    import torch._tensor_str as tensor_str

    format_values = tensor_str._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == DEVICE_NAME:
            self = self.to("cpu")
        return format_values(self, indent)

    tensor_str._tensor_str = _tensor_str


def _keep_tied_parameters():
    # Module.to() replaces each parameter by a new Parameter when the device's tensors cannot
    # share a TensorImpl type with the CPU's (PyTorch's list of such devices is fixed), which
    # unties tied weights (BERT's decoder and word embeddings). Moving to this device swaps the
    # tensors' contents instead (torch.utils.swap_tensors): every Parameter keeps its identity,
    # so ties, and optimizers made before the move, hold.
    module_to = torch.nn.Module.to

    def to(self, *args, **kwargs):
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        if device is None or torch.device(device).type != DEVICE_NAME:
            return module_to(self, *args, **kwargs)
        swap = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            return module_to(self, *args, **kwargs)
        finally:
            torch.__future__.set_swap_module_params_on_conversion(swap)

    to.__doc__ = module_to.__doc__
    torch.nn.Module.to = to


def _register():
    if torch._C._get_privateuse1_backend_name() == DEVICE_NAME:
        return  # already registered in this process
    _load_extension()
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    torch._register_device_module(DEVICE_NAME, _device_module())
    # PrivateUse1's default is f16. PyTorch keeps this default per thread: other threads pass
    # dtype=torch.bfloat16.
    torch.set_autocast_dtype(DEVICE_NAME, torch.bfloat16)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    _print_from_the_host()
    _keep_tied_parameters()


def autoload():
    """The ``torch.backends`` entry point, which ``import torch`` calls. It lives in this module,
    not the package's ``__init__``, so that ``import lazytensor_torch`` before ``import torch``
    works: then PyTorch calls it while the package is still half imported."""
    _register()
