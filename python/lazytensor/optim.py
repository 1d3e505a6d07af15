"""Optimizers with torch.optim's constructors, over the engine's fused multi-tensor updates:
``step()`` traces one update for every parameter; the next ``lt.mark_step()`` runs it as one
launch. Hyperparameters reach the kernels as arguments: a new learning rate every step never
recompiles.
"""
from . import _C
from ._C import Tensor


def _groups(params, defaults):
    """torch.optim's param_groups: an iterable of tensors, or of dicts with 'params'."""
    if isinstance(params, Tensor):
        raise TypeError("params argument given to the optimizer should be an iterable of Tensors "
                        "or dicts, but got a Tensor")
    params = list(params)
    if not params:
        raise _C.Error("optimizer: got an empty parameter list")
    if isinstance(params[0], dict):
        groups = [dict(defaults, **g) for g in params]
    else:
        groups = [dict(defaults, params=params)]
    seen = set()
    for g in groups:
        g["params"] = [g["params"]] if isinstance(g["params"], Tensor) else list(g["params"])
        for p in g["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer: params must be tensors, got {type(p).__name__}")
            if id(p) in seen:
                raise _C.Error("optimizer: a parameter appears in more than one place")
            seen.add(id(p))
    return groups


class _Optimizer:
    def __init__(self, param_groups):
        self.param_groups = param_groups

    def zero_grad(self, set_to_none=True):
        self._engine.zero_grad(set_to_none)

    def step(self):
        """Traces the update of every parameter that has a grad (changes to param_groups'
        hyperparameters take effect here)."""
        for i, g in enumerate(self.param_groups):
            self._engine.set_group_options(i, self._options(g))
        self._engine.step()

    def _load_state(self, group, index, step, tensors):
        self._engine.load_state(group, index, step, tensors)

    def state_of(self, group, index):
        return self._engine.state(group, index)

    def state_dict(self):
        """torch.optim's layout: ``state`` keyed by each parameter's position over all groups
        (its step and its tensors, detached), and ``param_groups`` with the hyperparameters and
        the positions of their parameters."""
        state, groups, position = {}, [], 0
        for g, group in enumerate(self.param_groups):
            positions = list(range(position, position + len(group["params"])))
            for i, p in enumerate(positions):
                entry = self._engine.state(g, i)
                state[p] = {k: (v.detach() if isinstance(v, Tensor) else v) for k, v in entry.items()}
            groups.append(dict({k: v for k, v in group.items() if k != "params"}, params=positions))
            position += len(positions)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restores what state_dict() gave: each group's hyperparameters, and every parameter's
        step and tensors, copied into the optimizer's own (checked before anything changes:
        the groups must hold as many parameters, and each tensor its parameter's shape)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)):
            raise _C.Error("load_state_dict: the saved groups hold "
                           f"{[len(g['params']) for g in groups]} parameters, this optimizer's "
                           f"{[len(g['params']) for g in self.param_groups]}")
        loads = []
        for g, saved in enumerate(groups):
            for i, p in enumerate(saved["params"]):
                entry = state_dict["state"][p]
                step = entry["step"]
                tensors = {k: v for k, v in entry.items() if k != "step"}
                own = {k: v for k, v in self._engine.state(g, i).items() if k != "step"}
                if set(tensors) != set(own):
                    raise _C.Error(f"load_state_dict: parameter {p} has state {sorted(tensors)}, "
                                   f"this optimizer keeps {sorted(own)}")
                for k, v in tensors.items():
                    if tuple(v.shape) != tuple(own[k].shape) or v.dtype != own[k].dtype:
                        raise _C.Error(f"load_state_dict: '{k}' of parameter {p} is "
                                       f"{tuple(v.shape)} {v.dtype.name}, this optimizer's is "
                                       f"{tuple(own[k].shape)} {own[k].dtype.name}")
                loads.append((g, i, int(step.item() if isinstance(step, Tensor) else step), tensors))
        for g, i, step, tensors in loads:
            self._load_state(g, i, step, tensors)
        for saved, group in zip(groups, self.param_groups):
            group.update({k: v for k, v in saved.items() if k != "params"})


