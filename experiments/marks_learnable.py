"""Can the sprite animator learn to draw a verb's marks moving (a sleeper's zzz)? The shipped animator trained on one
verb's tracks alone, its marks' motion measured on held-out tracks every 100 steps (docs/layers.md, "The marks are
drawn as one still blot").

    .venv/bin/python experiments/marks_learnable.py --verb sleep --on train --steps 400      # learn, then generalise?
    .venv/bin/python experiments/marks_learnable.py --verb sleep --on held-out --steps 400   # one motion per input

``--on train``: the first 60 one-character tracks of the verb in world runs/data/e6000's train split; ``--on
held-out``: the held-out tracks themselves (nothing to average over). Held out: the verb's one-character tracks
among the first 300 train-split rows of runs/data/w9100 (another seed), measured as experiments/mark_motion.py
does (the median over tracks of the marks' frame-to-frame change, drawn from standing over the world's from phase 0).
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from animegamer.decoder.sprite_animator import SpriteAnimator
from animegamer.evaluation.drawn_shots import load_animator
from animegamer.training.phase_sprites import SpriteShots, SpriteTensors, collate, sprite_tensors
from mark_motion import change, drawn_from_standing, world_track  # experiments/, beside this script
from sprite_sheet import single_shots

SHIPPED_ANIMATOR = "animegamer/weights/default/shot_decoder/sprite_animator"


def held_out_ratio(model: SpriteAnimator, tracks: SpriteTensors, s_a: torch.Tensor, levels: torch.Tensor) -> float:
    """The median over ``tracks`` of the drawn marks' frame-to-frame change over the world's."""
    ratios = []
    for j in range(len(tracks.role)):
        truth, marks = world_track(tracks, j)
        ratios.append(change(drawn_from_standing(model, tracks, j, s_a, levels), marks) / change(truth, marks))
    return float(np.median(ratios))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verb", default="sleep")
    ap.add_argument("--on", choices=("train", "held-out"), default="train")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=3e-4)
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = load_animator(SHIPPED_ANIMATOR)
    test, test_s_a = single_shots("runs/data/w9100", [args.verb], 12, 300)
    held = sprite_tensors(test.rows, test.frames.shape[1], 2, False, canonical=True)
    if args.on == "train":
        shots, s_a = single_shots("runs/data/e6000", [args.verb], 60, 2000)
        tracks = sprite_tensors(shots.rows, shots.frames.shape[1], 2, False, canonical=True)
        data = SpriteShots(tracks, s_a.float(), shots.levels)
    else:
        data = SpriteShots(held, test_s_a.float(), test.levels)
    print(f"{len(data)} tracks to learn from, {len(held.role)} held out; before: "
          f"{held_out_ratio(model.eval(), held, test_s_a, test.levels):.3f}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0)
    rng = np.random.default_rng(0)
    for step in range(1, args.steps + 1):
        model.train()
        batch = collate([data[int(i)] for i in rng.choice(len(data), min(8, len(data)), replace=False)])
        loss, _ = model(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step}: held-out marks' motion {held_out_ratio(model.eval(), held, test_s_a, test.levels):.3f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
