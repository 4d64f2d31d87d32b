"""Where a trained part lives on disk: the one place that turns a path a user gives into a component.

A user may name a training run directory (``runs/decoder``), its ``final/`` checkpoint, a packed
model directory (``animegamer/weights/default``) or the component directory itself; every command
accepts all of them, and resolves them here.
"""
from __future__ import annotations

from pathlib import Path

# The file that marks each component directory.
DECODER_CONFIG = "shot_decoder.json"
DECODER_WEIGHTS = "shot_decoder.safetensors"
ENGINE_CONFIG = "engine.json"
ENGINE_WEIGHTS = "engine.safetensors"
AUTOENCODER_CONFIG = "autoencoder.json"


def resolve_component(path: str | Path, config_name: str, subdir: str) -> Path:
    """Accept a run dir, its final/, or the component dir itself; return the component dir."""
    p = Path(path)
    for cand in (p, p / subdir, p / "final" / subdir):
        if (cand / config_name).is_file():
            return cand
    raise FileNotFoundError(f"no {config_name} under {p} (tried {p}, {p / subdir}, {p / 'final' / subdir})")


def resolve_decoder(path: str | Path) -> Path:
    """The ShotDecoder directory of a `train decoder` run dir (OUT/joint/final/shot_decoder), a
    `train adapt` run dir, a model directory, its final/, or the shot_decoder/ dir itself."""
    p = Path(path)
    if (p / "joint").is_dir():
        p = p / "joint"
    return resolve_component(p, DECODER_CONFIG, "shot_decoder")


def resolve_autoencoder(path: str | Path) -> Path:
    """An autoencoder dir from a `train vae` run dir, its final/, a model dir or a shot_decoder/ dir."""
    p = Path(path)
    for cand in (p, p / "autoencoder", p / "final" / "autoencoder", p / "shot_decoder" / "autoencoder"):
        if (cand / AUTOENCODER_CONFIG).is_file():
            return cand
    raise FileNotFoundError(f"no autoencoder ({AUTOENCODER_CONFIG}) in {p}, its autoencoder/, final/autoencoder/ "
                            "or shot_decoder/autoencoder/")


def resolve_engine(path: str | Path) -> Path:
    """The engine directory (engine.json + weights) of a `train engine` run dir, its final/, a
    model directory's engine/, or the directory itself."""
    path = Path(path)
    for p in (path, path / "final", path / "engine"):
        if (p / ENGINE_CONFIG).is_file():
            return p
    raise FileNotFoundError(f"{path}: no engine ({ENGINE_CONFIG}) in it, its final/ or its engine/")
