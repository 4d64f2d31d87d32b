"""Decode-speed benchmark and the steps x guidance quality/speed sweep of the shot decoder.

    bin/animegamer bench-decoder                      # default size, random weights
    bin/animegamer bench-decoder --decoder DIR --steps 4 6 8 --guidance 1 3 --autocast both
    bin/animegamer bench-decoder --train --batch-size 8 --n 3    # training step cost
    bin/animegamer bench-decoder --decoder DIR --data WORLD --clip CLIP \
        --steps 2 4 6 8 --guidance 1 2 3 5 --shots 32                              # quality sweep

Timing does not depend on the weights, so the random-init default config gives the numbers of
the trained one. ``sweep`` measures the quality side on real held-out shots (true s_a in, true
frames to compare against) so the shipped steps / guidance are a measured trade-off.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from animegamer.core.resources import peak_rss_mb
from animegamer.core.runs import resolve_component
from animegamer.decoder.diffusion import DecoderBatch, Denoiser
from animegamer.decoder.network import DecoderNet, decoder_preset
from animegamer.decoder.pipeline import ShotDecoder, frames_from_uint8, frames_to_uint8
from animegamer.decoder.speed import bench_decode
from animegamer.evaluation.metrics import psnr
from animegamer.models.autoencoder import ShotAutoencoder, autoencoder_config
from animegamer.models.text_encoder import TextEncoder, TextEncoderConfig
from animegamer.models.vision_tower import CONFIG_NAME, VisionTower
from animegamer.representation.action_encoder import ActionRepresentation
from animegamer.world.dataset import ShotDataset, collate_shots
from animegamer.world.flow import MotionQuantizer, flow_magnitude


def bench_train_step(
    preset: str = "default", batch_size: int = 8, bf16: bool = False, n: int = 3, warmup_stage: bool = False,
    n_visual: int = 54,
) -> dict[str, float]:
    """Median seconds of one decoder training step (forward + backward + AdamW) on random data."""

    cfg = decoder_preset(preset, n_visual=n_visual, adaln_zero_init=False)
    torch.manual_seed(0)
    den = Denoiser(DecoderNet(cfg)).train()
    den.net.set_warmup(warmup_stage)
    opt = torch.optim.AdamW([p for p in den.parameters() if p.requires_grad], lr=1e-4)
    batch = DecoderBatch(torch.randn(batch_size, *cfg.latent_shape),
                         torch.randn(batch_size, cfg.n_text, cfg.d_text_in),
                         torch.randn(batch_size, cfg.n_visual, cfg.d_visual_in),
                         torch.randint(1, 6, (batch_size,)))
    times = []
    for i in range(n + 1):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, _ = den(batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:  # the first step allocates
            times.append(time.perf_counter() - t0)
    return {"preset": preset, "batch_size": batch_size, "bf16": bf16, "warmup_stage": warmup_stage,
            "step_s": statistics.median(times), "threads": torch.get_num_threads(), "peak_rss_mb": peak_rss_mb()}


@torch.no_grad()
def sweep(
    decoder: ShotDecoder,
    s_a: torch.Tensor,
    motion_levels: torch.Tensor,
    true_frames: np.ndarray,
    steps_grid: list[int],
    guidance_grid: list[float],
    metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]] | None = None,
    seed: int = 0,
    autocast: bool | None = None,
) -> list[dict[str, float]]:
    """Quality vs speed on held-out shots: s_a (B, N, D), levels (B,), true uint8 (B, T, H, W, 3).

    Per (steps, guidance): seconds per shot, PSNR to the true shot, and whatever
    ``metrics(pred, true) -> {name: value}`` computes (e.g. CLIP-I, motion-level accuracy).
    """
    rows = []
    for steps in steps_grid:
        for guidance in guidance_grid:
            t0 = time.perf_counter()
            pred = decoder(s_a, motion_levels, torch.Generator().manual_seed(seed), steps=steps,
                           guidance=guidance, autocast=autocast)  # (B, T, H, W, 3)
            dt = (time.perf_counter() - t0) / len(s_a)
            row = {"steps": steps, "guidance": guidance, "s_per_shot": dt,
                   "psnr": float(np.mean([psnr(p, t) for p, t in zip(pred, true_frames)]))}
            if metrics is not None:
                row.update(metrics(pred, true_frames))
            rows.append(row)
    return rows


@torch.no_grad()
def sweep_on_data(
    decoder: ShotDecoder,
    data: str,
    clip: str,
    n: int,
    steps_grid: list[int],
    guidance_grid: list[float],
    split: str = "val",
    text_encoder: str | None = None,
    seed: int = 0,
) -> list[dict[str, float]]:
    """``sweep`` on n held-out world shots decoded from their TRUE s_a, scored by PSNR, in-domain
    CLIP-I (vision tower embeddings of decoded vs true frames) and motion-level accuracy (DIS flow
    of the decoded shot through the world's quantiser, compared with the true level)."""

    tower = VisionTower.from_pretrained(resolve_component(clip, CONFIG_NAME, "vision_tower")).float().eval()
    text = TextEncoder(TextEncoderConfig(path=text_encoder, n_text=decoder.config.n_text))
    rep = ActionRepresentation(tower, text, decoder.net.action_encoder)
    shots = ShotDataset(data, split, limit=n)
    batch = collate_shots([shots[i] for i in range(len(shots))])
    s_a = rep.encode_shots(batch.frames, batch.motion_text)  # (B, N, D)
    true = frames_to_uint8(batch.frames)  # (B, T, H, W, 3)
    quant = MotionQuantizer.load()

    e_true = tower.embed_images(frames_from_uint8(true.reshape(-1, *true.shape[2:])))  # (B*T, E)

    def metrics(pred: np.ndarray, _true: np.ndarray) -> dict[str, float]:
        e_pred = tower.embed_images(frames_from_uint8(pred.reshape(-1, *pred.shape[2:])))  # (B*T, E)
        levels = [quant.level(flow_magnitude(p)) for p in pred]
        return {"clip_i": float((e_pred * e_true).sum(-1).mean()),
                "motion_acc": float(np.mean([lv == int(t) for lv, t in zip(levels, batch.motion_level)]))}

    return sweep(decoder, s_a, batch.motion_level, true, steps_grid, guidance_grid, metrics, seed)


def _random_decoder(preset: str) -> ShotDecoder:
    ae = ShotAutoencoder(autoencoder_config(preset)).eval()
    net = DecoderNet(decoder_preset(preset, latent_channels=ae.latent_channels, adaln_zero_init=False))
    return ShotDecoder(net, ae)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `animegamer bench-decoder`."""
    p.add_argument("--decoder", help="a ShotDecoder directory; default: random weights at --preset size")
    p.add_argument("--preset", default="default")
    p.add_argument("--steps", type=int, nargs="+", default=[4, 6, 8])
    p.add_argument("--guidance", type=float, nargs="+", default=[3.0])
    p.add_argument("--autocast", choices=["off", "on", "both"], default="both")
    p.add_argument("--n", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", help="quality sweep: world dataset dir (needs --decoder and --clip)")
    p.add_argument("--clip", help="quality sweep: vision tower (run dir, final/ or vision_tower/)")
    p.add_argument("--shots", type=int, default=32, help="quality sweep: held-out shots")
    p.add_argument("--train", action="store_true", help="time training steps (fp32 vs bf16) instead")
    p.add_argument("--batch-size", type=int, default=8, help="--train: batch size")


def run(args: argparse.Namespace) -> int:
    """`animegamer bench-decoder`: decode timings, training-step cost or the quality sweep, as JSON lines."""
    torch.set_num_threads(args.threads)
    if args.train:
        for ac in {"off": [False], "on": [True], "both": [False, True]}[args.autocast]:
            for warm in (False, True):
                print(json.dumps(bench_train_step(args.preset, args.batch_size, ac, args.n, warm)), flush=True)
        return 0
    decoder = ShotDecoder.from_pretrained(args.decoder) if args.decoder else _random_decoder(args.preset)
    if args.data:
        if not (args.decoder and args.clip):
            raise ValueError("--data (quality sweep) needs --decoder and --clip")
        for row in sweep_on_data(decoder, args.data, args.clip, args.shots, args.steps, args.guidance):
            print(json.dumps(row), flush=True)
        return 0
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.autocast]
    for ac in modes:
        for steps in args.steps:
            for guidance in args.guidance:
                print(json.dumps(bench_decode(decoder, steps, guidance, args.n, autocast=ac)), flush=True)
    return 0
