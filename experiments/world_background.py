"""The flow the world's own background adds to a shot: the 96-shot protocol's shots rendered again by the world with
their characters left out (docs/layers.md, "World 9200's level is bounded by the stage"):

    .venv/bin/python experiments/world_background.py --world W9200 --shots LEVEL.json [--out FILE.json]
    .venv/bin/python experiments/world_background.py --world W9200 --shots LEVEL.json --own-props [--props-seed N]
        [--out FILE.json]

LEVEL.json is `experiments/level_in_layers.py --world W9200 --n 96 --out LEVEL.json`'s output (its shots, in the same
order, with the truth's, the staged oracle's and the stage alone's flow); each shot's session is re-planned and
re-rendered (`world/shot.render_session`, the world's camera and props) with `draw_character` a no-op, and the
quantiser's flow of the empty shot printed beside the stage alone's, per verb group.
``--own-props``: instead, the shots whose stage moves (travellers) staged again on play's stage with its wide layers
built from each shot's OWN props (the world's place scene with the turn's props and seed, ``WIDE_VIEWS`` wide,
layered as ``world/stage_art.place_layers`` layers the stage's): the staged truth's level read = the world's, with the
stage's props and with the shot's own, paired.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from unittest import mock

import numpy as np

import animegamer.world.shot as shot
from animegamer.core.checkpoint import save_json_atomic
from animegamer.decoder.layered import tracks_as_played
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.world.dataset import WorldDataset
from animegamer.world.flow import flow_magnitude
from animegamer.world.place_art import PlaceScene, load_places, sample_props
from animegamer.world.sessions import plan_session
from animegamer.world.sprite_tracks import row_tracks, session_lengths
from animegamer.world.stage_art import SUPERSAMPLE, WIDE_VIEWS, scene_layers

sys.path.insert(0, str(Path(__file__).parent))
from level_in_layers import setup  # noqa: E402  (a sibling script: the same stage, world and shots)


STAGE_MOVES = 0.05  # px a frame: a stage alone that flows more travels under the follow camera (a traveller's shot)


def protocol_rows(world: WorldDataset, recs: list[dict], source: str) -> list[tuple[dict, dict]]:
    """(record, world row) of each of level_in_layers.py's shots, in its order (the same spread over the world)."""
    idx = np.linspace(0, len(world.rows) - 1, min(len(recs), len(world.rows))).round().astype(int)
    pairs = [(rec, world.rows[i]) for rec, i in zip(recs, idx)]
    for rec, row in pairs:
        if rec["verb"] != row["motion"]:
            raise ValueError(f"{source} was not measured on this world ({rec['verb']} vs {row['motion']})")
    return pairs


def own_layers(world: WorldDataset, row: dict, lengths: dict, size: tuple[int, int],
               props_seed: int | None = None) -> tuple:
    """The wide layers, lights and foreground of ``row``'s place with the shot's own props (the world's scene), or
    with props drawn as the stage draws its own, with ``props_seed`` (the stage's: 0)."""
    h, w = size
    place = load_places()[row["place"]]
    if props_seed is None:
        seed, index = int(row["seed"]), int(row["session"])
        turn = plan_session(seed, index, lengths[(seed, index)], world.meta.get("split")).turns[int(row["turn"])]
        props, scene_seed = turn.props, seed * 100003 + index
    else:
        props, scene_seed = sample_props(place, np.random.default_rng(props_seed)), props_seed
    scene = PlaceScene(place, row["time"], props, h * SUPERSAMPLE, w * SUPERSAMPLE,
                       world_width_factor=WIDE_VIEWS, seed=scene_seed)
    wide = scene_layers(scene, h)
    return wide.layers, wide.lights, wide.foreground


