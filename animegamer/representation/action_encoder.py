"""E_a: the action-aware multimodal representation s_a of one animation shot.

Paper (AnimeGamer, sec. 3.1): the motion description f_md (T5 tokens of "softly talk") and the
visual reference f_v (CLIP tokens of the shot's FIRST frame) each pass through a 2-layer MLP and
a LayerNorm, and the two streams are CONCATENATED ALONG THE TOKEN AXIS (30 + 196 = 226 tokens x
1920). Concatenation beats addition and cross-attention in the paper's ablation, so it is the
only mode here. The unconditional branch for classifier-free guidance is E_a applied to all-zero
inputs (``ActionEncoder.null``), exactly as the paper does, not a learned null token.

``ActionRepresentation`` bundles the frozen encoders (vision tower, text encoder) with E_a so the
engine (phase b) and the evaluation compute the same s_a the decoder was trained on.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

import torch
from torch import nn


@dataclass
class ActionEncoderConfig:
    d_text_in: int = 384  # MiniLM token width (T5-XXL: 4096 at paper scale)
    d_visual_in: int = 256  # vision tower width d_v (OpenCLIP ViT-B-16: 768)
    n_text: int = 16  # motion-description tokens (paper: 30)
    n_visual: int = 48  # visual reference tokens (paper: 196)
    d_model: int = 384  # s_a width = the decoder's condition width (paper: 1920)
    norm_eps: float = 1e-5
    # the MLPs' GELU: "tanh" (trained here) | "none" (exact erf: the published release's E_a, nn.GELU())
    gelu: str = "tanh"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for name in ("d_text_in", "d_visual_in", "n_text", "n_visual", "d_model"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"ActionEncoderConfig.{name} must be a positive int, got {value!r}")
        if self.gelu not in ("tanh", "none"):
            raise ValueError(f"ActionEncoderConfig.gelu must be 'tanh' or 'none', got {self.gelu!r}")

    @property
    def n_tokens(self) -> int:
        return self.n_text + self.n_visual

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Stream(nn.Module):
    """2-layer MLP then LayerNorm: the per-stream projection of E_a."""

    def __init__(self, d_in: int, d_model: int, eps: float, gelu: str = "tanh") -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_model)
        self.act = nn.GELU(approximate=gelu)
        self.fc2 = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.fc2(self.act(self.fc1(x))))  # (B, n, d_model)


class ActionEncoder(nn.Module):
    """E_a: ``forward(f_md, f_v) -> s_a`` with s_a = concat_tokens(MLP_t(f_md), MLP_v(f_v))."""

    def __init__(self, config: ActionEncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.text = _Stream(config.d_text_in, config.d_model, config.norm_eps, config.gelu)
        self.visual = _Stream(config.d_visual_in, config.d_model, config.norm_eps, config.gelu)

    def forward(self, f_md: torch.Tensor, f_v: torch.Tensor) -> torch.Tensor:
        c = self.config
        if f_md.shape[1:] != (c.n_text, c.d_text_in):
            raise ValueError(f"f_md must be (B, {c.n_text}, {c.d_text_in}), got {tuple(f_md.shape)}")
        if f_v.shape[1:] != (c.n_visual, c.d_visual_in):
            raise ValueError(f"f_v must be (B, {c.n_visual}, {c.d_visual_in}), got {tuple(f_v.shape)}")
        text = self.text(f_md)  # (B, n_text, D)
        visual = self.visual(f_v)  # (B, n_visual, D)
        return torch.cat([text, visual], dim=1)  # (B, N = n_text + n_visual, D)

    def null(self, batch_size: int) -> torch.Tensor:
        """The unconditional s_a: E_a applied to all-zero inputs (the paper's CFG branch)."""
        c = self.config
        p = self.text.fc1.weight
        f_md = torch.zeros(batch_size, c.n_text, c.d_text_in, device=p.device, dtype=p.dtype)
        f_v = torch.zeros(batch_size, c.n_visual, c.d_visual_in, device=p.device, dtype=p.dtype)
        return self(f_md, f_v)  # (B, N, D)


class _VisionTowerLike(Protocol):
    def patch_tokens(self, images: torch.Tensor) -> torch.Tensor: ...


class _TextEncoderLike(Protocol):
    def token_states(self, texts: list[str], n_text: int) -> tuple[torch.Tensor, torch.Tensor]: ...


def masked_text_states(states: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Zero the padding positions of f_md so padding carries no signal (and matches the null input)."""
    if mask is None:
        return states
    return states * mask.to(states.dtype).unsqueeze(-1)  # (B, n_text, d)


def pick_reference_frames(
    frames: torch.Tensor, random_frame: bool = False, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The visual reference of each shot: its FIRST frame (paper), or a random one (the ablation).

    frames: (B, T, 3, H, W) -> (B, 3, H, W)
    """
    if not random_frame:
        return frames[:, 0]
    b, t = frames.shape[:2]
    idx = torch.randint(0, t, (b,), generator=generator)
    return frames[torch.arange(b), idx.to(frames.device)]


class ActionRepresentation(nn.Module):
    """Frozen vision tower + frozen text encoder + trainable E_a -> s_a of a shot.

    ``encode(first_frames, motion_texts)`` is the regression target of the engine (phase b) and the
    condition of the decoder. ``random_frame=True`` draws the visual reference from a random frame
    of the shot instead of the first one (the paper's "w/ random frame" ablation).
    """

    def __init__(
        self,
        vision_tower: _VisionTowerLike,
        text_encoder: _TextEncoderLike,
        action_encoder: ActionEncoder,
        random_frame: bool = False,
    ) -> None:
        super().__init__()
        self.vision_tower = vision_tower
        self.text_encoder = text_encoder
        self.action_encoder = action_encoder
        self.random_frame = random_frame

    @torch.no_grad()
    def features(
        self, first_frames: torch.Tensor, motion_texts: list[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The frozen inputs of E_a: (f_md (B, n_text, d_t), f_v (B, n_visual, d_v))."""
        f_v = self.vision_tower.patch_tokens(first_frames).float()  # (B, n_visual, d_v)
        return self.text_features(motion_texts), f_v

    @torch.no_grad()
    def text_features(self, motion_texts: list[str]) -> torch.Tensor:
        """E_a's frozen text input f_md (B, n_text, d_t): the text encoder's token states, padding zeroed."""
        states, mask = self.text_encoder.token_states(list(motion_texts), self.action_encoder.config.n_text)
        return masked_text_states(states.float(), mask)

    def encode(self, first_frames: torch.Tensor, motion_texts: list[str]) -> torch.Tensor:
        """first_frames (B, 3, H, W) in [-1, 1], motion texts -> s_a (B, N, D)."""
        f_md, f_v = self.features(first_frames, motion_texts)
        p = next(self.action_encoder.parameters())
        return self.action_encoder(f_md.to(p), f_v.to(p))  # (B, N, D)

    @torch.no_grad()
    def encode_text(self, motion_texts: list[str]) -> torch.Tensor:
        """Motion texts -> s_a's text tokens (B, n_text, D): E_a's text stream reads the text alone."""
        p = next(self.action_encoder.parameters())
        return self.action_encoder.text(self.text_features(motion_texts).to(p))  # (B, n_text, D)

    def encode_shots(
        self, frames: torch.Tensor, motion_texts: list[str], generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Whole shots (B, T, 3, H, W) -> s_a, using the first (or a random) frame as reference."""
        ref = pick_reference_frames(frames, self.random_frame, generator)  # (B, 3, H, W)
        return self.encode(ref, motion_texts)
