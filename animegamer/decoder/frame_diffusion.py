"""The diffusion process around FrameNet: the noise levels, the training loss and a few-step sampler.

Karras et al. 2022 (EDM) noise levels and input scaling, as DIAMOND uses them for a playable pixel-space
world model, with one deliberate change of what the network predicts: the CHANGE from the first frame,
D(x; sigma) = first + change_scale * F, not EDM's mix c_skip * x + c_out * F. Why (measured,
docs/framenet.md): FrameNet packs 4 frames (192 values a grid cell) into a first level of 96
channels, so it cannot carry the noise through; with EDM's skip path the denoised frames kept the noise
the network could not see (at sigma 0.05 it removed a quarter of it) and every extra sampler step made the
shot noisier. Predicting the change needs no noise carried: what does not change is the first frame itself.
The option ``prediction="residual"`` puts EDM's skip path back, on the change r = x - first at the change's
scale (D = first + c_skip r + c_out F): it reads its input where the noise is small by construction, and drew
no better where the shot is made at the same length (docs/framenet.md, 2026-11-27).
The first frame is given clean or slightly noised (``aug``): in play it is the decoder's own last frame,
so training on noised ones keeps errors from compounding turn after turn (GameNGen's noise augmentation).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from animegamer.core.checkpoint import load_json, load_safetensors, run_dir, save_model_dir
from animegamer.decoder.frame_net import FrameNet, FrameNetConfig

CONFIG_NAME = "config.json"  # {"model_config": {"net", "edm"}, "sampler"?}: also what `train framenet` exports
WEIGHTS_NAME = "model.safetensors"


PREDICTIONS = ("change", "residual")


@dataclass
class EDMConfig:
    sigma_data: float = 0.5
    p_mean: float = -0.4  # training sigma ~ exp(N(p_mean, p_std^2)) (DIAMOND's values)
    p_std: float = 1.2
    sigma_min: float = 0.002
    sigma_max: float = 20.0
    rho: float = 7.0
    aug_max: float = 0.1  # first-frame noise augmentation in training: sigma ~ U(0, aug_max)
    cond_dropout: float = 0.0  # share of samples trained with s_a zeroed (unused by the shipped sampler)
    # what the network predicts: "change", D = first + change_scale * F; "residual", EDM on the change from the
    # first frame, D = first + c_skip r + c_out F(c_in r) with r = x - first and sigma_data the change's scale.
    # Runs trained with EDM's own skip mix on x (before 2026-11-26 evening) have no such field and are refused.
    prediction: str = "change"
    change_scale: float = 0.5  # "change": D = first + change_scale * F: F's target has about unit scale
    max_weight: float = 5.0  # "change": loss weight min(sigma_data^2 / sigma^2, max_weight) (min-SNR weighting)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __post_init__(self) -> None:
        if self.prediction not in PREDICTIONS:
            raise ValueError(f"EDMConfig.prediction must be one of {PREDICTIONS}, got {self.prediction!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EDMConfig":
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"EDMConfig: unknown fields {sorted(unknown)}")
        if "prediction" not in d:
            raise ValueError("this FrameNet was trained with EDM's skip mix (c_skip x + c_out F), which this version no "
                             "longer draws with (docs/framenet.md); retrain it, or start a run from it with "
                             "its output layer zeroed")
        return cls(**d)


@dataclass
class FrameSamplerConfig:
    steps: int = 3  # Euler steps (DIAMOND: 3)
    sigma_max: float = 5.0  # where sampling starts: above it the first frame already fixes the picture
    sigma_min: float = 0.2  # the last noise level denoised: the shot is the network's estimate there
    aug: float = 0.02  # the first frame's augmentation level asked of the network in play
    churn: float = 0.0  # stochastic re-noising per step (0 = deterministic given the start noise)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"FrameSamplerConfig.steps must be >= 1, got {self.steps}")
        if self.sigma_max <= 0 or self.aug < 0:
            raise ValueError(f"FrameSamplerConfig: sigma_max must be > 0 and aug >= 0, got {self.sigma_max}, "
                             f"{self.aug}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FrameSamplerConfig":
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"FrameSamplerConfig: unknown fields {sorted(unknown)}")
        return cls(**d)


def sampler_for(edm: EDMConfig) -> FrameSamplerConfig:
    """How a run draws when it was saved without sampler settings: "change" runs stop at sigma 0.2, where the
    network's estimate is the shot; "residual" runs go down to DIAMOND's 0.002 (the skip path keeps the input
    there, so the last steps only sharpen)."""
    return FrameSamplerConfig() if edm.prediction == "change" else FrameSamplerConfig(sigma_min=0.002)


class FrameDenoiser(nn.Module):
    """FrameNet drawing the change from the first frame, with its loss: D(x; sigma) = first + change_scale *
    F(c_in x, ...), or with ``prediction="residual"`` first + c_skip r + c_out F(c_in r, ...), r = x - first."""

    def __init__(self, net: FrameNet, edm: EDMConfig | None = None, sampler: FrameSamplerConfig | None = None) -> None:
        super().__init__()
        self.net = net
        self.edm = edm or EDMConfig()
        self.sampler = sampler or sampler_for(self.edm)  # how the game draws with it (not used in training)

    def config_dict(self) -> dict[str, Any]:
        """What rebuilds the network (the training loop saves it beside every export)."""
        return {"net": self.net.config.to_dict(), "edm": self.edm.to_dict()}

    @classmethod
    def from_config(cls, cfg: dict[str, Any], sampler: dict[str, Any] | None = None) -> "FrameDenoiser":
        return cls(FrameNet(FrameNetConfig.from_dict(cfg["net"])), EDMConfig.from_dict(cfg["edm"]),
                   FrameSamplerConfig.from_dict(sampler) if sampler else None)

    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = torch.float16) -> Path:
        return save_model_dir(directory, self.state_dict(),
                              {"model_config": self.config_dict(), "sampler": self.sampler.to_dict()}, dtype,
                              WEIGHTS_NAME, CONFIG_NAME)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu") -> "FrameDenoiser":
        """From a directory with config.json + model.safetensors: a `train framenet` run, its final/, or a
        packed decoder's framenet/."""
        d = run_dir(path, "FrameNet", CONFIG_NAME)
        meta = load_json(d / CONFIG_NAME)
        model = cls.from_config(meta["model_config"], meta.get("sampler"))
        model.load_state_dict({k: v.float() for k, v in load_safetensors(d / WEIGHTS_NAME).items()})
        return model.to(device).eval()

    @torch.no_grad()
    def draw(self, first: torch.Tensor, s_a: torch.Tensor, level: torch.Tensor,
             generator: torch.Generator | None = None) -> torch.Tensor:
        """first (B, 3, H, W) in [-1, 1], s_a (B, N, D), level (B,) -> frames 1..T-1 (B, T', 3, H, W), drawn with
        this model's own sampler settings (the frame drawers' common call: FlowPaint.draw)."""
        return sample_frames(self, first, s_a, level, self.sampler, generator)

    def denoise(self, noisy: torch.Tensor, sigma: torch.Tensor, first: torch.Tensor, s_a: torch.Tensor,
                level: torch.Tensor, aug: torch.Tensor, first_seen: torch.Tensor | None = None) -> torch.Tensor:
        """noisy (B, T', 3, H, W) at per-shot sigma (B,) -> the denoised frames (B, T', 3, H, W).
        ``first_seen``: the first frame as the network sees it (noise-augmented at level ``aug``); the
        change it draws is added to ``first`` itself, so what does not move keeps every pixel."""
        sd = self.edm.sigma_data
        s = sigma.float().reshape(-1, 1, 1, 1, 1)
        c_in = 1 / torch.sqrt(s ** 2 + sd ** 2)
        c_noise = torch.log(sigma.float()) / 4
        seen = first if first_seen is None else first_seen
        if self.edm.prediction == "residual":
            r = noisy - first[:, None]  # the noisy change (B, T', 3, H, W)
            out = self.net(r * c_in, seen, s_a, level, c_noise, aug).float()
            c_skip, c_out = sd ** 2 / (s ** 2 + sd ** 2), s * sd * c_in
            return first[:, None] + c_skip * r + c_out * out
        out = self.net(noisy * c_in, seen, s_a, level, c_noise, aug).float()  # (B, T', 3, H, W)
        return first[:, None] + self.edm.change_scale * out

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """batch: frames (B, T, 3, H, W) in [-1, 1] (or uint8 (B, T, H, W, 3): converted here, on the
        training device, so a GPU is sent a quarter of the bytes), s_a (B, N, D), motion_level (B,)."""
        frames, s_a, level = batch["frames"], batch["s_a"].float(), batch["motion_level"]
        if frames.dtype == torch.uint8:
            frames = frames.permute(0, 1, 4, 2, 3).float().div(127.5).sub(1.0)  # (B, T, 3, H, W)
        b, dev = frames.shape[0], frames.device
        e = self.edm
        sigma = torch.exp(torch.randn(b, device=dev) * e.p_std + e.p_mean)  # (B,)
        aug = torch.rand(b, device=dev) * e.aug_max  # (B,)
        first = frames[:, 0]  # (B, 3, H, W)
        seen = first + aug.reshape(-1, 1, 1, 1) * torch.randn_like(first)
        if e.cond_dropout > 0:
            keep = (torch.rand(b, device=dev) >= e.cond_dropout).float().reshape(-1, 1, 1)
            s_a = s_a * keep
        target = frames[:, 1:]  # (B, T', 3, H, W)
        noisy = target + sigma.reshape(-1, 1, 1, 1, 1) * torch.randn_like(target)
        denoised = self.denoise(noisy, sigma, first, s_a, level, aug, seen)
        per_shot = ((denoised - target) ** 2).mean(dim=(1, 2, 3, 4))  # (B,)
        if e.prediction == "residual":
            # EDM's weight 1 / c_out^2: the loss of F against its own unit-scale target at every sigma
            weight = (sigma ** 2 + e.sigma_data ** 2) / (sigma * e.sigma_data) ** 2  # (B,)
            loss = (weight * per_shot).mean()
        else:
            weight = (e.sigma_data ** 2 / sigma ** 2).clamp(max=e.max_weight)  # (B,) min-SNR weighting
            loss = (weight * per_shot).mean() / weight.mean().detach()  # kept at the MSE's scale
        return loss, {"loss": float(loss.detach()), "mse": float(per_shot.mean().detach())}


