"""The game rules for character states, in one place (documented in docs/RULES.md).

Per turn the action decides three deltas, in the paper's ranges:
    stamina        -1 / 0 / +1   restful actions (+1), tiring actions (-1), the rest (0)
    social          0 / 1        the action involves someone (talking, waving, any pair action)
    entertainment   0 / 1        the action is fun, or is done happily
Absolute states live in 0..100, start at 50 and move by 5 x delta, clamped (as the release demo).
Low stamina makes the character sluggish: the animation plays slower (less pixel motion).
"""
from __future__ import annotations

from dataclasses import dataclass

from animegamer.world.motion_catalog import AdverbSpec, MotionSpec

STATE_NAMES = ("stamina", "social", "entertainment")
START_VALUE = 50
STEP = 5
LOW, HIGH = 0, 100
TIRING_THRESHOLD = 0.6  # effort x adverb speed at or above this costs stamina
FUN_ADVERBS = frozenset({"happily"})  # doing anything happily is entertaining
SLUGGISH_BELOW = 30  # stamina under this slows the animation down
SLUGGISH_MIN_FACTOR = 0.4  # speed factor at stamina 0

DELTA_VALUES = {"stamina": (-1, 0, 1), "social": (0, 1), "entertainment": (0, 1)}


@dataclass(frozen=True)
class Deltas:
    stamina: int
    social: int
    entertainment: int

    def as_dict(self) -> dict[str, int]:
        return {"stamina": self.stamina, "social": self.social, "entertainment": self.entertainment}


def action_deltas(motion: MotionSpec, adverb: AdverbSpec) -> Deltas:
    """The state deltas of one action (see the module docstring for the rules)."""
    if motion.restful:
        stamina = 1
    elif motion.effort * adverb.speed >= TIRING_THRESHOLD:
        stamina = -1
    else:
        stamina = 0
    social = int(motion.social or motion.pair)
    entertainment = int(motion.fun or adverb.word in FUN_ADVERBS)
    return Deltas(stamina, social, entertainment)


def initial_states() -> dict[str, int]:
    return {name: START_VALUE for name in STATE_NAMES}


def apply_deltas(states: dict[str, int], deltas: dict[str, int]) -> dict[str, int]:
    """New absolute states: value + STEP x delta, clamped to 0..100. Validates the deltas."""
    out = {}
    for name in STATE_NAMES:
        d = int(deltas[name])
        if d not in DELTA_VALUES[name]:
            raise ValueError(f"delta for {name} must be one of {DELTA_VALUES[name]}, got {d}")
        out[name] = min(HIGH, max(LOW, int(states[name]) + STEP * d))
    return out


def played_manner(adverb: AdverbSpec, stamina: int) -> tuple[float, float]:
    """(speed, amplitude) a turn in ``adverb``'s manner is animated at, a tired character slower."""
    return adverb.speed * sluggish_factor(stamina), adverb.amplitude


def sluggish_factor(stamina: int) -> float:
    """Animation speed multiplier from stamina: 1 above SLUGGISH_BELOW, down to 0.4 at 0."""
    if stamina >= SLUGGISH_BELOW:
        return 1.0
    return SLUGGISH_MIN_FACTOR + (1.0 - SLUGGISH_MIN_FACTOR) * max(stamina, 0) / SLUGGISH_BELOW
