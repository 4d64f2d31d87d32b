#!/usr/bin/env bash
# Reproduces the shipped default model (animegamer/weights/default) and its evaluator from
# nothing: world data -> phase a (clip, vae, decoder) -> phase b (engine) -> phase c (adapt)
# -> pack -> eval + bench. Every step resumes if interrupted (rerun this script).
#
#   bash scripts/train_default.sh [RUNS_DIR]        (default RUNS_DIR: ./runs, data in RUNS_DIR/data)
#
# On the 2-core CPU this was measured on it takes about 2.5 hours; the step counts are a CPU
# budget, not convergence (see docs/TRAINING.md for the measured results of each phase).
# The decoder's joint stage and the engine run side by side, one core each: the decoder keeps
# E_a as its warm-up stage left it (--freeze-action-encoder), so the engine can learn the
# warm-up's E_a targets while the decoder's transformer keeps training.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${1:-$ROOT/runs}"
DATA="$RUNS/data"
AG="$ROOT/bin/animegamer"
mkdir -p "$RUNS" "$DATA"
resume() { [[ -d "$1/checkpoints" ]] && echo --resume || true; }

# World data: 300 sessions x 5 turns (seed 1000) to train on; 200 sessions (seed 3000) for the
# evaluator, a separate vision tower, so the model is never graded by its own encoder.
[[ -f "$DATA/fit/meta.json" ]] || "$AG" world render --sessions 300 --turns 5 --seed 1000 --out "$DATA/fit"
[[ -f "$DATA/evaluator/meta.json" ]] || "$AG" world render --sessions 200 --turns 5 --seed 3000 --out "$DATA/evaluator"

# Phase a
[[ -d "$RUNS/clip/final" ]] || "$AG" train clip --preset default --data "$DATA/fit" --out "$RUNS/clip" \
    --steps 800 --batch-size 32 --warmup-steps 50 --threads 2 $(resume "$RUNS/clip")
[[ -d "$RUNS/vae/final" ]] || "$AG" train vae --preset default --data "$DATA/fit" --out "$RUNS/vae" \
    --steps 1400 --threads 2 $(resume "$RUNS/vae")
# The decoder: first 300 steps that learn E_a with everything else, then E_a is frozen and the
# transformer goes on (--init, --freeze-action-encoder) while the engine learns that E_a's targets.
DEC=("$AG" train decoder --preset default --data "$DATA/fit" --clip "$RUNS/clip" --vae "$RUNS/vae")
[[ -d "$RUNS/decoder_pre/joint/final" ]] || "${DEC[@]}" --out "$RUNS/decoder_pre" --steps 300 --ema-decay 0 \
    --schedule constant --warmup-steps 30 --samples 0 --threads 2 $(resume "$RUNS/decoder_pre/joint")
mkdir -p "$RUNS/decoder" && ln -sfn "$RUNS/decoder_pre/cache" "$RUNS/decoder/cache"  # the same encoded shots

# Phase b beside the decoder's second part, one core each
if [[ ! -d "$RUNS/decoder/joint/final" ]]; then
    "${DEC[@]}" --out "$RUNS/decoder" --init "$RUNS/decoder_pre" --freeze-action-encoder --steps 3000 \
        --warmup-steps 20 --threads 1 $(resume "$RUNS/decoder/joint") > "$RUNS/decoder.log" 2>&1 &
    DEC_PID=$!
fi
[[ -d "$RUNS/engine/final" ]] || "$AG" train engine --preset default --data "$DATA/fit" \
    --decoder "$RUNS/decoder_pre" --clip "$RUNS/clip" --out "$RUNS/engine" \
    --steps 1000 --max-turns 3 --window 3 --threads 1 $(resume "$RUNS/engine")
[[ -z "${DEC_PID:-}" ]] || wait "$DEC_PID"

# Phase c, the evaluator, the model
[[ -d "$RUNS/adapt/final" ]] || "$AG" train adapt --preset default --data "$DATA/fit" --engine "$RUNS/engine" \
    --decoder "$RUNS/decoder" --out "$RUNS/adapt" --limit 50 --steps 300 --threads 2 $(resume "$RUNS/adapt")
[[ -d "$RUNS/evaluator/final" ]] || "$AG" train clip --preset default --data "$DATA/evaluator" --out "$RUNS/evaluator" \
    --steps 600 --batch-size 32 --warmup-steps 50 --seed 7 --threads 2 $(resume "$RUNS/evaluator")
# the evaluator's video action classifier (the eval table's "action" column), shipped beside its tower
[[ -f "$DATA/evaluator_big/meta.json" ]] || "$AG" world render --sessions 600 --turns 5 --seed 3000 \
    --out "$DATA/evaluator_big"
[[ -d "$RUNS/action/final" ]] || "$AG" train action --preset default --data "$DATA/evaluator_big" \
    --out "$RUNS/action" --steps 1000 --threads 2 $(resume "$RUNS/action")
mkdir -p "$RUNS/evaluator_pack"  # what ships as animegamer/weights/evaluator
cp "$RUNS/evaluator/final/vision_tower/"* "$RUNS/evaluator_pack/"
rm -rf "$RUNS/evaluator_pack/action_classifier" && cp -r "$RUNS/action/final/action_classifier" "$RUNS/evaluator_pack/"
"$AG" model pack --engine "$RUNS/engine" --decoder "$RUNS/adapt" --out "$RUNS/model"
"$AG" model pack --engine "$RUNS/engine" --decoder "$RUNS/decoder" --out "$RUNS/model_no_adapt"

"$AG" eval --sessions 20 --model "$RUNS/model" --evaluator "$RUNS/evaluator_pack" --out "$RUNS/eval" \
    --window-ablation 1 --ablation "without adaptation=$RUNS/model_no_adapt" --threads 2
"$AG" eval-decoder --decoder "$RUNS/decoder" --data "$DATA/fit" --evaluator "$RUNS/evaluator" --n 32 --out "$RUNS/decoder_eval.json"
"$AG" bench --model "$RUNS/model" --threads 2 --out "$RUNS/bench.json"
echo "done: model in $RUNS/model (copy it to animegamer/weights/default to ship it), table in $RUNS/eval/eval.md"
