"""The Python examples run and show what they claim."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MINILM = ROOT / "models" / "all-MiniLM-L6-v2"


def run_example(name, *args):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / name), *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=900,
                            env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_scalar_transfer_repro_shows_the_uploads_only_off_the_argument_policy():
    out = run_example("scalar_transfer_repro.py", "--tensors", "6", "--size", "4096", "--steps", "5")
    rows = {m[0]: (float(m[1]), int(m[2])) for m in
            re.findall(r"^(\w+)\s+[\d.]+\s+[+-][\d.]+%\s+([\d.]+)\s+(\d+)$", out, re.M)}
    assert set(rows) == {"argument", "cached", "uncached", "constant"}, out
    assert rows["argument"] == (0.0, 0)
    assert rows["uncached"][0] > 6  # every non-trivial number of every parameter's update
    assert rows["constant"][1] >= 3  # a new graph for every new learning rate


def held_out(out):
    m = re.search(r"held-out loss: ([\d.]+) -> ([\d.]+); graphs compiled after the first step: (\d+)", out)
    assert m, out
    return float(m[1]), float(m[2]), int(m[3])


@pytest.mark.skipif(not (MINILM / "vocab.txt").exists(), reason="run `make models` first")
def test_train_bert_from_random_weights_lowers_the_held_out_loss():
    first, last, compiles = held_out(run_example("train_bert.py", "--steps", "20", "--batch", "4",
                                                 "--seq", "64", "--eval-batches", "2",
                                                 "--vocab", str(MINILM / "vocab.txt")))
    assert last < first - 0.1
    assert compiles == 0


@pytest.mark.skipif(not (MINILM / "model.safetensors").exists(), reason="run `make models` first")
def test_train_bert_fine_tunes_minilm():
    out = run_example("train_bert.py", "--init", str(MINILM), "--steps", "10", "--eval-batches", "2")
    assert "initialized randomly: ['cls.predictions.bias'" in out  # the rest came from the file
    first, last, compiles = held_out(out)
    assert last < first - 1.0
    assert compiles == 0


def test_generate_trains_on_many_lengths_and_decodes_on_a_few_graphs():
    out = run_example("generate.py", "--tokens", "96")
    m = re.search(r"trained to count on 150 lengths: loss ([\d.]+), graphs compiled: (\d+)", out)
    assert m and float(m[1]) < 0.1 and int(m[2]) <= 3, out
    assert "greedy continues the count: yes" in out
    assert "graphs compiled for 96 tokens of each kind: 2" in out
    sampled = re.search(r"top-3 at temperature 4: ([\d ]+)", out)[1].split()
    assert len(sampled) == 96 and all(0 <= int(t) < 16 for t in sampled)
