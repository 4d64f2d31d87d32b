"""What the sprite animator trains on: true shots with their s_a and motion level, held in memory.

s_a is the shipped representation: E_a (frozen, from a ShotDecoder directory) of the shot's motion
text (MiniLM token states) and of its first frame (the autoencoder latent in patches). Keeping
E_a frozen keeps the animator in the s_a space the engine was trained to predict, so the engine needs no
retraining. E_a's text stream depends on the motion text alone, and the world has a few hundred
motion texts, so its outputs are kept in a small table (``TEXT_TABLE``): a machine without MiniLM (a
lent GPU with nothing installed) still computes s_a from it.

Shots come from world datasets on disk (``world render``), or are rendered in memory by worker
processes (``render_shots``): a machine that only trains needs no dataset on disk.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from tqdm.auto import tqdm

from animegamer.core.checkpoint import load_json, save_safetensors_atomic
from animegamer.core.runs import DECODER_CONFIG, DECODER_WEIGHTS
from animegamer.models.autoencoder import ShotAutoencoder
from animegamer.models.text_encoder import TextEncoder
from animegamer.representation.action_encoder import ActionEncoder, ActionEncoderConfig, masked_text_states
from animegamer.representation.reference_encoder import LatentReference
from animegamer.world.dataset import WorldDataset
from animegamer.world.flow import MotionQuantizer, flow_magnitude
from animegamer.world.shot import render_session

TEXT_TABLE = "s_a_text.safetensors"
SHIPPED = Path(__file__).resolve().parent.parent / "weights" / "default"  # the shipped model (its E_a)


class ActionParts:
    """The frozen pieces of s_a: E_a, the first frame's latent reference and E_a(text) per motion text."""

    def __init__(self, decoder_dir: str | Path, device: str | torch.device = "cpu",
                 text_table: str | Path | None = None, save_new: bool = False) -> None:
        """``text_table``: E_a's text tokens per motion text, read where it exists; ``save_new``: texts it lacks
        (computed with MiniLM) are written back to it."""
        d = Path(decoder_dir)
        cfg = load_json(d / DECODER_CONFIG)["decoder"]
        self.config = ActionEncoderConfig(d_text_in=cfg["d_text_in"], d_visual_in=cfg["d_visual_in"],
                                          n_text=cfg["n_text"], n_visual=cfg["n_visual"],
                                          d_model=cfg["num_heads"] * cfg["head_dim"])
        self.encoder = ActionEncoder(self.config)
        with safe_open(d / DECODER_WEIGHTS, "pt") as f:
            sd = {k.removeprefix("action_encoder."): f.get_tensor(k).float() for k in f.keys()
                  if k.startswith("action_encoder.")}
        self.encoder.load_state_dict(sd)
        self.device = torch.device(device)
        self.encoder.to(self.device).eval().requires_grad_(False)
        autoencoder = ShotAutoencoder.from_pretrained(d / "autoencoder", device=self.device)
        # the patch side that made this decoder's f_v follows from E_a's visual width (ShotDecoder.latent_reference)
        patch = round((cfg["d_visual_in"] / autoencoder.cfg.latent_channels) ** 0.5)
        self.reference = LatentReference(autoencoder, patch)
        self.table: dict[str, torch.Tensor] = {}
        self.table_file = Path(text_table) if text_table and save_new else None
        if text_table is not None and Path(text_table).is_file():
            with safe_open(text_table, "pt") as f:
                self.table = {k: f.get_tensor(k).float() for k in f.keys()}

    @torch.no_grad()
    def text_part(self, texts: list[str]) -> torch.Tensor:
        """Motion texts -> E_a's text tokens (B, n_text, D), from the table or MiniLM (then kept in it)."""
        missing = sorted({t for t in texts if t not in self.table})
        if missing:
            states, mask = TextEncoder().token_states(missing, self.config.n_text)
            out = self.encoder.text(masked_text_states(states.float(), mask).to(self.device)).cpu()
            self.table.update({t: o for t, o in zip(missing, out)})
            if self.table_file is not None:
                save_safetensors_atomic({k: v.half().contiguous() for k, v in self.table.items()}, self.table_file)
        return torch.stack([self.table[t] for t in texts]).to(self.device)

    @torch.no_grad()
    def encode(self, first_frames: torch.Tensor, texts: list[str]) -> torch.Tensor:
        """first frames (B, 3, H, W) in [-1, 1] + motion texts -> s_a (B, n_text + n_visual, D)."""
        f_v = self.reference.patch_tokens(first_frames.to(self.device))  # (B, n_visual, d_v)
        return torch.cat([self.text_part(texts), self.encoder.visual(f_v)], dim=1)


