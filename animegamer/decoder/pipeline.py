"""ShotDecoder: the inference pipeline s_a + motion level -> an animation shot (uint8 frames).

    decoder = ShotDecoder.from_pretrained("weights/decoder")
    frames = decoder(s_a, motion_level=3, generator=torch.Generator().manual_seed(0))  # (T, H, W, 3)
    save_mp4(frames, "shot.mp4", fps=8)

It bundles the trained network (E_a + CogVideoX transformer), the diffusion config (schedule,
sampler defaults) and the shot autoencoder. On disk (format version 1), one directory:
    shot_decoder.json              format, decoder config, diffusion config, autoencoder class
    shot_decoder.safetensors       DecoderNet weights (E_a included: its zero-input output is the
                                   CFG null branch)
    autoencoder/                   the autoencoder's own save_pretrained directory
written under a temporary name and renamed in one step.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from animegamer.core.checkpoint import (
    FORMAT_VERSION,
    atomic_dir,
    load_json,
    load_safetensors,
    save_json_atomic,
    save_safetensors_atomic,
    state_dict_to_dtype,
)
from animegamer.core.runs import DECODER_CONFIG, DECODER_WEIGHTS
from animegamer.decoder.diffusion import DiffusionConfig, sample
from animegamer.decoder.network import DecoderConfig, DecoderNet

FORMAT = "animegamer-shot-decoder"
CONFIG_NAME = DECODER_CONFIG
WEIGHTS_NAME = DECODER_WEIGHTS
AUTOENCODER_DIR = "autoencoder"


def frames_to_uint8(frames: torch.Tensor) -> np.ndarray:
    """(..., T, 3, H, W) in [-1, 1] -> uint8 (..., T, H, W, 3)."""
    x = ((frames.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.movedim(-3, -1).cpu().numpy()


def frames_from_uint8(frames: np.ndarray) -> torch.Tensor:
    """uint8 (..., H, W, 3) -> float (..., 3, H, W) in [-1, 1]: the inverse of ``frames_to_uint8``."""
    return torch.from_numpy(np.ascontiguousarray(frames)).movedim(-1, -3).float().div(127.5).sub(1.0)


class ShotDecoder(nn.Module):
    def __init__(self, net: DecoderNet, autoencoder: nn.Module, diffusion: DiffusionConfig | None = None) -> None:
        super().__init__()
        self.net = net
        self.autoencoder = autoencoder
        self.diffusion = diffusion or DiffusionConfig()
        self.eval()

    @property
    def config(self) -> DecoderConfig:
        return self.net.config

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def _motion(self, motion_level: int | torch.Tensor | None, b: int) -> torch.Tensor | None:
        if not self.config.use_motion_level:
            return None
        if motion_level is None:
            raise ValueError("motion_level (1..5) is required by this decoder")
        m = torch.as_tensor(motion_level, dtype=torch.long).reshape(-1)
        if m.numel() == 1:
            m = m.expand(b)
        if m.numel() != b:
            raise ValueError(f"motion_level must be one value or one per shot ({b}), got {m.numel()}")
        if bool(((m < 1) | (m > 5)).any()):
            raise ValueError(f"motion_level must be in 1..5, got {m.tolist()}")
        return m.to(self.device)

    @torch.no_grad()
    def sample_latents(
        self,
        s_a: torch.Tensor,
        motion_level: int | torch.Tensor | None,
        generator: torch.Generator | None = None,
        steps: int | None = None,
        guidance: float | None = None,
        dynamic_cfg: bool | None = None,
        autocast: bool | None = None,
    ) -> torch.Tensor:
        """s_a (B, N, D) -> latents (B, F, C', h, w) in the autoencoder's (scaled) space."""
        s_a = s_a.to(self.device, torch.float32)
        autocast = self.diffusion.autocast if autocast is None else autocast
        return sample(
            self.net, s_a, self._motion(motion_level, s_a.shape[0]), generator, self.diffusion,
            steps=steps, guidance=guidance, dynamic_cfg=dynamic_cfg, autocast=autocast,
        )

    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor, autocast: bool | None = None) -> torch.Tensor:
        """latents (B, F, C', h, w) -> frames (B, T, 3, H, W) float in [-1, 1]."""
        autocast = self.diffusion.autocast if autocast is None else autocast
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=autocast):
            frames = self.autoencoder.decode(latents)
        return frames.float().clamp(-1, 1)

    @torch.no_grad()
    def forward(
        self,
        s_a: torch.Tensor,
        motion_level: int | torch.Tensor | None,
        generator: torch.Generator | None = None,
        steps: int | None = None,
        guidance: float | None = None,
        dynamic_cfg: bool | None = None,
        autocast: bool | None = None,
    ) -> np.ndarray:
        """s_a (N, D) -> uint8 (T, H, W, 3); s_a (B, N, D) -> uint8 (B, T, H, W, 3).

        ``generator`` seeds the initial noise (the only randomness): same seed, same shot.
        ``steps`` / ``guidance`` default to the diffusion config's measured trade-off.
        """
        single = s_a.dim() == 2
        if single:
            s_a = s_a.unsqueeze(0)  # (1, N, D)
        latents = self.sample_latents(s_a, motion_level, generator, steps, guidance, dynamic_cfg, autocast)
        frames = frames_to_uint8(self.decode_latents(latents, autocast))  # (B, T, H, W, 3)
        return frames[0] if single else frames

    # -- persistence ----------------------------------------------------------------------------
    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = None) -> Path:
        """Write the pipeline directory atomically. dtype=None keeps fp32 (exact round trip);
        torch.float16 halves the shipped size."""
        ae = self.autoencoder
        cfg = self.config.to_dict()
        cfg["pretrained_path"] = None  # the weights are in this directory now
        meta: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "decoder": cfg,
            "diffusion": self.diffusion.to_dict(),
            "autoencoder_class": f"{type(ae).__module__}:{type(ae).__qualname__}",
        }
        with atomic_dir(directory) as tmp:
            save_safetensors_atomic(state_dict_to_dtype(self.net.state_dict(), dtype), tmp / WEIGHTS_NAME)
            ae.save_pretrained(tmp / AUTOENCODER_DIR, dtype=dtype)
            save_json_atomic(meta, tmp / CONFIG_NAME)
        return Path(directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device = "cpu") -> "ShotDecoder":
        directory = Path(directory)
        meta = load_json(directory / CONFIG_NAME)
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{directory}: expected {FORMAT} v{FORMAT_VERSION}, found "
                             f"{meta.get('format')} v{meta.get('format_version')}")
        net = DecoderNet(DecoderConfig.from_dict(meta["decoder"]))
        sd = {k: v.float() if v.is_floating_point() else v
              for k, v in load_safetensors(directory / WEIGHTS_NAME).items()}
        net.load_state_dict(sd, strict=True)
        module, _, name = meta["autoencoder_class"].partition(":")
        ae_cls = getattr(importlib.import_module(module), name)
        ae = ae_cls.from_pretrained(directory / AUTOENCODER_DIR).float()
        return cls(net, ae, DiffusionConfig.from_dict(meta["diffusion"])).to(device)
