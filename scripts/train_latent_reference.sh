#!/usr/bin/env bash
# The latent-reference experiment of 2026-11-24 (NOT the shipped model: scripts/train_default.sh is),
# with --visual-reference latent, from nothing: world data -> phase a (vae, decoder) -> phase b
# (engine) -> phase c (adapt) -> pack -> eval + bench. Every step resumes if interrupted (rerun).
#
#   bash scripts/train_default.sh [RUNS_DIR]        (default RUNS_DIR: ./runs, data in RUNS_DIR/data)
#
# The step counts are a CPU budget, not convergence (docs/TRAINING.md has the measured results).
# f_v is the autoencoder latent of the first frame (--visual-reference latent, the default preset;
# models/reference_encoder.py says why), so the model needs no vision tower of its own.
# The decoder's joint stage and the engine run side by side, one core each: the decoder keeps
# E_a as decoder_pre left it (--freeze-action-encoder), so the engine can learn those E_a targets
# while the decoder's transformer keeps training.
#
# ENGINE_INIT: the engine starts from this trained engine's LoRA and embeddings
# (--init --init-new-targets); the shipped engine of 2026-11-23 was used, itself trained from
# SmolLM2 by `train engine --steps 1000` (see git history of this script). Set ENGINE_INIT= to
# start from the bare backbone instead.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${1:-$ROOT/runs}"
DATA="$RUNS/data"
AG="$ROOT/bin/animegamer"
ENGINE_INIT="${ENGINE_INIT-$RUNS/engine_init}"
mkdir -p "$RUNS" "$DATA"
resume() { [[ -d "$1/checkpoints" ]] && echo --resume || true; }

# World data: 1200 sessions x 5 turns (seed 1000; its first 300 sessions are `fit`, the
# autoencoder's data) to train on.
[[ -d "$RUNS/vae/final" || -f "$DATA/fit/meta.json" ]] || "$AG" world render --sessions 300 --turns 5 --seed 1000 --out "$DATA/fit"
[[ -f "$DATA/big/meta.json" ]] || "$AG" world render --sessions 1200 --turns 5 --seed 1000 --out "$DATA/big"

# Phase a: the autoencoder, then the decoder in two runs (E_a learns in the first 300 steps, then
# is frozen while the transformer goes on from there).
[[ -d "$RUNS/vae/final" ]] || "$AG" train vae --preset default --data "$DATA/fit" --out "$RUNS/vae" \
    --steps 1400 --threads 2 $(resume "$RUNS/vae")
DEC=("$AG" train decoder --preset default --visual-reference latent --data "$DATA/big" --vae "$RUNS/vae" --limit 2048)
[[ -d "$RUNS/decoder_pre/joint/final" ]] || "${DEC[@]}" --out "$RUNS/decoder_pre" --steps 300 --ema-decay 0 \
    --schedule constant --warmup-steps 30 --samples 0 --threads 2 $(resume "$RUNS/decoder_pre/joint")
mkdir -p "$RUNS/decoder" && ln -sfn "$RUNS/decoder_pre/cache" "$RUNS/decoder/cache"  # the same encoded shots

# Phase b beside the decoder's second part, one core each
if [[ ! -d "$RUNS/decoder/joint/final" ]]; then
    "${DEC[@]}" --out "$RUNS/decoder" --init "$RUNS/decoder_pre" --freeze-action-encoder --steps 1800 \
        --warmup-steps 20 --threads 1 $(resume "$RUNS/decoder/joint") > "$RUNS/decoder.log" 2>&1 &
    DEC_PID=$!
fi
INIT=(); [[ -n "$ENGINE_INIT" ]] && INIT=(--init "$ENGINE_INIT" --init-new-targets)
[[ -d "$RUNS/engine/final" ]] || "$AG" train engine --preset default --data "$DATA/big" \
    --decoder "$RUNS/decoder_pre" --out "$RUNS/engine" "${INIT[@]}" \
    --steps 600 --max-turns 3 --window 3 --eval-sessions 30 --threads 1 $(resume "$RUNS/engine") \
    > "$RUNS/engine.log" 2>&1
[[ -z "${DEC_PID:-}" ]] || wait "$DEC_PID"

# Phase c (the run measured on 2026-11-24: 25 sessions, 200 steps), then the model; graded by the
# shipped evaluator (animegamer/weights/evaluator: scripts/train_default.sh trains it)
[[ -d "$RUNS/adapt/final" ]] || "$AG" train adapt --preset default --data "$DATA/big" --engine "$RUNS/engine" \
    --decoder "$RUNS/decoder" --out "$RUNS/adapt" --limit 25 --steps 200 --threads 2 $(resume "$RUNS/adapt")
"$AG" model pack --engine "$RUNS/engine" --decoder "$RUNS/adapt" --out "$RUNS/model"
"$AG" model pack --engine "$RUNS/engine" --decoder "$RUNS/decoder" --out "$RUNS/model_no_adapt"

"$AG" eval --sessions 8 --model "$RUNS/model" --out "$RUNS/eval" \
    --window-ablation 1 --ablation "without adaptation=$RUNS/model_no_adapt" --threads 2
"$AG" eval-decoder --decoder "$RUNS/decoder" --data "$DATA/big" --n 32 \
    --out "$RUNS/decoder_eval.json"
"$AG" bench --model "$RUNS/model" --threads 2 --out "$RUNS/bench.json"
echo "done: model in $RUNS/model, table in $RUNS/eval/eval.md"
