"""How well can the motion level be predicted at all from what the engine is told?

The level is measured from the rendered pixels (DIS flow, quantised at fixed thresholds), so it
also depends on things no instruction states: the camera (static, pan, follow), where the
character stands, how the animation phase falls in 17 frames. Shots near a threshold land on
either side. This module estimates the ceiling with the simplest strong predictor: a lookup
table from everything the engine can know that moves the level (verb, adverb, stamina when it is
below 30 in steps of 5, as tired characters move slower, and the number of characters) to the
most frequent level among the training turns with that key, scored on the held-out turns.

That table leaves out two things the engine is also told: who acts (the instruction names the
characters) and where (the instruction or an earlier turn names the place and time). They move the
level too: characters differ in build and gait, places in how much texture the flow can track.
``AdditiveLevelModel`` adds them without needing a turn per combination: it fits the log flow as a
sum of per-feature effects (ridge least squares on one-hot features) and maps the predicted log
flow to the level most frequent among training turns with a similar prediction. It is the better
estimate of what is predictable (docs/results.md#the-engine), so neither is a ceiling, only a
reference a learnt engine should reach.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np


def level_key(row: dict[str, Any]) -> tuple:
    """What the engine knows that moves a turn's motion level. A film clip annotated without states has
    no stamina: its own bucket (-1), not a guess."""
    states = row.get("states_before")
    tired = -1 if states is None else min(int(states["stamina"]), 30) // 5
    return (row["motion"], row["adverb"], tired, len(row["characters"]))


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


def level_features(row: dict[str, Any], scene: bool = True) -> list[str]:
    """One-hot feature names of a turn for ``AdditiveLevelModel``: the lookup table's key (verb x
    adverb, tired stamina, cast size per verb) and, with ``scene``, who acts and where."""
    verb, adverb, tired, cast = level_key(row)  # the table's key, as one-hot effects
    f = [f"verb*adverb={verb}|{adverb}", f"tired={tired}", f"cast*verb={cast}|{verb}"]
    if scene:
        f += [f"character={c}" for c in row["characters"]]
        f += [f"first*verb={row['characters'][0]}|{verb}", f"place={row['place']}",
              f"place*verb={row['place']}|{verb}", f"time={row['time']}"]
    return f


class AdditiveLevelModel:
    """log(flow) ~ sum of one-hot feature effects (ridge), then the predicted log flow -> level by
    the majority training level within each of ``bins`` equal-count bins of the prediction."""

    def __init__(self, train: list[dict[str, Any]], scene: bool = True, ridge: float = 1e-2, bins: int = 200) -> None:
        if not train:
            raise ValueError("AdditiveLevelModel needs training turns")
        self.scene = scene
        self.index: dict[str, int] = {}
        for r in train:
            for name in level_features(r, scene):
                self.index.setdefault(name, len(self.index))
        X = self._design(train)
        y = np.log(np.array([float(r["flow_magnitude"]) for r in train]) + 1e-3)
        self.w = np.linalg.solve(X.T @ X + ridge * np.eye(X.shape[1]), X.T @ y)
        score = X @ self.w
        self.edges = np.quantile(score, np.linspace(0, 1, bins + 1))[1:-1]  # inner bin edges
        levels = np.array([int(r["motion_level"]) for r in train])
        which = np.searchsorted(self.edges, score)
        overall = Counter(levels.tolist()).most_common(1)[0][0]
        self.bin_level = np.array([Counter(levels[which == b].tolist()).most_common(1)[0][0] if (which == b).any()
                                   else overall for b in range(bins)])

    def _design(self, rows: list[dict[str, Any]]) -> np.ndarray:
        X = np.zeros((len(rows), len(self.index) + 1))
        X[:, -1] = 1.0  # intercept
        for i, r in enumerate(rows):
            for name in level_features(r, self.scene):
                j = self.index.get(name)  # a feature never seen in training adds nothing
                if j is not None:
                    X[i, j] = 1.0
        return X

    def predict(self, rows: list[dict[str, Any]]) -> np.ndarray:
        return self.bin_level[np.searchsorted(self.edges, self._design(rows) @ self.w)]


def additive_level_ceiling(train: list[dict[str, Any]], heldout: list[dict[str, Any]]) -> dict[str, Any]:
    """Held-out accuracy of ``AdditiveLevelModel`` with and without who acts and where."""
    if not train or not heldout:
        raise ValueError("additive_level_ceiling needs training and held-out turns")
    truth = np.array([int(r["motion_level"]) for r in heldout])
    out: dict[str, Any] = {"heldout_turns": len(heldout), "train_turns": len(train)}
    for name, scene in (("additive_verb_adverb_stamina_cast", False), ("additive_with_characters_and_place", True)):
        ok = AdditiveLevelModel(train, scene=scene).predict(heldout) == truth
        out[name] = {"accuracy": float(ok.mean()), "standard_error": float(ok.std() / len(ok) ** 0.5)}
    return out
