"""Per verb: how well a sprite animator draws the canvas, from the character standing and from the track's first
pose: the mean error on the pixels that change (those that differ from the input), against copying the input,
and the feet's move. On the training world and on a held-out one, it tells underfitting from overfitting.

    .venv/bin/python experiments/sprite_fit.py RUN runs/data/w9100 train 150       # held out (another seed)
    .venv/bin/python experiments/sprite_fit.py RUN runs/data/train400 train 150    # what it trained on

(docs/layers.md, "The body's move as one warp": the shipped animator before it, 0.106 vs 0.101 from standing.)
"""
from __future__ import annotations

import collections
import sys

import numpy as np
import torch

from animegamer.core.runs import resolve_decoder
from animegamer.decoder.sprite_animator import to_unit
from animegamer.evaluation.drawn_shots import load_animator
from animegamer.training.action_parts import SHIPPED, TEXT_TABLE, ActionParts, compute_s_a, shots_from_worlds
from animegamer.training.phase_sprites import sprite_tensors


def main() -> None:
    torch.set_num_threads(2)
    run, data, split, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    model = load_animator(run)
    dec = resolve_decoder(SHIPPED)
    parts = ActionParts(dec, "cpu", dec / TEXT_TABLE)
    shots = shots_from_worlds([data], split, limit, False)
    s_a = compute_s_a(parts, shots, progress=False)
    sp = sprite_tensors(shots.rows, shots.frames.shape[1], 2, False)
    res = collections.defaultdict(lambda: collections.defaultdict(list))
    B = 8
    for start in ("standing", "first"):
        for i in range(0, len(sp.role), B):
            sl = slice(i, i + B)
            rgba = to_unit(sp.rgba[sl])  # (b,T,4,H,W)
            ref = to_unit(sp.standing[sl])
            src = ref if start == "standing" else rgba[:, 0]
            shot = sp.shot[sl]
            drawn, off = model.draw(src, ref, s_a[shot], shots.levels[shot], sp.role[sl])
            tgt = rgba[:, 1:]
            mov = ((tgt - src[:, None]).abs().amax(2, keepdim=True) > 0.05).float()
            for j in range(drawn.shape[0]):
                verb = shots.rows[int(shot[j])]["motion"]
                m = mov[j].sum().clamp(min=1)
                res[verb][start + "_mov"].append(float(((drawn[j] - tgt[j]).abs() * mov[j]).sum() / m / 4))
                res[verb][start + "_copy"].append(float(((src[j][None] - tgt[j]).abs() * mov[j]).sum() / m / 4))
                res[verb][start + "_feet"].append(float((off[j] - sp.offset[sl][j, 1:]).abs().mean()))
    print(f"{'verb':10s} n  | standing: drawn copy feet | first: drawn copy feet")
    tot = collections.defaultdict(list)
    for verb in sorted(res):
        r = res[verb]
        print(f"{verb:10s} {len(r['first_mov']):2d} | " + " ".join(f"{np.mean(r[f'standing_{k}']):.3f}" for k in ("mov", "copy", "feet"))
              + " | " + " ".join(f"{np.mean(r[f'first_{k}']):.3f}" for k in ("mov", "copy", "feet")))
        for k, v in r.items(): tot[k] += v
    print("all        " + " ".join(f"{k}={np.mean(v):.3f}" for k, v in sorted(tot.items())))


if __name__ == '__main__':
    main()
