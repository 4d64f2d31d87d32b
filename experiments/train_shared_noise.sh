#!/usr/bin/env bash
# Experiment (2026-11-24, docs/results/shared_noise.md): does a mixed noise prior (PYoCo: half of the
# diffusion noise's variance shared by all frames of a shot, `train decoder --shared-noise 0.5`) make
# the decoder follow the motion level? The flow that measures the level reads independent per-frame
# errors as motion; `eval-decoder --latent-noise` measures how exact the per-frame latents must be.
#
#   r50:          the shipped decoder's second run (--init decoder_pre, E_a frozen, 1800 steps) with
#                 --shared-noise 0.5
#   spatial_r50:  the spatial-reference decoder (experiments/train_spatial_reference.sh) 900 steps more
#                 with --shared-noise 0.5
#   graded:       eval-decoder on the TRUE s_a of the same 64 held-out shots, with the shipped and
#                 the spatial decoders, and the autoencoder ceiling per latent noise
#
#   bash experiments/train_shared_noise.sh [RUNS_DIR]   (needs the runs of the default recipe (`bin/animegamer recipe default`) and
#                                                    experiments/train_spatial_reference.sh)
#
# Every step resumes if interrupted (rerun). About 50 minutes on the 2-core CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="$(mkdir -p "${1:-$ROOT/runs}" && cd "${1:-$ROOT/runs}" && pwd)"  # absolute: symlinks resolve from their own dir
DATA="$RUNS/data/big"
AG="$ROOT/bin/animegamer"
OUT="$RUNS/shared_noise"
source "$ROOT/experiments/common.sh"
require "bin/animegamer recipe default --out RUNS, then experiments/recipes/tokens_only_decoder.yaml" "$RUNS/vae/final" "$RUNS/decoder_pre/joint/final" "$RUNS/decoder/joint/final" "$DATA/meta.json"
require experiments/train_spatial_reference.sh "$RUNS/spatial/decoder/joint/final"
DEC=("$AG" train decoder --preset default --reference-channels 0 --shared-noise-by-level off --visual-reference latent --data "$DATA" --vae "$RUNS/vae" --limit 2048
     --freeze-action-encoder --shared-noise 0.5 --warmup-steps 20 --threads 2)
for d in decoder_r50 spatial_r50; do
    mkdir -p "$OUT/$d" && ln -sfn "$RUNS/decoder_pre/cache" "$OUT/$d/cache"  # the same encoded shots
done
[[ -d "$OUT/decoder_r50/joint/final" ]] || "${DEC[@]}" --out "$OUT/decoder_r50" --init "$RUNS/decoder_pre" \
    --steps 1800 $(resume "$OUT/decoder_r50/joint")
[[ -d "$OUT/spatial_r50/joint/final" ]] || "${DEC[@]}" --out "$OUT/spatial_r50" --init "$RUNS/spatial/decoder" \
    --reference-channels 16 --steps 900 $(resume "$OUT/spatial_r50/joint")

mkdir -p "$OUT/evals"
evaluate() {  # NAME DECODER_RUN [extra eval-decoder flags]
    local name="$1" dir="$2"; shift 2
    [[ -f "$OUT/evals/$name.json" ]] || "$AG" eval-decoder --decoder "$dir" --cache "$RUNS/decoder_pre/cache/val_64" \
        --data "$DATA" --n 64 --threads 2 --sheet "$OUT/evals/sheet_$name.png" --out "$OUT/evals/$name.json" "$@"
}
evaluate shipped "$RUNS/decoder" --latent-noise 0,0.02,0.05,0.1
evaluate r50 "$OUT/decoder_r50"
evaluate spatial "$RUNS/spatial/decoder"
evaluate spatial_r50 "$OUT/spatial_r50"
echo "done: $OUT/evals/{shipped,r50,spatial,spatial_r50}.json"
