"""Masked-language-model batches: the host's masking and the head at the predicted tokens."""
import numpy as np

import lazytensor as lt


def windows(rng, tokens=4000, seq=32):
    stream = [int(t) for t in rng.integers(1000, 30000, size=tokens)]
    return lt.data.TokenWindows(stream, seq, 101, 102, int(rng.integers(1 << 31)))


def test_host_masking_lists_the_predicted_tokens(rng):
    w = windows(rng)
    ids = w.shuffled_ids(3, 16)
    np.testing.assert_array_equal(np.array(ids).reshape(16, 32), w.shuffled_batch(3, 16).numpy())
    options = lt.data.MlmOptions()
    shown, labels, positions, position_labels = lt.data.mask_tokens(ids, 16, 32, options, key=9)
    labels = labels.numpy().reshape(-1)
    positions, position_labels = positions.numpy(), position_labels.numpy()
    assert len(positions) == lt.data.predicted_capacity(16 * 32, options.mask_prob)
    predicted = np.flatnonzero(labels != -100)
    assert 0 < len(predicted) <= len(positions)
    np.testing.assert_array_equal(positions[:len(predicted)], predicted)
    np.testing.assert_array_equal(position_labels[:len(predicted)], np.array(ids)[predicted])
    assert (position_labels[len(predicted):] == -100).all()
    assert (positions[len(predicted):] == 0).all()
    ids_array = np.array(ids)
    assert not np.isin(ids_array[predicted], [0, 101, 102]).any()
    unpredicted = labels == -100
    np.testing.assert_array_equal(shown.numpy().reshape(-1)[unpredicted], ids_array[unpredicted])
    again = lt.data.mask_tokens(ids, 16, 32, options, key=9)[1].numpy().reshape(-1)
    np.testing.assert_array_equal(again, labels)


def test_loss_at_the_predicted_rows_equals_the_loss_everywhere(rng):
    w = windows(rng, seq=16)
    ids = w.shuffled_ids(0, 4)
    options = lt.data.MlmOptions()
    options.vocab_size = 50
    options.mask_id = 4
    options.mask_prob = 0.3
    _, labels, positions, position_labels = lt.data.mask_tokens(ids, 4, 16, options, key=2)
    hidden = rng.standard_normal((64, 8)).astype(np.float32)
    weight = rng.standard_normal((8, 50)).astype(np.float32)
    targets = np.where(labels.numpy().reshape(-1) == -100, -100,
                       labels.numpy().reshape(-1) % 50)
    row_targets = np.where(position_labels.numpy() == -100, -100, position_labels.numpy() % 50)

    def loss_and_grad(at_rows):
        h = lt.tensor(hidden, requires_grad=True)
        if at_rows:
            logits = h.index_select(0, positions) @ lt.tensor(weight)
            loss = lt.nn.functional.cross_entropy(logits, lt.tensor(row_targets))
        else:
            loss = lt.nn.functional.cross_entropy(h @ lt.tensor(weight), lt.tensor(targets))
        loss.backward()
        return loss.item(), h.grad.numpy()

    loss_all, grad_all = loss_and_grad(False)
    loss_rows, grad_rows = loss_and_grad(True)
    np.testing.assert_allclose(loss_rows, loss_all, rtol=1e-5)
    np.testing.assert_allclose(grad_rows, grad_all, rtol=1e-4, atol=1e-7)
    assert np.abs(grad_all).max() > 0
