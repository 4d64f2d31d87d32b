"""The diffusion process around ``DecoderNet``: the noise schedule, the noise prior and the training loss.

``Denoiser`` owns the loss: v-prediction (as CogVideoX and the paper) under a DDPM noise schedule
from diffusers, with 5% condition dropout to the null branch E_a(zeros) so the same network serves
classifier-free guidance. ``forward(batch) -> (loss, logs)`` for the generic loop. Sampling, with
its own settings, is ``decoder.sampler``.

The schedule defaults follow CogVideoX (scaled-linear betas 0.00085..0.012, 1000 steps,
zero-terminal-SNR rescaling, "trailing" spacing) because zero terminal SNR + v-prediction +
trailing timesteps is what makes few-step sampling start from pure noise correctly.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import DDPMScheduler
from torch import nn

from animegamer.decoder.network import DecoderNet


def level_fractions(values: Any, name: str) -> list[float]:
    """Five shared-noise fractions in [0, 1), one per motion level 1..5 (a noise prior)."""
    out = [float(r) for r in values]
    if len(out) != 5 or not all(0.0 <= r < 1.0 for r in out):
        raise ValueError(f"{name} must be 5 values in [0, 1) (levels 1..5), got {out}")
    return out


@dataclass
class DiffusionConfig:
    num_train_timesteps: int = 1000
    beta_schedule: str = "scaled_linear"
    beta_start: float = 0.00085
    beta_end: float = 0.012
    rescale_betas_zero_snr: bool = True
    cond_dropout: float = 0.05  # paper: 5% of samples train the unconditional (null) branch
    # the autoencoder's latents are normalised to ~unit variance before diffusion: x = (z - shift) * scale
    latent_shift: float = 0.0
    latent_scale: float = 1.0
    # Mixed noise prior (PYoCo, Ge et al. 2023): this fraction of the noise variance is ONE draw shared
    # by every frame of a shot, the rest independent per frame, in training and sampling alike. The
    # motion level is measured by optical flow, which reads independent per-frame errors as motion.
    shared_noise: float = 0.0
    # Level-matched noise prior: the shared fraction per motion level 1..5 (5 values, replacing
    # shared_noise for samples whose level is known). Calm shots' frames are nearly the same picture
    # and wild shots' are not, so the prior's frame correlation follows the level the shot is drawn
    # for, in training and sampling alike. None = shared_noise for every level.
    shared_noise_by_level: list[float] | None = None
    # how many video frames each latent frame packs in its channels (the kl2d autoencoder's temporal
    # ratio; 1 for an autoencoder that compresses time itself): the shared draw is per video frame
    noise_frame_groups: int = 1
    # SNR shift of the schedule: alphas_cumprod -> a / (s + (1 - s) a), i.e. log SNR - log s at every step,
    # before the zero-terminal-SNR rescale. 1 = none; the published release's decoder (CogVideoX's): 3.
    snr_shift: float = 1.0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if not 0.0 <= self.cond_dropout < 1.0:
            raise ValueError(f"DiffusionConfig.cond_dropout must be in [0, 1), got {self.cond_dropout}")
        if self.latent_scale <= 0:
            raise ValueError(f"DiffusionConfig.latent_scale must be > 0, got {self.latent_scale}")
        if not 0.0 <= self.shared_noise < 1.0:
            raise ValueError(f"DiffusionConfig.shared_noise must be in [0, 1), got {self.shared_noise}")
        if self.shared_noise_by_level is not None:
            self.shared_noise_by_level = level_fractions(self.shared_noise_by_level, "DiffusionConfig.shared_noise_by_level")
        if self.snr_shift <= 0:
            raise ValueError(f"DiffusionConfig.snr_shift must be > 0, got {self.snr_shift}")
        if self.snr_shift != 1.0 and self.beta_schedule != "scaled_linear":
            raise ValueError(f"DiffusionConfig.snr_shift needs beta_schedule='scaled_linear', got {self.beta_schedule!r}")
        if self.noise_frame_groups < 1:
            raise ValueError(f"DiffusionConfig.noise_frame_groups must be >= 1, got {self.noise_frame_groups}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DiffusionConfig":
        # a retired training-only loss weight (docs/history.md, "a frame-difference loss"), 0 in every decoder
        # that ships: decoders saved with it load as before
        if not d.get("frame_diff_loss", 0.0):
            d = {k: v for k, v in d.items() if k != "frame_diff_loss"}
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"DiffusionConfig got unknown fields {sorted(unknown)}")
        return cls(**d)

    def schedule_kwargs(self) -> dict[str, Any]:
        kw = dict(
            num_train_timesteps=self.num_train_timesteps,
            beta_schedule=self.beta_schedule,
            beta_start=self.beta_start,
            beta_end=self.beta_end,
            rescale_betas_zero_snr=self.rescale_betas_zero_snr,
            prediction_type="v_prediction",
        )
        if self.snr_shift != 1.0:  # diffusers has no shift: hand it the shifted schedule as betas
            kw["trained_betas"] = shifted_betas(self.beta_start, self.beta_end, self.num_train_timesteps, self.snr_shift)
        return kw


def shifted_betas(beta_start: float, beta_end: float, n: int, shift: float) -> list[float]:
    """Scaled-linear betas whose alphas_cumprod a become a / (shift + (1 - shift) a) (the release's
    ZeroSNRDDPMDiscretization(shift_scale) before its zero-SNR rescale), as betas again."""
    betas = torch.linspace(beta_start ** 0.5, beta_end ** 0.5, n, dtype=torch.float64) ** 2
    a = torch.cumprod(1.0 - betas, 0)
    a = a / (shift + (1.0 - shift) * a)
    return (1.0 - a / torch.cat([a.new_ones(1), a[:-1]])).tolist()


@dataclass
class DecoderBatch:
    """One training batch of the decoder, read from the precomputed cache (frozen encoders ran once)."""

    latents: torch.Tensor  # (B, F, C', h, w) raw autoencoder latents of the shot
    f_md: torch.Tensor  # (B, n_text, d_t) motion-description token states, padding zeroed
    f_v: torch.Tensor  # (B, n_visual, d_v) vision-tower patch tokens of the FIRST frame
    motion_level: torch.Tensor  # (B,) int64 in 1..5
    # phase c: the engine's PREDICTED s_a (B, N, D), used instead of E_a(f_md, f_v) when given
    s_a: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> "DecoderBatch":
        return DecoderBatch(*(t.to(device) for t in (self.latents, self.f_md, self.f_v, self.motion_level)),
                            s_a=None if self.s_a is None else self.s_a.to(device))

    def __len__(self) -> int:
        return self.latents.shape[0]


def collate_decoder(items: list[dict[str, torch.Tensor]]) -> DecoderBatch:
    return DecoderBatch(
        latents=torch.stack([it["latents"] for it in items]),
        f_md=torch.stack([it["f_md"] for it in items]),
        f_v=torch.stack([it["f_v"] for it in items]),
        motion_level=torch.stack([torch.as_tensor(it["motion_level"]).long() for it in items]),
        s_a=torch.stack([it["s_a"] for it in items]) if "s_a" in items[0] else None,
    )


def draw_noise(shape: tuple[int, ...], config: DiffusionConfig, generator: torch.Generator | None = None,
               device: torch.device | str = "cpu", motion_level: torch.Tensor | None = None) -> torch.Tensor:
    """Unit-variance Gaussian noise for latents (B, F, C', h, w) under ``config.shared_noise``, or
    ``config.shared_noise_by_level`` when it is set and ``motion_level`` (B,) in 1..5 is given.

    Drawn on the CPU (from ``generator`` when given) so a seed gives the same shot on every device.
    With shared_noise = 0 this is exactly ``torch.randn(shape, generator=generator)``.
    """
    x = torch.randn(shape, generator=generator, dtype=torch.float32)  # (B, F, C', h, w)
    b, f, c, h, w = shape
    by_level = config.shared_noise_by_level is not None and motion_level is not None
    rho = config.shared_noise
    if by_level:
        levels = torch.as_tensor(motion_level).reshape(-1).expand(b).long().cpu()  # (B,)
        if bool(((levels < 1) | (levels > 5)).any()):
            raise ValueError(f"motion levels must be in 1..5, got {levels.tolist()}")
        rho_b = torch.tensor(config.shared_noise_by_level, dtype=torch.float32)[levels - 1]  # (B,)
    if by_level or rho > 0:
        g = config.noise_frame_groups
        if c % g:
            raise ValueError(f"latent channels {c} not divisible by noise_frame_groups {g}")
        shared = torch.randn((b, 1, c // g, h, w), generator=generator, dtype=torch.float32).repeat(1, f, g, 1, 1)
        if by_level:
            r = rho_b.reshape(b, 1, 1, 1, 1)
            x = (1 - r).sqrt() * x + r.sqrt() * shared  # (B, F, C', h, w)
        else:
            x = math.sqrt(1 - rho) * x + math.sqrt(rho) * shared  # (B, F, C', h, w)
    return x.to(device)


def v_target(x0: torch.Tensor, noise: torch.Tensor, alphas_cumprod_t: torch.Tensor) -> torch.Tensor:
    """v = sqrt(a) * eps - sqrt(1 - a) * x0 (Salimans & Ho 2022), a = alpha_bar_t per sample (B,)."""
    a = alphas_cumprod_t.reshape(-1, *([1] * (x0.dim() - 1))).to(x0.dtype)
    return a.sqrt() * noise - (1 - a).sqrt() * x0


class Denoiser(nn.Module):
    """Owns the loss: ``forward(batch) -> (loss, logs)`` with v-prediction and condition dropout."""

    def __init__(self, net: DecoderNet, config: DiffusionConfig | None = None) -> None:
        super().__init__()
        self.net = net
        self.config = config or DiffusionConfig()
        self.noise_schedule = DDPMScheduler(**self.config.schedule_kwargs())

    def normalize(self, latents: torch.Tensor) -> torch.Tensor:
        return (latents - self.config.latent_shift) * self.config.latent_scale

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.config.latent_scale + self.config.latent_shift

    def condition(self, batch: DecoderBatch, dropout: float) -> tuple[torch.Tensor, torch.Tensor]:
        """s_a for the batch, with a ``dropout`` fraction of rows replaced by the null branch."""
        ea = self.net.action_encoder
        s_a = batch.s_a if batch.s_a is not None else ea(batch.f_md, batch.f_v)  # (B, N, D)
        drop = torch.rand(len(batch), device=s_a.device) < dropout  # (B,)
        if dropout > 0 and bool(drop.any()):
            s_a = torch.where(drop[:, None, None], ea.null(len(batch)), s_a)  # (B, N, D)
        return s_a, drop

    def noise_for(self, batch: DecoderBatch, generator: torch.Generator | None = None) -> torch.Tensor:
        """The noise this decoder trains on for ``batch`` (B, F, C', h, w): its own prior, level-matched
        where the level conditions the net (not in the w/o-level ablation). Held-out losses use it too."""
        level = batch.motion_level if self.net.config.use_motion_level else None
        return draw_noise(tuple(batch.latents.shape), self.config, generator, device=batch.latents.device,
                          motion_level=level)

    def forward(
        self, batch: DecoderBatch, timesteps: torch.Tensor | None = None, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        x0 = self.normalize(batch.latents.float())  # (B, F, C', h, w)
        b = x0.shape[0]
        if timesteps is None:
            timesteps = torch.randint(0, self.config.num_train_timesteps, (b,), device=x0.device)  # (B,)
        if noise is None:
            noise = self.noise_for(batch)  # (B, F, C', h, w)
        acp = self.noise_schedule.alphas_cumprod.to(x0.device)[timesteps]  # (B,)
        a = acp.reshape(b, 1, 1, 1, 1)
        x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise  # (B, F, C', h, w)
        target = v_target(x0, noise, acp)  # (B, F, C', h, w)
        s_a, drop = self.condition(batch, self.config.cond_dropout if self.training else 0.0)
        pred = self.net(x_t, timesteps, s_a, batch.motion_level).float()  # (B, F, C', h, w)
        loss = F.mse_loss(pred, target.float())
        logs = {"loss": float(loss.detach()), "v_loss": float(loss.detach()), "cond_drop": float(drop.float().mean())}
        return loss, logs


