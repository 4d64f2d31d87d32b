#!/usr/bin/env bash
# Train FrameNet (the pixel decoder), or FlowPaint with PHASE=flowpaint, on one lent GPU in a single call, from a
# bare machine:
#   render world sessions in memory on the CPU cores -> s_a from the shipped E_a -> train -> fp16 shards.
# It needs, beside the repository (run from its root), what `.venv/bin/python scripts/gpu_payload.py [--init RUN]`
# builds in ignored folders (carry them: run's carry [".whl", ".gpu"]):
#   .whl/   diffusers 0.42.1 + importlib_metadata wheels (the autoencoder behind f_v is a diffusers class)
#   .gpu/decoder/   the shipped shot_decoder.json, its E_a weights alone, autoencoder/, s_a_text.safetensors
#   .gpu/init/      with --init: the run to continue (INIT=.gpu/init)
# The repository's own weights (92 MB) are over what travels (64 MiB): take them out of the index for the call
# (git rm -r --cached animegamer/weights, listed in .git/info/exclude) and put them back after (git reset).
# Usage: [PHASE=flowpaint SEED=1000 INIT=.gpu/init EMA=0.999 BATCH=64 EDM='{"prediction": "residual"}'] \
#   bash scripts/gpu_train_framenet.sh SECONDS SESSIONS   (EDM: a FrameNet run from scratch only; INIT: FrameNet only)
# (results under $OUT, or ./gpu_out: fp16 shards of at most 15 MB, config.json, log.jsonl)
set -euo pipefail
SECONDS_TRAIN="${1:-300}"
SESSIONS="${2:-3600}"
OUT="${OUT:-gpu_out}"
PY="${PY:-python3}"
DEVICE="${DEVICE:-cuda}"
BATCH="${BATCH:-64}"
SEED="${SEED:-1000}"
INIT="${INIT:-}"  # a run to continue from (its final/ or a folder with config.json + model.safetensors)
EDM="${EDM:-}"  # JSON overrides of EDMConfig for a run from scratch (a continued run keeps its own)
PHASE="${PHASE:-framenet}"  # framenet | flowpaint
mkdir -p "$OUT"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu.txt" || true
WORKERS=$(( $(nproc) - 1 ))
EXTRA=()
[ "$PHASE" = framenet ] && EXTRA=(${INIT:+--init "$INIT"} ${EDM:+--edm "$EDM"})
"$PY" -m animegamer train "$PHASE" --render-sessions "$SESSIONS" --render-seed "$SEED" --render-workers "$WORKERS" \
    ${EXTRA[@]+"${EXTRA[@]}"} \
    --decoder .gpu/decoder --out /tmp/framenet --device "$DEVICE" --mixed-precision bf16 --batch-size "$BATCH" --lr 4e-4 \
    --warmup-steps 300 --ema-decay "${EMA:-0.999}" --num-workers 10 --save-every 100000 --log-every 50 \
    --max-seconds "$SECONDS_TRAIN" --no-progress 2>&1 | tee "$OUT/train.txt"
"$PY" - "$OUT" <<'EOF'
# fp16 shards of at most ~15 MB (what comes back from a lent machine is limited per file)
import json, shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
out = Path(sys.argv[1]); final = Path("/tmp/framenet/final")
sd = {k: v.half().contiguous() for k, v in load_file(final / "model.safetensors").items()}
shard, size, n = {}, 0, 0
for k in sorted(sd):
    shard[k] = sd[k]; size += sd[k].numel() * 2
    if size > 14e6:
        save_file(shard, out / f"model-{n}.safetensors"); shard, size, n = {}, 0, n + 1
if shard:
    save_file(shard, out / f"model-{n}.safetensors")
shutil.copy(final / "config.json", out / "config.json")
if Path("/tmp/framenet/log.jsonl").is_file():
    shutil.copy("/tmp/framenet/log.jsonl", out / "log.jsonl")
print("shards:", sorted(p.name for p in out.glob("model-*.safetensors")))
EOF
