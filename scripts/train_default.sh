#!/usr/bin/env bash
# Reproduces the shipped default model (animegamer/weights/default, since 2026-11-24) and its
# evaluator: world data -> phase a (vae, decoder) -> phase b (engine) -> phase c (adapt) -> pack
# -> eval + bench. Every step resumes if interrupted (rerun this script).
#
#   bash scripts/train_default.sh [RUNS_DIR]        (default RUNS_DIR: ./runs, data in RUNS_DIR/data)
#
# f_v is the autoencoder latent of the first frame (--visual-reference latent, the default preset;
# representation/reference_encoder.py says why), so the model needs no vision tower of its own.
# The step counts are a CPU budget, not convergence (docs/TRAINING.md has the measured results).
#
# The engine starts from the previous default engine (ENGINE_INIT; --init --init-new-targets):
# the one shipped on 2026-11-23 (commit d83767b), itself trained from the bare SmolLM2 by
# `train engine --steps 1000` in that commit's scripts/train_default.sh. This script takes it from
# git history when RUNS_DIR/engine_init is missing. Set ENGINE_INIT= to start from the bare
# backbone instead (then give the engine more steps: it has 5800 behind it in the shipped model:
# 1000 in the init engine, then 600 + 600 + 600 here, 1200 on fresh sessions, then 600 + 1200 on
# other fresh sessions with the level taught at every turn).
#
# Since 2026-11-24 (late): the engine's last 1200 steps are on 2400 fresh sessions (seed 5000) that
# no step saw before (docs/results/engine_fresh_data.md), and the decoder goes on for 1200 steps
# with the level-matched noise prior (--shared-noise-by-level; docs/results/level_noise.md) before
# phase c. About 4 hours on the 2-core CPU.
#
# Since late on 2026-11-24: the packed decoder samples each motion level from a noise prior calibrated on
# held-out shots (`calibrate-levels`; docs/results/level_calibration.md), not the training one.
#
# Since 2026-11-25: the engine goes on for 1800 steps with the level taught at every history turn
# (engine_hist2; docs/results/engine_level_scene.md), and the packed decoder damps its level-1/2
# shots' frame-to-frame flicker by a calibrated scale (docs/results/motion_scale.md).
#
# Since 2026-11-25 (later): the decoder is the spatial-reference line (5 runs after decoder_pre), and
# phase c mixes the decoder's true shots into the engine's predictions (docs/results/mixed_adapt.md).
# About 7 hours.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="$(mkdir -p "${1:-$ROOT/runs}" && cd "${1:-$ROOT/runs}" && pwd)"  # absolute: symlinks resolve from their own dir
DATA="$RUNS/data"
AG="$ROOT/bin/animegamer"
ENGINE_INIT="${ENGINE_INIT-$RUNS/engine_init}"
source "$ROOT/scripts/common.sh"
mkdir -p "$RUNS" "$DATA"
if [[ -n "$ENGINE_INIT" && ! -f "$ENGINE_INIT/engine.safetensors" ]]; then
    mkdir -p "$ENGINE_INIT"
    for f in engine.json engine.safetensors; do
        git -C "$ROOT" show "d83767b:animegamer/weights/default/engine/$f" > "$ENGINE_INIT/$f.tmp"
        mv "$ENGINE_INIT/$f.tmp" "$ENGINE_INIT/$f"
    done
fi

# World data: 1200 sessions x 5 turns (seed 1000) to train on; its first 300 sessions (`fit`) train
# the autoencoder. 200 + 600 sessions (seed 3000) for the evaluator, which shares nothing with the model.
[[ -f "$DATA/fit/meta.json" ]] || "$AG" world render --sessions 300 --turns 5 --seed 1000 --out "$DATA/fit"
[[ -f "$DATA/big/meta.json" ]] || "$AG" world render --sessions 1200 --turns 5 --seed 1000 --out "$DATA/big"
# fresh sessions for the engine's last run (the engine had seen data/big's 4800 turns twice)
[[ -f "$DATA/engine_extra/meta.json" ]] || "$AG" world render --sessions 2400 --turns 5 --seed 5000 \
    --out "$DATA/engine_extra"
[[ -f "$DATA/evaluator/meta.json" ]] || "$AG" world render --sessions 200 --turns 5 --seed 3000 --out "$DATA/evaluator"
[[ -f "$DATA/evaluator_big/meta.json" ]] || "$AG" world render --sessions 600 --turns 5 --seed 3000 \
    --out "$DATA/evaluator_big"

