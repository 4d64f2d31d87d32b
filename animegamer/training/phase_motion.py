"""The motion network: learn to draw a shot's flows from its first picture (decoder/flow_motion.py).

    animegamer train motion --init MODEL --data WORLD_DIR --out DIR [--limit N] [--resume]

1. A feature cache of the world's train shots as the picture decoder's own encoders see them (s_a's
   inputs: the motion text's token states and the first frame's latent in patches), with each shot's
   chained DIS flows from every frame back to the first, packed like the autoencoder's latents
   (``FlowCodec``), in place of its latents (``OUT/cache_train``, resumable; a validation cache of the
   val split beside it).
2. A ``DecoderNet`` of the picture decoder's shapes, initialised from it (so it starts knowing s_a and the
   level), learns to denoise the normalised flows with phase a's loss; E_a is the picture decoder's,
   frozen, so the engine's s_a fit both.
3. ``OUT/final/motion`` is the motion network (``model pack --flow-motion OUT``); ``OUT/final/metrics.json``
   has the held-out v-loss before and after.
"""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch
from torch import nn

from animegamer.core.checkpoint import save_json_atomic
from animegamer.core.runs import resolve_decoder
from animegamer.decoder.diffusion import Denoiser, collate_decoder
from animegamer.decoder.flow_motion import FLOW_CHANNELS, FlowCodec, FlowMotion
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.sampler import SamplerConfig
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.loop import TrainConfig, train
from animegamer.training.phase_a import eval_loss
from animegamer.training.shot_cache import CachedShots, decoder_cache

# A fine-tune from the picture decoder's weights: phase c's learning rate, more steps (a new target).
PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(steps=4, batch_size=2, lr=1e-3, warmup_steps=1, log_every=2, save_every=2, ema_decay=0.0),
    "default": TrainConfig(steps=1500, batch_size=8, lr=2e-4, weight_decay=0.0, warmup_steps=50, ema_decay=0.0,
                           mixed_precision="bf16", log_every=20, save_every=250, grad_clip=1.0),
    "paper": TrainConfig(steps=4000, batch_size=1, lr=1e-5, weight_decay=0.0, warmup_steps=100, ema_decay=0.0,
                         mixed_precision="bf16", log_every=20, save_every=250, grad_clip=1.0,
                         gradient_checkpointing=True),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS))
    parser.add_argument("--init", type=Path, required=True,
                        help="the picture decoder to start from and share E_a with: a model dir or its shot_decoder/")
    parser.add_argument("--val-shots", type=int, default=64, help="held-out shots for the before/after v-loss")
    parser.add_argument("--guidance", type=float, default=1.0, help="CFG scale the motion is drawn with")


def flow_cache(decoder: ShotDecoder, data: str | Path, split: str, limit: int | None, out: Path,
               progress: bool = True) -> CachedShots:
    """The shots of ``split`` with the decoder's own f_md / f_v and their packed flows as "latents"."""
    return decoder_cache(decoder, data, split, limit, out, FlowCodec.for_autoencoder(decoder.autoencoder),
                         "flows (decoder/flow_motion.py)", progress)


def flow_std(latents: torch.Tensor, channels: int = FLOW_CHANNELS, per_frame: int = 4) -> float:
    """Standard deviation of the flow channels of packed flows (S, F, r*C, h, w) with C = ``per_frame``."""
    s, f, rc, h, w = latents.shape
    x = latents.reshape(s, f, rc // per_frame, per_frame, h, w)[:, :, :, :channels]
    return float(x.double().std())


class MotionTrainModule(nn.Module):
    """The denoiser over flows; E_a frozen (the picture decoder's)."""

    def __init__(self, denoiser: Denoiser, sampler: SamplerConfig) -> None:
        super().__init__()
        self.denoiser, self.sampler = denoiser, sampler
        denoiser.net.requires_grad_(True)
        denoiser.net.action_encoder.requires_grad_(False)

    def forward(self, batch):
        return self.denoiser(batch)

    def trainable_parameters(self):
        return [p for p in self.denoiser.net.parameters() if p.requires_grad]

    def motion(self) -> FlowMotion:
        return FlowMotion(self.denoiser.net, self.denoiser.config, self.sampler)

    def export_pretrained(self, directory: Path) -> None:
        self.motion().save_pretrained(Path(directory) / "motion")

    def config_dict(self) -> dict:
        return {"phase": "motion", "decoder": self.denoiser.net.config.to_dict(),
                "diffusion": self.denoiser.config.to_dict()}


def run(args: argparse.Namespace) -> int:
    cfg = train_config_from_args(PRESETS[args.preset], args)
    out = Path(args.out)
    progress = not args.no_progress
    base = ShotDecoder.from_pretrained(resolve_decoder(args.init))
    if base.autoencoder.cfg.kind != "kl2d":
        raise SystemExit("train motion: the flows are packed like a per-frame (kl2d) autoencoder's latents; "
                         f"this decoder's autoencoder is {base.autoencoder.cfg.kind!r}")
    train_cache = flow_cache(base, args.data, "train", args.limit, out / "cache_train", progress)
    val_cache = flow_cache(base, args.data, "val", args.val_shots, out / "cache_val", progress)
    std = flow_std(train_cache.tensors["latents"], per_frame=base.autoencoder.cfg.latent_channels)
    diffusion = copy.deepcopy(base.diffusion)
    diffusion.latent_scale, diffusion.latent_shift, diffusion.frame_diff_loss = 1.0 / std, 0.0, 0.0
    denoiser = Denoiser(copy.deepcopy(base.net), diffusion)
    sampler = SamplerConfig(steps=base.sampler.steps, guidance=args.guidance, autocast=base.sampler.autocast)
    before = eval_loss(denoiser, val_cache, args.val_shots)
    print(f"[motion] {len(train_cache)} train shots, flow std {std:.3f} latent-grid px, "
          f"held-out v-loss before {before.get('val_loss', float('nan')):.4f}")
    result = train(MotionTrainModule(denoiser, sampler), train_cache, collate_decoder, cfg, out, resume=args.resume)
    final = Path(result["final_dir"])
    exported = FlowMotion.from_pretrained(final / "motion", base.net)
    after = eval_loss(Denoiser(exported.net, exported.diffusion), val_cache, args.val_shots)
    metrics = {"step": result["step"], "loss": result["loss"], "seconds": result["seconds"], "init": str(args.init),
               "train_shots": len(train_cache), "flow_std": std,
               "heldout_v_loss": {"before": before, "after": after}}
    save_json_atomic(metrics, final / "metrics.json")
    print(f"[motion] done: {final / 'motion'}\n{json.dumps(metrics, indent=1)}")
    return 0
