"""Shared by the peers driver and every peer script; needs only numpy.

Data exchange uses lazytensor's dump format: a directory with manifest.json and raw
little-endian float32 files in C order. The driver writes the timing data in the same
format, so a peer reads agreement dumps and timing data with one loader.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

import numpy as np

HPARAM_KEYS = ("lr", "beta1", "beta2", "eps", "weight_decay")
DEFAULT_HPARAMS = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 0.01}

# BERT configs (HF BertModel, no heads); tiny is lazytensor's test model.
BERT_CONFIGS = {
    "tiny": dict(vocab=1000, positions=64, hidden=64, intermediate=256, layers=2),
    "bert-base": dict(vocab=30522, positions=512, hidden=768, intermediate=3072, layers=12),
    "bert-large": dict(vocab=30522, positions=512, hidden=1024, intermediate=4096, layers=24),
}


def bert_shapes(model):
    """[(name, shape)] of HF BertModel's parameters, in named_parameters() order."""
    c = BERT_CONFIGS[model]
    h, i = c["hidden"], c["intermediate"]
    out = [("embeddings.word_embeddings.weight", [c["vocab"], h]),
           ("embeddings.position_embeddings.weight", [c["positions"], h]),
           ("embeddings.token_type_embeddings.weight", [2, h]),
           ("embeddings.LayerNorm.weight", [h]),
           ("embeddings.LayerNorm.bias", [h])]
    for layer in range(c["layers"]):
        pre = f"encoder.layer.{layer}."
        for proj in ("query", "key", "value"):
            out += [(pre + f"attention.self.{proj}.weight", [h, h]),
                    (pre + f"attention.self.{proj}.bias", [h])]
        out += [(pre + "attention.output.dense.weight", [h, h]),
                (pre + "attention.output.dense.bias", [h]),
                (pre + "attention.output.LayerNorm.weight", [h]),
                (pre + "attention.output.LayerNorm.bias", [h]),
                (pre + "intermediate.dense.weight", [i, h]),
                (pre + "intermediate.dense.bias", [i]),
                (pre + "output.dense.weight", [h, i]),
                (pre + "output.dense.bias", [h]),
                (pre + "output.LayerNorm.weight", [h]),
                (pre + "output.LayerNorm.bias", [h])]
    out += [("pooler.dense.weight", [h, h]), ("pooler.dense.bias", [h])]
    return out


def numel(shape):
    return math.prod(shape)


# ---- dump format ----------------------------------------------------------------------

def write_f32(path, array):
    np.ascontiguousarray(array, dtype="<f4").tofile(path)


def read_f32(path, shape):
    return np.fromfile(path, dtype="<f4").reshape(shape)


def write_timing_data(directory, shapes, seed, hparams=DEFAULT_HPARAMS):
    """Writes params randn*0.02 and grads randn*1e-3 for `shapes`, one tensor at a time."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    entries = []
    for k, (name, shape) in enumerate(shapes):
        p, g = f"p{k}.f32", f"g{k}.f32"
        write_f32(os.path.join(directory, p), rng.standard_normal(shape, dtype=np.float32) * 0.02)
        write_f32(os.path.join(directory, g), rng.standard_normal(shape, dtype=np.float32) * 1e-3)
        entries.append({"name": name, "shape": list(shape), "param": p, "grad": g})
    manifest = {"seed": seed, **hparams, "tensors": entries}
    # The manifest is written last: its presence marks the directory complete.
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def load_dump(directory):
    """Returns (manifest, params, grads, params_after or None) with numpy float32 arrays."""
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    params, grads, after = [], [], []
    for t in manifest["tensors"]:
        params.append(read_f32(os.path.join(directory, t["param"]), t["shape"]))
        grads.append(read_f32(os.path.join(directory, t["grad"]), t["shape"]))
        if "param_after" in t:
            after.append(read_f32(os.path.join(directory, t["param_after"]), t["shape"]))
    return manifest, params, grads, (after if after else None)


def hparams_of(manifest):
    return {k: float(manifest.get(k, DEFAULT_HPARAMS[k])) for k in HPARAM_KEYS}


# ---- reference and agreement ------------------------------------------------------------

def step_size(hp, t):
    """HF AdamW's bias-corrected step size for step t (from 1), in Python double."""
    return hp["lr"] * math.sqrt(1.0 - hp["beta2"] ** t) / (1.0 - hp["beta1"] ** t)


