"""Canvas-level contact sheet of sprite animators: per held-out track, the truth and each run's drawing from the
character standing (a scene that starts), frames 4, 8, 12, 16, with the true first pose at the left.

    .venv/bin/python experiments/sprite_sheet.py --runs runs/sprites_rw_final runs/sprites_body3/final \\
        --verbs lie_down,sleep,sit,eat --per-verb 2 --out docs/layers/body_warp.jpg

Rows: the truth, then one row per run (what the network draws; nothing is a stored picture but the standing
cut-out it starts from). Shots are the first of each verb among the held-out world's train-split rows.

The same turns of two `eval` runs, one above the other (frames 0, 4, 8, 12, 16 of each played turn):

    .venv/bin/python experiments/sprite_sheet.py --play runs/eval_body/systems/animegamer.jsonl \
        runs/eval_z/systems/animegamer.jsonl --turns "takes a seat|rests on the ground|sit like crazy|quickly jump \
        in their|slowly fall" --out docs/layers/body_warp_play.jpg
"""
from __future__ import annotations

import argparse
import json

import cv2
import imageio.v3 as iio
import numpy as np
import torch

from animegamer.core.runs import resolve_decoder
from animegamer.decoder.sprite_animator import to_unit
from animegamer.evaluation.drawn_shots import load_animator
from animegamer.training.action_parts import (
    SHIPPED, TEXT_TABLE, ActionParts, ShotTensors, compute_s_a, shots_from_worlds,
)
from animegamer.training.phase_sprites import sprite_tensors

FRAMES = (4, 8, 12, 16)


def tile(x: torch.Tensor) -> np.ndarray:
    """(4, H, W) premultiplied RGBA in [0, 1] -> uint8 RGB on white."""
    c = x[:3] + (1 - x[3:])
    return (c.permute(1, 2, 0).numpy() * 255).clip(0, 255).astype(np.uint8)


def single_shots(data: str, verbs: list[str], per_verb: int, rows: int) -> tuple[ShotTensors, torch.Tensor]:
    """The first ``per_verb`` one-character shots of each of ``verbs`` among the first ``rows`` train-split rows of
    the world ``data``, in the order of ``verbs``, and their s_a from the shipped E_a."""
    dec = resolve_decoder(SHIPPED)
    shots = shots_from_worlds([data], "train", rows, False)
    picked, count = [], {}
    for i, r in enumerate(shots.rows):
        if r["motion"] in verbs and count.get(r["motion"], 0) < per_verb and len(r["characters"]) == 1:
            count[r["motion"]] = count.get(r["motion"], 0) + 1
            picked.append(i)
    picked.sort(key=lambda i: verbs.index(shots.rows[i]["motion"]))
    shots.rows = [shots.rows[i] for i in picked]
    shots.frames, shots.levels = shots.frames[picked], shots.levels[picked]
    shots.texts = [shots.texts[i] for i in picked]
    return shots, compute_s_a(ActionParts(dec, "cpu", dec / TEXT_TABLE), shots, progress=False)


def play_sheet(jsonls: list[str], turns: str, out: str) -> int:
    """The turns whose instruction holds one of ``turns`` ('|'-separated), each eval run's clip in turn."""
    runs = [[json.loads(line) for line in open(p)] for p in jsonls]
    rows = []
    for same in zip(*runs):
        if any(k in same[0]["instruction"] for k in turns.split("|")):
            for rec in same:
                video = iio.imread(rec["video"])
                rows.append(np.concatenate([video[i] for i in (0, 4, 8, 12, 16)], 1))
    sheet = np.concatenate(rows, 0)
    cv2.imwrite(out, cv2.resize(sheet, None, fx=0.9, fy=0.9, interpolation=cv2.INTER_AREA)[:, :, ::-1],
                [cv2.IMWRITE_JPEG_QUALITY, 80])
    print(f"{len(rows) // len(runs)} turns x {len(runs)} runs -> {out}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+")
    ap.add_argument("--play", nargs="+", help="eval runs' systems/NAME.jsonl: their clips of the same turns")
    ap.add_argument("--turns", default="", help="with --play: instruction fragments, '|'-separated")
    ap.add_argument("--data", default="runs/data/w9100")
    ap.add_argument("--verbs", default="lie_down,sleep,sit,eat")
    ap.add_argument("--per-verb", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.play:
        return play_sheet(args.play, args.turns, args.out)
    if not args.runs:
        ap.error("give --runs (animators) or --play (eval runs)")
    torch.set_num_threads(2)
    verbs = args.verbs.split(",")
    models = [load_animator(r) for r in args.runs]
    shots, s_a = single_shots(args.data, verbs, args.per_verb, 200)
    sp = sprite_tensors(shots.rows, shots.frames.shape[1], 2, False)
    blocks = []
    for j in range(len(sp.role)):
        rgba, ref, sh = to_unit(sp.rgba[j:j + 1]), to_unit(sp.standing[j:j + 1]), sp.shot[j:j + 1]
        rows = [[tile(rgba[0, 0])] + [tile(rgba[0, i]) for i in FRAMES]]
        for model in models:
            drawn, _ = model.draw(ref, ref, s_a[sh].float(), shots.levels[sh], sp.role[j:j + 1])
            rows.append([tile(ref[0])] + [tile(drawn[0, i - 1]) for i in FRAMES])
        block = np.concatenate([np.concatenate(r, 1) for r in rows], 0)
        cv2.putText(block, shots.rows[int(sh)]["motion"], (2, 10), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (200, 0, 0), 1)
        blocks.append(block)
    half = (len(blocks) + 1) // 2
    cols = [np.concatenate(blocks[k:k + half], 0) for k in (0, half) if blocks[k:k + half]]
    if len(cols) == 1:  # one track: one column
        cols.append(np.full((cols[0].shape[0], 0, 3), 255, np.uint8))
    if cols[1].shape[0] < cols[0].shape[0]:
        cols[1] = np.concatenate([cols[1], np.full((cols[0].shape[0] - cols[1].shape[0],) + cols[1].shape[1:], 255,
                                                   np.uint8)], 0)
    sheet = np.concatenate([cols[0], np.full((cols[0].shape[0], 6, 3), 255, np.uint8), cols[1]], 1)
    sheet = cv2.resize(sheet, None, fx=1.125, fy=1.125, interpolation=cv2.INTER_NEAREST)
    cv2.imwrite(args.out, sheet[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 80])
    print(f"{len(blocks)} tracks x (truth + {len(models)} runs) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
