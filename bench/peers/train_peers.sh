#!/usr/bin/env bash
# BERT masked-LM training: `lazytensor train` against PyTorch, on this machine, one run after
# another with the same thread count (`make peers-train`, MODEL=mini by default).
#
#   1. speed: lazytensor, PyTorch 1.13 eager (/usr/bin/python3), current PyTorch eager and
#      torch.compile (.venv-peers), torch-xla on its PJRT CPU device (.venv-xla); random
#      init, batch 8 x seq 128, dropout 0.1, same optimizer and schedule everywhere
#   2. the PyTorch model against transformers' BertForMaskedLM (check-hf, .venv-peers)
#   3. parity: lazytensor exports its initial weights (step 0) and then trains mini from
#      them, dropout 0, exporting its batches, losses and final weights; train_peers.py
#      --mode parity repeats the steps under PyTorch 1.13 and current PyTorch
#   4. a Markdown summary (tokens/s against lazytensor's, parity verdicts)
#
# PRECISIONS="fp32 bf16" adds the bf16 rows: `lazytensor train --precision bf16` (autocast)
# against PyTorch 1.13 and current PyTorch eager and torch.compile under torch.autocast("cpu",
# torch.bfloat16) (torch-xla has no CPU autocast row).
#
# lazytensor runs its MLM head at the predicted tokens only (`--mlm-head predicted`, its
# default, as BERT's pretraining); the PyTorch model runs it at every position, as HuggingFace's
# BertForMaskedLM. Unless LT_HEAD_ALL=0, lazytensor also runs with `--mlm-head all`: the
# same work as the peers, a row of its own.
#
# Environment (defaults): MODEL (mini), PRECISIONS (fp32), THREADS (all usable cores), STEPS (10 timed),
# WARMUP_STEPS (3, untimed: compiles), BATCH (8), SEQ (128), LT (build/release/lazytensor),
# LT_HEAD_ALL (1),
# OUT (out), LT_ARGS (extra flags for every `lazytensor train`), PARITY_STEPS (20),
# PARITY_BATCH (8), PARITY_SEQ (128), PARITY_LR (1e-4), PARITY_WARMUP (5),
# PARITY_SCHEDULE (linear), SKIP (comma-separated: lt,torch113,eager,compile,xla,check-hf,
# parity). Exit status 1 when parity fails or cannot run; a peer's failure is a table row.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
MODEL=${MODEL:-mini}
PRECISIONS=${PRECISIONS:-fp32}
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-10}
WARMUP_STEPS=${WARMUP_STEPS:-3}
BATCH=${BATCH:-8}
SEQ=${SEQ:-128}
LT=${LT:-./build/release/lazytensor}
OUT=${OUT:-out}
LT_ARGS=${LT_ARGS:-}
DATA=${DATA:-/usr/share/games/fortunes}
PARITY_STEPS=${PARITY_STEPS:-20}
PARITY_BATCH=${PARITY_BATCH:-8}
PARITY_SEQ=${PARITY_SEQ:-128}
PARITY_LR=${PARITY_LR:-1e-4}
PARITY_WARMUP=${PARITY_WARMUP:-5}
PARITY_SCHEDULE=${PARITY_SCHEDULE:-linear}
SKIP=${SKIP:-}
LT_HEAD_ALL=${LT_HEAD_ALL:-1}
SYS_PY=/usr/bin/python3
PEERS_PY=$ROOT/.venv-peers/bin/python
XLA_PY=$ROOT/.venv-xla/bin/python
TP=bench/peers/train_peers.py
# One optimizer setting for every speed run (lazytensor and the peers alike).
HPARAMS=(--lr 1e-4 --warmup 0 --schedule constant --clip-norm 1.0 --weight-decay 0.01)

# Runs argv[2:] and writes the peak RSS of that child (bytes) to argv[1].
WITH_RSS='import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
sys.exit(rc)'

mkdir -p "$OUT"
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS PJRT_DEVICE=CPU
status=0
skip() { [[ ",$SKIP," == *",$1,"* ]]; }

run() {  # $1: label, $2: log file, rest: command; prints stdout, keeps stderr in the log
    local label=$1 log=$2
    shift 2
    echo
    echo "### $label"
    local shown="$*"
    echo "\$ ${shown/"$WITH_RSS"/<peak-RSS wrapper>}"
    "$@" 2>"$log"
    local rc=$?
    if ((rc)); then
        echo "($label: exit code $rc; last lines of $log:)"
        tail -n 15 "$log"
    fi
    return $rc
}

CPU=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
echo "# BERT MLM training: lazytensor train vs PyTorch peers"
echo
echo "CPU: ${CPU:-unknown} ($(nproc) cores usable); threads $THREADS; model $MODEL;" \
     "batch $BATCH x seq $SEQ; $WARMUP_STEPS warm-up + $STEPS timed steps;" \
     "load average at start $(cut -d' ' -f1 /proc/loadavg)"

