#!/usr/bin/env python3
"""Reference values from PyTorch for the transformer-block gradient test.

How to run (from the repository root):

    /usr/bin/python3 bench/reference/transformer_block_reference.py

Requirements: Debian's PyTorch package (`apt-get install -y python3-torch`,
PyTorch 1.13 on Debian 12) for the system Python /usr/bin/python3.  Nothing
is pip-installed.

What it writes: tests/data/transformer_block_reference.json with

  * "config", "inputs", "outputs", "grads": a small post-LN BERT-style
    transformer layer (self-attention with an additive padding mask, erf GELU
    feed-forward, two LayerNorms, a vocabulary projection and a
    cross-entropy loss with ignore_index=-100), evaluated in torch.float64
    with seed torch.manual_seed(20261202); "grads" holds d loss / d input for
    x and every parameter.
  * "ops": single-op references (input values, a random upstream gradient,
    output values, and the gradients of (out * upstream).sum() w.r.t. each
    differentiable input).

All tensors are stored as {"shape": [...], "values": [flat row-major]};
floats are written by json.dump from Python floats (repr), which round-trips
doubles exactly.  The output is deterministic for a given torch version.
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F

SEED = 20261202
OPS_SEED = 20261203

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_PATH = os.path.join(REPO_ROOT, "tests", "data", "transformer_block_reference.json")


def tensor_json(t):
    t = t.detach().cpu().contiguous()
    if t.dtype in (torch.int64, torch.int32, torch.long):
        values = [int(v) for v in t.reshape(-1).tolist()]
    else:
        values = [float(v) for v in t.to(torch.float64).reshape(-1).tolist()]
    return {"shape": list(t.shape), "values": values}


def transformer_block():
    torch.manual_seed(SEED)
    dt = torch.float64
    B, S, H, NH, I, V = 2, 5, 8, 2, 16, 11
    D = H // NH
    eps = 1e-12

    def randn(*shape):
        return torch.randn(*shape, dtype=dt)

    # Inputs, created in this fixed order.
    x = randn(B, S, H)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=dt)
    targets = torch.randint(0, V, (B, S), dtype=torch.int64)
    targets[0, 1] = -100
    targets[1, 3] = -100

    # Parameters, created in this fixed order.
    params = {}
    for name in ("Wq", "Wk", "Wv", "Wo"):
        params[name] = randn(H, H) * 0.3
    for name in ("bq", "bk", "bv", "bo"):
        params[name] = randn(H) * 0.1
    params["ln1_w"] = 1.0 + 0.1 * randn(H)
    params["ln1_b"] = 0.1 * randn(H)
    params["W1"] = randn(I, H) * 0.3
    params["b1"] = randn(I) * 0.1
    params["W2"] = randn(H, I) * 0.3
    params["b2"] = randn(H) * 0.1
    params["ln2_w"] = 1.0 + 0.1 * randn(H)
    params["ln2_b"] = 0.1 * randn(H)
    params["Wout"] = randn(V, H) * 0.3
    params["bout"] = randn(V) * 0.1

    x.requires_grad_(True)
    for p in params.values():
        p.requires_grad_(True)
    P = params

    def heads(t):
        return t.reshape(B, S, NH, D).permute(0, 2, 1, 3)

    q = heads(F.linear(x, P["Wq"], P["bq"]))
    k = heads(F.linear(x, P["Wk"], P["bk"]))
    v = heads(F.linear(x, P["Wv"], P["bv"]))
    scores = q @ k.transpose(-1, -2) / math.sqrt(D) + (1.0 - mask)[:, None, None, :] * -10000.0
    probs = torch.softmax(scores, dim=-1)
    ctx = (probs @ v).permute(0, 2, 1, 3).reshape(B, S, H)
    attn = F.linear(ctx, P["Wo"], P["bo"])
    h1 = F.layer_norm(x + attn, (H,), P["ln1_w"], P["ln1_b"], eps=eps)
    ff = F.linear(F.gelu(F.linear(h1, P["W1"], P["b1"]), approximate="none"), P["W2"], P["b2"])
    h2 = F.layer_norm(h1 + ff, (H,), P["ln2_w"], P["ln2_b"], eps=eps)
    logits = F.linear(h2, P["Wout"], P["bout"])
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100)
    loss.backward()

    inputs = {"x": tensor_json(x), "mask": tensor_json(mask), "targets": tensor_json(targets)}
    for name, p in params.items():
        inputs[name] = tensor_json(p)
    outputs = {
        "probs": tensor_json(probs),
        "h1": tensor_json(h1),
        "h2": tensor_json(h2),
        "logits": tensor_json(logits),
        "loss": float(loss.item()),
    }
    grads = {"x": tensor_json(x.grad)}
    for name, p in params.items():
        grads[name] = tensor_json(p.grad)
    config = {"B": B, "S": S, "H": H, "NH": NH, "D": D, "I": I, "V": V, "eps": eps}
    return config, inputs, outputs, grads


def op_case(fn, inputs, grad_names, upstream=None, extra_inputs=None):
    """Run fn(**inputs, **extra_inputs); grads of (out * upstream).sum()."""
    for n in grad_names:
        inputs[n].requires_grad_(True)
    all_inputs = dict(inputs)
    if extra_inputs:
        all_inputs.update(extra_inputs)
    out = fn(**all_inputs)
    if upstream is None:
        upstream = torch.randn(out.shape, dtype=torch.float64)
    (out * upstream).sum().backward()
    return {
        "inputs": {n: tensor_json(t) for n, t in all_inputs.items()},
        "upstream": tensor_json(upstream),
        "output": tensor_json(out),
        "grads": {n: tensor_json(inputs[n].grad) for n in grad_names},
    }


def single_ops():
    torch.manual_seed(OPS_SEED)
    dt = torch.float64

    def randn(*shape):
        return torch.randn(*shape, dtype=dt)

    ops = {}
    ops["softmax_dim1"] = op_case(lambda x: torch.softmax(x, dim=1), {"x": randn(3, 4)}, ["x"])
    ops["log_softmax_dim0"] = op_case(lambda x: torch.log_softmax(x, dim=0), {"x": randn(3, 4)}, ["x"])
    ops["layer_norm"] = op_case(
        lambda x, weight, bias: F.layer_norm(x, (6,), weight, bias, eps=1e-5),
        {"x": randn(2, 3, 6), "weight": 1.0 + 0.1 * randn(6), "bias": 0.1 * randn(6)},
        ["x", "weight", "bias"],
    )
    ops["layer_norm"]["eps"] = 1e-5
    ops["layer_norm"]["normalized_shape"] = [6]
    ops["gelu_erf"] = op_case(lambda x: F.gelu(x, approximate="none"), {"x": randn(7)}, ["x"])
    ops["gelu_tanh"] = op_case(lambda x: F.gelu(x, approximate="tanh"), {"x": randn(7)}, ["x"])

    ce_targets = torch.randint(0, 5, (4,), dtype=torch.int64)
    ce_targets[2] = -100
    ops["cross_entropy"] = op_case(
        lambda logits, targets: F.cross_entropy(logits, targets, ignore_index=-100, reduction="mean"),
        {"logits": randn(4, 5)},
        ["logits"],
        upstream=torch.tensor(1.0, dtype=dt),
        extra_inputs={"targets": ce_targets},
    )
    ops["cross_entropy"]["ignore_index"] = -100
    ops["cross_entropy"]["reduction"] = "mean"

    ops["matmul_broadcast"] = op_case(
        lambda a, b: a @ b, {"a": randn(2, 1, 3, 4), "b": randn(3, 4, 5)}, ["a", "b"]
    )

    ids = torch.tensor([[1, 4, 1, 0], [5, 2, 4, 4]], dtype=torch.int64)  # repeated ids 1 and 4
    ops["embedding"] = op_case(
        lambda weight, ids: F.embedding(ids, weight),
        {"weight": randn(6, 3)},
        ["weight"],
        extra_inputs={"ids": ids},
    )
    ops["var_unbiased"] = op_case(lambda x: torch.var(x, dim=1), {"x": randn(3, 5)}, ["x"])
    ops["var_unbiased"]["dim"] = [1]
    ops["var_unbiased"]["unbiased"] = True
    ops["mean_dim"] = op_case(lambda x: torch.mean(x, dim=[0, 2], keepdim=True), {"x": randn(2, 3, 4)}, ["x"])
    ops["mean_dim"]["dim"] = [0, 2]
    ops["mean_dim"]["keepdim"] = True
    return ops


def main():
    torch.set_default_dtype(torch.float64)
    config, inputs, outputs, grads = transformer_block()
    ops = single_ops()
    doc = {
        "description": (
            "PyTorch reference values (torch.float64) for a gradient test of a small post-LN "
            "BERT-style transformer block (multi-head self-attention with additive padding mask "
            "-10000, erf GELU FFN, LayerNorm eps 1e-12, vocabulary projection, cross-entropy with "
            "ignore_index=-100, mean reduction): inputs, parameters, intermediate outputs, loss and "
            "d loss/d x and d loss/d each parameter; plus 'ops': single-op references with the "
            "gradients of (out * upstream).sum(). Generated by "
            "bench/reference/transformer_block_reference.py (seeds %d for the block, %d for ops) "
            "with torch %s on Python %s. Tensors are {shape, values} with values flat row-major."
            % (SEED, OPS_SEED, torch.__version__, sys.version.split()[0])
        ),
        "torch_version": torch.__version__,
        "config": config,
        "inputs": inputs,
        "outputs": outputs,
        "grads": grads,
        "ops": ops,
    }
    os.makedirs(os.path.dirname(OUT_PATH), exist_ok=True)
    with open(OUT_PATH, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote %s (%d bytes); torch %s; loss = %r"
          % (OUT_PATH, os.path.getsize(OUT_PATH), torch.__version__, outputs["loss"]))


if __name__ == "__main__":
    main()
