#!/usr/bin/env bash
# Experiment (2026-11-24, docs/results/spatial_reference.md): the decoder with a SPATIAL reference,
# s_a's visual tokens also laid out on the patch grid and concatenated to the noisy latent
# (`train decoder --reference-channels 16`, CogVideoX-I2V style; decoder/network.py), against the
# shipped decoder, trained at the same budget from the same runs:
#
#   decoder: --init decoder_pre --freeze-action-encoder, 1800 steps (exactly as the shipped decoder's
#            second run; the new input channels start at zero, E_a stays decoder_pre's, so the shipped
#            engine's predictions are its input too)
#   phase c: runs/engine's closed-loop predictions (the engine shipped at the time, 1600 steps) on
#            25 training sessions (200 steps, as shipped then) and on 100 (400 steps); the
#            shipped decoder of that time is adapted on the same 100 too
#   graded:  eval-decoder on the TRUE s_a of the 64 held-out shots, and the 12-session eval table
#
#   bash experiments/train_spatial_reference.sh [RUNS_DIR]   (needs the runs of the default recipe (`bin/animegamer recipe default`))
#
# Every step resumes if interrupted (rerun). About 60 minutes on the 2-core CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="$(mkdir -p "${1:-$ROOT/runs}" && cd "${1:-$ROOT/runs}" && pwd)"  # absolute: symlinks resolve from their own dir
DATA="$RUNS/data/big"
AG="$ROOT/bin/animegamer"
OUT="$RUNS/spatial"
source "$ROOT/experiments/common.sh"
require "bin/animegamer recipe default --out RUNS, then experiments/recipes/tokens_only_decoder.yaml" "$RUNS/vae/final" "$RUNS/decoder_pre/joint/final" "$RUNS/decoder/joint/final" \
    "$RUNS/engine/final" "$RUNS/model" "$RUNS/evaluator_pack" "$DATA/meta.json"
mkdir -p "$OUT/decoder" && ln -sfn "$RUNS/decoder_pre/cache" "$OUT/decoder/cache"  # the same encoded shots

[[ -d "$OUT/decoder/joint/final" ]] || "$AG" train decoder --preset default --visual-reference latent --data "$DATA" \
    --vae "$RUNS/vae" --limit 2048 --out "$OUT/decoder" --init "$RUNS/decoder_pre" --freeze-action-encoder \
    --reference-channels 16 --shared-noise-by-level off --steps 1800 --warmup-steps 20 --threads 2 $(resume "$OUT/decoder/joint")
[[ -f "$OUT/eval_decoder.json" ]] || "$AG" eval-decoder --decoder "$OUT/decoder" --cache "$RUNS/decoder_pre/cache/val_64" \
    --data "$DATA" --n 64 --threads 2 --sheet "$OUT/sheet_decoder.png" --out "$OUT/eval_decoder.json"

# phase c: NAME DECODER_RUN SESSIONS STEPS
adapt() {
    [[ -d "$OUT/$1/final" ]] || "$AG" train adapt --preset default --data "$DATA" --engine "$RUNS/engine" --decoder "$2" \
        --out "$OUT/$1" --limit "$3" --steps "$4" --threads 2 $(resume "$OUT/$1")
    "$AG" model pack --engine "$RUNS/engine" --decoder "$OUT/$1" --out "$OUT/model_$1"
}
adapt adapt25 "$OUT/decoder" 25 200
adapt adapt100 "$OUT/decoder" 100 400
adapt shipped_decoder_adapt100 "$RUNS/decoder" 100 400

"$AG" eval --sessions 12 --out "$RUNS/eval" --model "$RUNS/model" \
    --ablation "spatial reference (adapt 25 sessions)=$OUT/model_adapt25" \
    --ablation "spatial reference (adapt 100 sessions)=$OUT/model_adapt100" \
    --ablation "no spatial reference (adapt 100 sessions)=$OUT/model_shipped_decoder_adapt100" --threads 2
echo "done: $OUT/eval_decoder.json (TRUE s_a) and $RUNS/eval/eval.md (end to end)"
