"""Does the level's measure read the animator's drawing as play does when the sprite is read alone? (docs/layers.md,
"The level's own measure as a training signal"):

    .venv/bin/python experiments/measure_on_place.py --world W9100 [--n 200] [--sprites RUN]

W9100: the held-out world of `bin/animegamer eval --seed 9100 --out OUT` (OUT/world). For the single-character shots
among ``--n`` spread over the world, the animator draws frames 0-16 from the character standing (the shot's true
s_a, the world's level; as ``drawn_change.py``), against the true track from phase 0. Both are read by the level's
measure (``world/flow.flow_magnitude``: DIS medium, each row's median removed, the mean over frame pairs of each
pair's 99th percentile) twice: pasted on the shot's place, its feet mid-frame on the ground line, as play shows a
character; and alone on its 80 x 80 canvas over a plain grey ground (a pair's reading the canvas's 138th fastest
pixel, as many as a frame's 1 %). Per verb: the mean of log(true / drawn); above 0 the drawing reads calmer.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import cv2
import numpy as np
import torch

from animegamer.decoder.layers import layered_shot
from animegamer.decoder.stage import Stage
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.world.flow import DIS_PRESET, flow_magnitude

sys.path.insert(0, str(Path(__file__).parent))
from drawn_change import single_shots  # noqa: E402  (sibling scripts: the same drawings, stage and shots)
from level_in_layers import setup  # noqa: E402

FLOOR = 0.05  # px a frame: both readings floored, so a still pair is not 0 / 0
RANK = 96 * 144 // 100  # a pair's reading on the canvas: its 138th fastest pixel, as many as a frame's 1 %


def on_place(stage: Stage, row: dict, frames: np.ndarray) -> float:
    """(T, 80, 80, 4) premultiplied in [0, 1] pasted on the shot's place as play shows a character (its feet
    mid-frame on the ground line) -> the level's measure of it (``world/flow.flow_magnitude``)."""
    view = stage.places[(row["place"], row["time"])]
    feet = np.tile([view.background.shape[1] / 2, view.ground * view.background.shape[0]], (len(frames), 1))
    return flow_magnitude(layered_shot(view, [frames], [feet], None))


def over_grey(frames: np.ndarray) -> np.ndarray:
    """(T, H, W, 4) premultiplied in [0, 1] -> uint8 (T, H, W, 3), the canvas over a mid-grey ground."""
    return np.clip((frames[..., :3] + (1 - frames[..., 3:]) * 0.5) * 255, 0, 255).round().astype(np.uint8)


def on_grey(frames: np.ndarray) -> float:
    """(T, 80, 80, 4) premultiplied in [0, 1] over grey -> the mean over pairs of the 138th fastest pixel."""
    grey = [cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in over_grey(frames)]  # at the canvas's own scale: frame pixels
    dis, out = cv2.DISOpticalFlow_create(DIS_PRESET), []
    for a, b in zip(grey[:-1], grey[1:]):
        flow = dis.calc(a, b, None)
        flow = flow - np.median(flow, axis=1, keepdims=True)
        out.append(np.sort(np.sqrt((flow ** 2).sum(-1)).ravel())[-RANK])
    return float(np.mean(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--sprites", default=None, help="a `train sprites` run (default: the shipped animator)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    stage, animator, parts, _, world, idx = setup(args.world, args.n, Path(DEFAULT_WEIGHTS), args.sprites)
    by_verb: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for row, track, drawn, _ in single_shots(stage, animator, parts, world, idx):
        true = track.rgba.astype(np.float32) / 255
        place = [on_place(stage, row, x) for x in (true, drawn)]
        grey = [on_grey(x) for x in (true, drawn)]
        by_verb[row["motion"]].append(tuple(float(np.log(max(t, FLOOR) / max(d, FLOOR))) for t, d in (place, grey)))
    for verb, recs in sorted(by_verb.items()):
        r = np.array(recs)
        print(f"{verb:10s} {len(r):3d} shots  log(true / drawn): on its place {r[:, 0].mean():+.2f}, "
              f"on grey {r[:, 1].mean():+.2f}")


if __name__ == "__main__":
    main()