class AdamW(_Optimizer):
    """AdamW in two flavours. ``flavor="torch"`` is torch.optim.AdamW (weight decay before the
    update; eps 1e-8 and weight_decay 1e-2 by default; amsgrad available).
    ``flavor="huggingface"`` is transformers' AdamW (weight decay after the update,
    ``correct_bias``; eps 1e-6 and weight_decay 0 by default).

    ``precision`` says how the state is kept: ``"fp32"`` (moments in the parameters' dtype),
    ``"mixed"`` (bf16 or f16 parameters with f32 master weights and moments), ``"bf16"`` (bf16
    moments; bf16 parameters rounded stochastically), ``"8bit"`` (block-wise quantized 8-bit
    moments, a block being a row of the parameter; tensors under 4096 elements, 1-D, or with
    rows under 256 elements keep f32 moments). The update is computed in f32 in every case; a group's precision is fixed once its
    state exists."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=None, weight_decay=None,
                 amsgrad=False, correct_bias=True, flavor="torch", precision="fp32", *,
                 foreach=None, fused=None, maximize=False, capturable=False,
                 differentiable=False):
        # torch's implementation choices: every update here is one fused multi-tensor launch,
        # so foreach and fused say nothing more; maximize and the rest are not supported.
        if maximize or capturable or differentiable:
            raise _C.Error("AdamW: maximize, capturable and differentiable are not supported")
        if flavor not in ("torch", "huggingface"):
            raise _C.Error(f"AdamW: flavor must be 'torch' or 'huggingface', got {flavor!r}")
        hf = flavor == "huggingface"
        defaults = dict(lr=lr, betas=tuple(betas), eps=(1e-6 if hf else 1e-8) if eps is None else eps,
                        weight_decay=(0.0 if hf else 1e-2) if weight_decay is None else weight_decay,
                        amsgrad=amsgrad, correct_bias=correct_bias, precision=precision)
        super().__init__(_groups(params, defaults))
        self.flavor = flavor
        self._engine = _C.AdamW([(g["params"], self._options(g)) for g in self.param_groups], flavor)

    @staticmethod
    def _options(g):
        o = _C.AdamWOptions()
        o.lr, (o.beta1, o.beta2), o.eps = float(g["lr"]), g["betas"], float(g["eps"])
        o.weight_decay, o.amsgrad, o.correct_bias = float(g["weight_decay"]), g["amsgrad"], g["correct_bias"]
        o.precision = g["precision"]
        return o


class SGD(_Optimizer):
    """torch.optim.SGD (momentum, dampening, weight decay, Nesterov)."""

    def __init__(self, params, lr=1e-2, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(_groups(params, defaults))
        self._engine = _C.SGD([(g["params"], self._options(g)) for g in self.param_groups])

    @staticmethod
    def _options(g):
        o = _C.SGDOptions()
        o.lr, o.momentum, o.dampening = float(g["lr"]), float(g["momentum"]), float(g["dampening"])
        o.weight_decay, o.nesterov = float(g["weight_decay"]), g["nesterov"]
        return o




class LambdaSchedule:
    """Sets each group's lr to its initial lr times ``schedule.factor(n)`` after n calls to
    step(), as torch's LambdaLR with transformers' schedules."""

    def __init__(self, optimizer, schedule):
        self.optimizer, self.schedule = optimizer, schedule
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self.last_step = 0
        self._apply()

    def _apply(self):
        for g, base in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = base * self.schedule.factor(self.last_step)

    def step(self):
        self.last_step += 1
        self._apply()

    def get_last_lr(self):
        return [g["lr"] for g in self.optimizer.param_groups]


def get_constant_schedule(optimizer):
    return LambdaSchedule(optimizer, _C.constant_schedule())


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    return LambdaSchedule(optimizer, _C.linear_schedule(num_warmup_steps, num_training_steps))


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, num_cycles=0.5):
    return LambdaSchedule(optimizer, _C.cosine_schedule(num_warmup_steps, num_training_steps, num_cycles))


import sys as _sys  # noqa: E402

from . import lr_scheduler  # noqa: E402 (lazytensor.optim.lr_scheduler, as torch's)

# `from lazytensor.optim.lr_scheduler import LambdaLR`, as scripts import torch's.
_sys.modules[__name__ + ".lr_scheduler"] = lr_scheduler
