"""What a player sees in a shot: can one name who is on screen, where and when, and is it sharp.

Three measures, each against the true shot of the same turn:

- identity: the evaluator's frame classifier (``models/frame_classifier.py``) reads the shot's
  characters (the k most likely, k = how many the turn has), its place and its time of day; each is
  right or wrong. On true held-out shots it is right about 0.95+ of the time (its ceiling, the
  ground-truth row);
- sharpness: the mean variance of the Laplacian of the grey frames (edge energy; no reference
  needed), reported as the system's mean over the truth's mean on the same turns (1 = as sharp);
- Frechet distance: between the distributions of the frame classifier's features of generated and
  of true frames (FID's formula in a feature space that knows this world).
"""
from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from animegamer.models.frame_classifier import FrameClassifier

FEATURE_FRAMES = 4  # frames per shot whose features enter the Frechet distance (spread over the shot)


def sharpness(frames: np.ndarray) -> float:
    """uint8 (T, H, W, 3) -> mean over frames of the variance of the Laplacian of the grey frame."""
    return float(np.mean([cv2.Laplacian(cv2.cvtColor(np.ascontiguousarray(f), cv2.COLOR_RGB2GRAY), cv2.CV_64F).var()
                          for f in frames]))


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Frechet distance between Gaussians fitted to feature sets a (N, D) and b (M, D):
    |mu_a - mu_b|^2 + Tr(S_a + S_b - 2 (S_a S_b)^1/2)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"the Frechet distance needs at least 2 features on each side, got {len(a)} and {len(b)}")
    mu_a, mu_b = a.mean(0), b.mean(0)
    s_a, s_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    # Tr((S_a S_b)^1/2) = sum of the square roots of the eigenvalues of S_a^1/2 S_b S_a^1/2 (symmetric PSD)
    w, v = np.linalg.eigh(s_a)
    root_a = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    cross = np.linalg.eigvalsh(root_a @ s_b @ root_a)
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(s_a) + np.trace(s_b) - 2 * np.sqrt(np.clip(cross, 0, None)).sum())


def _spread(features: Any, n: int = FEATURE_FRAMES) -> list[list[float]]:
    idx = np.linspace(0, len(features) - 1, min(n, len(features))).round().astype(int)
    return [[round(float(x), 4) for x in features[i]] for i in idx]


def read_picture(classifier: FrameClassifier, gen: np.ndarray, true: np.ndarray, row: dict[str, Any],
                 true_reading: dict[str, Any] | None = None,
                 gen_reading: dict[str, Any] | None = None) -> dict[str, Any]:
    """The picture columns of one turn: is each of characters / place / time read right from the
    generated frames, both shots' sharpness, and a few frames' features of each for the Frechet
    distance. ``true_reading`` / ``gen_reading``: ``read_shot`` of ``true`` / ``gen`` when the caller
    has it already."""
    seen = gen_reading or classifier.read_shot(gen, len(row["characters"]))
    truth = true_reading or classifier.read_shot(true, len(row["characters"]))
    return {"char_id": float(seen["characters"] == sorted(row["characters"])),
            "place_id": float(seen["place"] == row["place"]), "time_id": float(seen["time"] == row["time"]),
            "sharp": sharpness(gen), "sharp_true": sharpness(true),
            "features": _spread(seen["features"]), "true_features": _spread(truth["features"])}


def picture_summary(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Over the turns of one system: identity rates, sharpness vs the truth of the same turns, and
    the Frechet distance of its frames' features to the true frames' (None without the columns)."""
    rows = [r for r in rows if r.get("char_id") is not None]
    if not rows:
        return {"char_id": None, "place_id": None, "time_id": None, "sharpness": None, "fd": None}
    gen = [f for r in rows for f in r["features"]]
    true = [f for r in rows for f in r["true_features"]]
    sharp_true = float(np.mean([r["sharp_true"] for r in rows]))
    return {"char_id": float(np.mean([r["char_id"] for r in rows])),
            "place_id": float(np.mean([r["place_id"] for r in rows])),
            "time_id": float(np.mean([r["time_id"] for r in rows])),
            "sharpness": float(np.mean([r["sharp"] for r in rows])) / sharp_true if sharp_true > 0 else None,
            "fd": frechet_distance(gen, true) if len(gen) > 1 else None}
