#!/usr/bin/env bash
# Experiment (2026-11-24, docs/results/level_noise.md): can the motion level reach the decoder's
# frame axis through the noise prior? docs/results/frame_diff.md found that every decoder draws one
# amount of frame-to-frame change whatever the level, and that the shared fraction of the noise sets
# that amount (0% -> 0.27, 90% -> 0.12, 99% -> 0.07 in latent motion). A level-matched prior
# (`train decoder --shared-noise-by-level R1,..,R5`, decoder/diffusion.py) shares more of the noise for
# calm levels than for wild ones, in training and sampling alike.
#
#   lm:       r90 (spatial reference; experiments/train_frame_diff.sh), STEPS more with the prior LM_LEVELS
#   shipped:  the shipped line's decoder (runs/decoder of the default recipe (`bin/animegamer recipe default`), no spatial
#             reference, E_a frozen so the engine's targets hold), STEPS more with SHIPPED_LEVELS
#   graded:   eval-decoder on the TRUE s_a of the same 64 held-out shots as frame_diff.md, at CFG 1
#             and 3; ACC-F (true level) against ACC-F at a wrong level is the ablation
#
#   bash experiments/train_level_noise.sh [RUNS_DIR] [STEPS] [THREADS]
#
# Every step resumes if interrupted (rerun). About 35 minutes per run on the 2-core CPU at 1200 steps.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="$(mkdir -p "${1:-$ROOT/runs}" && cd "${1:-$ROOT/runs}" && pwd)"  # absolute: symlinks resolve from their own dir
STEPS="${2:-1200}"
THREADS="${3:-2}"
LM_LEVELS=0.995,0.99,0.95,0.8,0.3
SHIPPED_LEVELS=0.998,0.99,0.95,0.8,0.4  # after lm: level 1 moved 0.043 (truth 0.026), level 5 0.29 (0.26)
DATA="$RUNS/data/big"
AG="$ROOT/bin/animegamer"
OUT="$RUNS/level_noise"
source "$ROOT/experiments/common.sh"
require "bin/animegamer recipe default --out RUNS, then experiments/recipes/tokens_only_decoder.yaml" "$RUNS/decoder/joint/final" "$DATA/meta.json"
DEC=("$AG" train decoder --preset default --reference-channels 0 --shared-noise-by-level off --visual-reference latent --data "$DATA" --vae "$RUNS/vae" --limit 2048
     --freeze-action-encoder --warmup-steps 20 --save-every 300 --threads "$THREADS" --steps "$STEPS")
run() {  # NAME INIT LEVELS [extra train flags]
    local name="$1" init="$2" levels="$3"; shift 3
    mkdir -p "$OUT/$name" && ln -sfn "$RUNS/decoder_pre/cache" "$OUT/$name/cache"  # the same encoded shots
    [[ -d "$OUT/$name/joint/final" ]] || "${DEC[@]}" --out "$OUT/$name" --init "$init" \
        --shared-noise-by-level "$levels" "$@" $(resume "$OUT/$name/joint")
    for cfg in 1 3; do
        [[ -f "$OUT/evals/${name}_cfg$cfg.json" ]] || "$AG" eval-decoder --decoder "$OUT/$name" \
            --cache "$RUNS/decoder_pre/cache/val_64" --data "$DATA" --n 64 --threads "$THREADS" --guidance "$cfg" \
            --sheet "$OUT/evals/sheet_${name}_cfg$cfg.png" --out "$OUT/evals/${name}_cfg$cfg.json"
    done
}
mkdir -p "$OUT/evals"
if [[ "${SKIP_LM:-}" != 1 ]]; then
    require experiments/train_frame_diff.sh "$RUNS/frame_diff/r90/joint/final"
    run lm "$RUNS/frame_diff/r90" "$LM_LEVELS" --reference-channels 16
fi
run shipped "$RUNS/decoder" "$SHIPPED_LEVELS"
echo "done: $OUT/evals/{lm,shipped}_cfg{1,3}.json"
