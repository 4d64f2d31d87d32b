#!/usr/bin/env bash
# Experiment (2026-11-25, docs/results/motion_guidance.md): guide the picture, not the motion, and
# calibrate each level's sampling noise on the engine's PREDICTED s_a (what the game decodes) rather
# than the true s_a. Same weights; for the shipped decoder and the spatial-reference one:
#   - calibrate-levels sweep at CFG 2 with --motion-guidance 1 on the shipped engine's closed-loop s_a
#     of the 40 held-out TEST sessions whose 200 shots are cached;
#   - the game: the 12 sessions of docs/results/level_noise.md (world seed 9000) and 24 new ones (seed 9100);
#   - the TRUE s_a of the 300 val shots (eval-decoder), for the README's decoder row.
#
#   bash experiments/motion_guidance.sh [RUNS_DIR]
#
# Every step is skipped when its output exists (rerun). About 60 minutes on the 2-core CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="$(mkdir -p "${1:-$ROOT/runs}" && cd "${1:-$ROOT/runs}" && pwd)"
DATA="$RUNS/data/big"
AG="$ROOT/bin/animegamer"
OUT="$RUNS/pred_calib"
source "$ROOT/experiments/common.sh"
require "bin/animegamer recipe default --out RUNS" "$RUNS/engine_extra/final" "$RUNS/engine_more2/sessions/test" "$DATA/meta.json"
require "docs/results/level_noise.md (its shipped decoder run)" "$RUNS/level_noise/adapt_shipped/final" \
    "$RUNS/level_noise/shipped/cache/val_64"
require experiments/train_spatial_calibrated.sh "$RUNS/spatial_lm/adapt/final" "$RUNS/level_noise/lm/cache/val_64"
mkdir -p "$OUT"
GRID="1:0.998,0.9995,0.9999;2:0.98,0.99,0.995,0.998;3:0.9,0.95,0.98;4:0.5,0.65,0.8;5:0,0.3"
# the shipped decoder is swept as it ships (fp16; the same weights as the run's final/, which the pack reads)
declare -A DECODER=([shipped]="$ROOT/animegamer/weights/default/shot_decoder" [spatial]="$RUNS/spatial_lm/adapt")
declare -A PACK=([shipped]="$RUNS/level_noise/adapt_shipped" [spatial]="$RUNS/spatial_lm/adapt")
declare -A TEMPLATE=([shipped]="$RUNS/level_noise/shipped/cache/val_64" [spatial]="$RUNS/level_noise/lm/cache/val_64")
for d in shipped spatial; do
    [[ -f "$OUT/${d}_cfg2_mg1.json" ]] || "$AG" calibrate-levels sweep --decoder "${DECODER[$d]}" --data "$DATA" \
        --template-cache "${TEMPLATE[$d]}" --cache "$RUNS/level_calib/cache/test_200" --split test --n 200 \
        --guidance 2 --motion-guidance 1 --engine "$RUNS/engine_extra" --sessions "$RUNS/engine_more2/sessions/test" \
        --predictions "$OUT/engine_extra_test200" --grid "$GRID" --threads 2 --no-progress --out "$OUT/${d}_cfg2_mg1.json"
    prior="$("$ROOT/.venv/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["pack_argument"])' \
        "$OUT/${d}_cfg2_mg1.json")"
    [[ -d "$OUT/model_${d}_cfg2_mg1" ]] || "$AG" model pack --engine "$RUNS/engine_extra" --decoder "${PACK[$d]}" \
        --out "$OUT/model_${d}_cfg2_mg1" --guidance 2 --motion-guidance 1 --sample-shared-noise "$prior"
