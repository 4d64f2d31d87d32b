#!/usr/bin/env bash
# The CUDA checks of docs/SCALING.md on a machine with an NVIDIA GPU, from the repository root:
#   bash scripts/gpu_check.sh OUT_DIR
# Runs the GPU tests (tests/test_cuda.py: play on the GPU vs the CPU, a game moved between them, a phase
# trained there, the FSDP config on one GPU), the paper chain (whose phases train on the GPU and whose
# packed model plays there), the training loop's tests on the GPU, and `bench` of the shipped model on
# the GPU (fp32, bf16) and on this machine's CPU. Results: OUT_DIR/{pytest.log, cuda_report.json,
# bench_*.json, env.txt}. Uses whatever python3 is on PATH (set PYTHON to choose); the project need
# not be installed (it runs from the checkout).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_check.sh OUT_DIR}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 MPLBACKEND=Agg
export ANIMEGAMER_CUDA_REPORT="$OUT/cuda_report.json"

{ nvidia-smi -L; "$PY" -c "import sys, torch, transformers, diffusers, accelerate, peft; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(), '| transformers', transformers.__version__, 'diffusers', diffusers.__version__, 'accelerate', accelerate.__version__, 'peft', peft.__version__)"; nproc; } 2>&1 | tee "$OUT/env.txt"

"$PY" -m pytest -q -p no:cacheprovider -rA tests/test_cuda.py tests/test_paper_chain.py tests/test_training_loop.py \
    "tests/test_game.py::test_device_and_precision" 2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}

"$PY" - "$OUT" <<'EOF' 2>&1 | tee "$OUT/bench.log"
import json, sys
import torch
from animegamer.evaluation.bench.game import bench_game, format_table
out = sys.argv[1]
for name, kw in (("cuda_fp32", dict(device="cuda", precision="fp32")), ("cuda_bf16", dict(device="cuda", precision="bf16")),
                 ("cpu_2threads", dict(device="cpu", threads=2))):
    try:
        res = bench_game(turns=6, kv=(True,), **kw)
    except Exception as e:  # one row failing still leaves the others
        print(f"== {name}: FAILED {type(e).__name__}: {e}")
        continue
    with open(f"{out}/bench_{name}.json", "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"== {name}\n{format_table(res)}\n")
EOF
exit "$status"
