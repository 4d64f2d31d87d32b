"""Play's level against the level its TRUE tracks show on the stage (docs/layers.md, "Would an engine that predicts
the level as played help?"):

    bin/animegamer eval --sessions 24 --seed 9100 --out EVAL_DIR
    .venv/bin/python experiments/level_as_played.py EVAL_DIR [--out FILE.json]

For each turn of an `eval` run: W the world shot's level (what the engine learns), P the level play shows for the
turn's true sprite tracks (``phase_sprites.played_levels``: what the animator learns), E the engine's, X the one
read from the game's pixels; how often X is each, split by whether the engine's level is the world's.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from animegamer.decoder.pipeline import STAGE_DIR
from animegamer.decoder.stage import Stage
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.training.phase_sprites import played_levels, sprite_tensors
from animegamer.world.dataset import WorldDataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    ev = Path(args.eval_dir)
    rows = WorldDataset(str(ev / "world")).rows
    stage = Stage.from_pretrained(Path(DEFAULT_WEIGHTS) / "shot_decoder" / STAGE_DIR)
    played = played_levels(rows, sprite_tensors(rows, 17, workers=2), stage, workers=2)
    game = {(r["session"], r["turn"]): r for r in map(json.loads, open(ev / "systems" / "animegamer.jsonl"))}
    keys = [(r["session"], r["turn"]) for r in rows]
    w = np.array([int(r["motion_level"]) for r in rows])
    p = played.numpy()
    e = np.array([game[k]["ml_engine"] for k in keys])
    x = np.array([game[k]["ml_pixels"] for k in keys])
    out = {"turns": len(rows), "P != W": float((p != w).mean()), "X = E": float((x == e).mean()),
           "X = W": float((x == w).mean()), "X = P": float((x == p).mean()), "E = W": float((e == w).mean())}
    for name, m in (("engine = world", e == w), ("engine != world", e != w)):
        out[name] = {"turns": int(m.sum()), "X = E": float((x == e)[m].mean()), "X = P": float((x == p)[m].mean())}
    confusion = np.zeros((5, 5), int)
    np.add.at(confusion, (p - 1, x - 1), 1)
    out["played (rows) x pixels (columns)"] = confusion.tolist()
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