done
# Level 1 stays too lively; guiding the motion less (0.5, 0) does not calm it (the spatial decoder)
for mg in 0.5 0; do
    [[ -f "$OUT/spatial_cfg2_mg${mg}_calm.json" ]] || "$AG" calibrate-levels sweep --decoder "${DECODER[spatial]}" \
        --data "$DATA" --template-cache "${TEMPLATE[spatial]}" --cache "$RUNS/level_calib/cache/test_200" --split test \
        --n 200 --guidance 2 --motion-guidance "$mg" --engine "$RUNS/engine_extra" \
        --sessions "$RUNS/engine_more2/sessions/test" --predictions "$OUT/engine_extra_test200" \
        --grid "1:0.9999,0.99999;2:0.998,0.9995" --threads 2 --no-progress --out "$OUT/spatial_cfg2_mg${mg}_calm.json"
done

# The game, the 12 sessions of level_noise.md (its graded rows are reused; the packs are made by the
# commands of docs/results/level_noise.md, level_calibration.md and experiments/train_spatial_calibrated.sh)
require "the model pack commands of docs/results/level_noise.md and level_calibration.md" \
    "$RUNS/level_noise/model_cfg1" "$RUNS/level_noise/model_cfg2" "$RUNS/level_noise/model_cfg3" \
    "$RUNS/level_noise/model_new_engine_old_decoder" "$RUNS/level_calib/model_cal" "$RUNS/model"
S="$RUNS/spatial_lm"
"$AG" eval --sessions 12 --model "$RUNS/level_noise/model_cfg1" --out "$RUNS/level_noise/eval_game" \
    --ablation "level-matched, CFG 3=$RUNS/level_noise/model_cfg3" \
    --ablation "new engine, shipped decoder=$RUNS/level_noise/model_new_engine_old_decoder" \
    --ablation "shipped=$RUNS/model" --ablation "level-matched, CFG 2=$RUNS/level_noise/model_cfg2" \
    --ablation "CFG 2, calibrated sampling prior=$RUNS/level_calib/model_cal" \
    --ablation "spatial reference, level-matched, CFG 2=$S/model_cfg2" \
    --ablation "spatial reference, CFG 1, calibrated sampling prior=$S/model_cfg1_cal" \
    --ablation "spatial reference, CFG 1.5, calibrated sampling prior=$S/model_cfg15_cal" \
    --ablation "spatial reference, CFG 2, calibrated sampling prior=$S/model_cfg2_cal" \
    --ablation "spatial, CFG 2, motion guidance 1, calibrated on predicted s_a=$OUT/model_spatial_cfg2_mg1" \
    --ablation "shipped decoder, CFG 2, motion guidance 1, calibrated on predicted s_a=$OUT/model_shipped_cfg2_mg1" \
    --threads 2 --no-progress
# ... and 24 sessions of a world none of these settings was chosen on
"$AG" eval --sessions 24 --seed 9100 --model "$RUNS/level_calib/model_cal" --out "$OUT/eval_game_s9100" \
    --ablation "shipped decoder, CFG 2, motion guidance 1, calibrated on predicted s_a=$OUT/model_shipped_cfg2_mg1" \
    --ablation "spatial, CFG 2, motion guidance 1, calibrated on predicted s_a=$OUT/model_spatial_cfg2_mg1" \
    --threads 2 --no-progress
for e in "$RUNS/level_noise/eval_game" "$OUT/eval_game_s9100"; do
    "$ROOT/.venv/bin/python" "$ROOT/experiments/game_level_match.py" "$e" \
        --baseline "$([[ $e == *s9100 ]] && echo animegamer || echo cfg-2-calibrated-sampling-prior)"
done

# The TRUE s_a of the 300 val shots (the cache: docs/results/level_calibration.md)
[[ -f "$OUT/val300_shipped_mg1.json" ]] || "$AG" eval-decoder --decoder "$OUT/model_shipped_cfg2_mg1/shot_decoder" \
    --cache "$RUNS/level_calib/cache/val_300" --data "$DATA" --n 300 --threads 2 --no-progress \
    --sheet "$OUT/sheet_val300_shipped_mg1.png" --out "$OUT/val300_shipped_mg1.json"
echo "done: $OUT/*_cfg2_mg1.json (sweeps), $OUT/eval_game_s9100/eval.md, $OUT/val300_shipped_mg1.json"
