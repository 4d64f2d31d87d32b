#!/usr/bin/env bash
# The residual sampler's spatio-temporal U-Net (experiments/residual_net.py, docs/layers.md "A residual sampler over
# the drawing") trained, checked and sampled on one lent GPU in a single call. Three steps, from the repository root:
#
#   bash scripts/gpu_residual_sampler.sh prepare [E6000_WORLD W9100_WORLD N]    # here: what the call carries
#   bash scripts/gpu_residual_sampler.sh light                                  # here: the weights and docs stay
#   device run: command "bash scripts/gpu_residual_sampler.sh run 270", carry [".gpu", ".whl"], timeout_s 480
#   bash scripts/gpu_residual_sampler.sh back                                   # here: the index as it was
#
# prepare: scripts/gpu_payload.py (E_a with its text table and the shipped animator in .gpu/, the diffusers wheel in
#   .whl/) and the carries (residual_sampler.py carry): N shots spread over the training world (default all: world
#   6000's 1624 single-character shots, 29 MB; what travels must stay under 64 MiB, and light checks it), and the 155
#   held-out single-character shots of world 9100 (--n 200, the order of residual_sampler.py cache's res_9100.npz).
#   The worlds: `bin/animegamer world render --sessions 400 --turns 5 --seed 6000 --out runs/data/e6000` and
#   `... --sessions 60 --turns 5 --seed 9100 --out runs/data/w9100`.
# light: the repository's weights (88 MB) and docs/ are taken out of the index and ignored, so they do not travel;
#   back: puts them back (git reset; the two lines leave .git/info/exclude).
# run SECONDS (on the GPU machine): redraws the carries with the shipped animator, trains for SECONDS, then the
#   denoise check and one sample of each held-out shot (12 Heun steps). Under $OUT (8 files at most come back): train.txt
#   (the GPU, the training, the denoise check), samples-0..3.npz, spec.json and ema-0..1.safetensors (the EMA weights in
#   fp16 shards). Back here:
#     .venv/bin/python experiments/residual_sampler.py measure --cache RUNS/res_9100.npz \
#         --samples FILES_AT/samples-*.npz --world runs/data/w9100
#     .venv/bin/python experiments/residual_net.py denoise --cache CARRY_9100 --decoder .gpu/decoder \
#         --animator .gpu/init --run FILES_AT       # the weights that came back, read here
# Settings: NET (st), WIDTH (the net's default), BATCH (32), LR (2e-4), SAMPLE_STEPS (12), DEVICE (cuda), PY (python3).
# A rehearsal on this CPU: DEVICE=cpu PY=.venv/bin/python WIDTH=32,64,64 BATCH=2 SAMPLE_STEPS=2 ... run 20.
set -euo pipefail
MODE="${1:?usage: gpu_residual_sampler.sh prepare|light|back|run SECONDS}"
VENV_PY=.venv/bin/python
LIMIT=$((64 * 1024 * 1024))

travel_bytes() {  # what a device call takes: tracked and untracked-not-ignored files, plus the carried folders
  { git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null; \
    find .gpu .whl -type f -exec stat -c %s {} +; } | awk '{s += $1} END {print s}'
}

case "$MODE" in
prepare)
  TRAIN_WORLD="${2:-runs/data/e6000}"; HELD_WORLD="${3:-runs/data/w9100}"; N="${4:-100000}"
  "$VENV_PY" scripts/gpu_payload.py
  "$VENV_PY" experiments/residual_sampler.py carry --world "$TRAIN_WORLD" --n "$N" --out .gpu/res_train.npz.xz
  "$VENV_PY" experiments/residual_sampler.py carry --world "$HELD_WORLD" --n 200 --out .gpu/res_9100.npz.xz
  echo "prepared; run 'bash scripts/gpu_residual_sampler.sh light' before the device call" ;;
light)
  git rm -r -q --cached animegamer/weights docs
  printf '/animegamer/weights/\n/docs/\n' >> .git/info/exclude
  BYTES=$(travel_bytes)
  echo "travels: $((BYTES / 1000000)) MB of at most $((LIMIT / 1000000)) MB"
  if [ "$BYTES" -ge "$LIMIT" ]; then
    echo "over the limit: prepare again with a smaller N, then light" >&2
    bash "$0" back
    exit 1
  fi ;;
back)
  git reset -q
  sed -i '\#^/animegamer/weights/$#d; \#^/docs/$#d' .git/info/exclude
  git status --short | head ;;
run)
  SECONDS_TRAIN="${2:?run SECONDS}"
  OUT="${OUT:-gpu_out}"; PY="${PY:-python3}"; DEVICE="${DEVICE:-cuda}"; RUN=/tmp/residual
  mkdir -p "$OUT"
  if [ ! -d /tmp/site/diffusers ] && compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null | tee "$OUT/train.txt" || true
  NETARGS=(--decoder .gpu/decoder --animator .gpu/init --device "$DEVICE" --threads 8)
  "$PY" experiments/residual_net.py train --cache .gpu/res_train.npz.xz "${NETARGS[@]}" --net "${NET:-st}" \
      ${WIDTH:+--width "$WIDTH"} --batch "${BATCH:-32}" --lr "${LR:-2e-4}" --steps 1000000 \
      --max-seconds "$SECONDS_TRAIN" --out "$RUN" 2>&1 | tr '\r' '\n' | tee -a "$OUT/train.txt"
  "$PY" experiments/residual_net.py export --run "$RUN" --out "$OUT"
  "$PY" experiments/residual_net.py denoise --cache .gpu/res_9100.npz.xz "${NETARGS[@]}" --run "$RUN" --every 1 \
      2>&1 | tail -6 | tee -a "$OUT/train.txt"
  "$PY" experiments/residual_net.py sample --cache .gpu/res_9100.npz.xz "${NETARGS[@]}" --run "$RUN" --steps "${SAMPLE_STEPS:-12}" \
      --out "$OUT/samples" 2>&1 | tail -1 | tee -a "$OUT/train.txt"
  ls -la "$OUT" ;;
*)
  echo "unknown mode $MODE: prepare, light, back or run SECONDS" >&2; exit 2 ;;
esac
