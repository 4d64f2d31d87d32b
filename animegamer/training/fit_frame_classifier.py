"""Train the evaluator's frame classifier on TRUE world frames: who is on screen, where, when.

    animegamer train frames --preset default --data DIR --out runs/frames [--resume] [--steps N ...]

Not a phase of the model: it grades the model (the eval tables' character / place / time columns and
the Frechet distance), so train it on the evaluator's data (another world seed than the model's).
Each training sample is a few random frames of a shot, labelled with the shot's characters
(multi-label), place and time of day. Frames are flipped left-right at random, and some are blurred
and noised: the classifier must name a character in a soft frame as a person would, while the
sharpness of the picture is measured apart (``evaluation/picture.py``).

Outputs in --out: log.jsonl, loss.png, checkpoints/, final/frame_classifier/ (fp16) and
final/metrics.json: on the held-out (val + test) true shots, how often it names the shot's
characters (top-k, k = the number of characters the turn has), its place and its time of day.
That is the ceiling of those columns; the evaluator is meant to reach 0.95 on each.

On an ingested film (``animegamer ingest --annotations``) the classes are the film's own characters,
places and times, as its annotations name them, and it learns from the clips whose annotations say who,
where and when: the grader of a model fine-tuned on that film (docs/results.md#your-own-films).
"""
from __future__ import annotations

import argparse
import copy
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from animegamer.core.checkpoint import save_json_atomic
from animegamer.models.frame_classifier import FRAME_DIR, FrameClassifier
from animegamer.models.frame_classifier import PRESETS as BACKBONES
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.loop import TrainConfig, train
from animegamer.world.batches import ShotBatch
from animegamer.world.cast import load_cast
from animegamer.world.dataset import ShotDataset, WorldDataset, collate_shots, heldout_shots
from animegamer.world.motion_catalog import load_motions
from animegamer.world.place_art import TIMES, load_places


@dataclass(frozen=True)
class FramesPreset:
    """The frame classifier's fit at one size: the backbone (models/frame_classifier.py), how many
    frames of each shot a step sees, the augmentation and the schedule."""

    backbone: str
    frames_per_shot: int
    blur_prob: float  # share of frames blurred (Gaussian, sigma up to max_blur pixels)
    max_blur: float
    noise: float  # std of the Gaussian noise added to blurred frames, in [-1, 1] units
    train: TrainConfig


PRESETS: dict[str, FramesPreset] = {
    "tiny": FramesPreset("tiny", 2, 0.5, 1.5, 0.05, TrainConfig(
        steps=6, batch_size=4, lr=1e-3, warmup_steps=1, log_every=2, save_every=3, ema_decay=0.0)),
    "default": FramesPreset("default", 4, 0.5, 2.0, 0.05, TrainConfig(
        steps=4800, batch_size=16, lr=2e-3, weight_decay=0.05, warmup_steps=100, ema_decay=0.0,
        mixed_precision="bf16", log_every=20, save_every=250, grad_clip=1.0)),
}


def world_labels() -> tuple[list[str], list[str], list[str]]:
    """The classifier's classes: every character of the cast, every place, every time of day."""
    return sorted(load_cast()), sorted(load_places()), list(TIMES)


def labelled(row: dict) -> bool:
    """A shot the classifier can learn from or be graded on: who, where and when are all known (an
    ingested film's clips are known where its annotations say so)."""
    return bool(row.get("characters")) and bool(row.get("place")) and bool(row.get("time"))


