"""Fine-tune BERT as a masked-language model on real text, written as a PyTorch user writes it:
the model is ordinary lt.nn modules (HuggingFace's BertForMaskedLM, with its parameter names),
the loop is backward / clip / step / zero_grad, and lt.mark_step() ends each step.

    python examples/python/train_bert.py --init models/all-MiniLM-L6-v2 --steps 100

--init takes a folder with HuggingFace's config.json, vocab.txt and model.safetensors (`make
models` fetches all-MiniLM-L6-v2); without it a small BERT starts from random weights.
"""
import argparse
import json
import math
import os
import time

import lazytensor as lt
import lazytensor.nn as nn
import lazytensor.nn.functional as F


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, h):
        b, n, hidden = h.shape

        def split(x):  # [b, n, hidden] -> [b, heads, n, head_dim]
            return x.view(b, n, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
        probs = self.dropout(F.softmax(scores, -1))
        return (probs @ v).transpose(1, 2).reshape(b, n, hidden)


class BertOutput(nn.Module):
    """dense -> dropout -> LayerNorm(x + residual): HF's BertSelfOutput and BertOutput."""

    def __init__(self, inner, hidden, dropout, eps):
        super().__init__()
        self.dense = nn.Linear(inner, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = BertSelfAttention(c["hidden_size"], c["num_attention_heads"],
                                      c["attention_probs_dropout_prob"])
        self.output = BertOutput(c["hidden_size"], c["hidden_size"], c["hidden_dropout_prob"],
                                 c["layer_norm_eps"])

    def forward(self, h):
        return self.output(self.self(h), h)


class BertIntermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])

    def forward(self, h):
        return F.gelu(self.dense(h))


class BertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertOutput(c["intermediate_size"], c["hidden_size"], c["hidden_dropout_prob"],
                                 c["layer_norm_eps"])

    def forward(self, h):
        h = self.attention(h)
        return self.output(self.intermediate(h), h)


class BertEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"], padding_idx=0)
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.dropout = nn.Dropout(c["hidden_dropout_prob"])

    def forward(self, ids):
        n = ids.shape[1]
        positions = self.position_embeddings(lt.arange(n))
        token_type = self.token_type_embeddings(lt.zeros(n, dtype=lt.int64))
        return self.dropout(self.LayerNorm(self.word_embeddings(ids) + positions + token_type))


class BertModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = BertEmbeddings(c)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(BertLayer(c) for _ in range(c["num_hidden_layers"]))

    def forward(self, ids):
        h = self.embeddings(ids)
        for layer in self.encoder.layer:
            h = layer(h)
        return h


class BertForMaskedLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bert = BertModel(c)
        self.cls = nn.Module()
        self.cls.predictions = nn.Module()
        self.cls.predictions.transform = nn.Module()
        self.cls.predictions.transform.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.cls.predictions.transform.LayerNorm = nn.LayerNorm(c["hidden_size"],
                                                                eps=c["layer_norm_eps"])
        self.cls.predictions.bias = nn.Parameter(lt.zeros(c["vocab_size"]))
        # As HF initializes BERT: N(0, 0.02) weights, zero biases (LayerNorm: 1 and 0).
        with lt.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif "LayerNorm" not in name:
                    p.copy_(lt.randn(*p.shape) * 0.02)

    def forward(self, ids, positions, labels):
        """The masked-language-model loss at the predicted tokens: rows `positions` (flat
        indices b * L + l) of the last hidden states, with their labels (-100: padding). As
        BERT's pretraining; HF's BertForMaskedLM runs the head at every position, for the same
        loss and about 4.6 times the head's work (1024 rows against 224 for 8 x 128 tokens)."""
        h = self.bert(ids)
        h = h.reshape(-1, h.shape[-1]).index_select(0, positions)
        t = self.cls.predictions.transform
        h = t.LayerNorm(F.gelu(t.dense(h)))
        # The decoder is tied to the word embeddings, as in HF.
        logits = h @ self.bert.embeddings.word_embeddings.weight.t() + self.cls.predictions.bias
        return F.cross_entropy(logits, labels)


