#!/usr/bin/env python3
"""BERT masked-LM training in PyTorch, against `lazytensor train`: parity and speed.

  --mode parity    train from a weights file on lazytensor's exported batches, dropout off,
                   float32; compare the per-step losses with lazytensor's --json (and,
                   optionally, the final parameters with lazytensor's --save checkpoint).
                   Exit code 1 when a step's loss differs by more than --tolerance (relative).
  --mode perf      median step time (forward + loss + backward + clip + AdamW step + LR
                   schedule) on random token batches, dropout 0.1, with --impl eager
                   (any torch), compile (torch.compile of forward + loss; optimizer eager)
                   or xla (torch_xla on its PJRT CPU device, torch_xla.sync + wait per step);
                   --precision bf16 runs forward + loss under torch.autocast("cpu",
                   torch.bfloat16) (eager and compile), as `lazytensor train --precision bf16`.
  --mode check-hf  the model of bert_mlm_torch.py against transformers' BertForMaskedLM:
                   same weights (random, biases and LayerNorms included), same padded
                   batch, dropout off: logits, loss and gradients (.venv-peers only).
  --mode summary   a Markdown table from lazytensor's and the peers' perf JSONs (and the
                   parity JSONs), as bench/peers/train_peers.sh prints it.

Runs under /usr/bin/python3 (Debian's PyTorch 1.13), .venv-peers (current PyTorch; needed
for compile and check-hf) and .venv-xla (torch-xla). Needs torch and numpy.
"""
import argparse
import json
import math
import os
import platform
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

GIB = 1 << 30
MASK_ID = 103  # [MASK] in BERT's uncased vocabulary


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def set_threads(torch, threads):
    """--threads 0: every core this process may use (as the other peers do)."""
    n = threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(n)
    return n


def write_json(path, obj):
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)


def rel(a, b):
    """|a - b| relative to |b| (b the reference)."""
    return abs(a - b) / max(abs(b), 1e-30)


def torch_desc(torch):
    where = "Debian /usr/bin/python3" if "dist-packages" in torch.__file__ else sys.prefix
    return f"PyTorch {torch.__version__} ({where})"


# ---- parity -------------------------------------------------------------------------------------

def parity(args):
    import torch
    import bert_mlm_torch as bm

    threads = set_threads(torch, args.threads)
    torch.manual_seed(args.seed)
    arrays, _ = bm.read_safetensors(args.batches)
    for key in ("input_ids", "labels", "attention_mask"):
        if key not in arrays or arrays[key].ndim != 3:
            raise SystemExit(f"{args.batches}: needs {key} [steps, B, L]")
    ids, labels, mask = (torch.from_numpy(arrays[k].astype(np.int64))
                         for k in ("input_ids", "labels", "attention_mask"))
    steps, batch, seq = ids.shape
    if args.steps is not None:
        steps = min(steps, args.steps)

    model = bm.BertForMaskedLM(bm.config(args.model), dropout=0.0)
    skipped = bm.load_weights(model, args.init)
    model.train()  # dropout 0: training mode changes nothing
    opt, sched = bm.make_optimizer(model, args.lr, args.weight_decay, args.warmup, steps,
                                   args.schedule)
    params = list(model.parameters())

    print(f"# parity: {torch_desc(torch)}, {threads} threads, model {args.model} "
          f"({bm.num_params(model):,} parameters), {steps} steps of {batch}x{seq}\n"
          f"init {args.init}" + (f" (skipped: {len(skipped)} tensors: "
                                 f"{sorted(set(skipped.values()))})" if skipped else "") +
          f"\nlr {args.lr} warmup {args.warmup} schedule {args.schedule} clip-norm "
          f"{args.clip_norm} weight-decay {args.weight_decay}", flush=True)

    losses, grad_norms, lrs, seconds = [], [], [], []
    for t in range(1, steps + 1):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = bm.forward_loss(model, ids[t - 1], mask[t - 1], labels[t - 1])
        loss.backward()
        if args.clip_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, args.clip_norm)
        else:
            norm = torch.norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))
        lr = opt.param_groups[0]["lr"]
        expected = args.lr * bm.lr_factor(t - 1, args.warmup, steps, args.schedule)
        assert abs(lr - expected) <= 1e-12 * max(1.0, abs(expected)), (t, lr, expected)
        opt.step()
        sched.step()
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
        grad_norms.append(float(norm))
        lrs.append(lr)
        print(f"step {t}: loss {losses[-1]:.7f}  grad norm {grad_norms[-1]:.6g}  lr {lr:.6g}  "
              f"{seconds[-1]:.2f} s", file=sys.stderr, flush=True)

    result = {"mode": "parity", "torch": torch.__version__, "python": sys.executable,
              "cpu": cpu_model(), "threads": threads, "model": args.model, "init": args.init,
              "batches": args.batches, "steps": steps, "batch": batch, "seq": seq,
              "lr": args.lr, "warmup": args.warmup, "schedule": args.schedule,
              "clip_norm": args.clip_norm, "weight_decay": args.weight_decay,
              "losses": losses, "grad_norms": grad_norms, "lrs": lrs, "step_seconds": seconds,
              "tolerance": args.tolerance}
    ok = True
    if args.lazytensor_json:
        with open(args.lazytensor_json) as f:
            lt = json.load(f)
        ok = compare_losses(result, lt, args.tolerance)
    if args.lazytensor_final:
        result["final_params"] = compare_final(model, opt, args.lazytensor_final, bm)
    if args.save:
        tensors = bm.weights_dict(model)
        for name, p in model.named_parameters():
            state = opt.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    tensors[f"optimizer.{key}.{name}"] = state[key]
        bm.write_safetensors(args.save, tensors, {"steps": steps, "torch": torch.__version__})
        print(f"wrote {args.save}")
    result["ok"] = ok
    write_json(args.json, result)
    return 0 if ok else 1