# Phase a: the autoencoder, then the decoder in two runs (E_a learns in the first 300 steps, then
# is frozen while the transformer goes on from there).
[[ -d "$RUNS/vae/final" ]] || "$AG" train vae --preset default --data "$DATA/fit" --out "$RUNS/vae" \
    --steps 1400 --threads 2 $(resume "$RUNS/vae")
DEC=("$AG" train decoder --preset default --visual-reference latent --data "$DATA/big" --vae "$RUNS/vae" --limit 2048)
[[ -d "$RUNS/decoder_pre/joint/final" ]] || "${DEC[@]}" --out "$RUNS/decoder_pre" --steps 300 --ema-decay 0 \
    --schedule constant --warmup-steps 30 --samples 0 --threads 2 $(resume "$RUNS/decoder_pre/joint")
mkdir -p "$RUNS/decoder" && ln -sfn "$RUNS/decoder_pre/cache" "$RUNS/decoder/cache"  # the same encoded shots

# Phase b beside the decoder's second part, one core each: the engine learns the E_a targets of
# decoder_pre while the decoder's transformer goes on (--freeze-action-encoder keeps that E_a).
# Two decoders go on from decoder_pre, one after the other: `decoder` (s_a as tokens only; the
# baseline the ablation scripts compare with) and `spatial/decoder`, which also lays s_a's visual
# tokens on the patch grid (--reference-channels 16; docs/results/spatial_reference.md): the
# shipped decoder's line since 2026-11-25 (docs/results/mixed_adapt.md).
mkdir -p "$RUNS/spatial/decoder" && ln -sfn "$RUNS/decoder_pre/cache" "$RUNS/spatial/decoder/cache"
if [[ ! -d "$RUNS/decoder/joint/final" || ! -d "$RUNS/spatial/decoder/joint/final" ]]; then
    (
        [[ -d "$RUNS/decoder/joint/final" ]] || "${DEC[@]}" --out "$RUNS/decoder" --init "$RUNS/decoder_pre" \
            --freeze-action-encoder --steps 1800 --warmup-steps 20 --threads 1 $(resume "$RUNS/decoder/joint")
        [[ -d "$RUNS/spatial/decoder/joint/final" ]] || "${DEC[@]}" --out "$RUNS/spatial/decoder" \
            --init "$RUNS/decoder_pre" --freeze-action-encoder --reference-channels 16 --steps 1800 --warmup-steps 20 \
            --threads 1 $(resume "$RUNS/spatial/decoder/joint")
    ) > "$RUNS/decoder.log" 2>&1 &
    DEC_PID=$!
fi
INIT=(); [[ -n "$ENGINE_INIT" ]] && INIT=(--init "$ENGINE_INIT" --init-new-targets)
[[ -d "$RUNS/engine/final" ]] || "$AG" train engine --preset default --data "$DATA/big" \
    --decoder "$RUNS/decoder_pre" --out "$RUNS/engine" "${INIT[@]}" \
    --steps 600 --max-turns 3 --window 3 --eval-sessions 30 --threads 1 $(resume "$RUNS/engine") \
    > "$RUNS/engine.log" 2>&1
# ... then two more runs of 600 steps, each from the one before (--init, the same targets): 1800 in all
PREV="$RUNS/engine"
for E in engine_more engine_more2; do
    [[ -d "$RUNS/$E/final" ]] || "$AG" train engine --preset default --data "$DATA/big" --decoder "$RUNS/decoder_pre" \
        --out "$RUNS/$E" --init "$PREV" --steps 600 --max-turns 3 --window 3 --eval-sessions 30 --threads 1 \
        $(resume "$RUNS/$E") > "$RUNS/$E.log" 2>&1
    PREV="$RUNS/$E"
done
# ... then 1200 steps on the fresh sessions (same decoder_pre targets; nothing repeats)
[[ -d "$RUNS/engine_extra/final" ]] || "$AG" train engine --preset default --data "$DATA/engine_extra" \
    --decoder "$RUNS/decoder_pre" --out "$RUNS/engine_extra" --init "$PREV" --steps 1200 --max-turns 3 --window 3 \
    --eval-sessions 30 --no-closed-loop --threads 1 $(resume "$RUNS/engine_extra") > "$RUNS/engine_extra.log" 2>&1
# ... then 600 steps on another 2400 fresh sessions (seed 6000; docs/results/engine_level_pool.md), whose
# sessions the last two runs train on with the level taught at every turn of a sample, not only at its
# target (--history-level-weight 1): 600 steps from engine_extra, then 1200 more in another order
# (--seed 1). docs/results/engine_level_scene.md; scripts/engine_history_levels.sh measures them.
[[ -f "$DATA/engine_extra2/meta.json" ]] || "$AG" world render --sessions 2400 --turns 5 --seed 6000 \
    --out "$DATA/engine_extra2"