def load_pretrained(model, path):
    """Copies a checkpoint's tensors into the model (BertModel names gain the "bert." prefix);
    returns the names the file did not have."""
    tensors, _ = lt.safetensors.load(path)
    own = dict(model.named_parameters())
    state = {}
    for name, t in tensors.items():
        key = name if name in own else "bert." + name
        if key in own:
            state[key] = t
    model.load_state_dict(state, strict=False)
    return sorted(set(own) - set(state))


SMALL = dict(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=512, max_position_embeddings=512, type_vocab_size=2,
             hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, layer_norm_eps=1e-12)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--init", help="folder with config.json, vocab.txt and model.safetensors")
    ap.add_argument("--vocab", default="models/all-MiniLM-L6-v2/vocab.txt")
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    config = dict(SMALL)
    vocab = args.vocab
    if args.init:
        with open(os.path.join(args.init, "config.json")) as f:
            config.update({k: v for k, v in json.load(f).items() if k in SMALL})
        vocab = os.path.join(args.init, "vocab.txt")
    lt.manual_seed(args.seed)
    model = BertForMaskedLM(config)
    if args.init:
        missing = load_pretrained(model, os.path.join(args.init, "model.safetensors"))
        print(f"init: {args.init}; initialized randomly: {missing}")

    # Real text: every 20th document held out, the rest cut into [CLS] ... [SEP] windows.
    tokenizer = lt.text.WordPieceTokenizer(vocab)
    train_ids, heldout_ids = [], []
    for i, doc in enumerate(lt.text.read_corpus(args.data)):
        stream = heldout_ids if i % 20 == 19 else train_ids
        stream += tokenizer.encode(doc.text) + [tokenizer.sep_id]
    windows = lt.data.TokenWindows(train_ids, args.seq, tokenizer.cls_id, tokenizer.sep_id, args.seed)
    heldout = lt.data.TokenWindows(heldout_ids, args.seq, tokenizer.cls_id, tokenizer.sep_id, args.seed)
    masking = lt.data.MlmOptions()
    masking.vocab_size, masking.mask_id = tokenizer.vocab_size, tokenizer.mask_id
    masking.special_ids = [tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id]

    optimizer = lt.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    schedule = lt.optim.get_linear_schedule_with_warmup(optimizer, args.warmup, args.steps)
    lt.mark_step()  # the initial weights become device data before the first step

    seed_key = (args.seed & 0xFFFFFFFF) << 32  # training batches from here, held-out from + 2^31

    def mask(ids, key):
        """BERT's masking by the host (the key picks the draws): the masked ids, the predicted
        tokens' positions, padded to a fixed count so that every step is the same graph, and
        their labels."""
        masked, _, positions, labels = lt.data.mask_tokens(ids, args.batch, args.seq, masking, key)
        return masked, positions, labels

    def evaluate():
        """Mean held-out loss, with the same masks at every evaluation."""
        model.eval()
        losses = []
        with lt.no_grad():
            for k in range(args.eval_batches):
                batch = heldout.ordered_ids(k * args.batch, args.batch)
                losses.append(model(*mask(batch, key=seed_key + (1 << 31) + k)))
                lt.mark_step()
        model.train()
        return sum(loss.item() for loss in losses) / len(losses)

    print(f"model: {sum(p.numel() for p in model.parameters())} parameters; "
          f"{len(windows)} training windows of {args.seq} tokens")
    first_heldout = evaluate()
    start = time.perf_counter()
    for step in range(args.steps):
        loss = model(*mask(windows.shuffled_ids(step, args.batch), key=seed_key + step))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()  # before the cut: gradients dead there are never stored
        lt.mark_step()
        if step == 0:
            compiles = lt.metrics.counter_value("UncachedCompile")
        if step % 10 == 9 or step == args.steps - 1:
            value = loss.item()  # waits for this step (the ones before it ran meanwhile)
            rate = (step + 1) * args.batch * args.seq / (time.perf_counter() - start)
            print(f"step {step + 1}: loss {value:.4f}, {rate:.0f} tokens/s")
    compiles = lt.metrics.counter_value("UncachedCompile") - compiles
    last_heldout = evaluate()
    print(f"held-out loss: {first_heldout:.4f} -> {last_heldout:.4f}; "
          f"graphs compiled after the first step: {compiles}")


if __name__ == "__main__":
    main()
