"""The shipped decoder drawn from held-out shots' TRUE first frames, s_a and level: the sprite animator against
its ceiling and its floor, shot by shot (paired).

    animegamer eval-drawn --data WORLD_DIR [--sprites RUN] [--n 48] [--out FILE.json] [--sheet FILE.png]

For each graded shot, the stage's picture of the turn's place and time with the turn's characters standing where
play stands them (``layered.start_scene``), every frame layered (``decoder/layers.py``), in these versions:
- ``truth``: the world's shot (a different composition: the grades' reference);
- ``oracle``: each character's TRUE sprite track (the world redrawn alone, ``world/sprite_tracks.py``): the
  ceiling of a layered decoder on this stage (play's camera, following a traveller across the wide place);
- ``still``: the stage's cut-outs standing, held still: what a decoder that draws no motion shows;
- ``drawn_standing``: play's drawing (``layered.draw_turn``) from the stage's cut-outs (a scene that starts);
- ``drawn_first``: play's drawing from each character's true first pose (as if it went on with the verb);
- ``went_on_1``, ``went_on_4``: a scene that goes on, as play draws it: from the staged cut-outs the same
  characters first do 1 (or 4) other turns (the next graded shots' other verbs, drawn by the network), then this
  turn, framed anew, where they stand: what compounds over a game (``bench-long --drift`` plays it 50 turns);
- ``went_on_same``: the same characters first do this turn's verb once, then go on with it from the network's own
  last frame (play's path for a verb that goes on);
s_a from the layered first frame and the turn's motion text (the model's E_a), the turn's true level. Graded by
the evaluator, which shares nothing with the model: the action its video classifier names, who / where / when
its frame classifier reads, sharpness (variance of the Laplacian, as a share of the truth's), the motion level
the world's flow quantiser reads from the pixels (= the level asked for), and **new content**: the share of pixels
that the first frame moved along the optical flow cannot explain (``new_content``). Paired per shot against
``still``; ``per_shot`` keeps each shot's grades so that two runs pair shot by shot.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.checkpoint import load_json, load_safetensors, save_json_atomic
from animegamer.core.runs import resolve_decoder
from animegamer.decoder.layered import (
    ActorLayer,
    LayeredScene,
    acts_as_pair,
    draw_turn,
    framed,
    scene_frame,
    start_scene,
    tracks_as_played,
)
from animegamer.decoder.layers import cutout_canvas
from animegamer.decoder.pipeline import SPRITES_DIR, STAGE_DIR, frames_from_uint8
from animegamer.decoder.sprite_animator import SpriteAnimator, SpriteAnimatorConfig, SpriteAnimatorNet
from animegamer.decoder.stage import Stage
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR, Evaluator
from animegamer.evaluation.metrics import motion_level_from_pixels, new_content
from animegamer.evaluation.picture import read_picture
from animegamer.training.action_parts import SHIPPED, ActionParts
from animegamer.world.dataset import WorldDataset
from animegamer.world.flow import MotionQuantizer
from animegamer.world.preview import save_png, shot_strip, stack_strips
from animegamer.world.sprite_tracks import row_tracks, session_lengths

GRADED = ("action", "character", "place", "time", "level", "new_content")
SYSTEMS = ("truth", "oracle", "still", "drawn_standing", "drawn_first", "went_on_1", "went_on_4", "went_on_same")


def grade(evaluator: Evaluator, quant: MotionQuantizer, gen: np.ndarray, true: np.ndarray,
          row: dict[str, Any]) -> dict[str, float]:
    pic = read_picture(evaluator.frames, gen, true, row)
    return {"action": float(evaluator.actions.predict(gen) == row["motion"]),
            "character": pic["char_id"], "place": pic["place_id"], "time": pic["time_id"],
            "sharp": pic["sharp"], "sharp_true": pic["sharp_true"],
            "level": float(motion_level_from_pixels(gen, quant)[0] == row["motion_level"]),
            "new_content": new_content(gen)}


def mean_se(x: list[float]) -> dict[str, float]:
    a = np.asarray(x, np.float64)
    return {"mean": float(a.mean()), "se": float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else 0.0}


def summarize(per: dict[str, list[dict[str, float]]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each system's graded shots (``grade``'s, in ``rows``' order) as means with standard errors, sharpness as
    a share of the truth's, and the action named per verb."""
    systems = {}
    for k, grades in per.items():
        cols = {c: mean_se([g[c] for g in grades]) for c in GRADED}
        cols["sharpness"] = {"mean": float(np.mean([g["sharp"] for g in grades])
                                           / np.mean([g["sharp_true"] for g in grades]))}
        systems[k] = cols
    by_verb: dict[str, dict[str, list[float]]] = {}
    for i, row in enumerate(rows):
        v = by_verb.setdefault(row["motion"], {k: [] for k in per})
        for k in per:
            v[k].append(per[k][i]["action"])
    return {"systems": systems,
            "action_by_verb": {v: {"shots": len(next(iter(h.values()))), **{k: float(np.mean(x)) for k, x in h.items()}}
                               for v, h in sorted(by_verb.items())}}


