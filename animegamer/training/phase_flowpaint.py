"""FlowPaint: train the decoder that draws a shot's frames as its first frame moved along a per-pixel flow
plus a painted change (decoder/flow_paint.py).

    animegamer train flowpaint --data WORLD_DIR --out DIR [--limit N] [--resume] [--max-seconds S]
    animegamer train flowpaint --render-sessions 3000 --render-seed 1000 --out DIR   # no dataset on disk

Each train shot gives its TRUE first frame (noise-augmented), its s_a (the shipped E_a, frozen:
``training/framenet_data.py``), its motion level, and its chained DIS flows from every frame back to frame 0
(computed here, ~35 ms a shot: the flow's target). ``--resume`` continues a stopped run; ``OUT/final/`` holds
``config.json`` and ``model.safetensors`` (EMA weights), loadable by ``FlowPaint.from_pretrained``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp

import cv2

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.runs import resolve_decoder
from animegamer.decoder.flow_paint import FlowPaint, FlowPaintNet, flow_paint_preset, flow_targets
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.framenet_data import (
    TEXT_TABLE,
    ActionParts,
    ShotTensors,
    add_shot_arguments,
    compute_s_a,
    train_shots,
)
from animegamer.training.loop import TrainConfig, train
from animegamer.training.phase_framenet import SHIPPED

PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(steps=4, batch_size=2, lr=1e-3, warmup_steps=1, log_every=2, save_every=2, ema_decay=0.0),
    "default": TrainConfig(steps=20000, batch_size=8, lr=3e-4, weight_decay=0.0, warmup_steps=100,
                           schedule="constant", ema_decay=0.995, log_every=20, save_every=200, grad_clip=1.0),
}


class FlowShots(torch.utils.data.Dataset):
    """One item per shot: uint8 frames, fp16 flows of frames 1..T-1 to frame 0, s_a, level."""

    def __init__(self, shots: ShotTensors, s_a: torch.Tensor, flows: torch.Tensor) -> None:
        if not len(s_a) == len(flows) == len(shots.texts):
            raise ValueError(f"{len(s_a)} s_a and {len(flows)} flows for {len(shots.texts)} shots")
        self.frames, self.flows, self.s_a, self.levels = shots.frames, flows, s_a, shots.levels

    def __len__(self) -> int:
        return len(self.levels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"frames": self.frames[i], "flows": self.flows[i], "s_a": self.s_a[i], "motion_level": self.levels[i]}


def collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


def _flows(job: tuple[np.ndarray, int]) -> np.ndarray:
    cv2.setNumThreads(1)
    return flow_targets(*job)


def shot_flows(frames: torch.Tensor, cell: int, workers: int = 1, progress: bool = True) -> torch.Tensor:
    """uint8 shots (N, T, H, W, 3) -> fp16 flows (N, T-1, H/cell, W/cell, 2) of frames 1..T-1 back to frame 0 in
    pixels (``flow_targets``; ~35 ms a shot, spread over ``workers`` processes)."""
    jobs = ((frames[i].numpy(), cell) for i in range(len(frames)))
    bar = dict(total=len(frames), desc="flows", disable=not progress)
    if workers <= 1:
        return torch.from_numpy(np.stack([_flows(j) for j in tqdm(jobs, **bar)]))
    with mp.get_context("spawn").Pool(workers) as pool:
        return torch.from_numpy(np.stack(list(tqdm(pool.imap(_flows, jobs, chunksize=16), **bar))))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS), data_required=False)
    add_shot_arguments(parser, SHIPPED)
    parser.add_argument("--net", default=None, help="JSON overrides of the network preset, e.g. '{\"blocks\": 1}'")


def run(args: argparse.Namespace) -> int:
    cfg = train_config_from_args(PRESETS[args.preset], args)
    decoder_dir = resolve_decoder(args.decoder)
    device = "cuda" if torch.cuda.is_available() and cfg.device != "cpu" else "cpu"
    parts = ActionParts(decoder_dir, device, decoder_dir / TEXT_TABLE)
    shots = train_shots(args, "train flowpaint", cfg.progress)
    s_a = compute_s_a(parts, shots, progress=cfg.progress)
    overrides = json.loads(args.net) if args.net else {}
    net_cfg = flow_paint_preset("tiny" if args.preset == "tiny" else "default", **overrides)
    # a flow drawn on the grid needs only each cell's mean flow as its target: 16 x less memory
    flows = shot_flows(shots.frames, net_cfg.stem if net_cfg.flow_on_grid else 1, args.render_workers, cfg.progress)
    if args.preset == "tiny":  # the tiny net on the world's real frames: only the shapes change
        net_cfg = dataclasses.replace(net_cfg, frames=shots.frames.shape[1], height=shots.frames.shape[2],
                                      width=shots.frames.shape[3], cond_dim=s_a.shape[-1])
    module = FlowPaint(FlowPaintNet(net_cfg))
    print(f"[flowpaint] {len(s_a)} train shots, {sum(p.numel() for p in module.parameters()) / 1e6:.2f} M parameters")
    result = train(module, FlowShots(shots, s_a, flows), collate, cfg, args.out, resume=args.resume)
    print(f"[flowpaint] step {result['step']}, loss {result['loss']}, final weights in {result['final_dir']}")
    return 0
