#!/usr/bin/env bash
# Experiment (2026-11-25, docs/results/engine_level_scene.md): teach the engine the motion level at
# every turn of a training sample, not only at its target (EngineConfig.history_level_weight):
#   - engine_hist: 600 steps from engine_extra (the engine shipped before it) on world 6000's training sessions, with the data,
#     seed and steps of runs/engine_extra2 (docs/results/engine_level_pool.md), so the two pair batch
#     for batch and differ only in the history levels;
#   - engine_hist2: 1200 steps more from engine_hist, the same sessions in another order (--seed 1;
#     the 600 steps above drew 1200 of the 25920 samples);
#   - each engine's level on the 900 val and 1500 test turns of three worlds beside engine_extra,
#     engine_extra2 and the world's references (experiments/engine_level_probe.py dump, teacher forced,
#     window 3; experiments/engine_level_scene.py).
#
#   bash experiments/engine_history_levels.sh [RUNS_DIR]
#
# Every step resumes or is skipped when its output exists (rerun). About 2 hours on the 2-core CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="$(mkdir -p "${1:-$ROOT/runs}" && cd "${1:-$ROOT/runs}" && pwd)"
AG="$ROOT/bin/animegamer"
PY="$ROOT/.venv/bin/python"
P="$RUNS/level_probe"
source "$ROOT/experiments/common.sh"
require "bin/animegamer recipe default --out RUNS" "$RUNS/engine_extra/final" "$RUNS/engine_more2/sessions/val" \
    "$RUNS/engine_more2/sessions/test" "$RUNS/engine_extra/sessions/val" "$RUNS/engine_extra/sessions/test"
require "the engine_extra2 command of docs/results/engine_level_pool.md" "$RUNS/engine_extra2/sessions/train" \
    "$RUNS/engine_extra2/sessions/test" "$RUNS/engine_extra2/final"
mkdir -p "$P"
TRAIN=("$AG" train engine --preset default --data "$RUNS/engine_extra2/sessions/train" --max-turns 3 --window 3
       --no-closed-loop --threads 2 --history-level-weight 1 --no-progress)
[[ -d "$RUNS/engine_hist/final" ]] || "${TRAIN[@]}" --out "$RUNS/engine_hist" --init "$RUNS/engine_extra" \
    --steps 600 $(resume "$RUNS/engine_hist")
[[ -d "$RUNS/engine_hist2/final" ]] || "${TRAIN[@]}" --out "$RUNS/engine_hist2" --init "$RUNS/engine_hist" \
    --steps 1200 --seed 1 $(resume "$RUNS/engine_hist2")

# The level, teacher forced, on every held-out turn of the three worlds (about 15 minutes per engine)
declare -A SESS=([val_big]=engine_more2/sessions/val [val_x1]=engine_extra/sessions/val
                 [test_big]=engine_more2/sessions/test [test_x1]=engine_extra/sessions/test
                 [test_x2]=engine_extra2/sessions/test)
declare -A ENG=([extra]=engine_extra [extra2]=engine_extra2 [hist]=engine_hist [hist2]=engine_hist2)
for name in extra extra2 hist hist2; do
    for s in val_big val_x1 test_big test_x1 test_x2; do
        [[ -f "$P/${name}_$s.pt" ]] || "$PY" "$ROOT/experiments/engine_level_probe.py" dump "$RUNS/${ENG[$name]}" \
            "$RUNS/${SESS[$s]}" "$P/${name}_$s.pt"
    done
done
"$PY" "$ROOT/experiments/engine_level_scene.py" "$RUNS" extra extra2 hist hist2
