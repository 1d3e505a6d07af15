"""lazytensor.optim.lr_scheduler against torch's closed forms, step by step."""
import math

import pytest

import lazytensor as lt
from lazytensor.optim.lr_scheduler import (ConstantLR, CosineAnnealingLR, ExponentialLR, LambdaLR,
                                           LinearLR, MultiStepLR, SequentialLR, StepLR)


def lrs(make, steps=12, lr=0.1):
    optimizer = lt.optim.AdamW([lt.zeros(2, requires_grad=True)], lr=lr)
    scheduler = make(optimizer)
    out = [scheduler.get_last_lr()[0]]
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        out.append(optimizer.param_groups[0]["lr"])
    return out


@pytest.mark.parametrize("make,want", [
    (lambda o: LambdaLR(o, lambda e: 1 / (e + 1)), lambda e: 0.1 / (e + 1)),
    (lambda o: StepLR(o, 4, 0.5), lambda e: 0.1 * 0.5 ** (e // 4)),
    (lambda o: MultiStepLR(o, [3, 7], 0.1), lambda e: 0.1 * 0.1 ** ((e >= 3) + (e >= 7))),
    (lambda o: ExponentialLR(o, 0.9), lambda e: 0.1 * 0.9 ** e),
    (lambda o: ConstantLR(o, 0.5, 4), lambda e: 0.1 * (0.5 if e < 4 else 1)),
    (lambda o: LinearLR(o, 0.25, 1.0, 8), lambda e: 0.1 * (0.25 + 0.75 * min(e, 8) / 8)),
    (lambda o: CosineAnnealingLR(o, 10, 0.01),
     lambda e: 0.01 + 0.09 * (1 + math.cos(math.pi * e / 10)) / 2),
], ids=["lambda", "step", "multistep", "exponential", "constant", "linear", "cosine"])
def test_schedules_follow_torchs_closed_forms(make, want):
    got = lrs(make)
    for epoch, lr in enumerate(got):
        assert lr == pytest.approx(want(epoch), rel=1e-12), epoch


def test_sequential_warm_up_then_cosine():
    got = lrs(lambda o: SequentialLR(o, [LinearLR(o, 0.1, 1.0, 3), CosineAnnealingLR(o, 8)], [3]))
    want = [0.1 * (0.1 + 0.9 * e / 3) for e in range(3)]
    want += [0.1 * (1 + math.cos(math.pi * e / 8)) / 2 for e in range(10)]
    assert got == pytest.approx(want, rel=1e-12)


def test_groups_keep_their_own_base_lrs_and_state_round_trips():
    a, b = lt.zeros(2, requires_grad=True), lt.zeros(2, requires_grad=True)
    optimizer = lt.optim.AdamW([{"params": [a], "lr": 0.2}, {"params": [b]}], lr=0.1)
    scheduler = StepLR(optimizer, 1, 0.5)
    scheduler.step()
    assert scheduler.get_last_lr() == [0.1, 0.05]
    state = scheduler.state_dict()
    again = StepLR(lt.optim.AdamW([{"params": [a], "lr": 0.2}, {"params": [b]}], lr=0.1), 1, 0.5)
    again.load_state_dict(state)
    again.step()
    assert again.get_last_lr() == [0.05, 0.025]
    with pytest.raises(ValueError, match="milestones"):
        SequentialLR(optimizer, [StepLR(optimizer, 1)], [2])