def contact_sheet(kept: list[tuple[dict[str, Any], dict[str, np.ndarray]]], path: str | Path, frames: int = 5) -> Path:
    """Each shot's systems stacked (truth first), ``frames`` frames each, labelled."""
    strips = []
    for row, shots in kept:
        for name, f in shots.items():
            label = {**row, "instruction": f"[{name}] {row['instruction']}"}
            strips.append(shot_strip(f, label, tuple(np.linspace(0, 1, frames))))
    return save_png(stack_strips(strips), path)


def graded_rows(world: WorldDataset, n: int) -> list[dict[str, Any]]:
    """The n shots eval-drawn grades: evenly spaced over the dataset."""
    idx = np.linspace(0, len(world.rows) - 1, min(n, len(world.rows))).round().astype(int)
    return [world.rows[i] for i in idx]


def load_animator(path: str) -> SpriteAnimator:
    """A run's final weights, or a checkpoint's (its EMA weights where the run keeps them; the run's config from its
    run_config.json)."""
    ckpt = Path(path)
    if not (ckpt / "state.json").is_file():
        return SpriteAnimator.from_pretrained(path)
    meta = load_json(ckpt.parent.parent / "run_config.json")["model_config"]
    model = SpriteAnimator(SpriteAnimatorNet(SpriteAnimatorConfig.from_dict(
        {"reference": False, "reference_warp": False, **meta["net"]})))
    weights = ckpt / "ema.safetensors" if (ckpt / "ema.safetensors").is_file() else ckpt / "model.safetensors"
    model.load_state_dict({k: v.float() for k, v in load_safetensors(weights).items()})
    return model.eval()


