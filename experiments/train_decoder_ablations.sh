#!/usr/bin/env bash
#   bash experiments/train_decoder_ablations.sh [RUNS_DIR]
#       (after `bin/animegamer recipe default --out RUNS_DIR` and
#        `bin/animegamer recipe experiments/recipes/tokens_only_decoder.yaml --out RUNS_DIR`)
#
# The paper's decoder ablations, each trained exactly as the full decoder it is compared with
# (the shipped default decoder of the default recipe (`bin/animegamer recipe default`): runs/decoder_pre + runs/decoder),
# then graded on the TRUE s_a of the same held-out shots:
#
#   w/o motion level (w/o f_ms): configs/no_motion_level.yaml, same cached features as the full decoder
#   w/ random frame:             configs/random_frame.yaml, f_v from a random frame of each shot (own cache)
#
#   It needs RUNS_DIR/{vae,decoder_pre,decoder} and RUNS_DIR/data/big from those two recipes.
#
# Same recipe as the full decoder: 300 steps in which E_a learns with everything else,
# then 1800 joint steps with E_a frozen (the two ablations run side by side, one core
# each). Every step resumes if interrupted (rerun). About 50 minutes on the 2-core CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="$(mkdir -p "${1:-$ROOT/runs}" && cd "${1:-$ROOT/runs}" && pwd)"  # absolute: symlinks resolve from their own dir
DATA="$RUNS/data/big"
AG="$ROOT/bin/animegamer"
OUT="$RUNS/ablations"
mkdir -p "$OUT"
source "$ROOT/experiments/common.sh"
require "bin/animegamer recipe default --out RUNS, then experiments/recipes/tokens_only_decoder.yaml" "$RUNS/vae/final" "$RUNS/decoder_pre/cache" "$RUNS/decoder/joint/final" "$DATA/meta.json"
DEC=("$AG" train decoder --preset default --config "$ROOT/experiments/configs/tokens_only.yaml" --data "$DATA" --vae "$RUNS/vae" --limit 2048)

# one ablation: NAME (its override file experiments/configs/NAME.yaml), then its extra flags
ablation() {
    local name="$1"; shift
    local dir="$OUT/$name"
    set -- --config "$ROOT/experiments/configs/$name.yaml" "$@"
    [[ -d "$dir/pre/joint/final" ]] || "${DEC[@]}" "$@" --out "$dir/pre" --steps 300 --ema-decay 0 \
        --schedule constant --warmup-steps 30 --samples 0 --threads 1 $(resume "$dir/pre/joint")
    [[ -d "$dir/decoder/joint/final" ]] || "${DEC[@]}" "$@" --out "$dir/decoder" --init "$dir/pre" \
        --freeze-action-encoder --steps 1800 --warmup-steps 20 --threads 1 $(resume "$dir/decoder/joint")
}

# the no-motion-level decoder reads the full decoder's cache (the level is not a cached feature)
ablation no_motion_level --cache "$RUNS/decoder_pre/cache" > "$OUT/no_motion_level.log" 2>&1 &
P1=$!
ablation random_frame --cache "$OUT/random_frame/cache" \
    > "$OUT/random_frame.log" 2>&1 &
P2=$!
wait $P1 $P2

# the table: the full decoder and both ablations on the same 64 held-out shots (true s_a), with a
# contact sheet each (decoded left, truth right)
evaluate() {  # NAME DECODER_RUN VAL_CACHE
    [[ -f "$OUT/eval_$1.json" ]] || "$AG" eval-decoder --decoder "$2" --cache "$3" --data "$DATA" --n 64 --threads 2 \
        --sheet "$OUT/sheet_$1.png" --out "$OUT/eval_$1.json"
}
evaluate full "$RUNS/decoder" "$RUNS/decoder_pre/cache/val_64"
evaluate no_motion_level "$OUT/no_motion_level/decoder" "$RUNS/decoder_pre/cache/val_64"
evaluate random_frame "$OUT/random_frame/decoder" "$OUT/random_frame/cache/val_64"
echo "done: $OUT/eval_{full,no_motion_level,random_frame}.json"
