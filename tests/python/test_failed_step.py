"""A step that fails commits nothing: an lt.nn model's parameters, the optimizer's moments and
step counts and the generator keep their bits, the error is a lazytensor.IndexError (also an
IndexError, as PyTorch raises) naming the op, the value and the valid range, and a run that
hit a bad batch and went on ends with the bits of a run that skipped it."""
import numpy as np
import pytest

import lazytensor as lt

VOCAB, BATCH, LENGTH = 41, 4, 6


def _snapshot(model, optimizer):
    bits = []
    for i, p in enumerate(model.parameters()):
        state = optimizer.state_of(0, i)
        bits += [p.numpy().view(np.uint32).copy(), state["exp_avg"].numpy().view(np.uint32).copy(),
                 state["exp_avg_sq"].numpy().view(np.uint32).copy(), state["step"]]
    g = lt.generator_state()
    return bits + [(g.seed, g.offset)]


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def _train(seed, steps, bad, fault):
    """A small embedding model with dropout, trained with AdamW on fresh batches, reading the
    loss each step; at step `bad` the batch goes wrong as `fault` says (None: it is skipped)."""
    lt.manual_seed(seed)
    model = lt.nn.Sequential(lt.nn.Embedding(VOCAB, 16), lt.nn.Dropout(0.2), lt.nn.Linear(16, VOCAB))
    optimizer = lt.optim.AdamW(model.parameters(), lr=1e-2)
    lt.mark_step()
    rng = np.random.default_rng(seed)
    before = after = error = None
    for step in range(steps):
        ids = rng.integers(0, VOCAB, size=(BATCH, LENGTH))
        targets = rng.integers(0, VOCAB, size=(BATCH * LENGTH,))
        failing = step == bad
        if failing and fault is None:
            continue
        if failing:
            before = _snapshot(model, optimizer)
            if fault in ("host id", "device id"):
                ids[2, 3] = VOCAB + 2
            if fault == "device target":
                targets[7] = -3
        on_device = failing and fault != "host id"
        upload = (lambda a: lt.tensor(a.astype(np.float32)).to(lt.int64)) if on_device else lt.tensor
        try:
            logits = model(upload(ids)).reshape(-1, VOCAB)
            loss = lt.nn.functional.cross_entropy(logits, upload(targets))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            lt.mark_step()
            loss.item()
            assert not failing, "the bad batch trained"
        except lt.Error as e:
            assert failing, str(e)
            error = e
            optimizer.zero_grad()
            after = _snapshot(model, optimizer)
    lt.wait_device_ops()
    return _snapshot(model, optimizer), before, after, error


@pytest.mark.parametrize("fault, words", [
    ("host id", ["embedding", "id 43", "position [2, 3]", "0 to 40"]),
    ("device id", ["step", "embedding", "index 43", "size 41"]),
    ("device target", ["cross_entropy", "target -3", "position 7", "ignore_index -100"]),
])
def test_a_bad_batch_commits_nothing_and_the_run_goes_on_as_if_skipped(fault, words, rng):
    seed = int(rng.integers(0, 2**31))
    went_on, before, after, error = _train(seed, 4, 2, fault)
    assert isinstance(error, lt.IndexError) and isinstance(error, IndexError)
    for w in words:
        assert w in str(error), str(error)
    assert _same(before, after), "the failed step changed the model, the optimizer or the generator"
    skipped, _, _, _ = _train(seed, 4, 2, None)
    assert _same(went_on, skipped), "the run that hit the bad batch differs from the one that skipped it"


def test_host_state_registered_by_the_user_is_put_back():
    """lt.on_step_failure: a training loop's own counters follow the engine's step."""
    counter = {"seen": 0}
    table = lt.ones(3, 2)
    ids = lt.tensor(np.array([0.0, 5.0], dtype=np.float32)).to(lt.int64)
    counter["seen"] += 1
    lt.on_step_failure(lambda: counter.__setitem__("seen", counter["seen"] - 1))
    rows = lt.embedding(ids, table)
    lt.mark_step()
    with pytest.raises(IndexError):
        rows.numpy()
    assert counter["seen"] == 0


def test_hints_speak_python():
    w = lt.ones(2).requires_grad_()
    with pytest.raises(lt.Error, match=r"with lazytensor\.no_grad\(\):"):
        w.add_(1.0)
    assert lt.front_end() == "python"


def test_a_loop_without_mark_step_is_warned_once_by_its_fourth_step(capfd):
    lt.mark_step()
    lt.set_graph_warn_nodes(1_000_000)  # lets the warning be given again
    model = lt.nn.Linear(8, 1)
    optimizer = lt.optim.SGD(model.parameters(), lr=0.01)
    x, y = lt.randn(16, 8), lt.randn(16, 1)
    warned_at = None
    said = ""
    for step in range(1, 11):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        loss.item()
        err = capfd.readouterr().err
        if err and warned_at is None:
            warned_at = step
        said += err
    lt.mark_step()
    assert warned_at is not None and warned_at <= 4, said
    assert "lazytensor.mark_step()" in said and said.count("warning") == 1, said


def test_a_recompile_names_the_line_that_traced_the_op_that_differs():
    import inspect
    lt.set_debug(True)
    try:
        lt.mark_step()
        x = lt.ones(4)
        y = x * 2.0  # noqa: F841
        lt.mark_step()
        lines = [inspect.currentframe().f_lineno + 1, inspect.currentframe().f_lineno + 2]
        x = lt.ones(4, 1)
        y = x * 2.0  # noqa: F841
        lt.mark_step()
        reason = lt.last_recompile_reason()
    finally:
        lt.set_debug(False)
    assert any(f"test_failed_step.py:{n})" in reason for n in lines), reason
