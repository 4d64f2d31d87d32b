"""Pixel and state metrics of the evaluation table (no learned model involved).

Everything here compares one generated shot with its ground truth. The clips are first put on
a common footing (``align_clips``): the generated frames are resized to the true frame size and
both clips are subsampled to the same number of frames, so a model that renders fewer or
smaller frames than the world is still graded on the world's terms.

PSNR, SSIM and MS-SSIM are a stand-in for the paper's DreamSim (a learned perceptual similarity we cannot
ship offline): they measure pixel / structure agreement with the true shot, which is stricter
than DreamSim about small shifts and blind to semantics.
"""
from __future__ import annotations

import functools
import math

import cv2
import numpy as np
import pytorch_msssim
import torch

from animegamer.world.flow import MotionQuantizer, flow_magnitude
from animegamer.world.rules import STATE_NAMES

__all__ = ["align_clips", "psnr", "ssim", "ms_ssim", "MS_SSIM_MIN_SIDE", "pixel_scores", "motion_level_from_pixels", "mean_abs_error", "finite_mean"]

def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0**2 / max(mse, 1e-10)))


# MS-SSIM scales: the standard 5-scale, 11-px-window MS-SSIM needs frames of at least 161 px; the
# world's 96-px frames allow a 5-px window (pytorch_msssim asserts side > 16 x (window - 1)) and
# 4 scales (the last is 12 px), weighted by the first 4 standard weights, renormalised.
_MS_WINDOW = 5
_MS_WEIGHTS = [0.0448, 0.2856, 0.3001, 0.2363]
MS_SSIM_MIN_SIDE = 16 * (_MS_WINDOW - 1) + 1  # smaller frames get no MS-SSIM (None in the table)


def align_clips(gen: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both clips as uint8 (T, H, W, 3) with the true clip's H x W and the smaller frame count,
    frames picked evenly over each clip (first and last frames always kept), so clips of
    different lengths or sizes can be compared frame by frame."""
    for name, x in (("generated", gen), ("true", true)):
        if x.ndim != 4 or x.shape[-1] != 3 or x.shape[0] < 1:
            raise ValueError(f"{name} clip must be (T, H, W, 3), got {x.shape}")
    t = min(len(gen), len(true))
    pick = lambda x: x[np.linspace(0, len(x) - 1, t).round().astype(int)]  # noqa: E731
    gen, true = pick(gen), pick(true)
    h, w = true.shape[1:3]
    if gen.shape[1:3] != (h, w):
        shrink = gen.shape[1] > h
        interp = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
        gen = np.stack([cv2.resize(np.ascontiguousarray(f), (w, h), interpolation=interp) for f in gen])
    return np.ascontiguousarray(gen, dtype=np.uint8), np.ascontiguousarray(true, dtype=np.uint8)


def _as_batch(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x)).permute(0, 3, 1, 2).double()  # (T, 3, H, W), 0..255


def _check_pair(name: str, a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape or a.ndim != 4 or a.shape[-1] != 3:
        raise ValueError(f"{name} needs aligned (T, H, W, 3) clips of one shape, got {a.shape} and {b.shape}")


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM (Wang et al. 2004: 11-px Gaussian window, sigma 1.5) over frames and RGB channels
    of two aligned uint8 clips (T, H, W, 3); 1 = identical. Computed by pytorch_msssim."""

    _check_pair("ssim", a, b)
    return float(pytorch_msssim.ssim(_as_batch(a), _as_batch(b), data_range=255, size_average=True))


def ms_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean multi-scale SSIM of two aligned uint8 clips (T, H, W, 3) with at least 65-px sides
    (4 scales, 5-px window, see _MS_WEIGHTS); 1 = identical. Computed by pytorch_msssim."""

    _check_pair("ms_ssim", a, b)
    if min(a.shape[1:3]) < MS_SSIM_MIN_SIDE:
        raise ValueError(f"ms_ssim needs frames of at least {MS_SSIM_MIN_SIDE} px, got {a.shape[1:3]}")
    return float(pytorch_msssim.ms_ssim(_as_batch(a), _as_batch(b), data_range=255, size_average=True,
                                        win_size=_MS_WINDOW, weights=_MS_WEIGHTS))


def pixel_scores(g: np.ndarray, t: np.ndarray) -> dict[str, float | None]:
    """PSNR, SSIM and MS-SSIM (None for frames below MS_SSIM_MIN_SIDE) of two aligned clips: the
    DreamSim stand-ins of the tables."""
    big_enough = min(t.shape[1:3]) >= MS_SSIM_MIN_SIDE
    return {"psnr": psnr(g, t), "ssim": ssim(g, t), "ms_ssim": ms_ssim(g, t) if big_enough else None}


def motion_level_from_pixels(frames: np.ndarray, quantizer: MotionQuantizer) -> tuple[int, float]:
    """(level 1..5, flow magnitude) of a clip, measured exactly as the world labels its data
    (DIS flow relative to the background, the fitted thresholds): ACC-F from what the player sees."""
    if len(frames) < 2:
        return 1, 0.0
    mag = flow_magnitude(np.ascontiguousarray(frames))
    return quantizer.level(mag), mag


def mean_abs_error(pred: dict[str, int], true: dict[str, int]) -> float:
    """Mean over stamina / social / entertainment of |pred - true| (deltas or absolute states)."""
    return float(np.mean([abs(int(pred[k]) - int(true[k])) for k in STATE_NAMES]))


def finite_mean(values: list) -> float | None:
    """Mean of the values that are numbers (None and NaN skipped); None if there are none."""
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return float(np.mean(xs)) if xs else None


NEW_CONTENT_THRESHOLD = 60  # of 255, in any channel


@functools.lru_cache(maxsize=1)
def _dis_medium() -> cv2.DISOpticalFlow:
    """One reusable DIS of the medium preset a process (issue 44's definition; world/flow.py reads levels with FAST)."""
    return cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)


def new_content(frames: np.ndarray, threshold: int = NEW_CONTENT_THRESHOLD) -> float | None:
    """uint8 (T, H, W, 3) -> for t = 2, 4, ..., T-1: frame 0 warped onto frame t along DIS optical flow
    (medium preset, computed from t to 0, bilinear, border replicated), the share of pixels still off by
    more than ``threshold`` in any channel; the mean over t. A picture moved along a flow scores near 0.
    None for shots DIS cannot read (under 3 frames, or frames under 12 pixels a side)."""
    if len(frames) < 3 or min(frames.shape[1:3]) < 12:
        return None
    grey = [cv2.cvtColor(np.ascontiguousarray(f), cv2.COLOR_RGB2GRAY) for f in frames]
    h, w = grey[0].shape
    gx, gy = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    shares = []
    for t in range(2, len(frames), 2):
        flow = _dis_medium().calc(grey[t], grey[0], None)  # (H, W, 2): where each pixel of frame t is in frame 0
        warped = cv2.remap(frames[0], gx + flow[..., 0], gy + flow[..., 1], cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REPLICATE)
        off = np.abs(warped.astype(np.int16) - frames[t].astype(np.int16)).max(axis=-1) > threshold
        shares.append(float(off.mean()))
    return float(np.mean(shares))
