"""torch.amp's names: ``autocast(device_type, dtype)`` is lazytensor.autocast, and
``GradScaler`` passes everything through when disabled, as the scripts that train in bf16 (or
fp32) use it: bf16 needs no loss scaling, and float16 training is not supported."""
from . import _C
from . import autocast as _autocast


def autocast(device_type="cpu", dtype=None, enabled=True, cache_enabled=None):
    return _autocast(device_type, dtype, enabled)


class GradScaler:
    """torch.amp.GradScaler(enabled=False): scale() returns the loss, step() steps the
    optimizer, update() and unscale_() do nothing. Enabled, it refuses: loss scaling is for
    float16 training, which the engine does not do (bf16 keeps f32's range)."""

    def __init__(self, device="cpu", init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        if enabled:
            raise _C.Error("GradScaler: loss scaling is for float16 training, which lazytensor "
                           "does not do; bf16 autocast needs none (GradScaler(enabled=False))")
        self._enabled = False

    def is_enabled(self):
        return self._enabled

    def scale(self, outputs):
        return outputs

    def unscale_(self, optimizer):
        pass

    def step(self, optimizer, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        pass

    def get_scale(self):
        return 1.0

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass
