"""Train the shot autoencoder (per-frame AutoencoderKL, time packed 17 -> 5 latent frames).

    animegamer train vae --preset default --data DIR --out runs/vae [--resume] [--steps N ...]

Each step takes `frames_per_shot` random frames of every shot in the batch (frames of one shot
are nearly identical, so more shots beat more frames per shot), encodes, samples the posterior,
decodes. Loss = L1 + kl_weight * KL (per latent element) + edge_weight * L1 of image gradients
(keeps outlines, eyes and small props crisp; there is no LPIPS backbone offline).

``--init AE --decoder-only`` fine-tunes the decoder of a trained autoencoder with its encoder, and so
its latent space and latent scale, frozen: the shot decoder trained on those latents keeps working
and only the pictures it is decoded to change. ``--adversarial W`` adds a patch discriminator's
hinge loss (weight W) and its feature matching (``--feature-matching``), the LDM / SD-VAE recipe for
sharp decodes, from step ``--adversarial-start`` on: L1 alone regresses to the blurred mean of what
a latent could be.

After training: the EMA weights are loaded, the latent scale/shift are MEASURED on training
shots (unit variance for the diffusion decoder), and the shipped autoencoder is written to
--out/final/autoencoder/ (fp16) with final/metrics.json: held-out PSNR, decode time of one
17x96x144 shot (fp32 and bf16), parameter count, file size.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from animegamer.core.checkpoint import save_json_atomic
from animegamer.core.runs import resolve_autoencoder
from animegamer.models.autoencoder import WEIGHTS_NAME, ShotAutoencoder, autoencoder_config
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.loop import TrainConfig, train
from animegamer.world.dataset import ShotDataset, collate_shots


@dataclass(frozen=True)
class AutoencoderPreset:
    """The autoencoder's fit at one size: the network (models/autoencoder.py), its loss and schedule."""

    autoencoder: str
    frames_per_shot: int  # frames of a shot per training sample
    kl_weight: float
    edge_weight: float  # weight of the image-gradient loss that keeps edges
    crop: tuple[int, int]  # training crop (h, w)
    train: TrainConfig


PRESETS: dict[str, AutoencoderPreset] = {
    "tiny": AutoencoderPreset("tiny", 2, 1e-6, 0.5, (16, 24), TrainConfig(
        steps=20, batch_size=4, lr=1e-3, warmup_steps=2, log_every=5, save_every=10, ema_decay=0.0)),
    # 8 shots x 4 frames, 48x72 crops; bf16 autocast is faster per step than fp32 here. No EMA: with
    # decay 0.999 a run of a few thousand steps keeps part of its initial weights.
    "default": AutoencoderPreset("default", 4, 1e-6, 0.5, (48, 72), TrainConfig(
        steps=1400, batch_size=8, lr=1e-3, weight_decay=0.0, warmup_steps=50, ema_decay=0.0,
        mixed_precision="bf16", log_every=20, save_every=100, grad_clip=1.0)),
}


def _image_grad(x):
    dx = x[..., :, 1:] - x[..., :, :-1]  # (N, 3, H, W-1)
    dy = x[..., 1:, :] - x[..., :-1, :]  # (N, 3, H-1, W)
    return dx, dy


class PatchDiscriminator(nn.Module):
    """PatchGAN (pix2pix / LDM): real-vs-decoded logits per image patch, and its feature maps."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        w = width

        def block(cin: int, cout: int, stride: int, norm: bool = True) -> nn.Sequential:
            layers = [nn.Conv2d(cin, cout, 4, stride, 1)] + ([nn.GroupNorm(8, cout)] if norm else [])
            return nn.Sequential(*layers, nn.LeakyReLU(0.2))

        self.blocks = nn.ModuleList([block(3, w, 2, norm=False), block(w, 2 * w, 2), block(2 * w, 4 * w, 1)])
        self.head = nn.Conv2d(4 * w, 1, 4, 1, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        feats = []
        for b in self.blocks:
            x = b(x)
            feats.append(x)
        return self.head(x), feats  # (N, 1, h, w) logits, per-block (N, C, h', w')


class VaeModule(nn.Module):
    """forward(ShotBatch) -> (L1 + KL + edge loss [+ adversarial], logs) on random frames of each shot."""

    def __init__(self, ae: ShotAutoencoder, frames_per_shot: int = 4, kl_weight: float = 1e-6,
                 edge_weight: float = 0.5, crop: tuple[int, int] | None = None, decoder_only: bool = False,
                 adversarial: float = 0.0, feature_matching: float = 0.0, adversarial_start: int = 0,
                 latent_noise: float = 0.0) -> None:
        super().__init__()
        self.latent_noise = latent_noise
        self.ae, self.frames_per_shot = ae, frames_per_shot
        self.kl_weight, self.edge_weight = kl_weight, edge_weight
        self.crop = tuple(crop) if crop else None
        self.decoder_only = decoder_only
        if decoder_only:  # the latent space stays the one the shot decoder was trained on
            ae.vae.encoder.requires_grad_(False)
            if ae.vae.quant_conv is not None:
                ae.vae.quant_conv.requires_grad_(False)
        self.adversarial, self.feature_matching, self.adversarial_start = adversarial, feature_matching, adversarial_start
        self.disc = PatchDiscriminator() if adversarial > 0 or feature_matching > 0 else None
        if self.disc is not None:  # when the discriminator joins: counted here, resumed with the run
            self.register_buffer("steps_seen", torch.zeros((), dtype=torch.long))

    def trainable_parameters(self):
        return [p for p in self.parameters() if p.requires_grad]

    def random_crops(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3, H, W) -> (N, 3, ch, cw), one random window per image. The autoencoder is fully
        convolutional (+ one mid-block attention), so training on crops costs 1/4 at 48x72 and
        still decodes whole frames; the cropped-vs-full PSNR gap is measured in metrics.json."""
        if self.crop is None:
            return x
        ch, cw = self.crop
        n, _, h, w = x.shape
        if (ch, cw) == (h, w):
            return x
        ys = torch.randint(0, h - ch + 1, (n,)).tolist()
        xs = torch.randint(0, w - cw + 1, (n,)).tolist()
        return torch.stack([x[i, :, y:y + ch, x0:x0 + cw] for i, (y, x0) in enumerate(zip(ys, xs))])

    def forward(self, batch):
        frames = batch.frames  # (B, T, 3, H, W)
        b, t = frames.shape[:2]
        k = min(self.frames_per_shot, t)
        idx = torch.rand(b, t).argsort(1)[:, :k]  # k distinct frames per shot
        x = frames[torch.arange(b)[:, None], idx.to(frames.device)].flatten(0, 1)  # (B*k, 3, H, W)
        x = self.random_crops(x).contiguous(memory_format=torch.channels_last)  # (B*k, 3, ch, cw)
        post = self.ae.vae.encode(x).latent_dist
        z = post.sample()  # (B*k, C, h, w) raw latents
        if self.training and self.latent_noise > 0:
            # the shot decoder's latents are near the encoder's, not on them: noise of up to latent_noise
            # (in the unit-variance space it samples in) teaches the decoder to draw a clean frame anyway
            std = torch.rand(z.shape[0], 1, 1, 1, device=z.device) * self.latent_noise / self.ae.latent_scale
            z = z + std * torch.randn_like(z)
        rec = self.ae.vae.decode(z).sample.float()  # (B*k, 3, H, W)
        l1 = (rec - x).abs().mean()
        mean, logvar = post.mean.float(), post.logvar.float()
        kl = 0.5 * (mean.pow(2) + logvar.exp() - 1.0 - logvar).mean()
        (rdx, rdy), (xdx, xdy) = _image_grad(rec), _image_grad(x)
        edge = ((rdx - xdx).abs().mean() + (rdy - xdy).abs().mean()) / 2
        loss = l1 + self.kl_weight * kl + self.edge_weight * edge
        logs = {"loss_l1": l1.item(), "loss_kl": kl.item(), "loss_edge": edge.item()}
        if self.disc is not None and self.training:
            self.steps_seen += 1
        if self.disc is not None and int(self.steps_seen) > self.adversarial_start:
            gan, gan_logs = self._adversarial(x, rec)
            loss = loss + gan
            logs.update(gan_logs)
        with torch.no_grad():
            mse = (rec.clamp(-1, 1) - x).pow(2).mean().clamp_min(1e-10)
            logs["psnr"] = (10 * torch.log10(4.0 / mse)).item()  # peak-to-peak range 2 in [-1, 1]
        return loss, logs

    def _adversarial(self, x: torch.Tensor, rec: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """The generator's terms (through a copy of the discriminator's weights that takes no gradient)
        plus the discriminator's hinge loss on detached decodes: one optimiser step trains both sides."""
        frozen = {k: v.detach() for k, v in self.disc.named_parameters()}
        fake_logits, fake_feats = functional_call(self.disc, frozen, (rec,))
        with torch.no_grad():
            _, real_feats = functional_call(self.disc, frozen, (x,))
        g_adv = -fake_logits.float().mean()
        fm = sum((f.float() - r.float()).abs().mean() for f, r in zip(fake_feats, real_feats)) / len(real_feats)
        d_real, _ = self.disc(x)
        d_fake, _ = self.disc(rec.detach())
        d_loss = F.relu(1.0 - d_real.float()).mean() + F.relu(1.0 + d_fake.float()).mean()
        loss = self.adversarial * g_adv + self.feature_matching * fm + d_loss
        return loss, {"loss_g_adv": g_adv.item(), "loss_fm": float(fm.detach()), "loss_d": d_loss.item()}

    def export_pretrained(self, directory: Path) -> None:
        # scale/shift are not calibrated yet here; run() rewrites this after calibration
        self.ae.save_pretrained(Path(directory) / "autoencoder")

    def config_dict(self) -> dict:
        return {"autoencoder": self.ae.cfg.to_dict(), "frames_per_shot": self.frames_per_shot,
                "kl_weight": self.kl_weight, "edge_weight": self.edge_weight, "crop": self.crop,
                "decoder_only": self.decoder_only, "adversarial": self.adversarial,
                "feature_matching": self.feature_matching, "latent_noise": self.latent_noise}


def build_module(preset: str, init: ShotAutoencoder | None = None, decoder_only: bool = False,
                 adversarial: float = 0.0, feature_matching: float = 0.0, adversarial_start: int = 0,
                 latent_noise: float = 0.0) -> VaeModule:
    p = PRESETS[preset]
    ae = init if init is not None else ShotAutoencoder(autoencoder_config(p.autoencoder))
    return VaeModule(ae, p.frames_per_shot, p.kl_weight, p.edge_weight, p.crop, decoder_only=decoder_only,
                     adversarial=adversarial, feature_matching=feature_matching, adversarial_start=adversarial_start,
                     latent_noise=latent_noise)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS))
    parser.add_argument("--calib-shots", type=int, default=64, help="training shots to measure the latent scale")
    parser.add_argument("--eval-shots", type=int, default=32, help="held-out shots for PSNR")
    parser.add_argument("--init", default=None, metavar="AE",
                        help="start from this autoencoder (a `train vae` run, its final/, a model's shot_decoder/ or "
                             "the autoencoder/ dir)")
    parser.add_argument("--decoder-only", action="store_true",
                        help="with --init: train the decoder only; the encoder, the latent space and its scale stay")
    parser.add_argument("--adversarial", type=float, default=0.0, metavar="W",
                        help="weight of a patch discriminator's hinge loss (0 = off)")
    parser.add_argument("--feature-matching", type=float, default=0.0, metavar="W",
                        help="weight of the discriminator feature-matching L1 (0 = off)")
    parser.add_argument("--adversarial-start", type=int, default=0, metavar="N",
                        help="training steps of reconstruction only before the discriminator's terms join")
    parser.add_argument("--latent-noise", type=float, default=0.0, metavar="S",
                        help="decode latents with Gaussian noise of a random std up to S (unit-variance latent units) "
                             "added, so the decoder learns to draw clean frames from imperfect latents (0 = off)")


