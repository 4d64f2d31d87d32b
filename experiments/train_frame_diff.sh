#!/usr/bin/env bash
# Experiment (2026-11-24, docs/results/frame_diff.md): does a temporal-difference loss make the
# decoder stop flickering, so that the flow measuring the motion level reads the motion it was asked
# for? `train decoder --frame-diff-loss W` adds W x the MSE of the frame-to-frame differences of the v
# prediction to the v-loss (decoder/diffusion.py). Both runs continue the best decoder on the TRUE s_a,
# spatial_r50 (experiments/train_shared_noise.sh), with the same steps and schedule:
#
#   control:  --frame-diff-loss 0 (the plain v-loss)
#   fd2:      --frame-diff-loss 2
#   r90:      control, STEPS more with --shared-noise 0.9 (90% of the noise variance shared by the
#             frames), graded at the stored CFG 3 and at CFG 1 (guidance amplifies the flicker)
#   r99:      r90, STEPS more with --shared-noise 0.99
#   graded:   eval-decoder on the TRUE s_a of the same 64 held-out shots; watch latent_frame_sigma
#             (0.05 is where the flow starts losing the level, docs/results/shared_noise.md)
#
#   bash experiments/train_frame_diff.sh [RUNS_DIR] [STEPS]   (needs experiments/train_shared_noise.sh's runs)
#
# Every step resumes if interrupted (rerun). About 90 minutes on the 2-core CPU at 1200 steps.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="$(mkdir -p "${1:-$ROOT/runs}" && cd "${1:-$ROOT/runs}" && pwd)"  # absolute: symlinks resolve from their own dir
STEPS="${2:-1200}"
DATA="$RUNS/data/big"
AG="$ROOT/bin/animegamer"
OUT="$RUNS/frame_diff"
source "$ROOT/experiments/common.sh"
require experiments/train_shared_noise.sh "$RUNS/shared_noise/spatial_r50/joint/final" "$DATA/meta.json"
DEC=("$AG" train decoder --preset default --reference-channels 0 --shared-noise-by-level off --visual-reference latent --data "$DATA" --vae "$RUNS/vae" --limit 2048
     --reference-channels 16 --freeze-action-encoder
     --warmup-steps 20 --save-every 300 --threads 2 --steps "$STEPS")
evaluate() {  # NAME DECODER_RUN [extra eval-decoder flags]
    local name="$1" dir="$2"; shift 2
    [[ -f "$OUT/evals/$name.json" ]] || "$AG" eval-decoder --decoder "$dir" --cache "$RUNS/decoder_pre/cache/val_64" \
        --data "$DATA" --n 64 --threads 2 --sheet "$OUT/evals/sheet_$name.png" --out "$OUT/evals/$name.json" "$@"
}
mkdir -p "$OUT/evals"
for spec in fd2=2 control=0; do
    name=${spec%%=*}; weight=${spec#*=}
    mkdir -p "$OUT/$name" && ln -sfn "$RUNS/decoder_pre/cache" "$OUT/$name/cache"  # the same encoded shots
    [[ -d "$OUT/$name/joint/final" ]] || "${DEC[@]}" --out "$OUT/$name" --frame-diff-loss "$weight" \
        --init "$RUNS/shared_noise/spatial_r50" --shared-noise 0.5 $(resume "$OUT/$name/joint")
    evaluate "$name" "$OUT/$name"
done
evaluate base "$RUNS/shared_noise/spatial_r50"
mkdir -p "$OUT/r90" && ln -sfn "$RUNS/decoder_pre/cache" "$OUT/r90/cache"
[[ -d "$OUT/r90/joint/final" ]] || "${DEC[@]}" --out "$OUT/r90" --init "$OUT/control" --shared-noise 0.9 \
    $(resume "$OUT/r90/joint")
evaluate r90 "$OUT/r90"
evaluate r90_cfg1 "$OUT/r90" --guidance 1
evaluate control_cfg1 "$OUT/control" --guidance 1
mkdir -p "$OUT/r99" && ln -sfn "$RUNS/decoder_pre/cache" "$OUT/r99/cache"
[[ -d "$OUT/r99/joint/final" ]] || "${DEC[@]}" --out "$OUT/r99" --init "$OUT/r90" --shared-noise 0.99 \
    $(resume "$OUT/r99/joint")
evaluate r99 "$OUT/r99"
evaluate r99_cfg1 "$OUT/r99" --guidance 1
echo "done: $OUT/evals/{fd2,control,base,r90,r90_cfg1,control_cfg1,r99,r99_cfg1}.json"
