"""Shot autoencoder: frames (B, T, 3, H, W) <-> latents (B, T', C', h, w), CogVideoX-shaped.

Decision ("compress time elsewhere"). The 3D AutoencoderKLCogVideoX takes 1.6-1.9 s to decode
one 17x96x144 shot on this CPU even at its smallest usable size, the whole turn budget. So the
default ("kl2d") is a per-frame 2D diffusers AutoencoderKL (8x spatial), and time is compressed
by PACKING, with no learned temporal layers, to the same latent layout as CogVideoX's VAE
(4x temporal, 8x spatial, 17 frames -> 5 latent frames):

    latent frame 0      = z(frame 0) repeated 4x along channels      (like CogVideoX, where the
    latent frame k>=1   = concat(z(frames 4k-3 .. 4k)) along channels  first frame is alone)

With C = 4 per-frame latent channels, C' = 16: exactly CogVideoX's latent width, so the decoder
transformer sees the shapes it would see at paper scale. Decoding averages the 4 copies of
frame 0. The price: no temporal redundancy is removed (16 numbers per 8x8x4 block instead of
CogVideoX's 16 per 8x8x4 block *after* a learned temporal mix), so the diffusion transformer
must model the correlation between the 4 stacked frames itself; in exchange decode is a cheap
per-frame conv net and the latent of each frame is exact.

Latents are scaled to unit variance: `(z - shift) * scale`, with scale/shift MEASURED on data
after training (`calibrate`) and stored as buffers (so they travel with the weights).

"paper": AutoencoderKLCogVideoX from a local path (kind="cogvideox"), same interface; its own
config's scaling_factor is used.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from diffusers import AutoencoderKL, AutoencoderKLCogVideoX
from torch import nn

from animegamer.core.checkpoint import (
    FORMAT_VERSION,
    load_json,
    load_safetensors,
    save_json_atomic,
    save_safetensors_atomic,
    state_dict_to_dtype,
)
from animegamer.core.runs import AUTOENCODER_CONFIG

WEIGHTS_NAME = "autoencoder.safetensors"
CONFIG_NAME = AUTOENCODER_CONFIG


@dataclass
class AutoencoderConfig:
    kind: str = "kl2d"  # "kl2d" (per-frame AutoencoderKL + time packing) | "cogvideox" (3D VAE)
    block_out_channels: tuple[int, ...] = (16, 32, 64, 64)  # 4 levels -> 8x spatial
    layers_per_block: int = 1
    latent_channels: int = 4  # per frame; packed latent width = temporal_ratio * latent_channels
    norm_num_groups: int = 8
    mid_block_attention: bool = True
    temporal_ratio: int = 4  # frames per packed latent frame (after the first)
    chunk_frames: int = 34  # frames per conv pass (bounds memory for long batches)
    channels_last: bool = True  # NHWC convs: measured faster with oneDNN on CPU (esp. under bf16 autocast)
    pretrained_path: str | None = None  # kind="cogvideox": local diffusers AutoencoderKLCogVideoX dir

    def __post_init__(self) -> None:
        self.block_out_channels = tuple(int(c) for c in self.block_out_channels)
        if self.kind not in ("kl2d", "cogvideox"):
            raise ValueError(f"AutoencoderConfig.kind must be 'kl2d' or 'cogvideox', got {self.kind!r}")
        if not self.block_out_channels or any(c < 1 for c in self.block_out_channels):
            raise ValueError(f"AutoencoderConfig.block_out_channels must be positive ints, got "
                             f"{self.block_out_channels}")
        if any(c % self.norm_num_groups for c in self.block_out_channels):
            raise ValueError(f"AutoencoderConfig.norm_num_groups ({self.norm_num_groups}) must divide every "
                             f"block_out_channels entry {self.block_out_channels}")
        for name in ("layers_per_block", "latent_channels", "temporal_ratio", "chunk_frames"):
            if getattr(self, name) < 1:
                raise ValueError(f"AutoencoderConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.pretrained_path is not None and not Path(self.pretrained_path).is_dir():
            raise ValueError(f"AutoencoderConfig.pretrained_path must be a local directory, got "
                             f"{self.pretrained_path!r}")

    @property
    def spatial_ratio(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "AutoencoderConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names - {"format_version", "scale", "shift"}
        if unknown:
            raise ValueError(f"AutoencoderConfig: unknown fields {sorted(unknown)}")
        return cls(**{k: v for k, v in d.items() if k in names})


AUTOENCODER_PRESETS: dict[str, AutoencoderConfig] = {
    # tests: 2 levels (2x spatial), 2 latent channels
    "tiny": AutoencoderConfig(block_out_channels=(8, 16), latent_channels=2, norm_num_groups=4, mid_block_attention=False),
    # trained here: 4x spatial, 17x96x144 -> 5 x 16 x 24 x 36. 8x spatial (16,32,64,64) measured
    # 18-20 dB held-out (faces and props lost); this one 25.0 dB after 2400 steps, decode 0.5 s bf16.
    "default": AutoencoderConfig(block_out_channels=(32, 64, 64), mid_block_attention=False),
    # CogVideoX-2B's 3D VAE from a local diffusers directory: set pretrained_path
    "paper": AutoencoderConfig(kind="cogvideox", block_out_channels=(128, 256, 256, 512), layers_per_block=3,
                               latent_channels=16, norm_num_groups=32),
}


def autoencoder_config(preset: str, **overrides) -> AutoencoderConfig:
    if preset not in AUTOENCODER_PRESETS:
        raise ValueError(f"unknown autoencoder preset {preset!r}; choose from {sorted(AUTOENCODER_PRESETS)}")
    return AutoencoderConfig.from_dict({**AUTOENCODER_PRESETS[preset].to_dict(), **overrides})


def latent_frames(t: int, ratio: int = 4) -> int:
    """Number of packed latent frames for T video frames (T must be 1 + ratio * k)."""
    if t < 1 or (t - 1) % ratio:
        raise ValueError(f"shot length must be 1 + {ratio} * k frames (e.g. 17), got {t}")
    return 1 + (t - 1) // ratio


def pack_time(z: torch.Tensor, ratio: int) -> torch.Tensor:
    """Per-frame latents (B, T, C, h, w) -> packed (B, 1 + (T-1)/r, r*C, h, w)."""
    b, t, c, h, w = z.shape
    k = latent_frames(t, ratio) - 1
    first = z[:, :1].repeat(1, 1, ratio, 1, 1)  # (B, 1, r*C, h, w): frame 0 alone, repeated
    rest = z[:, 1:].reshape(b, k, ratio * c, h, w)  # (B, k, r*C, h, w): channel = j*C + c
    return torch.cat([first, rest], dim=1)  # (B, T', r*C, h, w)


def unpack_time(latents: torch.Tensor, ratio: int) -> torch.Tensor:
    """Packed (B, T', r*C, h, w) -> per-frame (B, 1 + r*(T'-1), C, h, w); frame 0 = mean of its copies."""
    b, tp, rc, h, w = latents.shape
    if rc % ratio:
        raise ValueError(f"packed channels {rc} not divisible by temporal ratio {ratio}")
    c = rc // ratio
    first = latents[:, :1].reshape(b, 1, ratio, c, h, w).mean(2)  # (B, 1, C, h, w)
    rest = latents[:, 1:].reshape(b, (tp - 1) * ratio, c, h, w)  # (B, T-1, C, h, w)
    return torch.cat([first, rest], dim=1)  # (B, T, C, h, w)


class ShotAutoencoder(nn.Module):
    def __init__(self, cfg: AutoencoderConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg = cfg or AutoencoderConfig()
        if cfg.kind == "kl2d":
            n = len(cfg.block_out_channels)
            self.vae = AutoencoderKL(
                in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * n,
                up_block_types=("UpDecoderBlock2D",) * n, block_out_channels=cfg.block_out_channels,
                layers_per_block=cfg.layers_per_block, latent_channels=cfg.latent_channels,
                norm_num_groups=cfg.norm_num_groups, mid_block_add_attention=cfg.mid_block_attention,
                scaling_factor=1.0,  # ours lives in the buffers below
            )
            if cfg.channels_last:
                self.vae.to(memory_format=torch.channels_last)
            scale, shift = 1.0, 0.0
        else:
            if cfg.pretrained_path:
                self.vae = AutoencoderKLCogVideoX.from_pretrained(cfg.pretrained_path, local_files_only=True)
            else:  # random init (tests); the real one comes from a local path
                n = len(cfg.block_out_channels)
                self.vae = AutoencoderKLCogVideoX(
                    block_out_channels=cfg.block_out_channels, layers_per_block=cfg.layers_per_block,
                    latent_channels=cfg.latent_channels, norm_num_groups=cfg.norm_num_groups,
                    down_block_types=("CogVideoXDownBlock3D",) * n, up_block_types=("CogVideoXUpBlock3D",) * n,
                    temporal_compression_ratio=cfg.temporal_ratio,
                )
            scale = float(self.vae.config.scaling_factor)
            shift = float(self.vae.config.shift_factor or 0.0)
        self.register_buffer("latent_scale", torch.tensor(scale))
        self.register_buffer("latent_shift", torch.tensor(shift))

    # -- shapes ---------------------------------------------------------------------------------
    @property
    def temporal_ratio(self) -> int:
        return self.cfg.temporal_ratio

    @property
    def spatial_ratio(self) -> int:
        return self.cfg.spatial_ratio

    @property
    def latent_channels(self) -> int:
        """C' of the packed latents (16 by default, = CogVideoX)."""
        if self.cfg.kind == "kl2d":
            return self.cfg.temporal_ratio * self.cfg.latent_channels
        return self.cfg.latent_channels

    def latent_shape(self, t: int, h: int, w: int) -> tuple[int, int, int, int]:
        """(T', C', h', w') of the latents of a T x H x W shot."""
        s = self.spatial_ratio
        if h % s or w % s:
            raise ValueError(f"frame size {h}x{w} must be divisible by the spatial ratio {s}")
        return latent_frames(t, self.temporal_ratio), self.latent_channels, h // s, w // s

    # -- per-frame 2D VAE (kl2d) ----------------------------------------------------------------
    def encode_frames(self, x: torch.Tensor, sample: bool = False,
                      generator: torch.Generator | None = None) -> torch.Tensor:
        """Unscaled per-frame latents: (N, 3, H, W) -> (N, C, h, w); posterior mean unless `sample`."""
        outs = []
        for chunk in x.split(self.cfg.chunk_frames):
            if self.cfg.channels_last:
                chunk = chunk.contiguous(memory_format=torch.channels_last)
            post = self.vae.encode(chunk).latent_dist
            outs.append(post.sample(generator) if sample else post.mode())
        return torch.cat(outs)

    def decode_frames(self, z: torch.Tensor) -> torch.Tensor:
        """Unscaled per-frame latents (N, C, h, w) -> frames (N, 3, H, W), not clamped."""
        fmt = torch.channels_last if self.cfg.channels_last else torch.contiguous_format
        outs = [self.vae.decode(chunk.contiguous(memory_format=fmt)).sample for chunk in z.split(self.cfg.chunk_frames)]
        return torch.cat(outs).contiguous()  # (N, 3, H, W) standard layout for the caller

    # -- shots ----------------------------------------------------------------------------------
    def encode_unscaled(self, frames: torch.Tensor, sample: bool = False,
                        generator: torch.Generator | None = None) -> torch.Tensor:
        if frames.ndim != 5 or frames.shape[2] != 3:
            raise ValueError(f"ShotAutoencoder.encode expects frames (B, T, 3, H, W), got {tuple(frames.shape)}")
        b, t, _, h, w = frames.shape
        self.latent_shape(t, h, w)  # validates T and H, W
        if self.cfg.kind == "kl2d":
            z = self.encode_frames(frames.reshape(b * t, 3, h, w), sample, generator)  # (B*T, C, h', w')
            z = z.reshape(b, t, *z.shape[1:])  # (B, T, C, h', w')
            return pack_time(z, self.temporal_ratio)  # (B, T', r*C, h', w')
        post = self.vae.encode(frames.permute(0, 2, 1, 3, 4)).latent_dist  # input (B, 3, T, H, W)
        z = post.sample(generator) if sample else post.mode()  # (B, C', T', h', w')
        return z.permute(0, 2, 1, 3, 4)  # (B, T', C', h', w')

    def encode(self, frames: torch.Tensor, sample: bool = False,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Frames (B, T, 3, H, W) in [-1, 1] -> scaled latents (B, T', C', h, w), ~unit variance."""
        z = self.encode_unscaled(frames, sample, generator)
        return (z - self.latent_shift) * self.latent_scale

    def decode(self, latents: torch.Tensor, clamp: bool = True) -> torch.Tensor:
        """Scaled latents (B, T', C', h, w) -> frames (B, T, 3, H, W) in [-1, 1]."""
        if latents.ndim != 5:
            raise ValueError(f"ShotAutoencoder.decode expects latents (B, T', C', h, w), got "
                             f"{tuple(latents.shape)}")
        z = latents / self.latent_scale + self.latent_shift
        if self.cfg.kind == "kl2d":
            z = unpack_time(z, self.temporal_ratio)  # (B, T, C, h, w)
            b, t = z.shape[:2]
            x = self.decode_frames(z.reshape(b * t, *z.shape[2:]))  # (B*T, 3, H, W)
            x = x.reshape(b, t, *x.shape[1:])  # (B, T, 3, H, W)
        else:
            x = self.vae.decode(z.permute(0, 2, 1, 3, 4)).sample.permute(0, 2, 1, 3, 4)  # (B, T, 3, H, W)
        return x.clamp(-1, 1) if clamp else x

    @torch.no_grad()
    def calibrate(self, unscaled_latents: torch.Tensor) -> tuple[float, float]:
        """Set shift = mean and scale = 1/std from unscaled latents measured on data; returns them."""
        z = unscaled_latents.double()
        shift, std = z.mean().item(), z.std().item()
        self.latent_shift.fill_(shift)
        self.latent_scale.fill_(1.0 / max(std, 1e-8))
        return 1.0 / max(std, 1e-8), shift

    # -- persistence ----------------------------------------------------------------------------
    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = torch.float16) -> Path:
        """Write `autoencoder.safetensors` (fp16 by default; scale/shift stay fp32) + `autoencoder.json`."""
        directory = Path(directory)
        sd = state_dict_to_dtype(self.state_dict(), dtype)
        sd["latent_scale"], sd["latent_shift"] = self.latent_scale.float(), self.latent_shift.float()
        save_safetensors_atomic(sd, directory / WEIGHTS_NAME)
        cfg = self.cfg.to_dict()
        cfg["pretrained_path"] = None
        save_json_atomic({"format_version": FORMAT_VERSION, **cfg, "scale": self.latent_scale.item(),
                          "shift": self.latent_shift.item()}, directory / CONFIG_NAME)
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device = "cpu") -> "ShotAutoencoder":
        directory = Path(directory)
        model = cls(AutoencoderConfig.from_dict(load_json(directory / CONFIG_NAME)))
        model.load_state_dict(load_safetensors(directory / WEIGHTS_NAME), strict=True)
        return model.to(device).eval()
