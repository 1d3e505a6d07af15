"""torch.optim.lr_scheduler's schedulers: each sets its optimizer's param_groups' "lr" at every
step() by torch's closed forms. The learning rate is a kernel argument, so a new one every step
compiles nothing."""
import math


class LRScheduler:
    """The base: ``base_lrs`` are the groups' lrs at construction (kept as "initial_lr"), and
    ``last_epoch`` counts step() calls (the constructor takes the first, as torch's does)."""

    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, epoch):
        raise NotImplementedError

    def step(self):
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.lr_at(self.last_epoch)):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self):
        return list(self._last_lr)

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas",
                                                                    "schedulers")}

    def load_state_dict(self, state):
        self.__dict__.update(state)


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch) (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        groups = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * groups
        if len(self.lr_lambdas) != groups:
            raise ValueError(f"LambdaLR: {len(self.lr_lambdas)} lr_lambdas for {groups} groups")
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return [base * f(epoch) for base, f in zip(self.base_lrs, self.lr_lambdas)]


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return [base * self.gamma ** (epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr = base_lr * gamma ** (milestones passed)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        passed = sum(1 for m in self.milestones if m <= epoch)
        return [base * self.gamma ** passed for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return [base * self.gamma ** epoch for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr = base_lr * factor for the first total_iters steps, base_lr after."""

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return [base * (self.factor if epoch < self.total_iters else 1.0) for base in self.base_lrs]


class LinearLR(LRScheduler):
    """lr = base_lr * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) /
    total_iters): a linear warm-up (or decay)."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        t = min(epoch, self.total_iters) / self.total_iters
        factor = self.start_factor + (self.end_factor - self.start_factor) * t
        return [base * factor for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (the closed form of
    torch's schedule)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):  # noqa: N803 (torch's name)
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2
                for base in self.base_lrs]


class SequentialLR(LRScheduler):
    """The schedulers one after the other, switching at each milestone; each one counts its
    steps from its own start."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR: {len(schedulers)} schedulers need "
                             f"{len(schedulers) - 1} milestones, got {len(milestones)}")
        self.schedulers, self.milestones = list(schedulers), list(milestones)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        which = sum(1 for m in self.milestones if m <= epoch)
        start = self.milestones[which - 1] if which else 0
        return self.schedulers[which].lr_at(epoch - start)
