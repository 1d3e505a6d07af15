"""lazytensor.save/load and optimizer.state_dict(): nested structures round-trip exactly, a file
runs no code when loaded, and a training run saved and resumed ends bitwise equal to the run
that was not interrupted."""
import numpy as np
import pytest

import lazytensor as lt
import lazytensor.nn as nn


def test_nested_structures_round_trip_exactly(tmp_path, rng=np.random.default_rng()):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    obj = {
        "weights": {"w": lt.tensor(a), "ids": lt.tensor([1, -2, 3]),
                    "mask": lt.tensor([True, False]), "half": lt.tensor(a, dtype=lt.bfloat16)},
        3: [1, 2.5, "text", None, True],
        "pair": (lt.tensor(a).sum(), 7),
    }
    lt.save(obj, tmp_path / "obj.safetensors")
    back = lt.load(tmp_path / "obj.safetensors", map_location="cpu", weights_only=True)
    assert set(back) == {"weights", 3, "pair"}
    np.testing.assert_array_equal(back["weights"]["w"].numpy(), a)
    assert back["weights"]["ids"].dtype == lt.int64 and back["weights"]["ids"].tolist() == [1, -2, 3]
    assert back["weights"]["mask"].tolist() == [True, False]
    assert back["weights"]["half"].dtype == lt.bfloat16
    np.testing.assert_array_equal(back["weights"]["half"].to(lt.float32).numpy(),
                                  lt.tensor(a).to(lt.bfloat16).to(lt.float32).numpy())
    assert back[3] == [1, 2.5, "text", None, True]
    assert isinstance(back["pair"], tuple) and back["pair"][1] == 7
    np.testing.assert_allclose(back["pair"][0].item(), a.sum(), rtol=1e-5)


def test_what_cannot_be_saved_or_loaded_is_named(tmp_path):
    with pytest.raises(TypeError, match="cannot save a set"):
        lt.save({"x": {1, 2}}, tmp_path / "bad.safetensors")
    with pytest.raises(TypeError, match="dict key"):
        lt.save({(1, 2): 3}, tmp_path / "bad.safetensors")
    lt.safetensors.save(str(tmp_path / "plain.safetensors"), {"w": lt.ones(2)})
    with pytest.raises(lt.Error, match="not written by lazytensor.save"):
        lt.load(tmp_path / "plain.safetensors")
    with pytest.raises(lt.Error, match="'cuda' is not available"):
        lt.load(tmp_path / "plain.safetensors", map_location="cuda")


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 2)
        self.register_buffer("scale", lt.ones(2) * 0.5)

    def forward(self, x):
        return self.b(nn.functional.gelu(self.a(x))) * self.scale


def train(model, optimizer, steps, first):
    for k in range(first, first + steps):
        x = lt.tensor(np.random.default_rng(k).standard_normal((5, 4)).astype(np.float32))
        loss = (model(x) ** 2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        lt.mark_step()


@pytest.mark.parametrize("options", [dict(), dict(amsgrad=True), dict(precision="8bit"),
                                     dict(sgd=True)],
                         ids=["adamw", "amsgrad", "8bit", "sgd_momentum"])
def test_a_run_saved_and_resumed_ends_bitwise_equal(tmp_path, options):
    def make():
        lt.manual_seed(4)
        model = Tiny()
        groups = [{"params": model.a.parameters(), "weight_decay": 0.1},
                  {"params": model.b.parameters()}]
        if options.get("sgd"):
            optimizer = lt.optim.SGD(groups, lr=3e-2, momentum=0.9, nesterov=True)
        else:
            optimizer = lt.optim.AdamW(groups, lr=3e-2, **options)
        lt.mark_step()
        return model, optimizer

    model, optimizer = make()
    train(model, optimizer, 3, 0)
    lt.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
            tmp_path / "ck.safetensors")
    train(model, optimizer, 4, 3)

    resumed, resumed_optimizer = make()
    checkpoint = lt.load(tmp_path / "ck.safetensors")
    resumed.load_state_dict(checkpoint["model"])
    resumed_optimizer.load_state_dict(checkpoint["optimizer"])
    assert resumed_optimizer.param_groups[0]["weight_decay"] == 0.1
    assert resumed_optimizer.state_dict()["state"][0]["step"] == 3
    train(resumed, resumed_optimizer, 4, 3)
    for (name, p), q in zip(model.named_parameters(), resumed.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=name)


def test_a_state_that_does_not_fit_changes_nothing():
    model = Tiny()
    optimizer = lt.optim.AdamW(model.parameters())
    state = optimizer.state_dict()
    before = [v.numpy().copy() for v in state["state"][0].values() if isinstance(v, lt.Tensor)]
    wrong = {"state": dict(state["state"]), "param_groups": state["param_groups"]}
    wrong["state"][0] = dict(state["state"][0], exp_avg=lt.ones(3, 3))
    with pytest.raises(lt.Error, match="'exp_avg' of parameter 0"):
        optimizer.load_state_dict(wrong)
    after = [v.numpy() for v in optimizer.state_dict()["state"][0].values() if isinstance(v, lt.Tensor)]
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(lt.Error, match="hold"):
        lt.optim.AdamW(model.a.parameters()).load_state_dict(state)
