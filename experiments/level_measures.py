"""Ways to read a shot's motion level from its pixels, compared on what a level measure is for (docs/layers.md,
"The level measure"):

    .venv/bin/python experiments/level_measures.py --worlds W9100 W9200 --train runs/data/e6000 \
        --heldout runs/data/evg3000 [--n 1000] --out FILE.json

1. **The same motion reads the same level.** For each of the 96 shots of `level_in_layers.py`'s protocol on each
   ``--worlds`` world (an `eval` run's OUT/world), the world's shot and the same TRUE sprite tracks staged on play's
   stage (another background, another camera): the share whose levels agree, paired against the measure shipped
   until 2026-11-29 (``threshold_fast``).
2. **The level follows from what the instruction says.** ``--n`` turns of ``--train`` fit each measure's
   thresholds (quantiles: a fifth of the turns per level) and the lookup table of `world level-ceiling`
   (verb, adverb, tired stamina, cast size -> most frequent level); scored on ``--n`` turns of ``--heldout``.

Each measure: DIS flow between consecutive frames at 96 px height, each row's median flow removed (the camera and
the parallax layers: `world/flow.residual_flow`), then a statistic of the magnitudes per frame pair, averaged over
the pairs:
``threshold``: the mean over pixels above 0.2 px a frame (0 when none: the paper's filter); ``p99``: the 99th
percentile. ``fast`` / ``medium``: DIS's preset.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from tqdm.auto import tqdm

from animegamer.core.checkpoint import save_json_atomic
from animegamer.decoder.layered import tracks_as_played
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.world.dataset import WorldDataset
from animegamer.world.flow import residual_flow
from animegamer.world.level_ceiling import LevelTable
from animegamer.world.sprite_tracks import row_tracks, session_lengths

sys.path.insert(0, str(Path(__file__).parent))
from level_in_layers import setup  # noqa: E402  (a sibling script: the same stage, world and shots)

PRESETS = {"fast": cv2.DISOPTICAL_FLOW_PRESET_FAST, "medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM}
BASELINE = "threshold_fast"


def threshold_mean(mags: list[np.ndarray]) -> float:
    return float(np.mean([m[m > 0.2].mean() if (m > 0.2).any() else 0.0 for m in mags]))


def p99(mags: list[np.ndarray]) -> float:
    return float(np.mean([np.percentile(m, 99) for m in mags]))


STATISTICS: dict[str, Callable[[list[np.ndarray]], float]] = {"threshold": threshold_mean, "p99": p99}


def measures(frames: np.ndarray) -> dict[str, float]:
    """Every statistic x preset of one clip."""
    out = {}
    for pname, preset in PRESETS.items():
        mags = residual_flow(np.ascontiguousarray(frames), cv2.DISOpticalFlow_create(preset))
        out.update({f"{sname}_{pname}": f(mags) for sname, f in STATISTICS.items()})
    return out


def protocol_pairs(world_dir: str) -> list[dict]:
    """The 96 protocol shots of one world: each measure on the world's shot and on its true tracks as played."""
    stage, _, _, _, world, idx = setup(world_dir, 96, Path(DEFAULT_WEIGHTS), None)
    lengths = session_lengths(world.rows)
    out = []
    for i in tqdm(idx, desc=f"pairs {Path(world_dir).parent.name}"):
        row = world.rows[i]
        true = world.frames(row)
        tracks = row_tracks(row, lengths[(int(row["seed"]), int(row["session"]))], true.shape[0])
        staged = tracks_as_played(stage, row["place"], row["time"], [t.rgba for t in tracks],
                                  [t.offset for t in tracks], row["motion"])
        out.append({"verb": row["motion"], "truth": measures(true), "staged": measures(staged)})
    return out


def turns(data: str, n: int) -> list[dict]:
    world = WorldDataset(data)
    idx = np.linspace(0, len(world.rows) - 1, min(n, len(world.rows))).round().astype(int)
    keep = ("motion", "adverb", "states_before", "characters")
    return [{**{k: world.rows[i][k] for k in keep}, "measures": measures(world.frames(world.rows[i]))}
            for i in tqdm(idx, desc=f"turns {Path(data).name}")]


def paired(a: np.ndarray, base: np.ndarray) -> dict[str, float]:
    d = a - base
    return {"mean": float(a.mean()), "diff": float(d.mean()), "se": float(d.std() / np.sqrt(len(d)))}


def compare(pairs: list[dict], train: list[dict], held: list[dict]) -> dict[str, dict]:
    """Per measure: thresholds fit on ``train``; same level on both renderings; the lookup table's accuracy."""
    names = list(train[0]["measures"])
    rows: dict[str, dict] = {}
    for name in names:
        th = np.quantile([t["measures"][name] for t in train], [0.2, 0.4, 0.6, 0.8])
        level = lambda x: int(1 + np.searchsorted(th, x, side="right"))  # noqa: E731
        same = np.array([level(p["truth"][name]) == level(p["staged"][name]) for p in pairs], float)
        table = LevelTable([{**t, "motion_level": level(t["measures"][name])} for t in train])
        right = np.array([table.predict(t) == level(t["measures"][name]) for t in held], float)
        rows[name] = {"thresholds": th.tolist(), "same_level": same, "table": right}
    return {name: {"thresholds": r["thresholds"],
                   "same_level_truth_and_staged": paired(r["same_level"], rows[BASELINE]["same_level"]),
                   "lookup_table_heldout": paired(r["table"], rows[BASELINE]["table"])}
            for name, r in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worlds", nargs="+", required=True, help="eval worlds (OUT/world) for the staged pairs")
    ap.add_argument("--train", required=True, help="a world dataset: thresholds and the lookup table")
    ap.add_argument("--heldout", required=True, help="a world dataset the table is scored on")
    ap.add_argument("--n", type=int, default=1000, help="turns taken from each of --train and --heldout")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pairs = [p for w in args.worlds for p in protocol_pairs(w)]
    result = compare(pairs, turns(args.train, args.n), turns(args.heldout, args.n))
    for name, r in result.items():
        s, t = r["same_level_truth_and_staged"], r["lookup_table_heldout"]
        print(f"{name:16s} same level {s['mean']:.3f} ({s['diff']:+.3f} +/- {s['se']:.3f})   "
              f"table {t['mean']:.3f} ({t['diff']:+.3f} +/- {t['se']:.3f})")
    if args.out:
        save_json_atomic({"pairs": len(pairs), "train": args.train, "heldout": args.heldout, "n": args.n,
                          "measures": result}, args.out)


if __name__ == "__main__":
    main()
