#!/usr/bin/env python3
"""Reference WordPiece ids from HuggingFace for the tokenizer test (tests/tokenizer_test.cpp).

How to regenerate (from the repository root):

    .venv-peers/bin/python bench/reference/tokenizer_reference.py

Requirements: the peers virtual environment (.venv-peers, with transformers and tokenizers),
the model files in models/all-MiniLM-L6-v2 (`make models`) and the Debian package fortunes
(the corpus /usr/share/games/fortunes).  An optional first argument names another corpus
folder or file.

What it does: reads the corpus exactly as lt::text::read_corpus does (reimplemented below),
tokenizes every document without special tokens with both of HuggingFace's tokenizers for the
model -- the Python one (BertTokenizerLegacy in transformers 5, BertTokenizer before) and the
Rust one (BertTokenizer in transformers 5, BertTokenizerFast before) -- fails if they disagree
on any document, and writes tests/data/fortunes_wordpiece.json with

  * "files": per corpus file (by base name, in corpus order): "documents" (count), "tokens"
    (total ids), "fnv1a64" (64-bit FNV-1a over all its ids, each id as 8 little-endian bytes, in
    document order, as a hex string) and "document_hashes" (the low 32 bits of that hash taken
    over each document alone, as 8 hex digits), which lets the test name the first document
    that differs;
  * "documents": full ids of the first 20 documents of the corpus and of every document with a
    character outside printable ASCII other than tab and newline (accents, mojibake, C0/C1
    control characters): {"file", "index" (0-based within the file), "ids"}.

The output is deterministic for a given corpus, model and tokenizer version.
"""

import json
import os
import stat
import sys

import tokenizers
import transformers

try:  # transformers >= 5: BertTokenizer is the Rust one, the Python one is kept as "legacy".
    from transformers import BertTokenizer as RustTokenizer
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as PyTokenizer
except ImportError:  # transformers 4
    from transformers import BertTokenizer as PyTokenizer
    from transformers import BertTokenizerFast as RustTokenizer

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL_DIR = os.path.join(REPO_ROOT, "models", "all-MiniLM-L6-v2")
OUT_PATH = os.path.join(REPO_ROOT, "tests", "data", "fortunes_wordpiece.json")
DEFAULT_CORPUS = "/usr/share/games/fortunes"
FULL_DOCUMENTS_AT_START = 20

# What read_corpus counts as blank: ASCII whitespace only.
BLANK = " \t\n\r\v\f"


# --- lt::text::read_corpus, reimplemented -------------------------------------------------


def text_of(data):
    """The file's text, or None when it is not UTF-8 text (NUL bytes or invalid UTF-8)."""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def documents_of(text):
    """Fortune entries between "%" lines if there are any such lines, else paragraphs."""
    lines = text.split("\n")
    if lines and lines[-1] == "":  # the newline ending the last line starts no line
        lines.pop()
    fortune = "%" in lines
    groups, current = [], []
    for line in lines:
        separator = line == "%" if fortune else line.strip(BLANK) == ""
        if separator:
            groups.append(current)
            current = []
        else:
            current.append(line)
    groups.append(current)
    texts = ["\n".join(group) for group in groups]
    return [t for t in texts if t.strip(BLANK) != ""]


def corpus_files(path):
    """(base name, text) of each file read_corpus takes, in its order."""
    if not os.path.isdir(path):
        return [(os.path.basename(path), text_of(open(path, "rb").read()))]
    out = []
    for name in sorted(os.listdir(os.fsencode(path))):
        full = os.path.join(os.fsencode(path), name)
        if not stat.S_ISREG(os.lstat(full).st_mode):  # symlinks, folders, devices
            continue
        text = text_of(open(full, "rb").read())
        if text is not None:
            out.append((os.fsdecode(name), text))
    return out


# --- hashing ---------------------------------------------------------------------------------

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(ids, h=FNV_OFFSET):
    for i in ids:
        for byte in int(i).to_bytes(8, "little", signed=True):
            h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def needs_full_ids(text):
    return any(not (" " <= c <= "~" or c in "\t\n") for c in text)


def main():
    transformers.logging.set_verbosity_error()  # documents longer than the model's 512 are fine
    corpus = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_CORPUS
    files = [(name, documents_of(text)) for name, text in corpus_files(corpus)]
    files = [(name, docs) for name, docs in files if docs]
    n_docs = sum(len(docs) for _, docs in files)
    print(f"{corpus}: {len(files)} files, {n_docs} documents")

    py_tok = PyTokenizer.from_pretrained(MODEL_DIR)
    rust_tok = RustTokenizer.from_pretrained(MODEL_DIR)
    # Text that spells a special token ("[MASK]") is ordinary text for lt::text, not the token.
    kwargs = dict(add_special_tokens=False, split_special_tokens=True)

    out_files, out_docs, disagreements = [], [], 0
    position = 0
    for name, docs in files:
        py_ids = py_tok(docs, **kwargs)["input_ids"]
        rust_ids = rust_tok(docs, **kwargs)["input_ids"]
        file_hash = FNV_OFFSET
        doc_hashes, tokens = [], 0
        for index, (text, ids, other) in enumerate(zip(docs, py_ids, rust_ids)):
            if ids != other:
                disagreements += 1
                print(f"DISAGREE {name} #{index}: {text!r}\n  python: {ids}\n  rust:   {other}")
            file_hash = fnv1a64(ids, file_hash)
            doc_hashes.append(f"{fnv1a64(ids) & 0xFFFFFFFF:08x}")
            tokens += len(ids)
            if position < FULL_DOCUMENTS_AT_START or needs_full_ids(text):
                out_docs.append({"file": name, "index": index, "ids": ids})
            position += 1
        out_files.append(
            {
                "name": name,
                "documents": len(docs),
                "tokens": tokens,
                "fnv1a64": f"{file_hash:016x}",
                "document_hashes": " ".join(doc_hashes),
            }
        )
    if disagreements:
        sys.exit(f"the Python and Rust tokenizers disagree on {disagreements} documents")

    fixture = {
        "generator": "bench/reference/tokenizer_reference.py",
        "model": "all-MiniLM-L6-v2",
        "corpus": corpus,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "files": out_files,
        "documents": out_docs,
    }
    with open(OUT_PATH, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    total = sum(f["tokens"] for f in out_files)
    print(f"{total} tokens; {len(out_docs)} documents in full; both tokenizers agree")
    print(f"wrote {OUT_PATH} ({os.path.getsize(OUT_PATH)} bytes)")


if __name__ == "__main__":
    main()
