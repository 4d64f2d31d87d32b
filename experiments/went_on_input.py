"""What a scene that goes on should be drawn from (docs/layers.md, "A scene that goes on"):

    .venv/bin/python experiments/went_on_input.py [--sprites RUN] [--data runs/data/w9100] [--n 48] [--out FILE.json]
        [--sheet FILE.jpg --keep 6]

On eval-drawn's 48 held-out shots, the turn drawn after one other turn of the same characters (another verb, as
eval-drawn's went_on_1), from: the network's drawing of that turn's last frame (play until 2026-11-27,
``went_on_1``); each character's reference cut-out where it stands, frame 0 the frame the player saw
(``ref_seen``); the reference with frame 0 drawn in the verb's pose (``ref_drawn0``); and, as a control, after
one turn of the same verb, from its drawn last frame (``same_verb``). Graded by eval-drawn's grades, paired.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.checkpoint import save_json_atomic
from animegamer.core.runs import resolve_decoder
from animegamer.decoder.layered import (
    LayeredScene,
    acts_as_pair,
    draw_turn,
    place_width,
    scene_frame,
    start_scene,
)
from animegamer.decoder.layers import cutout_canvas
from animegamer.decoder.pipeline import SPRITES_DIR, STAGE_DIR, frames_from_uint8
from animegamer.decoder.stage import Stage
from animegamer.evaluation.drawn_shots import GRADED, contact_sheet, grade, graded_rows, load_animator, mean_se
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR, Evaluator
from animegamer.training.action_parts import ActionParts
from animegamer.world.dataset import WorldDataset
from animegamer.world.flow import MotionQuantizer

SYSTEMS = ("drawn_standing", "went_on_1", "went_on_1_c", "ref_seen", "ref_seen_c", "ref_drawn0", "ref_drawn0_c",
           "same_verb", "same_verb_c")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sprites", default=None)
    ap.add_argument("--model", default="animegamer/weights/default")
    ap.add_argument("--data", default="runs/data/w9100")
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--out", default=None)
    ap.add_argument("--sheet", default=None, help="a contact sheet: truth, went_on_1 and ref_drawn0_c of shots "
                                                    "that follow a traveller's turn")
    ap.add_argument("--keep", type=int, default=6)
    args = ap.parse_args()
    kept = []
    torch.manual_seed(0)
    decoder_dir = resolve_decoder(args.model)
    animator = load_animator(args.sprites or str(decoder_dir / SPRITES_DIR))
    stage = Stage.from_pretrained(decoder_dir / STAGE_DIR)
    parts = ActionParts(decoder_dir)
    evaluator = Evaluator.load(DEFAULT_EVALUATOR)
    quant = MotionQuantizer.load()
    world = WorldDataset(args.data)
    rows = graded_rows(world, args.n)
    h = stage.size[0]
    per: dict[str, list[dict[str, float]]] = {k: [] for k in SYSTEMS}
    for i, row in enumerate(tqdm(rows, desc="shots")):
        other = [r for r in rows[i + 1:] + rows[:i] if r["motion"] != row["motion"]][0]
        true = world.frames(row)
        names = list(row["characters"])
        staged = start_scene(stage, row["place"], row["time"], names, stage.sprites,
                             pair=acts_as_pair(names, row["motion"]), verb=row["motion"])
        references = {c: cutout_canvas(stage.sprites[c], stage.standing * h) for c in names}

        def drawn(scene: LayeredScene, turn: dict, starts: bool, first: np.ndarray | None = None):
            """``turn`` drawn from ``scene`` as it stands, its camera too: ``starts``: started afresh (from the
            cut-outs, frame 0 drawn: every scene it is asked of here stands the cut-outs), else going on from the
            sprites each character holds"""
            scene = replace(scene, actors=[replace(a, verb=None if starts else turn["motion"]) for a in scene.actors])
            s_a = parts.encode(frames_from_uint8(scene_frame(stage, scene) if first is None else first)[None],
                               [turn["motion_text"]])[0]
            return draw_turn(animator, stage, scene, names, s_a, int(turn["motion_level"]), references, first,
                             verb=turn["motion"])

        def from_reference(scene: LayeredScene) -> LayeredScene:
            return replace(scene, actors=[replace(a, sprite=references[a.name] if a.facing > 0
                                                  else references[a.name][:, ::-1].copy()) for a in scene.actors])

        def centred(scene: LayeredScene) -> LayeredScene:
            """the camera framing the first character in the middle, as the world's static camera frames a shot"""
            width = place_width(stage, scene.place, scene.time)
            return replace(scene, camera=float(np.clip(scene.actors[0].x - stage.size[1] / 2, 0, width - stage.size[1])))

        after = drawn(staged, other, True)[1]
        after_same = drawn(staged, row, True)[1]
        seen = scene_frame(stage, after)
        shots = {"drawn_standing": drawn(staged, row, True)[0],
                 "went_on_1": drawn(after, row, False)[0],
                 "ref_seen": drawn(from_reference(after), row, False, first=seen)[0],
                 "ref_drawn0": drawn(from_reference(after), row, True)[0],
                 "same_verb": drawn(after_same, row, False)[0],
                 "went_on_1_c": drawn(centred(after), row, False)[0],
                 "ref_seen_c": drawn(from_reference(centred(after)), row, False,
                                     first=scene_frame(stage, centred(after)))[0],
                 "ref_drawn0_c": drawn(from_reference(centred(after)), row, True)[0],
                 "same_verb_c": drawn(centred(after_same), row, False)[0]}
        for k, frames in shots.items():
            per[k].append(grade(evaluator, quant, frames, true, row))
        if len(kept) < args.keep and int(other["motion_level"]) >= 4:
            kept.append(({**row, "instruction": f"after {other['motion']}: {row['instruction']}"},
                         {"truth": true, "went_on_1 (before)": shots["went_on_1"],
                          "ref_drawn0_c (now)": shots["ref_drawn0_c"]}))
    out = {"shots": len(rows),
           "systems": {k: {c: mean_se([g[c] for g in per[k]]) for c in GRADED} for k in SYSTEMS},
           "paired_vs_went_on_1": {k: {c: mean_se([x[c] - y[c] for x, y in zip(per[k], per["went_on_1"])])
                                       for c in GRADED} for k in SYSTEMS if k != "went_on_1"},
           "per_shot": per}
    for k in SYSTEMS:
        s = out["systems"][k]
        print(f"{k:15s} action {s['action']['mean']:.3f} level {s['level']['mean']:.3f} "
              f"char {s['character']['mean']:.3f} new {s['new_content']['mean']:.3f}")
    for k, v in out["paired_vs_went_on_1"].items():
        print(f"{k:15s} - went_on_1: action {v['action']['mean']:+.3f} +/- {v['action']['se']:.3f}")
    if args.out:
        save_json_atomic(out, args.out)
    if args.sheet:
        contact_sheet(kept, args.sheet)


if __name__ == "__main__":
    main()
