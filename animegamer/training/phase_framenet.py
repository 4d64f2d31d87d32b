"""FrameNet: train the pixel decoder that draws a shot's frames after its first (decoder/frame_net.py).

    animegamer train framenet --data WORLD_DIR [WORLD_DIR ...] --out DIR [--limit N] [--resume]
    animegamer train framenet --render-sessions 3000 --render-seed 1000 --out DIR   # no dataset on disk

Each train shot gives its TRUE first frame (spatially aligned, noise-augmented), its s_a (the shipped
E_a, frozen: ``training/framenet_data.py``) and its motion level; the network learns to denoise frames
1..16 under EDM. ``--init RUN`` starts from another run's final weights (a GPU run continued here).
``--max-seconds`` stops a run in time for a lent machine or a session; ``--resume`` continues it.
``OUT/final/`` holds ``config.json`` (the net and EDM configs) and ``model.safetensors`` (EMA weights).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from animegamer.core.runs import resolve_decoder
from animegamer.decoder.frame_diffusion import EDMConfig, FrameDenoiser
from animegamer.decoder.frame_net import FrameNet, frame_net_preset
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.framenet_data import (
    TEXT_TABLE,
    ActionParts,
    FrameShots,
    add_shot_arguments,
    collate,
    compute_s_a,
    train_shots,
)
from animegamer.training.loop import TrainConfig, train

SHIPPED = Path(__file__).resolve().parent.parent / "weights" / "default"  # the shipped model (its E_a)

PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(steps=4, batch_size=2, lr=1e-3, warmup_steps=1, log_every=2, save_every=2, ema_decay=0.0),
    "default": TrainConfig(steps=20000, batch_size=16, lr=2e-4, weight_decay=0.0, warmup_steps=200,
                           schedule="constant", ema_decay=0.999, log_every=20, save_every=250, grad_clip=1.0),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS), data_required=False)
    add_shot_arguments(parser, SHIPPED)
    parser.add_argument("--text-table", default=None,
                        help=f"E_a's text tokens per motion text (default: DECODER/{TEXT_TABLE} if there, "
                             "else computed with MiniLM)")
    parser.add_argument("--init", type=Path, default=None, help="start from this run's final weights")
    parser.add_argument("--net", default=None, help="JSON overrides of the network preset, e.g. '{\"blocks\": 1}'")
    parser.add_argument("--edm", default=None,
                        help="JSON overrides of the diffusion config (EDMConfig), e.g. '{\"prediction\": \"residual\"}'")


def run(args: argparse.Namespace) -> int:
    cfg = train_config_from_args(PRESETS[args.preset], args)
    decoder_dir = resolve_decoder(args.decoder)
    device = "cuda" if torch.cuda.is_available() and cfg.device != "cpu" else "cpu"
    # a decoder's own table is read, never written (it may be the shipped model's folder); --text-table is both
    table = Path(args.text_table) if args.text_table else decoder_dir / TEXT_TABLE
    parts = ActionParts(decoder_dir, device, table, save_new=bool(args.text_table))
    shots = train_shots(args, "train framenet", cfg.progress)
    s_a = compute_s_a(parts, shots, progress=cfg.progress)
    print(f"[framenet] {len(s_a)} train shots, s_a {tuple(s_a.shape[1:])}")
    if args.init is not None:
        if args.net or args.edm:
            raise SystemExit("train framenet: --net and --edm configure a run from scratch; --init keeps its run's")
        init = FrameDenoiser.from_pretrained(args.init)
        module = FrameDenoiser(init.net, init.edm)
    else:
        overrides = json.loads(args.net) if args.net else {}
        net_cfg = frame_net_preset("tiny" if args.preset == "tiny" else "default", **overrides)
        if args.preset == "tiny":  # the tiny net on the world's real frames: only the shapes change
            net_cfg = dataclasses.replace(net_cfg, frames=shots.frames.shape[1], height=shots.frames.shape[2],
                                          width=shots.frames.shape[3], cond_dim=s_a.shape[-1])
        module = FrameDenoiser(FrameNet(net_cfg), EDMConfig(**(json.loads(args.edm) if args.edm else {})))
    n = sum(p.numel() for p in module.parameters())
    print(f"[framenet] {n / 1e6:.2f} M parameters")
    result = train(module, FrameShots(shots, s_a), collate, cfg, args.out, resume=args.resume)
    print(f"[framenet] step {result['step']}, loss {result['loss']}, final weights in {result['final_dir']}")
    return 0
