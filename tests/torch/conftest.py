"""Tests of the PyTorch device `lazytensor` (lazytensor_torch), against PyTorch eager on the CPU."""

import pytest
import torch

import lazytensor_torch as ltt

DEVICE = "lazytensor"


@pytest.fixture(autouse=True)
def fresh_engine_state():
    """Each test starts with the default scalar policy and nothing pending."""
    ltt.set_scalar_policy("argument")
    ltt.mark_step()
    ltt.wait_device_ops()
    yield
    ltt.set_scalar_policy("argument")
    ltt.mark_step()


class Counters:
    """Engine counters' changes over a block: `with Counters() as c: ...; c["MarkStep"]`."""

    NAMES = ("MarkStep", "CachedCompile", "UncachedCompile", "TransferToDeviceSync",
             "TransferToDeviceAsync", "TransferFromDevice", "ExecuteComputation", "Fallback")

    def __enter__(self):
        self.start = {n: ltt.metrics.counter_value(n) for n in self.NAMES}
        return self

    def __exit__(self, *exc):
        self.end = {n: ltt.metrics.counter_value(n) for n in self.NAMES}

    def __getitem__(self, name):
        return self.end[name] - self.start[name]


@pytest.fixture
def counters():
    return Counters
