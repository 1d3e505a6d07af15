#!/usr/bin/env bash
# Host cost of tracing from Python (bench/python_host_cost.py), one framework after another on
# this machine: lazytensor (.venv-python, the build's package), PyTorch 1.13 eager
# (/usr/bin/python3), current PyTorch eager (.venv-peers), torch-xla (.venv-xla), the lazytensor PyTorch
# device (.venv-torch, `make test-torch`); with BERT's
# tensors, then with one-element tensors (eager PyTorch's dispatch alone).
#   MODEL (bert-base), STEPS (12), BUILD (build/release); a missing peer is skipped with a note.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
MODEL=${MODEL:-bert-base}
STEPS=${STEPS:-12}
BUILD=${BUILD:-build/release}
export PJRT_DEVICE=CPU OMP_NUM_THREADS=$(nproc)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; model $MODEL; $STEPS steps"
run() {  # label, python, framework, extra flags
    local label=$1 py=$2 framework=$3
    shift 3
    if [ ! -x "$py" ]; then echo "{\"framework\": \"$label\", \"skipped\": \"$py not found\"}"; return; fi
    "$py" bench/python_host_cost.py --framework "$framework" --model "$MODEL" --steps "$STEPS" "$@" \
        || echo "{\"framework\": \"$label\", \"failed\": true}"
}
for flags in "" --one-element; do
    PYTHONPATH=$ROOT/$BUILD/python run lazytensor "$ROOT/.venv-python/bin/python" lazytensor $flags
    run torch-1.13 /usr/bin/python3 torch $flags
    run torch-current "$ROOT/.venv-peers/bin/python" torch $flags
    run torch-xla "$ROOT/.venv-xla/bin/python" xla $flags
    run torch-lt "$ROOT/.venv-torch/bin/python" torch-lt $flags
done