def evaluate(animator: SpriteAnimator, decoder_dir: Path, data: str | Path, n: int = 48, keep: int = 0,
             progress: bool = True) -> dict[str, Any]:
    """``SYSTEMS`` on ``n`` held-out shots of the world at ``data``, graded; ``decoder_dir``: the model's shot decoder
    (its stage and E_a). Returns the summary, ``paired_vs_still``, ``per_shot`` and the first ``keep`` shots
    (``_shots``, for ``contact_sheet``)."""
    torch.manual_seed(0)
    stage = Stage.from_pretrained(decoder_dir / STAGE_DIR)
    parts = ActionParts(decoder_dir)
    evaluator = Evaluator.load(DEFAULT_EVALUATOR)
    quant = MotionQuantizer.load()
    world = WorldDataset(data)
    lengths = session_lengths(world.rows)
    rows = graded_rows(world, n)
    per: dict[str, list[dict[str, float]]] = {k: [] for k in SYSTEMS}
    kept = []
    h = stage.size[0]
    for i, row in enumerate(tqdm(rows, desc="shots", disable=not progress, dynamic_ncols=True)):
        others = [r for r in rows[i + 1:] + rows[:i] if r["motion"] != row["motion"]][:4]  # earlier turns' verbs
        true = world.frames(row)
        tracks = row_tracks(row, lengths[(int(row["seed"]), int(row["session"]))], true.shape[0])
        names = [tr.name for tr in tracks]
        # as play stages a scene: the stage's cut-outs where start_scene stands them
        staged = start_scene(stage, row["place"], row["time"], names, stage.sprites,
                             pair=acts_as_pair(names, row["motion"]), verb=row["motion"])
        references = {c: cutout_canvas(stage.sprites[c], stage.standing * h) for c in names}
        t = true.shape[0]
        # the true first pose of each character where play would stand it, facing as its track draws it
        first = LayeredScene(row["place"], row["time"], [  # in this verb's pose: it goes on with it
            ActorLayer(tr.name, tr.rgba[0], a.x, -1 if tr.role == 2 else 1, row["motion"])
            for tr, a in zip(tracks, staged.actors)], staged.camera)

        def drawn(scene: LayeredScene, turn: dict = row) -> tuple[np.ndarray, LayeredScene]:
            """play's drawing of ``turn``'s verb: framed as play frames a new shot, s_a from the frame it starts from"""
            scene = framed(stage, scene, names, turn["motion"])
            s_a_drawn = parts.encode(frames_from_uint8(scene_frame(stage, scene))[None], [turn["motion_text"]])[0]
            return draw_turn(animator, stage, scene, names, s_a_drawn, int(turn["motion_level"]), references,
                             verb=turn["motion"])

        def went_on(before: list[dict]) -> np.ndarray:
            scene = staged
            for other in before:
                scene = drawn(scene, other)[1]
            return drawn(scene)[0]

        shots = {
            "truth": true,
            "oracle": tracks_as_played(stage, row["place"], row["time"], [tr.rgba for tr in tracks],
                                       [tr.offset for tr in tracks], row["motion"]),
            "still": np.repeat(scene_frame(stage, staged)[None], t, 0),
            "drawn_standing": drawn(staged)[0],
            "drawn_first": drawn(first)[0],
            "went_on_1": went_on(others[:1]),
            "went_on_4": went_on(others[:4]),
            "went_on_same": went_on([row]),
        }
        for k, frames in shots.items():
            per[k].append(grade(evaluator, quant, frames, true, row))
        if len(kept) < keep:
            kept.append((row, shots))
    out: dict[str, Any] = {"shots": len(rows), **summarize(per, rows), "per_shot": per}
    out["paired_vs_still"] = {k: {c: mean_se([x[c] - y[c] for x, y in zip(per[k], per["still"])]) for c in GRADED}
                              for k in SYSTEMS if k not in ("still", "truth")}
    out["_shots"] = kept
    return out


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval-drawn", help="the decoder from held-out TRUE first frames, s_a and level, paired",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a world dataset whose shots the model never trained on")
    p.add_argument("--model", default=str(SHIPPED), help="the model whose stage, E_a and sprite animator are used")
    p.add_argument("--sprites", default=None, help="another sprite animator: a `train sprites` run, its final/, or "
                   "one of its checkpoints/step_* (graded with its EMA weights)")
    p.add_argument("--n", type=int, default=48, help="shots (spread over the dataset)")
    p.add_argument("--out", default=None, help="JSON report")
    p.add_argument("--sheet", default=None, help="contact sheet (PNG) of the first --keep shots")
    p.add_argument("--keep", type=int, default=6)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    decoder_dir = resolve_decoder(args.model)
    if args.sprites is None and not (decoder_dir / SPRITES_DIR).is_dir():
        raise SystemExit(f"eval-drawn: {args.model} draws no shots in layers; pass --sprites RUN")
    result = evaluate(load_animator(args.sprites or str(decoder_dir / SPRITES_DIR)), decoder_dir, args.data, args.n,
                      args.keep if args.sheet else 0, not args.no_progress)
    kept = result.pop("_shots")
    result["sprites"] = args.sprites or str(decoder_dir / SPRITES_DIR)
    for k, cols in result["systems"].items():
        print(f"{k:15s} " + "  ".join(f"{c} {v['mean']:.3f}" for c, v in cols.items()))
    for k, cols in result["paired_vs_still"].items():
        print(f"{k} - still: " + "  ".join(f"{c} {v['mean']:+.3f}±{v['se']:.3f}" for c, v in cols.items()))
    if args.out:
        save_json_atomic(result, args.out)
    if args.sheet:
        contact_sheet(kept, args.sheet)
        print(f"[eval-drawn] sheet: {args.sheet}")
    return 0