have_lt=1
if [[ ! -x $LT ]]; then
    have_lt=0
    echo "lazytensor binary $LT missing: build it first (make build); its rows are skipped."
fi

# ---- 1. speed ------------------------------------------------------------------------------
PERF=(--mode perf --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --steps "$STEPS"
      --warmup-steps "$WARMUP_STEPS" --threads "$THREADS" --dropout 0.1 --seed 0 "${HPARAMS[@]}")
inputs=()
lt_more=()
lt_more_rss=()
for precision in $PRECISIONS; do
    sfx=$([[ $precision == fp32 ]] && echo "" || echo "-$precision")
    # A failed run must not leave an earlier run's JSON to be summarized.
    rm -f "$OUT/train-lt-$MODEL$sfx.json" "$OUT/train-lt-$MODEL$sfx.rss" \
        "$OUT/train-lt-$MODEL$sfx-head-all.json" "$OUT/train-lt-$MODEL$sfx-head-all.rss" \
        "$OUT"/train-torch*-"$MODEL$sfx".json
    if ((have_lt)) && ! skip lt; then
        # lazytensor runs warm-up + timed steps; the summary drops its first WARMUP_STEPS steps.
        # shellcheck disable=SC2086
        run "lazytensor train ($MODEL, --precision $precision)" "$OUT/train-lt-$MODEL$sfx.log" \
            "$SYS_PY" -c "$WITH_RSS" "$OUT/train-lt-$MODEL$sfx.rss" "$LT" train --model "$MODEL" \
            --init random --data "$DATA" --steps $((WARMUP_STEPS + STEPS)) --batch "$BATCH" \
            --seq "$SEQ" "${HPARAMS[@]}" --dropout 0.1 --seed 0 --precision "$precision" \
            --quiet --json "$OUT/train-lt-$MODEL$sfx.json" $LT_ARGS
        if ((LT_HEAD_ALL)); then
            # shellcheck disable=SC2086
            run "lazytensor train ($MODEL, --precision $precision, --mlm-head all)" \
                "$OUT/train-lt-$MODEL$sfx-head-all.log" \
                "$SYS_PY" -c "$WITH_RSS" "$OUT/train-lt-$MODEL$sfx-head-all.rss" "$LT" train --model "$MODEL" \
                --init random --data "$DATA" --steps $((WARMUP_STEPS + STEPS)) --batch "$BATCH" \
                --seq "$SEQ" "${HPARAMS[@]}" --dropout 0.1 --seed 0 --precision "$precision" \
                --mlm-head all --quiet --json "$OUT/train-lt-$MODEL$sfx-head-all.json" $LT_ARGS
            lt_more+=("$OUT/train-lt-$MODEL$sfx-head-all.json")
            [[ -s $OUT/train-lt-$MODEL$sfx-head-all.rss ]] \
                && lt_more_rss+=("$OUT/train-lt-$MODEL$sfx-head-all.rss")
        fi
    fi
    if ! skip torch113; then
        run "PyTorch 1.13 eager ($precision)" "$OUT/train-torch113-eager-$MODEL$sfx.log" \
            "$SYS_PY" "$TP" "${PERF[@]}" --impl eager --precision "$precision" \
            --json "$OUT/train-torch113-eager-$MODEL$sfx.json"
        inputs+=("$OUT/train-torch113-eager-$MODEL$sfx.json")
    fi
    if ! skip eager; then
        run "current PyTorch eager ($precision)" "$OUT/train-torch-eager-$MODEL$sfx.log" \
            "$PEERS_PY" "$TP" "${PERF[@]}" --impl eager --precision "$precision" \
            --json "$OUT/train-torch-eager-$MODEL$sfx.json"
        inputs+=("$OUT/train-torch-eager-$MODEL$sfx.json")
    fi
    if ! skip compile; then
        run "torch.compile ($precision)" "$OUT/train-torch-compile-$MODEL$sfx.log" \
            "$PEERS_PY" "$TP" "${PERF[@]}" --impl compile --precision "$precision" \
            --json "$OUT/train-torch-compile-$MODEL$sfx.json"
        inputs+=("$OUT/train-torch-compile-$MODEL$sfx.json")
    fi
    if ! skip xla && [[ $precision == fp32 ]]; then
        run "torch-xla (PJRT CPU)" "$OUT/train-torch-xla-$MODEL.log" \
            "$XLA_PY" "$TP" "${PERF[@]}" --impl xla --json "$OUT/train-torch-xla-$MODEL.json"
        inputs+=("$OUT/train-torch-xla-$MODEL.json")
    fi
done

