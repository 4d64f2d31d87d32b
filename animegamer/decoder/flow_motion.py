"""Motion as flow: a second network draws where each pixel of a shot comes from in its first picture,
and the real picture is moved along it.

Why (a deliberate deviation from the paper's decoder, ``SamplerConfig.flow_motion``; the design of
latent-flow diffusion for image-to-video, LFDM): nearly every shot the game shows starts from a real
picture (a visual anchor of the bank, the picture a persisting scene continues, a player's character
rendered by the world), but the picture decoder (a 10 M-parameter transformer trained on a CPU budget)
moves such a picture little: verbs that are a movement (dance, jump, fall) are never seen, and fast
shots dissolve into texture, because it must draw every moved pixel of every frame anew. Moving the
TRUE first frame of held-out world shots along their own DIS flow, sampled at the decoder's latent grid,
keeps who is on screen and shows the verb nearly as often as the true shots do (docs/results.md#the-shot-decoder-flow-motion).
A flow field is smooth and low-dimensional: a small network can learn to draw it where it cannot learn to
draw the moved pixels.

The layout: the flow of frame k back to frame 0 (in pixels of the autoencoder's latent grid) takes
``FLOW_CHANNELS`` of the autoencoder's per-frame latent channels; the rest are zero. Frames are packed in
time exactly like the autoencoder's latents (``models.autoencoder.pack_time``), so the motion network has
the picture decoder's shapes, starts from its weights, and samples with the same sampler.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import cv2
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
from animegamer.core.runs import MOTION_CONFIG
from animegamer.decoder.diffusion import DiffusionConfig
from animegamer.decoder.network import DecoderConfig, DecoderNet
from animegamer.decoder.sampler import SamplerConfig, sample
from animegamer.models.autoencoder import pack_time, unpack_time

FLOW_CHANNELS = 2  # (dx, dy): where the pixel of frame k is in frame 0
MOTION_FORMAT = "animegamer-flow-motion"
MOTION_FORMAT_VERSION = 1
MOTION_WEIGHTS = "motion.safetensors"
SHARED_PREFIX = "action_encoder."  # E_a: the picture decoder's, not stored twice
DELTA_A, DELTA_B = ".delta_a", ".delta_b"  # a weight stored as a low-rank difference from the picture decoder's


def _gray(frame: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)


def flows_to_first(frames: np.ndarray) -> np.ndarray:
    """uint8 (T, H, W, 3) -> float32 (T, H, W, 2): where each pixel of frame k is in frame 0, in pixels
    (frame 0: zeros). Chained frame to frame (k -> k-1, then k-1 -> 0 looked up where k lands), since
    DIS loses a fast shot's large displacements from the last frame straight back to the first."""
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"flows_to_first: frames must be uint8 (T, H, W, 3), got {frames.dtype} {frames.shape}")
    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
    grays = [_gray(f) for f in frames]
    h, w = grays[0].shape
    xs, ys = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    out = np.zeros((len(frames), h, w, 2), np.float32)
    for k in range(1, len(frames)):
        step = dis.calc(grays[k], grays[k - 1], None)  # (H, W, 2): frame k -> frame k-1
        back = cv2.remap(out[k - 1], xs + step[..., 0], ys + step[..., 1], cv2.INTER_LINEAR,
                         borderMode=cv2.BORDER_REPLICATE)  # frame k-1 -> frame 0, where k's pixels land
        out[k] = step + back
    return out


def warp_picture(picture: np.ndarray, flows: np.ndarray) -> np.ndarray:
    """uint8 picture (H, W, 3) moved along flows (T, H, W, 2) -> uint8 frames (T, H, W, 3). Pixels whose
    source lies outside the picture take its nearest edge (a pan reveals no new scenery)."""
    if picture.ndim != 3 or picture.dtype != np.uint8 or flows.shape[1:3] != picture.shape[:2] or flows.shape[-1] != 2:
        raise ValueError(f"warp_picture: a uint8 (H, W, 3) picture and (T, H, W, 2) flows of its size, got "
                         f"{picture.dtype} {picture.shape} and {flows.shape}")
    h, w = picture.shape[:2]
    xs, ys = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    # bicubic: a moved picture is resampled once per frame, and bilinear loses a quarter of its edge energy
    return np.stack([cv2.remap(picture, xs + f[..., 0], ys + f[..., 1], cv2.INTER_CUBIC,
                               borderMode=cv2.BORDER_REPLICATE) for f in flows.astype(np.float32)])


