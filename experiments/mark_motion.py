"""How much the verb's marks move from frame to frame (zzz, food in the hand, a book, notes), drawn against true.

    .venv/bin/python experiments/mark_motion.py --runs animegamer/weights/default/shot_decoder/sprite_animator \
        --verbs sleep,eat,read,sit --per-verb 6 --out FILE.json

Per held-out single-character track of world seed 9100 (the first of each verb among its train-split rows): the
mean absolute change between consecutive frames (RGBA in [0, 1], frames 1..16), inside the pixels where the
world drew the verb's marks in any frame (``sprite_tracks.verb_marks`` > 32), and over the whole canvas; for the
truth (the shot as the world drew it from phase 0, what an animator drawing from standing is taught) and for each
run's drawing from the character standing. A ratio drawn / true near 1 is marks that move as the world's; near 0
a mark drawn as one still blot (docs/layers.md, "The marks are drawn as one still blot").
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from animegamer.decoder.sprite_animator import SpriteAnimator, to_unit
from animegamer.evaluation.drawn_shots import load_animator
from animegamer.training.phase_sprites import SpriteTensors, sprite_tensors
from sprite_sheet import single_shots  # experiments/, beside this script


def change(frames: torch.Tensor, where: torch.Tensor) -> float:
    """Mean |frame_i - frame_(i-1)| over ``where`` (H, W bool), frames (T, 4, H, W)."""
    step = (frames[1:] - frames[:-1]).abs().mean(dim=1)  # (T-1, H, W)
    return float(step[:, where].mean()) if bool(where.any()) else float("nan")


def world_track(tracks: SpriteTensors, j: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Track ``j`` as the world drew it from phase 0, frames 1..T-1 (T-1, 4, H, W) in [0, 1], and where its marks are
    in any frame (H, W bool)."""
    return to_unit(tracks.canonical["rgba"][j])[1:], (tracks.canonical["marks"][j] > 32).any(dim=0)


def drawn_from_standing(model: SpriteAnimator, tracks: SpriteTensors, j: int, s_a: torch.Tensor,
                        levels: torch.Tensor) -> torch.Tensor:
    """Track ``j`` as ``model`` draws it from the character standing: frames 1..T-1 (T-1, 4, H, W)."""
    shot, ref = tracks.shot[j:j + 1], to_unit(tracks.standing[j:j + 1])
    with torch.no_grad():
        drawn, _ = model.draw(ref, ref, s_a[shot].float(), levels[shot], tracks.role[j:j + 1])
    return drawn[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--data", default="runs/data/w9100")
    ap.add_argument("--verbs", default="sleep,eat,read,sit")
    ap.add_argument("--per-verb", type=int, default=6)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    verbs = args.verbs.split(",")
    models = [load_animator(r) for r in args.runs]
    shots, s_a = single_shots(args.data, verbs, args.per_verb, 300)
    sp = sprite_tensors(shots.rows, shots.frames.shape[1], 2, False, canonical=True)
    out: dict[str, list] = {"tracks": []}
    for j in range(len(sp.role)):
        sh = sp.shot[j:j + 1]
        truth, marks = world_track(sp, j)
        whole = torch.ones_like(marks)
        rec = {"verb": shots.rows[int(sh)]["motion"], "adverb": shots.rows[int(sh)]["adverb"],
               "level": int(shots.levels[sh]), "mark_px": int(marks.sum()),
               "true": [change(truth, marks), change(truth, whole)], "drawn": []}
        for model in models:
            drawn = drawn_from_standing(model, sp, j, s_a, shots.levels)
            rec["drawn"].append([change(drawn, marks), change(drawn, whole)])
        out["tracks"].append(rec)
    summary = {}
    for verb in verbs:
        recs = [r for r in out["tracks"] if r["verb"] == verb and r["mark_px"]]
        if not recs:
            continue
        t = np.array([r["true"] for r in recs])
        summary[verb] = {"tracks": len(recs), "true_marks": float(t[:, 0].mean()), "true_whole": float(t[:, 1].mean())}
        for k, run in enumerate(args.runs):
            d = np.array([r["drawn"][k] for r in recs])
            summary[verb][run] = {"marks_ratio": float(np.median(d[:, 0] / t[:, 0])),
                                  "whole_ratio": float(np.median(d[:, 1] / t[:, 1]))}
    out["summary"] = summary
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
