"""Train the evaluation's video action classifier on TRUE world shots.

    animegamer train action --preset default --data DIR --out runs/action [--resume] [--steps N ...]

Not a phase of the model: it grades the model (the eval table's "action" column), so train it on
the evaluator's data (another world seed than the model's). Input: ``num_frames`` frames spread
over the shot, in [-1, 1]; label: the turn's verb (all verbs of the world's motion catalogue, so a
verb missing from the data is still a class). Training flips half the clips left-right (an action
does not change with the direction the character faces) and blurs and noises some of them, as the
frame classifier's training does: it must name the action of a soft generated shot as a person would.

Outputs in --out: log.jsonl, loss.png, checkpoints/, final/action_classifier/ (transformers
format, fp16) and final/metrics.json: accuracy on the held-out (val + test) true shots, the
column's ceiling, with per-verb accuracy and the majority-class rate.
"""
from __future__ import annotations

import argparse
import copy
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from animegamer.core.checkpoint import save_json_atomic
from animegamer.models.action_classifier import (
    ACTION_DIR,
    ActionClassifier,
    build_classifier,
    classifier_input,
    pick_frames,
)
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.fit_frame_classifier import gaussian_blur
from animegamer.training.loop import TrainConfig, train
from animegamer.world.dataset import ShotDataset, collate_shots, heldout_shots
from animegamer.world.motion_catalog import load_motions


@dataclass(frozen=True)
class ActionClassifierPreset:
    """The action classifier's fit at one size: the network (models/action_classifier.py) and schedule."""

    model: str
    train: TrainConfig
    blur_prob: float = 0.0  # share of clips blurred (Gaussian, sigma up to max_blur pixels, all frames alike)
    max_blur: float = 0.0
    noise: float = 0.0  # std of the Gaussian noise added to blurred clips, in [-1, 1] units


PRESETS: dict[str, ActionClassifierPreset] = {
    "tiny": ActionClassifierPreset("tiny", TrainConfig(
        steps=6, batch_size=4, lr=1e-3, warmup_steps=1, log_every=2, save_every=3, ema_decay=0.0), 0.5, 1.5, 0.05),
    "default": ActionClassifierPreset("default", TrainConfig(
        steps=3000, batch_size=16, lr=2e-3, weight_decay=0.05, warmup_steps=100, ema_decay=0.0,
        mixed_precision="bf16", log_every=20, save_every=250, grad_clip=1.0), 0.5, 2.0, 0.05),
    # the classifier shipped before the stacked ResNet
    "videomae": ActionClassifierPreset("videomae", TrainConfig(
        steps=1500, batch_size=16, lr=5e-4, weight_decay=0.05, warmup_steps=100, ema_decay=0.99,
        mixed_precision="bf16", log_every=20, save_every=250, grad_clip=1.0)),
}


class ActionModule(nn.Module):
    """forward(ShotBatch) -> (cross-entropy, logs) of the classifier (models/action_classifier.py)."""

    def __init__(self, model, preset: ActionClassifierPreset) -> None:
        super().__init__()
        self.model, self.preset = model, preset
        self.label2id = dict(model.config.label2id)

    def forward(self, batch):
        x = pick_frames(batch.frames, self.model.config.num_frames)  # (B, F, 3, H, W)
        if self.training:
            b, f = x.shape[:2]
            flip = torch.rand(b, device=x.device) < 0.5
            x = torch.where(flip[:, None, None, None, None], x.flip(-1), x)
            if self.preset.blur_prob > 0:
                blurred = torch.rand(b, device=x.device) < self.preset.blur_prob
                sigma = torch.rand(b, device=x.device) * self.preset.max_blur * blurred
                x = gaussian_blur(x.flatten(0, 1), sigma.repeat_interleave(f)).unflatten(0, (b, f))
                x = x + blurred[:, None, None, None, None] * self.preset.noise * torch.randn_like(x)
        y = torch.tensor([self.label2id[v] for v in batch.verb], dtype=torch.long, device=x.device)
        out = self.model(pixel_values=classifier_input(self.model, x), labels=y)
        acc = (out.logits.argmax(-1) == y).float().mean()
        return out.loss, {"acc": float(acc)}

    def trainable_parameters(self):
        return self.model.parameters()

    def export_pretrained(self, directory: Path) -> None:
        copy.deepcopy(self.model).half().save_pretrained(Path(directory) / ACTION_DIR)

    def config_dict(self) -> dict:
        return {"action_classifier": self.model.config.to_dict()}


def build_module(preset: str, labels: list[str], height: int, width: int) -> ActionModule:
    p = PRESETS[preset]
    return ActionModule(build_classifier(p.model, labels, height, width), p)


def world_verbs() -> list[str]:
    """Every verb of the world's motion catalogue, sorted (the classifier's classes)."""

    return sorted(load_motions()[0])


def evaluate(classifier, data: str, progress: bool = True) -> dict:
    """Accuracy of ``classifier`` on the held-out (val + test) TRUE shots of ``data``."""

    rows, hits = [], []
    for item in heldout_shots(data, "action", progress):
        rows.append(item["row"]["motion"])
        hits.append(classifier.predict(item["frames"].numpy()) == item["row"]["motion"])
    if not rows:
        raise ValueError(f"{data}: no val or test shots to evaluate the action classifier on")
    per_verb = {v: sum(h for r, h in zip(rows, hits) if r == v) / n for v, n in sorted(Counter(rows).items())}
    return {"heldout_shots": len(rows), "accuracy": sum(hits) / len(rows),
            "majority_rate": Counter(rows).most_common(1)[0][1] / len(rows), "per_verb": per_verb}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS))


def run(args: argparse.Namespace) -> int:
    cfg = train_config_from_args(PRESETS[args.preset].train, args)
    dataset = ShotDataset(args.data, "train", limit=args.limit)
    h, w = dataset.world.meta["height"], dataset.world.meta["width"]
    torch.manual_seed(cfg.seed)  # model init
    module = build_module(args.preset, world_verbs(), h, w)
    result = train(module, dataset, collate_shots, cfg, args.out, resume=args.resume)
    final = Path(result["final_dir"])
    metrics = {"train": {k: result[k] for k in ("step", "loss", "seconds")},
               "eval": evaluate(ActionClassifier.load(final / ACTION_DIR), args.data, progress=not args.no_progress)}
    save_json_atomic(metrics, final / "metrics.json")
    print(f"[action] done: {final / ACTION_DIR}; held-out accuracy on true shots "
          f"{metrics['eval']['accuracy']:.3f} (majority class {metrics['eval']['majority_rate']:.3f})")
    return 0
