"""One BERT-base encoder layer in PyTorch eager, forward + backward per step: the peer of
bench/transformer_block_benchmark.cpp (same layer, shapes, dropout, loss and thread count).

    python3 bench/peers/transformer_block_torch.py [--batch 8] [--seq 128] [--steps 10]
        [--warmup 3] [--threads N] [--dropout 0.1]

Runs under Debian's PyTorch 1.13 (/usr/bin/python3) and current PyTorch (.venv-peers): only
torch, no numpy, no transformers. The layer is HF's BertLayer in training mode, written out:
post-LN, additive mask (1 - mask) * -10000, dropout 0.1 on the attention probabilities and
after each sublayer, LayerNorm eps 1e-12, GELU (erf). Parameters f32 with BERT's init; loss
mean(output * r) for a fixed random r; gradients set to None before each step.
"""
import argparse
import math
import os
import platform
import statistics
import time

HIDDEN, HEADS, HEAD_DIM, INTER = 768, 12, 64, 3072
LN_EPS = 1e-12


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def make_layer(torch, dropout):
    nn = torch.nn

    class BertLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query = nn.Linear(HIDDEN, HIDDEN)
            self.key = nn.Linear(HIDDEN, HIDDEN)
            self.value = nn.Linear(HIDDEN, HIDDEN)
            self.attn_out = nn.Linear(HIDDEN, HIDDEN)
            self.ln1 = nn.LayerNorm(HIDDEN, eps=LN_EPS)
            self.inter = nn.Linear(HIDDEN, INTER)
            self.out = nn.Linear(INTER, HIDDEN)
            self.ln2 = nn.LayerNorm(HIDDEN, eps=LN_EPS)
            self.drop = nn.Dropout(dropout)  # p == 0: the input itself
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    m.weight.data.normal_(0.0, 0.02)
                    m.bias.data.zero_()

        def forward(self, x, mask):
            b, s, _ = x.shape

            def heads(t):  # [B, S, H] -> [B, NH, S, D]
                return t.view(b, s, HEADS, HEAD_DIM).permute(0, 2, 1, 3)

            q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
            additive = ((1.0 - mask) * -10000.0).view(b, 1, 1, s)
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HEAD_DIM) + additive
            probs = self.drop(torch.softmax(scores, dim=-1))
            context = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, s, HIDDEN)
            h1 = self.ln1(self.drop(self.attn_out(context)) + x)
            inter = torch.nn.functional.gelu(self.inter(h1))  # erf form
            return self.ln2(self.drop(self.out(inter)) + h1)

    return BertLayer()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="0: one per core (os.cpu_count)")
    ap.add_argument("--dropout", type=float, default=0.1)
    args = ap.parse_args()

    import torch

    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    b, s = args.batch, args.seq
    layer = make_layer(torch, args.dropout).train()
    x = torch.randn(b, s, HIDDEN)
    r = torch.randn(b, s, HIDDEN)
    mask = torch.ones(b, s)
    mask[1::2, s - s // 4:] = 0.0  # every other sequence has its last quarter padded

    times = []
    loss = None
    for i in range(args.warmup + args.steps):
        for p in layer.parameters():
            p.grad = None
        t0 = time.perf_counter()
        loss = (layer(x, mask) * r).mean()
        loss.backward()
        t = time.perf_counter() - t0
        if i >= args.warmup:
            times.append(t)

    step = statistics.median(times)
    tokens = b * s
    print(f"# transformer_block_torch: PyTorch {torch.__version__} eager "
          f"({'/usr/bin/python3' if 'dist-packages' in torch.__file__ else 'venv'}: "
          f"{torch.__file__.rsplit('/torch/', 1)[0]})")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} hardware threads; "
          f"torch.get_num_threads() = {torch.get_num_threads()}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"sanity: loss {loss.item():.6g}, |grad wq| {layer.query.weight.grad.norm().item():.6g}")
    print()
    print(f"| torch | batch x seq | threads | dropout | step ms (median of {args.steps}) | tokens/s |")
    print("|---|---|---|---|---|---|")
    print(f"| {torch.__version__} | {b}x{s} | {torch.get_num_threads()} | {args.dropout:g} "
          f"| {step * 1e3:.1f} "
          f"| {tokens / step:.0f} |")
    print()
    print("(steps, ms: " + " ".join(f"{t * 1e3:.1f}" for t in times) + ")")


if __name__ == "__main__":
    main()