def psnr(a, b) -> float:
    """PSNR in dB of two frame tensors in [-1, 1]."""

    mse = (a.float() - b.float()).pow(2).mean().clamp_min(1e-10)
    return float(10 * torch.log10(4.0 / mse))


def decode_seconds(ae, latents, repeats: int = 3, bf16: bool = False) -> dict[str, float]:
    """Median wall time and process CPU time of decoding `latents` (one shot). On a shared,
    busy machine wall time is inflated; CPU time / threads estimates the quiet-machine wall time."""

    walls, cpus = [], []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        ae.decode(latents)  # warm-up
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            ae.decode(latents)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
    mid = len(walls) // 2
    return {"wall_s": sorted(walls)[mid], "cpu_s": sorted(cpus)[mid], "threads": torch.get_num_threads()}


def calibrate_and_evaluate(ae, data: str, calib_shots: int, eval_shots: int, limit: int | None = None,
                           calibrate: bool = True) -> dict:
    """Measure latent scale/shift on train shots (in place; not for a decoder-only fine-tune, whose
    latent space is the one it started from), then held-out PSNR and decode time."""
    ae.eval()
    tr = ShotDataset(data, "train", limit=limit)
    if calibrate:
        zs = []
        with torch.no_grad():
            for i in range(0, min(calib_shots, len(tr)), 8):
                b = collate_shots([tr[j] for j in range(i, min(i + 8, calib_shots, len(tr)))])
                zs.append(ae.encode_unscaled(b.frames))
        scale, shift = ae.calibrate(torch.cat(zs))
    else:
        scale, shift = float(ae.latent_scale), float(ae.latent_shift)
    out: dict = {"latent_scale": scale, "latent_shift": shift}
    try:
        va = ShotDataset(data, "val")
    except ValueError:
        va = tr
    vals, vals_bf16 = [], []
    with torch.no_grad():
        for j in range(min(eval_shots, len(va))):
            b = collate_shots([va[j]])
            z = ae.encode(b.frames)
            vals.append(psnr(ae.decode(z), b.frames))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                vals_bf16.append(psnr(ae.decode(z), b.frames))
        lat = ae.encode(collate_shots([va[0]]).frames)
    out.update({
        "val_psnr_db": sum(vals) / max(1, len(vals)), "val_shots": len(vals),
        "val_psnr_db_bf16_decode": sum(vals_bf16) / max(1, len(vals_bf16)),
        "latent_shape": list(lat.shape), "decode_s_fp32": decode_seconds(ae, lat),
        "decode_s_bf16": decode_seconds(ae, lat, bf16=True),
        "params": sum(p.numel() for p in ae.parameters()),
    })
    return out


