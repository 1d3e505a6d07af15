"""BERT masked-language model in plain PyTorch: the peer of `lazytensor train`.

Runs under Debian's PyTorch 1.13 (/usr/bin/python3) and current PyTorch (.venv-peers,
.venv-xla); needs torch and numpy only (no transformers, no safetensors package).

Contents:
  CONFIGS              the model table (HF BertConfig fields) for tiny, mini, base, large
  BertForMaskedLM      HF's BertForMaskedLM, written out; parameter names are HF's state_dict
                       names, so a weights file in HF naming loads with load_weights()
  mlm_loss             cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)
  lr_factor            the learning-rate schedule, step by step (see its docstring)
  make_optimizer       torch.optim.AdamW with HF's two parameter groups + LambdaLR
  read_safetensors / write_safetensors
                       a minimal safetensors reader and writer (numpy)
  load_weights / weights_dict

The model (HF BertForMaskedLM, absolute positions, token type ids all 0):
  embeddings  word [V, H] (padding_idx 0) + position [512, H] + token_type[0]
              -> LayerNorm(eps 1e-12) -> dropout
  N layers    (post-LN) self-attention: q, k, v = Linear(H, H); per head
              softmax(q k^T / sqrt(head_dim) + (1 - attention_mask) * -10000.0) -> dropout
              -> @ v; output dense -> dropout -> + input -> LayerNorm;
              intermediate dense -> GELU (erf) -> output dense -> dropout -> + input -> LayerNorm
  MLM head    dense(H, H) -> GELU (erf) -> LayerNorm(eps 1e-12)
              -> @ word_embeddings^T (tied, not stored) + cls.predictions.bias [V]
One dropout probability serves hidden states and attention probabilities alike.
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

LN_EPS = 1e-12
MASK_FILL = -10000.0

# HF BertConfig fields; vocab 30522, max_position 512, type_vocab 2 for all.
CONFIGS = {
    "tiny": dict(layers=2, hidden=64, heads=4, intermediate=256),
    "mini": dict(layers=6, hidden=384, heads=12, intermediate=1536),  # all-MiniLM-L6-v2
    "base": dict(layers=12, hidden=768, heads=12, intermediate=3072),
    "large": dict(layers=24, hidden=1024, heads=16, intermediate=4096),
}
for _c in CONFIGS.values():
    _c.update(vocab=30522, max_position=512, type_vocab=2)


def config(name):
    return dict(CONFIGS[name])


# ---- model --------------------------------------------------------------------------------

class BertEmbeddings(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab"], c["hidden"], padding_idx=0)
        self.position_embeddings = nn.Embedding(c["max_position"], c["hidden"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab"], c["hidden"])
        self.LayerNorm = nn.LayerNorm(c["hidden"], eps=LN_EPS)
        self.p = dropout

    def forward(self, input_ids):
        s = input_ids.shape[1]
        positions = torch.arange(s, device=input_ids.device)
        # HF order: word + token_type, then + position.
        x = self.word_embeddings(input_ids) + self.token_type_embeddings.weight[0]
        x = x + self.position_embeddings(positions)
        return F.dropout(self.LayerNorm(x), self.p, self.training)


class BertSelfAttention(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        h = c["hidden"]
        self.heads, self.head_dim = c["heads"], h // c["heads"]
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.p = dropout

    def forward(self, x, additive_mask):
        b, s, h = x.shape

        def split(t):  # [B, S, H] -> [B, NH, S, D]
            return t.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = F.dropout(torch.softmax(scores + additive_mask, dim=-1), self.p, self.training)
        return torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, s, h)


class BertSelfOutput(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        self.dense = nn.Linear(c["hidden"], c["hidden"])
        self.LayerNorm = nn.LayerNorm(c["hidden"], eps=LN_EPS)
        self.p = dropout

    def forward(self, x, residual):
        return self.LayerNorm(F.dropout(self.dense(x), self.p, self.training) + residual)


class BertAttention(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        self.self = BertSelfAttention(c, dropout)
        self.output = BertSelfOutput(c, dropout)

    def forward(self, x, additive_mask):
        return self.output(self.self(x, additive_mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden"], c["intermediate"])

    def forward(self, x):
        return F.gelu(self.dense(x))  # erf form


class BertOutput(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        self.dense = nn.Linear(c["intermediate"], c["hidden"])
        self.LayerNorm = nn.LayerNorm(c["hidden"], eps=LN_EPS)
        self.p = dropout

    def forward(self, x, residual):
        return self.LayerNorm(F.dropout(self.dense(x), self.p, self.training) + residual)


class BertLayer(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        self.attention = BertAttention(c, dropout)
        self.intermediate = BertIntermediate(c)
        self.output = BertOutput(c, dropout)

    def forward(self, x, additive_mask):
        a = self.attention(x, additive_mask)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(c, dropout) for _ in range(c["layers"])])

    def forward(self, x, additive_mask):
        for layer in self.layer:
            x = layer(x, additive_mask)
        return x


class BertModel(nn.Module):
    """HF BertModel without the pooler (BertForMaskedLM has none)."""

    def __init__(self, c, dropout):
        super().__init__()
        self.embeddings = BertEmbeddings(c, dropout)
        self.encoder = BertEncoder(c, dropout)

    def forward(self, input_ids, attention_mask):
        b, s = input_ids.shape
        mask = attention_mask.to(torch.float32).view(b, 1, 1, s)
        additive = (1.0 - mask) * MASK_FILL
        return self.encoder(self.embeddings(input_ids), additive)


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden"], c["hidden"])
        self.LayerNorm = nn.LayerNorm(c["hidden"], eps=LN_EPS)

    def forward(self, x):
        return self.LayerNorm(F.gelu(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """The decoder's weight is the word embedding matrix (tied), so it is no parameter
    here; its bias is `cls.predictions.bias`."""

    def __init__(self, c):
        super().__init__()
        self.transform = BertPredictionHeadTransform(c)
        self.bias = nn.Parameter(torch.zeros(c["vocab"]))

    def forward(self, x, word_embeddings):
        return F.linear(self.transform(x), word_embeddings, self.bias)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.predictions = BertLMPredictionHead(c)

    def forward(self, x, word_embeddings):
        return self.predictions(x, word_embeddings)


class BertForMaskedLM(nn.Module):
    """forward(input_ids [B, S] int64, attention_mask [B, S] int64/float) -> logits [B, S, V]."""

    def __init__(self, c, dropout=0.1):
        super().__init__()
        self.config = dict(c)
        self.bert = BertModel(c, dropout)
        self.cls = BertOnlyMLMHead(c)

    def forward(self, input_ids, attention_mask):
        hidden = self.bert(input_ids, attention_mask)
        return self.cls(hidden, self.bert.embeddings.word_embeddings.weight)

    def init_weights(self, seed=0, std=0.02):
        """HF's BertPreTrainedModel._init_weights: Linear and Embedding N(0, std) (padding
        row 0), biases 0, LayerNorm weight 1 / bias 0, cls.predictions.bias 0."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif "LayerNorm" in name:
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=g) * std)
            self.bert.embeddings.word_embeddings.weight[0].zero_()
        return self


