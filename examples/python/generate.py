"""Generation over a growing context, as a GPT script writes it: a small causal transformer made
of lt.nn modules learns to count (mod 16) on batches of varying length, then continues a prompt
greedily and by top-k sampling, one token at a time. Every token runs the model on the whole
context, a length it has not seen: sizes are kernel arguments, so the lengths share one compiled
graph.

    python examples/python/generate.py --tokens 40
"""
import argparse
import math
import random

import lazytensor as lt
import lazytensor.nn as nn
import lazytensor.nn.functional as F

VOCAB, WIDTH, LAYERS, CONTEXT = 16, 32, 2, 128


class Block(nn.Module):
    """Pre-norm attention and MLP, one head."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x, future):
        qkv = self.qkv(self.ln1(x))
        q, k, v = (qkv[:, :, i * WIDTH:(i + 1) * WIDTH] for i in range(3))
        scores = (q @ k.transpose(1, 2)) * (1.0 / math.sqrt(WIDTH))
        attention = scores.masked_fill(future, float("-inf")).softmax(-1)
        h = x + self.proj(attention @ v)
        return h + self.down(F.gelu(self.up(self.ln2(h))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):
        t = ids.shape[1]  # whatever the context holds now
        position = lt.arange(t)
        future = position.reshape(t, 1) < position.reshape(1, t)
        x = self.tokens(ids) + self.positions(position)
        for block in self.blocks:
            x = block(x, future)
        return self.head(self.ln(x))


def counting_batch(rng, batch, length):
    """Counting sequences s, s + 1, ... (mod 16) from random starts."""
    starts = [rng.randrange(VOCAB) for _ in range(batch)]
    return lt.tensor([[(s + i) % VOCAB for i in range(length)] for s in starts])


def next_token(logits, top_k, temperature):
    """The argmax of the last position's logits [1, vocab] (greedy), or a draw from the k most
    likely at `temperature`, as nanoGPT samples: topk, the rest masked out, multinomial."""
    if top_k <= 1:
        return logits.argmax(-1, keepdim=True)
    scaled = logits / temperature
    kth, _ = lt.topk(scaled, top_k)
    scaled = scaled.masked_fill(scaled < kth[:, [-1]], float("-inf"))
    return lt.multinomial(scaled.softmax(-1), num_samples=1)


@lt.no_grad()
def generate(model, prompt, tokens, top_k=1, temperature=1.0):
    """Reads each token as it is made, with no mark_step(): a read keeps what it computed, so the
    context is data again after each token."""
    context = lt.tensor([prompt])
    out = []
    for _ in range(min(tokens, CONTEXT - len(prompt))):
        logits = model(context)[:, -1]  # the last position: [1, vocab]
        nxt = next_token(logits, top_k, temperature)
        context = lt.cat([context, nxt], dim=1)
        out.append(nxt.item())
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=40, help="tokens to generate (at most 124)")
    parser.add_argument("--steps", type=int, default=150, help="training steps")
    args = parser.parse_args()

    lt.manual_seed(0)
    rng = random.Random(1)
    model = Gpt()
    lt.mark_step()
    optimizer = lt.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(args.steps):
        length = rng.randrange(8, 101)  # each batch of its own length: one graph for all
        ids = counting_batch(rng, 16, length)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        lt.mark_step()
    print(f"trained to count on {args.steps} lengths: loss {loss.item():.4f}, "
          f"graphs compiled: {lt.metrics.counter_value('UncachedCompile')}")

    before = lt.metrics.counter_value("UncachedCompile")
    model.eval()
    prompt = [3, 4, 5, 6]
    greedy = generate(model, prompt, args.tokens)
    print("greedy:", *greedy)
    print("top-3 at temperature 4:", *generate(model, prompt, args.tokens, top_k=3, temperature=4.0))
    counts = greedy == [(7 + i) % VOCAB for i in range(len(greedy))]
    print("greedy continues the count:", "yes" if counts else "no")
    print(f"graphs compiled for {len(greedy)} tokens of each kind: "
          f"{lt.metrics.counter_value('UncachedCompile') - before}")
    raise SystemExit(0 if counts else 1)


if __name__ == "__main__":
    main()