def run(args: argparse.Namespace) -> int:
    preset = PRESETS[args.preset]
    cfg = train_config_from_args(preset.train, args)
    dataset = ShotDataset(args.data, "train", limit=args.limit)
    if args.decoder_only and not args.init:
        raise ValueError("--decoder-only needs --init: the trained autoencoder whose encoder stays")
    init = ShotAutoencoder.from_pretrained(resolve_autoencoder(args.init)).float() if args.init else None
    torch.manual_seed(cfg.seed)
    module = build_module(args.preset, init, args.decoder_only, args.adversarial, args.feature_matching,
                          args.adversarial_start, args.latent_noise)
    result = train(module, dataset, collate_shots, cfg, args.out, resume=args.resume)
    final = Path(result["final_dir"])
    ae = ShotAutoencoder.from_pretrained(final / "autoencoder")  # EMA weights
    metrics = {"train": {k: result[k] for k in ("step", "loss", "seconds")}}
    metrics["eval"] = calibrate_and_evaluate(ae, args.data, args.calib_shots, args.eval_shots, args.limit,
                                             calibrate=not args.decoder_only)
    ae.save_pretrained(final / "autoencoder")  # now with the measured scale/shift
    metrics["eval"]["file_bytes"] = (final / "autoencoder" / WEIGHTS_NAME).stat().st_size
    save_json_atomic(metrics, final / "metrics.json")
    print(f"[vae] done: {final}/autoencoder  {metrics}")
    return 0
