"""Shots drawn in layers, graded on held-out turns: the sprite animator against its ceiling and its floor.

    .venv/bin/python experiments/sprite_layers.py --run RUN --data runs/data/w9100 [--n 48] [--out FILE.json] \
        [--sheet FILE.png]

For each of the held-out shots eval-drawn grades, the shipped stage's picture of the turn's place and time with
the turn's characters standing where play stands them (``layered.start_scene``), every frame layered
(``decoder/layers.py``), in five versions:
- ``truth``: the world's shot (a different composition: the grades' reference);
- ``oracle``: each character's TRUE sprite track (the world redrawn alone, ``world/sprite_tracks.py``): the
  ceiling of a layered decoder on this stage (play's camera, following a traveller across the wide place);
- ``still``: the stage's cut-outs standing, held still: what a decoder that draws no motion shows;
- ``drawn_standing``: play's drawing (``layered.draw_turn``) from the stage's cut-outs (a scene that starts);
- ``drawn_first``: play's drawing from each character's true first pose;
- ``went_on_1``, ``went_on_4``: a scene that goes on, as play draws it: from the staged cut-outs the same
  characters first do 1 (or 4) other turns (the next graded shots' other verbs, drawn by the network), then this
  turn from the network's own last frame: what compounds over a game (``bench-long --drift`` plays it 50 turns);
s_a from the layered first frame and the turn's motion text (the shipped E_a), the turn's true level. Graded by
the evaluator (action, character, place, time, sharpness, the level read from the pixels, new content), paired per
shot against ``still``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.checkpoint import load_json, load_safetensors
from animegamer.core.runs import resolve_decoder
from animegamer.decoder.layered import (
    ActorLayer,
    LayeredScene,
    acts_as_pair,
    draw_turn,
    follow,
    place_width,
    scene_frame,
    start_scene,
)
from animegamer.decoder.layers import cutout_canvas, layered_shot
from animegamer.decoder.pipeline import STAGE_DIR, frames_from_uint8
from animegamer.decoder.sprite_animator import SpriteAnimator, SpriteAnimatorConfig, SpriteAnimatorNet
from animegamer.decoder.stage import Stage
from animegamer.evaluation.drawn_shots import GRADED, contact_sheet, grade, graded_rows, mean_se, summarize
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR, Evaluator
from animegamer.training.framenet_data import ActionParts
from animegamer.training.phase_framenet import SHIPPED
from animegamer.world.dataset import WorldDataset
from animegamer.world.flow import MotionQuantizer
from animegamer.world.sprite_tracks import row_tracks, session_lengths

def load_animator(path: str) -> SpriteAnimator:
    """A run's final weights, or a checkpoint's EMA weights (the run's config from its run_config.json)."""
    ckpt = Path(path)
    if not (ckpt / "ema.safetensors").is_file():
        return SpriteAnimator.from_pretrained(path)
    meta = load_json(ckpt.parent.parent / "run_config.json")["model_config"]
    model = SpriteAnimator(SpriteAnimatorNet(SpriteAnimatorConfig.from_dict(
        {"reference": False, "reference_warp": False, **meta["net"]})))
    model.load_state_dict({k: v.float() for k, v in load_safetensors(ckpt / "ema.safetensors").items()})
    return model.eval()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a `train sprites` run, its final/, or one of its checkpoints/step_* "
                   "(graded with its EMA weights)")
    p.add_argument("--data", required=True)
    p.add_argument("--n", type=int, default=48)
    p.add_argument("--out", default=None)
    p.add_argument("--sheet", default=None)
    p.add_argument("--keep", type=int, default=6, help="shots on the contact sheet")
    args = p.parse_args()
    torch.manual_seed(0)
    animator = load_animator(args.run)
    decoder_dir = resolve_decoder(str(SHIPPED))
    stage = Stage.from_pretrained(decoder_dir / STAGE_DIR)
    parts = ActionParts(decoder_dir)
    evaluator = Evaluator.load(DEFAULT_EVALUATOR)
    quant = MotionQuantizer.load()
    world = WorldDataset(args.data)
    lengths = session_lengths(world.rows)
    rows = graded_rows(world, args.n)
    systems = ("truth", "oracle", "still", "drawn_standing", "drawn_first", "went_on_1", "went_on_4")
    per: dict[str, list[dict[str, float]]] = {k: [] for k in systems}
    kept = []
    h, w = stage.size
    for i, row in enumerate(tqdm(rows, desc="shots")):
        others = [r for r in rows[i + 1:] + rows[:i] if r["motion"] != row["motion"]][:4]  # earlier turns' verbs
        true = world.frames(row)
        tracks = row_tracks(row, lengths[(int(row["seed"]), int(row["session"]))], true.shape[0])
        names = [tr.name for tr in tracks]
        view = stage.places[(row["place"], row["time"])]
        ground = view.ground * h
        # as play stages a scene: the stage's cut-outs where start_scene stands them
        staged = start_scene(stage, row["place"], row["time"], names, stage.sprites,
                             pair=acts_as_pair(names, row["motion"]))
        references = {n: cutout_canvas(stage.sprites[n], stage.standing * h) for n in names}
        t = true.shape[0]
        # the true first pose of each character where play would stand it, facing as its track draws it
        first = LayeredScene(row["place"], row["time"], [
            ActorLayer(tr.name, tr.rgba[0], a.x, -1 if tr.role == 2 else 1) for tr, a in zip(tracks, staged.actors)])

        def drawn(scene: LayeredScene, turn: dict = row) -> tuple[np.ndarray, LayeredScene]:
            """play's drawing of ``turn``'s verb: s_a from the frame it starts from"""
            s_a_drawn = parts.encode(frames_from_uint8(scene_frame(stage, scene))[None], [turn["motion_text"]])[0]
            return draw_turn(animator, stage, scene, names, s_a_drawn, int(turn["motion_level"]), references,
                             pair=acts_as_pair(names, turn["motion"]))

        def went_on(hops: int) -> np.ndarray:
            scene = staged
            for other in others[:hops]:
                scene = drawn(scene, other)[1]
            return drawn(scene)[0]

        feet = [np.stack([a.x + tr.offset[:, 0], ground - tr.offset[:, 1]], axis=1)
                for tr, a in zip(tracks, first.actors)]
        width = place_width(stage, row["place"], row["time"])
        camera = follow(feet[0][:, 0], staged.camera, w, width)  # play's camera on the true travel
        shots = {
            "truth": true,
            "oracle": layered_shot(view, [tr.rgba / 255.0 for tr in tracks], feet,
                                   camera if view.wide is not None else None),
            "still": np.repeat(scene_frame(stage, staged)[None], t, 0),
            "drawn_standing": drawn(staged)[0],
            "drawn_first": drawn(first)[0],
            "went_on_1": went_on(1),
            "went_on_4": went_on(4),
        }
        for k, frames in shots.items():
            per[k].append(grade(evaluator, quant, frames, true, row))
        if len(kept) < args.keep:
            kept.append((row, shots))
    out: dict = {"shots": len(rows), "run": args.run, **summarize(per, rows),
                 "per_shot": per}  # each shot's grades, in order: two runs pair shot by shot
    out["paired_vs_still"] = {k: {c: mean_se([x[c] - y[c] for x, y in zip(per[k], per["still"])]) for c in GRADED}
                              for k in systems if k not in ("still", "truth")}
    for k, cols in out["systems"].items():
        print(f"{k:15s} " + "  ".join(f"{c} {v['mean']:.3f}" for c, v in cols.items()))
    for k, cols in out["paired_vs_still"].items():
        print(f"{k} - still: " + "  ".join(f"{c} {v['mean']:+.3f}±{v['se']:.3f}" for c, v in cols.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    if args.sheet:
        contact_sheet(kept, args.sheet)


if __name__ == "__main__":
    main()
