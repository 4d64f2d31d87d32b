#!/usr/bin/env bash
# Experiment (2026-11-25, docs/results/spatial_calibrated.md): the spatial-reference decoder with the
# level-matched noise prior (runs/level_noise/lm of experiments/train_level_noise.sh), taken through
# what the shipped decoder went through: phase c against the shipped engine, then a sampling prior
# calibrated per level on 200 held-out TEST shots at CFG 1, 1.5 and 2, then graded
#   - from the TRUE s_a of the 300 val shots (eval-decoder), CFG 1 and 2;
#   - in the game: 12 held-out sessions beside the shipped rows of docs/results/level_noise.md.
#
#   bash experiments/train_spatial_calibrated.sh [RUNS_DIR]
#
# Every step resumes or is skipped when its output exists (rerun). About 70 minutes on the 2-core CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="$(mkdir -p "${1:-$ROOT/runs}" && cd "${1:-$ROOT/runs}" && pwd)"
DATA="$RUNS/data/big"
AG="$ROOT/bin/animegamer"
OUT="$RUNS/spatial_lm"
source "$ROOT/experiments/common.sh"
require experiments/train_level_noise.sh "$RUNS/level_noise/lm/joint/final"
require "bin/animegamer recipe default --out RUNS" "$RUNS/engine_extra/final" "$RUNS/engine_more2/sessions/train" "$DATA/meta.json"
mkdir -p "$OUT"

# Phase c exactly as the shipped decoder's (the default recipe (`bin/animegamer recipe default`))
[[ -d "$OUT/adapt/final" ]] || "$AG" train adapt --preset default --data "$DATA" --engine "$RUNS/engine_extra" \
    --sessions "$RUNS/engine_more2/sessions/train" --decoder "$RUNS/level_noise/lm" --out "$OUT/adapt" --limit 25 \
    --steps 200 --threads 2 $(resume "$OUT/adapt")

# The sampling prior per level at three guidance scales (the caches are those of level_calibration.md)
CAL="$RUNS/level_calib/cache"
declare -A GRID=(
    [1]="1:0.998,0.9995,0.9999;2:0.98,0.99,0.995,0.998;3:0.8,0.9,0.95,0.98;4:0.3,0.5,0.65,0.8,0.9;5:0,0.15,0.3,0.5"
    [1.5]="1:0.9995,0.9999;2:0.99,0.995,0.998;3:0.9,0.95;4:0.3,0.5,0.65;5:0,0.15"
    [2]="1:0.995,0.998,0.9995,0.9999;2:0.99,0.995,0.998;3:0.9,0.95,0.98;4:0.3,0.5,0.65,0.8;5:0,0.15,0.3"
)
ABL=()
for g in 1 1.5 2; do
    [[ -f "$OUT/sweep_cfg$g.json" ]] || "$AG" calibrate-levels sweep --decoder "$OUT/adapt" --data "$DATA" \
        --template-cache "$RUNS/level_noise/lm/cache/val_64" --cache "$CAL/test_200" --split test --n 200 \
        --guidance "$g" --grid "${GRID[$g]}" --threads 2 --no-progress --out "$OUT/sweep_cfg$g.json"
    prior="$("$ROOT/.venv/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["pack_argument"])' \
        "$OUT/sweep_cfg$g.json")"
    [[ -d "$OUT/model_cfg${g}_cal" ]] || "$AG" model pack --engine "$RUNS/engine_extra" --decoder "$OUT/adapt" \
        --out "$OUT/model_cfg${g}_cal" --guidance "$g" --sample-shared-noise "$prior"
    ABL+=(--ablation "spatial reference, CFG $g, calibrated sampling prior=$OUT/model_cfg${g}_cal")
done
[[ -d "$OUT/model_cfg2" ]] || "$AG" model pack --engine "$RUNS/engine_extra" --decoder "$OUT/adapt" \
    --out "$OUT/model_cfg2" --guidance 2

# From the TRUE s_a of the 300 val shots (a finished cache is kept as it is)
"$AG" calibrate-levels cache --data "$DATA" \
    --template-cache "$RUNS/level_noise/lm/cache/val_64" --cache "$CAL/val_300" --split val --n 300
for g in 1 2; do
    [[ -f "$OUT/val300_cfg${g}_cal.json" ]] || "$AG" eval-decoder --decoder "$OUT/model_cfg${g}_cal/shot_decoder" \
        --cache "$CAL/val_300" --data "$DATA" --n 300 --threads 2 --no-progress \
        --sheet "$OUT/sheet_val300_cfg${g}_cal.png" --out "$OUT/val300_cfg${g}_cal.json"
done

# In the game, beside the rows of docs/results/level_noise.md and level_calibration.md (reused when graded;
# their packs are made by the `model pack` commands those pages give)
require "the model pack commands of docs/results/level_noise.md and level_calibration.md" \
    "$RUNS/level_noise/model_cfg1" "$RUNS/level_noise/model_cfg2" "$RUNS/level_noise/model_cfg3" \
    "$RUNS/level_noise/model_new_engine_old_decoder" "$RUNS/level_calib/model_cal" "$RUNS/model"
"$AG" eval --sessions 12 --model "$RUNS/level_noise/model_cfg1" --out "$RUNS/level_noise/eval_game" \
    --ablation "level-matched, CFG 3=$RUNS/level_noise/model_cfg3" \
    --ablation "new engine, shipped decoder=$RUNS/level_noise/model_new_engine_old_decoder" \
    --ablation "shipped=$RUNS/model" --ablation "level-matched, CFG 2=$RUNS/level_noise/model_cfg2" \
    --ablation "CFG 2, calibrated sampling prior=$RUNS/level_calib/model_cal" \
    --ablation "spatial reference, level-matched, CFG 2=$OUT/model_cfg2" "${ABL[@]}" --threads 2 --no-progress
echo "done: $OUT/val300_cfg{1,2}_cal.json (TRUE s_a), $RUNS/level_noise/eval_game/eval.md (game)"