def compare_losses(result, lt, tol):
    """Per-step table of torch's and lazytensor's losses; True if all within tol."""
    mine, theirs = result["losses"], lt.get("losses") or []
    extra = [k for k in ("grad_norms", "lrs") if isinstance(lt.get(k), list)]
    for key in ("lr", "warmup", "schedule", "clip_norm", "weight_decay"):
        if key in lt and not isinstance(lt[key], (list, dict)) and lt[key] != result[key]:
            print(f"WARNING: lazytensor's {key} is {lt[key]!r}, here {result[key]!r}")
    head = "| step | torch loss | lazytensor loss | rel diff |"
    for k in extra:
        head += f" torch {k[:-1]} | lazytensor {k[:-1]} |"
    print("\n" + head + "\n|" + "---|" * head.count(" |"))
    worst, rows = 0.0, []
    for t, a in enumerate(mine):
        b = theirs[t] if t < len(theirs) else None
        d = rel(b, a) if b is not None else math.inf
        if not math.isfinite(d):
            d = math.inf
        worst = max(worst, d)
        rows.append({"step": t + 1, "torch": a, "lazytensor": b, "rel_diff": d})
        line = f"| {t + 1} | {a:.7f} | {'-' if b is None else f'{b:.7f}'} | {d:.2e} |"
        for k in extra:
            mk, tk = result[k], lt[k]
            line += f" {mk[t]:.6g} | {f'{tk[t]:.6g}' if t < len(tk) else '-'} |"
        print(line)
    ok = len(theirs) == len(mine) and worst <= tol
    if len(theirs) != len(mine):
        print(f"\nlazytensor reported {len(theirs)} losses, torch ran {len(mine)} steps")
    print(f"\nmax relative loss difference: {worst:.3e} (tolerance {tol:g}): "
          f"{'PASS' if ok else 'FAIL'}")
    result["loss_comparison"] = {"rows": rows, "max_rel_diff": worst,
                                 "lazytensor_steps": len(theirs), "pass": ok}
    return ok