[[ -d "$RUNS/engine_extra2/final" ]] || "$AG" train engine --preset default --data "$DATA/engine_extra2" \
    --decoder "$RUNS/decoder_pre" --out "$RUNS/engine_extra2" --init "$RUNS/engine_extra" --steps 600 --max-turns 3 \
    --window 3 --eval-sessions 30 --no-closed-loop --threads 1 $(resume "$RUNS/engine_extra2") \
    > "$RUNS/engine_extra2.log" 2>&1
HIST=("$AG" train engine --preset default --data "$RUNS/engine_extra2/sessions/train" --max-turns 3 --window 3
      --no-closed-loop --threads 1 --history-level-weight 1 --no-progress)
[[ -d "$RUNS/engine_hist/final" ]] || "${HIST[@]}" --out "$RUNS/engine_hist" --init "$RUNS/engine_extra" \
    --steps 600 $(resume "$RUNS/engine_hist") > "$RUNS/engine_hist.log" 2>&1
[[ -d "$RUNS/engine_hist2/final" ]] || "${HIST[@]}" --out "$RUNS/engine_hist2" --init "$RUNS/engine_hist" \
    --steps 1200 --seed 1 $(resume "$RUNS/engine_hist2") > "$RUNS/engine_hist2.log" 2>&1
ENGINE="$RUNS/engine_hist2"
[[ -z "${DEC_PID:-}" ]] || wait "$DEC_PID"

# Phase a, last part: the spatial decoder goes on from there with part of the diffusion noise
# shared across frames (PYoCo), more and more of it, then the level-matched noise prior
# (E_a still frozen). Each run's directory is the one of the experiment script that first made it,
# so those scripts and this one reuse each other's runs:
#   shared_noise/spatial_r50   900 steps, half the noise shared        (train_shared_noise.sh)
#   frame_diff/control        1200 steps, the same                     (train_frame_diff.sh)
#   frame_diff/r90            1200 steps, 90 % shared                  (train_frame_diff.sh)
#   level_noise/lm            1200 steps, level-matched 0.995..0.3     (train_level_noise.sh)
# 6300 decoder steps after decoder_pre in all; about 2.2 hours of it after the engines.
SPATIAL=("${DEC[@]}" --freeze-action-encoder --reference-channels 16 --warmup-steps 20 --threads 2)
spatial_run() {  # OUT INIT STEPS [noise flags]
    local out="$1" init="$2" steps="$3"; shift 3
    mkdir -p "$out" && ln -sfn "$RUNS/decoder_pre/cache" "$out/cache"  # the same encoded shots
    [[ -d "$out/joint/final" ]] || "${SPATIAL[@]}" --out "$out" --init "$init" --steps "$steps" "$@" \
        $(resume "$out/joint")
}
spatial_run "$RUNS/shared_noise/spatial_r50" "$RUNS/spatial/decoder" 900 --shared-noise 0.5
spatial_run "$RUNS/frame_diff/control" "$RUNS/shared_noise/spatial_r50" 1200 --shared-noise 0.5 --save-every 300
spatial_run "$RUNS/frame_diff/r90" "$RUNS/frame_diff/control" 1200 --shared-noise 0.9 --save-every 300
spatial_run "$RUNS/level_noise/lm" "$RUNS/frame_diff/r90" 1200 --shared-noise-by-level 0.995,0.99,0.95,0.8,0.3 \
    --save-every 300
DECODER="$RUNS/level_noise/lm"

# Phase c: 150 training sessions played closed loop (750 turns), 600 decoder steps, half of every
# epoch the engine's predictions and half the decoder's own true shots (--true-fraction 0.5: on
# predictions alone the decoder forgot its picture from the true s_a; docs/results/mixed_adapt.md).
# The engine's own sessions are of the engine_extra worlds; the decoder's shots are data/big's.
[[ -d "$RUNS/adapt/final" ]] || "$AG" train adapt --preset default --data "$DATA/big" --engine "$ENGINE" \
    --sessions "$RUNS/engine_more2/sessions/train" --decoder "$DECODER" --out "$RUNS/adapt" --limit 150 \
    --steps 600 --true-fraction 0.5 --threads 2 $(resume "$RUNS/adapt")

