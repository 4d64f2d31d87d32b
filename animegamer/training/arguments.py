"""The training options every phase shares, and the TrainConfig they build.

A phase's preset supplies the defaults; any option given on the command line overrides it.
"""
from __future__ import annotations

import argparse
import dataclasses

import torch

from animegamer.training.loop import TRAIN_DEVICES, TrainConfig

# command-line flag -> TrainConfig field (all default to None = "take the preset's value")
_TRAIN_FLAGS = {
    "--steps": ("steps", int), "--batch-size": ("batch_size", int), "--lr": ("lr", float),
    "--weight-decay": ("weight_decay", float), "--warmup-steps": ("warmup_steps", int),
    "--schedule": ("schedule", str), "--min-lr-ratio": ("min_lr_ratio", float), "--grad-clip": ("grad_clip", float),
    "--ema-decay": ("ema_decay", float), "--mixed-precision": ("mixed_precision", str),
    "--log-every": ("log_every", int), "--save-every": ("save_every", int),
    "--keep-checkpoints": ("keep_checkpoints", int), "--seed": ("seed", int), "--num-workers": ("num_workers", int),
    "--device": ("device", str), "--max-seconds": ("max_seconds", float),
}


def add_train_arguments(parser: argparse.ArgumentParser, presets: list[str], data_required: bool = True) -> None:
    """The options every phase shares: preset, data, out, resume, and TrainConfig overrides."""
    parser.add_argument("--preset", choices=presets, default="default" if "default" in presets else presets[0],
                        help="named sizes + training schedule (default: %(default)s)")
    parser.add_argument("--data", required=data_required, help="world dataset directory (animegamer world render)")
    parser.add_argument("--out", required=True, help="run directory: checkpoints, log.jsonl, loss.png, final/")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N training shots")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm bar (logs still go to log.jsonl)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice; 1 can be faster on a busy shared CPU)")
    g = parser.add_argument_group("training overrides (default: the preset's value)")
    for flag, (field, typ) in _TRAIN_FLAGS.items():
        kw: dict = {"type": typ, "default": None, "metavar": {int: "N", float: "X", str: "S"}[typ]}
        if field == "schedule":
            kw.update(choices=["cosine", "linear", "constant"], metavar=None)
        if field == "mixed_precision":
            kw.update(choices=["no", "bf16"], metavar=None)
        if field == "device":
            kw.update(choices=list(TRAIN_DEVICES), metavar=None,
                      help="auto (a GPU where there is one), cpu, or cuda (CUDA_VISIBLE_DEVICES picks which)")
        g.add_argument(flag, dest=f"train_{field}", **kw)
    g.add_argument("--gradient-checkpointing", dest="train_gradient_checkpointing", action="store_true", default=None,
                   help="recompute activations in the backward pass (less memory, about a third more compute)")


def train_config_from_args(base: TrainConfig, args: argparse.Namespace) -> TrainConfig:
    """A preset's TrainConfig, overridden by the flags that were given."""
    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    fields = {field: v for field in [f for f, _typ in _TRAIN_FLAGS.values()] + ["gradient_checkpointing"]
              if (v := getattr(args, f"train_{field}", None)) is not None}
    if getattr(args, "no_progress", False):
        fields["progress"] = False
    return dataclasses.replace(base, **fields)
