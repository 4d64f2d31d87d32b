"""The flow the world's own background adds to a shot: the 96-shot protocol's shots rendered again by the world with
their characters left out (docs/layers.md, "World 9200's level is bounded by the stage"):

    .venv/bin/python experiments/world_background.py --world W9200 --shots LEVEL.json [--out FILE.json]

LEVEL.json is `experiments/level_in_layers.py --world W9200 --n 96 --out LEVEL.json`'s output (its shots, in the same
order, with the truth's, the staged oracle's and the stage alone's flow); each shot's session is re-planned and
re-rendered (`world/shot.render_session`, the world's camera and props) with `draw_character` a no-op, and the
quantiser's flow of the empty shot printed beside the stage alone's, per verb group.
"""
from __future__ import annotations

import argparse
import json
from unittest import mock

import numpy as np

import animegamer.world.shot as shot
from animegamer.core.checkpoint import save_json_atomic
from animegamer.world.dataset import WorldDataset
from animegamer.world.flow import flow_magnitude
from animegamer.world.sprite_tracks import session_lengths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", required=True)
    ap.add_argument("--shots", required=True, help="experiments/level_in_layers.py's output on the same world")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    world = WorldDataset(args.world)
    recs = json.load(open(args.shots))["shots"]
    idx = np.linspace(0, len(world.rows) - 1, min(len(recs), len(world.rows))).round().astype(int)
    lengths = session_lengths(world.rows)
    empty: dict[tuple[int, int], dict[int, np.ndarray]] = {}
    out = []
    with mock.patch.object(shot, "draw_character", lambda *a, **k: None):  # the characters left out
        for rec, i in zip(recs, idx):
            row = world.rows[i]
            if rec["verb"] != row["motion"]:
                raise ValueError(f"{args.shots} was not measured on {args.world} (shot {i}: {rec['verb']} vs "
                                 f"{row['motion']})")
            key = (int(row["seed"]), int(row["session"]))
            if key not in empty:
                empty[key] = {s.row["turn"]: s.frames for s in shot.render_session(
                    key[0], key[1], lengths[key], split=world.meta.get("split"))}
            out.append({"verb": row["motion"], "level": int(row["motion_level"]), "truth": rec["truth"]["flow"],
                        "oracle": rec["oracle"]["flow"], "stage": rec["stage"]["flow"],
                        "world_background": flow_magnitude(empty[key][int(row["turn"])])})
    groups = {"all": out, "fly_broom": [o for o in out if o["verb"] == "fly_broom"],
              "stage moves": [o for o in out if o["stage"] > 0.05]}
    summary = {name: {"shots": len(g), **{k: float(np.median([o[k] for o in g]))
                                         for k in ("truth", "oracle", "stage", "world_background")}}
               for name, g in groups.items()}
    for name, s in summary.items():
        print(f"{name:12s} " + " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items()))
    if args.out:
        save_json_atomic({"summary": summary, "shots": out}, args.out)


if __name__ == "__main__":
    main()