# The evaluator: its own vision tower (other seed, other data) and video action classifier
[[ -d "$RUNS/evaluator/final" ]] || "$AG" train clip --preset default --data "$DATA/evaluator" --out "$RUNS/evaluator" \
    --steps 600 --batch-size 32 --warmup-steps 50 --seed 7 --threads 2 $(resume "$RUNS/evaluator")
[[ -d "$RUNS/action/final" ]] || "$AG" train action --preset default --data "$DATA/evaluator_big" \
    --out "$RUNS/action" --steps 1000 --threads 2 $(resume "$RUNS/action")
mkdir -p "$RUNS/evaluator_pack"  # what ships as animegamer/weights/evaluator
cp "$RUNS/evaluator/final/vision_tower/"* "$RUNS/evaluator_pack/"
rm -rf "$RUNS/evaluator_pack/action_classifier" && cp -r "$RUNS/action/final/action_classifier" "$RUNS/evaluator_pack/"

# The sampling noise prior per motion level, chosen on the engine's PREDICTED s_a of the 40 held-out
# TEST sessions whose 200 shots are cached (the reports use val shots and other worlds), under CFG 2
# with the frame-to-frame part of the guidance at 1: docs/results/motion_guidance.md. About 10 minutes.
[[ -f "$RUNS/level_calibration_predicted.json" ]] || "$AG" calibrate-levels sweep --decoder "$RUNS/adapt" \
    --data "$DATA/big" --template-cache "$DECODER/cache/val_64" --cache "$RUNS/level_calibration_cache" \
    --split test --n 200 --guidance 2 --motion-guidance 1 --engine "$ENGINE" \
    --sessions "$RUNS/engine_more2/sessions/test" --predictions "$RUNS/level_calibration_predictions" \
    --grid "1:0.998,0.9995,0.9999;2:0.98,0.99,0.995,0.998;3:0.9,0.95,0.98;4:0.5,0.65,0.8;5:0,0.3" \
    --threads 2 --no-progress --out "$RUNS/level_calibration_predicted.json"
pack_argument() { "$ROOT/.venv/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["pack_argument"])' "$1"; }
CAL="$(pack_argument "$RUNS/level_calibration_predicted.json")"
# CFG 2: docs/results/level_noise.md
"$AG" model pack --engine "$ENGINE" --decoder "$RUNS/adapt" --out "$RUNS/model_unscaled" --guidance 2 \
    --motion-guidance 1 --sample-shared-noise "$CAL"
# No noise prior makes the network's level-1 shots calm: damp the frame-to-frame part of the sampled
# latents at levels 1-2, on the same predicted s_a and the prior just chosen (docs/results/motion_scale.md)
[[ -f "$RUNS/motion_scale_predicted.json" ]] || "$AG" calibrate-levels sweep --knob motion-scale \
    --decoder "$RUNS/model_unscaled/shot_decoder" --data "$DATA/big" --template-cache "$DECODER/cache/val_64" \
    --cache "$RUNS/level_calibration_cache" --split test --n 200 --engine "$ENGINE" \
    --sessions "$RUNS/engine_more2/sessions/test" --predictions "$RUNS/level_calibration_predictions" \
    --grid "1:1,0.7,0.5,0.4;2:1,0.9,0.8,0.7" --threads 2 --no-progress --out "$RUNS/motion_scale_predicted.json"
"$AG" model pack --engine "$ENGINE" --decoder "$RUNS/adapt" --out "$RUNS/model" --guidance 2 --motion-guidance 1 \
    --sample-shared-noise "$CAL" --sample-motion-scale "$(pack_argument "$RUNS/motion_scale_predicted.json")"
"$AG" model pack --engine "$ENGINE" --decoder "$DECODER" --out "$RUNS/model_no_adapt"
"$AG" eval --sessions 12 --model "$RUNS/model" --evaluator "$RUNS/evaluator_pack" --out "$RUNS/eval" \
    --window-ablation 1 --ablation "without adaptation=$RUNS/model_no_adapt" --threads 2
"$AG" eval-decoder --decoder "$DECODER" --data "$DATA/big" --evaluator "$RUNS/evaluator_pack" --n 64 \
    --sheet "$RUNS/decoder_eval.png" --out "$RUNS/decoder_eval.json"
"$AG" bench --model "$RUNS/model" --threads 2 --out "$RUNS/bench.json"
echo "done: model in $RUNS/model (copy it to animegamer/weights/default to ship it), table in $RUNS/eval/eval.md"
echo "baselines: scripts/train_gc_baseline.sh $RUNS, scripts/train_decoder_ablations.sh $RUNS"
