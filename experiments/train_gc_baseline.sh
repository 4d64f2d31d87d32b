#!/usr/bin/env bash
#   bash experiments/train_gc_baseline.sh [RUNS_DIR]    (after `bin/animegamer recipe default --out RUNS_DIR`)
#
# The GC baseline of the paper's table ("the LLM writes global captions, text-only context"), built
# from the same parts and budget as the system it is compared with (the shipped model, the default recipe (`bin/animegamer recipe default`)):
#
# - decoder: `train decoder --config experiments/configs/gc_caption.yaml`: the text stream encodes the shot's whole caption
#   (characters, motion, place, time, props; MiniLM, 69 tokens) and there is NO visual reference
#   (one constant token), so the decoder renders from text alone. 69 + 1 tokens = the full
#   system's 70, so the engine keeps the same query slots and the same init. Same recipe as the
#   full decoder: 300 steps in which E_a learns, then 1800 joint steps with E_a frozen.
# - engine: the same SmolLM2 engine, same init (the 2026-11-23 engine, --init-new-targets) and
#   600 steps, trained to predict that caption representation. Its history therefore holds
#   instructions and the captions it wrote (as text features): text-only context, never a frame.
#   No phase c, so compare it with the full system's "without adaptation" row as well.
#
#   It needs RUNS_DIR/{vae,decoder_pre/cache,engine_init} and RUNS_DIR/data/big from the default recipe.
#
# Every step resumes if interrupted (rerun). About 45 minutes of one core each for the decoder and
# the engine, which overlap (the engine starts once the decoder's first 300 steps are done).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="$(mkdir -p "${1:-$ROOT/runs}" && cd "${1:-$ROOT/runs}" && pwd)"  # absolute: symlinks resolve from their own dir
DATA="$RUNS/data/big"
AG="$ROOT/bin/animegamer"
GC="$RUNS/gc"
mkdir -p "$GC"
source "$ROOT/experiments/common.sh"
require "bin/animegamer recipe default --out RUNS" "$RUNS/vae/final" "$RUNS/decoder_pre/cache" "$RUNS/engine_init" "$DATA/meta.json"
DEC=("$AG" train decoder --preset default --config "$ROOT/experiments/configs/gc_caption.yaml" --data "$DATA"
     --vae "$RUNS/vae" --limit 2048 --cache "$GC/cache")
[[ -d "$GC/pre/joint/final" ]] || "${DEC[@]}" --out "$GC/pre" --steps 300 --ema-decay 0 \
    --schedule constant --warmup-steps 30 --samples 0 --threads 1 $(resume "$GC/pre/joint")
if [[ ! -d "$GC/decoder/joint/final" ]]; then
    "${DEC[@]}" --out "$GC/decoder" --init "$GC/pre" --freeze-action-encoder --steps 1800 \
        --warmup-steps 20 --threads 1 $(resume "$GC/decoder/joint") > "$GC/decoder.log" 2>&1 &
    DEC_PID=$!
fi
[[ -d "$GC/engine/final" ]] || "$AG" train engine --preset default --data "$DATA" --decoder "$GC/pre" \
    --out "$GC/engine" --init "$RUNS/engine_init" --init-new-targets \
    --steps 600 --max-turns 3 --window 3 --eval-sessions 30 --threads 1 $(resume "$GC/engine") \
    > "$GC/engine.log" 2>&1
[[ -z "${DEC_PID:-}" ]] || wait "$DEC_PID"
"$AG" model pack --engine "$GC/engine" --decoder "$GC/decoder" --out "$GC/model"
# the decoder alone on the TRUE caption features of the 64 held-out shots the full decoder is graded on
[[ -f "$GC/eval_decoder.json" ]] || "$AG" eval-decoder --decoder "$GC/decoder" --cache "$GC/cache/val_64" \
    --data "$DATA" --n 64 --threads 2 --sheet "$GC/sheet_decoder.png" --out "$GC/eval_decoder.json"
echo "done: the GC model in $GC/model (eval: --ablation \"GC=$GC/model\")"
