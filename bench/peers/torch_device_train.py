#!/usr/bin/env python3
"""HuggingFace BertForMaskedLM training through PyTorch, unchanged, on three executors in the
same environment, one process each, same threads: the lazytensor device ("lazytensor"), PyTorch
eager on the CPU, and torch.compile (inductor) on the CPU. Batch 8 x 128 by default, random
token ids with 15% of positions labelled, torch.optim.AdamW (its default for each device:
foreach), a new learning rate every step (LambdaLR). --autocast runs each forward pass under
torch.autocast(<device>, dtype=torch.bfloat16) on every executor.

Prints a Markdown table with the CPU named: median step time, tokens/s, the ratio to eager,
the first step's time, and for the device its host cost per aten call (the wall time of
tracing a step, up to the cut after optimizer.step(), over the aten calls a step makes, which
are counted once with a TorchDispatchMode on the CPU). --rounds N runs each executor N times,
taking turns, and reports medians over the rounds. --json writes the rows.

  .venv-torch/bin/python bench/peers/torch_device_train.py --model mini --steps 5 --rounds 3
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

MODELS = {
    # all-MiniLM-L6-v2's shape, and BERT-base's.
    "mini": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                 intermediate_size=1536),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
}
EXECUTORS = ("lazytensor", "eager", "compile")


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def cpu_isa():
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    for isa in ("amx_bf16", "avx512_bf16", "avx512f", "avx2"):
        if isa in flags:
            return isa
    return "baseline"


def make_batches(steps, batch, seq, vocab, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        ids = torch.randint(5, vocab, (batch, seq), generator=g)
        labels = torch.where(torch.rand(batch, seq, generator=g) < 0.15, ids, -100)
        out.append((ids, torch.ones(batch, seq, dtype=torch.long), labels))
    return out


def count_aten_calls(model, batch, autocast):
    """Aten calls of one training step (forward, backward, AdamW), counted on the CPU (under
    the CPU's autocast with --autocast, whose op lists differ a little from the device's)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids, mask, labels = batch
    with Count():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
    return Count.calls


def run_one(args):
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, max_position_embeddings=512,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                     **MODELS[args.model])
    model = transformers.BertForMaskedLM(config)
    batches = make_batches(args.warmup + args.steps, args.batch, args.seq, 30522, 1)
    aten_calls, device = None, "cpu"
    if args.executor == "lazytensor":
        aten_calls = count_aten_calls(transformers.BertForMaskedLM(config), batches[0],
                                      args.autocast)
        import lazytensor_torch as ltt
        device = "lazytensor"
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))

    def step(ids, mask, labels):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.autocast):
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        opt.step()  # on the device, the graph is cut here
        sched.step()
        opt.zero_grad()
        return out.loss

    if args.executor == "compile":
        step = torch.compile(step)
    times, trace_times, losses = [], [], []
    for ids, mask, labels in batches:
        start = time.perf_counter()
        loss = step(ids.to(device), mask.to(device), labels.to(device))
        traced = time.perf_counter()
        losses.append(loss.item())  # waits for the step
        times.append(time.perf_counter() - start)
        trace_times.append(traced - start)
    timed = times[args.warmup:]
    row = {"executor": args.executor, "model": args.model, "first_step_s": times[0],
           "median_step_s": statistics.median(timed),
           "tokens_per_s": args.batch * args.seq / statistics.median(timed),
           "losses": losses, "torch": torch.__version__, "autocast": args.autocast}
    if aten_calls is not None:
        row["aten_calls_per_step"] = aten_calls
        row["host_us_per_aten_call"] = statistics.median(trace_times[args.warmup:]) / aten_calls * 1e6
        row["fallbacks"] = ltt.metrics.counter_value("Fallback")
    print(json.dumps(row))


def combine_rounds(executor, rounds):
    """One row per executor: the median over its rounds of the per-round median step time
    (and host cost), the first round's first step; the rounds' own figures kept."""
    good = [r for r in rounds if "error" not in r]
    if not good:
        return {"executor": executor, "error": rounds[-1]["error"]}
    row = dict(good[0])
    row["median_step_s"] = statistics.median(r["median_step_s"] for r in good)
    row["tokens_per_s"] = good[0]["tokens_per_s"] * good[0]["median_step_s"] / row["median_step_s"]
    row["round_median_step_s"] = [r["median_step_s"] for r in good]
    if "host_us_per_aten_call" in row:
        row["host_us_per_aten_call"] = statistics.median(r["host_us_per_aten_call"] for r in good)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="mini")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--executors", default=",".join(EXECUTORS))
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of each executor, taking turns; medians over them")
    ap.add_argument("--autocast", action="store_true",
                    help="forward passes under torch.autocast(dtype=torch.bfloat16)")
    ap.add_argument("--executor", help=argparse.SUPPRESS)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.executor:
        return run_one(args)
    executors = args.executors.split(",")
    runs = {e: [] for e in executors}
    # Rounds take turns between the executors, so that a change in the machine's load falls on
    # all of them alike; each executor's figure is the median over its rounds.
    for _ in range(args.rounds):
        for executor in executors:
            cmd = [sys.executable, __file__, "--executor", executor, "--model", args.model,
                   "--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--threads", str(args.threads)]
            if args.autocast:
                cmd.append("--autocast")
            env = dict(os.environ, LT_NUM_THREADS=str(args.threads),
                       OMP_NUM_THREADS=str(args.threads))
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
            if out.returncode != 0 or not lines:
                runs[executor].append(
                    {"error": (out.stderr.strip().splitlines() or ["?"])[-1]})
            else:
                runs[executor].append(json.loads(lines[-1]))
    rows = [combine_rounds(executor, runs[executor]) for executor in executors]
    eager = next((r for r in rows if r["executor"] == "eager" and "error" not in r), None)
    precision = "bf16 autocast" if args.autocast else "fp32"
    print(f"\nBertForMaskedLM {args.model} ({precision}), batch {args.batch} x {args.seq}, AdamW, "
          f"{args.threads} threads; {cpu_name()} ({cpu_isa()}); median of {args.steps} steps "
          f"after {args.warmup}, median of {args.rounds} round(s) taking turns\n")
    print("| executor | median step (s) | tokens/s | vs eager | first step (s) | host µs per aten call |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['executor']} | failed: {r['error'][:80]} | | | | |")
            continue
        ratio = eager["median_step_s"] / r["median_step_s"] if eager else float("nan")
        host = f"{r['host_us_per_aten_call']:.2f} ({r['aten_calls_per_step']} calls)" \
            if "host_us_per_aten_call" in r else ""
        print(f"| {r['executor']} | {r['median_step_s']:.3f} | {r['tokens_per_s']:.0f} | "
              f"{ratio:.2f}x | {r['first_step_s']:.2f} | {host} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_name(), "isa": cpu_isa(), "threads": args.threads,
                       "autocast": args.autocast,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
