"""torch.autocast("lazytensor", dtype=torch.bfloat16): PyTorch's autocast policy on the device.
Products take bf16 copies and give bf16 results, norms, softmax and losses run in f32, and a
HuggingFace model trains under it as under the CPU's autocast, with nothing falling back."""

import warnings

import pytest
import torch

import lazytensor_torch as ltt

from conftest import DEVICE, Counters

# bf16 keeps 8 significant bits: two executors that round the same products in different orders
# differ by a few bf16 ulps (2^-8 relative each).
BF16 = dict(rtol=2e-2, atol=2e-2)


def test_products_give_bf16_and_norms_f32():
    seed = torch.seed() % 2**31
    torch.manual_seed(seed)
    a, b = torch.randn(64, 96), torch.randn(96, 48)
    w, bias = torch.randn(48, 96), torch.randn(48)
    x = torch.randn(8, 16, 48)
    logits, labels = torch.randn(64, 48).bfloat16(), torch.randint(0, 48, (64,))
    results = {}
    for device in ("cpu", DEVICE):
        with torch.autocast(device, dtype=torch.bfloat16):
            mm = a.to(device) @ b.to(device)
            lin = torch.nn.functional.linear(a.to(device), w.to(device), bias.to(device))
            norm = torch.nn.functional.layer_norm(x.to(device).bfloat16(), (48,))
            soft = torch.softmax(x.to(device).bfloat16(), dim=-1)
            mixed = mm + a.to(device)[:, :48]  # bf16 + f32: the wider
            # bf16 logits, as a bf16 model's head gives them: the loss is computed in f32
            loss = torch.nn.functional.cross_entropy(logits.to(device), labels.to(device))
        results[device] = [t.cpu() for t in (mm, lin, norm, soft, mixed, loss)]
    for got, want in zip(results[DEVICE][:5], results["cpu"][:5]):
        torch.testing.assert_close(got.float(), want.float(), **BF16, msg=f"seed {seed}")
    # the same f32 log-softmax of the same bf16 logits: f32's rounding only
    torch.testing.assert_close(results[DEVICE][5], results["cpu"][5], rtol=1e-5, atol=0,
                               msg=f"seed {seed}")
    # The accelerators' policy (CUDA's, XPU's): layer norm in f32, where the CPU's keeps bf16.
    assert [t.dtype for t in results[DEVICE]] == [
        torch.bfloat16, torch.bfloat16, torch.float32, torch.float32, torch.float32, torch.float32]


def test_binary_cross_entropy_runs_in_f32_as_under_the_cpus_autocast():
    seed = torch.seed() % 2**31
    torch.manual_seed(seed)
    x, w, target = torch.randn(16, 32), torch.randn(32, 8), torch.rand(16, 8)
    losses = {}
    for device in ("cpu", DEVICE):
        with torch.autocast(device, dtype=torch.bfloat16):
            probability = torch.sigmoid(x.to(device) @ w.to(device))  # bf16, as a bf16 head's
            losses[device] = torch.nn.functional.binary_cross_entropy(probability,
                                                                      target.to(device))
    assert losses[DEVICE].dtype == losses["cpu"].dtype == torch.float32
    torch.testing.assert_close(losses[DEVICE].cpu(), losses["cpu"], **BF16, msg=f"seed {seed}")


def test_outside_the_region_and_without_a_dtype():
    """The default lower precision is bf16 in the thread that loaded the device (PyTorch keeps
    autocast's default dtype per thread)."""
    a, b = torch.randn(8, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)
    assert (a @ b).dtype == torch.float32
    with torch.autocast(DEVICE):  # the device's default lower precision is bf16
        assert (a @ b).dtype == torch.bfloat16
        with torch.autocast(DEVICE, enabled=False):
            assert (a @ b).dtype == torch.float32
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast(DEVICE, dtype=torch.float16):  # no f16 products: autocast is off
            assert (a @ b).dtype == torch.float32
    assert any("lazytensor" in str(w.message) for w in caught)


def test_gradients_reach_f32_parameters():
    seed = torch.seed() % 2**31
    torch.manual_seed(seed)
    layer = torch.nn.Linear(32, 16)
    x = torch.randn(4, 32)
    grads = {}
    for device in ("cpu", DEVICE):
        model = torch.nn.Linear(32, 16).to(device)
        model.load_state_dict(layer.state_dict())
        with torch.autocast(device, dtype=torch.bfloat16):
            out = model(x.to(device))
            assert out.dtype == torch.bfloat16
            loss = out.float().pow(2).mean()
        loss.backward()
        grads[device] = (model.weight.grad.cpu(), model.bias.grad.cpu())
    for got, want in zip(grads[DEVICE], grads["cpu"]):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, **BF16, msg=f"seed {seed}")


transformers = pytest.importorskip("transformers")

VOCAB, SEQ, BATCH, STEPS = 30522, 32, 4, 6


def test_bert_trains_under_autocast_as_on_the_cpu():
    """BertForMaskedLM (MiniLM's shape, SDPA, dropout 0) with AdamW under autocast, fitting one
    batch: the losses fall as the CPU's autocast run's do, within bf16's rounding, and the
    weights move the same way; no fallback, no compile after the second step."""
    seed = torch.seed() % 2**31
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
        intermediate_size=1536, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    reference = transformers.BertForMaskedLM(config)
    start = {k: v.clone() for k, v in reference.state_dict().items()}
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (BATCH, SEQ), generator=g)
    labels = torch.where(torch.rand(BATCH, SEQ, generator=g) < 0.15, ids, -100)
    labels[:, 0] = ids[:, 0]
    losses, moves, per_step = {}, {}, []
    for device in ("cpu", DEVICE):
        model = transformers.BertForMaskedLM(config)
        model.load_state_dict(reference.state_dict())
        model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        losses[device] = []
        for _ in range(STEPS):
            with Counters() as c:
                with torch.autocast(device, dtype=torch.bfloat16):
                    loss = model(input_ids=ids.to(device), labels=labels.to(device)).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses[device].append(loss.item())
            if device == DEVICE:
                per_step.append(c)
        moves[device] = torch.cat([(v.cpu() - start[k]).double().flatten()
                                   for k, v in model.state_dict().items()])
    similarity = torch.nn.functional.cosine_similarity(moves[DEVICE], moves["cpu"], dim=0)
    print(f"\nlosses, device {losses[DEVICE]}\n       cpu    {losses['cpu']}; cosine {similarity:.4f}")
    torch.testing.assert_close(torch.tensor(losses[DEVICE]), torch.tensor(losses["cpu"]),
                               rtol=1e-2, atol=0, msg=f"seed {seed}")
    assert losses[DEVICE][-1] < losses[DEVICE][0] - 1.0, "the batch was not fitted"
    assert similarity > 0.95, f"seed {seed}: the weights moved differently (cosine {similarity:.3f})"
    for step, c in enumerate(per_step, start=1):
        assert c["Fallback"] == 0, f"step {step}: {ltt.metrics.fallback_counts()}"
        assert c["TransferToDeviceSync"] == 0, f"step {step} uploaded a number"
        if step >= 3:
            assert c["UncachedCompile"] == 0, f"step {step} compiled"
