"""Writes tests/data/minilm_reference.safetensors: HuggingFace's hidden states of
all-MiniLM-L6-v2 for a padded batch of real sentences, which tests/bert_test.cpp compares
lazytensor's BERT with (so the test needs no PyTorch), and the parameter names and shapes of
transformers' BertForMaskedLM for the `tiny` configuration.

Regenerate (after `make models` and `make peers-setup`):
    .venv-peers/bin/python bench/reference/minilm_reference.py
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertForMaskedLM, BertModel, BertTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
OUT = os.path.join(ROOT, "tests", "data", "minilm_reference.safetensors")

# Real sentences of different lengths, so the batch is padded and the mask matters.
SENTENCES = [
    "A journey of a thousand miles begins with a single step.",
    "Computers are useless. They can only give you answers.",
    "Héllo, wörld! Don't panic.",
]


def main():
    torch.manual_seed(0)
    tokenizer = BertTokenizer.from_pretrained(MODEL_DIR)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    model = BertModel.from_pretrained(MODEL_DIR, add_pooling_layer=False).eval()
    with torch.no_grad():
        hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state

    tiny = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=256)
    mlm = BertForMaskedLM(tiny)
    names = [[name, list(p.shape)] for name, p in mlm.named_parameters()]

    save_file(
        {
            "input_ids": batch["input_ids"].to(torch.int64).contiguous(),
            "attention_mask": batch["attention_mask"].to(torch.int64).contiguous(),
            "hidden_states": hidden.to(torch.float32).contiguous(),
        },
        OUT,
        metadata={
            "sentences": json.dumps(SENTENCES),
            "tiny_mlm_parameters": json.dumps(names),
            "transformers_model": "BertModel (all-MiniLM-L6-v2)",
            "torch": torch.__version__,
        },
    )
    print(f"wrote {OUT}: ids {tuple(batch['input_ids'].shape)}, hidden {tuple(hidden.shape)}, "
          f"{len(names)} tiny BertForMaskedLM parameters")


if __name__ == "__main__":
    main()