class FlowCodec:
    """Flows <-> the packed latent layout of the shot autoencoder (B, F, r*C, h, w).

    ``encode`` has the autoencoder's signature (frames (B, T, 3, H, W) in [-1, 1]), so a feature cache of
    flows is built by the same code as a cache of latents (``training.shot_cache.build_cache``)."""

    def __init__(self, spatial_ratio: int, temporal_ratio: int, channels_per_frame: int) -> None:
        if channels_per_frame < FLOW_CHANNELS:
            raise ValueError(f"FlowCodec: a flow needs {FLOW_CHANNELS} channels per frame, the layout has "
                             f"{channels_per_frame}")
        self.spatial_ratio, self.temporal_ratio, self.channels = spatial_ratio, temporal_ratio, channels_per_frame

    @classmethod
    def for_autoencoder(cls, autoencoder) -> "FlowCodec":
        return cls(autoencoder.spatial_ratio, autoencoder.temporal_ratio, autoencoder.cfg.latent_channels)

    def pack(self, flows: np.ndarray) -> torch.Tensor:
        """Pixel flows (T, H, W, 2) -> packed (F, r*C, H/s, W/s) in pixels of the latent grid."""
        t, h, w, _ = flows.shape
        s = self.spatial_ratio
        small = np.stack([cv2.resize(f, (w // s, h // s), interpolation=cv2.INTER_AREA) for f in flows]) / s
        z = torch.zeros((1, t, self.channels, h // s, w // s))
        z[0, :, :FLOW_CHANNELS] = torch.from_numpy(small).permute(0, 3, 1, 2)  # (T, 2, h, w)
        return pack_time(z, self.temporal_ratio)[0]

    def unpack(self, latents: torch.Tensor, size: tuple[int, int], smooth: float = 0.0) -> np.ndarray:
        """Packed (B, F, r*C, h, w) -> pixel flows (B, T, H, W, 2) at ``size`` = (H, W); frame 0 is zero.
        ``smooth``: a Gaussian of that many latent-grid cells over each frame's flow first."""
        per_frame = unpack_time(latents.float().cpu(), self.temporal_ratio)[:, :, :FLOW_CHANNELS]  # (B, T, 2, h, w)
        small = per_frame.permute(0, 1, 3, 4, 2).numpy() * self.spatial_ratio  # (B, T, h, w, 2)
        if smooth > 0:
            small = np.stack([np.stack([cv2.GaussianBlur(f, (0, 0), smooth, borderType=cv2.BORDER_REPLICATE)
                                        for f in shot]) for shot in small])
        h, w = size
        out = np.stack([np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_LINEAR) for f in shot])
                        for shot in small]).astype(np.float32)
        out[:, 0] = 0.0
        return out

    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        """Frames (B, T, 3, H, W) in [-1, 1] -> their packed flows (B, F, r*C, h, w)."""
        shots = ((frames.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).movedim(-3, -1).numpy()
        return torch.stack([self.pack(flows_to_first(shot)) for shot in shots])


def weights_digest(module: nn.Module) -> str:
    """A fingerprint of a module's weights at fp16 (what a packed model stores): the motion network was
    trained with one E_a, and only a picture decoder with the same one reads s_a as it does."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().half().contiguous().numpy().tobytes() if t.is_floating_point() else
                 t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class FlowMotion(nn.Module):
    """The motion network: s_a + motion level -> the flows of a shot from its first picture.

    A ``DecoderNet`` of the picture decoder's shapes trained (``train motion``) on the packed flows of true
    shots instead of their latents; E_a is the picture decoder's own, frozen, so the engine's s_a fit both.
    ``diffusion`` carries the flows' normalisation and the noise prior, ``sampler`` how to draw them.
    On disk (``shot_decoder/motion/``): ``motion.json`` + ``motion.safetensors`` without E_a's weights."""

    def __init__(self, net: DecoderNet, diffusion: DiffusionConfig, sampler: SamplerConfig | None = None,
                 smooth: float = 0.0, max_scale: float | None = None, rank: int | None = None) -> None:
        super().__init__()
        self.net, self.diffusion = net, diffusion
        self.sampler = sampler or SamplerConfig(steps=6, guidance=1.0)
        # The drawn flows are rougher than true ones (neighbouring cells disagree, and the picture tears):
        # a Gaussian of ``smooth`` latent-grid cells over each frame's flow keeps the motion and loses the tears.
        # ``max_scale``: the most the motion control may stretch a shot's flows (None: the sampler's cap);
        # a stretched flow moves the picture further, it does not dissolve it as stretched latents do.
        if smooth < 0 or (max_scale is not None and not 0 < max_scale <= 4):
            raise ValueError(f"FlowMotion: smooth must be >= 0 and max_scale in (0, 4], got {smooth}, {max_scale}")
        self.smooth, self.max_scale = float(smooth), max_scale
        if rank is not None and rank < 1:
            raise ValueError(f"FlowMotion: rank must be >= 1 or None, got {rank}")
        self.rank = rank  # None: stored whole; else as a rank-``rank`` difference from the picture decoder
        self.eval()

    @torch.no_grad()
    def sample_flows(self, s_a: torch.Tensor, motion_level: torch.Tensor | None, codec: FlowCodec,
                     size: tuple[int, int], generator: torch.Generator | None = None,
                     sampler: SamplerConfig | None = None) -> np.ndarray:
        """s_a (B, N, D) -> pixel flows (B, T, H, W, 2) at ``size`` = (H, W)."""
        device = next(self.net.parameters()).device
        latents = sample(self.net, s_a.to(device, torch.float32), motion_level, generator, self.diffusion,
                         sampler or self.sampler)
        return codec.unpack(latents, size, self.smooth)

    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = None,
                        base: DecoderNet | None = None) -> Path:
        """Write ``motion.json`` + ``motion.safetensors``. E_a is never stored (the picture decoder's). With
        ``base`` (the picture decoder's net it was trained from) and ``self.rank``, each large weight is
        stored as its difference from ``base`` truncated to that rank (an SVD, as LoRA factors): a fine-tune
        of the whole network in a few MB."""
        cfg = self.net.config.to_dict() | {"pretrained_path": None}
        meta = {"format": MOTION_FORMAT, "format_version": MOTION_FORMAT_VERSION, "decoder": cfg,
                "diffusion": self.diffusion.to_dict(), "sampler": self.sampler.to_dict(), "layout": "flow",
                "action_encoder": weights_digest(self.net.action_encoder), "smooth": self.smooth,
                "max_scale": self.max_scale}
        weights = {k: v for k, v in self.net.state_dict().items() if not k.startswith(SHARED_PREFIX)}
        if base is not None and self.rank:
            weights = low_rank_delta(weights, base.state_dict(), self.rank)
            meta["delta"] = {"rank": self.rank, "base": weights_digest(base)}
        with atomic_dir(directory) as tmp:
            save_safetensors_atomic(state_dict_to_dtype(weights, dtype), tmp / MOTION_WEIGHTS)
            save_json_atomic(meta, tmp / MOTION_CONFIG)
        return Path(directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path, base: DecoderNet) -> "FlowMotion":
        """Load from ``directory`` with E_a (and, for a stored difference, every weight's base) taken from the
        picture decoder's net ``base``."""
        directory = Path(directory)
        meta = load_json(directory / MOTION_CONFIG)
        if meta.get("format") != MOTION_FORMAT or meta.get("format_version") != MOTION_FORMAT_VERSION:
            raise ValueError(f"{directory}: expected {MOTION_FORMAT} v{MOTION_FORMAT_VERSION}, found "
                             f"{meta.get('format')} v{meta.get('format_version')}")
        delta = meta.get("delta")
        if meta.get("action_encoder") != weights_digest(base.action_encoder) or (
                delta and delta["base"] != weights_digest(base)):
            raise ValueError(f"{directory}: this motion network belongs to another picture decoder than the one it is "
                             "loaded with (train it again with `train motion --init` this decoder)")
        net = DecoderNet(DecoderConfig.from_dict(meta["decoder"]))
        sd = {k: v.float() for k, v in load_safetensors(directory / MOTION_WEIGHTS).items()}
        if delta:
            sd = apply_low_rank_delta(sd, base.state_dict())
        shared = {k: v for k, v in base.state_dict().items() if k.startswith(SHARED_PREFIX)}
        net.load_state_dict(sd | shared, strict=True)
        return cls(net, DiffusionConfig.from_dict(meta["diffusion"]), SamplerConfig.from_dict(meta["sampler"]),
                   meta.get("smooth", 0.0), meta.get("max_scale"), delta["rank"] if delta else None)


def low_rank_delta(weights: dict[str, torch.Tensor], base: dict[str, torch.Tensor],
                   rank: int) -> dict[str, torch.Tensor]:
    """Each weight of 2 or more dimensions whose sides both exceed 2 x ``rank`` as the two factors of its
    difference from ``base`` truncated to ``rank`` (``NAME.delta_a`` (out, r), ``NAME.delta_b`` (r, in...));
    the others as they are."""
    out: dict[str, torch.Tensor] = {}
    for k, w in weights.items():
        d = w.float() - base[k].float() if k in base and base[k].shape == w.shape else None
        if d is None or w.dim() < 2 or min(d.shape[0], d[0].numel()) <= 2 * rank:
            out[k] = w
            continue
        u, sv, vh = torch.linalg.svd(d.flatten(1), full_matrices=False)
        out[f"{k}{DELTA_A}"] = (u[:, :rank] * sv[:rank]).contiguous()
        out[f"{k}{DELTA_B}"] = vh[:rank].reshape(rank, *d.shape[1:]).contiguous()
    return out


def apply_low_rank_delta(stored: dict[str, torch.Tensor], base: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of ``low_rank_delta``: full weights from the stored factors and ``base``."""
    out = {k: v for k, v in stored.items() if not k.endswith((DELTA_A, DELTA_B))}
    for k in stored:
        if k.endswith(DELTA_A):
            name = k[: -len(DELTA_A)]
            a, b = stored[k].float(), stored[f"{name}{DELTA_B}"].float()
            out[name] = base[name].float() + (a @ b.flatten(1)).reshape(base[name].shape)
    return out