def reference_adamw(params, grads, hp, steps, dtype=np.float64):
    """HF AdamW (transformers 4.6.0, correct_bias=True) in numpy, op for op."""
    out = []
    for p0, g0 in zip(params, grads):
        p, g = p0.astype(dtype), g0.astype(dtype)
        m, v = np.zeros_like(p), np.zeros_like(p)
        for t in range(1, steps + 1):
            m = m * dtype(hp["beta1"]) + g * dtype(1 - hp["beta1"])
            v = v * dtype(hp["beta2"]) + (g * g) * dtype(1 - hp["beta2"])
            denom = np.sqrt(v) + dtype(hp["eps"])
            p = p + dtype(-step_size(hp, t)) * (m / denom)
            p = p + p * dtype(-hp["lr"] * hp["weight_decay"])
        out.append(p)
    return out


def compare(results, expected, rtol=1e-4, atol=1e-6):
    """Agreement summary: passes if every tensor is allclose(rtol, atol)."""
    if len(results) != len(expected):
        return {"ok": False, "max_abs": None, "max_rel": None,
                "error": f"{len(results)} tensors, expected {len(expected)}"}
    ok, max_abs, max_rel = True, 0.0, 0.0
    for r, e in zip(results, expected):
        r, e = np.asarray(r, dtype=np.float64), np.asarray(e, dtype=np.float64)
        if r.shape != e.shape:
            return {"ok": False, "max_abs": None, "max_rel": None,
                    "error": f"shape {list(r.shape)} != expected {list(e.shape)}"}
        diff = np.abs(r - e)
        max_abs = max(max_abs, float(diff.max(initial=0.0)))
        # Relative error only where the expected value is above atol; below it, atol rules.
        big = np.abs(e) > atol
        max_rel = max(max_rel, float((diff[big] / np.abs(e[big])).max(initial=0.0)))
        ok = ok and bool(np.allclose(r, e, rtol=rtol, atol=atol))
    return {"ok": ok, "max_abs": max_abs, "max_rel": max_rel}


# ---- what each peer script runs -------------------------------------------------------------

def time_steps(step, steps, counters=None):
    """Calls step(t) for t = 1..steps, timing each; step must return once its work is done.

    counters() -> {name: number} is read after the first step and after the last, so the
    difference counts what the steady-state steps did, without warm-up and first compile.
    Returns (seconds per step, counter differences or None).
    """
    seconds, first = [], None
    for t in range(1, steps + 1):
        start = time.perf_counter()
        step(t)
        seconds.append(time.perf_counter() - start)
        # Progress for the driver: a peer killed for time or memory still tells how far it got.
        print(f"step {t}: {seconds[-1]:.4f} s", file=sys.stderr, flush=True)
        if t == 1 and counters:
            first = counters()
    if not counters:
        return seconds, None
    last = counters()
    return seconds, {k: last[k] - first.get(k, 0) for k in last if last[k] != first.get(k, 0)}


def peer_main(run):
    """Command line of a peer script.

    run(variant, params, grads, hp, steps, fetch) -> dict with:
      step_seconds: list, one per step (the first includes warm-up and compiles)
      params: list of numpy arrays after the steps (needed only when fetch is true)
      version: the framework's version
      counters: counter differences over the steps after the first (see time_steps)
      transfers: int, compiles: {"uncached": int, "cached": int}, both over the steps
        after the first; absent where the framework does not count them
      notes: optional text
    The result goes to --result as JSON; an exception is reported there, not raised.
    """
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("check", "time"), required=True)
    ap.add_argument("--data", required=True, help="dump or timing-data directory")
    ap.add_argument("--steps", type=int, help="timed steps, after one warm-up step")
    ap.add_argument("--variant", required=True)
    ap.add_argument("--result", required=True)
    args = ap.parse_args()
    try:
        manifest, params, grads, after = load_dump(args.data)
        hp = hparams_of(manifest)
        if args.mode == "check":
            out = run(args.variant, params, grads, hp, int(manifest["steps"]), fetch=True)
            result = {"status": "ok", "agreement": compare(out["params"], after)}
        else:
            out = run(args.variant, params, grads, hp, args.steps + 1, fetch=False)
            timed = out["step_seconds"][1:]
            result = {"status": "ok", "step_seconds_median": statistics.median(timed),
                      "first_step_seconds": out["step_seconds"][0]}
        out.pop("params", None)
        result.update(out)
    except ModuleNotFoundError as e:
        result = {"status": "not installed", "error": f"{e} ({sys.executable})"}
    except Exception as e:  # reported in the table; one peer must not stop the others
        traceback.print_exc()
        result = {"status": "error", "error": f"{type(e).__name__}: {e}".splitlines()[0]}
    with open(args.result, "w") as f:
        json.dump(result, f)
