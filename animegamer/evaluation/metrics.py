"""Pixel and state metrics of the evaluation table (no learned model involved).

Everything here compares one generated shot with its ground truth. The clips are first put on
a common footing (``align_clips``): the generated frames are resized to the true frame size and
both clips are subsampled to the same number of frames, so a model that renders fewer or
smaller frames than the world is still graded on the world's terms.

PSNR and SSIM are a stand-in for the paper's DreamSim (a learned perceptual similarity we cannot
ship offline): they measure pixel / structure agreement with the true shot, which is stricter
than DreamSim about small shifts and blind to semantics.
"""
from __future__ import annotations

import math

import cv2
import numpy as np

from animegamer.models.benchmark_decoder import psnr
from animegamer.world.flow import MotionQuantizer, flow_magnitude
from animegamer.world.rules import STATE_NAMES

__all__ = ["align_clips", "psnr", "ssim", "motion_level_from_pixels", "mean_abs_error", "finite_mean"]

# SSIM constants of Wang et al. 2004 for 8-bit images: 11 x 11 Gaussian window, sigma 1.5.
_C1 = (0.01 * 255) ** 2
_C2 = (0.03 * 255) ** 2


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


def _ssim_frame(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    blur = lambda x: cv2.GaussianBlur(x, (11, 11), 1.5, borderType=cv2.BORDER_REFLECT)  # noqa: E731
    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a**2
    var_b = blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    s = ((2 * mu_a * mu_b + _C1) * (2 * cov + _C2)) / ((mu_a**2 + mu_b**2 + _C1) * (var_a + var_b + _C2))
    return float(s.mean())


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM over frames and RGB channels of two aligned uint8 clips (T, H, W, 3); 1 = identical."""
    if a.shape != b.shape:
        raise ValueError(f"ssim needs aligned clips of one shape, got {a.shape} and {b.shape}")
    return float(np.mean([_ssim_frame(x, y) for x, y in zip(a, b)]))


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
