"""The visual reference f_v of s_a: which encoder turns a shot's first frame into tokens.

Two kinds, one interface (``patch_tokens(images) -> (B, n_visual, d_visual)``, ``n_visual``,
``d_visual``):

- ``clip``: the CLIP-style vision tower (penultimate patch tokens), as the paper does with
  OpenCLIP ViT-B-16. At paper scale this is the only sensible choice: a pretrained CLIP's patch
  tokens carry the appearance of what is in the frame.
- ``latent``: the shot autoencoder's latent of the first frame, cut into p x p patches
  (4 x 24 x 36 -> 54 tokens of 4*4*4 = 64 numbers at p = 4). A deliberate deviation for the CPU
  default: no pretrained CLIP can be shipped offline, and the tower trained here on captions
  names a held-out character only 44 % of the time (chance 10 %), so its tokens do not carry
  the character's look and a decoder conditioned on them draws places but no characters. The
  autoencoder latent keeps the whole frame (23.8 dB held-out), so the decoder's job becomes
  "animate this frame", which a small transformer learns in a CPU budget.

A reference directory is recognised by its config file: ``vision_tower.json`` (a tower) or
``autoencoder.json`` (an autoencoder, used as a latent reference with ``patch``).
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from animegamer.core.runs import resolve_component
from animegamer.models.autoencoder import CONFIG_NAME as AE_CONFIG
from animegamer.models.autoencoder import WEIGHTS_NAME as AE_WEIGHTS
from animegamer.models.autoencoder import ShotAutoencoder
from animegamer.models.vision_tower import CONFIG_NAME as VT_CONFIG
from animegamer.models.vision_tower import WEIGHTS_NAME as VT_WEIGHTS
from animegamer.models.vision_tower import VisionTower

KINDS = ("clip", "latent")
# What the text stream f_md of s_a encodes, by decoder condition: the motion description (s_a, the
# paper's) or the shot's whole caption (the GC baseline, which has no visual reference). The values
# are the field names of a world row and of a ShotBatch alike.
CONDITION_TEXT = {"motion": "motion_text", "caption": "caption"}


class LatentReference(nn.Module):
    """f_v from the frozen shot autoencoder: first-frame latent, p x p patches as tokens."""

    def __init__(self, autoencoder: nn.Module, patch: int = 4) -> None:
        super().__init__()
        if patch < 1:
            raise ValueError(f"LatentReference patch must be >= 1, got {patch}")
        self.ae = autoencoder.float().eval().requires_grad_(False)
        self.patch = patch

    def _grid(self, h: int, w: int) -> tuple[int, int]:
        s = self.ae.spatial_ratio
        if h % (s * self.patch) or w % (s * self.patch):
            raise ValueError(f"LatentReference: frames {h}x{w} must be divisible by spatial ratio {s} x patch "
                             f"{self.patch}")
        return h // s // self.patch, w // s // self.patch

    @torch.no_grad()
    def patch_tokens(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) in [-1, 1] -> (B, gh * gw, C * p * p), the latent at the autoencoder's unit scale."""
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"LatentReference expects images (B, 3, H, W), got {tuple(images.shape)}")
        b, _, h, w = images.shape
        gh, gw = self._grid(h, w)
        z = self.ae.encode_frames(images.float())  # (B, C, h, w) unscaled posterior mean
        z = (z - self.ae.latent_shift) * self.ae.latent_scale  # ~unit variance
        p, c = self.patch, z.shape[1]
        z = z.reshape(b, c, gh, p, gw, p).permute(0, 2, 4, 1, 3, 5)  # (B, gh, gw, C, p, p)
        return z.reshape(b, gh * gw, c * p * p)  # (B, n_visual, d_visual)


class NoVisualReference(nn.Module):
    """The GC baseline's "visual reference": one all-zero token, so s_a carries the text alone.

    E_a keeps its two streams (the same classes train and ship), but the visual stream sees the
    same constant for every shot, i.e. it is a fixed token that tells the decoder nothing.
    """

    n_visual = 1
    d_visual = 1

    @torch.no_grad()
    def patch_tokens(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) -> zeros (B, 1, 1)."""
        return torch.zeros(images.shape[0], 1, 1)


def reference_kind(directory: str | Path) -> str:
    """'clip' or 'latent' for a resolved reference dir (by its config file)."""

    d = Path(directory)
    if (d / VT_CONFIG).is_file():
        return "clip"
    if (d / AE_CONFIG).is_file():
        return "latent"
    raise FileNotFoundError(f"{d}: neither a vision tower ({VT_CONFIG}) nor an autoencoder ({AE_CONFIG})")


def resolve_reference(path: str | Path) -> Path:
    """A vision tower or autoencoder dir from a run dir, its final/, or the component dir."""

    try:
        return resolve_component(path, VT_CONFIG, "vision_tower")
    except FileNotFoundError:
        pass
    try:
        return resolve_component(path, AE_CONFIG, "autoencoder")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no vision tower ({VT_CONFIG}) nor autoencoder ({AE_CONFIG}) in it, its "
                                "vision_tower/ / autoencoder/ or final/") from None


def reference_weights(directory: str | Path) -> Path:
    """The weights file of a resolved reference dir (for hashes and staleness stamps)."""

    return Path(directory) / (VT_WEIGHTS if reference_kind(directory) == "clip" else AE_WEIGHTS)


def load_reference_encoder(directory: str | Path, patch: int = 4, condition: str = "motion") -> nn.Module:
    """The frozen f_v encoder of a resolved reference dir (``patch`` only for a latent reference);
    condition "caption" (the GC baseline) has none: a NoVisualReference, whatever the directory."""
    if condition not in CONDITION_TEXT:
        raise ValueError(f"condition must be one of {sorted(CONDITION_TEXT)}, got {condition!r}")
    if condition == "caption":
        return NoVisualReference()
    if reference_kind(directory) == "clip":
        return VisionTower.from_pretrained(directory).float().eval().requires_grad_(False)

    return LatentReference(ShotAutoencoder.from_pretrained(directory), patch)