# ---- 2. the PyTorch model against transformers -------------------------------------------------
if ! skip check-hf; then
    run "bert_mlm_torch vs transformers BertForMaskedLM (mini)" "$OUT/train-check-hf.log" \
        "$PEERS_PY" "$TP" --mode check-hf --model mini --threads "$THREADS" --seq 64 \
        --json "$OUT/train-check-hf.json" || status=1
fi

# ---- 3. parity -----------------------------------------------------------------------------------
parity=()
if ! skip parity; then
    if ((have_lt)); then
        rm -f "$OUT/parity-init.safetensors" "$OUT/parity-final.safetensors" \
            "$OUT/parity-batches.safetensors" "$OUT/parity-lt.json"
        # shellcheck disable=SC2086
        run "lazytensor: initial weights (step 0)" "$OUT/parity-init.log" \
            "$LT" train --model mini --init minilm --data "$DATA" --steps 0 \
            --batch "$PARITY_BATCH" --seq "$PARITY_SEQ" --dropout 0 --seed 0 --quiet \
            --save "$OUT/parity-init.safetensors" $LT_ARGS
        # shellcheck disable=SC2086
        run "lazytensor: $PARITY_STEPS steps from them, dropout 0" "$OUT/parity-lt.log" \
            "$LT" train --model mini --init "$OUT/parity-init.safetensors" --data "$DATA" \
            --steps "$PARITY_STEPS" --batch "$PARITY_BATCH" --seq "$PARITY_SEQ" \
            --lr "$PARITY_LR" --warmup "$PARITY_WARMUP" --schedule "$PARITY_SCHEDULE" \
            --clip-norm 1.0 --weight-decay 0.01 --dropout 0 --seed 0 --quiet \
            --export-batches "$OUT/parity-batches.safetensors" \
            --save "$OUT/parity-final.safetensors" --json "$OUT/parity-lt.json" $LT_ARGS
        if [[ -s $OUT/parity-init.safetensors && -s $OUT/parity-batches.safetensors \
              && -s $OUT/parity-lt.json ]]; then
            PAR=(--mode parity --model mini --init "$OUT/parity-init.safetensors"
                 --batches "$OUT/parity-batches.safetensors" --lr "$PARITY_LR"
                 --warmup "$PARITY_WARMUP" --schedule "$PARITY_SCHEDULE" --clip-norm 1.0
                 --weight-decay 0.01 --threads "$THREADS" --lazytensor-json "$OUT/parity-lt.json")
            [[ -s $OUT/parity-final.safetensors ]] \
                && PAR+=(--lazytensor-final "$OUT/parity-final.safetensors")
            run "parity: PyTorch 1.13" "$OUT/parity-torch113.log" \
                "$SYS_PY" "$TP" "${PAR[@]}" --json "$OUT/parity-torch113.json" || status=1
            run "parity: current PyTorch" "$OUT/parity-torch.log" \
                "$PEERS_PY" "$TP" "${PAR[@]}" --json "$OUT/parity-torch.json" || status=1
            parity=("$OUT/parity-torch113.json" "$OUT/parity-torch.json")
        else
            echo "parity: lazytensor did not write its initial weights, batches and --json"
            status=1
        fi
    else
        echo "parity: skipped, no lazytensor binary"
        status=1
    fi
fi

# ---- 4. summary ----------------------------------------------------------------------------------
LT_JSON=()
if ((have_lt)) && ! skip lt; then
    [[ " $PRECISIONS " == *" fp32 "* ]] && LT_JSON+=(--lazytensor-json "$OUT/train-lt-$MODEL.json")
    [[ " $PRECISIONS " == *" bf16 "* ]] \
        && LT_JSON+=(--lazytensor-bf16-json "$OUT/train-lt-$MODEL-bf16.json")
fi
[[ -s $OUT/train-lt-$MODEL.rss ]] && LT_JSON+=(--lazytensor-rss "$OUT/train-lt-$MODEL.rss")
[[ -s $OUT/train-lt-$MODEL-bf16.rss ]] \
    && LT_JSON+=(--lazytensor-bf16-rss "$OUT/train-lt-$MODEL-bf16.rss")
"$SYS_PY" "$TP" --mode summary --model "$MODEL" --batch "$BATCH" --seq "$SEQ" \
    --threads "$THREADS" --warmup-steps "$WARMUP_STEPS" "${LT_JSON[@]}" \
    --lazytensor-more "${lt_more[@]}" --lazytensor-more-rss "${lt_more_rss[@]}" \
    --inputs "${inputs[@]}" \
    --parity "${parity[@]}" --json "$OUT/train-summary-$MODEL.json"
echo
echo "CPU: ${CPU:-unknown}; load average at end $(cut -d' ' -f1 /proc/loadavg)"
exit $status
