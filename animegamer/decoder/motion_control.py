"""Per-shot motion control: the decoded shot's flow steers its motion scale to the level asked for.

A motion scale per level (``SamplerConfig.motion_scale_by_level``) sets how much the sampled latents'
frame-to-frame part is amplified, but one scale cannot serve every shot of a level: drawn from a
real frame, the same level-2 scale reads as level 1 on one picture and level 3 on another, and a
fast shot that starts from a calm frame stays below level 4 at the scale that keeps the others
whole. So each shot is measured as the world labels its data (DIS flow relative to the background,
the fitted thresholds of ``world/flow.py``) and, where it reads another level than asked, its scale
is corrected toward the middle of that level's band and the latents decoded again, at most
``TRIES`` times. A shot that already reads its level is returned untouched; of the attempts, the one
nearest the level's band is kept. The scale only stretches or damps what the network drew: it
cannot make a still picture move.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import torch

from animegamer.decoder.sampler import scale_motion
from animegamer.world.flow import MotionQuantizer, flow_magnitude

TRIES = 2  # re-decodes per shot at most: each costs one autoencoder decode and one flow


@lru_cache(maxsize=1)
def world_quantizer() -> MotionQuantizer:
    """The thresholds the world's data (and the evaluation) read a level with."""
    return MotionQuantizer.load()


def target_flow(level: int, thresholds: tuple[float, ...]) -> float:
    """The flow a shot of ``level`` aims at: the geometric middle of its band (half the first
    threshold for level 1, a quarter above the last for the open top level)."""
    if level <= 1:
        return thresholds[0] / 2
    if level >= len(thresholds) + 1:
        return thresholds[-1] * 1.25
    return math.sqrt(thresholds[level - 2] * thresholds[level - 1])


def band_distance(flow: float, level: int, thresholds: tuple[float, ...]) -> float:
    """0 inside the level's band, else how far outside it, in log flow."""
    low = thresholds[level - 2] if level >= 2 else 0.0
    high = thresholds[level - 1] if level <= len(thresholds) else math.inf
    flow = max(flow, 1e-6)
    if flow < low:
        return math.log(low / flow)
    if flow > high:
        return math.log(flow / high)
    return 0.0


def control_motion(latents: torch.Tensor, frames: np.ndarray, levels: torch.Tensor, base_scale: torch.Tensor,
                   max_scale: float, decode: Callable[[torch.Tensor], np.ndarray], frame_groups: int = 1,
                   quantizer: MotionQuantizer | None = None) -> np.ndarray:
    """Frames (B, T, H, W, 3) uint8 of ``latents`` (B, F, C', h, w) with every shot that reads another
    level than ``levels`` (B,) re-decoded at a corrected motion scale. ``base_scale`` (B,): the scale
    the latents were drawn with; the total scale stays within [0, ``max_scale``]. ``decode`` maps
    latents (1, F, C', h, w) to uint8 frames (1, T, H, W, 3)."""
    out = frames.copy()
    for i in range(len(frames)):
        def render(relative: float, i: int = i) -> np.ndarray:
            return decode(scale_motion(latents[i:i + 1], torch.tensor([relative]), frame_groups))[0]
        out[i] = steer(frames[i], int(levels[i]), max_scale / max(float(base_scale[i]), 1e-6), render, quantizer)
    return out


def steer(frames: np.ndarray, level: int, max_relative: float, render: Callable[[float], np.ndarray],
          quantizer: MotionQuantizer | None = None) -> np.ndarray:
    """One shot (T, H, W, 3) drawn at relative motion scale 1, steered toward ``level``: ``render(r)``
    draws it again with its motion scaled by r (at most ``max_relative``); the attempt whose flow is
    nearest the level's band is returned (the shot itself when it already reads the level)."""
    quantizer = quantizer or world_quantizer()
    thresholds = quantizer.thresholds
    target = target_flow(level, thresholds)
    flow = flow_magnitude(frames)
    relative, best, out = 1.0, band_distance(flow, level, thresholds), frames
    for _ in range(TRIES):
        if quantizer.level(flow) == level or flow <= 0:
            break
        # the flow grows about in proportion to the scale of the motion
        wanted = min(relative * target / flow, max_relative)
        if abs(wanted - relative) < 1e-3:
            break  # at the bound already: nothing more to try
        relative = wanted
        candidate = render(relative)
        flow = flow_magnitude(candidate)
        distance = band_distance(flow, level, thresholds)
        if distance < best:
            best, out = distance, candidate
    return out