def mlm_loss(logits, labels):
    """HF BertForMaskedLM's loss: mean over the positions whose label is not -100."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100)


def forward_loss(model, input_ids, attention_mask, labels):
    return mlm_loss(model(input_ids, attention_mask), labels)


# ---- optimizer and schedule ---------------------------------------------------------------

def lr_factor(s, warmup, total, schedule):
    """Factor on the base learning rate for the optimizer step taken after s steps (s = 0 ..
    total - 1): transformers' schedules, as LambdaLR counts (lazytensor's lt::optim schedules
    are the same functions). W = warmup, N = total steps:
      constant:  1 (transformers' get_constant_schedule: no warm-up)
      linear:    s / W while s < W, then max(0, (N - s) / max(1, N - W))
      cosine:    s / W while s < W, then 0.5 * (1 + cos(pi * (s - W) / max(1, N - W)))
    So with W > 0 the first step runs at rate 0, as with get_linear_schedule_with_warmup.
    """
    if schedule == "constant":
        return 1.0
    if s < warmup:
        return s / max(1, warmup)
    if schedule == "linear":
        return max(0.0, (total - s) / max(1, total - warmup))
    if schedule == "cosine":
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * (s - warmup) / max(1, total - warmup))))
    raise ValueError(f"unknown schedule {schedule!r}")


def no_decay(name):
    return name.endswith("bias") or "LayerNorm" in name


def make_optimizer(model, lr, weight_decay, warmup, total, schedule):
    """torch.optim.AdamW(lr, betas (0.9, 0.999), eps 1e-8) with two parameter groups: names
    ending in "bias" or containing "LayerNorm" get weight_decay 0, the rest weight_decay;
    LambdaLR so that the step taken after s steps uses lr * lr_factor(s). Call
    scheduler.step() after each optimizer.step().

    torch's AdamW step t, per parameter p with gradient g (what lazytensor must match):
      p *= 1 - lr_t * wd
      m = 0.9 m + 0.1 g;  v = 0.999 v + 0.001 g^2
      p -= (lr_t / (1 - 0.9^t)) * m / (sqrt(v) / sqrt(1 - 0.999^t) + 1e-8)
    """
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if not no_decay(n)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if no_decay(n)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, warmup, total, schedule))
    return opt, sched


# ---- safetensors ------------------------------------------------------------------------------

# safetensors dtype -> numpy dtype as stored (little endian). BF16 is stored as uint16 and
# widened to float32 on reading.
_DTYPES = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "BF16": "<u2",
           "F16": "<f2", "U8": "u1", "I8": "i1", "BOOL": "?"}
_NP_TO_ST = {np.dtype("float32"): "F32", np.dtype("float64"): "F64",
             np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("float16"): "F16",
             np.dtype("uint8"): "U8", np.dtype("int8"): "I8", np.dtype("bool"): "BOOL"}


def bf16_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), rounded).astype(np.uint16)


def read_safetensors_header(path):
    """(header dict without __metadata__, metadata dict, byte offset of the data)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    meta = header.pop("__metadata__", None) or {}
    return header, meta, 8 + n


def read_safetensors(path, names=None):
    """{name: numpy array} (BF16 widened to float32), and the __metadata__ dict."""
    header, meta, base = read_safetensors_header(path)
    size = os.path.getsize(path)
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if names is not None and name not in names:
                continue
            dtype = info["dtype"]
            if dtype not in _DTYPES:
                raise ValueError(f"{path}: {name}: unsupported dtype {dtype}")
            np_dtype = np.dtype(_DTYPES[dtype])
            shape = [int(d) for d in info["shape"]]
            begin, end = info["data_offsets"]
            count = math.prod(shape)
            if end - begin != count * np_dtype.itemsize or base + end > size:
                raise ValueError(f"{path}: {name}: data_offsets {begin}..{end} do not fit "
                                 f"{dtype}{shape} in a {size}-byte file")
            f.seek(base + begin)
            a = np.fromfile(f, dtype=np_dtype, count=count).reshape(shape)
            out[name] = bf16_to_f32(a) if dtype == "BF16" else a
    return out, meta


def write_safetensors(path, tensors, metadata=None, bf16=()):
    """Writes {name: numpy array or torch tensor} in the given order; names in `bf16` are
    stored as BF16 (rounded from float32). The header is padded with spaces to a multiple
    of 8 bytes, as the reference writer does."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        if isinstance(a, torch.Tensor):
            a = a.detach().cpu().contiguous().numpy()
        a = np.asarray(a)
        if name in bf16:
            dtype, data = "BF16", f32_to_bf16(a).astype("<u2")
        else:
            if a.dtype not in _NP_TO_ST:
                raise ValueError(f"{name}: unsupported dtype {a.dtype}")
            dtype = _NP_TO_ST[a.dtype]
            data = np.ascontiguousarray(a, dtype=_DTYPES[dtype])
        raw = data.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}, **header}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


# ---- weights files ------------------------------------------------------------------------------

# Names a weights file may hold beyond the model's parameters, and why they are skipped.
TIED = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias"}


def _skipped(name):
    if name.startswith("optimizer."):
        return "optimizer state"
    if name.startswith("bert.pooler."):
        return "pooler (BertForMaskedLM has none)"
    if name in ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids"):
        return "buffer"
    return None


def load_weights(model, path):
    """Loads an HF-named weights file into `model` (float32). Every parameter must be in the
    file with its shape; names beyond them must be optimizer state, the pooler, buffers or
    the tied decoder (which must then equal what it is tied to). Returns {name: why skipped}."""
    arrays, _ = read_safetensors(path)
    params = dict(model.named_parameters())
    skipped, unknown = {}, []
    for name in arrays:
        why = _skipped(name)
        if why:
            skipped[name] = why
        elif name in TIED:
            skipped[name] = f"tied to {TIED[name]}"
        elif name not in params:
            unknown.append(name)
    missing = [n for n in params if n not in arrays]
    if missing or unknown:
        raise ValueError(f"{path}: missing parameters {missing[:8]} ({len(missing)}), "
                         f"unknown tensors {unknown[:8]} ({len(unknown)})")
    state = {}
    for name, p in params.items():
        a = arrays[name]
        if list(a.shape) != list(p.shape):
            raise ValueError(f"{path}: {name} has shape {list(a.shape)}, model {list(p.shape)}")
        state[name] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    result = model.load_state_dict(state, strict=False)
    assert not result.missing_keys and not result.unexpected_keys, result
    for name, target in TIED.items():
        if name in arrays and not np.array_equal(arrays[name], arrays[target]):
            raise ValueError(f"{path}: {name} differs from {target}, to which it is tied")
    with torch.no_grad():
        for name, p in model.named_parameters():  # every one loaded, bit for bit
            assert torch.equal(p.detach().cpu(), state[name]), name
    return skipped


def weights_dict(model):
    """{HF name: float32 numpy array} of the model's parameters, as --save writes them."""
    return {n: p.detach().cpu().float().numpy() for n, p in model.named_parameters()}


def num_params(model):
    return sum(p.numel() for p in model.parameters())
