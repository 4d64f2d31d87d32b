"""ShotDecoder: the inference pipeline s_a + motion level -> an animation shot (uint8 frames).

    decoder = ShotDecoder.from_pretrained("weights/decoder")
    frames = decoder(s_a, motion_level=3, generator=torch.Generator().manual_seed(0))  # (T, H, W, 3)
    save_mp4(frames, "shot.mp4", fps=8)

It bundles the trained network (E_a + CogVideoX transformer), the diffusion config (noise schedule,
training prior), the sampler's settings and the shot autoencoder. On disk (format version 2), one
directory:
    shot_decoder.json              format, decoder, diffusion and sampler configs, autoencoder class
    shot_decoder.safetensors       DecoderNet weights (E_a included: its zero-input output is the
                                   CFG null branch)
    autoencoder/                   the autoencoder's own save_pretrained directory
    anchors/                       optional: the visual anchors (decoder/anchors.py) the game draws from
    stage/                         optional: place pictures and the cast's cut-outs (decoder/stage.py) from
                                   which the game composes a first frame no stored shot shows
    sprite_animator/               optional: the sprite animator (decoder/sprite_animator.py); with a stage,
                                   the game draws every shot in layers (decoder/layered.py): each character
                                   who acts drawn by it, pasted into the place's picture
written under a temporary name and renamed in one step. Version 1 (sampler settings inside the
diffusion config) still loads; a directory's ``motion/`` (an earlier version's flow motion network) is not read.
"""
from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from animegamer.core.checkpoint import (
    atomic_dir,
    load_json,
    load_safetensors,
    save_json_atomic,
    save_safetensors_atomic,
    state_dict_to_dtype,
)
from animegamer.core.runs import DECODER_CONFIG, DECODER_WEIGHTS
from animegamer.decoder.anchors import Anchor, Shown, VisualAnchors, frame_tokens
from animegamer.decoder.diffusion import DiffusionConfig
from animegamer.decoder.network import DecoderConfig, DecoderNet
from animegamer.decoder.sampler import SamplerConfig, sample
from animegamer.decoder.sprite_animator import SpriteAnimator
from animegamer.decoder.stage import Stage
from animegamer.representation.reference_encoder import LatentReference

FORMAT = "animegamer-shot-decoder"
FORMAT_VERSION = 2
CONFIG_NAME = DECODER_CONFIG
WEIGHTS_NAME = DECODER_WEIGHTS
AUTOENCODER_DIR = "autoencoder"
ANCHORS_DIR = "anchors"
STAGE_DIR = "stage"
SPRITES_DIR = "sprite_animator"


