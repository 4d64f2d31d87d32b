"""Who a character is, as a vector: a re-identification network for characters it never saw.

A small ResNet (transformers' ``ResNetModel``) whose strongest response of each channel anywhere in the
frame (a character covers a small part of it) is projected to a unit vector. Trained by
`animegamer train reid` on many drawn characters with a cosine softmax over their identities, so that
frames of one character lie close and others apart; the identities themselves are not kept, so it
compares characters it never saw: a clip against reference pictures (`evaluation/character_match.py`).
The evaluator's frame classifier, trained on the world's 10 characters, knows those 10 and not
characters in general (docs/results.md#your-own-films).

Shipped: ``animegamer/weights/evaluator/character_reid/`` (character_reid.json + model.safetensors).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import ResNetConfig, ResNetModel

from animegamer.core.checkpoint import atomic_dir, load_json, load_safetensors, save_json_atomic, \
    save_safetensors_atomic, state_dict_to_dtype
from animegamer.core.runs import resolve_component
from animegamer.models.frame_classifier import PRESETS as BACKBONES
from animegamer.models.frame_classifier import frames_input

REID_DIR = "character_reid"
CONFIG_NAME = "character_reid.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT = "animegamer-character-reid"
FORMAT_VERSION = 1

PRESETS = BACKBONES  # the frame classifier's ResNet sizes


class CharacterReID(nn.Module):
    """frames (B, 3, H, W) in [-1, 1] -> unit vectors (B, dim)."""

    def __init__(self, backbone: dict[str, Any], dim: int, size: tuple[int, int]) -> None:
        super().__init__()
        self.backbone_config, self.dim, self.size = dict(backbone), int(dim), tuple(size)
        self.backbone = ResNetModel(ResNetConfig(num_channels=3, **backbone))
        self.project = nn.Linear(backbone["hidden_sizes"][-1], dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = self.backbone(pixel_values=x).last_hidden_state  # (B, D, h, w)
        return F.normalize(self.project(grid.amax((2, 3))), dim=-1)

    @torch.no_grad()
    def embed(self, frames: np.ndarray, batch: int = 32) -> torch.Tensor:
        """uint8 frames (T, H, W, 3) of any size -> one unit vector (dim,): the normalised mean over the frames."""
        x = frames_input(frames, self.size)
        e = torch.cat([self(x[i:i + batch]) for i in range(0, len(x), batch)])
        return F.normalize(e.mean(0), dim=-1)

    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = None) -> Path:
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "backbone": self.backbone_config,
                "dim": self.dim, "size": list(self.size)}
        sd = {k: v.contiguous() for k, v in state_dict_to_dtype(self.state_dict(), dtype).items()}
        with atomic_dir(directory) as tmp:
            save_safetensors_atomic(sd, tmp / WEIGHTS_NAME)
            save_json_atomic(meta, tmp / CONFIG_NAME)
        return Path(directory)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> CharacterReID:
        """From its directory, an evaluator directory beside it, or a `train reid` run (its final/)."""
        directory = resolve_component(path, CONFIG_NAME, REID_DIR)
        meta = load_json(directory / CONFIG_NAME)
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{directory}: expected {FORMAT} v{FORMAT_VERSION}, found "
                             f"{meta.get('format')} v{meta.get('format_version')}")
        model = cls(meta["backbone"], meta["dim"], tuple(meta["size"]))
        model.load_state_dict({k: v.float() for k, v in load_safetensors(directory / WEIGHTS_NAME).items()})
        return model.eval().requires_grad_(False)
