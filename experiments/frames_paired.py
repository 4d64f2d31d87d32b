"""Two frame classifiers on every shot of a world, paired: the characters named (top-k), by who is on screen (one,
a verb of two, two who each do a verb of one), the place and the time (docs/results.md, "Two who do a verb of one
side by side"):

    bin/animegamer world render --sessions 100 --turns 5 --seed 9300 --groups 0.3 --out runs/data/evg9300
    .venv/bin/python experiments/frames_paired.py BEFORE_DIR AFTER_DIR runs/data/evg9300 OUT.json

BEFORE_DIR / AFTER_DIR: an evaluator directory, a `train frames` run or its frame_classifier/.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
from tqdm.auto import tqdm

from animegamer.models.frame_classifier import FrameClassifier
from animegamer.training.fit_frame_classifier import cast_kind
from animegamer.world.dataset import WorldDataset
from animegamer.world.motion_catalog import load_motions



def read_all(before: FrameClassifier, after: FrameClassifier, data: str) -> list[dict]:
    """Per shot: its kind of cast, and for each classifier whether it names the characters, the place, the time."""
    world = WorldDataset(data)
    pair = {v for v, m in load_motions()[0].items() if m.pair}
    rows = []
    for r in tqdm(world.rows, desc="shots"):
        frames = world.frames(r)
        rec = {"kind": cast_kind(r, pair), "motion": r["motion"], "time": r["time"]}
        for name, c in (("before", before), ("after", after)):
            seen = c.read_shot(frames, len(r["characters"]))
            rec[name] = float(seen["characters"] == sorted(r["characters"]))
            rec[name + "_place"] = float(seen["place"] == r["place"])
            rec[name + "_time"] = float(seen["time"] == r["time"])
        rows.append(rec)
    return rows


def summary(rows: list[dict]) -> dict:
    """Characters named before / after and the paired difference with its standard error, by kind of cast."""
    out = {}
    for kind in ("all", "one", "verb of two", "together"):
        rs = [r for r in rows if kind == "all" or r["kind"] == kind]
        if not rs:
            continue
        d = np.array([r["after"] - r["before"] for r in rs])
        out[kind] = {"n": len(rs), "before": float(np.mean([r["before"] for r in rs])),
                     "after": float(np.mean([r["after"] for r in rs])), "paired": float(d.mean()),
                     "se": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0}
    for k in ("place", "time"):
        out[k] = {w: float(np.mean([r[f"{w}_{k}"] for r in rows])) for w in ("before", "after")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("world")
    ap.add_argument("out")
    args = ap.parse_args()
    before, after = (FrameClassifier.from_pretrained(FrameClassifier.find(x)) for x in (args.before, args.after))
    rows = read_all(before, after, args.world)
    result = {"summary": summary(rows), "rows": rows}
    print(json.dumps(result["summary"], indent=1))
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
