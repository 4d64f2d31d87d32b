"""The motion vocabulary (verbs and adverbs) of the world, loaded from data/motions.yaml."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

DATA_DIR = Path(__file__).parent / "data"
TIMES = ("day", "sunset", "night")
_BOOL_FIELDS = ("restful", "social", "fun", "pair")


@dataclass(frozen=True)
class MotionSpec:
    key: str
    phrase: str
    s: str
    ing: str
    synonyms: tuple[str, ...]
    effort: float
    restful: bool
    social: bool
    fun: bool
    travel: float
    pair: bool
    places: tuple[str, ...] | None  # None = anywhere

    def allowed_in(self, place: str) -> bool:
        return self.places is None or place in self.places


@dataclass(frozen=True)
class AdverbSpec:
    word: str  # "" = the plain verb
    speed: float
    amplitude: float


def _motion(key: str, raw: dict) -> MotionSpec:
    need = ("phrase", "s", "ing", "synonyms", "effort", "travel", "places", *_BOOL_FIELDS)
    missing = [f for f in need if f not in raw]
    if missing:
        raise ValueError(f"motions.yaml: motion '{key}' is missing field(s) {missing}")
    for f in _BOOL_FIELDS:
        if not isinstance(raw[f], bool):
            raise ValueError(f"motions.yaml: motion '{key}' field '{f}' must be true/false, got {raw[f]!r}")
    effort = float(raw["effort"])
    if not 0.0 <= effort <= 1.0:
        raise ValueError(f"motions.yaml: motion '{key}' field 'effort' must be in 0..1, got {effort}")
    places = None if raw["places"] == "any" else tuple(raw["places"])
    return MotionSpec(
        key=key, phrase=str(raw["phrase"]), s=str(raw["s"]), ing=str(raw["ing"]),
        synonyms=tuple(raw["synonyms"]), effort=effort, restful=raw["restful"], social=raw["social"],
        fun=raw["fun"], travel=float(raw["travel"]), pair=raw["pair"], places=places,
    )


@lru_cache(maxsize=4)
def load_motions(path: str | None = None) -> tuple[dict[str, MotionSpec], dict[str, AdverbSpec]]:
    """Return (motions by key, adverbs by word) from the packaged YAML or `path`."""
    with open(path or DATA_DIR / "motions.yaml") as f:
        raw = yaml.safe_load(f)
    motions = {k: _motion(k, v) for k, v in raw["motions"].items()}
    adverbs = {}
    for word, v in raw["adverbs"].items():
        word = word or ""
        speed, amp = float(v["speed"]), float(v["amplitude"])
        if speed <= 0 or amp <= 0:
            raise ValueError(f"motions.yaml: adverb '{word}' needs positive speed and amplitude, got {v}")
        adverbs[word] = AdverbSpec(word=word, speed=speed, amplitude=amp)
    return motions, adverbs