@dataclass
class ShotTensors:
    frames: torch.Tensor  # (N, T, H, W, 3) uint8
    levels: torch.Tensor  # (N,) long, 1..5
    texts: list[str]
    rows: list[dict[str, Any]]


def add_shot_arguments(parser: argparse.ArgumentParser, shipped: Path) -> None:
    """Where a frame drawer's training shots and s_a come from: world datasets (--data, --more-data) or sessions
    rendered in memory, and the decoder whose E_a gives s_a."""
    parser.set_defaults(data=None)
    parser.add_argument("--more-data", nargs="*", default=[], help="more world datasets to train on")
    parser.add_argument("--render-sessions", type=int, default=0,
                        help="render this many world sessions in memory instead of reading --data")
    parser.add_argument("--render-seed", type=int, default=1000)
    parser.add_argument("--render-workers", type=int, default=2, help="processes that render shots (and compute flows)")
    parser.add_argument("--decoder", default=str(shipped),
                        help="the model whose E_a and autoencoder give s_a (its shot_decoder/; default: the shipped)")


def train_shots(args: argparse.Namespace, command: str, progress: bool) -> ShotTensors:
    """The shots the arguments of ``add_shot_arguments`` name."""
    if args.render_sessions:
        return render_shots(args.render_sessions, args.render_seed, workers=args.render_workers, progress=progress)
    if args.data:
        return shots_from_worlds([args.data, *args.more_data], "train", args.limit, progress)
    raise SystemExit(f"{command}: give --data WORLD_DIR or --render-sessions N")


def shots_from_worlds(roots: list[str], split: str = "train", limit: int | None = None,
                      progress: bool = True) -> ShotTensors:
    """The ``split`` shots of world datasets on disk (the first ``limit`` of them in all)."""
    frames, rows = [], []
    for root in roots:
        world = WorldDataset(root)
        for row in tqdm(world.split_rows(split), desc=f"loading {Path(root).name}", disable=not progress):
            if limit is not None and len(rows) >= limit:
                break
            frames.append(world.frames(row))
            rows.append(row)
    if not rows:
        raise ValueError(f"no {split} shots in {roots}")
    return ShotTensors(torch.from_numpy(np.stack(frames)), torch.tensor([r["motion_level"] for r in rows]),
                       [r["motion_text"] for r in rows], rows)


def _render(job: tuple[int, int, int, str | None]) -> list[tuple[np.ndarray, dict[str, Any]]]:
    seed, index, turns, split = job
    torch.set_num_threads(1)
    quant = MotionQuantizer.load()
    out = []
    for shot in render_session(seed, index, turns, split=split):
        row = dict(shot.row, motion_level=quant.level(flow_magnitude(shot.frames)))
        out.append((shot.frames, row))
    return out


def render_shots(sessions: int, seed: int, turns: int = 5, workers: int = 2, split: str = "train",
                 progress: bool = True) -> ShotTensors:
    """Render ``sessions`` world sessions in memory and keep their ``split`` shots (as `world render`
    would write them: the same seed gives the same shots)."""
    jobs = [(seed, i, turns, None) for i in range(sessions)]
    frames, rows = [], []
    with mp.get_context("spawn").Pool(workers) as pool:
        for shots in tqdm(pool.imap(_render, jobs, chunksize=4), total=sessions, desc="rendering",
                          disable=not progress):
            for f, r in shots:
                if r["split"] == split:
                    frames.append(f)
                    rows.append(r)
    return ShotTensors(torch.from_numpy(np.stack(frames)), torch.tensor([r["motion_level"] for r in rows]),
                       [r["motion_text"] for r in rows], rows)


@torch.no_grad()
def compute_s_a(parts: ActionParts, shots: ShotTensors, batch: int = 256, progress: bool = True) -> torch.Tensor:
    """s_a of every shot (N, n, D) fp16, on the CPU."""
    out = []
    for i in tqdm(range(0, len(shots.texts), batch), desc="s_a", disable=not progress):
        first = shots.frames[i:i + batch, 0].to(parts.device).permute(0, 3, 1, 2).float() / 127.5 - 1
        out.append(parts.encode(first, shots.texts[i:i + batch]).half().cpu())
    return torch.cat(out)
