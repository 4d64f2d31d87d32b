"""Train the visual reference encoder (CLIP-style vision tower) against frozen MiniLM captions.

    animegamer train clip --preset default --data DIR --out runs/clip [--resume] [--steps N ...]

Images: the FIRST frame of each shot (what f_v encodes), or with probability
`random_frame_prob` another frame of the same shot (the tower also scores decoded frames for
CLIP-I / CLIP-T, so it should not only know first frames). Text: the shot caption through
frozen all-MiniLM-L6-v2 (mean pooled), then the tower's learnable `text_proj`. Loss: symmetric
InfoNCE with learnable temperature; equal captions in a batch count as positives.

Outputs in --out: log.jsonl, loss.png, checkpoints/, final/ (EMA weights; the shipped tower is
final/vision_tower/vision_tower.safetensors, fp16) and final/metrics.json (held-out retrieval,
character and place accuracy by nearest class centroid).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from animegamer.core.checkpoint import save_json_atomic
from animegamer.models.text_encoder import TEXT_ENCODER_PRESETS, TextEncoder
from animegamer.models.vision_tower import VisionTower, vision_tower_config
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.loop import TrainConfig, train
from animegamer.world.dataset import ShotDataset, collate_shots


@dataclass(frozen=True)
class VisionTowerPreset:
    """The vision tower's fit at one size: the tower, the frozen text encoder, the schedule."""

    tower: str  # models/vision_tower.py
    text: str  # models/text_encoder.py TEXT_ENCODER_PRESETS
    random_frame_prob: float  # share of samples that embed a random frame instead of the first
    train: TrainConfig


PRESETS: dict[str, VisionTowerPreset] = {
    "tiny": VisionTowerPreset("tiny", "tiny", 0.25, TrainConfig(
        steps=20, batch_size=8, lr=1e-3, warmup_steps=2, log_every=5, save_every=10, ema_decay=0.0)),
    "default": VisionTowerPreset("default", "default", 0.25, TrainConfig(
        steps=600, batch_size=32, lr=5e-4, weight_decay=0.05, warmup_steps=50, ema_decay=0.995,
        mixed_precision="bf16", log_every=20, save_every=250, grad_clip=1.0)),
}


class ClipModule(nn.Module):
    """forward(ShotBatch) -> (contrastive loss, logs). Trainable: the tower (incl. text_proj, temperature)."""

    def __init__(self, tower: VisionTower, text: TextEncoder, random_frame_prob: float = 0.25) -> None:
        super().__init__()
        self.tower, self.text, self.random_frame_prob = tower, text, random_frame_prob

    def pick_frames(self, frames: torch.Tensor) -> torch.Tensor:
        b, t = frames.shape[:2]  # frames (B, T, 3, H, W)
        idx = torch.zeros(b, dtype=torch.long)
        if self.training and self.random_frame_prob > 0:
            other = torch.rand(b) < self.random_frame_prob
            idx = torch.where(other, torch.randint(0, t, (b,)), idx)
        return frames[torch.arange(b), idx.to(frames.device)]  # (B, 3, H, W)

    def forward(self, batch):
        img = self.tower.embed_images(self.pick_frames(batch.frames))  # (B, proj)
        txt = self.tower.embed_text_features(self.text.embed_sentences(batch.caption))  # (B, proj)
        loss, logs = self.tower.contrastive_loss(img, txt, groups=batch.caption)
        return loss, logs

    def trainable_parameters(self):
        return self.tower.parameters()

    def export_pretrained(self, directory: Path) -> None:
        self.tower.save_pretrained(Path(directory) / "vision_tower")

    def config_dict(self) -> dict:
        return {"vision_tower": self.tower.cfg.to_dict(), "text_encoder": self.text.config_dict(),
                "random_frame_prob": self.random_frame_prob}


def build_module(preset: str) -> ClipModule:
    """The ClipModule of a preset (random-init tower, frozen MiniLM)."""
    p = PRESETS[preset]
    return ClipModule(VisionTower(vision_tower_config(p.tower)), TextEncoder(TEXT_ENCODER_PRESETS[p.text]),
                      p.random_frame_prob)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS))
    parser.add_argument("--eval-shots", type=int, default=256, help="held-out shots for final/metrics.json")


def _embed_first_frames(tower, dataset, collate, n: int, batch: int = 32):
    imgs, chars, places, caps = [], [], [], []
    idx = list(range(min(n, len(dataset))))
    with torch.no_grad():
        for i in range(0, len(idx), batch):
            b = collate([dataset[j] for j in idx[i:i + batch]])
            imgs.append(tower.embed_images(b.frames[:, 0]))
            chars += b.character
            places += b.place
            caps += b.caption
    return torch.cat(imgs), chars, places, caps


def centroid_accuracy(train_emb, train_labels: list[str], test_emb, test_labels: list[str]) -> float:
    """Accuracy of nearest class centroid (cosine) in the tower's embedding space."""

    classes = sorted(set(train_labels))
    cents = torch.stack([train_emb[[i for i, l in enumerate(train_labels) if l == c]].mean(0) for c in classes])
    cents = torch.nn.functional.normalize(cents, dim=-1)
    pred = (test_emb @ cents.t()).argmax(1).tolist()
    return sum(classes[p] == l for p, l in zip(pred, test_labels)) / max(1, len(test_labels))


def evaluate(tower, text, data: str, n: int) -> dict:
    """Held-out (val) image->caption retrieval, character and place accuracy (centroids from train)."""

    tower.eval()
    tr = ShotDataset(data, "train")
    try:
        va = ShotDataset(data, "val")
    except ValueError:
        va = tr
    tr_emb, tr_c, tr_p, _ = _embed_first_frames(tower, tr, collate_shots, n)
    va_emb, va_c, va_p, va_cap = _embed_first_frames(tower, va, collate_shots, n)
    uniq = list(dict.fromkeys(va_cap))
    txt = tower.embed_text_features(text.embed_sentences(uniq))
    with torch.no_grad():
        pred = (va_emb @ txt.t()).argmax(1).tolist()
    return {
        "val_shots": len(va_cap), "unique_captions": len(uniq),
        "retrieval_top1": sum(uniq[p] == c for p, c in zip(pred, va_cap)) / len(va_cap),
        "character_acc": centroid_accuracy(tr_emb, tr_c, va_emb, va_c),
        "place_acc": centroid_accuracy(tr_emb, tr_p, va_emb, va_p),
    }


def run(args: argparse.Namespace) -> int:
    preset = PRESETS[args.preset]
    cfg = train_config_from_args(preset.train, args)
    dataset = ShotDataset(args.data, "train", limit=args.limit)
    torch.manual_seed(cfg.seed)  # model init
    module = build_module(args.preset)
    result = train(module, dataset, collate_shots, cfg, args.out, resume=args.resume)
    final = Path(result["final_dir"])

    tower = VisionTower.from_pretrained(final / "vision_tower")
    metrics = {"train": {k: result[k] for k in ("step", "loss", "seconds")}}
    if args.eval_shots > 0:
        metrics["eval"] = evaluate(tower, module.text, args.data, args.eval_shots)
    save_json_atomic(metrics, final / "metrics.json")
    print(f"[clip] done: {final}/vision_tower  {metrics}")
    return 0