def own_props(world_dir: str, recs: list[dict], source: str, props_seed: int | None = None) -> dict:
    """The travellers' true tracks staged on play's stage with its props and with each shot's own (or with props
    drawn with ``props_seed``), paired."""
    stage, _, _, quant, world, _ = setup(world_dir, len(recs), Path(DEFAULT_WEIGHTS), None)
    lengths = session_lengths(world.rows)
    out = []
    for rec, row in protocol_rows(world, recs, source):
        if rec["stage"]["flow"] <= STAGE_MOVES:  # the stage holds still: no travel, the props do not move
            continue
        key = (row["place"], row["time"])
        kept = stage.places[key]
        layers, lights, fg = own_layers(world, row, lengths, stage.size, props_seed)
        stage.places[key] = dataclasses.replace(kept, wide_layers=layers, wide_lights=lights, wide_foreground=fg)
        try:
            tracks = row_tracks(row, lengths[(int(row["seed"]), int(row["session"]))], 17)
            staged = tracks_as_played(stage, row["place"], row["time"], [t.rgba for t in tracks],
                                      [t.offset for t in tracks], row["motion"])
            alone = tracks_as_played(stage, row["place"], row["time"], [np.zeros_like(t.rgba) for t in tracks],
                                     [t.offset for t in tracks], row["motion"])
        finally:
            stage.places[key] = kept
        flow = flow_magnitude(staged)
        out.append({"verb": row["motion"], "level": rec["level"], "camera": row["camera"],
                    "truth": rec["truth"]["flow"], "staged": rec["oracle"]["flow"], "stage_alone": rec["stage"]["flow"],
                    "staged_own_props": flow, "own_props_alone": flow_magnitude(alone),
                    "right": rec["oracle"]["level"] == rec["level"],
                    "right_own_props": quant.level(flow) == rec["level"]})
    summary = {}
    for name, g in (("travellers", out), ("fly_broom", [r for r in out if r["verb"] == "fly_broom"])):
        d = np.array([r["right_own_props"] for r in g], float) - np.array([r["right"] for r in g], float)
        summary[name] = {"shots": len(g), "right": float(np.mean([r["right"] for r in g])),
                         "right_own_props": float(np.mean([r["right_own_props"] for r in g])),
                         "paired": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(len(d))),
                         **{f"median_{k}": float(np.median([r[k] for r in g])) for k in (
                             "truth", "staged", "staged_own_props", "stage_alone", "own_props_alone")}}
        print(name, {k: round(v, 3) for k, v in summary[name].items()})
    return {"summary": summary, "shots": out}


def world_backgrounds(world_dir: str, recs: list[dict], source: str) -> dict:
    """Each shot re-rendered by the world with its characters left out: the flow of its background alone."""
    world = WorldDataset(world_dir)
    lengths = session_lengths(world.rows)
    empty: dict[tuple[int, int], dict[int, np.ndarray]] = {}
    out = []
    with mock.patch.object(shot, "draw_character", lambda *a, **k: None):  # the characters left out
        for rec, row in protocol_rows(world, recs, source):
            key = (int(row["seed"]), int(row["session"]))
            if key not in empty:
                empty[key] = {s.row["turn"]: s.frames for s in shot.render_session(
                    key[0], key[1], lengths[key], split=world.meta.get("split"))}
            out.append({"verb": row["motion"], "level": int(row["motion_level"]), "truth": rec["truth"]["flow"],
                        "oracle": rec["oracle"]["flow"], "stage": rec["stage"]["flow"],
                        "world_background": flow_magnitude(empty[key][int(row["turn"])])})
    groups = {"all": out, "fly_broom": [o for o in out if o["verb"] == "fly_broom"],
              "stage moves": [o for o in out if o["stage"] > STAGE_MOVES]}
    summary = {name: {"shots": len(g), **{k: float(np.median([o[k] for o in g]))
                                         for k in ("truth", "oracle", "stage", "world_background")}}
               for name, g in groups.items()}
    for name, s in summary.items():
        print(f"{name:12s} " + " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items()))
    return {"summary": summary, "shots": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", required=True)
    ap.add_argument("--shots", required=True, help="experiments/level_in_layers.py's output on the same world")
    ap.add_argument("--out", default=None)
    ap.add_argument("--own-props", action="store_true", help="stage the travellers' true tracks with their own props")
    ap.add_argument("--props-seed", type=int, default=None, help="with --own-props: props drawn with this seed, as "
                                                                  "the stage draws its own (seed 0), not the shot's")
    args = ap.parse_args()
    recs = json.load(open(args.shots))["shots"]
    result = (own_props(args.world, recs, args.shots, args.props_seed) if args.own_props
              else world_backgrounds(args.world, recs, args.shots))
    if args.out:
        save_json_atomic(result, args.out)


if __name__ == "__main__":
    main()