def data_labels(world: WorldDataset) -> tuple[list[str], list[str], list[str]]:
    """The classes for ``world``: the world's own for a rendered world; for an ingested film, the
    characters, places and times its annotations name (a film has its own), over every split so
    that the held-out clips' classes exist."""
    if "ingest" not in world.meta:
        return world_labels()
    rows = [r for r in world.rows if labelled(r)]
    if not rows:
        raise ValueError(f"{world.root}: no clip says who, where and when; complete the annotations "
                         "(ingest --annotations) before training a frame classifier on it")
    return (sorted({c for r in rows for c in r["characters"]}), sorted({r["place"] for r in rows}),
            sorted({r["time"] for r in rows}))


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Blur each image of (N, 3, H, W) by its own sigma (N,) in pixels (0 = unchanged)."""
    radius = max(1, math.ceil(3 * float(sigma.max())))
    t = torch.arange(-radius, radius + 1, dtype=x.dtype, device=x.device)  # (K,)
    k = torch.exp(-0.5 * (t[None] / sigma.clamp_min(1e-3)[:, None]) ** 2)  # (N, K)
    k = k / k.sum(-1, keepdim=True)
    n, c, h, w = x.shape
    y = x.reshape(1, n * c, h, w)
    kh = k.repeat_interleave(c, 0)[:, None, :, None]  # (N*C, 1, K, 1)
    kw = k.repeat_interleave(c, 0)[:, None, None, :]  # (N*C, 1, 1, K)
    y = F.conv2d(F.pad(y, (0, 0, radius, radius), mode="replicate"), kh, groups=n * c)
    y = F.conv2d(F.pad(y, (radius, radius, 0, 0), mode="replicate"), kw, groups=n * c)
    return torch.where((sigma > 0)[:, None, None, None], y.reshape(n, c, h, w), x)


class FramesModule(nn.Module):
    """forward(ShotBatch) -> (BCE over the characters + CE over place and time, logs)."""

    def __init__(self, model: FrameClassifier, preset: FramesPreset) -> None:
        super().__init__()
        self.model, self.preset = model, preset
        self.char_index = {c: i for i, c in enumerate(model.characters)}
        self.place_index = {p: i for i, p in enumerate(model.places)}
        self.time_index = {t: i for i, t in enumerate(model.times)}

    def _frames(self, batch: ShotBatch) -> torch.Tensor:
        """``frames_per_shot`` random frames of each shot, augmented in training: (B*F, 3, H, W)."""
        b, t = batch.frames.shape[:2]
        f = self.preset.frames_per_shot
        idx = torch.randint(0, t, (b, f), device=batch.frames.device)  # (B, F)
        x = torch.gather(batch.frames, 1, idx[..., None, None, None].expand(-1, -1, *batch.frames.shape[2:]))
        x = x.flatten(0, 1)  # (B*F, 3, H, W)
        if x.shape[-2:] != self.model.size:
            x = F.interpolate(x, size=self.model.size, mode="area")
        if self.training:
            n = x.shape[0]
            x = torch.where((torch.rand(n, device=x.device) < 0.5)[:, None, None, None], x.flip(-1), x)
            blurred = torch.rand(n, device=x.device) < self.preset.blur_prob
            sigma = torch.rand(n, device=x.device) * self.preset.max_blur * blurred
            x = gaussian_blur(x, sigma)
            x = x + blurred[:, None, None, None] * self.preset.noise * torch.randn_like(x)
        return x

    def forward(self, batch: ShotBatch) -> tuple[torch.Tensor, dict[str, float]]:
        f = self.preset.frames_per_shot
        x = self._frames(batch)
        out = self.model(x)
        chars = torch.zeros(len(batch), len(self.char_index), device=x.device)
        for i, names in enumerate(batch.characters):
            chars[i, [self.char_index[c] for c in names]] = 1.0
        place = torch.tensor([self.place_index[p] for p in batch.place], device=x.device)
        time = torch.tensor([self.time_index[t] for t in batch.time], device=x.device)
        chars, place, time = (y.repeat_interleave(f, 0) for y in (chars, place, time))  # per frame
        loss_c = F.binary_cross_entropy_with_logits(out["characters"].float(), chars)
        loss_p = F.cross_entropy(out["place"].float(), place)
        loss_t = F.cross_entropy(out["time"].float(), time)
        loss = loss_c + loss_p + loss_t
        k = chars.sum(-1).long()  # characters per frame's shot
        top = out["characters"].float().argsort(-1, descending=True)
        hit = torch.stack([chars[i, top[i, :k[i]]].sum() == k[i] for i in range(len(k))]).float()
        return loss, {"loss": float(loss.detach()), "character_loss": float(loss_c.detach()),
                      "character_acc": float(hit.mean()),
                      "place_acc": float((out["place"].argmax(-1) == place).float().mean()),
                      "time_acc": float((out["time"].argmax(-1) == time).float().mean())}

    def trainable_parameters(self):
        return self.model.parameters()

    def export_pretrained(self, directory: Path) -> None:
        copy.deepcopy(self.model).save_pretrained(Path(directory) / FRAME_DIR, dtype=torch.float16)

    def config_dict(self) -> dict:
        return {"frame_classifier": {"backbone": self.model.backbone_config, "size": list(self.model.size)}}


def build_module(preset: str, height: int, width: int,
                 labels: tuple[list[str], list[str], list[str]] | None = None) -> FramesModule:
    """``labels``: (characters, places, times), by default the world's."""
    p = PRESETS[preset]
    chars, places, times = labels or world_labels()
    return FramesModule(FrameClassifier(BACKBONES[p.backbone], chars, places, times, (height, width)), p)


