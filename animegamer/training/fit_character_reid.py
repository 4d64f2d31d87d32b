"""Train the character re-identification network (models/character_reid.py) on many drawn characters.

    bin/animegamer world characters --random 300 --seed 0 --out data/drawn_cast
    bin/animegamer world render --sessions 600 --turns 5 --seed 7000 --cast data/drawn_cast/characters.yaml --out data/drawn_world
    animegamer train reid --preset default --data data/drawn_world --out runs/reid

Not a phase of the model: it tells characters apart for reference matching (`evaluation/character_match.py`,
`animegamer annotate --references`). Each sample is one random frame of a shot that shows one character,
flipped left-right at random, labelled with that character; the loss is a cosine softmax over every
character of the data (scale ``SCALE``), so the network learns a vector per frame in which one
character's frames gather, whatever the place, pose or action. Train it on drawn characters (hundreds of
them): on the world's 10 it would learn those 10.

Outputs in --out: log.jsonl, loss.png, checkpoints/, final/character_reid/ (fp16).
"""
from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from animegamer.models.character_reid import PRESETS as BACKBONES
from animegamer.models.character_reid import REID_DIR, CharacterReID
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.loop import TrainConfig, train
from animegamer.world.batches import ShotBatch
from animegamer.world.dataset import ShotDataset, collate_shots

SCALE = 16.0  # the cosine softmax's temperature: logits = SCALE * cos(frame, identity)


@dataclass(frozen=True)
class ReIDPreset:
    backbone: str
    dim: int
    train: TrainConfig


PRESETS: dict[str, ReIDPreset] = {
    "tiny": ReIDPreset("tiny", 16, TrainConfig(steps=6, batch_size=4, lr=1e-3, warmup_steps=1, log_every=2,
                                               save_every=3, ema_decay=0.0)),
    "default": ReIDPreset("default", 128, TrainConfig(
        steps=3000, batch_size=48, lr=2e-3, weight_decay=0.05, warmup_steps=100, ema_decay=0.0, log_every=20,
        save_every=250, grad_clip=1.0)),
}


class ReIDModule(nn.Module):
    """forward(ShotBatch) -> (cosine-softmax cross-entropy over the characters, logs)."""

    def __init__(self, model: CharacterReID, characters: list[str]) -> None:
        super().__init__()
        self.model, self.characters = model, list(characters)
        self.index = {c: i for i, c in enumerate(self.characters)}
        self.identities = nn.Parameter(torch.randn(len(characters), model.dim) * 0.01)  # not exported

    def forward(self, batch: ShotBatch) -> tuple[torch.Tensor, dict[str, float]]:
        b, t = batch.frames.shape[:2]
        pick = torch.randint(0, t, (b,), device=batch.frames.device)
        x = batch.frames[torch.arange(b), pick]  # (B, 3, H, W): one random frame of each shot
        if x.shape[-2:] != self.model.size:
            x = F.interpolate(x, size=self.model.size, mode="area")
        if self.training:
            x = torch.where((torch.rand(b, device=x.device) < 0.5)[:, None, None, None], x.flip(-1), x)
        logits = SCALE * self.model(x) @ F.normalize(self.identities, dim=-1).T
        target = torch.tensor([self.index[names[0]] for names in batch.characters], device=x.device)
        loss = F.cross_entropy(logits.float(), target)
        return loss, {"loss": float(loss.detach()), "acc": float((logits.argmax(-1) == target).float().mean())}

    def trainable_parameters(self):
        return self.parameters()

    def export_pretrained(self, directory: Path) -> None:
        copy.deepcopy(self.model).save_pretrained(Path(directory) / REID_DIR, dtype=torch.float16)

    def config_dict(self) -> dict:
        return {"character_reid": {"backbone": self.model.backbone_config, "dim": self.model.dim,
                                   "size": list(self.model.size), "characters": len(self.characters)}}


def single_character(dataset: ShotDataset) -> ShotDataset:
    """Keep the shots that show one character (a label that says who every frame shows)."""
    dataset.rows = [r for r in dataset.rows if len(r["characters"]) == 1]
    if not dataset.rows:
        raise ValueError(f"{dataset.world.root}: no shots with one character to learn identities from")
    return dataset


def build_module(preset: str, characters: list[str], height: int, width: int) -> ReIDModule:
    p = PRESETS[preset]
    return ReIDModule(CharacterReID(BACKBONES[p.backbone], p.dim, (height, width)), characters)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS))


def run(args: argparse.Namespace) -> int:
    preset = PRESETS[args.preset]
    cfg = train_config_from_args(preset.train, args)
    dataset = single_character(ShotDataset(args.data, "train", limit=args.limit))
    characters = sorted({r["characters"][0] for r in dataset.rows})
    if len(characters) < 2:
        raise ValueError(f"{args.data}: one character only; re-identification learns from many "
                         "(render a world with `world render --cast` of drawn characters)")
    h, w = dataset.world.meta["height"], dataset.world.meta["width"]
    torch.manual_seed(cfg.seed)  # model init
    module = build_module(args.preset, characters, h, w)
    result = train(module, dataset, collate_shots, cfg, args.out, resume=args.resume)
    print(f"[reid] done: {Path(result['final_dir']) / REID_DIR}; {len(characters)} characters, "
          f"{len(dataset)} single-character shots, final loss {result['loss']:.3f}")
    return 0
