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


def _decoder_part(path: str | Path, config_name: str, subdir: str, what: str) -> Path:
    """A part stored inside a shot decoder (``subdir``/): from its run dir, the run's final/, a model dir, a
    shot_decoder/ dir or the part's own dir."""
    p = Path(path)
    for cand in (p, p / subdir, p / "final" / subdir, p / "shot_decoder" / subdir):
        if (cand / config_name).is_file():
            return cand
    raise FileNotFoundError(f"no {what} ({config_name}) in {p}, its {subdir}/, final/{subdir}/ or "
                            f"shot_decoder/{subdir}/")


def resolve_autoencoder(path: str | Path) -> Path:
    """An autoencoder dir from a `train vae` run dir, its final/, a model dir or a shot_decoder/ dir."""
    return _decoder_part(path, AUTOENCODER_CONFIG, "autoencoder", "autoencoder")


def resolve_engine(path: str | Path) -> Path:
    """The engine directory (engine.json + weights) of a `train engine` run dir, its final/, a
    model directory's engine/, or the directory itself."""
    path = Path(path)
    for p in (path, path / "final", path / "engine"):
        if (p / ENGINE_CONFIG).is_file():
            return p
    raise FileNotFoundError(f"{path}: no engine ({ENGINE_CONFIG}) in it, its final/ or its engine/")
