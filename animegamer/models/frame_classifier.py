"""The evaluator's frame classifier: who is on screen, where, and at what time of day.

A small ResNet (transformers' ``ResNetModel``, trained from scratch on TRUE world frames of the
evaluator's own data) with three heads over its pooled features: the characters (multi-label, one
sigmoid per cast member), the place and the time of day (softmax each). A shot is graded by its
frames together: the mean character probabilities over its frames name the ``k`` characters the
turn asked for (top-k), the mean place / time probabilities name the place and the time.

Its pooled features are also the space of the in-domain Frechet distance between decoded and true
shots (``evaluation/picture.py``): in the LPIPS / FID tradition, but measured by a network that
knows this world (no ImageNet weights exist offline).

Shipped beside the evaluator's vision tower: ``animegamer/weights/evaluator/frame_classifier/``
(frame_classifier.json + model.safetensors).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import ResNetConfig, ResNetModel

from animegamer.core.checkpoint import (
    atomic_dir,
    load_json,
    load_safetensors,
    save_json_atomic,
    save_safetensors_atomic,
)

FRAME_DIR = "frame_classifier"
CONFIG_NAME = "frame_classifier.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT = "animegamer-frame-classifier"
FORMAT_VERSION = 1

# Backbone sizes. "default" grades a frame in about a millisecond on a CPU; its last stage's width
# is the feature size of the Frechet distance.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic"),
    "default": dict(embedding_size=32, hidden_sizes=[32, 64, 128, 128], depths=[1, 1, 2, 1], layer_type="basic"),
}


def frames_input(frames: np.ndarray, size: tuple[int, int]) -> torch.Tensor:
    """uint8 (T, H, W, 3) of any size -> (T, 3, h, w) in [-1, 1] at ``size`` (h, w)."""
    h, w = size
    if frames.shape[1:3] != (h, w):
        frames = np.stack([cv2.resize(np.ascontiguousarray(f), (w, h), interpolation=cv2.INTER_AREA) for f in frames])
    return torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


class FrameClassifier(nn.Module):
    """frames (B, 3, H, W) in [-1, 1] -> logits of the characters, the place and the time of day."""

    def __init__(self, backbone: dict[str, Any], characters: list[str], places: list[str], times: list[str],
                 size: tuple[int, int]) -> None:
        super().__init__()
        self.backbone_config = dict(backbone)
        self.characters, self.places, self.times = list(characters), list(places), list(times)
        self.size = (int(size[0]), int(size[1]))  # (H, W) every frame is resized to
        self.backbone = ResNetModel(ResNetConfig(num_channels=3, **backbone))
        d = backbone["hidden_sizes"][-1]
        self.character_head = nn.Linear(d, len(characters))
        self.place_head = nn.Linear(d, len(places))
        self.time_head = nn.Linear(d, len(times))

    @property
    def feature_size(self) -> int:
        return self.backbone_config["hidden_sizes"][-1]

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) in [-1, 1] -> pooled features (B, D)."""
        return self.backbone(pixel_values=x).pooler_output.flatten(1)  # (B, D)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        grid = self.backbone(pixel_values=x).last_hidden_state  # (B, D, h, w)
        f = grid.mean((2, 3))  # (B, D): the whole frame, for the place, the time and the distance
        # A character covers a small part of the frame: whether it is there is the strongest response
        # anywhere on the grid, which a mean over the background would dilute.
        present = grid.amax((2, 3))  # (B, D)
        return {"features": f, "characters": self.character_head(present), "place": self.place_head(f),
                "time": self.time_head(f)}

    # -- grading uint8 shots ----------------------------------------------------------------------
    def to_input(self, frames: np.ndarray) -> torch.Tensor:
        """uint8 (T, H, W, 3) of any size -> (T, 3, h, w) in [-1, 1] at the trained size."""
        return frames_input(frames, self.size)

    @torch.no_grad()
    def read_shot(self, frames: np.ndarray, n_characters: int, batch: int = 32) -> dict[str, Any]:
        """What a shot shows: its ``n_characters`` most likely characters (from the mean probability over
        frames), its place and time of day, and the per-frame features (T, D)."""
        x = self.to_input(frames)
        outs = [self(x[i:i + batch]) for i in range(0, len(x), batch)]
        cat = {k: torch.cat([o[k] for o in outs]) for k in outs[0]}
        chars = torch.sigmoid(cat["characters"]).mean(0)  # (C,)
        top = chars.topk(max(1, min(n_characters, len(self.characters)))).indices.tolist()
        return {"characters": sorted(self.characters[i] for i in top),
                "place": self.places[int(F.softmax(cat["place"], -1).mean(0).argmax())],
                "time": self.times[int(F.softmax(cat["time"], -1).mean(0).argmax())],
                "features": cat["features"]}

    # -- persistence ------------------------------------------------------------------------------
    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = None) -> Path:
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "backbone": self.backbone_config,
                "characters": self.characters, "places": self.places, "times": self.times, "size": list(self.size)}
        sd = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).contiguous()
              for k, v in self.state_dict().items()}
        with atomic_dir(directory) as tmp:
            save_safetensors_atomic(sd, tmp / WEIGHTS_NAME)
            save_json_atomic(meta, tmp / CONFIG_NAME)
        return Path(directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> "FrameClassifier":
        directory = Path(directory)
        meta = load_json(directory / CONFIG_NAME)
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{directory}: expected {FORMAT} v{FORMAT_VERSION}, found "
                             f"{meta.get('format')} v{meta.get('format_version')}")
        model = cls(meta["backbone"], meta["characters"], meta["places"], meta["times"], tuple(meta["size"]))
        model.load_state_dict({k: v.float() for k, v in load_safetensors(directory / WEIGHTS_NAME).items()})
        return model.eval().requires_grad_(False)

    @staticmethod
    def find(root: str | Path) -> Path | None:
        """The frame classifier dir in an evaluator dir, a `train frames` run dir or its final/."""
        root = Path(root)
        for p in (root, root / FRAME_DIR, root / "final" / FRAME_DIR):
            if (p / CONFIG_NAME).is_file() and (p / WEIGHTS_NAME).is_file():
                return p
        return None

    @staticmethod
    def weights_hash(directory: str | Path) -> str:
        return hashlib.blake2b((Path(directory) / WEIGHTS_NAME).read_bytes(), digest_size=16).hexdigest()
