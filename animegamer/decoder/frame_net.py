"""FrameNet: the pixel-space video denoiser that draws every frame of a shot after the first.

The first frame is given SPATIALLY ALIGNED with what the network draws (as CogVideoX-I2V and Stable
Video Diffusion concatenate the conditioning latent to each noisy frame, and DIAMOND stacks its
context frames as input channels), so the network only has to draw what changes: the pose, the
limbs, the props in the hands. There is no autoencoder: a lossless 4 x 4 space-to-depth stem turns a
96 x 144 frame into a 24 x 36 grid of 48 channels, so identity is never lost in a round trip.

Time: each frame to draw is one map of the 2D U-Net (``group`` > 1 packs that many consecutive frames in
one map's channels, fewer maps but a bottleneck: measured in docs/framenet.md); an attention over
the maps of a shot at every level ties them together.

Conditioning:
* the first frame: its space-to-depth channels concatenated to every group's noisy channels;
* s_a (the action-aware representation, n tokens x d): cross-attention at the two coarse levels, and
  its mean token in the embedding;
* the motion level 1..5 and the EDM noise level, in the timestep embedding (the paper puts the
  motion level there too), plus the noise-augmentation level of the first frame (GameNGen / SVD: the
  first frame of a continuing scene is the network's own last frame, so it trains on noised ones).

Measured before writing it (2 threads, AVX-512 without AMX): diffusers' ``UNetSpatioTemporalConditionModel``
(SVD's U-Net) at its smallest useful widths (64, 128, 256) on this grid is 33 M parameters and 0.69 s a
forward; this network at (64, 128, 192), one frame a map, 10 M parameters.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class FrameNetConfig:
    frames: int = 17  # frames of a shot, the first one given
    height: int = 96  # the frames it draws in play (the network takes any multiple of stem * 2^(levels-1):
    width: int = 144  # experiments/framenet_bottleneck.py trains on crops)
    stem: int = 4  # space-to-depth factor: 96 x 144 -> 24 x 36
    # consecutive frames packed into one map's channels; 1 = a frame a map. Packing 4 frames (192 values a grid
    # cell) into a first level of 96 channels kept the GPU-trained net from reading its input
    # (docs/framenet.md): the first level must be wider than group * 3 * stem^2
    group: int = 1
    channels: tuple[int, ...] = (64, 128, 192)  # U-Net widths, one per level (each level halves the grid)
    blocks: int = 2  # residual blocks a level
    attention_from: int = 1  # cross-attention to s_a at levels >= this (0 = every level)
    heads: int = 4
    emb_dim: int = 256
    cond_dim: int = 256  # s_a's width (the shipped E_a's)
    levels: int = 5  # motion levels 1..5

    def __post_init__(self) -> None:
        self.channels = tuple(int(c) for c in self.channels)
        checks = [
            (self.frames >= 2 and (self.frames - 1) % self.group == 0,
             f"frames - 1 must be a multiple of group ({self.group}), got frames={self.frames}"),
            (self.height % (self.stem * 2 ** (len(self.channels) - 1)) == 0
             and self.width % (self.stem * 2 ** (len(self.channels) - 1)) == 0,
             f"height and width must be divisible by stem * 2^(levels-1) = "
             f"{self.stem * 2 ** (len(self.channels) - 1)}, got {self.height}x{self.width}"),
            (all(c % self.heads == 0 and c % 8 == 0 for c in self.channels),
             f"channels must be multiples of 8 and of heads ({self.heads}), got {self.channels}"),
            (self.blocks >= 1, f"blocks must be >= 1, got {self.blocks}"),
            (self.channels[0] > self.group * self.stem_channels,
             f"the first level ({self.channels[0]} channels) must be wider than the values a grid cell packs "
             f"(group * 3 * stem^2 = {self.group * self.stem_channels}), or the network cannot read its input"),
            (0 <= self.attention_from < len(self.channels), f"attention_from must be a level index, got "
                                                              f"{self.attention_from}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"FrameNetConfig: {msg}")

    @property
    def n_groups(self) -> int:
        return (self.frames - 1) // self.group

    @property
    def stem_channels(self) -> int:
        return 3 * self.stem * self.stem

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["channels"] = list(self.channels)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FrameNetConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"FrameNetConfig: unknown fields {sorted(unknown)}")
        return cls(**d)


FRAME_NET_PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "tiny": dict(frames=5, height=16, width=16, stem=2, group=1, channels=(16, 32), blocks=1, heads=2,
                 emb_dim=32, cond_dim=16),
}


def frame_net_preset(name: str, **overrides: Any) -> FrameNetConfig:
    if name not in FRAME_NET_PRESETS:
        raise ValueError(f"unknown FrameNet preset {name!r}; choose from {sorted(FRAME_NET_PRESETS)}")
    return FrameNetConfig(**{**FRAME_NET_PRESETS[name], **overrides})


def fourier(x: torch.Tensor, dim: int) -> torch.Tensor:
    """(B,) scalars -> (B, dim) sinusoidal features (the usual timestep embedding)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = x.float()[:, None] * freqs[None] * 1000.0  # EDM's c_noise is ~[-2, 2]: spread it
    return torch.cat([angles.sin(), angles.cos()], dim=-1)  # (B, dim)


