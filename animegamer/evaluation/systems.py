"""The rows of the evaluation table: which systems are graded, and their per-turn results."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

GROUND_TRUTH = "ground truth (evaluator ceiling)"
SHUFFLED = "shuffled truth (floor)"
MAIN = "AnimeGamer"


@dataclass
class SystemSpec:
    """One row of the table: a model directory (None = the default model) and an engine window."""

    name: str
    model: str | None = None
    window: int | None = None  # engine history window override (None: the model's own)
    kind: str = "model"  # "model" | "window" (the main model, another window) | "ablation"
    note: str = ""


@dataclass
class SystemResult:
    spec: SystemSpec
    rows: list[dict[str, Any]] = field(default_factory=list)
    reused: bool = False


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "system"


def jsonable(x: Any) -> Any:
    """NaN / inf -> None (strict JSON), numpy scalars -> Python."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x) if np.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x
