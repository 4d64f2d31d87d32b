"""The small 2D U-Net's pieces the sprite animator is built of: a sinusoidal embedding, GroupNorm, a residual block
modulated by the embedding, cross-attention to s_a, one level of blocks, and the backward warp along a flow.

(They came from the whole-frame drawers measured before the sprite animator, FrameNet and FlowPaint:
docs/framenet.md. The parameter names inside each block are the shipped weights' keys.)
"""
from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class LevelConfig(Protocol):
    """What a ``UNetLevel`` reads of its network's config."""

    emb_dim: int
    cond_dim: int
    heads: int


def fourier(x: torch.Tensor, dim: int) -> torch.Tensor:
    """(B,) scalars -> (B, dim) sinusoidal features (the usual timestep embedding)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = x.float()[:, None] * freqs[None] * 1000.0  # inputs of order 1 (a share, a level / 5): spread them
    return torch.cat([angles.sin(), angles.cos()], dim=-1)  # (B, dim)


def norm(c: int) -> nn.GroupNorm:
    """GroupNorm with up to 32 groups of at least 4 channels that divide ``c``."""
    return nn.GroupNorm(max(g for g in range(1, 33) if c % g == 0 and c // g >= 4 or g == 1), c)


class ResBlock(nn.Module):
    """Conv residual block whose second norm is modulated by the embedding (scale, shift); it starts as the
    identity (its last conv zero)."""

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


class UNetLevel(nn.Module):
    """Residual blocks of one U-Net level, each followed by cross-attention to s_a where ``cross``."""

    def __init__(self, c_in: int, c: int, cfg: LevelConfig, cross: bool, n: int) -> None:
        super().__init__()
        self.res = nn.ModuleList(ResBlock(c_in if i == 0 else c, c, cfg.emb_dim) for i in range(n))
        self.cross = nn.ModuleList(CrossAttention(c, cfg.cond_dim, cfg.heads) for _ in range(n)) if cross else None

    def forward(self, x: torch.Tensor, emb: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        for i, res in enumerate(self.res):
            x = res(x, emb)
            if self.cross is not None:
                x = self.cross[i](x, cond)
        return x


def warp(picture: torch.Tensor, flow: torch.Tensor, mode: str = "bilinear",
         affine: torch.Tensor | None = None) -> torch.Tensor:
    """picture (M, C, H, W) sampled where flow (M, 2, H, W) points (pixels, (dx, dy)): each output pixel
    comes from ``picture`` at its own position plus the flow, then through ``affine`` (M, 2, 3) if given (a
    whole-body move: source = affine @ (position + flow, 1), pixels); sources outside take the nearest edge."""
    m, _, h, w = picture.shape
    ys, xs = torch.meshgrid(torch.arange(h, device=flow.device, dtype=flow.dtype),
                            torch.arange(w, device=flow.device, dtype=flow.dtype), indexing="ij")
    px, py = xs + flow[:, 0], ys + flow[:, 1]  # (M, H, W)
    if affine is not None:
        a = affine.to(flow.dtype)[:, :, :, None, None]  # (M, 2, 3, 1, 1)
        px, py = (a[:, 0, 0] * px + a[:, 0, 1] * py + a[:, 0, 2],
                  a[:, 1, 0] * px + a[:, 1, 1] * py + a[:, 1, 2])
    gx = px * (2 / max(w - 1, 1)) - 1  # align_corners=True coordinates in [-1, 1]
    gy = py * (2 / max(h - 1, 1)) - 1
    return F.grid_sample(picture, torch.stack([gx, gy], dim=-1), mode=mode, padding_mode="border",
                         align_corners=True)