def frames_to_uint8(frames: torch.Tensor) -> np.ndarray:
    """(..., T, 3, H, W) in [-1, 1] -> uint8 (..., T, H, W, 3)."""
    x = ((frames.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.movedim(-3, -1).cpu().numpy()


def frames_from_uint8(frames: np.ndarray) -> torch.Tensor:
    """uint8 (..., H, W, 3) -> float (..., 3, H, W) in [-1, 1]: the inverse of ``frames_to_uint8``."""
    return torch.from_numpy(np.ascontiguousarray(frames)).movedim(-1, -3).float().div(127.5).sub(1.0)


class ShotDecoder(nn.Module):
    def __init__(self, net: DecoderNet, autoencoder: nn.Module, diffusion: DiffusionConfig | None = None,
                 sampler: SamplerConfig | None = None, anchors: VisualAnchors | None = None,
                 stage: Stage | None = None, animator: SpriteAnimator | None = None) -> None:
        super().__init__()
        self.net = net
        self.autoencoder = autoencoder
        self.diffusion = diffusion or DiffusionConfig()
        self.sampler = sampler or SamplerConfig()
        self.anchors = anchors
        self.stage = stage
        self.animator = animator
        self.eval()

    @property
    def draws_layers(self) -> bool:
        """Whether the game draws its shots in layers: the sprite animator draws the characters, the stage holds
        the places and the cut-outs they start from (decoder/layered.py)."""
        return self.animator is not None and self.stage is not None

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
        autocast: bool | None = None,
    ) -> torch.Tensor:
        """s_a (B, N, D) -> latents (B, F, C', h, w) in the autoencoder's (scaled) space.
        ``steps`` / ``guidance`` / ``autocast`` override the sampler's settings for this call."""
        s_a = s_a.to(self.device, torch.float32)
        overrides = {k: v for k, v in (("steps", steps), ("guidance", guidance), ("autocast", autocast))
                     if v is not None}
        sampler = replace(self.sampler, **overrides) if overrides else self.sampler
        return sample(self.net, s_a, self._motion(motion_level, s_a.shape[0]), generator, self.diffusion, sampler)

    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor, autocast: bool | None = None) -> torch.Tensor:
        """latents (B, F, C', h, w) -> frames (B, T, 3, H, W) float in [-1, 1]."""
        autocast = self.sampler.autocast if autocast is None else autocast
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
        autocast: bool | None = None,
    ) -> np.ndarray:
        """s_a (N, D) -> uint8 (T, H, W, 3); s_a (B, N, D) -> uint8 (B, T, H, W, 3).

        ``generator`` seeds the initial noise (the only randomness): same seed, same shot.
        ``steps`` / ``guidance`` default to the sampler's settings (a measured trade-off).
        """
        single = s_a.dim() == 2
        if single:
            s_a = s_a.unsqueeze(0)  # (1, N, D)
        latents = self.sample_latents(s_a, motion_level, generator, steps, guidance, autocast)
        frames = frames_to_uint8(self.decode_latents(latents, autocast))  # (B, T, H, W, 3)
        return frames[0] if single else frames

    def latent_reference(self) -> LatentReference:
        """The frame encoder that made this decoder's f_v: the autoencoder's first-frame latent in patches
        (its patch side follows from E_a's visual input width)."""
        c, ae = self.config, self.autoencoder
        per_frame = ae.cfg.latent_channels
        patch = round((c.d_visual_in / per_frame) ** 0.5)
        if patch * patch * per_frame != c.d_visual_in or c.n_visual * patch * patch != c.latent_height * c.latent_width:
            raise ValueError(f"this decoder's visual reference is not the autoencoder's latent in patches (f_v "
                             f"{c.n_visual} x {c.d_visual_in}): it cannot use visual anchors")
        return LatentReference(ae, patch)

    @torch.no_grad()
    def anchor(self, s_a: torch.Tensor, characters: list[str], shown: Shown | None = None,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, Anchor | None]:
        """The s_a to draw (N, D): the engine's ``s_a`` with its visual tokens replaced by the anchor
        (decoder/anchors.py), and the anchor; without anchors, ``s_a`` itself and None. ``shown``: what the player
        saw last turn (None on a first turn)."""
        if self.anchors is None:
            return s_a, None
        c = self.config
        # "frame" continuation only
        reference = self.latent_reference() if shown is not None and shown.frame is not None else None
        a = self.anchors.choose(s_a, c.n_text, self.net.action_encoder, reference, characters, shown, generator)
        drawn = s_a.clone().float()
        drawn[c.n_text:] = a.tokens.to(drawn)
        return drawn, a

    def draw_from_frame(self, s_a: torch.Tensor, frame: np.ndarray) -> torch.Tensor:
        """``s_a`` (N, D) with its visual tokens replaced by those of one picture (uint8 H x W x 3 at the
        model's frame size): the shot will start from that picture, as from a retrieved anchor."""
        tokens = frame_tokens(frame, self.latent_reference(), self.net.action_encoder.visual)
        drawn = s_a.clone().float()
        drawn[self.config.n_text:] = tokens.to(drawn)
        return drawn

    @property
    def frame_size(self) -> tuple[int, int]:
        """(height, width) of the frames this decoder draws."""
        r = self.autoencoder.spatial_ratio
        return self.config.latent_height * r, self.config.latent_width * r

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
            "sampler": self.sampler.to_dict(),
            "autoencoder_class": f"{type(ae).__module__}:{type(ae).__qualname__}",
        }
        with atomic_dir(directory) as tmp:
            save_safetensors_atomic(state_dict_to_dtype(self.net.state_dict(), dtype), tmp / WEIGHTS_NAME)
            ae.save_pretrained(tmp / AUTOENCODER_DIR, dtype=dtype)
            if self.anchors is not None:
                self.anchors.save_pretrained(tmp / ANCHORS_DIR)
            if self.stage is not None:
                self.stage.save_pretrained(tmp / STAGE_DIR)
            if self.animator is not None:
                self.animator.save_pretrained(tmp / SPRITES_DIR, dtype=dtype)
            save_json_atomic(meta, tmp / CONFIG_NAME)
        return Path(directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device = "cpu") -> ShotDecoder:
        directory = Path(directory)
        meta = load_json(directory / CONFIG_NAME)
        if meta.get("format") != FORMAT or meta.get("format_version") not in (1, FORMAT_VERSION):
            raise ValueError(f"{directory}: expected {FORMAT} v1 or v{FORMAT_VERSION}, found "
                             f"{meta.get('format')} v{meta.get('format_version')}")
        if meta["format_version"] == 1:
            meta = upgrade_v1(meta, directory)
        net = DecoderNet(DecoderConfig.from_dict(meta["decoder"]))
        sd = {k: v.float() if v.is_floating_point() else v
              for k, v in load_safetensors(directory / WEIGHTS_NAME).items()}
        net.load_state_dict(sd, strict=True)
        module, _, name = meta["autoencoder_class"].partition(":")
        ae_cls = getattr(importlib.import_module(module), name)
        ae = ae_cls.from_pretrained(directory / AUTOENCODER_DIR).float()
        anchors = VisualAnchors.from_pretrained(directory / ANCHORS_DIR) if (directory / ANCHORS_DIR).is_dir() else None
        stage = Stage.from_pretrained(directory / STAGE_DIR) if (directory / STAGE_DIR).is_dir() else None
        animator = (SpriteAnimator.from_pretrained(directory / SPRITES_DIR)
                    if (directory / SPRITES_DIR).is_dir() else None)
        return cls(net, ae, DiffusionConfig.from_dict(meta["diffusion"]), SamplerConfig.from_dict(meta["sampler"]),
                   anchors, stage, animator).to(device)


