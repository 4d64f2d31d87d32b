#!/usr/bin/env bash
# Train the sprite animator (the shipped decoder's drawing network) on one lent GPU in a single call, from a bare
# machine: render world sessions in memory on the CPU cores -> s_a from the shipped E_a -> train -> fp16 shards.
# It needs, beside the repository (run from its root), what `.venv/bin/python scripts/gpu_payload.py [--init RUN]`
# builds in ignored folders (carry them: run's carry [".whl", ".gpu"]):
#   .whl/          diffusers + importlib_metadata wheels (the autoencoder behind f_v is a diffusers class)
#   .gpu/decoder/  the shipped shot_decoder.json, its E_a weights alone, autoencoder/, s_a_text.safetensors
#   .gpu/init/     the animator to continue (default: the shipped one)
# The repository's own weights (88 MB) are over what travels (64 MiB): take them out of the index for the call
# (git rm -r -q --cached animegamer/weights; echo /animegamer/weights/ >> .git/info/exclude) and put them back
# after (git reset -q; remove that line).
# Usage: [SEED=1000 BATCH=64 LR=3e-4 EMA=0.999 DEVICE=cuda NET={"mark_weight": 16}] bash scripts/gpu_train_sprites.sh SECONDS SESSIONS
# Results under $OUT (or ./gpu_out): fp16 shards of at most 15 MB, config.json, log.jsonl, train.txt. Back here,
# join them into a run that eval-drawn, pack --sprites and train sprites --init read:
#   .venv/bin/python scripts/gpu_payload.py --join FILES_AT --out runs/sprites_gpu
set -euo pipefail
SECONDS_TRAIN="${1:-300}"
SESSIONS="${2:-3600}"
OUT="${OUT:-gpu_out}"
PY="${PY:-python3}"
DEVICE="${DEVICE:-cuda}"
BATCH="${BATCH:-64}"
SEED="${SEED:-1000}"
RUN="${RUN:-/tmp/sprites}"
mkdir -p "$OUT"
if [ ! -d /tmp/site/diffusers ] && compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null | tee "$OUT/gpu.txt" || true
WORKERS=$(( $(nproc) > 2 ? $(nproc) - 1 : 1 ))
PRECISION=bf16; [ "$DEVICE" = cpu ] && PRECISION=no
"$PY" -m animegamer train sprites --render-sessions "$SESSIONS" --render-seed "$SEED" --render-workers "$WORKERS" \
    --init .gpu/init --decoder .gpu/decoder --out "$RUN" ${NET:+--net "$NET"} --device "$DEVICE" --mixed-precision "$PRECISION" \
    --batch-size "$BATCH" --lr "${LR:-3e-4}" --warmup-steps 100 --ema-decay "${EMA:-0.999}" --num-workers 4 \
    --save-every 100000 --log-every 50 --max-seconds "$SECONDS_TRAIN" --no-progress 2>&1 | tee "$OUT/train.txt"
"$PY" - "$OUT" "$RUN" <<'PYEOF'
# fp16 shards of at most ~15 MB (what comes back from a lent machine is limited per file)
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
out, run = Path(sys.argv[1]), Path(sys.argv[2])
sd = {k: v.half().contiguous() for k, v in load_file(run / "final" / "model.safetensors").items()}
shard, size, n = {}, 0, 0
for k in sorted(sd):
    shard[k] = sd[k]; size += sd[k].numel() * 2
    if size > 14e6:
        save_file(shard, out / f"model-{n}.safetensors"); shard, size, n = {}, 0, n + 1
if shard:
    save_file(shard, out / f"model-{n}.safetensors")
shutil.copy(run / "final" / "config.json", out / "config.json")
if (run / "log.jsonl").is_file():
    shutil.copy(run / "log.jsonl", out / "log.jsonl")
print("shards:", sorted(p.name for p in out.glob("model-*.safetensors")))
PYEOF
