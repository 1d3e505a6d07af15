"""A nanoGPT-style script written for PyTorch (gpt_script.py) runs on lazytensor with only its
imports renamed: the same losses for 20 steps from the same initial weights (1e-5 relative),
a checkpoint saved and resumed to the bits of the uninterrupted run, evaluation under no_grad
and 50 tokens sampled with top-k and multinomial. lazytensor's run is a separate process on the
engine's Python package from the build tree (build/release/python)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = pathlib.Path(__file__).with_name("gpt_script.py")
PACKAGE = ROOT / "build" / "release" / "python"

RENAMED = {
    "import torch\n": "import lazytensor as torch\n",
    "import torch.nn as nn\n": "import lazytensor.nn as nn\n",
    "from torch.nn import functional as F\n": "from lazytensor.nn import functional as F\n",
}


def run(script, tmp_path, name, env=None):
    out = tmp_path / f"{name}.json"
    subprocess.run([sys.executable, str(script), "--init", str(tmp_path / "init.npz"),
                    "--checkpoint", str(tmp_path / f"{name}.ckpt"), "--out", str(out)],
                   check=True, env=env, cwd=tmp_path, timeout=600)
    return json.loads(out.read_text())


@pytest.mark.skipif(not (PACKAGE / "lazytensor").exists(),
                    reason="the engine's Python package is not built (make build)")
def test_a_pytorch_gpt_script_runs_with_only_its_imports_renamed(tmp_path):
    torch_result = run(SCRIPT, tmp_path, "torch")
    source = SCRIPT.read_text()
    for old, new in RENAMED.items():
        assert old in source
        source = source.replace(old, new)
    renamed = tmp_path / "gpt_script_lazytensor.py"
    renamed.write_text(source)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE))
    lt_result = run(renamed, tmp_path, "lazytensor", env)

    torch.testing.assert_close(torch.tensor(lt_result["losses"]),
                               torch.tensor(torch_result["losses"]), rtol=1e-5, atol=0)
    assert lt_result["losses"][-1] < lt_result["losses"][0] - 0.5, lt_result["losses"]
    assert torch_result["resumed_equal"] and lt_result["resumed_equal"]
    assert abs(lt_result["val_loss"] - torch_result["val_loss"]) < 1e-4 * torch_result["val_loss"]
    assert lt_result["val_accuracy"] == torch_result["val_accuracy"]
    sample = lt_result["sample"]
    assert len(sample) == 51 and all(0 <= t < 65 for t in sample)
