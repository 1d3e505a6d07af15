"""A nanoGPT-style character GPT written as PyTorch code: model, AdamW with weight-decay groups,
warm-up + cosine learning rate, clipping, evaluation under no_grad with integer counts, a
checkpoint saved and resumed, and top-k sampling with multinomial. test_gpt_script.py runs it on
PyTorch and, with only the imports renamed (`import lazytensor as torch`, ...), on lazytensor.

    python gpt_script.py --init weights.npz --out result.json
"""
import argparse
import inspect
import json
import math

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

VOCAB, BLOCK, LAYERS, HEADS, WIDTH, BATCH = 65, 32, 2, 2, 32, 8


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
        self.c_proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(WIDTH, dim=2)
        k = k.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        q = q.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = v.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, WIDTH),
            wpe=nn.Embedding(BLOCK, WIDTH),
            h=nn.ModuleList([Block() for _ in range(LAYERS)]),
            ln_f=nn.LayerNorm(WIDTH),
        ))
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * LAYERS))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                           ignore_index=-1)
        return self.lm_head(x[:, [-1], :]), None

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        groups = [{"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}]
        extra = dict(fused=False) if "fused" in inspect.signature(torch.optim.AdamW).parameters else {}
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= BLOCK else idx[:, -BLOCK:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def get_batch(data, step):
    ix = np.random.default_rng(step).integers(0, len(data) - BLOCK - 1, BATCH)
    x = torch.from_numpy(np.stack([data[i:i + BLOCK] for i in ix]).astype(np.int64))
    y = torch.from_numpy(np.stack([data[i + 1:i + 1 + BLOCK] for i in ix]).astype(np.int64))
    return x, y


def get_lr(it, warmup=4, total=20, top=3e-3, bottom=3e-4):
    if it < warmup:
        return top * (it + 1) / (warmup + 1)
    ratio = (it - warmup) / (total - warmup)
    return bottom + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (top - bottom)


def train(model, optimizer, data, first, last):
    losses = []
    for it in range(first, last):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        x, y = get_batch(data, it)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if hasattr(torch, "mark_step"):
            torch.mark_step()  # the one line a lazy engine adds
        losses.append(loss.item())
    return losses


@torch.no_grad()
def estimate_loss(model, data):
    model.eval()
    losses = torch.zeros(4)
    correct = 0
    for k in range(4):
        x, y = get_batch(data, 1000 + k)
        logits, loss = model(x, y)
        losses[k] = loss.item()
        correct += (logits.argmax(-1) == y).sum().item()  # bool to an int64 count
    model.train()
    return losses.mean().item(), correct / (4 * BATCH * BLOCK)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--init", required=True, help="initial weights (.npz): written if absent")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = (np.arange(5000) * 7 % VOCAB).astype(np.int64)  # a text with structure to learn
    torch.manual_seed(1337)
    model = GPT().to(device)
    try:
        weights = np.load(args.init)
        model.load_state_dict({k: torch.tensor(weights[k]) for k in weights.files})
    except FileNotFoundError:
        np.savez(args.init, **{k: v.detach().cpu().numpy() for k, v in model.state_dict().items()})
    optimizer = model.configure_optimizers(0.1, 3e-3, (0.9, 0.95))

    losses = train(model, optimizer, data, 0, 10)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter": 10},
               args.checkpoint)
    losses += train(model, optimizer, data, 10, 20)

    resumed = GPT().to(device)
    checkpoint = torch.load(args.checkpoint, weights_only=False)
    resumed.load_state_dict(checkpoint["model"])
    resumed_optimizer = resumed.configure_optimizers(0.1, 3e-3, (0.9, 0.95))
    resumed_optimizer.load_state_dict(checkpoint["optimizer"])
    train(resumed, resumed_optimizer, data, checkpoint["iter"], 20)
    resumed_equal = all(np.array_equal(a.detach().cpu().numpy(), b.detach().cpu().numpy())
                        for a, b in zip(model.parameters(), resumed.parameters()))

    sample = model.generate(torch.zeros((1, 1), dtype=torch.long, device=device), 50,
                            temperature=0.8, top_k=10)
    val_loss, val_accuracy = estimate_loss(model, data)
    with open(args.out, "w") as f:
        json.dump({"losses": losses, "val_loss": val_loss, "val_accuracy": val_accuracy,
                   "resumed_equal": resumed_equal, "sample": sample[0].tolist()}, f)


if __name__ == "__main__":
    main()
