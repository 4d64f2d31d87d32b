"""Two of the cast asked to do one verb of one together: does the evaluator's classifier name each, in the game's
shot and in the world's own (docs/layers.md, "A group faces one way"):

    .venv/bin/python experiments/pair_names.py [--verbs sleep lie_down sit] [--swap] [--out F]

For each verb, ten pairs (each of the cast with the one three places after it, in a place of four by turn, by day),
each played as a new game's first turn (the left-hand one named first) and rendered by the world with the same
seed; per pair the classifier's probability of the left-hand and of the right-hand character (mean over frames).
``--swap`` names the other one first (so it stands on the left). The world renders here only as the truth to
compare with, as `eval-cast` does.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
from animegamer.game.session import DEFAULT_WEIGHTS, Game
from animegamer.models.frame_classifier import FrameClassifier
from animegamer.world.cast import load_cast
from animegamer.world.instructions import Action, structured
from animegamer.world.shot import render_action

PLACES = ("meadow", "forest", "beach", "town")


def probabilities(classifier: FrameClassifier, frames: np.ndarray, names: tuple[str, ...]) -> list[float]:
    p = torch.sigmoid(classifier(classifier.to_input(frames))["characters"]).mean(0)
    return [round(float(p[classifier.characters.index(n)]), 3) for n in names]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verbs", nargs="+", default=["sleep", "lie_down", "sit"])
    ap.add_argument("--swap", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    classifier = FrameClassifier.from_pretrained(FrameClassifier.find(DEFAULT_EVALUATOR))
    report: dict[str, dict[str, list[list[float]]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        game = Game.load(DEFAULT_WEIGHTS, store=Path(scratch) / "saves")
        cast = [c for c in game.cast if c in load_cast() and c in game.decoder.stage.sprites]
        for verb in args.verbs:
            rows: dict[str, list[list[float]]] = {"game": [], "world": []}
            for i, first in enumerate(cast):
                names = (first, cast[(i + 3) % len(cast)])
                names = names[::-1] if args.swap else names
                action = Action(names, verb, "", PLACES[i % len(PLACES)], "day")
                frames = game.new_session(list(names), seed=i).step(structured(action)).frames
                world = render_action(action, seed=i, height=frames.shape[1], width=frames.shape[2],
                                      n_frames=len(frames))
                rows["game"].append(probabilities(classifier, frames, names))
                rows["world"].append(probabilities(classifier, world, names))
            for source, ps in rows.items():
                p = np.asarray(ps)
                print(f"{verb:9s} {source:5s} left {p[:, 0].mean():.2f}  right {p[:, 1].mean():.2f}  "
                      f"both named (> 0.5) {np.mean(p.min(axis=1) > 0.5):.2f}")
            report[verb] = rows
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