def karras_sigmas(steps: int, sigma_min: float, sigma_max: float, rho: float) -> torch.Tensor:
    """The EDM step schedule, ``steps`` sigmas from sigma_max down to sigma_min, then 0."""
    ramp = torch.linspace(0, 1, steps)
    inv = 1 / rho
    sig = (sigma_max ** inv + ramp * (sigma_min ** inv - sigma_max ** inv)) ** rho
    return torch.cat([sig, torch.zeros(1)])


@torch.no_grad()
def sample_frames(denoiser: FrameDenoiser, first: torch.Tensor, s_a: torch.Tensor, level: torch.Tensor,
                  sampler: FrameSamplerConfig, generator: torch.Generator | None = None) -> torch.Tensor:
    """first (B, 3, H, W) in [-1, 1], s_a (B, N, D), level (B,) -> frames 1..T-1 (B, T', 3, H, W) in [-1, 1].

    Euler steps on the EDM ODE from sigma_max down to sigma_min, where the network's estimate is the shot
    (the change it draws needs no last step at sigma ~0); the start noise is the only randomness (drawn on the CPU
    from ``generator``, so a seed gives the same shot on any device)."""
    cfg = denoiser.net.config
    b, dev = first.shape[0], first.device
    shape = (b, cfg.frames - 1, 3, *first.shape[-2:])
    sigmas = karras_sigmas(sampler.steps, sampler.sigma_min, sampler.sigma_max, denoiser.edm.rho)
    # x at sigma_max is a shot plus noise, and every shot starts near its first frame (training's noisy input)
    x = first[:, None] + torch.randn(shape, generator=generator).to(dev) * sigmas[0]
    aug = torch.full((b,), sampler.aug, device=dev)
    seen = first + sampler.aug * torch.randn(first.shape, generator=generator).to(dev) if sampler.aug > 0 else first
    for i in range(sampler.steps):
        s, s_next = float(sigmas[i]), float(sigmas[i + 1])
        if sampler.churn > 0 and s_next > 0:
            gamma = min(sampler.churn / sampler.steps, math.sqrt(2) - 1)
            s_hat = s * (1 + gamma)
            x = x + math.sqrt(s_hat ** 2 - s ** 2) * torch.randn(shape, generator=generator).to(dev)
            s = s_hat
        denoised = denoiser.denoise(x, torch.full((b,), s, device=dev), first, s_a, level, aug, seen)
        x = denoised if s_next == 0 else x + (x - denoised) / s * (s_next - s)  # Euler step
    return x.clamp(-1, 1)