# version 1 kept the sampler's settings in the diffusion config, under these names
_V1_SAMPLER = {"steps": "steps", "guidance": "guidance", "autocast": "autocast"}
_V1_RETIRED = ("motion_guidance", "sampling_shared_noise_by_level", "sampling_motion_scale_by_level")


def upgrade_v1(meta: dict[str, Any], where: str | Path = "shot_decoder.json") -> dict[str, Any]:
    """A version-1 shot_decoder.json read as version 2: the sampler's settings move out of the
    diffusion config. Two sampler options v1 had are gone; a decoder that used them is refused."""
    diffusion = dict(meta["diffusion"])
    if diffusion.pop("dynamic_cfg", False):
        raise ValueError(f"{where}: samples with dynamic CFG, which this version no longer has")
    if diffusion.pop("sampler", "dpmpp") != "dpmpp":
        raise ValueError(f"{where}: samples with DDIM, which this version no longer has (DPM-Solver++ only)")
    sampler = {new: diffusion.pop(old) for old, new in _V1_SAMPLER.items() if old in diffusion}
    for old in _V1_RETIRED:  # settings of the picture decoder's retired fixes (sampler.RETIRED_FIELDS)
        diffusion.pop(old, None)
    return {**meta, "format_version": FORMAT_VERSION, "diffusion": diffusion, "sampler": sampler}
