"""Visual reference encoder: a CLIP-style vision tower (transformers' CLIPVisionModelWithProjection).

Two jobs:
- `patch_tokens(first_frames)` -> f_v, the visual half of s_a: PENULTIMATE-layer patch tokens,
  CLS dropped (the paper: OpenCLIP ViT-B-16, 196 x 768; ours: 54 x 256 by default).
- `embed_images(frames)` / `embed_text_features(sentence_embs)` -> normalised joint-space
  embeddings for the in-domain CLIP-I / CLIP-T metrics and for contrastive training.

No CLIP weights exist offline, so the "tiny"/"default" towers are trained here contrastively
against FROZEN all-MiniLM-L6-v2 caption embeddings; the text side is a learnable linear
projection (`text_proj`, part of this module) plus a learnable temperature. "paper" is a
config pointing at a local transformers-format CLIP directory (e.g. a converted OpenCLIP
ViT-B-16); then `text_proj` maps MiniLM into that CLIP space and must be trained (or the
metrics use the CLIP's own text tower elsewhere).

Aspect ratio decision. World frames are 96x144 (H x W); CLIP's position table assumes a square
grid. We do NOT resize or pad to a square: squashing 144->96 thins characters and props by a
third, padding to 144x144 spends 1/3 of the compute on padding tokens. Instead the tower keeps
the native 96x144 input and uses transformers' `interpolate_pos_encoding=True`: the learned
table is a square 9x9 grid (long side / patch) bicubically resampled to the 6x9 patch grid on
every forward (a fixed linear map of the table, so training through it is fine, and cost is
negligible). Patch 16 gives 6 x 9 = 54 visual tokens (target ~48-64). A pretrained square CLIP
("paper") gets `input_size=(224, 224)`: frames are resized (squashed, not centre-cropped, so
nothing at the frame edges is lost), 14 x 14 = 196 tokens as in the paper.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

from animegamer.core.checkpoint import (
    FORMAT_VERSION,
    load_json,
    load_safetensors,
    save_json_atomic,
    save_safetensors_atomic,
    state_dict_to_dtype,
)

WEIGHTS_NAME = "vision_tower.safetensors"
CONFIG_NAME = "vision_tower.json"
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass
class VisionTowerConfig:
    hidden_size: int = 256
    num_layers: int = 6
    num_heads: int = 4
    intermediate_size: int = 1024
    patch_size: int = 16
    input_size: tuple[int, int] = (96, 144)  # (H, W) the tower sees; frames are resized to it if different
    proj_dim: int = 256  # joint embedding width
    text_dim: int = 384  # width of the frozen sentence embeddings (MiniLM: 384)
    feature_layer: int = -2  # hidden_states index for f_v: -2 = penultimate layer (paper)
    image_mean: tuple[float, float, float] | None = None  # None: frames in [-1, 1] go in as they are
    image_std: tuple[float, float, float] | None = None
    pretrained_path: str | None = None  # local transformers CLIP dir; architecture fields then come from it
    dropout: float = 0.0
    hidden_act: str = "gelu"  # OpenAI/OpenCLIP ViT-B-16: "quick_gelu"

    def __post_init__(self) -> None:
        self.input_size = tuple(int(v) for v in self.input_size)  # type: ignore[assignment]
        if self.image_mean is not None:
            self.image_mean = tuple(self.image_mean)  # type: ignore[assignment]
        if self.image_std is not None:
            self.image_std = tuple(self.image_std)  # type: ignore[assignment]
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "patch_size", "proj_dim",
                     "text_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"VisionTowerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"VisionTowerConfig.hidden_size ({self.hidden_size}) must be divisible by "
                             f"num_heads ({self.num_heads})")
        h, w = self.input_size
        if len(self.input_size) != 2 or h % self.patch_size or w % self.patch_size:
            raise ValueError(f"VisionTowerConfig.input_size must be (H, W) divisible by patch_size "
                             f"{self.patch_size}, got {self.input_size}")
        if self.feature_layer == 0 or abs(self.feature_layer) > self.num_layers:
            raise ValueError(f"VisionTowerConfig.feature_layer must index a transformer layer "
                             f"(1..{self.num_layers} or -1..-{self.num_layers}), got {self.feature_layer}")
        if (self.image_mean is None) != (self.image_std is None):
            raise ValueError("VisionTowerConfig.image_mean and image_std must be both set or both None")
        if self.pretrained_path is not None and not Path(self.pretrained_path).is_dir():
            raise ValueError(f"VisionTowerConfig.pretrained_path must be a local directory, got "
                             f"{self.pretrained_path!r}")

    @property
    def grid(self) -> tuple[int, int]:
        return self.input_size[0] // self.patch_size, self.input_size[1] // self.patch_size

    @property
    def n_visual(self) -> int:
        gh, gw = self.grid
        return gh * gw

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "VisionTowerConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names - {"format_version"}
        if unknown:
            raise ValueError(f"VisionTowerConfig: unknown fields {sorted(unknown)}")
        return cls(**{k: v for k, v in d.items() if k in names})


VISION_TOWER_PRESETS: dict[str, VisionTowerConfig] = {
    # tests: 16x24 frames, patch 8 -> 2 x 3 = 6 tokens
    "tiny": VisionTowerConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, patch_size=8,
                              input_size=(16, 24), proj_dim=32),
    # trained here on world frames: 96x144, patch 16 -> 6 x 9 = 54 tokens of width 256
    "default": VisionTowerConfig(),
    # OpenCLIP ViT-B-16 (transformers format) from a local path: set pretrained_path
    "paper": VisionTowerConfig(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072, patch_size=16,
                               input_size=(224, 224), proj_dim=512, image_mean=CLIP_MEAN, image_std=CLIP_STD,
                               hidden_act="quick_gelu"),
}


def vision_tower_config(preset: str, **overrides) -> VisionTowerConfig:
    if preset not in VISION_TOWER_PRESETS:
        raise ValueError(f"unknown vision tower preset {preset!r}; choose from {sorted(VISION_TOWER_PRESETS)}")
    return VisionTowerConfig.from_dict({**VISION_TOWER_PRESETS[preset].to_dict(), **overrides})


class VisionTower(nn.Module):
    def __init__(self, cfg: VisionTowerConfig | None = None) -> None:
        super().__init__()

        self.cfg = cfg = cfg or VisionTowerConfig()
        if cfg.pretrained_path:
            self.clip = CLIPVisionModelWithProjection.from_pretrained(cfg.pretrained_path, local_files_only=True)
            hc = self.clip.config
            # the checkpoint decides the architecture; keep the config truthful
            cfg.hidden_size, cfg.num_layers = hc.hidden_size, hc.num_hidden_layers
            cfg.num_heads, cfg.intermediate_size = hc.num_attention_heads, hc.intermediate_size
            cfg.patch_size, cfg.proj_dim, cfg.hidden_act = hc.patch_size, hc.projection_dim, hc.hidden_act
        else:
            hc = CLIPVisionConfig(
                hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                patch_size=cfg.patch_size, image_size=max(cfg.input_size),  # square table on the long side
                projection_dim=cfg.proj_dim, attention_dropout=cfg.dropout, hidden_act=cfg.hidden_act,
            )
            self.clip = CLIPVisionModelWithProjection(hc)
        self._interpolate = tuple(cfg.input_size) != (hc.image_size, hc.image_size)
        self.text_proj = nn.Linear(cfg.text_dim, cfg.proj_dim, bias=False)
        nn.init.normal_(self.text_proj.weight, std=cfg.text_dim ** -0.5)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))  # CLIP's initial temperature
        if cfg.image_mean is not None:
            self.register_buffer("mean", torch.tensor(cfg.image_mean).view(1, 3, 1, 1), persistent=False)
            self.register_buffer("std", torch.tensor(cfg.image_std).view(1, 3, 1, 1), persistent=False)

    @property
    def n_visual(self) -> int:
        return self.cfg.n_visual

    @property
    def d_visual(self) -> int:
        return self.cfg.hidden_size

    @property
    def embed_dim(self) -> int:
        return self.cfg.proj_dim

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) in [-1, 1] -> pixel values at `input_size` (normalised for a pretrained CLIP)."""
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"VisionTower expects images (B, 3, H, W), got {tuple(images.shape)}")
        x = images.float()
        if tuple(x.shape[-2:]) != self.cfg.input_size:
            x = F.interpolate(x, size=self.cfg.input_size, mode="bilinear", align_corners=False,
                              antialias=True)  # (B, 3, h, w)
        if self.cfg.image_mean is not None:
            x = ((x + 1) / 2 - self.mean) / self.std
        return x

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward -> (patch tokens (B, n_visual, d_v), normalised embedding (B, proj_dim))."""
        out = self.clip(pixel_values=self.preprocess(images), output_hidden_states=True,
                        interpolate_pos_encoding=self._interpolate)
        tokens = out.hidden_states[self.cfg.feature_layer][:, 1:]  # (B, n_visual, d_v), CLS dropped
        emb = F.normalize(out.image_embeds.float(), dim=-1)  # (B, proj_dim)
        return tokens, emb

    def patch_tokens(self, images: torch.Tensor) -> torch.Tensor:
        """f_v: penultimate-layer patch tokens, CLS dropped. (B, 3, H, W) -> (B, n_visual, d_v)."""
        return self.encode(images)[0]

    def embed_images(self, images: torch.Tensor) -> torch.Tensor:
        """Normalised pooled image embedding (B, proj_dim), for contrastive loss and CLIP-I/-T."""
        return self.encode(images)[1]

    def embed_text_features(self, sentence_embs: torch.Tensor) -> torch.Tensor:
        """Frozen sentence embeddings (B, text_dim) -> normalised joint-space embeddings (B, proj_dim)."""
        return F.normalize(self.text_proj(sentence_embs.float()).float(), dim=-1)

    def contrastive_loss(self, img_emb: torch.Tensor, txt_emb: torch.Tensor,
                         groups: list[str] | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Symmetric InfoNCE. `groups` (e.g. the captions): items with equal keys are all positives
        of each other (soft targets), since world captions repeat inside a batch and treating a
        duplicate as a negative would push identical content apart."""
        scale = self.logit_scale.clamp(max=math.log(100.0)).exp()
        logits = scale * img_emb @ txt_emb.t()  # (B, B)
        b = logits.shape[0]
        if groups is None:
            same = torch.eye(b, dtype=torch.bool, device=logits.device)
        else:
            ids = {g: i for i, g in enumerate(dict.fromkeys(groups))}
            gid = torch.tensor([ids[g] for g in groups], device=logits.device)
            same = gid[:, None] == gid[None, :]  # (B, B)
        target = same.float() / same.float().sum(1, keepdim=True)  # rows sum to 1; symmetric matrix
        loss_i = -(target * logits.log_softmax(1)).sum(1).mean()
        loss_t = -(target * logits.t().log_softmax(1)).sum(1).mean()
        loss = (loss_i + loss_t) / 2
        with torch.no_grad():
            acc = same[torch.arange(b), logits.argmax(1)].float().mean().item()
        return loss, {"acc_i2t": acc, "temp": float(1 / scale.item())}

    # -- persistence ----------------------------------------------------------------------------
    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = torch.float16) -> Path:
        """Write `vision_tower.safetensors` (fp16 by default) + `vision_tower.json` into `directory`."""
        directory = Path(directory)
        sd = state_dict_to_dtype(self.state_dict(), dtype)
        save_safetensors_atomic(sd, directory / WEIGHTS_NAME)
        cfg = self.cfg.to_dict()
        cfg["pretrained_path"] = None  # the weights are in this file now
        save_json_atomic({"format_version": FORMAT_VERSION, **cfg}, directory / CONFIG_NAME)
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device = "cpu") -> "VisionTower":
        directory = Path(directory)
        cfg = VisionTowerConfig.from_dict(load_json(directory / CONFIG_NAME))
        model = cls(cfg)
        model.load_state_dict(load_safetensors(directory / WEIGHTS_NAME), strict=True)
        return model.to(device).eval()
