"""Motion level from pixels: DIS optical flow of the character, quantised to 5 levels.

Optical flow between consecutive frames, the background's motion removed, one number a frame
pair, averaged over the clip and quantised to levels 1..5 by thresholds fitted once to the data
(data/motion_levels.json). Works on any RGB video: nothing here reads the renderer's parameters.

The paper filters the background with a threshold of 0.2 and averages the remaining magnitudes.
We take each pair's 99th percentile of the magnitude instead, with DIS's medium preset: the mean
over pixels faster than 0.2 px a frame depended on which calm pixels crossed 0.2 through DIS's
sub-pixel noise on the texture behind a limb, so the same sprite track read 0.19 on one
background and 0.07 on another. On one fixed protocol (experiments/level_measures.py: the same
motion on two backgrounds, 192 shots) the same level came out in 0.755 of shots with the paper's
statistic and DIS fast, 0.901 with this one (docs/layers.md, "The level measure").

Two choices the paper leaves open, made explicit here:
- The camera may pan or follow the character. We subtract, row by row, the median flow of the
  row (the background's motion at that depth: parallax layers of a pan are horizontal bands
  moving at different speeds), so motion is measured relative to the background: a followed
  runner counts as moving and a pan over an empty place counts as still. (A still character
  under a pan moves relative to the background too; pixels cannot tell that from a followed
  walker, which is why the world pans slowly.) One global median is not enough: with
  parallax, every layer but one would count as moving.
- Flow is computed at a fixed analysis height (96 px) so thresholds do not depend on the
  rendering size; magnitudes are in pixels per frame at that height.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

ANALYSIS_HEIGHT = 96
PERCENTILE = 99.0  # of a frame pair's magnitudes: the fastest limb's speed, not its area
LEVELS_PATH = Path(__file__).parent / "data" / "motion_levels.json"
N_LEVELS = 5

# MEDIUM, not FAST: 2.5x slower (about 50 shots a second on 2 cores), but FAST's noise on a
# textured background moved the level of the same motion (see the module's docstring).
DIS_PRESET = cv2.DISOPTICAL_FLOW_PRESET_MEDIUM
MEASURE = "dis-medium-p99"  # written beside the thresholds, so a file of the old measure's is refused
_DIS = None


def _dis() -> cv2.DISOpticalFlow:
    global _DIS
    if _DIS is None:  # one per process: creation is not free and the object is reusable
        _DIS = cv2.DISOpticalFlow_create(DIS_PRESET)
    return _DIS


def _gray(frame: np.ndarray) -> np.ndarray:
    h, w = frame.shape[:2]
    g = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
    if h != ANALYSIS_HEIGHT:
        g = cv2.resize(g, (round(w * ANALYSIS_HEIGHT / h), ANALYSIS_HEIGHT), interpolation=cv2.INTER_AREA)
    return g


def residual_flow(frames: np.ndarray, dis: cv2.DISOpticalFlow | None = None) -> list[np.ndarray]:
    """Per consecutive frame pair of a clip (T, H, W, 3) uint8 RGB: the flow magnitude (h, w) at the analysis
    height, each row's median flow removed (the camera and the background at that depth). ``dis``: another DIS
    than the measure's (to compare presets)."""
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] < 2:
        raise ValueError(f"expected frames of shape (T>=2, H, W, 3), got {frames.shape}")
    dis = dis or _dis()
    grays = [_gray(f) for f in frames]
    out = []
    for a, b in zip(grays[:-1], grays[1:]):
        flow = dis.calc(a, b, None)  # (h, w, 2)
        flow = flow - np.median(flow, axis=1, keepdims=True)  # remove camera / background motion, per row
        out.append(np.sqrt((flow**2).sum(-1)))
    return out


def flow_magnitude(frames: np.ndarray) -> float:
    """Character motion of a clip (T, H, W, 3) uint8 RGB, in px/frame at the analysis height: the mean over frame
    pairs of each pair's 99th percentile of the background-removed flow magnitude."""
    return float(np.mean([np.percentile(mag, PERCENTILE) for mag in residual_flow(frames)]))


@dataclass(frozen=True)
class MotionQuantizer:
    """Maps a flow magnitude to a motion level 1..5 with 4 increasing thresholds."""

    thresholds: tuple[float, float, float, float]

    def __post_init__(self) -> None:
        t = self.thresholds
        if len(t) != N_LEVELS - 1 or any(b <= a for a, b in zip(t[:-1], t[1:])):
            raise ValueError(f"need {N_LEVELS - 1} strictly increasing thresholds, got {t}")

    def level(self, magnitude: float) -> int:
        return 1 + int(np.searchsorted(np.asarray(self.thresholds), magnitude, side="right"))

    @classmethod
    def fit(cls, magnitudes: np.ndarray) -> "MotionQuantizer":
        """Quantile thresholds: each level holds about a fifth of the data."""
        q = np.quantile(np.asarray(magnitudes, dtype=np.float64), [0.2, 0.4, 0.6, 0.8])
        return cls(tuple(float(x) for x in q))

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> "MotionQuantizer":
        path = Path(path or LEVELS_PATH)
        if not path.exists():
            raise FileNotFoundError(f"no motion-level thresholds at {path}: run `animegamer world fit-levels`")
        payload = json.loads(path.read_text())
        if payload.get("measure") != MEASURE:  # thresholds of another statistic would quantise nonsense
            raise ValueError(f"{path} holds thresholds of the measure {payload.get('measure', 'dis-fast-mean')!r}, "
                             f"not of {MEASURE!r}: fit them again with `animegamer world fit-levels --save`")
        return cls(tuple(payload["thresholds"]))

    def save(self, path: str | os.PathLike | None = None, **provenance: object) -> None:
        path = Path(path or LEVELS_PATH)
        payload = {"thresholds": list(self.thresholds), "measure": MEASURE, "analysis_height": ANALYSIS_HEIGHT,
                   "percentile": PERCENTILE, **provenance}
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2)
        os.replace(tmp, path)
