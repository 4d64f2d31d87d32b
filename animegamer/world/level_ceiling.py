"""How well can the motion level be predicted at all from what the engine is told?

The level is measured from the rendered pixels (DIS flow, quantised at fixed thresholds), so it
also depends on things no instruction states: the camera (static, pan, follow), where the
character stands, how the animation phase falls in 17 frames. Shots near a threshold land on
either side. This module estimates the ceiling with the simplest strong predictor: a lookup
table from everything the engine can know that moves the level (verb, adverb, stamina when it is
below 30 in steps of 5, as tired characters move slower, and the number of characters) to the
most frequent level among the training turns with that key, scored on the held-out turns.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any


def level_key(row: dict[str, Any]) -> tuple:
    """What the engine knows that moves a turn's motion level."""
    return (row["motion"], row["adverb"], min(int(row["states_before"]["stamina"]), 30) // 5, len(row["characters"]))


class LevelTable:
    """The lookup table: the most frequent level per ``level_key`` among the training turns; keys
    never seen in training fall back to the verb + adverb table, then to the overall majority."""

    def __init__(self, train: list[dict[str, Any]]) -> None:
        if not train:
            raise ValueError("LevelTable needs training turns")
        self.full: dict[tuple, Counter] = defaultdict(Counter)
        self.coarse: dict[tuple, Counter] = defaultdict(Counter)
        for r in train:
            self.full[level_key(r)][r["motion_level"]] += 1
            self.coarse[level_key(r)[:2]][r["motion_level"]] += 1
        self.majority = Counter(r["motion_level"] for r in train).most_common(1)[0][0]

    def seen(self, row: dict[str, Any]) -> bool:
        return level_key(row) in self.full

    def predict(self, row: dict[str, Any]) -> int:
        k = level_key(row)
        table = self.full.get(k) or self.coarse.get(k[:2])
        return table.most_common(1)[0][0] if table else self.majority


def level_ceiling(train: list[dict[str, Any]], heldout: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy of the lookup table fit on ``train`` over ``heldout`` (turn rows of a world dataset)."""
    if not train or not heldout:
        raise ValueError("level_ceiling needs training and held-out turns")
    table = LevelTable(train)
    hits = sum(table.predict(r) == r["motion_level"] for r in heldout)
    return {"heldout_turns": len(heldout), "train_turns": len(train), "accuracy": hits / len(heldout),
            "key_seen_in_train": sum(table.seen(r) for r in heldout) / len(heldout),
            "majority_level_accuracy": sum(r["motion_level"] == table.majority for r in heldout) / len(heldout)}