def norm(c: int) -> nn.GroupNorm:
    """GroupNorm with up to 32 groups of at least 4 channels that divide ``c``."""
    return nn.GroupNorm(max(g for g in range(1, 33) if c % g == 0 and c // g >= 4 or g == 1), c)


class ResBlock(nn.Module):
    """Conv residual block whose second norm is modulated by the embedding (scale, shift)."""

    def __init__(self, c_in: int, c_out: int, emb_dim: int) -> None:
        super().__init__()
        self.norm1 = norm(c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.emb = nn.Linear(emb_dim, 2 * c_out)
        self.norm2 = norm(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        nn.init.zeros_(self.conv2.weight)
        nn.init.zeros_(self.conv2.bias)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))  # (M, C, h, w)
        scale, shift = self.emb(emb)[:, :, None, None].chunk(2, dim=1)  # (M, C, 1, 1) each
        h = self.norm2(h) * (1 + scale) + shift
        return self.skip(x) + self.conv2(F.silu(h))


class GroupAttention(nn.Module):
    """Self-attention across a shot's frame groups at every grid position (the network's time axis)."""

    def __init__(self, c: int, heads: int, n_groups: int) -> None:
        super().__init__()
        self.norm = norm(c)
        self.attn = nn.MultiheadAttention(c, heads, batch_first=True)
        self.pos = nn.Parameter(torch.zeros(n_groups, c))
        self.n_groups = n_groups
        nn.init.zeros_(self.attn.out_proj.weight)
        nn.init.zeros_(self.attn.out_proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m, c, h, w = x.shape
        g = self.n_groups
        t = self.norm(x).reshape(m // g, g, c, h * w).permute(0, 3, 1, 2).reshape(-1, g, c)  # (B*hw, G, C)
        t = t + self.pos
        out = self.attn(t, t, t, need_weights=False)[0]  # (B*hw, G, C)
        out = out.reshape(m // g, h * w, g, c).permute(0, 2, 3, 1).reshape(m, c, h, w)
        return x + out


class CrossAttention(nn.Module):
    """Every grid position attends to the s_a tokens."""

    def __init__(self, c: int, cond_dim: int, heads: int) -> None:
        super().__init__()
        self.norm = norm(c)
        self.attn = nn.MultiheadAttention(c, heads, kdim=cond_dim, vdim=cond_dim, batch_first=True)
        nn.init.zeros_(self.attn.out_proj.weight)
        nn.init.zeros_(self.attn.out_proj.bias)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        m, c, h, w = x.shape
        q = self.norm(x).flatten(2).transpose(1, 2)  # (M, hw, C)
        out = self.attn(q, cond, cond, need_weights=False)[0]  # (M, hw, C)
        return x + out.transpose(1, 2).reshape(m, c, h, w)


class Level(nn.Module):
    """One U-Net level: residual blocks, each followed by the group attention (and cross-attention)."""

    def __init__(self, c_in: int, c: int, cfg: FrameNetConfig, cross: bool, n: int) -> None:
        super().__init__()
        self.res = nn.ModuleList(ResBlock(c_in if i == 0 else c, c, cfg.emb_dim) for i in range(n))
        self.time = nn.ModuleList(GroupAttention(c, cfg.heads, cfg.n_groups) for _ in range(n))
        self.cross = nn.ModuleList(CrossAttention(c, cfg.cond_dim, cfg.heads) for _ in range(n)) if cross else None

    def forward(self, x: torch.Tensor, emb: torch.Tensor, cond: torch.Tensor,
                skips: list[torch.Tensor] | None = None) -> torch.Tensor:
        for i, (res, time) in enumerate(zip(self.res, self.time)):
            if skips is not None:
                x = torch.cat([x, skips.pop()], dim=1)
            x = time(res(x, emb))
            if self.cross is not None:
                x = self.cross[i](x, cond)
        return x


class FrameNet(nn.Module):
    """forward(noisy, first, s_a, level, c_noise, aug) -> the network output F for EDM's D = c_skip x + c_out F.

    noisy (B, T-1, 3, H, W) frames 1..T-1 (already multiplied by EDM's c_in); first (B, 3, H, W) the
    given frame in [-1, 1] (possibly noise-augmented); s_a (B, N, cond_dim); level (B,) in 1..5;
    c_noise (B,) EDM's log-sigma / 4; aug (B,) the first frame's augmentation sigma.
    """

    def __init__(self, config: FrameNetConfig) -> None:
        super().__init__()
        self.config = cfg = config
        e = cfg.emb_dim
        self.noise_mlp = nn.Sequential(nn.Linear(e, e), nn.SiLU(), nn.Linear(e, e))
        self.aug_mlp = nn.Sequential(nn.Linear(e, e), nn.SiLU(), nn.Linear(e, e))
        self.level_emb = nn.Embedding(cfg.levels + 1, e)  # index 0 unused: levels are 1..5
        self.group_emb = nn.Embedding(cfg.n_groups, e)
        self.cond_proj = nn.Sequential(nn.LayerNorm(cfg.cond_dim), nn.Linear(cfg.cond_dim, e))
        self.cond_norm = nn.LayerNorm(cfg.cond_dim)
        c0 = cfg.channels[0]
        self.conv_in = nn.Conv2d(cfg.stem_channels * (cfg.group + 1), c0, 3, padding=1)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        c_prev = c0
        for i, c in enumerate(cfg.channels):
            self.down.append(Level(c_prev, c, cfg, i >= cfg.attention_from, cfg.blocks))
            self.downsample.append(nn.Conv2d(c, c, 3, stride=2, padding=1) if i < len(cfg.channels) - 1
                                   else nn.Identity())
            c_prev = c
        self.mid = Level(c_prev, c_prev, cfg, True, 1)
        self.up = nn.ModuleList()
        for i in reversed(range(len(cfg.channels))):
            c = cfg.channels[i]
            # each block of a level takes one skip: the level's own output, then its input's
            self.up.append(UpLevel(c_prev, c, cfg, i >= cfg.attention_from))
            c_prev = c
        self.norm_out = norm(c0)
        self.conv_out = nn.Conv2d(c0, cfg.stem_channels * cfg.group, 3, padding=1)
        nn.init.zeros_(self.conv_out.weight)
        nn.init.zeros_(self.conv_out.bias)

    def embedding(self, level: torch.Tensor, c_noise: torch.Tensor, aug: torch.Tensor) -> torch.Tensor:
        e = self.config.emb_dim
        return self.noise_mlp(fourier(c_noise, e)) + self.aug_mlp(fourier(aug, e)) + self.level_emb(level)  # (B, E)

    def forward(self, noisy: torch.Tensor, first: torch.Tensor, s_a: torch.Tensor, level: torch.Tensor,
                c_noise: torch.Tensor, aug: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        b, t = noisy.shape[:2]
        g, s = cfg.n_groups, cfg.stem
        height, width = noisy.shape[-2:]
        unit = s * 2 ** (len(cfg.channels) - 1)
        # convolutions and attention over time only: any size the levels divide
        if (t != cfg.frames - 1 or noisy.shape[2] != 3 or height % unit or width % unit
                or first.shape[-2:] != (height, width)):
            raise ValueError(f"FrameNet: noisy must be (B, {cfg.frames - 1}, 3, H, W) with H and W multiples of "
                             f"{unit} and first (B, 3, H, W), got {tuple(noisy.shape)} and {tuple(first.shape)}")
        x = F.pixel_unshuffle(noisy.reshape(b * t, 3, height, width), s)  # (B*T', 3s^2, h, w)
        h, w = x.shape[-2:]
        x = x.reshape(b * g, cfg.group * cfg.stem_channels, h, w)  # (B*G, group*3s^2, h, w)
        f0 = F.pixel_unshuffle(first, s)  # (B, 3s^2, h, w)
        f0 = f0[:, None].expand(b, g, *f0.shape[1:]).reshape(b * g, -1, h, w)  # (B*G, 3s^2, h, w)
        x = self.conv_in(torch.cat([x, f0], dim=1))  # (B*G, C0, h, w)

        cond = self.cond_norm(s_a)  # (B, N, D)
        emb = self.embedding(level, c_noise, aug) + self.cond_proj(s_a.mean(dim=1))  # (B, E)
        emb = (emb[:, None] + self.group_emb.weight[None]).reshape(b * g, -1)  # (B*G, E)
        emb = F.silu(emb)
        cond = cond[:, None].expand(b, g, *cond.shape[1:]).reshape(b * g, *cond.shape[1:])  # (B*G, N, D)

        skips = []
        for level_, down in zip(self.down, self.downsample):
            x = level_(x, emb, cond)
            skips.append(x)
            x = down(x)
        x = self.mid(x, emb, cond)
        for up in self.up:
            x = up(x, emb, cond, skips.pop())
        x = self.conv_out(F.silu(self.norm_out(x)))  # (B*G, group*3s^2, h, w)
        x = x.reshape(b * t, cfg.stem_channels, h, w)
        return F.pixel_shuffle(x, s).reshape(b, t, 3, height, width)  # (B, T', 3, H, W)


class UpLevel(nn.Module):
    """Upsample to this level's grid, concatenate the down path's output there, then a Level."""

    def __init__(self, c_in: int, c: int, cfg: FrameNetConfig, cross: bool) -> None:
        super().__init__()
        self.up_conv = nn.Conv2d(c_in, c_in, 3, padding=1)
        self.level = Level(c_in + c, c, cfg, cross, cfg.blocks)

    def forward(self, x: torch.Tensor, emb: torch.Tensor, cond: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        if x.shape[-2:] != skip.shape[-2:]:
            x = self.up_conv(F.interpolate(x, size=skip.shape[-2:], mode="nearest"))
        return self.level(torch.cat([x, skip], dim=1), emb, cond)