def cast_kind(row: dict, pair_verbs: set[str]) -> str:
    """Who a shot shows: "one" character, a pair doing a "verb of two", or two "together" each doing a verb of one
    (``world render --groups``)."""
    if len(row["characters"]) == 1:
        return "one"
    return "verb of two" if row.get("motion") in pair_verbs else "together"


def evaluate(classifier: FrameClassifier, data: str, progress: bool = True) -> dict:
    """How often ``classifier`` names the characters, the place and the time of the held-out (val +
    test) TRUE shots of ``data``, reading each whole shot; the characters also by who is on screen
    (``character_by_cast``: one, a pair doing a verb of two, two each doing a verb of one)."""
    hits: dict[str, list[float]] = {"character": [], "place": [], "time": []}
    by_cast: dict[str, list[float]] = {}
    pair_verbs = {v for v, m in load_motions()[0].items() if m.pair}
    for item in heldout_shots(data, "frames", progress):
        row = item["row"]
        if not labelled(row):
            continue
        seen = classifier.read_shot(item["frames"].numpy(), len(row["characters"]))
        hit = float(seen["characters"] == sorted(row["characters"]))
        hits["character"].append(hit)
        hits["place"].append(float(seen["place"] == row["place"]))
        hits["time"].append(float(seen["time"] == row["time"]))
        by_cast.setdefault(cast_kind(row, pair_verbs), []).append(hit)
    if not hits["character"]:
        raise ValueError(f"{data}: no val or test shots to evaluate the frame classifier on")
    return {"heldout_shots": len(hits["character"]), **{k: sum(v) / len(v) for k, v in hits.items()},
            "character_by_cast": {k: {"shots": len(v), "named": sum(v) / len(v)} for k, v in sorted(by_cast.items())}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS))
    parser.add_argument("--init", default=None, metavar="DIR",
                        help="start from this frame classifier (a frame_classifier/ directory, e.g. the shipped "
                             "evaluator's) instead of a fresh one: fine-tune it on new shots (its classes must be "
                             "the data's)")


def run(args: argparse.Namespace) -> int:
    preset = PRESETS[args.preset]
    cfg = train_config_from_args(preset.train, args)
    dataset = ShotDataset(args.data, "train", limit=args.limit)
    labels = data_labels(dataset.world)
    dataset.rows = [r for r in dataset.rows if labelled(r)]
    if not dataset.rows:
        raise ValueError(f"{args.data}: no training clip says who, where and when (complete the annotations)")
    h, w = dataset.world.meta["height"], dataset.world.meta["width"]
    torch.manual_seed(cfg.seed)  # model init
    module = build_module(args.preset, h, w, labels)
    if args.init:
        start = FrameClassifier.from_pretrained(args.init)
        mine = (module.model.characters, module.model.places, module.model.times, module.model.size)
        theirs = (start.characters, start.places, start.times, start.size)
        if theirs != mine or start.backbone_config != module.model.backbone_config:
            raise ValueError(f"--init {args.init}: its classes, size or backbone are not this run's "
                             f"({theirs} against {mine})")
        module.model.load_state_dict({k: v.float() for k, v in start.state_dict().items()})
    result = train(module, dataset, collate_shots, cfg, args.out, resume=args.resume)
    final = Path(result["final_dir"])
    metrics = {"train": {k: result[k] for k in ("step", "loss", "seconds")},
               "eval": evaluate(FrameClassifier.from_pretrained(final / FRAME_DIR), args.data,
                                progress=not args.no_progress)}
    save_json_atomic(metrics, final / "metrics.json")
    e = metrics["eval"]
    print(f"[frames] done: {final / FRAME_DIR}; on {e['heldout_shots']} held-out true shots it names the "
          f"characters {e['character']:.3f}, the place {e['place']:.3f}, the time {e['time']:.3f}")
    return 0
