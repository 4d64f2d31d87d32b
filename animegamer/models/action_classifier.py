"""The evaluation's action classifier: which verb (walk, run, hug, ...) a shot shows.

Two kinds of transformers classifier, trained from scratch over ``num_frames`` frames picked evenly
from the shot (a single frame cannot tell "walk" from "run" or "wave" from "talk"; a clip can):

- "stacked" (the default): a small ResNetForImageClassification whose input channels are the frames
  stacked (3 x num_frames), so its first convolution sees the pose and the change between frames at
  once. A CNN learns the world's small, posed characters from a few thousand shots; the VideoMAE
  below, a transformer from scratch on the same shots, named the verb of only about half of the
  true held-out shots (docs/results.md#how-a-shot-is-graded).
- "videomae": VideoMAEForVideoClassification over 16 x 16 tubelets (the classifier shipped before).

It is trained on TRUE world shots of the evaluator's data (``animegamer train action``, another seed
than the model's data), blurred and noised at random like the frame classifier's, and never on
generated ones, so it grades the decoder without sharing anything with it. Its held-out accuracy on
true shots (``final/metrics.json``) is the ceiling of the eval table's "action" column.

Shipped beside the evaluator's vision tower: ``animegamer/weights/evaluator/action_classifier/``
(config.json + model.safetensors in transformers' own format, fp16).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from transformers import (
    ResNetConfig,
    ResNetForImageClassification,
    VideoMAEConfig,
    VideoMAEForVideoClassification,
)

ACTION_DIR = "action_classifier"
# the transformers class of each config model_type a classifier may have
MODEL_CLASSES = {"resnet": ResNetForImageClassification, "videomae": VideoMAEForVideoClassification}

# Model sizes. "default" grades a shot in milliseconds on a CPU.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(kind="stacked", num_frames=4, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                 layer_type="basic"),
    "default": dict(kind="stacked", num_frames=8, embedding_size=32, hidden_sizes=[32, 64, 128, 128],
                    depths=[1, 1, 2, 1], layer_type="basic"),
    "videomae-tiny": dict(kind="videomae", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, patch_size=16, num_frames=4, tubelet_size=2),
    "videomae": dict(kind="videomae", hidden_size=192, num_hidden_layers=4, num_attention_heads=3,
                     intermediate_size=384, patch_size=16, num_frames=8, tubelet_size=2),
}


def classifier_config(preset: str, labels: list[str], height: int, width: int):
    """The transformers config of ``preset`` for ``labels`` on height x width frames."""

    if preset not in PRESETS:
        raise ValueError(f"action classifier preset must be one of {sorted(PRESETS)}, got {preset!r}")
    p = dict(PRESETS[preset])
    kind = p.pop("kind")
    labelling = dict(num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)})
    if kind == "stacked":
        # num_frames and image_size are not ResNet's own fields: the config keeps them for grading
        return ResNetConfig(num_channels=3 * p["num_frames"], image_size=[height, width], **labelling, **p)
    if height % p["patch_size"] or width % p["patch_size"]:
        raise ValueError(f"frames {height}x{width} are not a multiple of the patch size {p['patch_size']}")
    return VideoMAEConfig(image_size=[height, width], num_channels=3, use_mean_pooling=True, **labelling, **p)


def build_classifier(preset: str, labels: list[str], height: int, width: int) -> Any:
    """A freshly initialised classifier of ``preset`` (a transformers model)."""

    config = classifier_config(preset, labels, height, width)
    return MODEL_CLASSES[config.model_type](config)


def pick_frames(frames: torch.Tensor, num_frames: int) -> torch.Tensor:
    """(B, T, 3, H, W) -> (B, num_frames, 3, H, W), frames spread evenly over the clip (first and
    last kept), so clips of any length map to the classifier's input."""
    t = frames.shape[1]
    idx = torch.linspace(0, t - 1, num_frames).round().long()
    return frames[:, idx.to(frames.device)]


def classifier_input(model: Any, frames: torch.Tensor) -> torch.Tensor:
    """(B, num_frames, 3, H, W) -> what ``model`` takes: the same for a VideoMAE, the frames stacked
    on the channel axis (B, num_frames * 3, H, W) for a stacked ResNet."""
    return frames.flatten(1, 2) if model.config.model_type == "resnet" else frames


class ActionClassifier:
    """Frozen classifier for grading: ``predict(frames) -> verb``."""

    def __init__(self, model: Any, path: str | None = None, weights_hash: str | None = None) -> None:
        self.model = model.float().eval().requires_grad_(False)
        self.path = path
        self.weights_hash = weights_hash
        self.labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
        self.size = tuple(model.config.image_size)

    @classmethod
    def load(cls, path: str | Path) -> "ActionClassifier":
        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path}: no action classifier (config.json) here")
        model_type = json.loads((path / "config.json").read_text()).get("model_type")
        if model_type not in MODEL_CLASSES:
            raise ValueError(f"{path}: an action classifier is a {' or '.join(sorted(MODEL_CLASSES))} model, "
                             f"this config.json says {model_type!r}")
        model = MODEL_CLASSES[model_type].from_pretrained(path, local_files_only=True, dtype=torch.float32)
        digest = hashlib.blake2b((path / "model.safetensors").read_bytes(), digest_size=16).hexdigest()
        return cls(model, str(path.resolve()), digest)

    @staticmethod
    def find(root: str | Path) -> Path | None:
        """The action classifier dir in an evaluator dir, a `train action` run dir or its final/."""

        root = Path(root)
        for p in (root, root / ACTION_DIR, root / "final" / ACTION_DIR):
            if (p / "config.json").is_file() and (p / "model.safetensors").is_file():
                try:  # a run's final/ also holds a config.json + model.safetensors (the loop's export)
                    if json.loads((p / "config.json").read_text()).get("model_type") in MODEL_CLASSES:
                        return p
                except (OSError, ValueError):
                    continue
        return None

    @torch.no_grad()
    def logits(self, frames: np.ndarray) -> torch.Tensor:
        """uint8 (T, H, W, 3) -> (num_labels,) logits; frames are resized to the trained size."""

        h, w = self.size
        if frames.shape[1:3] != (h, w):
            frames = np.stack([cv2.resize(np.ascontiguousarray(f), (w, h), interpolation=cv2.INTER_AREA)
                               for f in frames])
        x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
        x = pick_frames(x[None], self.model.config.num_frames)
        return self.model(pixel_values=classifier_input(self.model, x)).logits[0]

    def predict(self, frames: np.ndarray) -> str:
        return self.labels[int(self.logits(frames).argmax())]