def _diffs(pairs):
    """[(max abs, max rel, scaled)] for [(a, b)], b the reference: rel is elementwise where
    |b| > 1e-6; scaled is max abs over the tensor's max |b|, floored at 1e-3 of the largest
    |b| of all tensors (a parameter whose gradient is 0 in exact arithmetic, such as the key
    biases, holds rounding noise that Adam scales up to lr-sized steps)."""
    pairs = [(np.asarray(a, np.float64), np.asarray(b, np.float64)) for a, b in pairs]
    peak = max((float(np.abs(b).max(initial=0.0)) for _, b in pairs), default=0.0)
    out = []
    for a, b in pairs:
        d = np.abs(a - b)
        big = np.abs(b) > 1e-6
        mabs = float(d.max(initial=0.0))
        out.append((mabs, float((d[big] / np.abs(b[big])).max(initial=0.0)),
                    mabs / max(float(np.abs(b).max(initial=0.0)), 1e-3 * peak, 1e-30)))
    return out


def compare_final(model, opt, path, bm):
    arrays, _ = bm.read_safetensors(path)
    named = list(model.named_parameters())
    missing = [n for n, _ in named if n not in arrays]
    present = [(n, p) for n, p in named if n in arrays]
    rows = [{"name": n, "max_abs": d[0], "max_rel": d[1], "scaled": d[2]}
            for (n, _), d in zip(present, _diffs([(arrays[n], p.detach().numpy())
                                                 for n, p in present]))]
    opt_rows = {}
    for key in ("exp_avg", "exp_avg_sq"):
        diffs = _diffs([(arrays[f"optimizer.{key}.{n}"], opt.state[p][key].numpy())
                        for n, p in named
                        if f"optimizer.{key}.{n}" in arrays and key in opt.state.get(p, {})])
        if diffs:
            opt_rows[key] = {"tensors": len(diffs), "max_abs": max(d[0] for d in diffs),
                             "scaled": max(d[2] for d in diffs)}
    rows.sort(key=lambda r: -r["scaled"])
    print(f"\nfinal parameters vs {path} (torch the reference; rel: elementwise where "
          "|torch| > 1e-6; scaled: max abs / max |torch| of the tensor, floored at 1e-3 of the "
          "largest |torch|), worst 5 by scaled:")
    print("| tensor | max abs | max rel | scaled |\n|---|---|---|---|")
    for r in rows[:5]:
        print(f"| {r['name']} | {r['max_abs']:.3e} | {r['max_rel']:.3e} | {r['scaled']:.3e} |")
    overall = {"tensors": len(rows), "missing": missing,
               "max_abs": max((r["max_abs"] for r in rows), default=None),
               "max_rel": max((r["max_rel"] for r in rows), default=None),
               "max_scaled": max((r["scaled"] for r in rows), default=None)}
    if rows:
        print(f"overall ({len(rows)} tensors): max abs {overall['max_abs']:.3e}, max rel "
              f"{overall['max_rel']:.3e}, max scaled {overall['max_scaled']:.3e}")
    if missing:
        print(f"missing from lazytensor's checkpoint: {missing}")
    for key, r in opt_rows.items():
        print(f"optimizer {key} ({r['tensors']} tensors): max abs {r['max_abs']:.3e}, "
              f"max scaled {r['scaled']:.3e}")
    return {"overall": overall, "worst": rows[:5], "optimizer": opt_rows}


# ---- perf ----------------------------------------------------------------------------------------

def random_batches(n, batch, seq, vocab, seed):
    """n MLM batches: random ids in [1000, vocab), 15% of positions predicted (label = the
    id, input [MASK]), the rest -100; no padding."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(1000, vocab, size=(batch, seq), dtype=np.int64)
        pick = rng.random((batch, seq)) < 0.15
        labels = np.where(pick, ids, -100)
        ids = np.where(pick, MASK_ID, ids)
        out.append((ids, labels, np.ones((batch, seq), dtype=np.int64)))
    return out


def perf(args):
    if args.precision == "bf16" and args.impl == "xla":
        raise SystemExit("perf: --precision bf16 is torch.autocast on the CPU: eager or compile")
    if args.impl == "xla":
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        usable = sorted(os.sched_getaffinity(0))
        if args.threads and args.threads < len(usable):
            # XLA's CPU client sizes its own thread pool from the cores it may use.
            os.sched_setaffinity(0, usable[:args.threads])
    import torch
    import bert_mlm_torch as bm

    threads = set_threads(torch, args.threads)
    torch.manual_seed(args.seed)
    c = bm.config(args.model)
    model = bm.BertForMaskedLM(c, dropout=args.dropout).init_weights(args.seed)
    total = args.warmup_steps + args.steps
    data = [tuple(torch.from_numpy(a) for a in b)
            for b in random_batches(total, args.batch, args.seq, c["vocab"], args.seed)]

    notes, counters, sync = [], None, (lambda: None)
    if args.impl == "xla":
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
        dev = torch_xla.device()
        model.to(dev)
        xm.set_rng_state(args.seed)

        def sync():
            torch_xla.sync()
            xm.wait_device_ops()

        def counters():
            out = {"UncachedCompile": met.counter_value("UncachedCompile") or 0,
                   "CachedCompile": met.counter_value("CachedCompile") or 0}
            data_ = met.metric_data("CompileTime")
            out["CompileTime.samples"] = data_[0] if data_ else 0
            out["CompileTime.seconds"] = (data_[1] / 1e9) if data_ else 0.0
            return out

        version = f"torch_xla {torch_xla.__version__} (torch {torch.__version__})"
        notes.append(f"PJRT {os.environ.get('PJRT_DEVICE')}; XLA's own CPU thread pool on "
                     f"{len(os.sched_getaffinity(0))} cores")
    else:
        dev = torch.device("cpu")
        version = f"torch {torch.__version__}"
    model.train()
    opt, sched = bm.make_optimizer(model, args.lr, args.weight_decay, args.warmup, total,
                                   args.schedule)
    params = list(model.parameters())

    if args.impl == "compile":
        import torch._dynamo.utils

        class ForwardLoss(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, ids, mask, labels):
                return bm.forward_loss(self.m, ids, mask, labels)

        fl = torch.compile(ForwardLoss(model))
        notes.append("torch.compile(forward + loss), mode default; AdamW + clip eager")

        def counters():
            return {"unique_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"]}
    else:
        def fl(ids, mask, labels):
            return bm.forward_loss(model, ids, mask, labels)

    if args.precision == "bf16":
        notes.append("forward + loss under torch.autocast('cpu', torch.bfloat16)")
        full_precision = fl

        def fl(ids, mask, labels):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return full_precision(ids, mask, labels)

    def step(t):
        ids, labels, mask = (a.to(dev) for a in data[t])
        opt.zero_grad(set_to_none=True)
        loss = fl(ids, mask, labels)
        loss.backward()
        if args.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, args.clip_norm)
        opt.step()
        sched.step()
        sync()
        return loss.detach()

    print(f"# perf: {args.impl} {args.precision}, {version}, {threads} threads, model {args.model} "
          f"({bm.num_params(model):,} parameters), batch {args.batch} x seq {args.seq}, "
          f"dropout {args.dropout}, {args.warmup_steps} warm-up + {args.steps} timed steps; "
          f"lr {args.lr} warmup {args.warmup} schedule {args.schedule} clip-norm "
          f"{args.clip_norm} weight-decay {args.weight_decay}",
          file=sys.stderr, flush=True)
    seconds, losses, before, after = [], [], None, None
    for t in range(total):
        if t == args.warmup_steps and counters:
            before = counters()
        start = time.perf_counter()
        losses.append(step(t))
        seconds.append(time.perf_counter() - start)
        print(f"step {t + 1}{' (warm-up)' if t < args.warmup_steps else ''}: "
              f"{seconds[-1]:.4f} s", file=sys.stderr, flush=True)
    if counters:
        after = counters()
    losses = [float(x.cpu()) for x in losses]
    warm, timed = seconds[:args.warmup_steps], seconds[args.warmup_steps:]
    median = statistics.median(timed)
    tokens = args.batch * args.seq
    result = {"mode": "perf", "impl": args.impl, "precision": args.precision,
              "version": version, "torch": torch.__version__,
              "python": sys.executable, "cpu": cpu_model(), "cores": os.cpu_count(),
              "threads": threads, "model": args.model, "params": bm.num_params(model),
              "batch": args.batch, "seq": args.seq, "dropout": args.dropout,
              "warmup_steps": args.warmup_steps, "steps": args.steps,
              "step_seconds": timed, "warmup_step_seconds": warm,
              "step_seconds_median": median, "tokens_per_s": tokens / median,
              "first_step_seconds": seconds[0],
              # What the warm-up steps cost beyond steady-state steps: compile + first runs.
              "warmup_seconds": sum(warm),
              "warmup_extra_seconds": max(0.0, sum(warm) - len(warm) * median),
              "peak_rss_bytes": peak_rss_bytes(), "losses": losses, "notes": "; ".join(notes)}
    if before is not None:
        result["counters_timed"] = {k: after[k] - before[k] for k in after}
        result["counters_total"] = after
        if args.impl == "xla":
            result["compile_seconds"] = after["CompileTime.seconds"]
    print(f"| impl | version | threads | median step (s) | tokens/s | first step (s) | "
          f"warm-up total (s) | peak RSS (GiB) |\n|---|---|---|---|---|---|---|---|\n"
          f"| {args.impl} | {version} | {threads} | {median:.4f} | {tokens / median:.0f} | "
          f"{seconds[0]:.2f} | {sum(warm):.2f} | {peak_rss_bytes() / GIB:.2f} |")
    if before is not None:
        print(f"counters over the timed steps: {result['counters_timed']}")
    print(f"losses: first {losses[0]:.4f}, last {losses[-1]:.4f}")
    write_json(args.json, result)
    return 0


# ---- check against transformers ------------------------------------------------------------------

def check_hf(args):
    import torch
    import bert_mlm_torch as bm
    import safetensors.torch
    import transformers

    threads = set_threads(torch, args.threads)
    c = bm.config(args.model)
    torch.manual_seed(args.seed)
    ours = bm.BertForMaskedLM(c, dropout=0.0).init_weights(args.seed)
    with torch.no_grad():  # no zero biases or unit LayerNorms that would hide mistakes
        for name, p in ours.named_parameters():
            p.add_(torch.randn(p.shape) * (0.1 if "LayerNorm.weight" in name else 0.02))
    work = args.work or "/tmp/lazytensor-train-peers"
    os.makedirs(work, exist_ok=True)
    ours_path = os.path.join(work, f"check-hf-{args.model}-ours.safetensors")
    bm.write_safetensors(ours_path, bm.weights_dict(ours))

    b, s = 3, args.seq
    rng = np.random.default_rng(args.seed)
    ids = rng.integers(1000, c["vocab"], size=(b, s))
    mask = np.ones((b, s), dtype=np.int64)
    mask[1, s - s // 4:] = 0  # padded tails
    mask[2, s // 2:] = 0
    ids[mask == 0] = 0
    labels = np.where((rng.random((b, s)) < 0.15) & (mask == 1), ids, -100)
    ids, mask, labels = (torch.from_numpy(a) for a in (ids, mask, labels))

    ours.eval()
    our_logits = ours(ids, mask)
    our_loss = bm.mlm_loss(our_logits, labels)
    our_loss.backward()
    our_grads = {n: p.grad.clone() for n, p in ours.named_parameters()}

    ok, report = True, {"mode": "check-hf", "torch": torch.__version__,
                        "transformers": transformers.__version__, "model": args.model,
                        "threads": threads, "variants": {}}
    print(f"# check-hf: bert_mlm_torch vs transformers {transformers.__version__} "
          f"BertForMaskedLM, {torch_desc(torch)}, model {args.model}, batch {b}x{s} with "
          "padding, dropout off")
    for attn in ("eager", "sdpa"):
        cfg = transformers.BertConfig(
            vocab_size=c["vocab"], hidden_size=c["hidden"], num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"], intermediate_size=c["intermediate"],
            max_position_embeddings=c["max_position"], type_vocab_size=c["type_vocab"],
            hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            layer_norm_eps=1e-12, pad_token_id=0)
        cfg._attn_implementation = attn
        hf = transformers.BertForMaskedLM(cfg)
        # Our writer's file through the reference reader into HF.
        state = safetensors.torch.load_file(ours_path)
        res = hf.load_state_dict(state, strict=False)
        hf.tie_weights()
        bad_missing = [k for k in res.missing_keys
                       if k not in bm.TIED and not k.endswith(("position_ids", "token_type_ids"))]
        assert not bad_missing and not res.unexpected_keys, (bad_missing, res.unexpected_keys)
        dec = hf.cls.predictions.decoder
        assert dec.weight.data_ptr() == hf.bert.embeddings.word_embeddings.weight.data_ptr()
        assert torch.equal(dec.bias, hf.cls.predictions.bias)
        # HF's state dict through the reference writer into our reader and module.
        hf_path = os.path.join(work, f"check-hf-{args.model}-hf-{attn}.safetensors")
        safetensors.torch.save_file({k: v.detach().clone().contiguous()
                                     for k, v in hf.state_dict().items()}, hf_path)
        mine = bm.BertForMaskedLM(c, dropout=0.0)
        skipped = bm.load_weights(mine, hf_path)
        for n, p in mine.named_parameters():
            assert torch.equal(p, dict(ours.named_parameters())[n]), n

        hf.eval()
        out = hf(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        hf_params = dict(hf.named_parameters())
        logit_abs = (out.logits - our_logits).abs().max().item()
        logit_rel = logit_abs / out.logits.abs().max().item()
        loss_rel = rel(our_loss.item(), out.loss.item())
        # Relative to the tensor's largest gradient, but at least 1e-3 of the median of
        # those: the key biases' true gradient is 0 (softmax ignores a per-row constant),
        # so theirs is rounding noise.
        scale = {n: hf_params[n].grad.abs().max().item() for n in our_grads}
        floor = 1e-3 * statistics.median(scale.values())
        grad_worst, grad_name = 0.0, None
        for n, g in our_grads.items():
            hg = hf_params[n].grad
            d = (g - hg).abs().max().item() / max(scale[n], floor)
            if d > grad_worst:
                grad_worst, grad_name = d, n
        v_ok = logit_rel <= 1e-5 and loss_rel <= 1e-5 and grad_worst <= 1e-4
        ok = ok and v_ok
        print(f"attn {attn}: loss ours {our_loss.item():.8f} HF {out.loss.item():.8f} (rel "
              f"{loss_rel:.1e}); logits max abs diff {logit_abs:.2e} = {logit_rel:.1e} of max "
              f"|logit|; gradients worst {grad_worst:.1e} of the tensor's max |grad| (floored) "
              f"({grad_name}); HF file skipped {sorted(skipped)}: {'PASS' if v_ok else 'FAIL'}")
        report["variants"][attn] = {"loss_ours": our_loss.item(), "loss_hf": out.loss.item(),
                                    "loss_rel": loss_rel, "logits_max_abs": logit_abs,
                                    "logits_rel_to_max": logit_rel,
                                    "grad_worst_rel_to_max": grad_worst, "grad_worst": grad_name,
                                    "pass": v_ok}
    report["pass"] = ok
    print("check-hf: " + ("PASS (logits and loss within 1e-5, gradients within 1e-4)"
                          if ok else "FAIL"))
    write_json(args.json, report)
    return 0 if ok else 1


# ---- summary -------------------------------------------------------------------------------------

def lazytensor_perf(report, batch, seq, skip):
    """(median step seconds, tokens/s, peak RSS bytes or None, note) from lazytensor's --json.
    Reads step_seconds (per step; the first `skip` dropped, as the peers' warm-up steps),
    else step_seconds_median, else tokens_per_second."""
    steps = report.get("step_seconds")
    batch = report.get("batch", batch)
    seq = report.get("seq", seq)
    if isinstance(steps, list) and len(steps) > skip:
        median, note = statistics.median(steps[skip:]), f"median of step_seconds[{skip}:]"
    elif report.get("step_seconds_median"):
        median, note = report["step_seconds_median"], "its step_seconds_median"
    elif report.get("tokens_per_second"):
        median, note = batch * seq / report["tokens_per_second"], "its tokens_per_second"
    else:
        raise KeyError("no step_seconds, step_seconds_median or tokens_per_second")
    rss = report.get("peak_rss_bytes")
    if report.get("peak_device_bytes"):
        note += f"; peak device memory {report['peak_device_bytes'] / GIB:.2f} GiB"
    return median, batch * seq / median, rss, note


def summary(args):
    rows = []
    base = {}  # precision -> lazytensor's tokens/s
    runs = [("fp32", args.lazytensor_json, args.lazytensor_rss),
            ("bf16", args.lazytensor_bf16_json, args.lazytensor_bf16_rss)]
    # Further lazytensor runs (--mlm-head all): rows against the main run of their precision
    # (their RSS files, when given, in the same order).
    more_rss = args.lazytensor_more_rss or []
    runs += [(None, path, more_rss[k] if k < len(more_rss) else None)
             for k, path in enumerate(args.lazytensor_more)]
    for precision, path, rss_path in runs:
        main_run = precision is not None
        if not path:
            continue
        name = "lazytensor"
        try:
            with open(path) as f:
                lt = json.load(f)
            precision = precision or lt.get("precision", "fp32")
            if precision == "bf16":
                name += " --precision bf16"
            if lt.get("mlm_head") == "all":
                name += " --mlm-head all"
            median, tps, rss, note = lazytensor_perf(lt, args.batch, args.seq, args.warmup_steps)
            if rss_path:  # train_peers.sh measures it around the process
                with open(rss_path) as f:
                    rss = int(f.read().strip())
            lt.setdefault("first_step_seconds", (lt.get("step_seconds") or [None])[0])
            if main_run:
                base[precision] = tps
                ratio = "1.00x"
            else:
                ratio = f"{tps / base[precision]:.2f}x" if precision in base else "-"
            if lt.get("mlm_head"):
                where = "every position" if lt["mlm_head"] == "all" else "the predicted tokens"
                note += f"; MLM head at {where}"
            if lt.get("gemm_share"):
                note += f"; GEMMs {100 * lt['gemm_share']:.0f}% of device time"
            version = lt.get("version") or "/".join(
                str(lt[k]) for k in ("scalar_policy", "kernel_compiler") if lt.get(k)) or "-"
            rows.append([name, version, lt.get("threads", args.threads or "-"),
                         f"{median:.4f}", f"{tps:.0f}", ratio,
                         "-" if rss is None else f"{rss / GIB:.2f}",
                         "-" if lt.get("first_step_seconds") is None
                         else f"{lt['first_step_seconds']:.2f}", note])
        except (OSError, ValueError, KeyError) as e:
            rows.append([name, "-", "-", "-", "-", "-", "-", "-",
                         f"no result: {type(e).__name__}: {e}"])
    for path in args.inputs:
        try:
            with open(path) as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            rows.append([os.path.basename(path), "-", "-", "-", "-", "-", "-", "-",
                         f"no result: {type(e).__name__}"])
            continue
        precision = r.get("precision", "fp32")
        ratio = f"{r['tokens_per_s'] / base[precision]:.2f}x" if precision in base else "-"
        name = {"eager": "PyTorch eager", "compile": "torch.compile",
                "xla": "torch-xla (PJRT CPU)"}[r["impl"]]
        if precision == "bf16":
            name += " + autocast bf16"
        rows.append([name, r["version"], r["threads"], f"{r['step_seconds_median']:.4f}",
                     f"{r['tokens_per_s']:.0f}", ratio, f"{r['peak_rss_bytes'] / GIB:.2f}",
                     f"{r['first_step_seconds']:.2f}",
                     f"warm-up {r['warmup_seconds']:.1f} s over {r['warmup_steps']} steps"
                     + (f"; {r['notes']}" if r.get("notes") else "")])
    cpu = cpu_model()
    print(f"\n## BERT MLM training step, model {args.model}, batch {args.batch} x seq "
          f"{args.seq}\n\nCPU: {cpu}, {os.cpu_count()} cores\n")
    head = ["implementation", "version", "threads", "median step (s)", "tokens/s",
            "tokens/s vs lazytensor (same precision)", "peak RSS (GiB)", "first step (s)",
            "notes"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(x).replace("|", "/") for x in r) + " |")
    print("\n(tokens/s vs lazytensor: above 1x the peer is faster. Step: forward + loss + "
          "backward + clip + AdamW + schedule; dropout 0.1.)")
    parity_rows = []
    for path in args.parity:
        try:
            with open(path) as f:
                p = json.load(f)
            cmp_ = p.get("loss_comparison") or {}
            fin = (p.get("final_params") or {}).get("overall") or {}
            parity_rows.append([p["torch"], p["steps"], cmp_.get("max_rel_diff", "-"),
                                "PASS" if p.get("ok") and cmp_ else
                                ("FAIL" if cmp_ else "no lazytensor losses"),
                                fin.get("max_abs", "-"), fin.get("max_scaled", "-")])
        except (OSError, ValueError, KeyError) as e:
            parity_rows.append([os.path.basename(path), "-", "-", f"no result: {e}", "-", "-"])
    if parity_rows:
        print("\n## Parity (dropout 0, float32, lazytensor's batches and initial weights)\n")
        print("| torch | steps | max rel loss diff | verdict | final params max abs | "
              "final params scaled diff |\n|---|---|---|---|---|---|")
        for r in parity_rows:
            print("| " + " | ".join(f"{x:.2e}" if isinstance(x, float) else str(x)
                                    for x in r) + " |")
    write_json(args.json, {"cpu": cpu, "model": args.model, "rows": rows,
                           "parity": parity_rows})
    return 0


# ---- main ------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("parity", "perf", "check-hf", "summary"), required=True)
    ap.add_argument("--model", default="mini", choices=("tiny", "mini", "base", "large"))
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--threads", type=int, default=0, help="0: all usable cores")
    ap.add_argument("--seed", type=int, default=0)
    # parity
    ap.add_argument("--init", help="parity: initial weights (safetensors, HF names)")
    ap.add_argument("--batches", help="parity: lazytensor's --export-batches file")
    ap.add_argument("--steps", type=int, help="parity: at most this many steps (default: "
                    "all batches); perf: timed steps (default 10)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=0, help="schedule warm-up steps")
    ap.add_argument("--schedule", default="linear", choices=("linear", "cosine", "constant"))
    ap.add_argument("--clip-norm", type=float, default=1.0)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--lazytensor-json", help="parity: lazytensor's --json (its losses); "
                    "summary: lazytensor's perf --json")
    ap.add_argument("--lazytensor-final", help="parity: lazytensor's --save after the steps")
    ap.add_argument("--save", help="parity: write torch's final weights (+ optimizer state)")
    ap.add_argument("--tolerance", type=float, default=1e-3, help="parity: max rel loss diff")
    # perf
    ap.add_argument("--impl", default="eager", choices=("eager", "compile", "xla"))
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                    help="perf: bf16 runs forward + loss under torch.autocast (CPU, bfloat16)")
    ap.add_argument("--lazytensor-bf16-json", help="summary: `lazytensor train --precision "
                    "bf16 --json`")
    ap.add_argument("--lazytensor-bf16-rss", help="summary: its peak RSS (bytes, in a file)")
    ap.add_argument("--lazytensor-more-rss", nargs="*", default=[],
                    help="summary: the peak RSS files of --lazytensor-more, in its order")
    ap.add_argument("--lazytensor-more", nargs="*", default=[],
                    help="summary: more lazytensor --json reports (e.g. --mlm-head all), each a "
                    "row against the first lazytensor run of its precision")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--warmup-steps", type=int, default=3, help="perf: untimed steps first")
    ap.add_argument("--dropout", type=float, default=0.1, help="perf: dropout probability")
    # check-hf
    ap.add_argument("--work", help="check-hf: directory for its weights files")
    # summary
    ap.add_argument("--inputs", nargs="*", default=[], help="summary: peers' perf JSONs")
    ap.add_argument("--parity", nargs="*", default=[], help="summary: parity JSONs")
    ap.add_argument("--lazytensor-rss", help="summary: file holding lazytensor's peak RSS "
                    "in bytes")
    args = ap.parse_args()

    if args.mode == "parity":
        if not args.init or not args.batches:
            ap.error("--mode parity needs --init and --batches")
        return parity(args)
    if args.mode == "perf":
        args.steps = args.steps or 10
        return perf(args)
    if args.mode == "check-hf":
        return check_hf(args)
    return summary(args)


if __name__ == "__main__":
    sys.exit(main())
